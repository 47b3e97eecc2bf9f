"""A cluster's tick service, the serving side (the callers' side, and why the service
exists: clusters/tick_service.py). The cluster's supervisor runs it beside its JVM
(``python -m mzflow.session.tick_server <folder>``): one session, kept warm, that runs
the ticks callers send it, one at a time, for its own cluster only.
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
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from mzflow.clusters.tick_service import SERVICE_FILE

log = logging.getLogger("mzflow.tick_service")


def serve(where: Path) -> int:
    spec = json.loads((where / "spec.json").read_text())["ticks"]
    home, catalog_url, cluster_id = spec["home"], spec["catalog_url"], int(spec["cluster_id"])
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s tick service: %(message)s")
    _exit_with_parent()
    from mzflow.session.connection import connect

    conn = connect(home, catalog_url=catalog_url)
    key = secrets.token_bytes(32)
    with Listener(("127.0.0.1", 0), authkey=key) as listener:
        record = {"pid": os.getpid(), "port": listener.address[1], "key": key.hex(),
                  "cluster": spec["cluster"], "cluster_id": cluster_id,
                  "home": home, "catalog_url": catalog_url}
        _publish(where, record)
        log.info("cluster %s: serving ticks on port %d", spec["cluster"], record["port"])

        def renamed(name: str) -> None:
            # Callers find the service by its cluster's name: after a swap, by the new.
            if name != record["cluster"]:
                log.info("cluster %s is now named %s", record["cluster"], name)
                record["cluster"] = name
                _publish(where, record)
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
                    _answer(client, conn, cluster_id, renamed)
            finally:
                state["busy"] = False
    return 0


def _publish(where: Path, record: dict[str, Any]) -> None:
    tmp = where / f"{SERVICE_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, where / SERVICE_FILE)


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


def _answer(client: Connection, conn: Any, cluster_id: int,
            renamed: Callable[[str], None]) -> None:
    try:
        request = client.recv()
    except (OSError, EOFError):
        return
    answer = handle(conn, cluster_id, request, renamed)
    try:
        client.send(answer)
    except OSError:
        pass  # the caller is gone (an Airflow task killed): the tick committed anyway


def handle(conn: Any, cluster_id: int, request: dict[str, Any],
           renamed: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One request: ``{"op": "tick", "object": index or None, "at": ms or None,
    "full_refresh": bool, "view_means_default_index": bool}`` ticks this cluster's
    indexes (or one of them, or a view's). A tick without ``at`` ticks to the time
    recorded for its ``"run"`` (catalog/runs.py; recorded now if it has none), or
    without one to every committed write; ``{"op": "run_time", "run": key}`` only
    records or reads that time. Errors come back as data. A request naming a
    ``"cluster"`` that is no longer this one's name (ALTER CLUSTER … SWAP WITH) is not
    this service's; ``renamed`` learns the cluster's name now."""
    from mzflow.catalog import names, runs
    from mzflow.catalog.store import now_ms
    from mzflow.errors import Error
    from mzflow.maintain import ticks

    reports: list[dict[str, Any]] = []  # those done before an error come back too
    try:
        snap = conn.store.snapshot()
        if request.get("op") == "run_time":
            return {"run_time": runs.run_time(conn.store.engine, request["run"], now_ms())}
        mine = snap.cluster(cluster_id)
        if mine is None:
            return {"not_mine": "the cluster was dropped"}
        if renamed is not None:
            renamed(mine.name)
        if request.get("cluster") not in (None, mine.name):
            # Asked by the old name: ticking this cluster would tick the wrong one.
            return {"not_mine": f"cluster {request['cluster']} is now named {mine.name}"}
        obj = request.get("object")
        if obj is not None and request.get("view_means_default_index"):
            obj = ticks.default_index_name(snap, obj)
        indexes = ticks.indexes_to_tick(snap, mine.name, obj)
        if obj is not None and any(i.cluster_id != cluster_id for i in indexes):
            return {"not_mine": f"{obj} is not maintained in cluster {mine.name}"}
        # The cluster's sources advance first (session/sources.py): once per run (its
        # time keys the step, so a run's other tasks and its retries add nothing), or
        # once per cluster tick without one, before its time is picked.
        if request.get("at") is not None:
            at = int(request["at"])
            conn.feed_sources(mine.name, at)
        elif request.get("run"):
            at = runs.run_time(conn.store.engine, request["run"], now_ms())
            conn.feed_sources(mine.name, at)
        else:
            if obj is None:
                conn.feed_sources(mine.name)
            at = conn.store.snapshot().read_ts
        for index in indexes:
            # By a name that resolves whatever the search path: outside public, bare
            # names are unknown (every tick of such an index failed here).
            for report in conn.tick(object=names.short(index), at=at,
                                    full_refresh=bool(request.get("full_refresh"))):
                log.info("ticked %s", report.line())
                reports.append(report.as_dict())
        return {"reports": reports, "at": at}
    except Error as e:
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
