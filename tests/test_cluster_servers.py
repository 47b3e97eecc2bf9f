"""Warm clusters (issue 18): a SIZEd cluster's ticks run on a Spark Connect server that
mzflow starts on first use and reuses, from separate CLI processes; a killed server is
restarted by the next tick, which still applies exactly once; a server that ran out of
memory is reported as such; two processes starting
the same server end with one; an idle server stops itself; bad endpoints fail clearly.

Every server here is a real Spark Connect JVM started through spark-submit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import mzflow
from mzflow.maintain import ticks

pytestmark = [pytest.mark.slow, pytest.mark.spark]
MZFLOW = str(Path(sys.executable).with_name("mzflow"))  # the installed command


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("MZFLOW_CLUSTER_SPARK", "managed")
    monkeypatch.setenv("MZFLOW_HOME", str(tmp_path / "home"))
    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE CLUSTER etl (SIZE = 'xsmall')")
        conn.execute("CREATE TABLE t (k int, v int)")
        conn.execute("CREATE MATERIALIZED VIEW m IN CLUSTER etl AS "
                     "SELECT k, sum(v) AS s FROM t GROUP BY k")
    yield home
    with mzflow.connect(str(home)) as conn:  # no server outlives its test
        conn.execute("DROP CLUSTER IF EXISTS etl CASCADE")


def mzflow_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([MZFLOW, *args], capture_output=True,
                          text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def server(home: Path) -> dict[str, object]:
    return dict(json.loads((home / "clusters" / "2" / "server.json").read_text()))


def service(home: Path) -> dict[str, object]:
    return dict(json.loads((home / "clusters" / "2" / "ticks.json").read_text()))


def view(home: Path) -> list[tuple[object, ...]]:
    with mzflow.connect(str(home)) as conn:
        conn.execute("SET cluster = etl")
        return conn.execute("SELECT k, s FROM m ORDER BY k").rows


def test_one_server_serves_every_tick_and_a_killed_one_is_replaced(home: Path) -> None:
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (1, 2), (1, 3), (2, 5)")
    # Two processes start the cluster's server at once: one server.
    starts = [subprocess.Popen([MZFLOW, "cluster", "start", "etl"],
                               stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in starts]
    assert all(p.returncode == 0 for p in starts), outs
    first = server(home)
    served = [line for o in outs for line in o.splitlines() if "ticks served by" in line]
    assert {line.split()[-1] for line in served} == {str(service(home)["pid"])}, outs
    assert {line.split()[-1] for o in outs for line in o.splitlines()
            if "serving at" in line} == {first["url"]}
    mzflow_cli("tick", "--cluster", "etl")
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (3, 1)")
    # The cluster's tick service runs it: the calling process imports no Spark at all.
    tick = subprocess.run([sys.executable, "-X", "importtime", "-m", "mzflow.cli", "tick",
                           "--cluster", "etl"], capture_output=True, text=True, timeout=300)
    assert tick.returncode == 0, tick.stderr[-3000:]
    assert "1 rows changed" in tick.stdout
    assert "pyspark" not in tick.stderr and "mzflow.session.connection" not in tick.stderr
    log = (home / "clusters" / "2" / "server.log").read_text()
    assert log.count("tick service: ticked") == 2, log[-3000:]
    assert server(home)["pid"] == first["pid"]  # the same server, warm
    # A session on the server keeps the SIZE's shuffle partitions (xsmall: 2), not the
    # in-process default of 4.
    from mzflow.engine import spark

    with spark.using(str(first["url"]), int(str(first["started_at"]))):
        assert spark.session().conf.get("spark.sql.shuffle.partitions") == "2"
    assert view(home) == [(1, 5), (2, 5), (3, 1)]
    with mzflow.connect(str(home)) as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT cluster_id, endpoint, state FROM mz_cluster_replicas").rows}
    assert rows[2] == (first["url"], "running")  # etl
    assert rows[1] == (None, "stopped")  # default

    # kill -9 the JVM between ticks: the next tick starts a new server, applies once.
    os.kill(int(str(first["jvm_pid"])), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (home / "clusters" / "2" / "server.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # the supervisor notices and leaves
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (1, 10)")
    mzflow_cli("tick", "--cluster", "etl")
    second = server(home)
    assert second["pid"] != first["pid"]
    assert view(home) == [(1, 15), (2, 5), (3, 1)]
    # The whole process group killed (no supervisor left to clean up): the same.
    os.killpg(int(str(second["pid"])), signal.SIGKILL)
    with mzflow.connect(str(home)) as conn:
        conn.execute("INSERT INTO t VALUES (2, -5)")
    mzflow_cli("tick", "--cluster", "etl")
    assert server(home)["pid"] not in (first["pid"], second["pid"])
    assert view(home) == [(1, 15), (2, 0), (3, 1)]
    out_of_memory_then_restarted(home)
    stop = mzflow_cli("cluster", "stop", "etl")
    assert "server stopped" in stop.stdout
    assert not (home / "clusters" / "2" / "server.json").exists()


def out_of_memory_then_restarted(home: Path) -> None:
    """A tick that runs its server out of memory says so, records nothing in the view,
    and the next tick starts a new server."""
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE big (s text)")
        conn.execute("INSERT INTO big VALUES ('abcdefghij')")
        # A string of 1,073,741,810 bytes, more than the xsmall size's whole 1 GiB heap:
        # Spark stops the server's JVM. (A 10^9-byte one sometimes fit an empty heap, and
        # past 1,073,741,819 bytes repeat is PostgreSQL's 54000 "requested length too
        # large", before Spark builds anything.)
        conn.execute("CREATE MATERIALIZED VIEW huge IN CLUSTER etl AS "
                     "SELECT length(repeat(s, 107374181)) AS n FROM big")
    failed = mzflow_cli("tick", "--cluster", "etl", check=False)
    assert failed.returncode != 0
    assert ('cluster "etl" ran out of memory: Spark\'s driver heap (1g, from SIZE '
            "'xsmall') is full") in failed.stderr, failed.stdout + failed.stderr
    assert "ALTER CLUSTER etl SET (SIZE = 'small')" in failed.stderr
    assert "getResult" not in failed.stderr and "Traceback" not in failed.stderr
    exited = json.loads((home / "clusters" / "2" / "exit.json").read_text())
    assert exited["code"] == 52  # Spark's exit code for an OutOfMemoryError
    with mzflow.connect(str(home)) as conn:
        snap = conn.store.snapshot()
        index = next(iter(snap.indexes_on(snap.resolve("huge").id)))
        # Not the data's fault: the view records no error, and stays where it was.
        assert ticks.index_shard(conn.config.warehouse, index).state() == (-1, None, None)
        conn.execute("DROP MATERIALIZED VIEW huge")
        conn.execute("INSERT INTO t VALUES (3, 4)")
    mzflow_cli("tick", "--cluster", "etl")  # on a new server
    assert view(home) == [(1, 15), (2, 0), (3, 5)]


def test_a_state_view_ticks_after_a_tick_on_another_session(home: Path) -> None:
    """Issue 34: a state-mode view's first tick checkpoints its groups on its cluster's
    server, and pyspark handed the checkpointed frame to the process's first Connect
    session instead: a process that had ticked on another session before (``mzflow
    tick`` over two clusters, or a restarted server) failed with
    "[CONNECT_INVALID_PLAN.DATAFRAME_NOT_FOUND] … No DataFrame with id … is found in the
    session …". The other session here is a cluster bound to the same server by URL:
    a second session without a second JVM."""
    from mzflow.clusters import servers
    from mzflow.engine.spark.runtime import process

    with mzflow.connect(str(home)) as conn:
        etl = conn.store.snapshot().cluster(2)
        assert etl is not None
        # Started here, without the tick service (no catalog given): this test ticks
        # in process.
        url = servers.ensure(home, etl, conn.config.cluster_idle_seconds).url
        conn.execute(f"CREATE CLUSTER other (SPARK = '{url}')")
        conn.execute("CREATE MATERIALIZED VIEW copy IN CLUSTER other AS SELECT k, v FROM t")
        conn.execute("INSERT INTO t VALUES (1, 2), (1, 3), (2, 5)")
        conn.tick(cluster="other")
        assert (url, None) in process()._remote  # that tick opened its session
        [report] = conn.tick(cluster="etl")
        assert "mode state (state rebuilt)" in report.line()  # m's checkpoint
        conn.execute("DROP CLUSTER other CASCADE")
    assert view(home) == [(1, 5), (2, 5)]


def test_idle_stop_and_clear_errors(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    # A port already taken: the error names the cluster and the endpoint.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = mzflow_cli("cluster", "start", "etl", "--port", str(port), check=False)
    assert proc.returncode == 1
    assert (f'cluster "etl": cannot start its Spark Connect server at sc://127.0.0.1:{port}: '
            "the port is already taken") in proc.stderr
    # A server that will not start (no Java): a clear error with its log, no hang.
    proc = subprocess.run([MZFLOW, "cluster", "start", "etl"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAVA_HOME": "/nonexistent-java"})
    assert proc.returncode == 1
    assert 'cluster "etl": its Spark Connect server at sc://127.0.0.1:' in proc.stderr
    assert "did not start" in proc.stderr
    # A cluster bound to an endpoint nobody serves: its tick names both.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nobody = free.getsockname()[1]
    with mzflow.connect(str(home)) as conn:
        conn.execute(f"CREATE CLUSTER ext (SIZE = 'xsmall', SPARK = 'sc://127.0.0.1:{nobody}')")
        conn.execute("CREATE MATERIALIZED VIEW e IN CLUSTER ext AS SELECT count(*) AS n FROM t")
        with pytest.raises(mzflow.Error) as err:
            conn.tick(cluster="ext")
        assert (f'cluster "ext": its Spark Connect endpoint sc://127.0.0.1:{nobody} is '
                "unreachable") in str(err.value)
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT cluster_id, endpoint, state FROM mz_cluster_replicas").rows}
        assert rows[3] == (f"sc://127.0.0.1:{nobody}", "external")
        conn.execute("DROP CLUSTER ext CASCADE")
    # An idle server stops itself.
    monkeypatch.setenv("MZFLOW_CLUSTER_IDLE_SECONDS", "3")
    mzflow_cli("cluster", "start", "etl")
    pid = int(str(server(home)["pid"]))
    deadline = time.monotonic() + 60
    while (home / "clusters" / "2" / "server.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not (home / "clusters" / "2" / "server.json").exists()
    from mzflow.storage.processes import process_alive

    log = home / "clusters" / "2" / "server.log"
    while "server stopped: idle for 3.0 s" not in log.read_text() and (
            time.monotonic() < deadline):
        time.sleep(0.5)  # the supervisor stops the JVM, then says so and exits
    time.sleep(1)
    assert "server stopped: idle for 3.0 s" in log.read_text()
    assert not process_alive(pid)
    status = mzflow_cli("cluster", "status").stdout
    assert "etl" in status and "stopped" in status



def test_an_empty_arrow_table_is_an_empty_frame_on_a_server(home: Path) -> None:
    """Spark Connect's createDataFrame refuses an empty Arrow table without a schema
    (CANNOT_INFER_EMPTY_SCHEMA): a lookup that matched nothing failed TPC-H Q18's tick
    on its cluster's server with tick_executor = 'spark' (bench, SF 1). The in-process
    session accepts one; the server must too, with its columns and types."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa

    from mzflow.clusters import servers
    from mzflow.engine import spark

    with mzflow.connect(str(home)) as conn:
        etl = conn.store.snapshot().cluster(2)
        assert etl is not None
        url = servers.ensure(home, etl, conn.config.cluster_idle_seconds).url
        table = pa.table({"k": pa.array([1], pa.int64()),
                          "p": pa.array([Decimal("1.50")], pa.decimal128(12, 2)),
                          "t": pa.array([dt.datetime(2026, 1, 1)], pa.timestamp("us", "UTC")),
                          "s": pa.array(["x"], pa.string())})
        with spark.using(url):
            empty = spark.from_arrow(table.slice(0, 0))
            assert empty.columns == ["k", "p", "t", "s"] and empty.count() == 0
            assert [f.dataType.simpleString() for f in empty.schema.fields] == [
                "bigint", "decimal(12,2)", "timestamp", "string"]
            assert spark.from_arrow(table).count() == 1
