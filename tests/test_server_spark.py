"""``mzflow serve`` with reads that run on Spark (issue 35, part A): typed results
checked against PostgreSQL's own answers through the same client, COPY (SELECT) TO
STDOUT, and the cancel of a long query, from psycopg and from psql's Ctrl-C. One
server and one Spark per module."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import psycopg
import psycopg.errors
import pytest

import mzflow
from mzflow import config
from mzflow.engine import spark
from mzflow.server import make_server
from mzflow.server.listen import Server

pytestmark = [pytest.mark.slow, pytest.mark.spark]

PASSWORD = "pw"
TYPED = ("CREATE TABLE typed (i bigint, n numeric(10,2), ts timestamptz, s text, b bool, "
         "d date, f double precision, t timestamp, v varchar(5), r real)")
ROWS = ("INSERT INTO typed VALUES (9007199254740993, 12345678.91, "
        "'2024-02-29 23:59:59.5+00', 'tab\there', true, '2024-02-29', 0.1, "
        "'1999-12-31 23:59:59.999999', 'abc', 0.1), "
        "(-1, -0.01, '1970-01-01 00:00:00+00', '', false, '0001-01-01', -1e300, "
        "'2000-01-01 00:00:00', '', -2.5), (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL)")
SELECT = "SELECT i, n, ts, s, b, d, f, t, v, r FROM typed ORDER BY i NULLS LAST"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("serve-spark")
    with mzflow.connect(str(home)) as conn:
        conn.execute(f"CREATE ROLE alice WITH LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    srv = make_server(config.load(str(home)), port=0)
    srv.start()
    with connect(srv) as conn:
        conn.execute(TYPED)
        conn.execute(ROWS)
        conn.execute("CREATE TABLE big (a int)")
        conn.execute("INSERT INTO big SELECT * FROM generate_series(1, 3000)")
    yield srv
    srv.stop()


def connect(srv: Server) -> psycopg.Connection:
    conn = psycopg.connect(f"postgresql://alice:{PASSWORD}@127.0.0.1:{srv.port}/materialize",
                           autocommit=True)
    conn.prepare_threshold = None  # prepared statements need Describe (part D)
    return conn


def test_typed_results_match_postgresql(server: Server, pg_url: str) -> None:
    with connect(server) as conn:
        cur = conn.execute(SELECT)
        ours = cur.fetchall()
        our_types = [(d.type_code, d.internal_size, d.precision, d.scale)
                     for d in cur.description]
    with psycopg.connect(re.sub(r"^postgresql\+\w+://", "postgresql://", pg_url),
                         autocommit=True) as pg:
        pg.execute("SET TimeZone = 'UTC'")
        pg.execute("DROP TABLE IF EXISTS typed")
        pg.execute(TYPED)
        pg.execute(ROWS)
        cur = pg.execute(SELECT)
        theirs = cur.fetchall()
        their_types = [(d.type_code, d.internal_size, d.precision, d.scale)
                       for d in cur.description]
    assert our_types == their_types
    assert ours == theirs
    assert [type(v).__name__ for v in ours[0]] == [
        "int", "Decimal", "datetime", "str", "bool", "date", "float", "datetime", "str",
        "float"]
    assert ours[0][2].tzinfo is not None and ours[0][7].tzinfo is None


def test_copy_select_to_stdout(server: Server) -> None:
    with connect(server) as conn, conn.cursor().copy(
            f"COPY ({SELECT}) TO STDOUT") as copy:
        lines = b"".join(bytes(chunk) for chunk in copy).decode().splitlines()
    assert len(lines) == 3
    with connect(server) as conn, conn.cursor().copy("COPY typed TO STDOUT") as copy:
        table = b"".join(bytes(chunk) for chunk in copy).decode().splitlines()
    assert sorted(table) == sorted(lines)
    assert "tab\\there" in [line.split("\t")[3] for line in lines]  # escaped, one line
    assert lines[-1] == "\t".join(["\\N"] * 10)


def test_concurrent_spark_reads_each_get_their_own_answer(server: Server) -> None:
    """Four clients read at once on the one Spark; each answer is checked against the
    table's rows as Python computes it."""
    with connect(server) as conn:
        values = [r[0] for r in conn.execute("SELECT a FROM big").fetchall()]
    answers: dict[int, object] = {}

    def read(k: int) -> None:
        try:
            with connect(server) as c:
                answers[k] = c.execute(f"SELECT count(*), sum(a) FROM big WHERE a % 4 = {k}"
                                       ).fetchone()
        except Exception as e:  # noqa: BLE001 - reported below
            answers[k] = e

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    expected = {k: (len([v for v in values if v % 4 == k]),
                    sum(v for v in values if v % 4 == k)) for k in range(4)}
    assert answers == expected


