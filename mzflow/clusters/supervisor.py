"""The supervisor of one cluster's Spark Connect server (see cluster_servers.py).

``python -m mzflow.clusters.supervisor <folder>`` runs the JVM that
``<folder>/spec.json`` describes, publishes ``server.json`` once the server answers,
and stops the JVM when the cluster has been idle for ``idle_seconds`` (the mtime of
``last_used``), on SIGTERM, or when the JVM dies; ``server.json`` goes with it. It
imports neither Spark nor the catalog: it must stay small for as long as it runs.

Once the server answers it also runs the cluster's tick service (tick_service.py), a
second child that holds the runtime warm, restarts it if it dies, and stops it with
the JVM. A tick service that keeps dying is given up on: callers then tick
themselves, as they do without one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mzflow import config

POLL_SECONDS = 1.0
SERVICE_RESTARTS = 3  # then callers tick themselves (tick_service.py's fallback)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _idle_for(where: Path) -> float:
    try:
        return time.time() - (where / "last_used").stat().st_mtime
    except OSError:
        return 0.0


def _start_service(where: Path) -> subprocess.Popen[bytes]:
    # The service ticks on this cluster's server only: no explicit Spark master
    # (that would give it a JVM of its own), and the managed servers on.
    env = config.child_environment(os.environ, spark_master=None, cluster_spark="managed")
    (where / "ticks.json").unlink(missing_ok=True)
    return subprocess.Popen([sys.executable, "-m", "mzflow.session.tick_server", str(where)],
                            stdin=subprocess.DEVNULL, env=env)


def _stop(child: subprocess.Popen[bytes] | None) -> None:
    if child is None or child.poll() is not None:
        return
    child.terminate()  # the service finishes answering the tick it is running first
    try:
        child.wait(60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def run(where: Path) -> int:
    spec = json.loads((where / "spec.json").read_text())
    stop: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is not for us
    jvm = subprocess.Popen(spec["command"], stdin=subprocess.DEVNULL)
    try:
        return _supervise(where, spec, jvm, stop)
    finally:
        # Whatever ended the watch (its folder removed with the home under it crashed
        # it: FileNotFoundError), no JVM outlives its supervisor: four orphaned servers,
        # 8 GB of heap, were found after a benchmark's homes were deleted.
        if jvm.poll() is None:
            jvm.kill()
            jvm.wait()


def _supervise(where: Path, spec: dict[str, Any], jvm: subprocess.Popen[bytes],
               stop: list[str]) -> int:
    service: subprocess.Popen[bytes] | None = None
    service_starts = 0
    started = int(time.time() * 1000)
    published = False
    reason = "the JVM exited"
    try:
        while jvm.poll() is None:
            if stop:
                reason = "stopped (SIGTERM)"
                break
            if not where.exists():
                reason = "its folder was removed"
                break
            if not published and _answers(int(spec["port"])):
                record = {"pid": os.getpid(), "jvm_pid": jvm.pid, "url": spec["url"],
                          "port": spec["port"], "cluster": spec["cluster"], "started_at": started}
                tmp = where / "server.json.tmp"
                tmp.write_text(json.dumps(record))
                os.replace(tmp, where / "server.json")
                (where / "last_used").touch()  # idle from now: the start-up is no idleness
                published = True
                print(f"mzflow: cluster {spec['cluster']} serving at {spec['url']}", flush=True)
            if published and spec.get("ticks") and (service is None or service.poll() is not None):
                if service_starts <= SERVICE_RESTARTS:
                    if service is not None:
                        print(f"mzflow: tick service exited with code {service.returncode}",
                              flush=True)
                    service, service_starts = _start_service(where), service_starts + 1
            if service is not None and service.poll() is None and not (
                    where / "ticks.json").exists():
                (where / "last_used").touch()  # the service's start-up is no idleness either
            if published and _idle_for(where) > float(spec["idle_seconds"]):
                reason = f"idle for {spec['idle_seconds']} s"
                break
            time.sleep(POLL_SECONDS)
    except OSError as e:  # its folder removed under it (a deleted home)
        reason = f"its folder failed: {e}"
    if reason == "the JVM exited":
        # Why it died is for the tick that was running on it to report (exit code 52:
        # Spark stopped it after an OutOfMemoryError): recorded before the tick service
        # is stopped, since that tick may be the service's, which then answers first.
        exited = {"code": jvm.returncode, "at": int(time.time() * 1000)}
        try:
            (where / "exit.json").write_text(json.dumps(exited))
        except OSError:
            pass
        reason = f"the JVM exited with code {jvm.returncode}"
    try:
        (where / "ticks.json").unlink(missing_ok=True)  # no new callers
    except OSError:
        pass  # its folder is gone
    _stop(service)
    try:
        current = json.loads((where / "server.json").read_text())
        if current.get("pid") == os.getpid():
            (where / "server.json").unlink()
    except (OSError, ValueError):
        pass
    if jvm.poll() is None:
        jvm.terminate()
        try:
            jvm.wait(30)
        except subprocess.TimeoutExpired:
            jvm.kill()
            jvm.wait()
    if spec.get("registry"):  # its memory is free for another cluster (budget.py)
        (Path(spec["registry"]) / f"{os.getpid()}.json").unlink(missing_ok=True)
    print(f"mzflow: cluster {spec['cluster']} server stopped: {reason}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
