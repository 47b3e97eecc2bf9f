"""A cluster's warm Spark: one Spark Connect server per cluster, outliving any one tick.

In Materialize a cluster is long-lived compute. Here every tick used to start its own
JVM (6-8 s idle, 30-80 s under load), which made freshness the JVM's start-up. Now the
ticks of a SIZEd cluster connect to the cluster's server:
- ``CREATE CLUSTER c (… SPARK = 'sc://host:port')`` names one that runs anywhere;
- otherwise mzflow starts a local one on first use (a tick, ``mzflow cluster start``),
  sized from the cluster's SIZE, and every later tick of that cluster reuses it, from
  the CLI, a session or an Airflow task alike;
- VIRTUAL clusters, and every cluster when ``cluster_spark = "in-process"`` (or
  ``MZFLOW_CLUSTER_SPARK``), keep the process's own Spark;
- an explicitly configured Spark master (``MZFLOW_SPARK_MASTER``, Airflow's
  ``mzflow_spark`` connection) overrides both.

A managed server lives in ``<home>/clusters/<cluster id>/``, run by a small supervisor
(``python -m mzflow.clusters.supervisor``) that owns the JVM, writes
``server.json`` once the server answers, and stops it when the cluster has been idle
for ``cluster_idle_seconds`` (each use touches ``last_used``), when the JVM dies, or on
SIGTERM (``mzflow cluster stop``, DROP CLUSTER). Starting takes an exclusive file
lock, so two processes starting the same cluster's server end with one server, and
only if the machine's warm processes fit its memory budget with it (budget.py).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from mzflow import config
from mzflow.catalog import sizes
from mzflow.catalog.model import Cluster, Snapshot
from mzflow.clusters import budget
from mzflow.engine import spark
from mzflow.errors import SparkFailure
from mzflow.storage.processes import process_alive

STARTED_LINE = "Spark Connect server started"
SERVER_FILE, LAST_USED, LOG, LOCK = "server.json", "last_used", "server.log", "lock"
EXIT_FILE = "exit.json"  # written by the supervisor when the JVM died by itself


class ClusterSparkError(SparkFailure):
    code = "08006"  # connection_failure


@dataclass(frozen=True)
class Endpoint:
    url: str
    started_at: int | None  # ms; a restarted server is a new endpoint (new sessions)


def folder(home: Path, cluster: Cluster) -> Path:
    return home / "clusters" / str(cluster.id)


def endpoint_for(cfg: config.Config, cluster: Cluster | None,
                 tuning: config.Tuning | None = None) -> Endpoint | None:
    """Where ``cluster``'s ticks run: None for the process's own Spark. A managed server
    that would have to start and does not fit the machine's warm memory budget raises
    ``budget.OverBudget`` (its notice says why); its ticks then run in process."""
    if cluster is None or cluster.virtual or cfg.spark_master != "local[*]":
        return None
    named = cluster.spark
    if named:
        check_reachable(cluster, named)
        return Endpoint(named, None)
    if cfg.cluster_spark != "managed":
        return None
    return ensure(cfg.home, cluster, cfg.cluster_idle_seconds, catalog_url=cfg.catalog_url,
                  admission=budget.Ask(budget.registry_folder(cfg), tuning or config.tuning()))


def _host_port(url: str) -> tuple[str, int]:
    rest = url.removeprefix("sc://").split("/")[0].split(";")[0]
    host, _, port = rest.rpartition(":")
    return host, int(port)


def _answers(url: str, timeout: float = 2.0) -> bool:
    host, port = _host_port(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def check_reachable(cluster: Cluster, url: str) -> None:
    if not _answers(url):
        raise ClusterSparkError(
            f'cluster "{cluster.name}": its Spark Connect endpoint {url} is unreachable',
            hint="start the server, or point the cluster elsewhere with ALTER CLUSTER "
                 f"{cluster.name} SET (SPARK = 'sc://host:port')")


def read_server(home: Path, cluster: Cluster) -> dict[str, object] | None:
    """The running server's record, if its supervisor is alive and the port answers."""
    path = folder(home, cluster) / SERVER_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not process_alive(int(record["pid"])) or not _answers(str(record["url"])):
        return None
    return dict(record)


