"""The Delta table of a maintained GROUP BY's kept partial aggregates."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from mzflow.storage.commits import TABLE_CONFIG, read_log, tick_props
from mzflow.storage.errors import writes
from mzflow.storage.index_shard import KEY
from mzflow.storage.shard import Shard

ROWS = "_mz_rows"  # input rows in a group of a state shard


class StateShard(Shard):
    """Partial aggregates of a maintained GROUP BY, one row per group, keyed like an
    index (``_mz_key``). Each tick merges the groups it changed, at the tick's time and
    with its own idempotency key, before the index commit: a tick retried after this
    commit reads the state as of its previous time and skips the write."""

    def rows_with_keys(self, version: int, keys: pa.Array) -> pa.Table:
        """The groups among ``keys`` at ``version`` (a filtered scan: few rows)."""
        import pyarrow.dataset as ds
        from deltalake import DeltaTable

        dataset = DeltaTable(str(self.path), version=version).to_pyarrow_dataset()
        # delta-rs scans strings as string_view; compare them as plain strings
        return dataset.to_table(filter=ds.field(KEY).cast(pa.string()).isin(
            keys.cast(pa.string())))

    @writes
    def replace_groups(self, rows: pa.Table, ts: int, app_id: str,
                       extra: dict[str, str] | None = None) -> int:
        """The whole state, rebuilt (after recomputed ticks left it behind). ``extra``:
        more commit metadata, which :meth:`commit_metadata` reads back."""
        from deltalake import write_deltalake

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_deltalake(str(self.path), rows, mode="overwrite", schema_mode="overwrite",
                        configuration=TABLE_CONFIG,
                        commit_properties=tick_props(ts, None, (app_id, ts), extra))
        return self.version()

    @writes
    def merge_groups(self, rows: pa.Table, ts: int, app_id: str, keep_empty: bool,
                     extra: dict[str, str] | None = None) -> int:
        from deltalake import DeltaTable

        if not self.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            DeltaTable.create(str(self.path), rows.schema, mode="error",
                              configuration=TABLE_CONFIG,
                              commit_properties=tick_props(-1, None, None))
        merger = self._table().merge(rows, f"t.{KEY} = s.{KEY}", source_alias="s",
                                     target_alias="t",
                                     commit_properties=tick_props(ts, None, (app_id, ts),
                                                                   extra))
        if not keep_empty:
            merger = merger.when_matched_delete(predicate=f"s.{ROWS} = 0")
        merger = merger.when_matched_update_all()
        merger = merger.when_not_matched_insert_all(
            predicate=None if keep_empty else f"s.{ROWS} <> 0")
        merger.execute()
        return self.version()

    def compact(self, keep_from: int, ts: int) -> dict[str, Any]:
        """Merge the small files the ticks' merges leave, checkpoint, vacuum. The
        optimize commit repeats the newest tick commit's metadata (its time and what
        the tick recorded, such as top-k candidates): a tick reads the state at the
        newest commit at or before its time, and with it that metadata. The caller
        compacts only a state that is not ahead of its index (no commit of a failed
        tick to put back: ``KeptState.stale``). ``ts`` is unused."""
        from deltalake import CommitProperties

        (newest,) = read_log(self._table(), 1)
        meta = {k: str(v) for k, v in newest.items() if k.startswith("mzflow.")}
        return self._compact(keep_from, CommitProperties(custom_metadata=meta))

    def commit_metadata(self, version: int, newest: int = 16) -> dict[str, Any]:
        """The metadata of commit ``version`` (what the tick that wrote it recorded
        beside the groups), or {} when it is not among the ``newest`` commits: reading
        further back would make a tick's bookkeeping grow with the ticks before it."""
        dt = self._table()
        back = int(dt.version()) - version
        if not 0 <= back < newest:
            return {}
        # From the newest table: delta-rs labels the history of a table opened at an
        # older version with the wrong versions.
        for entry in read_log(dt, back + 1):
            if int(entry["version"]) == version:
                return entry
        return {}
