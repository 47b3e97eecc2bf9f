"""The defences of docs/security.md, one test (at least) each (issue 39, items 6 and 8).

Fast tests drive ``mzflow.connect`` as each role; the ``slow`` ones start ``mzflow
serve`` in this process and speak to it with psycopg 3 and raw sockets.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import mzflow
from mzflow.session import access

PASSWORD = "correct horse"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "files").mkdir(parents=True)  # the default allowed_file_roots: $home/files
    return home


@pytest.fixture
def admin(home: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(home)) as c:
        c.execute("CREATE TABLE t (a int); CREATE ROLE joe LOGIN; "
                  "GRANT INSERT, SELECT ON t TO joe")
        yield c


@pytest.fixture
def joe(home: Path, admin: mzflow.Connection) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(home), role="joe") as c:
        yield c


def refused(conn: mzflow.Connection, sql: str) -> mzflow.Error:
    with pytest.raises(mzflow.Error) as e:
        conn.execute(sql)
    return e.value


def passes(conn: mzflow.Connection, sql: str) -> bool:
    """Whether ``conn``'s role passes the checks for ``sql`` (nothing runs)."""
    from mzflow.sql.parse import parse_one

    try:
        access.authorize(conn.store.snapshot(), conn.role_id, parse_one(sql),
                         conn.variable("cluster"), conn._places)
    except mzflow.InsufficientPrivilege:
        return False
    return True


# -- roles: predefined roles and membership ----------------------------------------------


def test_predefined_roles_show_as_postgresql_s(admin) -> None:
    rows = admin.execute("SELECT rolname, oid, rolcanlogin, rolsuper FROM pg_roles "
                         "WHERE rolname LIKE 'pg_%' ORDER BY oid").rows
    assert rows == [("pg_read_server_files", 4569, False, False),
                    ("pg_write_server_files", 4570, False, False)]
    # SHOW ROLES lists the user's roles, as Materialize's does
    assert "pg_read_server_files" not in {r[0] for r in admin.execute("SHOW ROLES").rows}


def test_grant_role_to_role_with_materialize_s_notices(admin) -> None:
    admin.execute("GRANT pg_read_server_files TO joe")
    members = admin.execute(
        "SELECT r.name, m.name, g.name FROM mz_role_members x JOIN mz_roles r ON "
        "x.role_id = r.id JOIN mz_roles m ON x.member = m.id JOIN mz_roles g ON "
        "x.grantor = g.id").rows
    assert members == [("pg_read_server_files", "joe", "materialize")]
    assert admin.execute("SELECT r.rolname, m.rolname FROM pg_auth_members a "
                         "JOIN pg_roles r ON a.roleid = r.oid "
                         "JOIN pg_roles m ON a.member = m.oid").rows == [
        ("pg_read_server_files", "joe")]
    assert admin.execute("GRANT pg_read_server_files TO joe").notices == [
        'role "joe" is already a member of role "pg_read_server_files"']
    assert admin.execute("REVOKE pg_read_server_files FROM joe").status == "REVOKE"
    assert admin.execute("SELECT * FROM mz_role_members").rows == []
    assert admin.execute("REVOKE pg_read_server_files FROM joe").notices == [
        'role "joe" is not a member of role "pg_read_server_files"']


def test_a_member_holds_its_roles_privileges_transitively(admin, joe) -> None:
    admin.execute("CREATE TABLE secret (a int); CREATE ROLE readers; CREATE ROLE staff")
    assert not passes(joe, "SELECT * FROM secret")
    admin.execute("GRANT SELECT ON secret TO readers; GRANT readers TO staff; "
                  "GRANT staff TO joe")
    assert passes(joe, "SELECT * FROM secret")
    e = refused(admin, "GRANT joe TO readers")  # readers ⊂ staff ⊂ joe: a cycle
    assert (e.code, e.message) == ("0LP01", 'role "joe" is a member of role "readers"')
    admin.execute("REVOKE readers FROM staff")
    assert not passes(joe, "SELECT * FROM secret")


def test_dropping_a_role_drops_its_memberships(admin, home) -> None:
    admin.execute("CREATE ROLE kim; GRANT pg_write_server_files TO kim")
    admin.execute("DROP ROLE kim")
    assert admin.execute("SELECT * FROM mz_role_members").rows == []


