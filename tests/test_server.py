"""``mzflow serve`` through real clients (issue 35, part A): psycopg 3 over TCP, a Unix
socket and TLS, and psql 15. Catalog statements, tables, COPY and SUBSCRIBE only: no
Spark here (tests/test_server_spark.py has the typed reads and the cancel). One server
per module, in this process; the tests that run psql, openssl or ``mzflow serve`` as a
child are ``slow``. Cancels go through ``cancel_safe()``: libpq's blocking PQcancel
(``cancel()``) holds the GIL while it waits for the server, which here is this process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg.errors
import pytest

import mzflow
from mzflow import config
from mzflow.server import make_server, tls_context
from mzflow.server.listen import Server

PASSWORD = "correct horse"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose catalog keeps two login roles' verifiers: alice, a superuser, and
    bob (their passwords as the server checks them, never stored)."""
    home = tmp_path_factory.mktemp("serve-home")
    with mzflow.connect(str(home)) as conn:
        conn.execute(f"CREATE ROLE alice WITH LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
        conn.execute("CREATE ROLE bob WITH LOGIN PASSWORD 'bobs'")
    return home


@pytest.fixture(scope="module")
def server(home: Path) -> Iterator[Server]:
    srv = make_server(config.load(str(home)), port=0, unix_dir=home)
    srv.start()
    yield srv
    srv.stop()


def url(srv: Server, user: str = "alice", password: str = PASSWORD, **extra: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in extra.items())
    return (f"postgresql://{user}:{password.replace(' ', '%20')}@127.0.0.1:{srv.port}"
            f"/materialize" + (f"?{query}" if query else ""))


def connect(srv: Server, user: str = "alice", password: str = PASSWORD,
            **kw: str) -> psycopg.Connection:
    # psycopg prepares a query it ran five times, which needs Describe (part D):
    # test_prepared_statements asks for that on purpose; the polls here must not.
    conn = psycopg.connect(url(srv, user, password), autocommit=True, **kw)
    conn.prepare_threshold = None
    return conn


def until(check: object, what: str, seconds: float = 30.0) -> None:
    """Wait for ``check()`` to hold (a condition, never a duration under test)."""
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what}")
        time.sleep(0.05)


# -- login and session ------------------------------------------------------------------

def test_login_reports_materialize_parameters(server: Server) -> None:
    with connect(server) as conn:
        info = conn.info
        assert info.parameter_status("server_version") == "9.5.0"
        assert info.server_version == 90500
        assert info.parameter_status("client_encoding") == "UTF8"
        assert info.parameter_status("DateStyle") == "ISO, MDY"
        assert info.parameter_status("TimeZone") == "UTC"
        assert info.parameter_status("integer_datetimes") == "on"
        assert info.parameter_status("standard_conforming_strings") == "on"
        assert info.parameter_status("database") == "materialize"
        assert info.parameter_status("cluster") == "default"
        # Materialize's form, with mzflow's version as the build (dbt-materialize parses it)
        assert (info.parameter_status("mz_version") or "").startswith("v0.130.0 (mzflow")
        assert info.backend_pid > 0
        assert conn.execute("SHOW server_version").fetchone() == ("9.5.0",)


def test_a_wrong_password_is_refused(server: Server) -> None:
    with pytest.raises(psycopg.OperationalError,
                       match='password authentication failed for user "alice"'):
        psycopg.connect(url(server, password="wrong"))
    with pytest.raises(psycopg.OperationalError,
                       match='password authentication failed for user "carol"'):
        psycopg.connect(url(server, user="carol"))


