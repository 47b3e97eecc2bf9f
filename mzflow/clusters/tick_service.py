"""A cluster's tick service: its ticks run in one warm Python process, next to its JVM.

A warm Spark Connect server took the JVM's start-up out of a tick, but every
``mzflow tick --cluster c`` and every Airflow tick task was still a new Python process
that imported the runtime (sqlglot, SQLAlchemy, pyarrow, pandas and pyspark's Connect
client: 1-2 s quiet, several seconds loaded) and opened a new server-side session whose
first queries are slow. In Materialize a cluster's replica keeps its dataflows warm;
here the cluster's supervisor runs this service beside its JVM
(``python -m mzflow.clusters.tick_service <folder>``): it imports the runtime once,
keeps one catalog connection and one Connect session, and runs the ticks that callers
send it, one at a time. The caller imports only the standard library
(``multiprocessing.connection``) and prints what comes back.

It is an accelerator, never the only way: a caller that finds no service, or loses it
mid-tick (a tick is one idempotent Delta commit, so a kill half way loses nothing),
runs the tick itself exactly as before. The service serves only its own cluster, only
for the home and catalog it was started for, and only callers that present the key it
wrote (mode 0600) next to its address.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from mzflow.storage.processes import process_alive

SERVICE_FILE = "ticks.json"  # address, key and what it serves; written once it listens
log = logging.getLogger("mzflow.tick_service")


# -- the caller's side: standard library only ------------------------------------------

def find(home: Path, catalog_url: str, cluster: str) -> dict[str, Any] | None:
    """The running service of ``cluster`` (a name) in ``home``, if there is one that
    serves the same catalog."""
    for path in (home / "clusters").glob(f"*/{SERVICE_FILE}"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (record.get("cluster") == cluster and record.get("catalog_url") == catalog_url
                and process_alive(int(record.get("pid", 0)))):
            return dict(record)
    return None


def call(record: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
    """Send ``request``; the answer, or None when the service is gone (before or during
    the call): the caller then does the work itself."""
    try:
        with Client(("127.0.0.1", int(record["port"])),
                    authkey=bytes.fromhex(record["key"])) as conn:
            conn.send(request)
            answer: dict[str, Any] = conn.recv()
            return answer
    except (OSError, EOFError, ValueError, KeyError, AuthenticationError):
        return None


def ask(home: str | None, catalog_url: str | None, cluster: str | None,
        request: dict[str, Any]) -> dict[str, Any] | None:
    """``request`` answered by ``cluster``'s service; None when the caller must do the
    work itself: no cluster named, no service, a service that did not take it, or a
    configuration under which ticks do not run on the managed servers at all."""
    if cluster is None:
        return None
    from mzflow import config, errors

    try:
        cfg = config.load(home, catalog_url=catalog_url)
    except errors.Error:
        return None  # the caller's own path reports it
    if cfg.cluster_spark != "managed" or cfg.spark_master != "local[*]":
        return None
    record = find(cfg.home, cfg.catalog_url, cluster)
    answer = None if record is None else call(record, request)
    if answer is None or "not_mine" in answer:
        return None
    log.info("served by cluster %s's tick service (process %s)", cluster,
             record["pid"] if record else "?")
    return answer


def failure_of(answer: dict[str, Any]) -> Any:
    """The error a service's answer carries, as an ``mzflow.Error`` (None: none)."""
    from mzflow import errors

    failure = answer.get("error")
    if failure is None:
        return None
    return errors.Error(failure["message"], detail=failure["detail"], hint=failure["hint"])


def wait_for(where: Path, timeout: float = 120.0) -> dict[str, Any] | None:
    """The service of the cluster whose folder is ``where``, once it listens (it imports
    the runtime first); None if its server stops first, or after ``timeout``."""
    try:
        if not json.loads((where / "spec.json").read_text()).get("ticks"):
            return None  # a server started without one
    except (OSError, ValueError):
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (where / "server.json").exists():
        try:
            record: dict[str, Any] = json.loads((where / SERVICE_FILE).read_text())
            if process_alive(int(record["pid"])):
                return record
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    return None


# -- the service ----------------------------------------------------------------------