def test_who_may_grant_membership(admin, joe) -> None:
    admin.execute("CREATE ROLE staff")
    assert refused(joe, "GRANT staff TO joe").message == "permission denied for SYSTEM"
    admin.execute("GRANT CREATEROLE ON SYSTEM TO joe")
    joe.execute("GRANT staff TO joe")  # Materialize: CREATEROLE grants membership
    # …but not in the roles that reach the server's files, nor in a superuser
    e = refused(joe, "GRANT pg_read_server_files TO joe")
    assert (e.code, e.message) == ("42501",
                                   'permission denied to grant role "pg_read_server_files"')
    admin.execute("CREATE ROLE root SUPERUSER")
    assert refused(joe, "GRANT root TO joe").code == "42501"


# -- server files: privilege -------------------------------------------------------------


def test_server_files_need_the_predefined_roles(admin, joe, home) -> None:
    data = home / "files" / "rows.csv"
    data.write_text("1\n2\n")
    e = refused(joe, f"COPY t FROM '{data}'")
    assert (e.code, e.message) == ("42501", "permission denied to COPY from a file")
    assert e.detail == ('Only roles with privileges of the "pg_read_server_files" role '
                        "may COPY from a file.")
    admin.execute("GRANT pg_read_server_files TO joe")
    assert joe.execute(f"COPY t FROM '{data}'").status == "COPY 2"
    assert sorted(admin.execute("SELECT a FROM t").rows) == [(1,), (2,)]
    # reading is not writing
    sink = f"CREATE SINK s FROM t INTO CSV '{home / 'files' / 'out'}'"
    admin.execute("GRANT CREATE ON SCHEMA public TO joe; GRANT CREATE ON CLUSTER default "
                  "TO joe")
    assert refused(joe, sink).message == "permission denied to create a sink"
    admin.execute("GRANT pg_write_server_files TO joe")
    assert passes(joe, sink)
    admin.execute("REVOKE SELECT ON t FROM joe")  # a sink reads what it exports
    assert not passes(joe, sink)


def test_copy_from_stdin_needs_no_file_privilege(admin, joe) -> None:
    from sqlglot import exp

    from mzflow.sql.parse import parse_one

    # The COPY the server runs for a client's FROM STDIN names its spooled file; it is
    # marked as the client's data, which no SQL text can mark.
    stmt = parse_one("COPY t FROM '/tmp/copy-x.csv'")
    assert isinstance(stmt, exp.Copy)
    snap = joe.store.snapshot()
    with pytest.raises(mzflow.InsufficientPrivilege):
        access.authorize(snap, joe.role_id, stmt, "default", joe._places)
    stmt.set(access.FROM_CLIENT, True)
    access.authorize(snap, joe.role_id, stmt, "default", joe._places)
    assert passes(joe, "COPY t FROM STDIN") and passes(joe, "COPY t TO STDOUT")


# -- server files: path tricks -----------------------------------------------------------


@pytest.fixture
def reader(admin, joe) -> mzflow.Connection:
    admin.execute("GRANT pg_read_server_files TO joe")
    return joe


def outside(reader: mzflow.Connection, path: object) -> mzflow.Error:
    e = refused(reader, f"COPY t FROM '{path}'")
    assert e.code == "42501", e
    return e


