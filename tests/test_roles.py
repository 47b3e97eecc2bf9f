"""Roles and privileges (issue 35, part C), through Connection as each role.

Wording and order of checks follow Materialize's privilege_checks.slt; a verifier is
checked by scramp's SCRAM exchange and, in the slow test, by PostgreSQL itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import mzflow
from mzflow.catalog import privileges, roles
from mzflow.session import access

PASSWORD = "correct horse battery staple 7Q!"


@pytest.fixture
def home(tmp_path: Path) -> str:
    return str(tmp_path / "home")


@pytest.fixture
def admin(home: str):
    with mzflow.connect(home) as c:
        yield c


def as_role(home: str, name: str) -> mzflow.Connection:
    return mzflow.connect(home, role=name)


def denied(conn: mzflow.Connection, sql: str) -> str:
    """The message (without DETAIL) of the 42501 ``sql`` fails with."""
    with pytest.raises(mzflow.InsufficientPrivilege) as e:
        conn.execute(sql)
    assert e.value.code == "42501"
    return e.value.message


def allowed(conn: mzflow.Connection, sql: str) -> bool:
    """Whether ``conn``'s role passes the checks for ``sql``, without running it (a
    table's read runs on Spark, which the slow test below does for real; COPY FROM STDIN
    is the server's)."""
    from mzflow.sql.parse import parse_one

    try:
        access.authorize(conn.store.snapshot(), conn.role_id, parse_one(sql),
                         conn.variable("cluster"))
    except mzflow.InsufficientPrivilege:
        return False
    return True


def scram_login(verifier: str, password: str) -> bool:
    """A full SCRAM-SHA-256 exchange, scramp's client against scramp's server holding
    ``verifier``: what `mzflow serve` does at login."""
    from scramp import ScramClient, ScramException, ScramMechanism

    server = ScramMechanism("SCRAM-SHA-256").make_server(
        lambda username: roles.auth_info(verifier))
    client = ScramClient(["SCRAM-SHA-256"], "joe", password)
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    try:
        server.set_client_final(client.get_client_final())
    except ScramException:
        return False
    client.set_server_final(server.get_server_final())
    return True


# -- roles ------------------------------------------------------------------------------


def test_materialize_is_the_built_in_superuser_and_the_default_role(admin) -> None:
    assert admin.role == "materialize"
    # PostgreSQL's predefined roles for server files are there too (tests/test_security.py)
    assert admin.execute("SELECT name, inherit, rolcanlogin, rolsuper FROM mz_roles"
                         ).rows == [("pg_read_server_files", True, False, False),
                                    ("pg_write_server_files", True, False, False),
                                    ("materialize", True, True, True)]
    assert admin.execute("SHOW ROLES").rows == [("materialize", "")]
    assert admin.execute("SELECT * FROM mz_role_members").rows == []


def test_a_session_for_an_unknown_or_nologin_role_is_refused(home, admin) -> None:
    with pytest.raises(mzflow.Error, match='role "nobody" does not exist') as e:
        as_role(home, "nobody")
    assert e.value.code == "28000"
    admin.execute("CREATE ROLE grp")  # NOLOGIN is the default, as in Materialize
    with pytest.raises(mzflow.Error, match='role "grp" is not permitted to log in'):
        as_role(home, "grp")
    assert not roles.can_login(admin.store.snapshot(), "grp")
    admin.execute("ALTER ROLE grp LOGIN")
    assert roles.can_login(admin.store.snapshot(), "grp")
    with as_role(home, "grp") as c:
        assert c.role == "grp"