def _running_tasks() -> int:
    """Tasks that run on the executor (a cancelled job's stages end at once; its tasks,
    if they do not stop, are still counted here)."""
    tracker = spark.session().sparkContext._jsc.sc().statusTracker()
    return int(sum(e.numRunningTasks() for e in tracker.getExecutorInfos()))


def _until_spark_runs_a_job() -> None:
    """Until the long query's nested loop runs: one stage whose tasks have been running
    for 2 s (the broadcast before it takes a fraction of that; should one ever take
    longer, the cancel arrives earlier and the idle check below proves less, never
    fails wrongly)."""
    deadline = time.monotonic() + 120
    since: dict[int, float] = {}
    while True:
        tracker = spark.session().sparkContext.statusTracker() if spark.started() else None
        now = time.monotonic()
        running = {s for s in (tracker.getActiveStageIds() if tracker else [])
                   if (info := tracker.getStageInfo(s)) and info.numActiveTasks}  # type: ignore[union-attr]
        since = {s: since.get(s, now) for s in running}
        if any(now - t >= 2 for t in since.values()):
            return
        assert now < deadline, "the long query never started its loop"
        time.sleep(0.1)


def _until_spark_is_idle() -> None:
    """A cancelled job's tasks stop too, not only the job: a cancelled nested loop once ran
    on for 90 s, holding a core (see engine/spark/queries.py, _interruptibly)."""
    deadline = time.monotonic() + 30
    while _running_tasks():
        assert time.monotonic() < deadline, "the cancelled query's tasks still run"
        time.sleep(0.1)


LONG = "SELECT count(*) FROM big a, big b, big c WHERE a.a + b.a + c.a > 0"


def test_cancel_stops_the_query_and_only_that_one(server: Server) -> None:
    with connect(server) as conn, connect(server) as other:
        failure: list[BaseException] = []

        def long_query() -> None:
            try:
                conn.execute(LONG)
            except BaseException as e:  # noqa: BLE001 - examined below
                failure.append(e)

        t = threading.Thread(target=long_query)
        t.start()
        _until_spark_runs_a_job()
        # A cancel with another connection's key stops nothing.
        server.cancel(other.info.backend_pid, 12345)
        assert t.is_alive() or not failure
        conn.cancel_safe()  # blocking cancel() would hold the GIL this server needs
        t.join(120)
        assert not t.is_alive()
        assert failure and isinstance(failure[0], psycopg.errors.QueryCanceled), failure
        _until_spark_is_idle()
        assert conn.execute("SELECT count(*) FROM big").fetchone() == (3000,)
        assert other.execute("SELECT count(*) FROM typed").fetchone() == (3,)


def test_psql_ctrl_c_cancels_a_long_query(server: Server, tmp_path: Path) -> None:
    env = {**os.environ, "PGPASSWORD": PASSWORD, "HOME": str(tmp_path), "PAGER": "",
           "PSQL_HISTORY": str(tmp_path / "history")}
    child = pexpect.spawn("psql", ["-X", "-h", "127.0.0.1", "-p", str(server.port), "-U",
                                   "alice", "materialize"], env=env, encoding="utf-8",
                          timeout=120)
    try:
        child.expect("materialize=>")
        child.sendline(LONG + ";")
        _until_spark_runs_a_job()
        child.sendintr()
        child.expect("canceling statement due to user request")
        child.expect("materialize=>")
        _until_spark_is_idle()
        child.sendline("SELECT count(*) FROM big;")
        child.expect("3000")
        child.sendline("\\q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
