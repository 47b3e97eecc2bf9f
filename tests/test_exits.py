"""A program that used mzflow exits (issue 39): one that ticked views in several clusters,
each on its own warm Spark Connect server, through rounds of writes and ticks, ends on
its own once its last line is printed, whether it closed its connection, left it to the
interpreter's exit, or died of an error from ``conn.tick()``.

Users saw such programs print their last line and then wait in
``SparkSession.__del__`` → ``SparkConnectClient.close`` → grpc's ``Channel.close`` at
interpreter exit for over ten minutes (engine/spark/closing.py says why). Each program
here runs in a child process with a bound on how long it may take; a child that has
not exited by then is killed and the test fails with what it printed, and the child's
faulthandler dump of every thread if it printed its last line and then hung.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import mzflow

pytestmark = [pytest.mark.slow, pytest.mark.spark]

CLUSTERS = 4
VIEWS = 12
ROUNDS = 3

PROGRAM = textwrap.dedent('''
    import faulthandler
    import gc
    import sys

    import mzflow

    # Whether a program hung depended on when the garbage collector last ran: the
    # response stream pyspark's exit hook abandons is in a reference cycle, and a cycle
    # first collected while the interpreter finalizes is one grpc can no longer drain
    # (engine/spark/closing.py). Without collections, every run is that unlucky one:
    # before the fix, each of these programs hung at exit.
    gc.disable()
    home, mode = sys.argv[1], sys.argv[2]
    conn = mzflow.connect(home)
    if mode == "raises":
        # A tick made slow on a cluster's server, past a tiny limit: conn.tick() raises
        # TickTimeout, which this program does not catch.
        from mzflow.engine import spark
        from mzflow.maintain import ticks

        run = ticks._Tick.run
        slowly = []

        def slow(self, full_refresh):
            if slowly:
                spark.session().range(10 ** 13).selectExpr("sum(id % 7) AS s").collect()
            return run(self, full_refresh)

        ticks._Tick.run = slow
    for r in range({rounds}):
        rows = ", ".join(f"({{k}}, {{k * (r + 1)}})" for k in range(r * 50, r * 50 + 50))
        conn.execute(f"INSERT INTO t VALUES {{rows}}")
        if mode == "raises" and r == {rounds} - 1:
            conn.execute("ALTER SYSTEM SET tick_timeout = 2")
            slowly.append(True)
            print("ticking slowly", flush=True)
            faulthandler.dump_traceback_later(180, exit=True)  # its error, then exit
        reports = conn.tick()
        print(f"round {{r}}: {{len(reports)}} ticks", flush=True)
    if mode == "closes":
        conn.close()
    print("DONE", flush=True)
    # Whatever runs after the last line (atexit, the interpreter's finalization) is
    # dumped if the process is still alive two minutes later, and the process exits
    # (code 1): what a hang waits in.
    faulthandler.dump_traceback_later(120, exit=True)
''').format(rounds=ROUNDS)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("exits") / "home"
    with mzflow.connect(str(home)) as conn:
        for c in range(CLUSTERS):
            conn.execute(f"CREATE CLUSTER c{c} (SIZE = 'xsmall')")
        conn.execute("CREATE TABLE t (k int, v int)")
        for i in range(VIEWS):
            conn.execute(f"CREATE MATERIALIZED VIEW v{i} IN CLUSTER c{i % CLUSTERS} AS "
                         f"SELECT k % {i + 2} AS g, sum(v) AS s, count(*) AS n FROM t "
                         f"GROUP BY k % {i + 2}")
    yield home
    with mzflow.connect(str(home)) as conn:  # no server outlives the tests
        conn.execute("ALTER SYSTEM RESET tick_timeout")
        for c in range(CLUSTERS):
            conn.execute(f"DROP CLUSTER IF EXISTS c{c} CASCADE")


def run(home: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MZFLOW_CLUSTER_SPARK": "managed",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(home), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=900)  # JVM starts on a loaded machine
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the {mode} program did not exit:\n{out}\n{err[-6000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def oracle(home: Path) -> None:
    """Every view equals its definition over the table, computed in Python."""
    with mzflow.connect(str(home)) as conn:
        rows = conn.execute("SELECT k, v FROM t").rows
        for i in range(VIEWS):
            want: dict[int, list[int]] = {}
            for k, v in rows:
                g = want.setdefault(k % (i + 2), [0, 0])
                g[0] += v
                g[1] += 1
            got = conn.execute(f"SELECT g, s, n FROM v{i}").rows
            assert sorted(got) == sorted((g, s, n) for g, (s, n) in want.items()), i


@pytest.mark.parametrize("mode", ["exits", "closes"])
def test_a_many_cluster_program_exits(home: Path, mode: str) -> None:
    done = run(home, mode)
    assert done.returncode == 0, done.stdout + done.stderr[-6000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "DONE", done.stdout
    assert [line for line in lines if line.startswith("round")] == [
        f"round {r}: {VIEWS} ticks" for r in range(ROUNDS)]
    oracle(home)


def test_a_program_whose_tick_raised_exits(home: Path) -> None:
    done = run(home, "raises")
    assert done.returncode == 1, done.stdout + done.stderr[-6000:]
    assert done.stdout.splitlines()[-1] == "ticking slowly", done.stdout
    assert "TickTimeout" in done.stderr and "tick_timeout (2 s)" in done.stderr, done.stderr
    assert "Timeout (" not in done.stderr, done.stderr  # not faulthandler's: it exited
    with mzflow.connect(str(home)) as conn:  # the next ticks run, and are right
        conn.execute("ALTER SYSTEM RESET tick_timeout")
        assert all(r.error is None for r in conn.tick())
    oracle(home)
