"""The caller's side of a cluster's tick service (clusters/tick_service.py): which
service it picks, and that a service that is gone (or refuses it) leaves the caller to
tick itself. The service itself, on a real server, is in test_cluster_servers.py and
test_airflow.py."""

from __future__ import annotations

import json
import os
import threading
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

from mzflow.clusters import tick_service

CATALOG = "sqlite:////somewhere/catalog.db"


def publish(home: Path, cluster_id: int, **record: Any) -> None:
    where = home / "clusters" / str(cluster_id)
    where.mkdir(parents=True, exist_ok=True)
    (where / tick_service.SERVICE_FILE).write_text(json.dumps(record))


def test_find_takes_only_a_live_service_of_that_cluster_and_catalog(tmp_path: Path) -> None:
    dead = 2**22 + 1  # above pid_max: no such process
    publish(tmp_path, 2, pid=dead, port=1, key="00", cluster="etl", catalog_url=CATALOG)
    publish(tmp_path, 3, pid=os.getpid(), port=2, key="00", cluster="etl",
            catalog_url="postgresql://elsewhere/db")
    publish(tmp_path, 4, pid=os.getpid(), port=3, key="00", cluster="analytics",
            catalog_url=CATALOG)
    assert tick_service.find(tmp_path, CATALOG, "etl") is None  # dead; other catalog
    publish(tmp_path, 5, pid=os.getpid(), port=4, key="00", cluster="etl",
            catalog_url=CATALOG)
    found = tick_service.find(tmp_path, CATALOG, "etl")
    assert found is not None and found["port"] == 4
    assert tick_service.find(tmp_path, CATALOG, "nope") is None


def test_call_answers_and_a_gone_service_gives_none() -> None:
    key = os.urandom(32)
    listener = Listener(("127.0.0.1", 0), authkey=key)
    port = listener.address[1]

    def serve_once() -> None:
        with listener.accept() as conn:
            request = conn.recv()
            conn.send({"reports": [], "echo": request["op"]})

    server = threading.Thread(target=serve_once)
    server.start()
    record = {"port": port, "key": key.hex()}
    assert tick_service.call(record, {"op": "read_ts"}) == {"reports": [], "echo": "read_ts"}
    server.join(10)
    listener.close()
    # Nobody listens any more: the caller ticks itself.
    assert tick_service.call(record, {"op": "read_ts"}) is None


def test_a_caller_without_the_key_is_refused() -> None:
    listener = Listener(("127.0.0.1", 0), authkey=b"the right key")
    refused: list[BaseException] = []

    def serve_once() -> None:
        try:
            listener.accept()
        except Exception as e:  # multiprocessing.AuthenticationError
            refused.append(e)

    server = threading.Thread(target=serve_once)
    server.start()
    answer = tick_service.call({"port": listener.address[1], "key": b"wrong".hex()},
                               {"op": "read_ts"})
    server.join(10)
    listener.close()
    assert answer is None and refused


def test_a_connect_collect_takes_the_schema_from_its_answer_not_another_request() -> None:
    # pyspark's Connect toArrow() sends an analyze request for the schema before it
    # executes; the execution's answer carries the schema (issue 18: those requests
    # were 0.05-0.3 s of every collect in a warm tick). A stand-in for a Connect frame:
    # asking it for its schema fails the test.
    import pyarrow as pa
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    from mzflow.engine import spark

    class Frame:
        @property
        def schema(self) -> StructType:
            raise AssertionError("an analyze request")

        def _to_table(self) -> tuple[pa.Table, StructType]:
            rows = pa.table({"k": pa.array([1, None], pa.int64()),
                             "s": pa.array(["a", "b"], pa.large_string())})
            return rows, StructType([StructField("k", IntegerType()),
                                     StructField("s", StringType())])

    got = spark.collect_arrow(Frame())
    assert got.schema == pa.schema([("k", pa.int32()), ("s", pa.string())])
    assert got.to_pylist() == [{"k": 1, "s": "a"}, {"k": None, "s": "b"}]