@contextmanager
def _locked(where: Path) -> Iterator[None]:
    where.mkdir(parents=True, exist_ok=True)
    with open(where / LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def died_since(home: Path, cluster: Cluster, since_ms: int, wait: float = 30.0
               ) -> int | None:
    """The exit code of the cluster's server JVM if it died at or after ``since_ms``.

    A failed call returns before the supervisor has recorded the death: after an
    OutOfMemoryError the JVM runs Spark's shutdown hooks (seconds under load) with its
    port still answering, and the supervisor polls once a second. So this waits while
    the supervisor lives, up to ``wait``; a supervisor that is gone records nothing more.
    """
    where = folder(home, cluster)
    try:
        supervisor: int | None = int(json.loads((where / SERVER_FILE).read_text())["pid"])
    except (OSError, ValueError, KeyError):
        supervisor = None  # already gone, or it removed its record just before exit.json
    deadline = time.monotonic() + wait
    grace = time.monotonic() + 3.0  # for an exit.json being written right now
    while True:
        try:
            exited = json.loads((where / EXIT_FILE).read_text())
            if int(exited["at"]) >= since_ms:
                return int(exited["code"])
        except (OSError, ValueError, KeyError):
            pass
        now = time.monotonic()
        if now >= deadline:
            return None
        if (supervisor is None or not process_alive(supervisor)) and now >= grace:
            return None
        time.sleep(0.2)


def memory(cluster: Cluster, endpoint: Endpoint | None) -> spark.Memory:
    """Whose memory the cluster's Spark work uses, for an out-of-memory error."""
    if endpoint is None:
        return spark.in_process_memory(cluster.name)
    if cluster.spark:
        return spark.Memory(cluster.name, f"configured at {endpoint.url}",
                            f"give the Spark at {endpoint.url} more memory")
    size = sizes.of_cluster(cluster.virtual, cluster.size)
    up = sizes.bigger(size)
    more = (f"ALTER CLUSTER {cluster.name} SET (SIZE = '{up.name}')" if up
            else "split the work into smaller views")
    return spark.Memory(cluster.name, f"{size.executor_memory}, from SIZE '{size.name}'",
                        f"give the cluster more memory: {more}")


def touch(home: Path, cluster: Cluster) -> None:
    (folder(home, cluster) / LAST_USED).touch()


def ensure(home: Path, cluster: Cluster, idle_seconds: float, port: int | None = None,
           timeout: float = 180.0, catalog_url: str | None = None,
           admission: budget.Ask | None = None) -> Endpoint:
    """The cluster's running server, started if there is none (or it died). With
    ``catalog_url``, the server's supervisor also runs the cluster's tick service
    (tick_service.py) for that catalog. With ``admission``, a server is started only if
    it fits the machine's warm memory budget (else ``budget.OverBudget``)."""
    where = folder(home, cluster)
    with _locked(where):
        record = read_server(home, cluster)
        if record is None:
            record = _start(where, cluster, idle_seconds, port, timeout,
                            None if catalog_url is None else
                            {"home": str(home), "catalog_url": catalog_url,
                             "cluster": cluster.name, "cluster_id": cluster.id},
                            admission, home)
        touch(home, cluster)
    return Endpoint(str(record["url"]), int(str(record["started_at"])))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(cluster: Cluster, port: int) -> list[str]:
    """spark-submit of a Spark Connect server sized from the cluster's SIZE (local mode:
    the driver is the executor, so it gets the size's memory and cores)."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    submit = Path(spec.origin).parent / "bin" / "spark-submit"
    size = sizes.of_cluster(cluster.virtual, cluster.size)
    log4j = Path(__file__).resolve().parents[1] / "conf" / "log4j2.properties"
    return [str(submit), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", f"mzflow-cluster-{cluster.name}",
            "--master", f"local[{size.executor_cores}]",
            "--driver-memory", size.executor_memory,
            "--driver-java-options", f"-Dlog4j2.configurationFile={log4j} "
                                     "-Dderby.system.home=/tmp",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.sql.shuffle.partitions={size.shuffle_partitions}"]


def _start(where: Path, cluster: Cluster, idle_seconds: float, port: int | None,
           timeout: float, ticks: dict[str, object] | None = None,
           admission: budget.Ask | None = None, home: Path | None = None
           ) -> dict[str, object]:
    port = port or _free_port()
    url = f"sc://127.0.0.1:{port}"
    if _answers(url, 0.5):
        raise ClusterSparkError(f'cluster "{cluster.name}": cannot start its Spark Connect '
                                f"server at {url}: the port is already taken",
                                hint="stop what listens there, or choose another port")
    (where / SERVER_FILE).unlink(missing_ok=True)
    (where / LAST_USED).touch()
    log = where / LOG
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    spec: dict[str, object] = {
        "cluster": cluster.name, "url": url, "port": port, "idle_seconds": idle_seconds,
        "command": command(cluster, port), "ticks": ticks}
    admitted: AbstractContextManager[Callable[[int], Path] | None] = nullcontext()
    if admission is not None:  # the supervisor removes its entry when it stops
        admitted = budget.admit(admission, home or where.parents[1], cluster)
        spec["registry"] = str(admission.registry)
    with admitted as register, open(log, "wb") as out:
        (where / "spec.json").write_text(json.dumps(spec))
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "mzflow.clusters.supervisor", str(where)],
            env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)  # outlives this process, and its Ctrl-C
        if register is not None:
            register(supervisor.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = None
        try:
            record = json.loads((where / SERVER_FILE).read_text())
        except (OSError, ValueError):
            pass
        if record is not None and _answers(url, 0.5):
            return dict(record)
        if supervisor.poll() is not None:
            break
        time.sleep(0.2)
    else:
        os.killpg(supervisor.pid, signal.SIGTERM)
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    raise ClusterSparkError(f'cluster "{cluster.name}": its Spark Connect server at {url} '
                            "did not start", detail=tail.strip()[-1500:] or None,
                            hint=f"its log is {log}")


def stop(home: Path, cluster: Cluster, timeout: float = 60.0) -> bool:
    """Stop the cluster's managed server (False: none was running)."""
    where = folder(home, cluster)
    if not where.exists():
        return False
    with _locked(where):
        try:
            record = json.loads((where / SERVER_FILE).read_text())
        except (OSError, ValueError):
            return False
        pid = int(record["pid"])
        if not process_alive(pid):
            (where / SERVER_FILE).unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if process_alive(pid):
            os.killpg(pid, signal.SIGKILL)
        (where / SERVER_FILE).unlink(missing_ok=True)
    return True


def status(home: Path, cluster: Cluster) -> tuple[str | None, str, int | None, int | None]:
    """(endpoint, state, started_at ms, last_used ms) for mz_cluster_replicas."""
    named = cluster.spark
    if cluster.virtual:
        return None, "in-process", None, None
    if named:
        return named, "external", None, None
    where = folder(home, cluster)
    record = read_server(home, cluster)
    try:
        used = int((where / LAST_USED).stat().st_mtime * 1000)
    except OSError:
        used = None
    if record is None:
        return None, "stopped", None, used
    return str(record["url"]), "running", int(str(record["started_at"])), used


def replica_rows(snap: Snapshot, home: Path) -> list[tuple[object, ...]]:
    """mz_cluster_replicas: one per cluster, with where its ticks run."""
    out: list[tuple[object, ...]] = []
    for c in snap.clusters:
        endpoint, state, started, used = status(home, c)
        out.append((f"r{c.id}", "r1", c.id, None if c.virtual else c.size or
                    sizes.DEFAULT_SIZE, endpoint, state, _utc(started), _utc(used)))
    return out


def _utc(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
