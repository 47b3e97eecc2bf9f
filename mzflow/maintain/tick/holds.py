"""An index's read hold on its inputs, as Materialize's read policies hold a dataflow's
inputs at its upper: compaction keeps each base table the index reads readable from the
time the index's next tick starts at (its last error-free time), so that tick can read
the changes since then instead of recomputing.

The hold is one row per input in the catalog's read holds (``catalog/holds.py``), id
``index-<index id>``, holder ``INDEX``, and no process owns it: a tick renews its lease
(``index_hold_lease_seconds``) when it starts and moves it up to the tick's time once
committed. An index not ticked within its lease stops holding: compaction deletes the
expired rows (and a dropped index's) in the transaction that passes them. The next tick
then finds its starting time compacted away and says so (R016), instead of failing over
to a recompute in silence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mzflow.catalog import holds as catalog_holds
from mzflow.catalog.holds import Hold
from mzflow.catalog.model import Item
from mzflow.catalog.store import Store, now_ms
from mzflow.maintain.tick.commit import index_shard
from mzflow.read.holds import HOST
from mzflow.reasons import R_LAPSED


@dataclass(frozen=True)
class Passed:
    """Compaction passed the time a tick's changes start from, on these inputs."""

    since: int  # the tick's starting time
    tables: tuple[tuple[str, int], ...]  # (qualified name, its since)

    def describe(self) -> str:
        passed = ", ".join(f"{name} since {ts}" for name, ts in self.tables)
        return f" [changes from {self.since} needed; compacted: {passed}]"


class IndexHold:
    """One index's hold on ``inputs`` (the base tables its plan reads)."""

    def __init__(self, store: Store, index: Item, inputs: Sequence[Item], lease_seconds: int):
        self.store, self.index = store, index
        self.inputs = list({i.id: i for i in inputs}.values())
        self.lease_ms = lease_seconds * 1000
        self.hold_id = catalog_holds.index_hold_id(index.id)

    def start(self, since: int) -> Passed | None:
        """At a tick's start: whether compaction had passed ``since`` on an input. The
        hold is renewed first when less than half its lease is left (made again at
        ``since`` when it lapsed or never existed), so that it lasts through the tick:
        since, read after that, cannot pass it any more, and a hold made again says
        what was passed before it. With most of its lease left, it is only read: one
        catalog write per tick (``advance``) is enough."""
        if since < 0 or not self.inputs:  # a first tick reads every row at its time
            return None
        expires = catalog_holds.expiry(self.store.engine, self.hold_id)
        if expires is None or expires < now_ms() + self.lease_ms // 2:
            self._hold(since)
        applied = catalog_holds.stored_since(self.store.engine, (i.id for i in self.inputs))
        passed = tuple((i.qualified_name, applied[i.id]) for i in self.inputs
                       if applied.get(i.id, 0) > since)
        return Passed(since, passed) if passed else None

    def advance(self, good_through: int) -> None:
        """After the tick's commit: hold from where the next tick starts."""
        if good_through >= 0 and self.inputs:
            self._hold(good_through)

    def _hold(self, at: int) -> None:
        expires = now_ms() + self.lease_ms
        if catalog_holds.renew(self.store.engine, self.hold_id, at, expires):
            return
        now = now_ms()
        # Pid 0: no process owns it (read/holds.py: dead).
        rows = [Hold(self.hold_id, i.id, at, catalog_holds.INDEX_HOLDER, 0, HOST, now,
                     now + self.lease_ms) for i in self.inputs]
        with self.store.write() as w:
            catalog_holds.replace(w.conn, self.hold_id, rows)


def lapsed(store: Store, warehouse: Path, index: Item) -> str | None:
    """EXPLAIN's line for an index that has ticked and holds nothing now (its lease ran
    out): compaction may pass where its next tick starts. None while it holds."""
    shard = index_shard(warehouse, index)
    since = shard.good_through() if shard.exists() else -1
    if since < 0:
        return None
    expires = catalog_holds.expiry(store.engine, catalog_holds.index_hold_id(index.id))
    if expires is not None and expires >= now_ms():
        return None
    return (f"Read hold: none (its lease ran out): compaction may pass {since}, where the "
            f"next tick starts, and that tick then recomputes ({R_LAPSED})")
