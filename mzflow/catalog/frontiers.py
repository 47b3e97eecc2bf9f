"""Frontiers of a collection: ``since`` (oldest readable time) and ``upper``.

A read at time ``t`` needs ``since <= t < upper`` for every input. Tables are
complete through the catalog's ``read_ts`` (every write up to it has
committed), so their upper is ``read_ts + 1``. ``since`` trails by the
object's retention (``RETAIN HISTORY FOR …``, else the catalog default, the
system setting ``retain_history``), and never moves back.
"""

from __future__ import annotations

from mzflow.catalog import intervals
from mzflow.catalog.model import INDEX, TABLE, Item, Snapshot
from mzflow.errors import InvalidOption

DEFAULT_RETAIN_HISTORY = "1 hour"
# mzflow_compact runs at the shortest retention, within these bounds: compacting every
# retention keeps at most twice the history asked for; more often than a minute is
# scheduler churn, less often than a day lets small files pile up.
COMPACTION_MIN_MS = 60_000
COMPACTION_MAX_MS = 86_400_000


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


def check_compaction_interval(text: str) -> int:
    """``ALTER SYSTEM SET compaction_interval``'s value in ms."""
    ms = intervals.to_ms(text)
    if ms < COMPACTION_MIN_MS:
        raise InvalidOption(f"compaction_interval must be at least 1 minute, not '{text}'")
    return ms


def compaction_interval(snap: Snapshot) -> tuple[int, str]:
    """How often ``mzflow_compact`` runs, and why: the system setting
    ``compaction_interval`` if set, else the shortest retention of a table or index
    (within ``COMPACTION_MIN_MS`` .. ``COMPACTION_MAX_MS``)."""
    setting = snap.settings.get("compaction_interval")
    if setting:
        return check_compaction_interval(setting), f"compaction_interval = '{setting}'"
    kept = [(retain_ms(i, snap), i) for i in snap.items if i.kind in (TABLE, INDEX)]
    if not kept:
        return default_retain_ms(snap), "the default retain_history"
    ms, item = min(kept, key=lambda k: k[0])
    why = (f"RETAIN HISTORY of {item.qualified_name}" if item.retain_history_ms is not None
           else "retain_history, the default RETAIN HISTORY")
    return min(max(ms, COMPACTION_MIN_MS), COMPACTION_MAX_MS), why
