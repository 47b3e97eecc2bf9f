"""Read holds: `mzflow compact` during a long AS OF read and during a SUBSCRIBE, a dead
holder's hold lapsing, and mz_read_holds.

Each test starts a reader at an older time, then makes compaction want to go past it
(the installation's retention cut to one second, a write after that second) while the
reader is paused with its Delta versions chosen and its files not yet read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from test_sinks import History, _norm

import mzflow
from mzflow.catalog import holds as catalog_holds
from mzflow.catalog.holds import Hold
from mzflow.catalog.store import now_ms
from mzflow.read import holds


def _rows(conn: mzflow.Connection, sql: str) -> list[tuple[Any, ...]]:
    return conn.execute(sql).rows


def _held(conn: mzflow.Connection) -> list[tuple[Any, ...]]:
    return _rows(conn, "SELECT t.name, h.holder, h.read_time FROM mz_internal.mz_read_holds h "
                       "JOIN mz_tables t ON t.id = h.object_id ORDER BY 1, 2, 3")


def _history(conn: mzflow.Connection) -> tuple[History, int]:
    """Writes to ``t``, and the time after the first."""
    conn.execute("CREATE TABLE t (k int, g text, x numeric(10,2))")
    h = History(conn)
    h.write("INSERT INTO t VALUES (1, 'a', 1.50), (2, 'b', 2.25), (3, 'a', 0.25)",
            lambda rows: rows + [(1, "a", Decimal("1.50")), (2, "b", Decimal("2.25")),
                                 (3, "a", Decimal("0.25"))])
    old = conn.store.snapshot().read_ts
    # An UPDATE and a DELETE rewrite files: the old time's files leave the newest version.
    h.write("UPDATE t SET x = x * 2 WHERE g = 'a'",
            lambda rows: [(k, g, x * 2 if g == "a" else x) for k, g, x in rows])
    h.write("INSERT INTO t VALUES (4, 'c', 9.99), (5, 'b', 1.00)",
            lambda rows: rows + [(4, "c", Decimal("9.99")), (5, "b", Decimal("1.00"))])
    h.write("DELETE FROM t WHERE k = 2", lambda rows: [r for r in rows if r[0] != 2])
    return h, old


def _move_since_past(h: History) -> None:
    """One second of history, and a write a second later: compaction's since would
    pass every time before it."""
    h.conn.execute("ALTER SYSTEM SET retain_history = '1s'")
    time.sleep(1.2)
    h.write("INSERT INTO t VALUES (6, 'd', 0.50)",
            lambda rows: rows + [(6, "d", Decimal("0.50"))])


def _compact(conn: mzflow.Connection) -> Any:
    return {c.table: c for c in conn.compact("t")}["materialize.public.t"]


@pytest.mark.slow
@pytest.mark.spark
def test_compaction_during_a_long_as_of_read(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.engine import spark

    home = tmp_path / "home"
    conn = mzflow.connect(str(home))
    conn.execute("ALTER SYSTEM SET local_read_max_rows = 0")  # a read as long as Spark's
    h, old = _history(conn)
    expected = sorted((k, g, x) for k, g, x in h.at(old))
    # The read pauses with its versions chosen and its file list made, before Spark
    # reads a file: exactly where a concurrent vacuum would break it.
    entered, go = threading.Event(), threading.Event()
    run = spark.run

    def paused(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert go.wait(120)
        return run(*args, **kwargs)

    monkeypatch.setattr(spark, "run", paused)
    got: list[Any] = []

    def read() -> None:
        with mzflow.connect(str(home)) as reader:
            try:
                got.append(sorted(_rows(reader, f"SELECT k, g, x FROM t AS OF {old}")))
            except Exception as e:  # reported by the main thread
                got.append(e)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        assert entered.wait(300), "the read never reached Spark"
        _move_since_past(h)
        assert _held(conn) == [("t", "SELECT AS OF", old)]
        report = _compact(conn)
        assert report.since == old, "compaction went past a held read's time"
    finally:
        go.set()
        thread.join()
    monkeypatch.setattr(spark, "run", run)
    assert got == [expected]
    # Released: the next compaction moves since past the read's time.
    assert _held(conn) == []
    assert _compact(conn).since > old
    with pytest.raises(mzflow.Error, match=r"is not valid for all inputs: .*\.t has since"):
        conn.execute(f"SELECT k FROM t AS OF {old}")
    # With a second of history, a read at the current time holds too.
    seen: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(_held(conn))
        return run(*args, **kwargs)

    monkeypatch.setattr(spark, "run", spy)
    now = conn.store.snapshot().read_ts
    assert _rows(conn, "SELECT count(*) FROM t") == [(len(h.rows),)]
    assert seen == [[("t", "SELECT", now)]]
    assert _held(conn) == []
    conn.close()


@pytest.mark.slow
@pytest.mark.spark
def test_compaction_during_a_subscribe(tmp_path: Path) -> None:
    conn = mzflow.connect(str(tmp_path / "home"))
    h, old = _history(conn)
    conn.execute("CREATE VIEW v AS SELECT g, count(*) AS n, sum(x) AS total FROM t GROUP BY g")
    # UP TO a time after the write _move_since_past makes (a past time is closed).
    up_to = now_ms() + 30_000
    # The table streams its change feed, the view is evaluated at each change time:
    # both read files of versions compaction would otherwise remove.
    subs = {name: conn.subscribe(f"SUBSCRIBE {name} AS OF {old} UP TO {up_to}")
            for name in ("t", "v")}
    streams = {name: iter(sub) for name, sub in subs.items()}
    firsts = {name: next(stream) for name, stream in streams.items()}  # paused mid-stream
    _move_since_past(h)
    assert _held(conn) == [("t", "SUBSCRIBE", old), ("t", "SUBSCRIBE", old)]
    report = _compact(conn)
    assert report.since == old
    assert report.files_removed + report.files_merged >= 1
    for name, cols, view in (("t", ["k", "g", "x"], False), ("v", ["g", "n", "total"], True)):
        rows = [firsts[name], *streams[name]]
        got = Counter((r[0], r[1]) + _norm(dict(zip(cols, r[2:], strict=True)), cols)
                      for r in rows)
        assert got == h.updates(old, True, view), name
    assert _held(conn) == []
    assert _compact(conn).since > old
    conn.close()


@pytest.mark.slow
@pytest.mark.spark
def test_a_dead_or_lapsed_holder_stops_holding(tmp_path: Path) -> None:
    conn = mzflow.connect(str(tmp_path / "home"))
    h, old = _history(conn)
    table = conn.store.snapshot().resolve("t")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    now = now_ms()
    with conn.store.write() as w:
        catalog_holds.insert(w.conn, [
            # a process on this host that died without releasing, lease or not
            Hold("dead", table.id, old, "SELECT AS OF", child.pid, holds.HOST, now,
                 now + 3_600_000),
            # a holder elsewhere whose lease ran out
            Hold("lapsed", table.id, old, "SUBSCRIBE", os.getpid(), "elsewhere", now - 10,
                 now - 1),
        ])
    # A live holder that stops renewing (hung, or its host went away): it holds until
    # its lease runs out.
    hung = holds.acquire(conn.store, [table], old, "SUBSCRIBE", lease_seconds=10)
    hung._stop.set()
    _move_since_past(h)
    assert len(_held(conn)) == 3
    before = {x.hold_id: x.expires_at for x in catalog_holds.listed(conn.store.engine)}
    assert _compact(conn).since == old
    after = {x.hold_id: x.expires_at for x in catalog_holds.listed(conn.store.engine)}
    assert list(after) == [hung.hold_id]
    # The lease got back the time compaction kept the holder from renewing.
    assert after[hung.hold_id] > before[hung.hold_id]
    time.sleep(max(0.0, (after[hung.hold_id] - now_ms()) / 1000) + 0.2)
    assert _compact(conn).since > old
    assert _held(conn) == []
    assert not hung.renew() and hung.lost  # the holder learns it lost its hold
    conn.close()


def test_mz_read_holds_shows_holds_while_held(tmp_path: Path) -> None:
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (a int)")
    snap = conn.store.snapshot()
    table, at = snap.resolve("t"), snap.read_ts
    with holds.acquire(conn.store, [table], at, "SELECT AS OF", 60) as hold:
        assert _rows(conn, "SELECT object_id, hold_id, holder, read_time, pid, host "
                           "FROM mz_internal.mz_read_holds") == [
            (table.id, hold.hold_id, "SELECT AS OF", at, os.getpid(), holds.HOST)]
        (acquired, expires), = _rows(conn, "SELECT acquired_at, expires_at FROM "
                                           "mz_read_holds")
        assert (expires - acquired).total_seconds() == 60
    assert _rows(conn, "SELECT * FROM mz_read_holds") == []
    # Holds are not DDL: sessions keep their cached catalog.
    assert conn.store.snapshot().version == snap.version
    # A read at the current time holds only when its inputs keep little history.
    assert not holds.plain_read_needs_hold(snap, [table])
    conn.execute("ALTER SYSTEM SET retain_history = '10s'")
    assert holds.plain_read_needs_hold(conn.store.snapshot(), [table])
    with pytest.raises(mzflow.Error, match=r"is not valid for all inputs: .*\.t has since"):
        holds.acquire(conn.store, [table], table.created_ts - 1, "SELECT AS OF", 60)
    # A live holder renews its lease: held well past the first expiry.
    with holds.acquire(conn.store, [table], at, "SUBSCRIBE", 0.6) as hold:
        time.sleep(1.5)
        with conn.store.write() as w:
            assert holds.live(w.conn) == {table.id: at}
        assert not hold.lost
    conn.close()


@pytest.mark.slow
@pytest.mark.postgres
def test_holds_on_postgres(tmp_path: Path, pg_url: str) -> None:
    """Renewals and releases there take no catalog lock (the row lock orders them
    with compaction's delete): they move the held time forward only, and a hold a
    compaction dropped stays dropped."""
    import sqlalchemy as sa

    from mzflow.catalog import migrations
    from mzflow_dev import pg_server

    conn = mzflow.connect(str(tmp_path / "home"), catalog_url=pg_server.create_database(pg_url))
    conn.execute("CREATE TABLE t (a int)")
    snap = conn.store.snapshot()
    table, at = snap.resolve("t"), snap.read_ts
    engine = conn.store.engine
    with holds.acquire(conn.store, [table], at, "SUBSCRIBE", 60) as hold:
        hold.advance(at + 5)
        assert hold.renew()
        assert catalog_holds.renew(engine, hold.hold_id, at + 1, now_ms() + 60_000)
        assert _rows(conn, "SELECT read_time FROM mz_read_holds") == [(at + 5,)]
        with conn.store.write() as w:
            assert holds.live(w.conn) == {table.id: at + 5}
    assert _rows(conn, "SELECT * FROM mz_read_holds") == []
    lapsed = holds.acquire(conn.store, [table], at, "SUBSCRIBE", 60)
    lapsed._stop.set()
    with conn.store.write() as w:
        w.conn.execute(migrations.read_holds.update().values(expires_at=0))
    with conn.store.write() as w:
        assert holds.live(w.conn) == {}
    assert not lapsed.renew() and lapsed.lost
    with engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(migrations.read_holds)
                         ).scalar_one() == 0
    conn.close()
