"""A throwaway PostgreSQL server for tests: initdb into a temp dir, start, stop.

Used by the session-scoped ``pg_url`` fixture in ``conftest.py``. The binaries come
from Debian's ``postgresql`` package (``scripts/ensure-postgres.sh`` installs it).
PostgreSQL refuses to run as root, so as root every server command runs as the
``postgres`` system user (``runuser``), and the data directory belongs to it.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ENSURE_SCRIPT = "scripts/ensure-postgres.sh"
RUN_AS = "postgres"  # the system user that owns and runs the server when we are root
SUPERUSER = "postgres"  # the database superuser initdb creates


def find_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` with initdb and pg_ctl, else from PATH."""

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    for bindir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True):
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        bindir = Path(pg_ctl).resolve().parent
        if (bindir / "initdb").is_file():
            return bindir
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One PostgreSQL cluster in a temp dir, listening on 127.0.0.1 with trust auth."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="mzflow-pg-"))  # short: socket paths
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self._as_root = os.geteuid() == 0
        if self._as_root:
            _ensure_system_user(RUN_AS)
            user = pwd.getpwnam(RUN_AS)
            os.chown(self.root, user.pw_uid, user.pw_gid)

    # -- lifecycle --------------------------------------------------------------------

    def start(self, attempts: int = 3) -> None:
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                  "-E", "UTF8", "--locale=C", "--no-sync")
        for attempt in range(attempts):
            self.port = free_port()
            # fsync off: test data need not survive a machine crash, only a reconnect.
            options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            proc = self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log),
                             "-w", "-t", "60", "-o", options, check=False)
            if proc.returncode == 0:
                return
            # Most likely the free port was taken in between: retry on another one.
            if attempt == attempts - 1:
                raise RuntimeError(f"pg_ctl start failed:\n{proc.stdout}\n{self.log_tail()}")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w",
                          check=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    # -- databases --------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """Create a database and return its SQLAlchemy URL."""
        return create_database(self.url(), name)

    # -- helpers ----------------------------------------------------------------------

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / tool), *args]
        if self._as_root:
            cmd = ["runuser", "-u", RUN_AS, "--", *cmd]
        proc = subprocess.run(cmd, cwd=self.root, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=120)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}")
        return proc


def create_database(url: str, name: str | None = None) -> str:
    """Create a fresh database on the server of ``url``; return the new database's URL."""
    name = name or f"mzflow_{uuid.uuid4().hex[:12]}"
    admin_url = sa.engine.make_url(url).set(database="postgres")
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        engine.dispose()
    return admin_url.set(database=name).render_as_string(hide_password=False)


def _ensure_system_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--shell", "/usr/sbin/nologin", name], check=True)


@contextmanager
def cursor(url: str, *setup: str) -> Iterator[Any]:
    """An autocommit psycopg2 cursor on the database at the SQLAlchemy ``url`` (the
    ``pg_url`` fixture's), after running the ``setup`` statements; closed afterwards."""
    import psycopg2
    from sqlalchemy.engine import make_url

    u = make_url(url)
    connection = psycopg2.connect(host=u.host, port=u.port, user=u.username,
                                  dbname=u.database)
    connection.autocommit = True
    try:
        cur = connection.cursor()
        for sql in setup:
            cur.execute(sql)
        yield cur
    finally:
        connection.close()
