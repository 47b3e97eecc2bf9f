"""A cluster's managed server starts on a tick's first Spark work, not on the tick's
start (engine/spark/lazy_endpoint.py): a tick that runs in process never starts one
(``mzflow tick`` of q01 paid 4.2 s starting a server it did not use). Fast: the
runtime is the test's own and no JVM starts; the real path is in
tests/test_cluster_servers.py."""

from __future__ import annotations

import os
import threading

import pytest

from mzflow.engine.spark import runtime as spark_runtime


def test_a_block_without_spark_work_never_resolves() -> None:
    rt = spark_runtime.SparkRuntime()
    calls: list[int] = []

    def resolve() -> tuple[str, object] | None:
        calls.append(1)
        raise AssertionError("would start a server")

    with rt.using(None, lazy=resolve):
        assert rt.where() == "in-process" and rt.endpoint() is None
        # Until it resolves, the block counts as on a server: no in-process session is
        # handed out for the tick's cleanup or cancels.
        assert rt.in_process() is None
    assert calls == []


def test_the_first_session_resolves_once_and_the_block_restores_connect_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rt = spark_runtime.SparkRuntime()
    remote = object()
    connected: list[tuple[str, object]] = []
    monkeypatch.setattr(rt, "_connected",
                        lambda url, key: (connected.append((url, key)), remote)[1])
    monkeypatch.setattr(spark_runtime, "_active_connect_session", lambda: "before")
    made_active: list[object] = []
    monkeypatch.setattr(spark_runtime, "_make_active", made_active.append)
    monkeypatch.delenv(spark_runtime._CONNECT_MODE, raising=False)
    calls: list[int] = []

    def resolve() -> tuple[str, object] | None:
        calls.append(1)
        return "sc://127.0.0.1:15999", 42

    with rt.using(None, lazy=resolve):
        assert spark_runtime._CONNECT_MODE not in os.environ  # nothing resolved yet
        assert rt.session() is remote and rt.session() is remote
        assert calls == [1] and connected == [("sc://127.0.0.1:15999", 42)] * 2
        assert rt.where() == "sc://127.0.0.1:15999"
        assert os.environ[spark_runtime._CONNECT_MODE] == "1"
    assert spark_runtime._CONNECT_MODE not in os.environ
    assert made_active == ["before"]  # the thread's active session given back
    assert rt.endpoint() is None


def test_a_resolver_that_finds_no_server_sends_the_work_to_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster that does not get a server (the machine's budget, say) ticks on the
    process's own Spark: the block's session() is the in-process one."""
    rt = spark_runtime.SparkRuntime()
    own = object()
    monkeypatch.setattr(rt, "_start", lambda master: own)
    monkeypatch.setattr(rt, "_connected", lambda url, key: pytest.fail("no server"))
    with rt.using(None, lazy=lambda: None):
        assert rt.session() is own
        assert rt.in_process() is own and rt.where() == "in-process"


def test_a_failed_resolution_is_tried_again() -> None:
    rt = spark_runtime.SparkRuntime()
    attempts: list[int] = []
    lock = threading.Lock()

    def resolve() -> tuple[str, object] | None:
        with lock:
            attempts.append(1)
        raise OSError("the server did not start")

    with rt.using(None, lazy=resolve):
        for _ in range(2):
            with pytest.raises(OSError, match="did not start"):
                rt.session()
    assert len(attempts) == 2