def test_paths_are_confined_to_the_roots(reader, home, tmp_path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("42\n")
    (home / "files" / "ok.csv").write_text("1\n")
    assert passes(reader, f"COPY t FROM '{home / 'files' / 'ok.csv'}'")
    e = outside(reader, secret)  # an absolute path elsewhere
    assert e.message == f'path "{secret}" is outside the allowed file roots'
    assert e.detail == f'allowed_file_roots: "{home / "files"}".'
    # `..` out of the root, however it is spelt
    dotted = f"{home}/files/../../secret.csv"
    e = outside(reader, dotted)
    assert e.detail is not None and f'It resolves to "{secret}"' in e.detail
    outside(reader, f"{home}/files/./sub/../../../secret.csv")
    outside(reader, "/etc/passwd")
    assert outside(reader, "secret.csv").message == 'path "secret.csv" is not absolute'
    outside(reader, "~/secret.csv")
    outside(reader, f"file://{secret}")
    outside(reader, "file:///etc/passwd")
    assert sorted(reader.execute("SELECT a FROM t").rows) == []  # nothing was read


def test_symlinks_cannot_escape(reader, home, tmp_path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("42\n")
    files = home / "files"
    (files / "link.csv").symlink_to(secret)
    e = outside(reader, files / "link.csv")
    assert e.detail is not None and f'It resolves to "{secret}"' in e.detail
    (files / "out").symlink_to(tmp_path, target_is_directory=True)
    outside(reader, files / "out" / "secret.csv")
    outside(reader, files / "out")  # a folder reached through a symlink
    # a folder inside the root that holds a symlink to a file outside it
    landing = files / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text("1\n")
    assert passes(reader, f"COPY t FROM '{landing}'")
    (landing / "b.csv").symlink_to(secret)
    outside(reader, landing)
    outside(reader, f"{files}/*/b.csv")  # a glob that reaches it
    assert not passes(reader, f"CREATE SOURCE src FROM FILES '{landing}' (FORMAT csv) "
                              "(a int)")
    assert reader.execute("SELECT a FROM t").rows == []


def test_mzflow_s_own_storage_is_never_a_server_file(admin, reader, home) -> None:
    admin.execute("ALTER SYSTEM SET allowed_file_roots = '/'")
    e = outside(reader, home / "catalog.db")  # it holds the roles' verifiers
    assert e.message == f'path "{home / "catalog.db"}" is inside mzflow\'s own storage'
    outside(reader, home / "warehouse")
    outside(reader, f"{home}/files/../catalog.db")


def test_allowed_file_roots_is_the_superuser_s_setting(admin, reader, home, tmp_path) -> None:
    assert admin.execute("SHOW allowed_file_roots").rows == [("$home/files",)]
    e = refused(reader, f"ALTER SYSTEM SET allowed_file_roots = '{tmp_path}'")
    assert (e.code, e.message) == ("42501", "permission denied to alter system")
    e = refused(admin, "ALTER SYSTEM SET allowed_file_roots = 'relative/dir'")
    assert e.code == "22023" and "not an absolute path" in e.message
    assert refused(admin, "SET allowed_file_roots = '/'").code == "22023"
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.csv").write_text("7\n")
    admin.execute(f"ALTER SYSTEM SET allowed_file_roots = '$home/files, {other}'")
    assert passes(reader, f"COPY t FROM '{other / 'x.csv'}'")
    admin.execute("ALTER SYSTEM SET allowed_file_roots = ''")  # none at all
    e = outside(reader, other / "x.csv")
    assert e.detail == "allowed_file_roots: none (the setting is empty)."
    admin.execute("ALTER SYSTEM RESET allowed_file_roots")
    assert admin.execute("SHOW allowed_file_roots").rows == [("$home/files",)]
    # a superuser is not confined (PostgreSQL's: it could widen the roots anyway)
    assert admin.execute(f"COPY t FROM '{other / 'x.csv'}'").status == "COPY 1"


def test_s3_urls_are_allowed_only_under_an_s3_root(admin, reader) -> None:
    assert not passes(reader, "COPY t FROM 's3://bucket/landing/a.csv'")
    admin.execute("ALTER SYSTEM SET allowed_file_roots = '$home/files,s3://bucket/landing'")
    assert passes(reader, "COPY t FROM 's3://bucket/landing/a.csv'")
    for url in ("s3://bucket/landing/../private/a.csv", "s3://bucket/landingx/a.csv",
                "s3://other/landing/a.csv", "s3://bucket/landing/./a.csv"):
        assert not passes(reader, f"COPY t FROM '{url}'"), url


def test_suites_and_sources_are_confined_too(admin, reader, home, tmp_path) -> None:
    admin.execute("GRANT CREATE ON SCHEMA public TO joe; GRANT CREATE ON CLUSTER default "
                  "TO joe")
    reader.execute("CREATE TABLE mine (a int)")
    suite = tmp_path / "suite.json"
    assert not passes(reader, f"ALTER TABLE mine SET (EXPECTATION SUITE = '{suite}')")
    assert passes(reader, f"ALTER TABLE mine SET (EXPECTATION SUITE = "
                          f"'{home / 'files' / 'suite.json'}')")
    (home / "files" / "landing").mkdir()
    assert passes(reader, f"CREATE SOURCE src FROM FILES '{home / 'files' / 'landing'}' "
                          "(FORMAT csv) (a int)")
    assert not passes(reader, f"CREATE SOURCE src FROM FILES '{tmp_path}' (FORMAT csv) "
                              "(a int)")


# -- SQL text as names -------------------------------------------------------------------

EVIL = 'x"; DROP TABLE t; --'


def test_sql_text_as_identifiers_is_only_a_name(admin) -> None:
    quoted = '"' + EVIL.replace('"', '""') + '"'
    admin.execute(f"CREATE TABLE {quoted} ({quoted} int)")
    admin.execute(f"INSERT INTO {quoted} VALUES (1)")
    admin.execute(f"CREATE VIEW {quoted[:-1]}_v\" AS SELECT {quoted} FROM {quoted}")
    assert admin.execute(f"SELECT {quoted} FROM {quoted}").rows == [(1,)]
    names = {r[0] for r in admin.execute("SELECT name FROM mz_tables").rows}
    assert names == {"t", EVIL}  # t is still there
    shown = admin.execute(f"SHOW CREATE TABLE {quoted}").rows[0][1]
    assert quoted in shown
    admin.execute(f"DROP VIEW {quoted[:-1]}_v\"; DROP TABLE {quoted}")
    assert admin.execute("SELECT count(*) FROM t").rows == [(0,)]


def test_role_names_with_quotes(admin, home) -> None:
    for name in ("o'brien", 'we"ird', "x; DROP ROLE joe; --"):
        quoted = '"' + name.replace('"', '""') + '"'
        admin.execute(f"CREATE ROLE {quoted} LOGIN PASSWORD 'pw'")
        admin.execute(f"GRANT SELECT ON t TO {quoted}")
        assert ("materialize", name, "materialize", "public", "t", "table", "SELECT") in (
            admin.execute(f"SHOW PRIVILEGES FOR {quoted}").rows)
        with mzflow.connect(str(home), role=name) as c:
            assert c.execute("SELECT current_user").rows == [(name,)]
        admin.execute(f"REVOKE SELECT ON t FROM {quoted}; DROP ROLE {quoted}")
    assert {r[0] for r in admin.execute("SHOW ROLES").rows} == {"materialize", "joe"}


# -- over the wire -------------------------------------------------------------------------


@pytest.fixture
def server(home: Path, admin: mzflow.Connection) -> Iterator[object]:
    from mzflow import config
    from mzflow.server import make_server
    from mzflow.server.auth import Throttle

    admin.execute(f"ALTER ROLE joe PASSWORD '{PASSWORD}'")
    srv = make_server(config.load(str(home)), port=0)
    srv.settings.max_message = 16 * 1024  # 64 MiB by default: the same check, smaller

    class Counting(Throttle):
        """The login delay's shape, shorter, with each delay it handed out."""

        def __init__(self, **kw: float) -> None:
            super().__init__(**kw)
            self.delays: list[float] = []

        def failed(self, who: str) -> float:
            delay = super().failed(who)
            self.delays.append(delay)
            return delay

    srv.settings.throttle = Counting(base=0.01, cap=0.05)
    srv.start()
    yield srv
    srv.stop()


def wire(srv: object, user: str = "joe", password: str = PASSWORD) -> object:
    import psycopg

    conn = psycopg.connect(host="127.0.0.1", port=srv.port, user=user,  # type: ignore[attr-defined]
                           password=password, dbname="materialize", autocommit=True)
    conn.prepare_threshold = None
    return conn


@pytest.mark.slow
def test_copy_stdin_and_stdout_for_a_role_without_file_access(server, admin) -> None:
    with wire(server) as conn:  # type: ignore[attr-defined]
        with conn.cursor().copy("COPY t FROM STDIN") as copy:
            for a in (1, 2, 3):
                copy.write_row((a,))
        with conn.cursor().copy("COPY t FROM STDIN WITH (FORMAT CSV)") as copy:
            copy.write(b"4\n")
        out = []
        with conn.cursor().copy("COPY (SELECT a FROM t ORDER BY a) TO STDOUT") as copy:
            out = [row[0] for row in copy.rows()]
        assert out == ["1", "2", "3", "4"]
    assert sorted(admin.execute("SELECT a FROM t").rows) == [(1,), (2,), (3,), (4,)]


@pytest.mark.slow
def test_identifiers_and_quoted_roles_over_the_wire(server, admin) -> None:
    from psycopg import sql

    admin.execute("CREATE ROLE \"o'b\"\"r\" LOGIN PASSWORD 'pw2'; "
                  "GRANT CREATE ON SCHEMA public TO \"o'b\"\"r\"")
    with wire(server, "o'b\"r", "pw2") as conn:  # type: ignore[attr-defined]
        name = sql.Identifier(EVIL)
        conn.execute(sql.SQL("CREATE TABLE {} ({} text)").format(name, name))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(name), ["'; --"])
        assert conn.execute(sql.SQL("SELECT {} FROM {}").format(name, name)).fetchall() == [
            ("'; --",)]
        assert conn.execute("SELECT current_user").fetchone() == ("o'b\"r",)
    assert {r[0] for r in admin.execute("SELECT name FROM mz_tables").rows} == {"t", EVIL}


def _raw_login_free_socket(srv: object) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=30)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_an_oversized_message_is_refused_and_others_are_served(server) -> None:
    import psycopg

    # A startup packet over PostgreSQL's 10,000 bytes: refused before it is read.
    with _raw_login_free_socket(server) as s:
        s.sendall(struct.pack("!ii", 1 << 30, 196608))
        reply = s.recv(4096)
    assert reply[:1] == b"E" and b"invalid length of startup packet" in reply
    # After login: a query over the server's limit (16 KiB here, 64 MiB by default)
    # ends that connection with a FATAL error that says why.
    with wire(server) as big:  # type: ignore[attr-defined]
        with pytest.raises(psycopg.Error) as e:
            big.execute("SELECT '" + "x" * (32 * 1024) + "'")
        assert "larger than the limit of 16384" in str(e.value)
        assert e.value.sqlstate in ("54000", None)  # None: libpq saw the close first
    with wire(server) as other:  # type: ignore[attr-defined]
        assert other.execute("SELECT 1 + 1").fetchone() == (2,)