def test_startup_options_and_set_are_per_connection(server: Server) -> None:
    with connect(server, options="--cluster=etl -c extra_float_digits=2",
                 application_name="tests") as a, connect(server) as b:
        assert a.info.parameter_status("cluster") == "etl"
        assert a.execute("SHOW cluster").fetchone() == ("etl",)
        assert a.execute("SHOW application_name").fetchone() == ("tests",)
        assert a.execute("SHOW extra_float_digits").fetchone() == ("2",)
        assert b.execute("SHOW cluster").fetchone() == ("default",)
        a.execute("SET application_name = 'renamed'")
        assert a.info.parameter_status("application_name") == "renamed"  # reported
        a.execute("RESET cluster")
        assert a.info.parameter_status("cluster") == "default"


def test_a_bad_startup_setting_is_a_notice_not_a_refusal(server: Server) -> None:
    with connect(server, options="-c TimeZone=Mars", dbname="elsewhere") as conn:
        assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)


def test_errors_carry_their_sqlstate_class(server: Server) -> None:
    with connect(server) as conn:
        with pytest.raises(psycopg.errors.UndefinedColumn):
            conn.execute("SELECT nope FROM mz_tables")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM nope")
        with pytest.raises(psycopg.errors.SyntaxError) as raised:
            conn.execute("SELECT 1;\nSELEC 2")
        assert raised.value.diag.statement_position == "11"  # counted in what was sent
        with pytest.raises(psycopg.errors.CantChangeRuntimeParam):
            conn.execute("SET server_version = '16'")
        assert conn.execute("SHOW cluster").fetchone() == ("default",)  # still usable


def test_several_statements_in_one_query(server: Server) -> None:
    with connect(server) as conn:
        cur = conn.execute("CREATE TABLE several_a (x int); CREATE TABLE several_b (y text);"
                           " SELECT name FROM mz_tables WHERE name LIKE 'several_%'"
                           " ORDER BY name")
        assert cur.statusmessage == "CREATE TABLE"
        assert cur.nextset() and cur.nextset()
        assert cur.fetchall() == [("several_a",), ("several_b",)]


def test_catalog_rows_have_their_types(server: Server) -> None:
    with connect(server) as conn:
        conn.execute("CREATE TABLE typed_t (a bigint, b numeric(10,2), c text)")
        cur = conn.execute("SELECT name, type, position FROM mz_columns "
                           "WHERE name IN ('a', 'b') ORDER BY position")
        assert [d.type_code for d in cur.description] == [25, 25, 20]  # text, text, int8
        rows = cur.fetchall()
        assert ("b", "numeric(10,2)", 2) in rows
        assert all(isinstance(r[2], int) for r in rows)


def test_notices_reach_the_client(server: Server) -> None:
    seen: list[str] = []
    with connect(server) as conn:
        conn.add_notice_handler(lambda d: seen.append(d.message_primary or ""))
        conn.execute("DROP TABLE IF EXISTS never_there")
    assert seen and "never_there" in seen[0]


def test_unix_socket_trusts_this_user(server: Server, home: Path) -> None:
    # No password on the socket (only this machine's users reach it), but only a role
    # the catalog knows, with LOGIN, gets in.
    with psycopg.connect(host=str(home), port=server.port, user="bob",
                         dbname="materialize", autocommit=True) as conn:
        assert conn.execute("SHOW database").fetchone() == ("materialize",)
    with pytest.raises(psycopg.OperationalError, match='role "anyone" is not permitted'):
        psycopg.connect(host=str(home), port=server.port, user="anyone",
                        dbname="materialize")


