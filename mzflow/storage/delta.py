"""A shard: one Delta table, written with delta-rs, whose commits are times.

Every commit carries its mzflow timestamp in the Delta commit metadata
(``mzflow.ts``), so the version ↔ time map is part of the table and survives
restarts. Rows carry a hidden ``_mz_rowid`` so that UPDATE and DELETE, whose
predicates Spark evaluates, can be applied by delta-rs as one merge commit.

Only this module imports deltalake.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.catalog.model import ROWID
from mzflow.errors import Error
from mzflow.storage import partitions

TARGET_FILE_SIZE = 16 * 1024 * 1024  # the file_size tuning's default
TS_KEY = "mzflow.ts"
MAX_ROWID_KEY = "mzflow.max_rowid"  # the largest row id an append wrote
TABLE_CONFIG = {
    "delta.enableChangeDataFeed": "true",
    # Keep the whole log: compaction (mzflow compact) decides what goes, by `since`.
    "delta.logRetentionDuration": "interval 36500 days",
    "delta.deletedFileRetentionDuration": "interval 36500 days",
}


class StorageError(Error):
    code = "58030"  # io_error


def writes(method: Callable[..., Any]) -> Callable[..., Any]:
    """A failure of delta-rs or of the file system under a write (a full disk, a lost
    commit race) as a StorageError naming the shard: nothing was committed, and the
    caller's transaction rolls back. Found by the soak's disk-full fault (issue 19):
    writers got delta-rs's raw DeltaError."""
    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Error:
            raise
        except Exception as e:
            from deltalake.exceptions import DeltaError

            if not isinstance(e, OSError | DeltaError):
                raise
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StorageError(f"could not write shard {self.path.name}: {first}") from e
    return wrapped


@dataclass
class _History:
    versions: list[int] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    max_rowid: int | None = None
    changed: dict[int, int] = field(default_factory=dict)  # version -> rows it changed


_HISTORY: dict[str, _History] = {}

# Commit entries read from Delta logs in this process: a tick's bookkeeping must read a
# bounded number of them, however many ticks came before (tests count them).
LOG_ENTRIES_READ = [0]


def _log(dt: Any, limit: int | None = None) -> list[dict[str, Any]]:
    """The newest ``limit`` commits' metadata (all when None), newest first, counted
    from ``dt``'s version.

    Read from the log's own entries, not ``dt.history``: delta-rs reads the newest
    entries on disk and numbers them down from ``dt``'s version, so a commit another
    process made since ``dt`` was loaded shifted every label by one. A ``Shard``'s
    history cache then missed a version for good, and a tick or read at that version's
    time read the one before (found by the soak, issue 19)."""
    import json

    latest = int(dt.version())
    oldest = 0 if limit is None else max(0, latest - limit + 1)
    folder = _local_path(dt.table_uri) / "_delta_log"
    entries = []
    for version in range(latest, oldest - 1, -1):
        try:
            text = (folder / f"{version:020d}.json").read_text()
        except FileNotFoundError:  # cleaned up behind a checkpoint: delta-rs has it
            return _history_at(dt, limit)
        info: dict[str, Any] = next((json.loads(line)["commitInfo"] for line in text.splitlines()
                     if '"commitInfo"' in line[:16]), {})
        entries.append({**info, "version": version})
    LOG_ENTRIES_READ[0] += len(entries)
    return entries


def _history_at(dt: Any, limit: int | None) -> list[dict[str, Any]]:
    entries = dt.history(limit=limit) if limit is not None else dt.history()
    LOG_ENTRIES_READ[0] += len(entries)
    return entries


def _local_path(uri: str) -> Path:
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(uri)


_SHARED: dict[str, Shard] = {}

