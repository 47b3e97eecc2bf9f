"""A deferrable tick (issue 36, item 6): while a cluster's warm tick service ticks, the
task is deferred and its worker slot free.

Fast: the trigger against a fake service speaking the real protocol (standard library
``multiprocessing.connection``), the operator's defer and resume with fakes, and the
pools counting deferred tasks. Slow: a real Airflow 3 scheduler and triggerer defer a
generated DAG's tick onto a warm cluster's service; the view then matches DuckDB.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
from collections.abc import Iterator
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

import pytest

from mzflow_dev.airflow_server import airflow_in_process, throwaway_airflow_home

_OWN_HOME = throwaway_airflow_home("defer-")

from mzflow.airflow import tasks  # noqa: E402
from mzflow.airflow.operators import MzflowTickOperator  # noqa: E402
from mzflow.airflow.triggers import TickTrigger  # noqa: E402

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module", autouse=True)
def _restore_logging() -> Iterator[None]:
    with airflow_in_process(_OWN_HOME):
        yield


def _report(index: str = "materialize.public.j_primary_idx", before: int = 1,
            after: int = 5, error: str | None = None) -> dict[str, Any]:
    return {"index": index, "on": "materialize.public.j", "strategy": "delta",
            "upper_before": before, "upper_after": after, "version_before": 1,
            "version_after": 2, "rows_read": 3, "files_read": 1, "rows_changed": 2,
            "error": error, "seconds": 0.5, "spark_jobs": 1, "line": f"{index} ticked"}


class FakeService:
    """A tick service's listener and record, answering each request with ``reply(req)``."""

    def __init__(self, where: Path, reply: Any):
        self.requests: list[dict[str, Any]] = []
        key = secrets.token_bytes(16)
        self.listener = Listener(("127.0.0.1", 0), authkey=key)
        self.file = where / "ticks.json"
        self.file.write_text(json.dumps({"pid": os.getpid(), "port": self.listener.address[1],
                                         "key": key.hex(), "cluster": "c"}))

        def serve() -> None:
            while True:
                try:
                    client = self.listener.accept()
                except OSError:
                    return
                with client:
                    req = client.recv()
                    self.requests.append(req)
                    client.send(reply(req))

        threading.Thread(target=serve, daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _fire(trigger: TickTrigger) -> list[Any]:
    async def first() -> list[Any]:
        return [e.payload async for e in trigger.run()]
    return asyncio.run(first())


REQUEST = {"op": "tick", "object": "j", "at": None, "run": "mzflow_c/r1",
           "full_refresh": False, "view_means_default_index": True}


def test_trigger_hands_the_tick_to_the_service_and_fires_its_answer(tmp_path: Path) -> None:
    service = FakeService(tmp_path, lambda req: {"reports": [_report()], "at": 42})
    try:
        trigger = TickTrigger(str(service.file), REQUEST)
        # What Airflow stores (its database) names the record, never the service's key.
        path, kwargs = trigger.serialize()
        assert path == "mzflow.airflow.triggers.TickTrigger"
        assert "key" not in json.dumps(kwargs)
        again = TickTrigger(**kwargs)
        events = _fire(again)
        # Fired twice (a triggerer restarted): the same request, fixed time and all.
        events += _fire(again)
    finally:
        service.close()
    assert service.requests == [REQUEST, REQUEST]
    assert [e["status"] for e in events] == ["answer", "answer"]
    assert events[0]["answer"]["at"] == 42


def test_trigger_without_a_service_lets_the_task_tick_itself(tmp_path: Path) -> None:
    assert _fire(TickTrigger(str(tmp_path / "ticks.json"), REQUEST)) == [
        {"status": "no_service"}]
    # A service that is not this cluster's any more (the cluster was dropped).
    service = FakeService(tmp_path, lambda req: {"not_mine": "the cluster was dropped"})
    try:
        assert _fire(TickTrigger(str(service.file), REQUEST)) == [{"status": "no_service"}]
    finally:
        service.close()


class _TI:
    dag_id, run_id, task_id = "mzflow_c", "r1", "j"

    def xcom_pull(self, task_ids: str) -> Any:
        raise AssertionError("no pick task")


class _Outlets(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> Any:
        self[key] = got = type("Event", (), {"extra": None})()
        return got


def _context(op: MzflowTickOperator) -> dict[str, Any]:
    return {"params": {"objects": [], "full_refresh": False, "at": None}, "ti": _TI(),
            "outlet_events": _Outlets(), "task": op}


def _operator(**kw: Any) -> MzflowTickOperator:
    op = MzflowTickOperator(task_id="j", index="j", home="/nowhere", cluster="c", **kw)
    op.outlets = ["asset-j"]
    return op


def test_operator_defers_only_when_the_cluster_has_a_service(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    monkeypatch.setattr(tasks, "service_file", lambda *a: str(tmp_path / "ticks.json"))
    op = _operator(deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_context(op))
    assert isinstance(deferred.value.trigger, TickTrigger)
    assert deferred.value.trigger.request == REQUEST
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.kwargs == {"request": REQUEST}

    # No service: it ticks as it always did (here, a fake tick), without deferring.
    monkeypatch.setattr(tasks, "service_file", lambda *a: None)
    called: list[str] = []
    monkeypatch.setattr(tasks, "tick", lambda *a: called.append(a[2]) or {"at": 1})
    assert op.execute(_context(op)) == {"at": 1} and called == ["j"]
    # Not deferrable: never looks for a service.
    monkeypatch.setattr(tasks, "service_file", lambda *a: pytest.fail("looked"))
    assert _operator(deferrable=False).execute(_context(op)) == {"at": 1}


def test_deferrable_defaults_to_airflows_default_deferrable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _operator().deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert _operator().deferrable is True
    assert _operator(deferrable=False).deferrable is False


def test_resumed_task_reports_the_answer_like_execute(monkeypatch: pytest.MonkeyPatch) -> None:
    op = _operator(deferrable=True)
    ctx = _context(op)
    done = op.execute_complete(ctx, {"status": "answer",
                                     "answer": {"reports": [_report()], "at": 42}}, REQUEST)
    assert (done["at"], done["frontier_after"], done["served_by"]) == (42, 5, "tick service")
    assert op._done == done  # what get_openlineage_facets_on_complete reads
    assert ctx["outlet_events"]["asset-j"].extra == {"at": 42, "version": 2}

    # The service gone before it answered: the worker ticks itself.
    ticked: list[Any] = []

    def here(*args: Any) -> tuple[int, list[dict[str, Any]]]:
        ticked.append(args)
        return 43, [_report()]
    monkeypatch.setattr(tasks, "_tick_here", here)
    done = op.execute_complete(_context(op), {"status": "no_service"}, REQUEST)
    assert (done["at"], done["served_by"]) == (43, "task process")
    assert ticked == [("/nowhere", None, "j", None, "mzflow_c/r1", False, None)]


def test_resumed_task_fails_with_the_ticks_error() -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    import mzflow

    op = _operator(deferrable=True)
    failed = {"reports": [], "error": {"type": "Error", "code": "XX000",
                                       "message": "division by zero", "hint": None,
                                       "detail": None}}
    with pytest.raises(mzflow.Error, match="division by zero"):
        op.execute_complete(_context(op), {"status": "answer", "answer": failed}, REQUEST)
    with pytest.raises(AirflowFailException, match="bad row"):
        op.execute_complete(_context(op), {"status": "answer", "answer": {
            "reports": [_report(error="bad row")], "at": 1}}, REQUEST)
    # Sent twice (a retry): the second tick finds its time done, and skips.
    with pytest.raises(AirflowSkipException, match="already up to date"):
        op.execute_complete(_context(op), {"status": "answer", "answer": {
            "reports": [_report(before=5, after=5)], "at": 42}}, REQUEST)


# -- a real Airflow: api-server, scheduler, dag-processor and triggerer ------------------

VIEW = ("CREATE MATERIALIZED VIEW j IN CLUSTER c AS SELECT t.k, sum(v) AS s, count(*) AS n "
        "FROM t JOIN u ON t.k = u.k GROUP BY t.k")


def _expected(t: list[tuple[int, int]], u: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    import duckdb

    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, v int); CREATE TABLE u (k int, w int)")
    db.executemany("INSERT INTO t VALUES (?, ?)", t)
    db.executemany("INSERT INTO u VALUES (?, ?)", u)
    return [tuple(r) for r in db.execute(
        "SELECT t.k, sum(v), count(*) FROM t JOIN u ON t.k = u.k GROUP BY t.k ORDER BY 1"
    ).fetchall()]


def _tis(server: Any, run_id: str) -> list[dict[str, Any]]:
    from urllib.parse import quote

    got = server.request("GET", f"/api/v2/dags/mzflow_c/dagRuns/{quote(run_id)}/taskInstances")
    return [ti for ti in got["task_instances"] if ti["operator"] == "MzflowTickOperator"]


@pytest.mark.slow
@pytest.mark.spark
def test_tick_defers_on_the_warm_cluster_through_a_real_triggerer(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys
    from multiprocessing.connection import Client

    import mzflow
    from mzflow_dev.airflow_server import AirflowServer, airflow_env

    home = tmp_path / "home"
    t_rows, u_rows = [(1, 10), (2, 20), (2, 5)], [(1, 100), (2, 200), (3, 300)]
    values = lambda rows: ", ".join(f"({a}, {b})" for a, b in rows)  # noqa: E731
    with mzflow.connect(str(home)) as conn:
        conn.execute(f"CREATE CLUSTER c SIZE 'small'; CREATE TABLE t (k int, v int); "
                     f"CREATE TABLE u (k int, w int); {VIEW}; "
                     f"INSERT INTO t VALUES {values(t_rows)}; "
                     f"INSERT INTO u VALUES {values(u_rows)}")
    env = {**os.environ, "MZFLOW_HOME": str(home), "MZFLOW_CLUSTER_SPARK": "managed",
           "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True"}
    mzflow_cmd = str(Path(sys.executable).with_name("mzflow"))
    started = subprocess.run([mzflow_cmd, "cluster", "start", "c"], capture_output=True,
                             text=True, env=env, timeout=300)
    assert started.returncode == 0, started.stderr
    af = tmp_path / "airflow"
    (af / "dags").mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[1] / "dags" / "mzflow_catalog.py",
                af / "dags")
    server = None
    try:
        service_file = next((home / "clusters").glob("*/ticks.json"))
        record = json.loads(service_file.read_text())
        airflow = str(Path(sys.executable).parent / "airflow")
        subprocess.run([airflow, "db", "migrate"], env=airflow_env(env, af), check=True,
                       capture_output=True, timeout=600)
        server = AirflowServer(af, env)
        subprocess.run([sys.executable, "-m", "mzflow.cli", "airflow", "sync",
                        "--airflow-home", str(af)], env=server.env, check=True,
                       capture_output=True, timeout=120)
        server.start(triggerer=True)
        server.wait_for("the DAG", lambda: server.exists("/api/v2/dags/mzflow_c"), 300)
        pool = server.request("GET", "/api/v2/pools/mzflow_c")
        assert pool["include_deferred"] is True  # type: ignore[index]

        # Keep the service busy with a caller that sends nothing: the tick handed to it
        # waits, so the task stays deferred long enough to be seen (no timing).
        busy = Client(("127.0.0.1", int(record["port"])),
                      authkey=bytes.fromhex(record["key"]))
        try:
            run = server.request("POST", "/api/v2/dags/mzflow_c/dagRuns",
                                 {"logical_date": None, "conf": {}})
            run_id = run["dag_run_id"]  # type: ignore[index]
            server.wait_for("the tick deferred", lambda: any(
                ti["state"] == "deferred" for ti in _tis(server, run_id)), 600)
            # The deferred tick holds its slot in the cluster's pool.
            pool = server.request("GET", "/api/v2/pools/mzflow_c")
            assert pool["deferred_slots"] == 1, pool  # type: ignore[index]
            assert pool["open_slots"] == pool["slots"] - 1, pool  # type: ignore[index]
        finally:
            busy.close()
        state = server.wait_for("the run", lambda: server.run_state("mzflow_c", run_id), 600)
        assert state == "success", server.logs()
        ticks = _tis(server, run_id)
        assert [ti["state"] for ti in ticks] == ["success"]
        xcom = server.request(
            "GET", f"/api/v2/dags/mzflow_c/dagRuns/{run_id}/taskInstances/"
            f"{ticks[0]['task_id']}/xcomEntries/return_value")
        value = xcom["value"]  # type: ignore[index]
        value = json.loads(value) if isinstance(value, str) else value
        assert value["served_by"] == "tick service" and value["frontier_after"] > 0
        # Its asset event carries the time reached, as without deferral.
        events = server.request("GET", "/api/v2/assets/events?limit=100")
        ats = [e["extra"].get("at") for e in events["asset_events"]  # type: ignore[index]
               if e["source_run_id"] == run_id]
        assert ats == [value["at"]]
        # The service, not the worker, ticked it.
        log = (service_file.parent / "server.log").read_text(errors="replace")
        assert "tick service: ticked materialize.public.j" in log, log[-3000:]
        with mzflow.connect(str(home)) as conn:
            conn.execute("SET transaction_isolation = 'serializable'")
            got = conn.execute("SELECT k, s, n FROM j ORDER BY k")
        assert [tuple(int(x) for x in r) for r in got.rows] == _expected(t_rows, u_rows)
    finally:
        if server is not None:
            server.stop()
        subprocess.run([mzflow_cmd, "cluster", "stop", "c"], env=env, timeout=120)
