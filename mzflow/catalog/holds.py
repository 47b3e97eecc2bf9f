"""Read holds in the catalog: rows that keep compaction's ``since`` at or below a time.

A hold is one row per object it holds (a table, or an index a read is served from),
all sharing one ``hold_id``. The invariant that makes a hold safe without locking
its renewals: **compaction ignores a hold only in the transaction that deletes it**
(:func:`take_live`). So a hold whose row still exists has held ``since`` back, however
late its holder renewed it, and a holder that finds its row gone knows it lost it.

Holds are not DDL: they never bump ``catalog_version`` (sessions keep their cached
snapshot) and the snapshot does not carry them; compaction and ``mz_read_holds`` read
the table directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from mzflow.catalog import migrations


@dataclass(frozen=True)
class Hold:
    hold_id: str
    object_id: str
    read_time: int
    holder: str  # what holds it: "SELECT AS OF", "SUBSCRIBE"
    pid: int
    host: str
    acquired_at: int  # ms since the epoch
    expires_at: int


# An index's hold on its inputs (maintain/tick/holds.py): one per index, owned by no
# process (a tick's process may exit; the next tick, anywhere, renews it), so it ends
# only when its lease runs out or its index is dropped.
INDEX_HOLDER = "INDEX"


def index_hold_id(index_id: str) -> str:
    return f"index-{index_id}"


def insert(conn: Connection, holds: Iterable[Hold]) -> None:
    """Under the write lock, after checking the time against each object's since."""
    rows = [h.__dict__ for h in holds]
    if rows:
        conn.execute(migrations.read_holds.insert(), rows)


def since_ts(conn: Connection, object_ids: Iterable[str]) -> dict[str, int]:
    """The since compaction has applied, read in the caller's transaction (the cached
    snapshot's may be older: setting since is not DDL)."""
    t = migrations.items
    ids = sorted(set(object_ids))
    return {r.id: r.since_ts or 0
            for r in conn.execute(sa.select(t.c.id, t.c.since_ts).where(t.c.id.in_(ids)))}


def _short(engine: Engine) -> AbstractContextManager[Connection]:
    """A small write that need not wait for the catalog's write lock. SQLite has one
    writer at a time anyway (and a deferred BEGIN could fail at once where BEGIN
    IMMEDIATE waits); on PostgreSQL the row lock suffices: see take_live."""
    if engine.dialect.name == "sqlite":
        return migrations.begin_write(engine)
    return engine.begin()


def renew(engine: Engine, hold_id: str, read_time: int, expires_at: int) -> bool:
    """Extend the lease (and move the held time forward, never back); False: the hold
    is gone, ignored and deleted by a compaction after its lease had run out."""
    t = migrations.read_holds
    with _short(engine) as conn:
        found = conn.execute(t.update().where(t.c.hold_id == hold_id).values(
            expires_at=expires_at,
            read_time=sa.case((t.c.read_time < read_time, read_time),
                              else_=t.c.read_time))).rowcount
    return bool(found)


def replace(conn: Connection, hold_id: str, holds: Iterable[Hold]) -> None:
    """``hold_id``'s rows, now ``holds`` (under the write lock)."""
    t = migrations.read_holds
    conn.execute(t.delete().where(t.c.hold_id == hold_id))
    insert(conn, holds)


def delete(engine: Engine, hold_id: str) -> None:
    t = migrations.read_holds
    with _short(engine) as conn:
        conn.execute(t.delete().where(t.c.hold_id == hold_id))


def take_live(conn: Connection, now: int, dead: Callable[[Hold], bool]) -> dict[str, int]:
    """Object id → the oldest time a live hold keeps readable. Runs in compaction's
    transaction (under the write lock): expired holds and those whose holder is
    ``dead`` are deleted first, and only then are the others read, so that a renewal
    racing with it either lands before the delete (and the hold counts) or finds its
    row gone."""
    t = migrations.read_holds
    found = all_holds(conn)
    expired = sorted({h.hold_id for h in found if h.expires_at < now})
    if expired:  # re-checked by the DELETE: a renewal that committed meanwhile counts
        conn.execute(t.delete().where(t.c.hold_id.in_(expired) & (t.c.expires_at < now)))
    died = sorted({h.hold_id for h in found if dead(h)})
    if died:
        conn.execute(t.delete().where(t.c.hold_id.in_(died)))
    out: dict[str, int] = {}
    for h in all_holds(conn):
        out[h.object_id] = min(out.get(h.object_id, h.read_time), h.read_time)
    return out


def extend(conn: Connection, ms: int) -> None:
    t = migrations.read_holds
    conn.execute(t.update().values(expires_at=t.c.expires_at + ms))


def all_holds(conn: Connection) -> list[Hold]:
    t = migrations.read_holds
    return [Hold(**r._asdict()) for r in conn.execute(
        sa.select(t).order_by(t.c.acquired_at, t.c.hold_id, t.c.object_id))]


def listed(engine: Engine) -> list[Hold]:
    with engine.connect() as conn:
        return all_holds(conn)


def expiry(engine: Engine, hold_id: str) -> int | None:
    """When ``hold_id`` lapses (its rows' earliest lease end); None: it has no rows."""
    t = migrations.read_holds
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.min(t.c.expires_at))
                            .where(t.c.hold_id == hold_id)).scalar()


def stored_since(engine: Engine, object_ids: Iterable[str]) -> dict[str, int]:
    """The since compaction has applied, read now, without the write lock."""
    with engine.connect() as conn:
        return since_ts(conn, object_ids)
