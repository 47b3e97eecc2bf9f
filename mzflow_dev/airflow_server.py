"""A real Airflow 3 for tests and scripts: api-server, scheduler and dag-processor (and,
when asked, the triggerer) on a private AIRFLOW_HOME and port (see tests/test_airflow.py
and scripts/airflow_screenshot.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

THROWAWAY = "mzflow-airflow-"


@contextmanager
def airflow_in_process(own_home: Path | None) -> Iterator[None]:
    """Around a test module that imports Airflow in-process: Airflow adds a stdout handler
    to the root logger and lowers its level, which this undoes, so later modules log as
    they would without it; ``own_home`` (its throwaway home, if it made one) goes at exit."""
    import atexit
    import logging
    import shutil

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        if own_home is not None:
            # At exit, not now: this process's Airflow read its home (database, password
            # file) at first import, and later modules of the session still use it.
            atexit.register(shutil.rmtree, own_home, ignore_errors=True)


def throwaway_airflow_home(suffix: str = "", *, reuse: bool = True) -> Path | None:
    """Point this process's Airflow at a new throwaway home, before Airflow is imported.

    Airflow reads AIRFLOW_HOME and its database URL once, at first import, so a test
    module calls this above its imports (it must never touch the user's ~/airflow).
    With ``reuse``, a throwaway home already in place (tests/test_airflow.py's, whose
    session database its tests need kept) is left as it is and None is returned;
    otherwise the new folder is returned, for its caller to remove.
    """
    if reuse and Path(os.environ.get("AIRFLOW_HOME", "/")).name.startswith(THROWAWAY):
        return None
    home = Path(tempfile.mkdtemp(prefix=f"{THROWAWAY}{suffix}"))
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    })
    return home


def airflow_env(env: dict[str, str], af: Path) -> dict[str, str]:
    """``env`` with Airflow pointed at the home ``af`` (its SQLite database and dags/)."""
    # No example DAGs: their scheduled runs took the LocalExecutor's slots and the CPU
    # from the runs measured (bench/warm_cluster.py's REST runs waited on them).
    return {**env, "AIRFLOW_HOME": str(af), "AIRFLOW__CORE__DAGS_FOLDER": str(af / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{af / 'airflow.db'}"}


class AirflowServer:
    """Airflow 3's three long-running processes on a private home and port, each in its
    own process group so teardown stops exactly what it started."""

    def __init__(self, af: Path, env: dict[str, str]):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://localhost:{self.port}"
        self.af = af
        self.env = {**airflow_env(env, af),
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                    "AIRFLOW__API__BASE_URL": self.base,
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
                    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                    # LocalExecutor forks this many workers up front: keep the machine free.
                    "AIRFLOW__CORE__PARALLELISM": "4",
                    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
                    "AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL": "5",
                    # Every component signs and checks the same task-execution tokens.
                    "AIRFLOW__API_AUTH__JWT_SECRET": "mzflow-test-jwt",
                    "AIRFLOW__API__SECRET_KEY": "mzflow-test-key"}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None

    def start(self, triggerer: bool = False) -> None:
        """With ``triggerer``, also Airflow's triggerer: asset watchers (event-driven
        scheduling, tests/test_airflow_assets.py) and deferred tasks run there."""
        airflow = str(Path(sys.executable).parent / "airflow")
        commands = {"api-server": [airflow, "api-server", "--port", str(self.port),
                                   "--workers", "1"],
                    "scheduler": [airflow, "scheduler"],
                    "dag-processor": [airflow, "dag-processor"]}
        if triggerer:
            commands["triggerer"] = [airflow, "triggerer"]
        for name, cmd in commands.items():
            log = (self.af / f"{name}.log").open("wb")
            self.procs[name] = subprocess.Popen(cmd, env=self.env, stdout=log,
                                                stderr=subprocess.STDOUT,
                                                start_new_session=True, cwd=self.af)

    def stop(self) -> None:
        import signal

        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(f"== {n}\n" + (self.af / f"{n}.log").read_text(errors="replace")[-3000:]
                         for n in self.procs)

    def request(self, method: str, path: str, body: object = None) -> object:
        import urllib.request

        if self._token is None and path != "/auth/token":
            self._token = self.request("GET", "/auth/token")["access_token"]  # type: ignore[index]
        req = urllib.request.Request(
            self.base + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json",
                     **({"Authorization": f"Bearer {self._token}"} if self._token else {})})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def exists(self, path: str) -> bool:
        """Whether a GET of ``path`` answers (a DAG parsed, say)."""
        import urllib.error

        try:
            self.request("GET", path)
            return True
        except (urllib.error.URLError, OSError):  # 404, or the server not up yet
            return False

    def wait_for(self, what: str, check: object, timeout: float, every: float = 2.0
                 ) -> object:
        """Poll ``check()`` every ``every`` s until it returns something truthy; fail with
        the logs."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                pytest.fail(f"Airflow {dead} exited while waiting for {what}\n{self.logs()}")
            try:
                got = check()  # type: ignore[operator]
            except OSError:
                got = None
            if got:
                return got
            time.sleep(every)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{self.logs()}")

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        from urllib.parse import quote

        state = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}")
        s = state["state"]  # type: ignore[index]
        return s if s in ("success", "failed") else None

    def runs(self, dag_id: str) -> list[dict[str, object]]:
        got = self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=run_after")
        return got["dag_runs"]  # type: ignore[index,no-any-return]


def parse_dag_file(loader: Path, home: Path) -> tuple[str, str]:
    """Parse a DAG file in a fresh process: (its mzflow DAG ids, the engines loaded)."""
    code = textwrap.dedent(f"""
        import runpy, sys
        g = runpy.run_path({str(loader)!r})
        print(sorted(k for k in g if k.startswith("mzflow_")))
        print([m for m in ("pyspark", "deltalake", "great_expectations", "py4j")
               if m in sys.modules])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "MZFLOW_HOME": str(home)}, timeout=120)
    assert out.returncode == 0, out.stderr
    dag_ids, heavy = out.stdout.strip().splitlines()[-2:]
    return dag_ids, heavy