def test_the_catalog_keeps_a_scram_verifier_that_checks_the_password(admin) -> None:
    admin.execute(f"CREATE ROLE joe WITH LOGIN PASSWORD '{PASSWORD}'")
    verifier = roles.verifier(admin.store.snapshot(), "joe")
    assert verifier is not None and verifier.startswith("SCRAM-SHA-256$4096:")
    assert PASSWORD not in verifier
    assert roles.is_verifier(verifier)
    assert scram_login(verifier, PASSWORD)
    assert not scram_login(verifier, PASSWORD + "x")
    assert roles.password_matches(verifier, PASSWORD)
    assert not roles.password_matches(verifier, PASSWORD.upper())
    # A fresh salt each time: the same password never makes the same verifier.
    admin.execute(f"ALTER ROLE joe PASSWORD '{PASSWORD}'")
    again = roles.verifier(admin.store.snapshot(), "joe")
    assert again != verifier and scram_login(again, PASSWORD)
    # PASSWORD NULL removes it: no password login any more (the role still may log in).
    admin.execute("ALTER ROLE joe PASSWORD NULL")
    assert roles.verifier(admin.store.snapshot(), "joe") is None
    assert roles.can_login(admin.store.snapshot(), "joe")
    notices = admin.execute("ALTER ROLE joe PASSWORD ''").notices
    assert notices == ["empty string is not a valid password, clearing password"]


def test_a_verifier_given_as_the_password_is_kept_as_it_is(admin) -> None:
    # PostgreSQL's pre-hashed passwords (pg_dump writes them): the password itself never
    # reaches the server.
    made = roles.make_verifier(PASSWORD)
    admin.execute(f"CREATE ROLE joe LOGIN PASSWORD '{made}'")
    assert roles.verifier(admin.store.snapshot(), "joe") == made
    assert scram_login(made, PASSWORD)


