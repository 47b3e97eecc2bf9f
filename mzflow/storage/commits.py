"""Delta commits: what mzflow writes into each commit's metadata, and reading it back
from the log.

Every commit carries its mzflow timestamp (``mzflow.ts``), so the version ↔ time map
is part of the table and survives restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

TS_KEY = "mzflow.ts"
MAX_ROWID_KEY = "mzflow.max_rowid"  # the largest row id an append wrote
# Rows a staged rewrite deletes and inserts (storage/rewrite.py): its commit has no metrics.
ROWS_CHANGED_KEY = "mzflow.rows_changed"
TABLE_CONFIG = {
    "delta.enableChangeDataFeed": "true",
    # Keep the whole log: compaction (mzflow compact) decides what goes, by `since`.
    "delta.logRetentionDuration": "interval 36500 days",
    "delta.deletedFileRetentionDuration": "interval 36500 days",
}
UPPER_KEY = "mzflow.upper"
ERROR_KEY = "mzflow.error"
ERROR_CODE_KEY = "mzflow.error_code"  # the error's SQLSTATE (22012 division by zero, …)

# Commit entries read from Delta logs in this process: a tick's bookkeeping must read a
# bounded number of them, however many ticks came before (tests count them).
LOG_ENTRIES_READ = [0]


def read_log(dt: Any, limit: int | None = None) -> list[dict[str, Any]]:
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


_COUNTED_OPS = ("WRITE", "MERGE", "DELETE", "UPDATE")


def rows_changed(entry: dict[str, Any]) -> int:
    """Rows a commit inserted or deleted, an update counting as both (compactions and
    schema changes: none)."""
    if entry.get("operation") not in _COUNTED_OPS:
        return 0
    if ROWS_CHANGED_KEY in entry:
        return int(entry[ROWS_CHANGED_KEY])
    m = entry.get("operationMetrics") or {}
    one = ("num_added_rows", "num_target_rows_inserted", "num_target_rows_deleted",
           "num_deleted_rows")
    two = ("num_target_rows_updated", "num_updated_rows")
    return (sum(int(m.get(k) or 0) for k in one)
            + 2 * sum(int(m.get(k) or 0) for k in two))


def commit_props(ts: int, txn: tuple[str, int] | None, max_rowid: int | None = None,
                 extra: dict[str, str] | None = None,
                 more_txns: Sequence[tuple[str, int]] = ()) -> Any:
    """``more_txns``: further app transactions the same commit records (a landing
    folder's batch: each file's identity, storage/landing.py)."""
    from deltalake import CommitProperties, Transaction

    metadata = {TS_KEY: str(ts), **(extra or {})}
    if max_rowid is not None:
        metadata[MAX_ROWID_KEY] = str(max_rowid)
    txns = ([txn] if txn else []) + list(more_txns)
    return CommitProperties(
        custom_metadata=metadata,
        app_transactions=[Transaction(app, version) for app, version in txns] or None,
    )


def tick_props(ts: int, error: str | None, txn: tuple[str, int] | None,
               extra: dict[str, str] | None = None) -> Any:
    from deltalake import CommitProperties, Transaction

    meta = {TS_KEY: str(ts), UPPER_KEY: str(ts + 1), **(extra or {})}
    if error is not None:
        meta[ERROR_KEY] = error
    return CommitProperties(custom_metadata=meta,
                            app_transactions=[Transaction(*txn)] if txn else None)


def newest_version(log: Path) -> int:
    """The newest commit's version in the Delta log folder ``log`` (-1: no table
    there), from the entries' names alone: no delta-rs, no reading."""
    try:
        names = [p.name for p in log.iterdir()]
    except FileNotFoundError:
        return -1
    return max((int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json")
                and n[:20].isdigit()), default=-1)


def writes_after(log: Path, version: int) -> tuple[int, int | None]:
    """The commits after ``version`` in the log folder ``log``: the newest version (still
    ``version`` when there is none), and the time of the newest that wrote rows (None:
    none did: a schema change, a compaction). A commit after the first missing entry is
    not yet visible to readers (Delta's own rule), so the walk stops there."""
    import json

    ts = None
    while True:
        try:
            text = (log / f"{version + 1:020d}.json").read_text()
        except FileNotFoundError:
            return version, ts
        version += 1
        info: dict[str, Any] = next((json.loads(line)["commitInfo"] for line
                                     in text.splitlines() if '"commitInfo"' in line[:16]), {})
        if info.get("operation") in _COUNTED_OPS and TS_KEY in info:
            ts = int(info[TS_KEY])