@pytest.mark.slow
def test_a_login_flood_leaves_the_server_serving(server) -> None:
    import psycopg

    failures: list[str] = []

    def attacker() -> None:
        for _ in range(5):
            try:
                wire(server, password="wrong").close()  # type: ignore[attr-defined]
            except psycopg.OperationalError as e:
                failures.append(str(e))

    threads = [threading.Thread(target=attacker) for _ in range(8)]
    for t in threads:
        t.start()
    with wire(server) as good:  # type: ignore[attr-defined]
        assert good.execute("SELECT count(*) FROM t").fetchone() == (0,)
    for t in threads:
        t.join()
    assert len(failures) == 40
    assert all("password authentication failed" in f for f in failures)
    # each failure was answered after a delay that grew to the cap (a good login from
    # the address starts it over, so it reached it on one run of failures at least)
    delays = server.settings.throttle.delays
    assert len(delays) == 40 and max(delays) == server.settings.throttle.cap
    with wire(server) as good:  # type: ignore[attr-defined]
        assert good.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.slow
def test_logins_under_way_are_capped_per_address(server, monkeypatch) -> None:
    import time

    import psycopg

    from mzflow.server import listen

    monkeypatch.setattr(listen, "MAX_LOGINS_PER_PEER", 3)
    silent = [_raw_login_free_socket(server) for _ in range(3)]  # never log in
    try:
        deadline = time.monotonic() + 30
        while server._logins.get("127.0.0.1", 0) < 3:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the silent clients were never accepted"
            time.sleep(0.01)
        # (refused before TLS is negotiated: libpq's sslmode=prefer reports only "an
        # error response during SSL exchange", so this client asks for no TLS)
        with pytest.raises(psycopg.OperationalError,
                           match="too many logins under way from 127.0.0.1"):
            psycopg.connect(host="127.0.0.1", port=server.port, user="joe",
                            password=PASSWORD, sslmode="disable")
    finally:
        for s in silent:
            s.close()
    deadline = time.monotonic() + 30
    while server._logins:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the closed clients still count"
        time.sleep(0.01)
    with wire(server) as good:  # type: ignore[attr-defined]
        assert good.execute("SELECT 1").fetchone() == (1,)
    assert server._logins == {}  # type: ignore[attr-defined]  # a login counts no more
