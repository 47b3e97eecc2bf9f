"""The Delta table of a maintained GROUP BY's kept partial aggregates: an append-only
log of changed groups, read as each group's newest row (issue 34)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.storage import state_memory as memory
from mzflow.storage.commits import TABLE_CONFIG, read_log, tick_props
from mzflow.storage.errors import writes
from mzflow.storage.index_shard import KEY
from mzflow.storage.shard import TARGET_FILE_SIZE, Shard
from mzflow.storage.state_memory import GONE, INTERNAL, SEQ, Newest

ROWS = "_mz_rows"  # input rows in a group of a state shard


class StateShard(Shard):
    """Partial aggregates of a maintained GROUP BY, keyed like an index (``_mz_key``).

    The format: each tick *appends* the groups it changed (one commit, at the tick's
    time, with its own idempotency key, before the index commit: a tick retried after
    this commit reads the state as of its previous time and skips the write). Every
    row carries ``_mz_seq``, the version of the commit that wrote it, and
    ``_mz_gone``: a group whose last input row went is a tombstone (a GROUP BY without
    keys keeps its one group, empty, instead). At any version a group is its row with
    the highest ``_mz_seq``, unless that is a tombstone. A rebuild and compaction
    overwrite the table with one row per live group. A MERGE rewrote every file
    holding a changed key (hashed keys: all of them), a cost that grew with the state;
    an append costs what the tick changed. Rows written before this format (MERGEs,
    one row per group, no ``_mz_seq``) read as the oldest."""

    # -- read side ---------------------------------------------------------------

    def rows_with_keys(self, version: int, keys: pa.Array) -> pa.Table:
        """The live groups among ``keys`` at ``version``: from this process's memory
        when it holds the state (at ``version``, or older and caught up by reading the
        commits since), else from the files."""
        state = self.newest(version)
        found = state.lookup(keys) if state is not None else self._read_keys(version, keys)
        return found.drop_columns([c for c in INTERNAL if c in found.column_names])

    def newest(self, version: int) -> Newest | None:
        """The state at ``version`` held in memory, loaded or caught up as needed (None:
        ``version`` is older than the one held, or the state is too large to hold)."""
        identity = self._identity()
        if identity is None:
            return None
        held = memory.cached(self.path, identity)
        if held is not None and held.version == version:
            return held
        if held is not None and held.version > version:
            return None  # another tick's older version: read from storage
        fresh = None
        if held is not None:
            appended = self._appended(held.version, version)
            if appended is not None:
                try:
                    fresh = held.applied(appended, version)
                except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError):
                    fresh = None  # rows that do not fit what is held: read it all again
        if fresh is None:
            sizes = self.add_actions(version).column("size_bytes")
            # Parquet of hashed keys hardly compresses: Arrow is a few times its size.
            if 3 * int(pc.sum(sizes).as_py() or 0) > memory.MEMORY_BYTES:
                return None
            fresh = Newest.of(identity, version, self._read(version))
        memory.keep(self.path, fresh)
        return fresh

    def _identity(self) -> tuple[int, int] | None:
        try:
            first = (self.path / "_delta_log" / f"{0:020d}.json").stat()
        except FileNotFoundError:  # a log cleaned up to a checkpoint: no identity, no cache
            return None
        return first.st_ino, first.st_mtime_ns

    def _read(self, version: int, keys: pa.Array | None = None) -> pa.Table:
        """The rows of every commit (or those of ``keys``) at ``version``, normalized."""
        import pyarrow.dataset as ds

        dataset = self._at(version).to_pyarrow_dataset()
        # delta-rs scans strings as string_view; compare them as plain strings
        where = (None if keys is None
                 else ds.field(KEY).cast(pa.string()).isin(keys.cast(pa.string())))
        rows = dataset.to_table(filter=where)
        memory.STATE_ROWS_LOADED[0] += rows.num_rows
        return memory.normalized(rows)

    def _read_keys(self, version: int, keys: pa.Array) -> pa.Table:
        return memory.live(memory.newest(self._read(version, keys)))

    def _actions(self, version: int) -> list[dict[str, Any]] | None:
        """Commit ``version``'s log entry (None: gone, a log cleaned to a checkpoint)."""
        import json

        try:
            text = (self.path / "_delta_log" / f"{version:020d}.json").read_text()
        except FileNotFoundError:
            return None
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _file(self, add: dict[str, Any]) -> str:
        from urllib.parse import unquote, urlparse

        path = add["path"]
        if "://" in path:
            return unquote(urlparse(path).path)
        return str(self.path / unquote(path))

    def _appended(self, after: int, through: int) -> list[pa.Table] | None:
        """The rows commits ``after+1 … through`` appended, or None when one of them
        did more than append (an overwrite: a rebuild or a compaction) or its entry is
        gone. Commits that change no data (optimize, vacuum) add nothing."""
        import pyarrow.parquet as pq

        files = []
        for version in range(after + 1, through + 1):
            actions = self._actions(version)
            if actions is None:
                return None
            if any(a["remove"].get("dataChange", True) for a in actions if "remove" in a):
                return None
            files += [self._file(a["add"]) for a in actions
                      if "add" in a and a["add"].get("dataChange", True)]
        tables = [pq.read_table(f) for f in files]
        memory.STATE_ROWS_LOADED[0] += sum(t.num_rows for t in tables)
        return tables

    def layout(self, version: int) -> tuple[list[str], list[str]]:
        """The data files of ``version`` as (base, later): the base's rows are each
        key's only row and live (what the newest overwrite wrote, or rows from before
        the log format); the later ones (appends since) may repeat and shadow keys."""
        files = self.files(version)
        later: set[str] = set()
        for v in range(version, 0, -1):
            actions = self._actions(v)
            if actions is None:
                return [], files
            later |= {self._file(a["add"]).rsplit("/", 1)[-1] for a in actions if "add" in a}
            if any(a["remove"].get("dataChange", True) for a in actions if "remove" in a):
                later -= {self._file(a["add"]).rsplit("/", 1)[-1]
                          for a in actions if "add" in a}
                break
        name = [f.rstrip("/").rsplit("/", 1)[-1] for f in files]
        return ([f for f, n in zip(files, name, strict=True) if n not in later],
                [f for f, n in zip(files, name, strict=True) if n in later])

    # -- write side ----------------------------------------------------------------

    def _stamped(self, rows: pa.Table, seq: int, gone: pa.Array) -> pa.Table:
        rows = rows.drop_columns([c for c in INTERNAL if c in rows.column_names])
        return (rows.append_column(SEQ, pa.repeat(pa.scalar(seq, pa.int64()), rows.num_rows))
                .append_column(GONE, gone))

    @writes
    def replace_groups(self, rows: pa.Table, ts: int, app_id: str,
                       extra: dict[str, str] | None = None) -> int:
        """The whole state, rebuilt (after recomputed ticks left it behind). ``extra``:
        more commit metadata, which :meth:`commit_metadata` reads back."""
        from deltalake import write_deltalake

        self.path.parent.mkdir(parents=True, exist_ok=True)
        seq = self.version() + 1 if self.exists() else 0
        stamped = self._stamped(rows, seq, pa.repeat(pa.scalar(False), rows.num_rows))
        write_deltalake(str(self.path), stamped, mode="overwrite", schema_mode="overwrite",
                        configuration=TABLE_CONFIG, target_file_size=TARGET_FILE_SIZE,
                        commit_properties=tick_props(ts, None, (app_id, ts), extra))
        version = self.version()
        identity = self._identity()
        if version == seq and identity is not None:
            memory.keep(self.path, Newest.of(identity, version, stamped))
        return version

    @writes
    def append_groups(self, rows: pa.Table, ts: int, app_id: str, keep_empty: bool,
                      extra: dict[str, str] | None = None) -> int:
        """Append the tick's changed groups (``ROWS`` = 0: gone, a tombstone unless
        ``keep_empty``), stamped with the version this commit gets. One tick of an
        index at a time (its lock), so nothing commits between reading that version
        and committing."""
        from deltalake import DeltaTable, write_deltalake

        if not self.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            schema = self._stamped(rows.schema.empty_table(), 0, pa.array([], pa.bool_())).schema
            DeltaTable.create(str(self.path), schema, mode="error",
                              configuration=TABLE_CONFIG,
                              commit_properties=tick_props(-1, None, None))
        held = self.version()
        gone = (pa.repeat(pa.scalar(False), rows.num_rows) if keep_empty
                else pc.fill_null(pc.equal(rows.column(ROWS), 0), False))
        stamped = self._stamped(rows, held + 1, gone)
        table = pa.schema(self._table().schema().to_arrow())
        # A state written before the log format gains the two columns.
        upgrade = SEQ not in table.names
        if not upgrade:
            stamped = stamped.select(table.names).cast(pa.schema(
                [f.with_type(pa.string()) if f.type == pa.string_view() else f
                 for f in table]))
        write_deltalake(self._table(), stamped, mode="append",
                        schema_mode="merge" if upgrade else None,
                        commit_properties=tick_props(ts, None, (app_id, ts), extra))
        version = self.version()
        identity = self._identity()
        state = memory.cached(self.path, identity) if identity is not None else None
        if version == held + 1 and state is not None and state.version == held:
            memory.keep(self.path, state.applied([stamped], version))
        return version

    # -- maintenance -------------------------------------------------------------------

    def compact(self, keep_from: int, ts: int) -> dict[str, Any]:
        """Collapse the log: overwrite the table with each live group's newest row, then
        checkpoint and vacuum. The overwrite repeats the newest tick commit's metadata
        (its time and what the tick recorded, such as top-k candidates): a tick reads
        the state at the newest commit at or before its time, and with it that
        metadata. The caller compacts only a state that is not ahead of its index (no
        commit of a failed tick to put back: ``KeptState.stale``), under the index's
        lock.

        ``keep_from`` (the index's since) is not what the state's readers need: only
        ticks read the state, one at a time, at the newest commit at or before the
        index's time, which after this is the overwrite. So the files of every version
        before the overwrite go; keeping those of ``keep_from`` on would keep every
        append since the last overwrite. (An index's older versions, which reads at
        older times need, are the index shard's.) ``ts`` is unused."""
        from deltalake import CommitProperties

        (newest,) = read_log(self._table(), 1)
        meta = {k: str(v) for k, v in newest.items() if k.startswith("mzflow.")}
        props = CommitProperties(custom_metadata=meta)
        latest = self.version()
        base, later = self.layout(latest)
        if not later:
            return self._compact(keep_from, props)
        held = self.newest(latest)
        rows = (held if held is not None
                else Newest.of((0, 0), latest, self._read(latest))).every()
        rows = self._stamped(rows, latest + 1, pa.repeat(pa.scalar(False), rows.num_rows))
        self._overwrite(rows, props)
        version = self.version()
        identity = self._identity()
        if identity is not None and version == latest + 1:
            memory.keep(self.path, Newest.of(identity, version, rows))
        merged = {"numFilesRemoved": len(base) + len(later), "numFilesAdded":
                  len(self.files(version))}
        return {"optimize": merged, "removed_files": self._vacuum(version, props)}

    @writes
    def _overwrite(self, rows: pa.Table, props: Any) -> None:
        from deltalake import write_deltalake

        write_deltalake(self._table(), rows, mode="overwrite", commit_properties=props,
                        target_file_size=TARGET_FILE_SIZE)

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
