"""Where each shard of an installation lives in its warehouse: the one place that
builds these paths (tables, indexes, the state an index keeps)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def table(warehouse: Path, item_id: str) -> Path:
    return warehouse / item_id


def index(warehouse: Path, index_id: str) -> Path:
    return warehouse / index_id


def state(warehouse: Path, index_id: str) -> Path:
    """The partials a state-mode index keeps (beside the index, dropped with it)."""
    return warehouse / f"{index_id}.state"


def arrangements(warehouse: Path, cluster_id: int) -> Path:
    """Where one cluster's arrangements live (each cluster keeps its own, as in
    Materialize, where an arrangement is in one cluster's memory)."""
    return warehouse / "arrangements" / f"c{cluster_id}"


def arrangement(warehouse: Path, cluster_id: int, table_id: str, column: str) -> Path:
    """One table's rows arranged by one stored column."""
    safe = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in column)
    if safe != column:  # two columns that only differ in odd characters stay apart
        safe += "_" + hashlib.sha1(column.encode()).hexdigest()[:8]
    return arrangements(warehouse, cluster_id) / f"{table_id}.{safe}"


def projection(warehouse: Path, table_id: str, projection_id: str) -> Path:
    """A table's projection (beside the table, dropped with it or by DROP PROJECTION)."""
    return warehouse / f"{table_id}.projections" / projection_id


def copy_failures(warehouse: Path, table_id: str) -> Path:
    """The files a landing-folder COPY failed to load into a table (storage/landing.py;
    beside the table, dropped with it)."""
    return warehouse / f"{table_id}.copy" / "failures.jsonl"


def source_progress(warehouse: Path, source_id: str) -> Path:
    """The last step a source's cluster committed (mzflow/session/sources.py; dropped
    with the source)."""
    return warehouse / f"{source_id}.source" / "progress.json"


def of_item(warehouse: Path, item_id: str) -> list[Path]:
    """Every folder that is an item's own and goes when it is dropped: its shard (a
    table's or an index's), an index's state, a table's projections. (Arrangements are
    shared by a cluster and go with the last user: maintain/arrangements.py.)"""
    return [table(warehouse, item_id), state(warehouse, item_id),
            projection(warehouse, item_id, "-").parent, copy_failures(warehouse, item_id).parent,
            source_progress(warehouse, item_id).parent]
