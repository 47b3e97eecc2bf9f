"""Where each shard of an installation lives in its warehouse: the one place that
builds these paths (tables, indexes, the state an index keeps)."""

from __future__ import annotations

from pathlib import Path


def table(warehouse: Path, item_id: str) -> Path:
    return warehouse / item_id


def index(warehouse: Path, index_id: str) -> Path:
    return warehouse / index_id


def state(warehouse: Path, index_id: str) -> Path:
    """The partials a state-mode index keeps (beside the index, dropped with it)."""
    return warehouse / f"{index_id}.state"
