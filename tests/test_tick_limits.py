"""Timeouts with clear errors (issue 39): a tick past ``tick_timeout`` is cancelled and
reported, its index's lock free for the next tick, which is right; a tick behind a
stuck one fails naming the limit instead of waiting for ever; a Spark Connect endpoint
that does not answer fails within ``spark_connect_timeout``, naming it, instead of
pyspark's ten minutes of retries. Both limits are ALTER SYSTEM settings.

No assertion counts time, except generous bounds on waits that would otherwise hang.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import mzflow
from mzflow import config
from mzflow.engine.spark import closing, tags
from mzflow.maintain.tick.limit import Limit, LockTimeout, TickTimeout
from mzflow.storage import locks


class FakeConnect:
    """What tags.py asks of a Spark Connect session: its tags, and their interrupts."""

    def __init__(self) -> None:
        self.tags: list[str] = []
        self.interrupted: list[str] = []
        self.interrupt = threading.Event()

    @property
    def sparkContext(self) -> Any:  # noqa: N802 - pyspark's name
        raise RuntimeError("no SparkContext in a Connect client")

    def addTag(self, tag: str) -> None:  # noqa: N802
        self.tags.append(tag)

    def removeTag(self, tag: str) -> None:  # noqa: N802
        self.tags.remove(tag)

    def interruptTag(self, tag: str) -> None:  # noqa: N802
        self.interrupted.append(tag)
        self.interrupt.set()


def test_tags_nest_and_each_stops_the_work() -> None:
    session = FakeConnect()
    with tags.tagged("statement"):
        with tags.tagged("tick"):
            tags.apply(session)  # first handed out inside the tick: both tags
            assert session.tags == ["statement", "tick"]
            assert tags.interrupt("statement") and tags.interrupt("tick")
        assert session.tags == ["statement"]
        tags.apply(session)
        assert session.tags == ["statement"]
    assert session.tags == []
    assert session.interrupted == ["statement", "tick"]


def test_a_limit_cancels_its_spark_work_and_names_itself() -> None:
    session = FakeConnect()
    limit = Limit("materialize.public.v_primary_idx", 0.2)
    with pytest.raises(TickTimeout) as raised, limit.running():
        tags.apply(session)  # the tick's first Spark call
        assert session.interrupt.wait(60), "the watchdog never cancelled the tick"
        raise RuntimeError("[OPERATION_CANCELED] (what Spark raises)")
    assert raised.value.code == "57014"
    assert "tick_timeout (0.2 s)" in str(raised.value)
    assert "materialize.public.v_primary_idx" in str(raised.value)
    assert session.interrupted and set(session.interrupted) == {session.interrupted[0]}
    assert session.tags == []  # the tag went with the block


def test_a_block_within_its_limit_is_left_alone() -> None:
    session = FakeConnect()
    with Limit("v", 600).running():
        tags.apply(session)
    with Limit("v", 0).running():  # 0: no limit, no tag
        tags.apply(session)
    assert session.interrupted == [] and session.tags == []


def test_a_lock_wait_gives_up_after_its_timeout(tmp_path: Path) -> None:
    path = tmp_path / "index.lock"
    with locks.exclusive(path) as held:
        assert held
        with locks.exclusive(path, timeout=0.2) as second:
            assert not second
        with locks.exclusive(path, wait=False) as third:
            assert not third
    with locks.exclusive(path, timeout=0.2) as free:
        assert free


def test_retries_of_an_unavailable_server_add_up_to_the_timeout() -> None:
    for seconds in (1, 30):
        state = closing.bounded_retries(seconds).to_state()
        waits = []
        while (wait := state.next_attempt()) is not None:
            waits.append(wait)
        assert waits and sum(waits) <= seconds * 1000


def test_the_limits_are_system_settings(tmp_path: Path) -> None:
    assert config.Tuning().tick_timeout > 0 and config.Tuning().spark_connect_timeout > 0
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET tick_timeout = 5")
        conn.execute("ALTER SYSTEM SET spark_connect_timeout = 0")
        tuning = config.tuning(conn.store.snapshot().settings)
        assert (tuning.tick_timeout, tuning.spark_connect_timeout) == (5, 0)
        with pytest.raises(mzflow.Error, match="tick_timeout"):
            conn.execute("ALTER SYSTEM SET tick_timeout = -1")


def _view(conn: Any) -> None:
    conn.execute("CREATE TABLE t (a int, b int)")
    conn.execute("INSERT INTO t VALUES (1, 10), (2, 20), (1, 5)")
    conn.execute("CREATE MATERIALIZED VIEW v AS SELECT a, sum(b) AS s, count(*) AS n "
                 "FROM t GROUP BY a")


def test_a_tick_behind_a_stuck_one_fails_naming_the_limit(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path / "home")) as conn:
        _view(conn)
        conn.execute("ALTER SYSTEM SET tick_timeout = 1")
        index = next(i for i in conn.store.snapshot().items if i.name == "v_primary_idx")
        # A stuck tick holds the lock (another open file: flock conflicts in one process
        # as between two).
        with locks.exclusive(locks.index_lock(conn.config.warehouse, index.id)):
            with pytest.raises(LockTimeout) as raised:
                conn.tick()
    assert raised.value.code == "55P03"
    assert "tick_timeout (1 s)" in str(raised.value) and "v_primary_idx" in str(raised.value)


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A port that accepts connections and never answers (a hung server, a firewall
    that swallows packets after the handshake)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"sc://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for s in held:
        s.close()
    listener.close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"sc://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("where", ["silent", "closed"])
def test_an_endpoint_that_does_not_answer_fails_within_the_timeout(
        tmp_path: Path, silent_endpoint: str, where: str) -> None:
    url = silent_endpoint if where == "silent" else _closed_port()
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute(f"CREATE CLUSTER ext (SPARK = '{url}')")
        conn.execute("SET cluster = ext")
        _view(conn)
        conn.execute("ALTER SYSTEM SET spark_connect_timeout = 2")
        failed: list[BaseException] = []

        def tick() -> None:
            try:
                conn.tick()
            except BaseException as e:  # noqa: BLE001 - asserted below
                failed.append(e)

        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        thread.join(120)  # pyspark's own retries would wait 10 minutes
        assert not thread.is_alive(), "the tick still waits on the endpoint"
    assert failed and isinstance(failed[0], mzflow.Error), failed
    assert url in str(failed[0])


@pytest.mark.slow
@pytest.mark.spark
def test_a_tick_past_its_limit_is_cancelled_and_the_next_one_is_right(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.engine import spark
    from mzflow.maintain import ticks

    run = ticks._Tick.run
    slow: list[int] = []

    def slowly(self: Any, full_refresh: bool) -> Any:
        if not slow:  # the first tick only: a Spark job that would run for hours
            slow.append(1)
            spark.session().range(10 ** 13).selectExpr("sum(id % 7) AS s").collect()
        return run(self, full_refresh)

    monkeypatch.setattr(ticks._Tick, "run", slowly)
    with mzflow.connect(str(tmp_path / "home")) as conn:
        _view(conn)
        conn.execute("ALTER SYSTEM SET tick_executor = 'spark'")
        conn.execute("ALTER SYSTEM SET tick_timeout = 3")
        with pytest.raises(TickTimeout) as raised:
            conn.tick()
        assert slow == [1]
        assert "tick_timeout (3 s)" in str(raised.value)
        tracker = spark.session().sparkContext.statusTracker()
        for _ in range(600):  # the cancelled job ends (it would run for hours)
            if not tracker.getActiveJobsIds():
                break
            threading.Event().wait(0.1)
        assert not tracker.getActiveJobsIds()
        conn.execute("INSERT INTO t VALUES (2, 1), (3, 7)")
        conn.execute("ALTER SYSTEM RESET tick_timeout")  # a first tick may take longer
        reports = conn.tick()  # the lock is free and nothing was committed
        assert [r.error for r in reports] == [None]
        got = sorted(conn.execute("SELECT a, s, n FROM v").rows)
        rows = conn.execute("SELECT a, b FROM t").rows
    db = duckdb.connect()
    db.execute("CREATE TABLE t (a int, b int)")
    db.executemany("INSERT INTO t VALUES (?, ?)", rows)
    want = db.execute("SELECT a, sum(b), count(*) FROM t GROUP BY a ORDER BY a").fetchall()
    assert got == [tuple(r) for r in want]
