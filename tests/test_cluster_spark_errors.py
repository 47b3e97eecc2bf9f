"""A tick on a cluster's managed Spark server that loses the server gets mzflow's error,
not pyspark's: the 60-minute soak saw raw ``SparkConnectGrpcException``s
(``_InactiveRpcError … failed to connect``) from a tick that set a Spark conf on a server
killed meanwhile, outside the query paths that translate Spark's errors. No Spark here:
the server, its death and the lost connection are stand-ins."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow.clusters import servers as cluster_servers
from mzflow.engine import spark
from mzflow.engine.spark import failures
from mzflow.errors import SparkFailure
from mzflow.session.cluster_spark import cluster_spark

URL = "sc://127.0.0.1:1"


class SparkConnectGrpcException(Exception):
    """What pyspark raises when the server is gone (its text, not its type, matters)."""


LOST = SparkConnectGrpcException(
    "<_InactiveRpcError of RPC that terminated with: status = StatusCode.UNAVAILABLE "
    'details = "failed to connect to all addresses; last error: Connection refused">')


@pytest.fixture
def managed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A home whose cluster ``etl`` has a (stand-in) managed server at ``URL``."""
    @contextmanager
    def using(url: str, started_at: int | None) -> Any:
        yield

    real = failures.process

    class Process:  # the process's Spark, connected to URL
        def endpoint(self) -> tuple[str, int]:
            return URL, 0

        def __getattr__(self, name: str) -> Any:
            return getattr(real(), name)

    monkeypatch.setattr(cluster_servers, "endpoint_for",
                        lambda *a, **k: cluster_servers.Endpoint(URL, 1))
    monkeypatch.setattr(spark, "using", using)
    monkeypatch.setattr(failures, "process", Process)
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE CLUSTER etl (SIZE = 'xsmall')")
    conn.execute("CREATE TABLE t (k int)")
    conn.execute("CREATE MATERIALIZED VIEW m IN CLUSTER etl AS SELECT k FROM t")
    snap = conn.store.snapshot()
    index = next(i for i in snap.items if i.cluster_id is not None)
    yield conn, snap, index
    conn.close()


def test_a_server_killed_under_the_tick_is_named(managed: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    conn, snap, index = managed
    monkeypatch.setattr(cluster_servers, "died_since", lambda *a, **k: -9)
    with pytest.raises(SparkFailure) as raised:
        with cluster_spark(conn.config, snap, index):
            raise LOST
    assert str(raised.value).startswith(
        'cluster "etl": its Spark server died (exit code -9) during the tick'), raised.value


def test_a_lost_connection_to_a_live_server_is_mzflows_error(
        managed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conn, snap, index = managed
    monkeypatch.setattr(cluster_servers, "died_since", lambda *a, **k: None)
    with pytest.raises(SparkFailure, match=f"lost the connection to the Spark at {URL}"):
        with cluster_spark(conn.config, snap, index):
            raise LOST


def test_other_errors_pass_unchanged(managed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conn, snap, index = managed
    monkeypatch.setattr(cluster_servers, "died_since", lambda *a, **k: -9)
    with pytest.raises(ZeroDivisionError):
        with cluster_spark(conn.config, snap, index):
            raise ZeroDivisionError("not Spark's")