def test_a_password_appears_nowhere_in_the_home_or_the_logs(home, admin, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    # SQLAlchemy's own logger (off by default) logs every statement with its parameters:
    # what reaches the catalog database, the verifier among it.
    caplog.set_level(logging.INFO, logger="sqlalchemy.engine")
    admin.execute(f"CREATE ROLE joe LOGIN PASSWORD '{PASSWORD}'")
    admin.execute(f"ALTER ROLE joe WITH PASSWORD '{PASSWORD}2'")
    # A statement that fails after the password: its error quotes no string.
    for bad in (f"CREATE ROLE kim PASSWORD '{PASSWORD}' LOGN",
                f"CREATE ROLE kim LOGIN '{PASSWORD}'",
                f"ALTER ROLE joe PASSWORD {PASSWORD.split()[0]}zz",
                f"CREATE ROLE kim PASSWORD '{PASSWORD}"):
        with pytest.raises(mzflow.ParseError) as e:
            admin.execute(bad)
        assert PASSWORD.split()[0] not in str(e.value), bad
        assert "'********'" in str(e.value)
    admin.execute("CREATE TABLE t (a int)")  # more catalog writes after it
    admin.close()
    files = [p for p in Path(home).rglob("*") if p.is_file()]
    assert any(p.name.endswith(".db") for p in files), files
    secret = PASSWORD.split()[0].encode()
    for path in files:
        assert secret not in path.read_bytes(), path
    assert "SCRAM-SHA-256$4096:" in caplog.text  # the verifier was written, and logged
    assert PASSWORD.split()[0] not in caplog.text


def test_the_shell_history_keeps_no_password(tmp_path) -> None:
    from mzflow.shell.complete import History

    class Readline:
        def __init__(self) -> None:
            self.items: list[str] = []

        def add_history(self, entry: str) -> None:
            self.items.append(entry)

        def get_current_history_length(self) -> int:
            return len(self.items)

        def get_history_item(self, n: int) -> str:
            return self.items[n - 1]

    rl = Readline()
    history = History(rl, tmp_path / "sql_history")
    history.add(f"CREATE ROLE joe LOGIN\nPASSWORD '{PASSWORD}';")
    history.add("SELECT 'kept' AS literal;")
    saved = (tmp_path / "sql_history").read_text()
    assert PASSWORD not in saved and PASSWORD not in "".join(rl.items)
    assert "PASSWORD '********'" in saved
    assert "SELECT 'kept' AS literal;" in saved


def test_role_ddl_errors_are_materialize_s(admin) -> None:
    admin.execute("CREATE ROLE joe")
    cases = {
        "CREATE ROLE joe": ("42710", "role 'joe' already exists"),
        "CREATE ROLE public": ("42939", 'role name "public" is reserved'),
        "CREATE ROLE mz_joe": ("42939", 'role name "mz_joe" is reserved'),
        "CREATE ROLE kim LOGIN NOLOGIN": ("42601", "conflicting or redundant options"),
        "CREATE ROLE kim CREATEDB": ("0A000", "CREATEDB attribute is not supported"),
        "CREATE ROLE kim NOINHERIT": ("0A000", "non inherit roles not yet supported"),
        "ALTER ROLE nobody LOGIN": ("42704", "unknown role 'nobody'"),
        "DROP ROLE nobody": ("42704", "unknown role 'nobody'"),
        "DROP ROLE materialize": ("55006", "current role cannot be dropped"),
        "ALTER ROLE materialize NOSUPERUSER": ("42501", "permission denied to alter role"),
        "GRANT SELECT ON mz_roles TO nobody": ("42704", "unknown"),
        "GRANT joe TO joe": ("0LP01", 'role "joe" is a member of role "joe"'),
        "GRANT nobody TO joe": ("42704", "unknown role 'nobody'"),
        "GRANT joe TO nobody": ("42704", "unknown role 'nobody'"),
        "DROP ROLE pg_read_server_files": (
            "2BP01", "cannot drop role pg_read_server_files because it is required by the "
                     "database system"),
        "ALTER ROLE pg_write_server_files LOGIN": ("2BP01", "cannot alter role"),
    }
    for sql, (code, message) in cases.items():
        with pytest.raises(mzflow.Error) as e:
            admin.execute(sql)
        assert (e.value.code, message in str(e.value)) == (code, True), (sql, str(e.value))
    assert admin.execute("DROP ROLE IF EXISTS nobody").notices == [
        'role "nobody" does not exist, skipping']
    admin.execute("DROP ROLE joe")
    assert roles.find(admin.store.snapshot(), "joe") is None


# -- privileges -------------------------------------------------------------------------


@pytest.fixture
def joe(home, admin):
    admin.execute("CREATE ROLE joe LOGIN; CREATE TABLE t (a int); "
                  "CREATE VIEW v AS SELECT a FROM t")
    with as_role(home, "joe") as c:
        yield c


def test_select_needs_select_and_revoke_takes_it_back(admin, joe) -> None:
    message = denied(joe, "SELECT * FROM t")
    assert message == 'permission denied for TABLE "materialize.public.t"'
    assert not allowed(joe, "SELECT a FROM t WHERE a > 1")
    admin.execute("GRANT SELECT ON TABLE t TO joe")
    assert allowed(joe, "SELECT a FROM t WHERE a > 1")
    assert allowed(joe, "SELECT count(*) FROM (SELECT * FROM t) s")
    admin.execute("REVOKE SELECT ON t FROM joe")
    assert not allowed(joe, "SELECT a FROM t")
    # Catalog tables are everyone's.
    assert joe.execute("SELECT name FROM mz_tables").rows == [("t",)]
    # A CTE named like the table is not the table.
    assert allowed(joe, "WITH t AS (SELECT 1 AS a) SELECT a FROM t")
    # Subqueries, joins and set operations read what they name.
    admin.execute("CREATE TABLE u (b int); GRANT SELECT ON t TO joe")
    for sql in ("SELECT a FROM t WHERE a IN (SELECT b FROM u)",
                "SELECT a FROM t JOIN u ON a = b",
                "SELECT a FROM t UNION SELECT b FROM u",
                "SELECT b FROM u AS OF 1", "SUBSCRIBE u UP TO 1"):
        assert not allowed(joe, sql), sql
    assert denied(joe, "EXPLAIN SELECT b FROM u") == (
        'permission denied for TABLE "materialize.public.u"')


def test_a_view_is_read_with_select_on_the_view_and_its_owner_s_privileges(
        home, admin, joe) -> None:
    # Materialize (and PostgreSQL): the reader needs SELECT on the view only; the view's
    # owner needs it on what the view reads.
    assert denied(joe, "SELECT * FROM v") == 'permission denied for VIEW "materialize.public.v"'
    admin.execute("GRANT SELECT ON v TO joe")
    assert allowed(joe, "SELECT * FROM v")
    assert not allowed(joe, "SELECT * FROM t")  # still not the table itself
    # A view owned by a role without SELECT on the table: joe's SELECT on it is not
    # enough, the owner's is missing.
    admin.execute("CREATE ROLE kim LOGIN; GRANT CREATE ON SCHEMA public TO kim")
    with as_role(home, "kim") as kim:
        kim.execute("CREATE VIEW kv AS SELECT a FROM t")
        assert privileges.owner_of(admin.store.snapshot(), privileges.item_object(
            admin.store.snapshot().resolve("kv"))) == kim.role_id
        kim.execute("GRANT SELECT ON kv TO joe")  # the owner may grant it
        assert denied(joe, "SELECT * FROM kv") == (
            'permission denied for TABLE "materialize.public.t"')
        admin.execute("GRANT SELECT ON t TO kim")
        assert allowed(joe, "SELECT * FROM kv")
        assert not allowed(joe, "SELECT * FROM t")
        # Materialize's order: the schema's USAGE (of the owner, here) before the table's.
        admin.execute("REVOKE USAGE ON SCHEMA public FROM PUBLIC")
        assert denied(joe, "SELECT * FROM kv") == (
            'permission denied for SCHEMA "materialize.public"')


def test_the_cluster_needs_usage_for_reads(admin, joe) -> None:
    admin.execute("GRANT SELECT ON t TO joe; CREATE CLUSTER c; SET cluster = c")
    joe.execute("SET cluster = c")
    assert denied(joe, "SELECT * FROM t") == 'permission denied for CLUSTER "c"'
    assert joe.execute("SELECT 1 AS one").rows == [(1,)]  # no relation, no cluster
    admin.execute("GRANT USAGE ON CLUSTER c TO joe")
    assert allowed(joe, "SELECT * FROM t")


def test_writes_need_their_privilege_and_update_delete_need_select(admin, joe) -> None:
    assert denied(joe, "INSERT INTO t VALUES (1)") == (
        'permission denied for TABLE "materialize.public.t"')
    admin.execute("GRANT INSERT ON t TO joe")
    assert joe.execute("INSERT INTO t VALUES (1), (2)").status == "INSERT 0 2"
    assert denied(joe, "INSERT INTO t SELECT a FROM t") == (
        'permission denied for TABLE "materialize.public.t"')
    for sql, grant in (("UPDATE t SET a = 3", "UPDATE"), ("DELETE FROM t", "DELETE")):
        denied(joe, sql)
        admin.execute(f"GRANT {grant} ON t TO joe")
        assert not allowed(joe, sql)  # Materialize asks SELECT too
        admin.execute("GRANT SELECT ON t TO joe")
        assert allowed(joe, sql)
        admin.execute("REVOKE SELECT ON t FROM joe")
    admin.execute("REVOKE ALL PRIVILEGES ON t FROM joe")
    denied(joe, "INSERT INTO t VALUES (1)")
    assert denied(joe, "INSERT INTO v VALUES (1)") == (
        'permission denied for VIEW "materialize.public.v"')


def test_create_needs_create_on_the_schema_and_the_cluster(admin, joe) -> None:
    assert denied(joe, "CREATE TABLE j (a int)") == (
        'permission denied for SCHEMA "materialize.public"')
    admin.execute("GRANT CREATE ON SCHEMA materialize.public TO joe")
    joe.execute("CREATE TABLE j (a int)")
    assert denied(joe, "CREATE MATERIALIZED VIEW jm AS SELECT a FROM j") == (
        'permission denied for CLUSTER "default"')
    assert denied(joe, "CREATE INDEX ON j (a)") == 'permission denied for CLUSTER "default"'
    admin.execute("GRANT CREATE ON CLUSTER default TO joe")
    joe.execute("CREATE MATERIALIZED VIEW jm AS SELECT a FROM j")
    assert denied(joe, "CREATE INDEX ON t (a)") == "must be owner of TABLE materialize.public.t"
    assert denied(joe, "CREATE CLUSTER mine") == "permission denied for SYSTEM"
    assert denied(joe, "CREATE ROLE kim") == "permission denied for SYSTEM"
    admin.execute("GRANT CREATECLUSTER, CREATEROLE ON SYSTEM TO joe")
    joe.execute("CREATE CLUSTER mine; CREATE ROLE kim")
    assert denied(joe, "CREATE ROLE boss SUPERUSER") == "permission denied to create role"
    # What joe created, joe owns: all privileges on it, and it may grant them.
    snap = admin.store.snapshot()
    for obj in (privileges.item_object(snap.resolve("j")),
                privileges.item_object(snap.resolve("jm")),
                privileges.cluster_object(snap.cluster_by_name("mine").id)):
        assert privileges.owner_of(snap, obj) == joe.role_id
    assert allowed(joe, "SELECT * FROM jm")
    joe.execute("GRANT SELECT ON j TO kim")
    rows = admin.execute("SHOW PRIVILEGES ON TABLES FOR kim").rows
    assert ("joe", "kim", "materialize", "public", "j", "table", "SELECT") in rows


def test_drop_and_alter_are_the_owner_s(home, admin, joe) -> None:
    for sql in ("DROP TABLE t", "DROP VIEW v", "ALTER TABLE t RENAME TO t2",
                "ALTER TABLE t ADD COLUMN b int", "COMMENT ON TABLE t IS 'x'",
                "COMMENT ON COLUMN t.a IS 'x'", "GRANT SELECT ON t TO joe",
                "ALTER CLUSTER default SET (SIZE = 'small')", "DROP CLUSTER default"):
        message = denied(joe, sql)
        assert message.startswith("must be owner of "), (sql, message)
    assert denied(joe, "DROP TABLE t") == "must be owner of TABLE materialize.public.t"
    assert denied(joe, "DROP CLUSTER default") == "must be owner of CLUSTER default"
    assert denied(joe, "ALTER SYSTEM SET max_result_size = 1") == (
        "permission denied to alter system")
    # Its owner drops it; so does a superuser.
    admin.execute("GRANT CREATE ON SCHEMA public TO joe")
    joe.execute("CREATE TABLE mine (a int); ALTER TABLE mine RENAME TO mine2")
    joe.execute("DROP TABLE mine2")
    admin.execute("CREATE ROLE root LOGIN SUPERUSER")
    with as_role(home, "root") as root:
        root.execute("DROP VIEW v")  # materialize's, dropped by another superuser


def test_server_files_need_a_file_access_role(tmp_path, admin, joe) -> None:
    data = tmp_path / "rows.csv"
    data.write_text("1\n2\n")
    admin.execute("GRANT INSERT, SELECT ON t TO joe")
    with pytest.raises(mzflow.InsufficientPrivilege) as e:
        joe.execute(f"COPY t FROM '{data}'")
    assert e.value.message == "permission denied to COPY from a file"
    assert "pg_read_server_files" in (e.value.detail or "")
    assert denied(joe, f"CREATE SINK s FROM t INTO CSV '{tmp_path / 'out'}'").startswith(
        "permission denied to create a sink")
    assert denied(joe, f"ALTER TABLE t SET (EXPECTATION SUITE = '{data}')").startswith(
        "must be owner of")
    # a source fed from a folder reads the server's files on every tick
    (tmp_path / "landing").mkdir()
    assert denied(joe, f"CREATE SOURCE src FROM FILES '{tmp_path / 'landing'}' "
                       "(FORMAT csv) (a int)") == (
        "permission denied to create a source from files")
    admin.execute("GRANT CREATE ON SCHEMA public TO joe")
    # a load generator needs CREATE on the schema and on the cluster, as in Materialize
    assert denied(joe, "CREATE SOURCE c FROM LOAD GENERATOR COUNTER").startswith(
        "permission denied for CLUSTER")
    joe.execute("CREATE TABLE mine (a int)")  # even its owner reads no server file
    assert denied(joe, f"ALTER TABLE mine SET (EXPECTATION SUITE = '{data}')") == (
        "permission denied to read an expectation suite from a file")
    assert admin.execute(f"COPY t FROM '{data}'").status == "COPY 2"
    # FROM STDIN (the client's data, over the wire) needs only INSERT.
    assert allowed(joe, "COPY t FROM STDIN WITH (FORMAT csv)")
    admin.execute("REVOKE INSERT ON t FROM joe")
    assert not allowed(joe, "COPY t FROM STDIN")
    assert allowed(joe, "COPY t TO STDOUT") and allowed(joe, "COPY (SELECT a FROM t) TO STDOUT")
    admin.execute("REVOKE SELECT ON t FROM joe")
    assert not allowed(joe, "COPY (SELECT a FROM t) TO STDOUT")


def test_drop_role_is_refused_while_it_owns_or_holds_anything(home, admin, joe) -> None:
    admin.execute("GRANT CREATE ON SCHEMA public TO joe; GRANT SELECT ON v TO joe")
    joe.execute("CREATE TABLE mine (a int)")
    with pytest.raises(mzflow.DependentObjects) as e:
        admin.execute("DROP ROLE joe")
    assert e.value.code == "2BP01"
    assert str(e.value).splitlines()[0] == (
        'role "joe" cannot be dropped because some objects depend on it')
    assert e.value.detail is not None
    assert set(e.value.detail.splitlines()) == {
        'joe: owner of TABLE "materialize.public.mine"',
        'joe: privileges on VIEW "materialize.public.v" granted by materialize',
        'joe: privileges on SCHEMA "materialize.public" granted by materialize'}
    admin.execute("DROP TABLE mine; REVOKE CREATE ON SCHEMA public FROM joe; "
                  "REVOKE SELECT ON v FROM joe")
    admin.execute("DROP ROLE joe")
    # Its open session is refused from then on (Materialize: re-connect).
    message = denied(joe, "SELECT 1")
    assert "was concurrently dropped" in message


def test_a_role_changes_its_own_password_only(home, admin, joe) -> None:
    admin.execute("CREATE ROLE kim LOGIN")
    joe.execute(f"ALTER ROLE joe PASSWORD '{PASSWORD}'")
    assert scram_login(roles.verifier(admin.store.snapshot(), "joe") or "", PASSWORD)
    assert denied(joe, "ALTER ROLE kim PASSWORD 'x'") == "permission denied for SYSTEM"
    assert denied(joe, "ALTER ROLE joe LOGIN") == "permission denied for SYSTEM"
    assert denied(joe, "DROP ROLE kim") == "permission denied for SYSTEM"
    admin.execute("GRANT CREATEROLE ON SYSTEM TO joe")
    joe.execute("ALTER ROLE kim NOLOGIN")
    assert denied(joe, "ALTER ROLE materialize PASSWORD 'x'") == (
        "permission denied to alter role")
    assert denied(joe, "GRANT CREATEDB ON SYSTEM TO kim") == (
        "permission denied to GRANT/REVOKE SYSTEM PRIVILEGES")


def test_grant_errors_and_the_privilege_listing(admin, joe) -> None:
    with pytest.raises(mzflow.Error, match='invalid privilege types INSERT for VIEW '
                                           '"materialize.public.v"') as e:
        admin.execute("GRANT INSERT ON v TO joe")
    assert e.value.code == "0LP01"
    with pytest.raises(mzflow.Error, match="unknown schema 'nope'"):
        admin.execute("GRANT USAGE ON SCHEMA nope TO joe")
    with pytest.raises(mzflow.Error, match="unknown role 'nobody'"):
        admin.execute("GRANT SELECT ON t TO nobody")
    admin.execute("GRANT ALL ON t TO joe; GRANT SELECT ON v TO PUBLIC")
    rows = admin.execute("SHOW PRIVILEGES FOR joe").rows
    table = {r[-1] for r in rows if r[4] == "t"}
    assert table == {"SELECT", "INSERT", "UPDATE", "DELETE"}
    assert ("materialize", "PUBLIC", "materialize", "public", "v", "view", "SELECT") in rows
    assert ("materialize", "PUBLIC", None, None, "default", "cluster", "USAGE") in rows
    owner_rows = admin.execute("SHOW PRIVILEGES FOR materialize").rows
    assert ("materialize", "materialize", "materialize", "public", "t", "table",
            "DELETE") in owner_rows
    # The verifier is in no catalog table.
    admin.execute(f"ALTER ROLE joe PASSWORD '{PASSWORD}'")
    for table_name in ("mz_roles", "mz_role_members", "mz_objects"):
        cells = [str(v) for row in admin.execute(f"SELECT * FROM {table_name}").rows
                 for v in row]
        assert not any("SCRAM" in cell for cell in cells), table_name


def test_a_catalog_from_before_roles_is_owned_by_materialize(home, admin) -> None:
    import sqlalchemy as sa

    from mzflow.catalog import migrations

    admin.execute("CREATE TABLE t (a int); CREATE CLUSTER c")
    version = next(v for v, name, _ in migrations.MIGRATIONS
                   if name == "roles and privileges")
    engine = admin.store.engine
    with engine.begin() as conn:  # back to the schema before the roles' migration
        for table in ("grants", "owners", "roles"):
            conn.execute(sa.text(f"DROP TABLE {table}"))
        conn.execute(sa.text(f"DELETE FROM schema_migrations WHERE version = {version}"))
        conn.execute(sa.text("DELETE FROM meta WHERE key = 'next_role_id'"))
    admin.close()
    with mzflow.connect(home) as again:
        snap = again.store.snapshot()
        assert [r.name for r in snap.roles] == ["materialize"]
        for obj in (privileges.item_object(snap.resolve("t")),
                    privileges.cluster_object(snap.cluster_by_name("c").id),
                    privileges.cluster_object(snap.cluster_by_name("default").id)):
            assert (*obj, roles.MATERIALIZE_ID) in snap.owners
        assert privileges.has(snap, roles.PUBLIC_ID, privileges.cluster_object(1), "U")
        assert not privileges.has(snap, roles.PUBLIC_ID,
                                  privileges.cluster_object(snap.cluster_by_name("c").id),
                                  "U")


# -- end to end, on Spark and on PostgreSQL ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.spark
def test_reads_as_a_role_on_spark(home, admin, joe) -> None:
    admin.execute("INSERT INTO t VALUES (1), (2)")
    denied(joe, "SELECT a FROM t")
    admin.execute("GRANT SELECT ON t TO joe")
    assert sorted(joe.execute("SELECT a FROM t").rows) == [(1,), (2,)]
    admin.execute("REVOKE SELECT ON t FROM joe; GRANT SELECT ON v TO joe")
    denied(joe, "SELECT a FROM t")
    assert sorted(joe.execute("SELECT a FROM v").rows) == [(1,), (2,)]
    admin.execute("GRANT UPDATE, SELECT ON t TO joe")
    assert joe.execute("UPDATE t SET a = a + 10 WHERE a = 1").status == "UPDATE 1"
    assert sorted(joe.execute("SELECT a FROM v").rows) == [(2,), (11,)]


@pytest.mark.slow
@pytest.mark.postgres
def test_postgresql_accepts_the_verifier_as_the_password_s(pg_url, admin) -> None:
    # The oracle: PostgreSQL, given our verifier as a pre-hashed password, lets in the
    # right password over scram-sha-256 and no other.
    import psycopg2
    import sqlalchemy as sa

    verifier = roles.make_verifier(PASSWORD)
    url = sa.engine.make_url(pg_url)
    with psycopg2.connect(host=url.host, port=url.port, user=url.username,
                          dbname=url.database) as db:
        db.autocommit = True
        with db.cursor() as cur:
            cur.execute("CREATE ROLE mzflow_scram LOGIN PASSWORD %s", (verifier,))
            cur.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'mzflow_scram'")
            assert cur.fetchone() == (verifier,)  # kept as given: a verifier it reads
            cur.execute("SHOW hba_file")
            hba = Path(cur.fetchone()[0])
            original = hba.read_text()
            hba.write_text(f"host all mzflow_scram 127.0.0.1/32 scram-sha-256\n{original}")
            cur.execute("SELECT pg_reload_conf()")
    try:
        def login(password: str) -> bool:
            try:
                psycopg2.connect(host="127.0.0.1", port=url.port, user="mzflow_scram",
                                 password=password, dbname=url.database).close()
            except psycopg2.OperationalError as e:
                assert "password authentication failed" in str(e)
                return False
            return True

        assert login(PASSWORD)
        assert not login(PASSWORD + "!")
    finally:
        hba.write_text(original)
        with psycopg2.connect(host=url.host, port=url.port, user=url.username,
                              dbname=url.database) as db:
            db.autocommit = True
            with db.cursor() as cur:
                cur.execute("SELECT pg_reload_conf()")
                cur.execute("DROP ROLE mzflow_scram")


def test_create_or_replace_keeps_the_view_s_owner_and_grants(home, admin, joe) -> None:
    admin.execute("GRANT CREATE ON SCHEMA public TO joe; GRANT SELECT ON t TO joe")
    joe.execute("CREATE VIEW jv AS SELECT a FROM t")
    joe.execute("GRANT SELECT ON jv TO PUBLIC")
    admin.execute("CREATE ROLE kim LOGIN")
    with as_role(home, "kim") as kim:
        assert allowed(kim, "SELECT * FROM jv")
        assert denied(kim, "CREATE OR REPLACE VIEW jv AS SELECT 1 AS a").startswith(
            "must be owner of VIEW")
        admin.execute("CREATE OR REPLACE VIEW jv AS SELECT a + 1 AS a FROM t")
        snap = admin.store.snapshot()
        assert privileges.owner_of(snap, privileges.item_object(snap.resolve("jv"))) == (
            joe.role_id)
        assert allowed(kim, "SELECT * FROM jv")


@pytest.mark.slow
def test_a_role_logs_in_to_the_server_with_its_password(home, admin, tmp_path) -> None:
    import os
    import subprocess
    import sys
    import time

    import psycopg

    from mzflow_dev.pg_server import free_port

    admin.execute(f"CREATE ROLE joe LOGIN PASSWORD '{PASSWORD}'; CREATE ROLE grp; "
                  "CREATE TABLE t (a int)")
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mzflow.cli", "serve", "--host", "127.0.0.1", "--port",
         str(port)], env={**os.environ, "MZFLOW_HOME": home}, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        url = f"host=127.0.0.1 port={port} dbname=materialize user=joe"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                db = psycopg.connect(f"{url} password='{PASSWORD}'", autocommit=True)
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.5)
        with db:
            assert db.execute("SELECT 1").fetchall() == [(1,)]
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match='permission denied for TABLE "materialize.public.t"'):
                db.execute("SELECT a FROM t")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(f"{url} password='{PASSWORD}x'")
        with pytest.raises(psycopg.OperationalError):  # NOLOGIN: no password, no login
            psycopg.connect(f"host=127.0.0.1 port={port} dbname=materialize user=grp "
                            "password=x")
        assert PASSWORD not in (tmp_path / "serve.log").read_text()
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_a_transaction_checks_what_it_reads_and_inserts(admin, joe) -> None:
    """Found in review: a SELECT, a cursor, an AS OF read or an INSERT inside BEGIN … COMMIT
    skipped the privilege checks that the same statement outside one gets."""
    for sql in ("SELECT * FROM v", "SELECT b FROM t AS OF 1", "INSERT INTO t VALUES (1)"):
        joe.execute("BEGIN")
        assert denied(joe, sql).startswith("permission denied for "), sql
        joe.execute("ROLLBACK")
    joe.execute("BEGIN; DECLARE c CURSOR FOR SELECT * FROM t")
    assert denied(joe, "FETCH ALL c") == 'permission denied for TABLE "materialize.public.t"'
    joe.execute("ROLLBACK")
    # Granted, the same transaction commits.
    admin.execute("GRANT INSERT ON t TO joe")
    joe.execute("BEGIN")
    assert joe.execute("INSERT INTO t VALUES (7)").status == "INSERT 0 1"
    assert joe.execute("COMMIT").status == "COMMIT"


def test_a_transaction_resolves_names_by_the_session_s_search_path(admin) -> None:
    """A read and a buffered INSERT inside a transaction name what the session's
    search_path names, not what the default path would (found in review)."""
    admin.execute("CREATE SCHEMA s; CREATE VIEW v AS SELECT 1 AS a; "
                  "CREATE VIEW s.v AS SELECT 2 AS a; CREATE TABLE s.only_s (a int)")
    admin.execute("SET search_path = s")
    assert admin.execute("SELECT a FROM v").rows == [(2,)]
    admin.execute("BEGIN")
    assert admin.execute("SELECT a FROM v").rows == [(2,)]
    admin.execute("COMMIT")
    # The INSERT is buffered until COMMIT, which must still find s.only_s.
    admin.execute("BEGIN; INSERT INTO only_s VALUES (1)")
    admin.execute("SET search_path = public")
    assert admin.execute("COMMIT").status == "COMMIT"
