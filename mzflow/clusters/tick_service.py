"""A cluster's tick service: its ticks run in one warm Python process, next to its JVM.

A warm Spark Connect server took the JVM's start-up out of a tick, but every
``mzflow tick --cluster c`` and every Airflow tick task was still a new Python process
that imported the runtime (sqlglot, SQLAlchemy, pyarrow, pandas and pyspark's Connect
client: 1-2 s quiet, several seconds loaded) and opened a new server-side session whose
first queries are slow. In Materialize a cluster's replica keeps its dataflows warm;
here the cluster's supervisor runs this service beside its JVM
(``python -m mzflow.session.tick_server <folder>``): it imports the runtime once,
keeps one catalog connection and one Connect session, and runs the ticks that callers
send it, one at a time. The caller imports only the standard library
(``multiprocessing.connection``) and prints what comes back.

It is an accelerator, never the only way: a caller that finds no service, or loses it
mid-tick (a tick is one idempotent Delta commit, so a kill half way loses nothing),
runs the tick itself exactly as before. The service serves only its own cluster, only
for the home and catalog it was started for, and only callers that present the key it
wrote (mode 0600) next to its address.

This module is the callers' side, and what both sides agree on. The service itself is
a session (session/tick_server.py): the session manages the cluster servers, so the
service sits above it, beside the CLI, not in clusters/.
"""

from __future__ import annotations

import json
import logging
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

from mzflow.storage.processes import process_alive

SERVICE_FILE = "ticks.json"  # address, key and what it serves; written once it listens
log = logging.getLogger("mzflow.tick_service")


# -- the caller's side: standard library only ------------------------------------------

def find(home: Path, catalog_url: str, cluster: str) -> dict[str, Any] | None:
    """The running service of ``cluster`` (a name) in ``home``, if there is one that
    serves the same catalog."""
    path = find_file(home, catalog_url, cluster)
    try:
        return None if path is None else dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError):
        return None


def find_file(home: Path, catalog_url: str, cluster: str) -> str | None:
    """Where :func:`find`'s service keeps its record (address and key): what a deferred
    Airflow tick hands its trigger instead of the key itself (airflow/triggers.py)."""
    for path in (home / "clusters").glob(f"*/{SERVICE_FILE}"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (record.get("cluster") == cluster and record.get("catalog_url") == catalog_url
                and process_alive(int(record.get("pid", 0)))):
            return str(path)
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
    # The name asked for goes along: a service finds its cluster by id, and after an
    # ALTER CLUSTER … SWAP WITH its record's name belongs to the other cluster.
    answer = None if record is None else call(record, {**request, "cluster": cluster})
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