# File lists of immutable versions: (path, the table's creation, version) → file URIs.
# The creation (first log file's inode and mtime) tells a recreated shard apart.
_FILES: dict[tuple[str, int, int, int], list[str]] = {}


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
                          commit_properties=_props(ts, None))
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
               file_size: int = TARGET_FILE_SIZE) -> int:
        from deltalake import write_deltalake

        top = pc.max(data.column(ROWID)).as_py() if ROWID in data.column_names else None
        # Files of bounded size keep min/max statistics selective: a tick that needs
        # the rows of a few keys reads the few files whose ranges hold them.
        write_deltalake(self._table(), partitions.with_keys(data, self.partitioned_by()),
                        mode="append", target_file_size=file_size,
                        commit_properties=_props(ts, txn, top))
        return self.version()

    @writes
    def _record_txn(self, ts: int, txn: tuple[str, int]) -> int:
        """Commit no rows, only ``txn`` and the time: delta-rs's MERGE of an empty
        source commits nothing, which would leave a keyed UPDATE or DELETE that matched
        no row unrecorded, and its retry would then apply to rows written since."""
        from deltalake import write_deltalake

        empty = self.arrow_schema().empty_table()
        write_deltalake(self._table(), empty, mode="append", commit_properties=_props(ts, txn))
        return self.version()

    @writes
    def delete_rows(self, rowids: pa.Array, ts: int, txn: tuple[str, int] | None = None) -> int:
        if len(rowids) == 0 and txn is not None:
            return self._record_txn(ts, txn)
        source = pa.table({ROWID: rowids})
        (self._table().merge(source, f"t.{ROWID} = s.{ROWID}", source_alias="s",
                             target_alias="t", commit_properties=_props(ts, txn))
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
                             commit_properties=_props(ts, txn))
         .when_matched_update_all().execute())
        return self.version()

    @writes
    def add_column(self, name: str, arrow_type: pa.DataType, ts: int) -> int:
        from deltalake import Field

        dt = self._table()
        dt.alter.add_columns(Field(name, _delta_type(arrow_type), nullable=True),
                             commit_properties=_props(ts, None))
        return self.version()

    # -- read side -------------------------------------------------------------

    def exists(self) -> bool:
        return (self.path / "_delta_log").is_dir()

    def version(self) -> int:
        return int(self._table().version())

    def applied(self, app_id: str) -> int | None:
        """The last idempotency-key version committed for ``app_id``, if any."""
        return self._table().transaction_version(app_id)

    def history(self) -> list[tuple[int, int]]:
        """``(version, ts)`` pairs, oldest first, read from the commit metadata."""
        dt = self._table()
        latest = int(dt.version())
        cache = _HISTORY.setdefault(str(self.path), _History())
        if cache.versions and cache.versions[-1] == latest:
            return list(zip(cache.versions, cache.times, strict=True))
        known = cache.versions[-1] if cache.versions else -1
        entries = _log(dt, latest - known) if known >= 0 else _log(dt)
        fresh = sorted((int(e["version"]), int(e[TS_KEY])) for e in entries
                       if TS_KEY in e and int(e["version"]) > known)
        for v, t in fresh:
            cache.versions.append(v)
            cache.times.append(t)
        for e in entries:
            if int(e["version"]) > known:
                cache.changed[int(e["version"])] = _rows_changed(e)
            if MAX_ROWID_KEY in e and int(e["version"]) > known:
                top = int(e[MAX_ROWID_KEY])
                cache.max_rowid = top if cache.max_rowid is None else max(cache.max_rowid, top)
        return list(zip(cache.versions, cache.times, strict=True))

    def max_rowid(self) -> int | None:
        """The largest row id any append to this table wrote (None: none recorded).

        A writer killed between its Delta commit and its catalog commit leaves rows
        whose ids the catalog never recorded as used: writers skip past this."""
        self.history()
        return _HISTORY[str(self.path)].max_rowid

    def changed_rows(self, after: int, through: int) -> int:
        """About how many rows versions ``after+1 … through`` inserted or deleted, from
        the commits' own metrics: a cost estimate that reads no data (the change feed
        consolidates an update to two rows and a row inserted and deleted to none)."""
        self.history()
        changed = _HISTORY[str(self.path)].changed
        return sum(n for v, n in changed.items() if after < v <= through)

    def version_at(self, ts: int) -> int | None:
        """The newest version committed at or before ``ts`` (None: the table is younger)."""
        self.history()
        cache = _HISTORY[str(self.path)]
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
            if len(_FILES) >= 4096:
                _FILES.clear()
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

    def change_rows(self, after: int, through: int) -> pa.Table:
        """The rows that changed in versions ``after+1 … through``, consolidated, with a
        ``_mz_diff`` column: +1 per insertion, -1 per deletion, an update being both.
        Consolidating first means a row inserted and deleted within the range is never
        evaluated (a row that fails to evaluate and is retracted leaves no error)."""
        raw = self.changes(after, through)
        # delta-rs hands strings over as string_view, which compute kernels and Spark
        # do not all take.
        raw = raw.cast(pa.schema([
            f.with_type(pa.string()) if f.type == pa.string_view() else f
            for f in raw.schema]))
        kind = raw.column("_change_type")
        sign = pc.if_else(pc.is_in(kind, pa.array(["delete", "update_preimage"])),
                          pa.scalar(-1, pa.int64()), pa.scalar(1, pa.int64()))
        data = raw.drop_columns([c for c in raw.column_names if c.startswith("_commit_")]
                                + ["_change_type"]).append_column(DIFF, sign)
        if data.num_rows == 0:
            return data
        cols = [c for c in data.column_names if c != DIFF]
        if ROWID in cols:
            # Only a row id that changed twice or more can cancel or merge: group those
            # rows by every column, pass the rest as they are. Grouping every row by
            # every column took most of a large catch-up's time (3.7 s of 5 for 2.4 M
            # line item changes).
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

    def changes(self, after: int, through: int) -> pa.Table:
        """The change feed of versions ``after+1 … through`` with ``_change_type``."""
        dt = self._table()
        return partitions.without_keys(pa.table(
            dt.load_cdf(starting_version=after + 1, ending_version=through)))

    # -- maintenance -------------------------------------------------------------

    def compact(self, keep_from: int, ts: int) -> dict[str, Any]:
        """Merge small files, checkpoint the log, then delete files that no version
        ``>= keep_from`` can read. Readers at those versions are never broken."""
        return self._compact(keep_from, _props(ts, None))

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
        return removed + self._drop_change_files(keep_from, keep[-1])

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

        folder = self.path / "_change_data"
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


