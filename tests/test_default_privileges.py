"""What dbt-materialize's blue/green macros ask of the catalog (issue 38, item 4), each
piece on its own, in the catalog only (no Spark): ALTER DEFAULT PRIVILEGES applied to
objects created later, its errors, mz_show_default_privileges; mz_aclexplode's rows
against the privileges granted; mz_clusters' and mz_schemas' owner and ACL columns;
mz_is_superuser and has_system_privilege; COMMENT ON SCHEMA; REPLICATION FACTOR; the
mz_internal relations deploy_await reads. The whole flow is tests/test_dbt_bluegreen.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import mzflow
from mzflow.catalog import privileges, roles


@pytest.fixture
def home(tmp_path: Path) -> str:
    return str(tmp_path / "home")


@pytest.fixture
def admin(home: str) -> Iterator[mzflow.Connection]:
    with mzflow.connect(home) as c:
        c.execute("CREATE ROLE dbt LOGIN; CREATE ROLE reader; CREATE ROLE other;"
                  "CREATE SCHEMA a; CREATE SCHEMA b;"
                  "GRANT CREATE, USAGE ON SCHEMA a TO dbt; GRANT CREATE, USAGE ON SCHEMA b TO dbt;"
                  "GRANT CREATECLUSTER ON SYSTEM TO dbt")
        yield c


def fails(conn: mzflow.Connection, sql: str, code: str, text: str) -> None:
    with pytest.raises(mzflow.Error) as info:
        conn.execute(sql)
    assert (info.value.code, info.value.message) == (code, text), sql


def held_by(conn: mzflow.Connection, grantee: str) -> set[tuple[object, ...]]:
    """(schema, name, object type, privilege) of what ``grantee`` holds by a grant of its
    own (not PUBLIC's)."""
    return {(schema, name, kind, privilege) for _, who, _, schema, name, kind, privilege
            in conn.execute(f"SHOW PRIVILEGES FOR {grantee}").rows if who == grantee}


def test_a_default_applies_to_what_its_role_creates_later_in_its_scope(
        home: str, admin: mzflow.Connection) -> None:
    admin.execute("CREATE TABLE a.before (x int)")
    assert admin.execute("ALTER DEFAULT PRIVILEGES FOR ROLE dbt IN SCHEMA a GRANT SELECT, "
                         "INSERT ON TABLES TO reader").status == "ALTER DEFAULT PRIVILEGES"
    with mzflow.connect(home, role="dbt") as dbt:
        dbt.execute("CREATE TABLE a.t (x int); CREATE VIEW a.v AS SELECT x FROM a.t;"
                    "CREATE TABLE b.t (x int)")
    admin.execute("CREATE TABLE a.by_admin (x int)")
    # The table gets both; the view only SELECT (a view has no INSERT); not the table
    # made before, nor in another schema, nor by another role.
    assert held_by(admin, "reader") == {("a", "t", "table", "SELECT"),
                                        ("a", "t", "table", "INSERT"),
                                        ("a", "v", "view", "SELECT")}
    snap = admin.store.snapshot()
    dbt_id = roles.find(snap, "dbt").id  # type: ignore[union-attr]
    # The grantor is the object's owner, the role that created it.
    assert {g.grantor for g in snap.grants if g.grantee == roles.find(
        snap, "reader").id} == {dbt_id}  # type: ignore[union-attr]
    assert admin.execute("SELECT * FROM mz_internal.mz_show_default_privileges").rows == [
        ("dbt", "materialize", "a", "table", "reader", "INSERT"),
        ("dbt", "materialize", "a", "table", "reader", "SELECT")]
    assert admin.execute("SELECT role_id, database_id, schema_id, object_type, grantee, "
                         "privileges FROM mz_default_privileges").rows == [
        (dbt_id, "u1", snap.schema_id("a"), "table", roles.find(snap, "reader").id,  # type: ignore[union-attr]
         "ar")]


def test_for_all_roles_and_revoke(home: str, admin: mzflow.Connection) -> None:
    admin.execute("CREATE CLUSTER before SIZE 'xsmall';"
                  "ALTER DEFAULT PRIVILEGES FOR ALL ROLES GRANT USAGE ON CLUSTERS TO reader;"
                  "ALTER DEFAULT PRIVILEGES FOR ALL ROLES GRANT ALL ON SCHEMAS TO reader")
    with mzflow.connect(home, role="dbt") as dbt:
        dbt.execute("CREATE CLUSTER c1 SIZE 'xsmall'")
    admin.execute("CREATE SCHEMA s1")
    assert held_by(admin, "reader") == {(None, "c1", "cluster", "USAGE"),
                                        (None, "s1", "schema", "USAGE"),
                                        (None, "s1", "schema", "CREATE")}
    admin.execute("ALTER DEFAULT PRIVILEGES FOR ALL ROLES REVOKE USAGE ON CLUSTERS FROM "
                  "reader; ALTER DEFAULT PRIVILEGES FOR ALL ROLES REVOKE CREATE ON SCHEMAS "
                  "FROM reader; CREATE CLUSTER c2 SIZE 'xsmall'; CREATE SCHEMA s2")
    assert held_by(admin, "reader") - {(None, "c1", "cluster", "USAGE"),
                                       (None, "s1", "schema", "USAGE"),
                                       (None, "s1", "schema", "CREATE")} == {
        (None, "s2", "schema", "USAGE")}
    assert admin.execute("SELECT object_owner, object_type, privilege_type FROM "
                         "mz_internal.mz_show_default_privileges").rows == [
        ("PUBLIC", "schema", "USAGE")]


def test_a_schemas_defaults_follow_it_through_a_swap(home: str,
                                                     admin: mzflow.Connection) -> None:
    """deploy_init copies the production schema's defaults onto the deployment schema;
    after deploy_promote's swap the production name has them."""
    admin.execute("ALTER DEFAULT PRIVILEGES FOR ROLE dbt IN SCHEMA b GRANT SELECT ON TABLES "
                  "TO reader; ALTER SCHEMA a SWAP WITH b")
    with mzflow.connect(home, role="dbt") as dbt:
        dbt.execute("CREATE TABLE a.t (x int); CREATE TABLE b.t (x int)")
    assert held_by(admin, "reader") == {("a", "t", "table", "SELECT")}
    assert [r[2] for r in admin.execute(
        "SELECT * FROM mz_internal.mz_show_default_privileges").rows] == ["a"]


def test_errors(home: str, admin: mzflow.Connection) -> None:
    fails(admin, "ALTER DEFAULT PRIVILEGES FOR ROLE nobody GRANT SELECT ON TABLES TO reader",
          "42704", "unknown role 'nobody'")
    fails(admin, "ALTER DEFAULT PRIVILEGES FOR ROLE dbt GRANT SELECT ON TABLES TO nobody",
          "42704", "unknown role 'nobody'")
    fails(admin, "ALTER DEFAULT PRIVILEGES FOR ROLE dbt IN SCHEMA nowhere GRANT SELECT ON "
          "TABLES TO reader", "3F000", "unknown schema 'nowhere'")
    fails(admin, "ALTER DEFAULT PRIVILEGES FOR ROLE dbt GRANT INSERT ON SCHEMAS TO reader",
          "0LP01", "invalid privilege types INSERT for SCHEMA")
    fails(admin, "ALTER DEFAULT PRIVILEGES FOR ROLE dbt IN SCHEMA a GRANT USAGE ON CLUSTERS "
          "TO reader", "22023", "cannot specify CLUSTERS and IN SCHEMA at the same time")
    fails(admin, "ALTER DEFAULT PRIVILEGES FOR ROLE dbt GRANT USAGE ON TYPES TO reader",
          "0A000", "ALTER DEFAULT PRIVILEGES ON TYPES: mzflow has no types")
    with pytest.raises(mzflow.Error, match="Expected FOR after ALTER DEFAULT PRIVILEGES"):
        admin.execute("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO reader")
    with mzflow.connect(home, role="dbt") as dbt:
        fails(dbt, "ALTER DEFAULT PRIVILEGES FOR ALL ROLES GRANT SELECT ON TABLES TO reader",
              "42501", "permission denied to ALTER DEFAULT PRIVILEGES FOR ALL ROLES")
        fails(dbt, "ALTER DEFAULT PRIVILEGES FOR ROLE other GRANT SELECT ON TABLES TO reader",
              "42501", 'must be a member of "other"')
        # a role may set its own
        dbt.execute("ALTER DEFAULT PRIVILEGES FOR ROLE dbt GRANT SELECT ON TABLES TO reader")
    assert len(admin.store.snapshot().default_privileges) == 1


def test_mz_aclexplode_is_one_row_per_privilege(admin: mzflow.Connection) -> None:
    """PostgreSQL's aclexplode shape, (grantor, grantee, privilege_type, is_grantable), with
    Materialize's role ids; PUBLIC is ``p``."""
    admin.execute("CREATE CLUSTER k SIZE 'xsmall'; GRANT USAGE, CREATE ON CLUSTER k TO reader;"
                  "GRANT USAGE ON CLUSTER k TO PUBLIC; GRANT USAGE ON SCHEMA a TO reader")
    snap = admin.store.snapshot()
    reader = roles.find(snap, "reader").id  # type: ignore[union-attr]
    owner = roles.MATERIALIZE_ID
    k = snap.cluster_by_name("k").id
    (acl,), = admin.execute("SELECT privileges FROM mz_clusters WHERE name = 'k'").rows
    # Materialize's mz_aclitem text: the owner's first, PUBLIC's grantee empty
    assert acl[0] == f"{owner}=UC/{owner}"
    assert sorted(acl[1:]) == sorted([f"{reader}=UC/{owner}", f"=U/{owner}"])
    result = admin.execute("SELECT mz_internal.mz_aclexplode(privileges).* FROM mz_clusters "
                           "WHERE name = 'k'")
    assert result.columns == ["grantor", "grantee", "privilege_type", "is_grantable"]
    # the same privileges as the catalog holds them, one row per letter
    expected = sorted((grantor, grantee, privileges.NAMES[letter], False)
                      for obj, grantee, grantor, letters in privileges.held_rows(snap)
                      if obj == ("cluster", str(k)) for letter in letters)
    assert sorted(result.rows) == expected
    assert (owner, roles.PUBLIC_ID, "USAGE", False) in result.rows
    # dbt-materialize's internal_copy_schema_grants, word for word but the names
    assert admin.execute(
        "WITH schema_privilege AS (SELECT mz_internal.mz_aclexplode(s.privileges).* "
        "FROM mz_schemas s JOIN mz_databases d ON s.database_id = d.id "
        "WHERE d.name = current_database() AND s.name = 'a') "
        "SELECT 'GRANT ' || s.privilege_type || ' ' || 'ON SCHEMA ' || quote_ident('b') || "
        "' ' || 'TO ' || quote_ident(grantee.name) FROM schema_privilege AS s "
        "JOIN mz_roles AS grantee ON s.grantee = grantee.id "
        "WHERE grantee.name NOT IN ('none', 'mz_system', 'mz_support', current_role) "
        "ORDER BY 1").rows == [("GRANT CREATE ON SCHEMA b TO dbt",),
                               ("GRANT USAGE ON SCHEMA b TO dbt",),
                               ("GRANT USAGE ON SCHEMA b TO reader",)]


def test_what_deploy_init_reads_of_a_cluster(home: str, admin: mzflow.Connection) -> None:
    admin.execute("CREATE CLUSTER prod SIZE 'small'")
    config = ("SELECT c.managed, c.size, c.replication_factor, cs.type, "
              "cs.refresh_hydration_time_estimate FROM mz_clusters c "
              "LEFT JOIN mz_internal.mz_cluster_schedules cs ON cs.cluster_id = c.id "
              "WHERE c.name = 'prod'")
    assert admin.execute(config).rows == [(True, "small", 1, "manual", None)]
    # deploy_init creates the deployment cluster with what it read
    admin.execute("CREATE CLUSTER prod_dbt_deploy (SIZE = 'small', REPLICATION FACTOR = 1)")
    assert admin.execute(config.replace("'prod'", "'prod_dbt_deploy'")).rows == [
        (True, "small", 1, "manual", None)]
    fails(admin, "CREATE CLUSTER two (SIZE = 'small', REPLICATION FACTOR = 2)", "0A000",
          "REPLICATION FACTOR other than 1 is not supported: an mzflow cluster has one "
          "replica; use SIZE to scale it")
    snap = admin.store.snapshot()
    dbt = roles.find(snap, "dbt").id  # type: ignore[union-attr]
    with mzflow.connect(home, role="dbt") as conn:
        conn.execute("CREATE CLUSTER mine SIZE 'xsmall'")
        assert conn.execute("SELECT mz_is_superuser(), has_system_privilege('CREATECLUSTER'), "
                            "has_system_privilege('CREATEROLE')").rows == [(False, True, False)]
        assert conn.execute("SELECT c.name FROM mz_clusters c JOIN mz_roles r "
                            "ON c.owner_id = r.id WHERE r.name = current_role").rows == [
            ("mine",)]
        fails(conn, "SELECT has_system_privilege('SELECT')", "22023",
              'unrecognized privilege type: "select"')
    assert admin.execute("SELECT mz_is_superuser()").rows == [(True,)]
    assert dbt != roles.MATERIALIZE_ID


def test_comment_on_schema(home: str, admin: mzflow.Connection) -> None:
    """deploy_promote tags the schema it deployed; the tag follows the schema's id."""
    assert admin.execute("COMMENT ON SCHEMA a IS 'Deployment by dbt'").status == "COMMENT"
    find = ("SELECT s.name, c.object_type, c.comment FROM mz_internal.mz_comments c "
            "JOIN mz_schemas s ON c.id = s.id")
    assert admin.execute(find).rows == [("a", "schema", "Deployment by dbt")]
    admin.execute("ALTER SCHEMA a SWAP WITH b")
    assert admin.execute(find).rows == [("b", "schema", "Deployment by dbt")]
    admin.execute("COMMENT ON SCHEMA b IS NULL")
    assert admin.execute(find).rows == []
    admin.execute("COMMENT ON SCHEMA a IS 'x'; DROP SCHEMA a CASCADE; CREATE SCHEMA a")
    assert admin.execute(find).rows == []
    fails(admin, "COMMENT ON SCHEMA nowhere IS 'x'", "3F000", "unknown schema 'nowhere'")
    with mzflow.connect(home, role="dbt") as dbt:
        fails(dbt, "COMMENT ON SCHEMA a IS 'x'", "42501",
              "must be owner of SCHEMA materialize.a")


def test_what_deploy_await_reads_before_any_tick(admin: mzflow.Connection) -> None:
    """The shape of dbt-materialize's are_clusters_ready, in process: a cluster whose
    objects never ticked is hydrating, with its one replica and no lag yet; no replica is
    ever OOM-killed here."""
    admin.execute("CREATE CLUSTER green SIZE 'xsmall'; CREATE TABLE a.t (x int);"
                  "CREATE MATERIALIZED VIEW a.m IN CLUSTER green AS SELECT count(*) AS n "
                  "FROM a.t; CREATE INDEX IN CLUSTER green ON a.m (n)")
    ready = """
        WITH oom AS (
            SELECT replica_id FROM mz_internal.mz_cluster_replica_status_history
            WHERE occurred_at + INTERVAL '24 hours' > mz_now() AND reason = 'oom-killed'
            GROUP BY replica_id HAVING COUNT(*) >= 3),
        counts AS (
            SELECT c.name, COUNT(*) FILTER (WHERE h.hydrated) AS hydrated, COUNT(*) AS total,
                   COUNT(oom.replica_id) AS failing
            FROM mz_clusters c JOIN mz_cluster_replicas r ON c.id = r.cluster_id
            LEFT JOIN mz_internal.mz_hydration_statuses h ON h.replica_id = r.id
            LEFT JOIN oom ON oom.replica_id = r.id
            WHERE c.name IN ('green') GROUP BY c.name),
        lags AS (
            SELECT h.replica_id, MAX(EXTRACT(EPOCH FROM l.lag)) AS secs
            FROM mz_internal.mz_hydration_statuses h
            JOIN mz_internal.mz_wallclock_global_lag l ON l.object_id = h.object_id
            GROUP BY h.replica_id)
        SELECT name, hydrated, total, failing, COALESCE(secs, 0)::bigint,
               EXTRACT(EPOCH FROM INTERVAL '1s')::bigint
        FROM counts LEFT JOIN lags ON true"""
    # the materialized view (its default index) and the second index
    assert admin.execute(ready).rows == [("green", 0, 2, 0, 0, 1)]
    assert admin.execute("SELECT count(*) FROM "
                         "mz_internal.mz_cluster_replica_status_history").rows == [(0,)]


def test_a_default_goes_with_its_schema_and_keeps_its_roles(admin: mzflow.Connection) -> None:
    admin.execute("ALTER DEFAULT PRIVILEGES FOR ROLE dbt IN SCHEMA a GRANT SELECT ON TABLES "
                  "TO reader; ALTER DEFAULT PRIVILEGES FOR ROLE other GRANT USAGE ON "
                  "CLUSTERS TO PUBLIC")
    with pytest.raises(mzflow.Error) as info:
        admin.execute("DROP ROLE reader")
    assert info.value.code == "2BP01"
    assert "default privileges on new tables created by dbt in schema a for reader" in str(
        info.value.detail)
    fails(admin, "DROP ROLE other", "2BP01",
          'role "other" cannot be dropped because some objects depend on it')
    admin.execute("DROP SCHEMA a CASCADE; CREATE SCHEMA a")
    assert [(d.role_id, d.object_type) for d in admin.store.snapshot().default_privileges] == [
        (roles.find(admin.store.snapshot(), "other").id, "cluster")]  # type: ignore[union-attr]
    admin.execute("DROP ROLE reader")  # nothing names it any more
    admin.execute("ALTER DEFAULT PRIVILEGES FOR ROLE other REVOKE USAGE ON CLUSTERS FROM "
                  "PUBLIC; DROP ROLE other")
    assert admin.store.snapshot().default_privileges == ()
