"""The supervisor of a cluster's server (clusters/supervisor.py) never leaves its JVM
behind: a home deleted under a running server (a benchmark's temporary homes, removed
after it) crashed the supervisor on its next touch of the folder, and four orphaned
Spark Connect servers with 2-4 GB heaps each outlived it. Here the "JVM" is a small
HTTP server, so no Spark starts."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mzflow.storage.processes import process_alive

pytestmark = pytest.mark.slow  # starts processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, done: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["removed", "sigterm"])
def test_the_jvm_never_outlives_its_supervisor(tmp_path: Path, how: str) -> None:
    where = tmp_path / "home" / "clusters" / "2"
    where.mkdir(parents=True)
    port = _free_port()
    spec = {"command": [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            "port": port, "url": f"sc://127.0.0.1:{port}", "cluster": "etl",
            "idle_seconds": 3600, "ticks": False}
    (where / "spec.json").write_text(json.dumps(spec))
    supervisor = subprocess.Popen([sys.executable, "-m", "mzflow.clusters.supervisor",
                                   str(where)], stdout=subprocess.PIPE, text=True)
    try:
        _wait("the server published", lambda: (where / "server.json").exists())
        jvm = int(json.loads((where / "server.json").read_text())["jvm_pid"])
        assert process_alive(jvm)
        if how == "removed":
            shutil.rmtree(tmp_path / "home")
        else:
            supervisor.terminate()
        out, _ = supervisor.communicate(timeout=60)
        assert supervisor.returncode == 0, out
        assert ("its folder was removed" if how == "removed" else "stopped (SIGTERM)") in out
        _wait("the JVM gone", lambda: not process_alive(jvm))
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