def test_a_service_asked_by_its_clusters_old_name_after_a_swap_declines(
        tmp_path: Path) -> None:
    """ALTER CLUSTER a SWAP WITH b: the service of the cluster that was ``a`` (its record
    still says ``a``) must not take ``tick --cluster a`` (it would tick the other
    cluster's indexes, now ``b``'s), and learns its new name to publish. Found while
    adding blue/green applies to the soak (issue 39 item 7): after a swap the services'
    records named each other's cluster, so ``tick --cluster a`` ticked ``b``'s indexes,
    and the new cluster's ticks never reached its own service again."""
    import mzflow
    from mzflow.session import tick_server

    conn = mzflow.connect(str(tmp_path / "home"))
    try:
        conn.execute("CREATE CLUSTER a SIZE 'small'")
        conn.execute("CREATE CLUSTER b SIZE 'small'")
        was_a = conn.store.snapshot().cluster_by_name("a").id
        conn.execute("ALTER CLUSTER a SWAP WITH b")
        names: list[str] = []
        answer = tick_server.handle(conn, was_a, {"op": "tick", "object": None, "at": None,
                                                  "cluster": "a"}, names.append)
        assert answer == {"not_mine": "cluster a is now named b"}
        assert names == ["b"]
        # Asked by its name now, it serves (no indexes: nothing to tick, no Spark).
        answer = tick_server.handle(conn, was_a, {"op": "tick", "object": None, "at": None,
                                                  "cluster": "b"}, names.append)
        assert answer["reports"] == [] and "error" not in answer
    finally:
        conn.close()


def test_ask_sends_the_name_it_asked_for(tmp_path: Path, monkeypatch: Any) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setenv("MZFLOW_CLUSTER_SPARK", "managed")
    monkeypatch.delenv("MZFLOW_SPARK_MASTER", raising=False)
    monkeypatch.setattr(tick_service, "find", lambda *a: {"pid": os.getpid(), "port": 1})
    monkeypatch.setattr(tick_service, "call",
                        lambda record, request: sent.append(request) or {"reports": []})
    assert tick_service.ask(str(tmp_path), None, "etl", {"op": "tick"}) == {"reports": []}
    assert sent == [{"op": "tick", "cluster": "etl"}]


def test_the_service_and_the_cli_tick_an_index_outside_public_by_a_name_that_resolves(
        tmp_path: Path, monkeypatch: Any) -> None:
    """An index in another schema was ticked by its bare name, which resolves only in
    public: every tick of it through a tick service (and ``mzflow tick --cluster``)
    failed with "unknown catalog item". Found by the soak's blue/green view (issue 39
    item 7), which lives in schema bg."""
    import mzflow
    from mzflow import cli
    from mzflow.catalog import names
    from mzflow.session import tick_server

    conn = mzflow.connect(str(tmp_path / "home"))
    try:
        conn.execute("CREATE TABLE t (k int)")
        conn.execute("CREATE SCHEMA bg")
        conn.execute("CREATE CLUSTER c3 SIZE 'small'")
        conn.execute("CREATE MATERIALIZED VIEW bg.mv IN CLUSTER c3 AS SELECT k FROM t")
        snap = conn.store.snapshot()
        index = next(i for i in snap.items if i.kind == "index")
        asked: list[str] = []
        monkeypatch.setattr(conn, "tick", lambda object, **kw: asked.append(object) or [])
        c3 = snap.cluster_by_name("c3").id
        for request in ({"op": "tick", "object": None, "at": None},
                        {"op": "tick", "object": "bg.mv", "at": None,
                         "view_means_default_index": True}):
            answer = tick_server.handle(conn, c3, request)
            assert "error" not in answer, answer
        assert cli._tick(conn, "c3", None, None) in (0, 1)  # no reports: nothing printed
        assert len(asked) == 3
        assert all(names.resolve(snap, name).id == index.id for name in asked), asked
    finally:
        conn.close()