def serve(where: Path) -> int:
    spec = json.loads((where / "spec.json").read_text())["ticks"]
    home, catalog_url, cluster_id = spec["home"], spec["catalog_url"], int(spec["cluster_id"])
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s tick service: %(message)s")
    _exit_with_parent()
    import mzflow

    conn = mzflow.connect(home, catalog_url=catalog_url)
    key = secrets.token_bytes(32)
    with Listener(("127.0.0.1", 0), authkey=key) as listener:
        record = {"pid": os.getpid(), "port": listener.address[1], "key": key.hex(),
                  "cluster": spec["cluster"], "cluster_id": cluster_id,
                  "home": home, "catalog_url": catalog_url}
        tmp = where / f"{SERVICE_FILE}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, where / SERVICE_FILE)
        log.info("cluster %s: serving ticks on port %d", spec["cluster"], record["port"])
        # SIGTERM (the supervisor stopping): at once when idle; after the answer when
        # busy, so that a caller whose tick killed the JVM still hears why.
        state = {"busy": False, "stop": False}

        def on_term(*_: object) -> None:
            if not state["busy"]:
                raise SystemExit(0)
            state["stop"] = True

        signal.signal(signal.SIGTERM, on_term)
        while not state["stop"]:
            try:
                client = listener.accept()
            except (OSError, EOFError, AuthenticationError) as e:  # a wrong key; gone
                log.info("refused a caller: %s", e)
                continue
            state["busy"] = True
            try:
                with client:
                    _answer(client, conn, cluster_id)
            finally:
                state["busy"] = False
    return 0


def _exit_with_parent() -> None:
    """The supervisor stops the service with its JVM; a supervisor killed outright
    cannot, so the service also goes when its parent does (no orphan serving ticks
    for a server that is gone)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _answer(client: Connection, conn: Any, cluster_id: int) -> None:
    try:
        request = client.recv()
    except (OSError, EOFError):
        return
    answer = handle(conn, cluster_id, request)
    try:
        client.send(answer)
    except OSError:
        pass  # the caller is gone (an Airflow task killed): the tick committed anyway


def handle(conn: Any, cluster_id: int, request: dict[str, Any]) -> dict[str, Any]:
    """One request: ``{"op": "tick", "object": index or None, "at": ms or None,
    "full_refresh": bool, "view_means_default_index": bool}`` ticks this cluster's
    indexes (or one of them, or a view's). A tick without ``at`` ticks to the time
    recorded for its ``"run"`` (catalog/runs.py; recorded now if it has none), or
    without one to every committed write; ``{"op": "run_time", "run": key}`` only
    records or reads that time. Errors come back as data."""
    import mzflow
    from mzflow.catalog import runs
    from mzflow.catalog.store import now_ms
    from mzflow.maintain import ticks

    reports: list[dict[str, Any]] = []  # those done before an error come back too
    try:
        snap = conn.store.snapshot()
        if request.get("op") == "run_time":
            return {"run_time": runs.run_time(conn.store.engine, request["run"], now_ms())}
        mine = snap.cluster(cluster_id)
        if mine is None:
            return {"not_mine": "the cluster was dropped"}
        obj = request.get("object")
        if obj is not None and request.get("view_means_default_index"):
            obj = ticks.default_index_name(snap, obj)
        indexes = ticks.indexes_to_tick(snap, mine.name, obj)
        if obj is not None and any(i.cluster_id != cluster_id for i in indexes):
            return {"not_mine": f"{obj} is not maintained in cluster {mine.name}"}
        if request.get("at") is not None:
            at = int(request["at"])
        elif request.get("run"):
            at = runs.run_time(conn.store.engine, request["run"], now_ms())
        else:
            at = snap.read_ts
        for index in indexes:
            for report in conn.tick(object=index.name, at=at,
                                    full_refresh=bool(request.get("full_refresh"))):
                log.info("ticked %s", report.line())
                reports.append(report.as_dict())
        return {"reports": reports, "at": at}
    except mzflow.Error as e:
        return {"reports": reports, "error": {
            "type": type(e).__name__, "code": e.code, "message": e.message, "hint": e.hint,
            "detail": e.detail}}
    except Exception as e:  # the service goes on; the caller reports it
        log.exception("tick failed")
        return {"reports": reports, "error": {
            "type": type(e).__name__, "code": "XX000", "message": str(e), "hint": None,
            "detail": None}}


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
