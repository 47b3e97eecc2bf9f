"""A shard: one Delta table, written with delta-rs, whose commits are times.

Every commit carries its mzflow timestamp in the Delta commit metadata
(``storage/commits.py``). Rows carry a hidden ``_mz_rowid`` so that UPDATE and
DELETE, whose predicates Spark evaluates, can be applied by delta-rs as one merge
commit. The index, state and sink tables build on it (``index_shard.py``,
``state_shard.py``, ``sink_table.py``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow import caches
from mzflow.catalog.model import ROWID
from mzflow.storage import exact_changes, partitions
from mzflow.storage.commits import (
    MAX_ROWID_KEY,
    TABLE_CONFIG,
    TS_KEY,
    commit_props,
    read_log,
    rows_changed,
)
from mzflow.storage.errors import writes
from mzflow.storage.rows import plain_type

TARGET_FILE_SIZE = 16 * 1024 * 1024  # the file_size tuning's default
DIFF = "_mz_diff"  # a change's multiplicity: +n inserted, -n deleted
# A data file no commit names is deleted by compaction once this old: a writer stages
# and commits within one statement (storage/rewrite.py sweeps its staging as old).
ORPHAN_AGE_HOURS = 1


@dataclass
class _History:
    versions: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    max_rowid: int | None = None
    changed: dict[int, int] = field(default_factory=dict)  # version -> rows it changed
    exact: dict[int, str] = field(default_factory=dict)  # version -> its changes' file


# Each shard's versions and times as read from its log so far: the next read reads only
# newer commits. An evicted one is read again from the log.
_HISTORY = caches.lru("storage.shard_history", 4096)

_SHARED = caches.lru("storage.open_shards", 1024)

# File lists of immutable versions: (path, the table's creation, version) → file URIs.
# The creation (first log file's inode and mtime) tells a recreated shard apart.
_FILES = caches.lru("storage.version_files", 4096)


class Shard:
    """The Delta table at ``path``. Cheap to construct; opens the log lazily."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._dt: Any = None  # the open table; a statement opens it once
        self._partitioned: tuple[str, ...] | None = None  # its PARTITION BY columns

    @classmethod
    def shared(cls, path: Path) -> Shard:
        """One open instance per path in this process: opening a table replays its log
        since the last checkpoint, while an open one reads only the commits since it
        was last read. Ticks use it, so that their bookkeeping does not grow with the
        number of writes before them."""
        key = str(path)
        hit = _SHARED.get(key)
        if hit is None or not hit.exists():
            hit = _SHARED[key] = cls(path)
        return hit

    # -- write side ------------------------------------------------------------

    @writes
    def create(self, schema: pa.Schema, ts: int, partition_by: tuple[str, ...] = ()) -> int:
        """``partition_by``: the table's PARTITION BY columns. The Delta table is
        partitioned by a hidden key of each (storage/partitions.py), which the writes
        below add and the whole-table reads drop: the columns stay in the data files."""
        from deltalake import DeltaTable

        full = schema.append(pa.field(ROWID, pa.int64(), nullable=False))
        for column in partition_by:
            full = full.append(pa.field(partitions.key_column(column), pa.string()))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        DeltaTable.create(str(self.path), full, mode="error", configuration=TABLE_CONFIG,
                          partition_by=[partitions.key_column(c) for c in partition_by]
                          or None,
                          commit_properties=commit_props(ts, None))
        return 0

    def partitioned_by(self) -> tuple[str, ...]:
        """The table columns whose keys partition this shard (a shard's partitioning
        never changes: read once)."""
        if self._partitioned is None:
            keys = self._table().metadata().partition_columns
            self._partitioned = tuple(k.removeprefix(partitions.key_column(""))
                                      for k in keys if partitions.is_key(k))
        return self._partitioned

    @writes
    def append(self, data: pa.Table, ts: int, txn: tuple[str, int] | None = None, *,
               file_size: int = TARGET_FILE_SIZE, extra: dict[str, str] | None = None,
               more_txns: Sequence[tuple[str, int]] = ()) -> int:
        """``extra``: more commit metadata, ``more_txns`` more app transactions (a
        landing folder's files: storage/landing.py)."""
        from deltalake import write_deltalake

        top = pc.max(data.column(ROWID)).as_py() if ROWID in data.column_names else None
        # Files of bounded size keep min/max statistics selective: a tick that needs
        # the rows of a few keys reads the few files whose ranges hold them.
        write_deltalake(self._table(), partitions.with_keys(data, self.partitioned_by()),
                        mode="append", target_file_size=file_size,
                        commit_properties=commit_props(ts, txn, top, extra, more_txns))
        return self.version()

    @writes
    def _record_txn(self, ts: int, txn: tuple[str, int]) -> int:
        """Commit no rows, only ``txn`` and the time: delta-rs's MERGE of an empty
        source commits nothing, which would leave a keyed UPDATE or DELETE that matched
        no row unrecorded, and its retry would then apply to rows written since."""
        from deltalake import write_deltalake

        empty = self.arrow_schema().empty_table()
        write_deltalake(self._table(), empty, mode="append",
                        commit_properties=commit_props(ts, txn))
        return self.version()

    @writes
    def delete_rows(self, rowids: pa.Array, ts: int, txn: tuple[str, int] | None = None) -> int:
        if len(rowids) == 0 and txn is not None:
            return self._record_txn(ts, txn)
        source = pa.table({ROWID: rowids})
        (self._table().merge(source, f"t.{ROWID} = s.{ROWID}", source_alias="s",
                             target_alias="t", commit_properties=commit_props(ts, txn))
         .when_matched_delete().execute())
        return self.version()

    @writes
    def update_rows(self, rows: pa.Table, ts: int, txn: tuple[str, int] | None = None) -> int:
        """Replace the rows whose ``_mz_rowid`` appears in ``rows`` by those rows (a
        row whose partition column changed moves to its new partition)."""
        if rows.num_rows == 0 and txn is not None:
            return self._record_txn(ts, txn)
        rows = partitions.with_keys(rows, self.partitioned_by())
        (self._table().merge(rows, f"t.{ROWID} = s.{ROWID}", source_alias="s", target_alias="t",
                             commit_properties=commit_props(ts, txn))
         .when_matched_update_all().execute())
        return self.version()

    @writes
    def add_column(self, name: str, arrow_type: pa.DataType, ts: int) -> int:
        from deltalake import Field

        dt = self._table()
        dt.alter.add_columns(Field(name, _delta_type(arrow_type), nullable=True),
                             commit_properties=commit_props(ts, None))
        return self.version()

    # -- read side -------------------------------------------------------------

    def exists(self) -> bool:
        return (self.path / "_delta_log").is_dir()

    def version(self) -> int:
        return int(self._table().version())

    def applied(self, app_id: str) -> int | None:
        """The last idempotency-key version committed for ``app_id``, if any."""
        return self._table().transaction_version(app_id)

    def _history(self) -> _History:
        key = str(self.path)
        found = _HISTORY.get(key)
        if found is None:
            found = _HISTORY[key] = _History()
        return found

    def history(self) -> list[tuple[int, int]]:
        """``(version, ts)`` pairs, oldest first, read from the commit metadata."""
        dt = self._table()
        latest = int(dt.version())
        cache = self._history()
        if cache.versions and cache.versions[-1] == latest:
            return list(zip(cache.versions, cache.times, strict=True))
        known = cache.versions[-1] if cache.versions else -1
        entries = read_log(dt, latest - known) if known >= 0 else read_log(dt)
        fresh = sorted((int(e["version"]), int(e[TS_KEY])) for e in entries
                       if TS_KEY in e and int(e["version"]) > known)
        for v, t in fresh:
            cache.versions.append(v)
            cache.times.append(t)
        for e in entries:
            if int(e["version"]) > known:
                cache.changed[int(e["version"])] = rows_changed(e)
                if exact_changes.KEY in e:
                    cache.exact[int(e["version"])] = str(e[exact_changes.KEY])
            if MAX_ROWID_KEY in e and int(e["version"]) > known:
                top = int(e[MAX_ROWID_KEY])
                cache.max_rowid = top if cache.max_rowid is None else max(cache.max_rowid, top)
        return list(zip(cache.versions, cache.times, strict=True))

    def max_rowid(self) -> int | None:
        """The largest row id any append to this table wrote (None: none recorded).

        A writer killed between its Delta commit and its catalog commit leaves rows
        whose ids the catalog never recorded as used: writers skip past this."""
        self.history()
        return self._history().max_rowid

    def estimated_change_count(self, after: int, through: int) -> int:
        """About how many rows versions ``after+1 … through`` inserted or deleted, from
        the commits' own metrics: a cost estimate that reads no data (the change feed
        consolidates an update to two rows and a row inserted and deleted to none)."""
        self.history()
        changed = self._history().changed
        return sum(n for v, n in changed.items() if after < v <= through)

    def version_at(self, ts: int) -> int | None:
        """The newest version committed at or before ``ts`` (None: the table is younger)."""
        self.history()
        cache = self._history()
        i = bisect.bisect_right(cache.times, ts)
        return cache.versions[i - 1] if i else None

    def files(self, version: int) -> list[str]:
        """The data files of ``version`` (a version never changes: cached)."""

        try:
            first = (self.path / "_delta_log" / f"{0:020d}.json").stat()
        except FileNotFoundError:  # a log cleaned up to a checkpoint: no identity, no cache
            return list(self._at(version).file_uris())
        key = (str(self.path), first.st_ino, first.st_mtime_ns, version)
        hit = _FILES.get(key)
        if hit is None:
            hit = _FILES[key] = list(self._at(version).file_uris())
        return list(hit)

    def added_in(self, version: int) -> list[str] | None:
        """The data files commit ``version`` added (as :meth:`files` names them), from
        that commit's own log entry: no table state at ``version - 1`` to rebuild. None
        when the entry is gone (a log cleaned up to a checkpoint)."""
        import json
        from urllib.parse import unquote

        entry = self.path / "_delta_log" / f"{version:020d}.json"
        try:
            lines = entry.read_text().splitlines()
        except FileNotFoundError:
            return None
        actions = [json.loads(line) for line in lines if line.strip()]
        added = {unquote(a["add"]["path"]).rsplit("/", 1)[-1] for a in actions if "add" in a}
        return [f for f in self.files(version) if f.rstrip("/").rsplit("/", 1)[-1] in added]

    def _at(self, version: int) -> Any:
        """The table at ``version``: the open one when that is its newest version (it
        only reads commits since it was last read), else opened at that version."""
        from deltalake import DeltaTable

        dt = self._table()
        return dt if int(dt.version()) == version else DeltaTable(str(self.path),
                                                                   version=version)

    def add_actions(self, version: int) -> pa.Table:
        """One row per data file of ``version``: path, num_records, min.<col>, max.<col>."""
        return pa.table(self._at(version).get_add_actions(flatten=True))

    def diffs(self, after: int, through: int) -> pa.Table:
        """The rows that changed in versions ``after+1 … through``, consolidated, with a
        ``_mz_diff`` column: +1 per insertion, -1 per deletion, an update being both.
        Consolidating first means a row inserted and deleted within the range is never
        evaluated (a row that fails to evaluate and is retracted leaves no error)."""
        raw = self.change_feed(after, through)
        # delta-rs hands strings over as string_view, which compute kernels and Spark
        # do not all take.
        raw = raw.cast(pa.schema([
            f.with_type(pa.string()) if f.type == pa.string_view() else f
            for f in raw.schema]))
        kind = raw.column(exact_changes.CHANGE_TYPE)
        sign = pc.if_else(pc.is_in(kind, pa.array(["delete", "update_preimage"])),
                          pa.scalar(-1, pa.int64()), pa.scalar(1, pa.int64()))
        data = raw.drop_columns([exact_changes.CHANGE_TYPE]).append_column(DIFF, sign)
        if data.num_rows == 0:
            return data
        cols = [c for c in data.column_names if c != DIFF]
        if ROWID in cols:
            # Only a row id that changed twice or more can cancel or merge: group those
            # rows by every column, pass the rest as they are. Grouping every row by
            # every column took most of a large catch-up's time (3.7 s of 5 for 2.4 M
            # line item changes). Mostly none does (appends, exact changes): counted
            # first, a tenth of the grouping's time.
            ids = data.column(ROWID)
            if pc.count_distinct(ids).as_py() == len(ids):
                return data.select(cols + [DIFF])
            seen = data.group_by([ROWID], use_threads=False).aggregate([(ROWID, "count")])
            again = seen.filter(pc.greater(seen.column(f"{ROWID}_count"), 1)).column(ROWID)
            if len(again) == 0:
                return data.select(cols + [DIFF])
            mask = pc.is_in(data.column(ROWID), again)
            return pa.concat_tables([data.filter(pc.invert(mask)).select(cols + [DIFF]),
                                     _consolidate(data.filter(mask), cols)])
        return _consolidate(data, cols)

    def arrow_schema(self, version: int | None = None) -> pa.Schema:
        from deltalake import DeltaTable

        dt = DeltaTable(str(self.path), version=version) if version is not None else (
            self._table())
        schema = pa.schema(dt.schema().to_arrow())
        return pa.schema([f for f in schema if not partitions.is_key(f.name)])

    def read(self, version: int) -> pa.Table:
        """The rows at ``version`` (small tables and tests; big reads go through Spark)."""
        from deltalake import DeltaTable

        return partitions.without_keys(pa.table(
            DeltaTable(str(self.path), version=version).to_pyarrow_table()))

    def change_feed(self, after: int, through: int) -> pa.Table:
        """Delta's change feed of versions ``after+1 … through``: the changed rows with
        ``_change_type`` (:meth:`diffs` turns it into consolidated rows with
        ``_mz_diff``). A staged rewrite's version is read from its exact changes
        (``storage/exact_changes.py``), the rest as delta-rs gives them."""
        self.history()
        exact = {v: name for v, name in self._history().exact.items() if after < v <= through}
        parts: list[pa.Table] = []
        start = after + 1
        for version in sorted(exact):
            found = exact_changes.read(self.path, exact[version])
            if found is None:  # gone: the commit's files say it too, with more rows
                continue
            if start < version:
                parts.append(self._load_cdf(start, version - 1))
            parts.append(found)
            start = version + 1
        if start <= through or not parts:
            parts.append(self._load_cdf(start, through))
        if len(parts) == 1:
            return parts[0]
        # Plain types (delta-rs hands strings over as views), and the newest columns: a
        # file written before an ADD COLUMN lacks the column (null, as Delta reads it).
        return pa.concat_tables([p.cast(pa.schema([f.with_type(plain_type(f.type))
                                                   for f in p.schema])) for p in parts],
                                promote_options="permissive")

    def _load_cdf(self, start: int, through: int) -> pa.Table:
        raw = pa.table(self._table().load_cdf(starting_version=start, ending_version=through))
        return partitions.without_keys(raw.drop_columns(
            [c for c in raw.column_names if c.startswith("_commit_")]))

    # -- maintenance -------------------------------------------------------------

    def compact(self, keep_from: int, ts: int) -> dict[str, Any]:
        """Merge small files, checkpoint the log, then delete files that no version
        ``>= keep_from`` can read. Readers at those versions are never broken."""
        return self._compact(keep_from, commit_props(ts, None))

    @writes
    def _compact(self, keep_from: int, props: Any) -> dict[str, Any]:
        stats = self._table().optimize.compact(commit_properties=props)
        return {"optimize": stats, "removed_files": self._vacuum(keep_from, props)}

    def _vacuum(self, keep_from: int, props: Any) -> int:
        """Checkpoint the log, then delete the files no version ``>= keep_from`` reads;
        how many went. Vacuum commits too (VACUUM START/END): with ``props``' metadata,
        so that the newest commit still says what time the shard is complete through."""
        dt = self._table()
        dt.create_checkpoint()
        keep = list(range(keep_from, int(dt.version()) + 1))
        removed = len(dt.vacuum(retention_hours=0, dry_run=False,
                                enforce_retention_duration=False, keep_versions=keep,
                                commit_properties=props))
        return (removed + self._drop_orphans(dt, keep)
                + self._drop_change_files(keep_from, keep[-1]))

    def _drop_orphans(self, dt: Any, keep: list[int]) -> int:
        """Delete the data files no commit ever named, an hour old: a writer killed
        after writing its files and before committing them left them (a staged
        rewrite's, moved into the shard under the lock; an append's). Delta's vacuum
        only deletes files a commit removed; its ``full`` mode lists the rest, but also
        mzflow's own files under ``_`` folders (a rewrite's exact changes, staging):
        those are left to their own clean-up. How many went."""
        from urllib.parse import unquote

        found = dt.vacuum(retention_hours=ORPHAN_AGE_HOURS, dry_run=True,
                          enforce_retention_duration=False, full=True, keep_versions=keep)
        removed = 0
        for name in found:
            if name.startswith(("_", ".")) or "/_" in name or "/." in name:
                continue
            (self.path / unquote(name)).unlink(missing_ok=True)
            removed += 1
        return removed

    def _drop_change_files(self, keep_from: int, latest: int) -> int:
        """Delete the change-feed files (``_change_data/``) that only versions before
        ``keep_from`` reference; how many went. delta-rs's vacuum leaves them all
        (1.6), so a shard that merges would grow by them forever. A file no kept commit
        names is deleted only if it is older than commit ``keep_from``: a newer one may
        belong to a write not committed yet. Without every kept commit's log entry,
        nothing is deleted."""
        import json
        import os
        from urllib.parse import unquote

        folder = self.path / exact_changes.FOLDER
        if not folder.is_dir() or keep_from <= 0:
            return 0
        kept: set[str] = set()
        oldest_kept_ms = None
        for version in range(keep_from, latest + 1):
            entry = self.path / "_delta_log" / f"{version:020d}.json"
            if not entry.exists():
                return 0
            for line in entry.read_text().splitlines():
                action = json.loads(line) if line.strip() else {}
                if "cdc" in action:
                    kept.add(os.path.normpath(unquote(action["cdc"]["path"])))
                if "commitInfo" in action and exact_changes.KEY in action["commitInfo"]:
                    kept.add(os.path.normpath(action["commitInfo"][exact_changes.KEY]))
                if version == keep_from and "commitInfo" in action:
                    oldest_kept_ms = action["commitInfo"].get("timestamp")
            if oldest_kept_ms is None and version == keep_from:
                oldest_kept_ms = entry.stat().st_mtime * 1000
        removed = 0
        for file in folder.rglob("*.parquet"):
            name = os.path.normpath(str(file.relative_to(self.path)))
            if name not in kept and file.stat().st_mtime * 1000 < float(oldest_kept_ms or 0):
                file.unlink()
                removed += 1
        return removed

    def _table(self) -> Any:
        """The table at its newest version. Opening replays the log; an open table only
        reads the commits since (update_incremental), which keeps small writes cheap."""
        from deltalake import DeltaTable

        if self._dt is None:
            self._dt = DeltaTable(str(self.path))
        else:
            self._dt.update_incremental()
        return self._dt


def _consolidate(data: pa.Table, cols: list[str]) -> pa.Table:
    """Sum the diffs of equal rows; drop those that cancel."""
    summed = data.group_by(cols, use_threads=False).aggregate([(DIFF, "sum")])
    summed = summed.rename_columns([DIFF if c == f"{DIFF}_sum" else c
                                    for c in summed.column_names])
    return summed.filter(pc.not_equal(summed.column(DIFF), 0)).select(cols + [DIFF])


def _delta_type(arrow_type: pa.DataType) -> Any:
    from deltalake.schema import PrimitiveType

    if pa.types.is_decimal(arrow_type):
        return PrimitiveType(f"decimal({arrow_type.precision},{arrow_type.scale})")
    mapping = {
        pa.int16(): "short", pa.int32(): "integer", pa.int64(): "long", pa.float32(): "float",
        pa.float64(): "double", pa.string(): "string", pa.bool_(): "boolean",
        pa.date32(): "date", pa.timestamp("us"): "timestamp_ntz",
        pa.timestamp("us", tz="UTC"): "timestamp", pa.binary(): "binary",
    }
    return PrimitiveType(mapping[arrow_type])
