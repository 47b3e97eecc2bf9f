"""Read holds: a read at an older time keeps ``mzflow compact`` from removing its files.

A ``SELECT … AS OF`` and a SUBSCRIBE take a hold on what they read before they
choose Delta versions, and release it when they finish. Taking it is one short
transaction under the catalog's write lock (the lock compaction chooses ``since``
under) that re-checks the time against each object's since: a read racing a
compaction either holds before compaction chooses, or is refused as any read below
since is. Compaction never moves an object's since past a live hold's time.

A hold is a lease (``read_hold_lease_seconds``): a daemon thread renews it every
third of the lease, so a holder that died stops holding back since once its lease
ran out, and at once when it was a process on the compacting host. A SUBSCRIBE
moves its hold up to each time it has emitted (:meth:`ReadHold.advance`), published
with the next renewal, so compaction keeps up with it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import threading
import uuid
from collections.abc import Collection, Iterable
from typing import Any

from sqlalchemy.engine import Connection

from mzflow.catalog import frontiers
from mzflow.catalog import holds as catalog_holds
from mzflow.catalog.holds import Hold
from mzflow.catalog.model import INDEX, Item, Snapshot
from mzflow.catalog.store import Store, now_ms
from mzflow.read import reads
from mzflow.storage.processes import process_alive

log = logging.getLogger("mzflow.holds")

HOST = socket.gethostname()

# A read at the current time holds only when some input keeps less history than this.
# Compaction can only remove what such a read needs once read_ts has moved a whole
# retention past it, so with the default retention (1 hour) a plain read is safe unless
# it runs for an hour. A hold costs two catalog commits (about 10-20 ms on SQLite) and,
# worse, waits for the catalog's write lock: behind every write's Delta commit and a
# whole compaction (refused after SQLite's 30 s timeout), where a read today waits for
# nothing.
PLAIN_READ_MARGIN_MS = 3_600_000


class ReadHold:
    """Hold ``since`` of some objects at or below a time until :meth:`release`.
    A context manager; ``lost`` says a compaction dropped it after its lease ran out."""

    def __init__(self, store: Store, hold_id: str, at: int, lease_seconds: float,
                 empty: bool = False):
        self.store = store
        self.hold_id = hold_id
        self.at = at
        self.lease_seconds = lease_seconds
        self.lost = False
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew_until_released, daemon=True,
                                         name=f"read-hold-{hold_id[:8]}")
        if empty:  # a read of no stored object (a constant query) holds nothing
            self._stop.set()
        else:
            self._renewer.start()

    def advance(self, at: int) -> None:
        """Nothing before ``at`` is needed any more (published with the next renewal)."""
        self.at = max(self.at, at)

    def renew(self) -> bool:
        alive = catalog_holds.renew(self.store.engine, self.hold_id, self.at,
                                    now_ms() + int(self.lease_seconds * 1000))
        if not alive and not self.lost:
            log.warning("read hold %s lapsed (its lease ran out before a renewal) and "
                        "a compaction dropped it", self.hold_id)
        self.lost = self.lost or not alive
        return alive

    def release(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._renewer.join()
        try:
            catalog_holds.delete(self.store.engine, self.hold_id)
        except Exception:  # the read is done and right: its hold lapses with its lease
            log.warning("could not release read hold %s; it lapses in %.0f s",
                        self.hold_id, self.lease_seconds, exc_info=True)

    def _renew_until_released(self) -> None:
        period = self.lease_seconds / 3
        wait = period
        while not self._stop.wait(wait):
            try:
                if not self.renew():
                    return
                wait = period
            except Exception:
                # A busy catalog (SQLite gives up on its lock after 30 s, behind a long
                # compaction): try again soon, not a whole period later, so that the
                # lease is renewed as soon as the lock is free.
                log.warning("could not renew read hold %s", self.hold_id, exc_info=True)
                wait = min(1.0, period)

    def __enter__(self) -> ReadHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(store: Store, objects: Iterable[Item], at: int, holder: str,
            lease_seconds: float) -> ReadHold:
    """Hold ``objects`` (tables and the indexes a read is served from) at ``at``, or
    raise the error a read below since gets."""
    objects = list({o.id: o for o in objects}.values())
    hold_id = uuid.uuid4().hex
    if not objects:
        return ReadHold(store, hold_id, at, lease_seconds, empty=True)
    with store.write() as w:  # the write lock: compaction cannot be choosing since now
        fresh = catalog_holds.since_ts(w.conn, (o.id for o in objects))
        current = [dataclasses.replace(o, since_ts=fresh.get(o.id, o.since_ts)) for o in objects]
        snap = w.snapshot
        reads.check_time(snap, (o for o in current if o.kind != INDEX), at)
        for index in (o for o in current if o.kind == INDEX):
            if at < (index.since_ts or 0):
                raise reads.InvalidTimestamp(
                    f"Timestamp ({at}) is not valid for all inputs: {index.qualified_name} "
                    f"has since {index.since_ts}",
                    hint="its contents before that were compacted away")
        now = now_ms()
        catalog_holds.insert(w.conn, (
            Hold(hold_id, o.id, at, holder, os.getpid(), HOST, now,
                 now + int(lease_seconds * 1000)) for o in objects))
    return ReadHold(store, hold_id, at, lease_seconds)


def plain_read_needs_hold(snap: Snapshot, tables: Iterable[Item]) -> bool:
    """Whether a read at the current time could plausibly outlive its inputs' history."""
    return any(frontiers.retain_ms(t, snap) < PLAIN_READ_MARGIN_MS for t in tables)


def dead(hold: Hold, index_holds: Collection[str] = ()) -> bool:
    """A holder on this host whose process is gone holds nothing, lease or not; an
    index's hold on its inputs (no process owns it), once its index is dropped.
    ``index_holds``: the hold ids of the indexes that exist."""
    if hold.holder == catalog_holds.INDEX_HOLDER:
        return hold.hold_id not in index_holds
    return hold.host == HOST and not process_alive(hold.pid)


def live(conn: Connection, index_ids: Iterable[str] = ()) -> dict[str, int]:
    """Compaction's view, in its transaction: object id → the oldest time held.
    ``index_ids``: the indexes that exist (a dropped one's hold is deleted)."""
    index_holds = {catalog_holds.index_hold_id(i) for i in index_ids}
    return catalog_holds.take_live(conn, now_ms(), lambda h: dead(h, index_holds))


def extend_leases(conn: Connection, ms: int) -> None:
    """Every hold's lease, ``ms`` longer (compaction: the time it kept holders waiting)."""
    catalog_holds.extend(conn, ms)


def rows(store: Store) -> list[tuple[Any, ...]]:
    """``mz_read_holds``."""
    def utc(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    return [(h.object_id, h.hold_id, h.holder, h.read_time, h.pid, h.host,
             utc(h.acquired_at), utc(h.expires_at))
            for h in catalog_holds.listed(store.engine)]
