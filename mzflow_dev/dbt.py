"""dbt against ``mzflow serve``, for tests: the dbt venv, a server on a home, dbt's env.

``tests/test_dbt.py`` (the example project) and ``tests/test_dbt_bluegreen.py`` (the
blue/green macros) share it: each runs dbt-materialize, from its own venv
(``scripts/ensure-dbt.sh``), against a server this process starts on a loopback port.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "dbt-pw"


def dbt_executable() -> Path:
    """dbt in its own venv, built on first use (``scripts/ensure-dbt.sh``)."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "ensure-dbt.sh")],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/ensure-dbt.sh failed: {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class Served:
    """A running server on ``home`` and the dbt project that targets it."""

    port: int
    home: Path
    project: Path
    env: dict[str, str]
    dbt: Path

    def url(self, user: str = "dbt", password: str = PASSWORD) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/materialize"

    def dbt_run(self, *args: str) -> str:
        """``dbt <args>``, which must exit 0; its stdout."""
        done = subprocess.run([str(self.dbt), *args, "--no-version-check"],
                              cwd=self.project, env=self.env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        return done.stdout

    def sql(self, query: str, *, cluster: str | None = None, user: str = "dbt",
            password: str = PASSWORD) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self.url(user, password), autocommit=True) as conn:
            if cluster is not None:
                conn.execute(f"SET cluster = {cluster}")
            cur = conn.execute(query)
            return cur.fetchall() if cur.description is not None else []


@contextmanager
def serving(home: Path, project: Path, **env: str) -> Iterator[Served]:
    """``mzflow serve`` on ``home`` in this process (a Spark an earlier test of the
    process started serves it too), with dbt's env: the role ``dbt`` (which the caller
    creates, with :data:`PASSWORD`), the project as its profiles folder, and ``env``."""
    from mzflow import config
    from mzflow.server import make_server

    dbt = dbt_executable()
    server = make_server(config.load(str(home)), port=0)
    server.start()
    try:
        # dbt's own venv: nothing of this checkout's on its path
        run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        run_env |= {"DBT_MZFLOW_PORT": str(server.port), "DBT_MZFLOW_USER": "dbt",
                    "DBT_ENV_SECRET_MZFLOW_PASSWORD": PASSWORD,
                    "DBT_PROFILES_DIR": str(project),
                    "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", **env}
        yield Served(server.port, home, project, run_env, dbt)
    finally:
        server.stop()
