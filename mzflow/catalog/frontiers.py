"""Frontiers of a collection: ``since`` (oldest readable time) and ``upper``.

A read at time ``t`` needs ``since <= t < upper`` for every input. Tables are
complete through the catalog's ``read_ts`` (every write up to it has
committed), so their upper is ``read_ts + 1``. ``since`` trails by the
object's retention (``RETAIN HISTORY FOR …``, else the catalog default, the
system setting ``retain_history``), and never moves back.
"""

from __future__ import annotations

from mzflow.catalog import intervals
from mzflow.catalog.model import Item, Snapshot

DEFAULT_RETAIN_HISTORY = "1 hour"


def default_retain_ms(snap: Snapshot) -> int:
    return intervals.to_ms(snap.settings.get("retain_history", DEFAULT_RETAIN_HISTORY))


def retain_ms(item: Item, snap: Snapshot) -> int:
    if item.retain_history_ms is not None:
        return item.retain_history_ms
    return default_retain_ms(snap)


def since(item: Item, snap: Snapshot) -> int:
    return max(item.created_ts or 0, item.since_ts or 0, snap.read_ts - retain_ms(item, snap))


def upper(snap: Snapshot) -> int:
    return snap.read_ts + 1