def test_a_client_silent_at_login_is_let_go(server: Server,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.server import listen

    monkeypatch.setattr(listen, "LOGIN_SECONDS", 0.5)
    with socket.create_connection(("127.0.0.1", server.port)) as silent:
        silent.settimeout(30)
        assert silent.recv(1) == b""  # closed by the server, unasked
    with connect(server) as conn:  # the others are served as before
        assert conn.execute("SHOW cluster").fetchone() == ("default",)


def test_twenty_concurrent_connections_reading_the_catalog(server: Server) -> None:
    with connect(server) as conn:
        conn.execute("CREATE TABLE concurrent_t (x int)")
        expected = conn.execute("SELECT id, name FROM mz_tables ORDER BY id").fetchall()
    results: list[object] = []

    def reader() -> None:
        try:
            with connect(server) as c:
                for _ in range(10):
                    results.append(c.execute("SELECT id, name FROM mz_tables ORDER BY id")
                                   .fetchall())
        except Exception as e:  # noqa: BLE001 - reported below
            results.append(e)

    threads = [threading.Thread(target=reader) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 200
    assert all(r == expected for r in results), [r for r in results if r != expected][:3]


# -- COPY and SUBSCRIBE -----------------------------------------------------------------

def test_copy_from_stdin_text_and_csv_then_subscribe_through_copy(server: Server) -> None:
    with connect(server) as conn:
        conn.execute("CREATE TABLE copied (a int, s text)")
        with conn.cursor().copy("COPY copied FROM STDIN") as copy:
            copy.write_row((1, "tab\there"))
            copy.write_row((2, None))
        with conn.cursor().copy("COPY copied FROM STDIN WITH (FORMAT CSV)") as copy:
            copy.write(b'3,"x,y"\n4,\n')
        with pytest.raises(psycopg.errors.InvalidTextRepresentation, match="COPY line 2"), \
                conn.cursor().copy("COPY copied FROM STDIN") as copy:
            copy.write(b"5\tfive\n6\n")  # the second line lacks a column: nothing lands
        rows = []
        cur = conn.cursor()
        with pytest.raises(psycopg.errors.QueryCanceled), cur.copy(
                "COPY (SUBSCRIBE copied WITH (SNAPSHOT) UP TO "
                f"{_now_ms() + 600_000}) TO STDOUT") as copy:
            for row in copy.rows():
                rows.append(row[1:])  # (mz_diff, a, s)
                if len(rows) == 4:  # the snapshot; then it waits for writes
                    conn.cancel_safe()
        assert conn.execute("SHOW cluster").fetchone() == ("default",)
    assert sorted(rows, key=lambda r: r[1]) == [
        ("1", "1", "tab\there"), ("1", "2", None), ("1", "3", "x,y"), ("1", "4", None)]


def test_subscribe_streams_new_writes_and_cancel_stops_it(server: Server) -> None:
    with connect(server) as conn, connect(server) as writer:
        conn.execute("CREATE TABLE streamed (a int)")
        got: list[tuple[str, ...]] = []
        failure: list[BaseException] = []

        def stream() -> None:
            try:
                with conn.cursor().copy("COPY (SUBSCRIBE streamed) TO STDOUT") as copy:
                    for row in copy.rows():
                        got.append(row)
            except BaseException as e:  # noqa: BLE001 - examined below
                failure.append(e)

        t = threading.Thread(target=stream)
        t.start()
        writer.execute("INSERT INTO streamed VALUES (7)")
        until(lambda: got, "the inserted row")
        conn.cancel_safe()
        t.join(30)
        assert not t.is_alive()
        assert [r[1:] for r in got] == [("1", "7")]
        assert failure and isinstance(failure[0], psycopg.errors.QueryCanceled)
        assert conn.execute("SELECT count(*) FROM mz_tables").fetchone() is not None


def test_a_vanished_client_releases_its_subscription(server: Server) -> None:
    with connect(server) as setup:
        setup.execute("CREATE TABLE vanishing (a int)")
    conn = connect(server)
    pid = conn.info.backend_pid
    done = threading.Event()

    def stream() -> None:
        try:
            with conn.cursor().copy("COPY (SUBSCRIBE vanishing) TO STDOUT") as copy:
                for _ in copy.rows():
                    pass
        except Exception:  # noqa: BLE001 - its connection is cut below
            pass
        done.set()

    threading.Thread(target=stream, daemon=True).start()
    with connect(server) as watcher:
        def holds() -> int:
            return len(watcher.execute("SELECT * FROM mz_read_holds WHERE holder = "
                                       "'SUBSCRIBE'").fetchall())

        until(lambda: holds() == 1, "the subscription's read hold")
        # The client's host goes away mid-statement: its socket is shut, unannounced.
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as raw:
            raw.shutdown(socket.SHUT_RDWR)
        until(lambda: holds() == 0, "the vanished client's statement to end")
        until(lambda: pid not in server._clients, "the session to close")
    done.wait(30)
    conn.close()


def test_the_hang_up_watcher_watches_a_reused_fd(home: Path) -> None:
    """The kernel hands a closed socket's fd to the next one at once. The hang-up watcher
    once remembered the fds it had seen hang up, and so never watched the next client on
    such an fd: a vanished SUBSCRIBE kept its read hold for good (CI). The watcher runs
    here on sockets of this process, where the reuse is certain."""
    from types import SimpleNamespace

    srv = make_server(config.load(str(home)), port=0)
    cancelled: list[int] = []

    def client(pid: int, sock: socket.socket) -> SimpleNamespace:
        connection = SimpleNamespace(cancel=lambda: cancelled.append(pid))
        return SimpleNamespace(connection=connection, wire=SimpleNamespace(sock=sock))

    ours, theirs = socket.socketpair()
    srv._clients[1] = client(1, ours)  # type: ignore[assignment]
    watcher = threading.Thread(target=srv._watch, daemon=True)
    watcher.start()
    try:
        theirs.close()
        until(lambda: cancelled == [1], "the first client's hang-up")
        fd = ours.fileno()
        with srv._lock:
            del srv._clients[1]
            ours.close()
            ours, theirs = socket.socketpair()  # the same fd, the lowest free one
            assert ours.fileno() == fd
            srv._clients[2] = client(2, ours)  # type: ignore[assignment]
        theirs.close()
        until(lambda: cancelled == [1, 2], "the next client's hang-up on the same fd", 10)
    finally:
        srv._stop.set()
        watcher.join(5)
        ours.close()


# -- contracts of the other parts --------------------------------------------------------

def test_bound_parameters(server: Server) -> None:
    with connect(server) as conn:
        cur = conn.execute("SELECT name FROM mz_tables WHERE name = %s", ["typed_t"])
        assert cur.fetchall() == [("typed_t",)]


def test_prepared_statements(server: Server) -> None:
    with connect(server) as conn:
        conn.prepare_threshold = 0
        for _ in range(3):
            cur = conn.execute("SELECT name FROM mz_tables WHERE name = 'typed_t'",
                               prepare=True)
            assert cur.fetchall() == [("typed_t",)]


def test_server_side_cursor(server: Server) -> None:
    with connect(server) as conn:
        conn.autocommit = False
        with conn.cursor(name="c") as cur:
            cur.execute("SELECT name FROM mz_tables")
            assert len(cur.fetchmany(1)) == 1


def test_roles_from_the_catalog(home: Path, tmp_path: Path) -> None:
    srv = make_server(config.load(str(home)), port=0, unix_dir=tmp_path)
    srv.start()
    try:
        # The Unix socket trusts this OS user: the default superuser makes the role.
        with psycopg.connect(host=str(tmp_path), port=srv.port, user="materialize",
                             dbname="materialize", autocommit=True) as admin:
            admin.execute("CREATE ROLE dave WITH LOGIN PASSWORD 'pw'")
        with psycopg.connect(f"postgresql://dave:pw@127.0.0.1:{srv.port}/materialize",
                             autocommit=True) as dave:
            assert dave.execute("SELECT current_user").fetchone() == ("dave",)
        with pytest.raises(psycopg.OperationalError, match="password authentication"):
            psycopg.connect(f"postgresql://dave:nope@127.0.0.1:{srv.port}/materialize")
    finally:
        srv.stop()


# -- with child processes: psql, openssl, mzflow serve -----------------------------------

@pytest.mark.slow
def test_psql_runs_ddl_inserts_and_selects(server: Server) -> None:
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    base = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(server.port),
            "-U", "alice", "-d", "materialize", "-A", "-t"]
    out = subprocess.run([*base, "-c", "CREATE TABLE from_psql (a int, b text)",
                          "-c", "INSERT INTO from_psql VALUES (1, 'one'), (2, 'two')",
                          "-c", "SELECT name FROM mz_tables WHERE name = 'from_psql'",
                          "-c", "SHOW cluster"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["CREATE", "TABLE", "INSERT", "0", "2", "from_psql",
                                  "default"]
    bad = subprocess.run([*base, "-c", "SELECT nope FROM mz_tables"], capture_output=True,
                         text=True, env={**env, "PGOPTIONS": ""}, timeout=60)
    assert bad.returncode != 0 and 'column "nope" does not exist' in bad.stderr


@pytest.mark.slow
def test_tls_with_a_self_signed_certificate(home: Path, tmp_path: Path) -> None:
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    srv = make_server(config.load(str(home)), port=0, tls=tls_context(cert, key))
    plain = make_server(config.load(str(home)), port=0)
    srv.start()
    plain.start()
    try:
        with psycopg.connect(url(srv, sslmode="require"), autocommit=True) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SHOW cluster").fetchone() == ("default",)
        with psycopg.connect(url(srv, sslmode="disable"), autocommit=True) as conn:
            assert not conn.pgconn.ssl_in_use  # TLS is offered, not forced
        with pytest.raises(psycopg.OperationalError, match="server does not support SSL"):
            psycopg.connect(url(plain, sslmode="require"))
        with psycopg.connect(url(plain, sslmode="prefer"), autocommit=True) as conn:
            assert not conn.pgconn.ssl_in_use
    finally:
        srv.stop()
        plain.stop()


@pytest.mark.slow
def test_mzflow_serve_logs_its_address_and_stops_on_sigterm(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mzflow.cli", "--home", str(tmp_path), "serve", "--port",
         str(port), "--insecure-trust"], stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert f"listening on 127.0.0.1:{port}" in line, line
        with psycopg.connect(f"postgresql://materialize@127.0.0.1:{port}/materialize",
                             autocommit=True) as conn:
            assert conn.execute("SHOW cluster").fetchone() == ("default",)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_sqlalchemy_connects_and_inspects(server: Server) -> None:
    """SQLAlchemy 2 over psycopg 3, as a new user points it at mzflow serve: its connect
    (SHOW TRANSACTION ISOLATION LEVEL; psycopg's hstore lookup under a SAVEPOINT), the
    inspector, and pandas.read_sql with a bound parameter."""
    import pandas as pd
    import sqlalchemy as sa

    with connect(server) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS inspected")
        conn.execute("CREATE TABLE IF NOT EXISTS inspected.t (a bigint NOT NULL, "
                     "b numeric(10,2), c timestamptz)")
        conn.execute("CREATE VIEW IF NOT EXISTS inspected.v AS SELECT a FROM inspected.t")
    engine = sa.create_engine(url(server).replace("postgresql://", "postgresql+psycopg://"))
    try:
        insp = sa.inspect(engine)
        assert "inspected" in insp.get_schema_names()
        assert insp.get_table_names(schema="inspected") == ["t"]
        assert insp.get_view_names(schema="inspected") == ["v"]
        cols = {c["name"]: (str(c["type"]), c["nullable"])
                for c in insp.get_columns("t", schema="inspected")}
        assert cols == {"a": ("BIGINT", False), "b": ("NUMERIC(10, 2)", True),
                        "c": ("TIMESTAMP", True)}
        with engine.connect() as c:
            frame = pd.read_sql(sa.text("SELECT name FROM mz_tables WHERE name = :n"), c,
                                params={"n": "t"})
        assert frame["name"].tolist() == ["t"]
    finally:
        engine.dispose()