_COUNTED_OPS = ("WRITE", "MERGE", "DELETE", "UPDATE")


def _consolidate(data: pa.Table, cols: list[str]) -> pa.Table:
    """Sum the diffs of equal rows; drop those that cancel."""
    summed = data.group_by(cols, use_threads=False).aggregate([(DIFF, "sum")])
    summed = summed.rename_columns([DIFF if c == f"{DIFF}_sum" else c
                                    for c in summed.column_names])
    return summed.filter(pc.not_equal(summed.column(DIFF), 0)).select(cols + [DIFF])


def _rows_changed(entry: dict[str, Any]) -> int:
    """Rows a commit inserted or deleted, an update counting as both (compactions and
    schema changes: none)."""
    if entry.get("operation") not in _COUNTED_OPS:
        return 0
    m = entry.get("operationMetrics") or {}
    one = ("num_added_rows", "num_target_rows_inserted", "num_target_rows_deleted",
           "num_deleted_rows")
    two = ("num_target_rows_updated", "num_updated_rows")
    return (sum(int(m.get(k) or 0) for k in one)
            + 2 * sum(int(m.get(k) or 0) for k in two))


def _props(ts: int, txn: tuple[str, int] | None, max_rowid: int | None = None) -> Any:
    from deltalake import CommitProperties, Transaction

    metadata = {TS_KEY: str(ts)}
    if max_rowid is not None:
        metadata[MAX_ROWID_KEY] = str(max_rowid)
    return CommitProperties(
        custom_metadata=metadata,
        app_transactions=[Transaction(txn[0], txn[1])] if txn else None,
    )


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


