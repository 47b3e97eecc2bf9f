"""The supervisor of one cluster's Spark Connect server (see cluster_servers.py).

``python -m mzflow.runtime.cluster_supervisor <folder>`` runs the JVM that
``<folder>/spec.json`` describes, publishes ``server.json`` once the server answers,
and stops the JVM when the cluster has been idle for ``idle_seconds`` (the mtime of
``last_used``), on SIGTERM, or when the JVM dies; ``server.json`` goes with it. It
imports neither Spark nor the catalog: it must stay small for as long as it runs.
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

POLL_SECONDS = 1.0


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


def run(where: Path) -> int:
    spec = json.loads((where / "spec.json").read_text())
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append("SIGTERM"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is not for us
    jvm = subprocess.Popen(spec["command"], stdin=subprocess.DEVNULL)
    started = int(time.time() * 1000)
    published = False
    reason = "the JVM exited"
    while jvm.poll() is None:
        if stop:
            reason = "stopped (SIGTERM)"
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
        if published and _idle_for(where) > float(spec["idle_seconds"]):
            reason = f"idle for {spec['idle_seconds']} s"
            break
        time.sleep(POLL_SECONDS)
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
    if reason == "the JVM exited":
        # Why it died is for the tick that was running on it to report (exit code 52:
        # Spark stopped it after an OutOfMemoryError).
        exited = {"code": jvm.returncode, "at": int(time.time() * 1000)}
        (where / "exit.json").write_text(json.dumps(exited))
        reason = f"the JVM exited with code {jvm.returncode}"
    print(f"mzflow: cluster {spec['cluster']} server stopped: {reason}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