DIFF = "_mz_diff"  # a change's multiplicity: +n inserted, -n deleted
KEY = "_mz_key"  # identity of a distinct row: a hash of all its values
COUNT = "_mz_count"  # its multiplicity
UPPER_KEY = "mzflow.upper"
ERROR_KEY = "mzflow.error"
ERROR_CODE_KEY = "mzflow.error_code"  # the error's SQLSTATE (22012 division by zero, …)


class IndexState(NamedTuple):
    """How far an index's contents are complete, and the error its newest tick hit."""

    done_through: int  # the time the contents are complete through; -1: never ticked
    error: str | None = None
    error_code: str | None = None  # the error's SQLSTATE

    @classmethod
    def of(cls, entry: dict[str, Any] | None) -> IndexState:
        if not entry:
            return cls(-1)
        return cls(int(entry[TS_KEY]), entry.get(ERROR_KEY), entry.get(ERROR_CODE_KEY))


class IndexShard(Shard):
    """The contents of a maintained index: one row per distinct row, with its count.

    Each tick is one commit whose metadata records the time the contents are
    complete through (``mzflow.ts``, with ``mzflow.upper`` = ts + 1), or the
    evaluation error that time produced (``mzflow.error``, contents unchanged).
    The commit carries the idempotency key ``(tick-<index id>, ts)``, so a tick
    retried for the same time applies once.
    """

    @writes
    def create_index(self, schema: pa.Schema, ts: int) -> int:
        from deltalake import DeltaTable

        full = schema.append(pa.field(KEY, pa.string(), nullable=False)).append(
            pa.field(COUNT, pa.int64(), nullable=False))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        DeltaTable.create(str(self.path), full, mode="error", configuration=TABLE_CONFIG,
                          commit_properties=_tick_props(ts, None, None))
        return 0

    def state(self) -> IndexState:
        """From the newest commit mzflow wrote (compactions before this version of
        mzflow left vacuum commits without its metadata)."""
        return IndexState.of(self._newest(lambda e: TS_KEY in e, first_page=1))

    def good_through(self) -> int:
        """The time of the newest commit without an error: the contents are exactly
        the definition's result at that time, so the next tick's changes start there."""
        entry = self._newest(lambda e: ERROR_KEY not in e and TS_KEY in e, first_page=4)
        return int(entry[TS_KEY]) if entry else -1

    def _newest(self, wanted: Callable[[dict[str, Any]], bool],
                first_page: int) -> dict[str, Any] | None:
        """The newest commit entry ``wanted`` accepts. Newest first, in growing pages:
        usually the first page answers, so the cost does not grow with the number of
        ticks before it."""
        dt = self._table()
        limit, total = first_page, int(dt.version()) + 1
        while True:
            entries = _log(dt, min(limit, total))
            found = next((e for e in entries if wanted(e)), None)
            if found is not None or len(entries) >= total:
                return found
            limit *= 4

    def compact(self, keep_from: int, ts: int) -> dict[str, Any]:
        # Rewriting files changes no row: the contents stay complete through the same
        # time, with the same error state. ``ts`` (the compaction's own time) is unused.
        state = self.state()
        code = {ERROR_CODE_KEY: state.error_code} if state.error_code else None
        return self._compact(keep_from, _tick_props(state.done_through, state.error, None, code))

    def ticks(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` tick commits' metadata, newest first."""
        return [e for e in _log(self._table(), limit) if TS_KEY in e]

    @writes
    def apply(self, changes: pa.Table, ts: int, app_id: str,
              extra: dict[str, str] | None = None) -> int:
        """Merge ``changes`` — rows with their key and their *new* count — at ``ts``.
        ``extra``: more commit metadata (what the tick did and cost)."""
        dt = self._table()
        (dt.merge(changes, f"t.{KEY} = s.{KEY}", source_alias="s", target_alias="t",
                  commit_properties=_tick_props(ts, None, (app_id, ts), extra))
         .when_matched_delete(predicate=f"s.{COUNT} = 0")
         .when_matched_update_all()
         .when_not_matched_insert_all(predicate=f"s.{COUNT} > 0")
         .execute())
        return self.version()

    @writes
    def mark(self, ts: int, app_id: str, error: str | None, schema: pa.Schema,
             extra: dict[str, str] | None = None) -> int:
        """A commit that changes no rows: the tick found nothing to change, or failed."""
        from deltalake import write_deltalake

        write_deltalake(str(self.path), schema.empty_table(), mode="append",
                        commit_properties=_tick_props(ts, error, (app_id, ts), extra))
        return self.version()


def _tick_props(ts: int, error: str | None, txn: tuple[str, int] | None,
                extra: dict[str, str] | None = None) -> Any:
    from deltalake import CommitProperties, Transaction

    meta = {TS_KEY: str(ts), UPPER_KEY: str(ts + 1), **(extra or {})}
    if error is not None:
        meta[ERROR_KEY] = error
    return CommitProperties(custom_metadata=meta,
                            app_transactions=[Transaction(*txn)] if txn else None)


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
                        commit_properties=_tick_props(ts, None, (app_id, ts), extra))
        return self.version()

    @writes
    def merge_groups(self, rows: pa.Table, ts: int, app_id: str, keep_empty: bool,
                     extra: dict[str, str] | None = None) -> int:
        from deltalake import DeltaTable

        if not self.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            DeltaTable.create(str(self.path), rows.schema, mode="error",
                              configuration=TABLE_CONFIG,
                              commit_properties=_tick_props(-1, None, None))
        merger = self._table().merge(rows, f"t.{KEY} = s.{KEY}", source_alias="s",
                                     target_alias="t",
                                     commit_properties=_tick_props(ts, None, (app_id, ts),
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

        (newest,) = _log(self._table(), 1)
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
        for entry in _log(dt, back + 1):
            if int(entry["version"]) == version:
                return entry
        return {}


class SinkTable:
    """A sink's Delta output. Each interval is one commit carrying the idempotency key
    ``(sink-<id>, interval end)``: the commit is the interval's progress, and an
    interval already committed is never written twice."""

    def __init__(self, path: str, app_id: str):
        self.path, self.app_id = path, app_id

    def done_through(self) -> int | None:
        """The end (ms) of the last interval committed, if any."""
        from deltalake import DeltaTable

        try:
            dt = DeltaTable(self.path)
        except Exception:  # no table yet
            return None
        return dt.transaction_version(self.app_id)

    def append(self, rows: pa.Table, end_ms: int) -> None:
        from deltalake import write_deltalake

        props = _sink_props(self.app_id, end_ms)
        write_deltalake(self.path, rows, mode="append", commit_properties=props)

    def upsert(self, rows: pa.Table, key: list[str], state: str, end_ms: int) -> None:
        """Merge the interval's latest row per key; ``state == 'delete'`` rows remove it."""
        from deltalake import DeltaTable, write_deltalake

        values = rows.drop_columns([state])
        if self.done_through() is None:
            write_deltalake(self.path, values.schema.empty_table(), mode="append")
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in key)
        (DeltaTable(self.path).merge(rows, on, source_alias="s", target_alias="t",
                                     commit_properties=_sink_props(self.app_id, end_ms))
         .when_matched_delete(predicate=f"s.`{state}` = 'delete'")
         .when_matched_update(updates={c: f"s.`{c}`" for c in values.column_names},
                              predicate=f"s.`{state}` = 'upsert'")
         .when_not_matched_insert(updates={c: f"s.`{c}`" for c in values.column_names},
                                  predicate=f"s.`{state}` = 'upsert'")
         .execute())


def _sink_props(app_id: str, end_ms: int) -> Any:
    from deltalake import CommitProperties, Transaction

    return CommitProperties(custom_metadata={"mzflow.sink_end": str(end_ms)},
                            app_transactions=[Transaction(app_id, end_ms)])
