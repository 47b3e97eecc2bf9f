"""Versioned schema of the catalog store.

Each migration is a function applied once, in order, in its own transaction,
and recorded in ``schema_migrations``. Never edit a released migration: add a
new one. A catalog written by a newer mzflow is refused rather than guessed at.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from mzflow.errors import CatalogBusy, CatalogError

metadata = sa.MetaData()

schema_migrations = sa.Table(
    "schema_migrations", metadata,
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
)
meta = sa.Table(
    "meta", metadata,
    sa.Column("key", sa.String(100), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
clusters = sa.Table(
    "clusters", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
    sa.Column("virtual", sa.Boolean, nullable=False, default=False),
    sa.Column("size", sa.String(64)),
    # v6
    sa.Column("spark", sa.Text),  # a Spark Connect URL, sc://host:port
)
items = sa.Table(
    "items", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("oid", sa.Integer, nullable=False, unique=True),
    sa.Column("global_id", sa.String(32), nullable=False),
    sa.Column("database_name", sa.String(255), nullable=False),
    sa.Column("schema_name", sa.String(255), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("create_sql", sa.Text, nullable=False),
    sa.Column("definition", sa.Text),
    sa.Column("cluster_id", sa.Integer, sa.ForeignKey("clusters.id")),
    sa.Column("on_id", sa.String(32), sa.ForeignKey("items.id")),
    sa.Column("is_default_index", sa.Boolean, nullable=False, default=False),
    # v2
    sa.Column("created_ts", sa.BigInteger),
    sa.Column("retain_history_ms", sa.BigInteger),
    sa.Column("since_ts", sa.BigInteger),  # compaction has been applied up to here
    sa.UniqueConstraint("database_name", "schema_name", "name"),
)
collection_ids = sa.Table(
    "collection_ids", metadata,
    sa.Column("global_id", sa.String(32), primary_key=True),
    sa.Column("item_id", sa.String(32), sa.ForeignKey("items.id"), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
)
columns = sa.Table(
    "columns", metadata,
    sa.Column("item_id", sa.String(32), sa.ForeignKey("items.id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("type", sa.String(255), nullable=False),
    sa.Column("nullable", sa.Boolean, nullable=False),
    sa.Column("version_added", sa.Integer),
)
index_keys = sa.Table(
    "index_keys", metadata,
    sa.Column("index_id", sa.String(32), sa.ForeignKey("items.id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("column_name", sa.String(255)),
    sa.Column("expression", sa.Text),
)
dependencies = sa.Table(
    "dependencies", metadata,
    sa.Column("item_id", sa.String(32), sa.ForeignKey("items.id"), primary_key=True),
    sa.Column("depends_on", sa.String(32), sa.ForeignKey("items.id"), primary_key=True),
)
comments = sa.Table(
    "comments", metadata,
    sa.Column("item_id", sa.String(32), sa.ForeignKey("items.id"), primary_key=True),
    sa.Column("sub", sa.Integer, primary_key=True),  # column position; 0 = the object itself
    sa.Column("comment", sa.Text, nullable=False),
)
settings = sa.Table(
    "settings", metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


projections = sa.Table(
    "projections", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("table_id", sa.String(32), sa.ForeignKey("items.id"), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("query", sa.Text, nullable=False),
    sa.Column("created_ts", sa.BigInteger),
    sa.UniqueConstraint("table_id", "name"),
)
partition_columns = sa.Table(
    "partition_columns", metadata,
    sa.Column("item_id", sa.String(32), sa.ForeignKey("items.id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("column_name", sa.String(255), nullable=False),
)

expectations = sa.Table(
    "expectations", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("item_id", sa.String(32), sa.ForeignKey("items.id"), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("kind", sa.String(8), nullable=False),  # sql | ge
    sa.Column("definition", sa.Text, nullable=False),  # the SQL check, or the GE type
    sa.Column("args", sa.Text, nullable=False),  # the GE type's arguments, JSON
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("created_ts", sa.BigInteger),
    sa.UniqueConstraint("item_id", "name"),
)
# One row per expectation per validated batch. Written in the write's own transaction
# (a rejected write records its results in a transaction of their own).
expectation_results = sa.Table(
    "expectation_results", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("object_id", sa.String(32), nullable=False),
    sa.Column("expectation", sa.String(255), nullable=False),
    sa.Column("statement", sa.String(64), nullable=False),
    sa.Column("rows_evaluated", sa.BigInteger, nullable=False),
    sa.Column("unexpected", sa.BigInteger, nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("sample", sa.Text, nullable=False),
)

# One row per validated batch: Great Expectations' own result (unexpected lists trimmed),
# from which `mzflow quality docs` builds GE's Data Docs.
expectation_runs = sa.Table(
    "expectation_runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("object_id", sa.String(32), nullable=False),
    sa.Column("statement", sa.String(64), nullable=False),
    sa.Column("report", sa.Text, nullable=False),
)

# Read holds (catalog/holds.py): one row per object a read or SUBSCRIBE holds back.
# No foreign key to items: a DROP must not wait for readers, and compaction ignores a
# hold on an object that no longer exists.
read_holds = sa.Table(
    "read_holds", metadata,
    sa.Column("hold_id", sa.String(32), primary_key=True),
    sa.Column("object_id", sa.String(32), primary_key=True),
    sa.Column("read_time", sa.BigInteger, nullable=False),
    sa.Column("holder", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("acquired_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
)


# The time each maintenance run ticks to (catalog/runs.py): recorded by the run's first
# tick, so that every tick of the run, and every retry of one, targets the same time.
run_times = sa.Table(
    "run_times", metadata,
    sa.Column("run_key", sa.String(512), primary_key=True),
    sa.Column("ts", sa.BigInteger, nullable=False),
    sa.Column("recorded_at", sa.BigInteger, nullable=False),
)


# Roles and privileges (catalog/roles.py, catalog/privileges.py). A password is kept
# only as its SCRAM-SHA-256 verifier. Owners and grants name objects by type and id
# (no foreign keys: clusters, items, schemas and the system are all objects).
roles = sa.Table(
    "roles", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("oid", sa.Integer, nullable=False, unique=True),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
    sa.Column("inherit", sa.Boolean, nullable=False),
    sa.Column("login", sa.Boolean, nullable=False),
    sa.Column("superuser", sa.Boolean, nullable=False),
    sa.Column("verifier", sa.Text),
)
owners = sa.Table(
    "owners", metadata,
    sa.Column("object_type", sa.String(16), primary_key=True),
    sa.Column("object_id", sa.String(64), primary_key=True),
    sa.Column("role_id", sa.String(32), nullable=False),
)
grants = sa.Table(
    "grants", metadata,
    sa.Column("object_type", sa.String(16), primary_key=True),
    sa.Column("object_id", sa.String(64), primary_key=True),
    sa.Column("grantee", sa.String(32), primary_key=True),
    sa.Column("grantor", sa.String(32), primary_key=True),
    sa.Column("privileges", sa.String(16), nullable=False),
)

# Role membership (v12): GRANT <role> TO <member> (catalog/roles.py).
role_members = sa.Table(
    "role_members", metadata,
    sa.Column("role_id", sa.String(32), primary_key=True),
    sa.Column("member", sa.String(32), primary_key=True),
    sa.Column("grantor", sa.String(32), nullable=False),
)

# ALTER DEFAULT PRIVILEGES (v11): "" for no database or schema (a key column cannot be
# NULL); role_id "p" for ALL ROLES.
default_privileges = sa.Table(
    "default_privileges", metadata,
    sa.Column("role_id", sa.String(32), primary_key=True),
    sa.Column("database_id", sa.String(32), primary_key=True),
    sa.Column("schema_id", sa.String(32), primary_key=True),
    sa.Column("object_type", sa.String(16), primary_key=True),
    sa.Column("grantee", sa.String(32), primary_key=True),
    sa.Column("privileges", sa.String(16), nullable=False),
)

# Comments on objects that are not items (v11): a schema's (COMMENT ON SCHEMA; dbt-
# materialize's deploy_promote tags the schema it deployed).
object_comments = sa.Table(
    "object_comments", metadata,
    sa.Column("object_type", sa.String(16), primary_key=True),
    sa.Column("object_id", sa.String(64), primary_key=True),
    sa.Column("comment", sa.Text, nullable=False),
)


# User schemas of the one database (v10). Items name theirs by name (items.schema_name).
schemas = sa.Table(
    "schemas", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("oid", sa.Integer, nullable=False, unique=True),
    sa.Column("database_name", sa.String(255), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.UniqueConstraint("database_name", "name"),
)


def _v1_initial(conn: Connection) -> None:
    # The v1 shapes of `clusters` and `items`, frozen here: the module-level tables have
    # grown since.
    v1 = sa.MetaData()
    v1_clusters = sa.Table("clusters", v1, *[
        c._copy() for c in clusters.columns if c.name != "spark"])
    v1_items = sa.Table("items", v1, *[
        c._copy() for c in items.columns
        if c.name not in ("created_ts", "retain_history_ms", "since_ts")],
        sa.UniqueConstraint("database_name", "schema_name", "name"))
    for table in (meta, v1_clusters, v1_items, collection_ids, columns, index_keys,
                  dependencies, settings):
        table.create(conn)
    conn.execute(meta.insert(), [
        {"key": "catalog_version", "value": "1"},
        {"key": "next_cluster_id", "value": "2"},
        {"key": "next_item_id", "value": "1"},
        {"key": "next_global_id", "value": "1"},
        {"key": "next_oid_id", "value": "20000"},
        {"key": "installation_id", "value": str(uuid.uuid4())},
    ])
    # The cluster design: every catalog starts with cluster 1, 'default'.
    conn.execute(v1_clusters.insert().values(id=1, name="default", virtual=False, size=None))


def _v2_time(conn: Connection) -> None:
    """Timestamps and frontiers: the oracle, per-item creation time and retention."""
    conn.execute(meta.insert(), [
        {"key": "oracle_ts", "value": "0"},  # last timestamp handed to a writer
        {"key": "read_ts", "value": "0"},  # last timestamp whose writes are all committed
        {"key": "next_rowid_id", "value": "1"},
    ])
    for column in ("created_ts", "retain_history_ms", "since_ts"):
        conn.execute(sa.text(f"ALTER TABLE items ADD COLUMN {column} BIGINT"))


def _v4_projections(conn: Connection) -> None:
    """Table projections and Delta partition columns."""
    projections.create(conn)
    partition_columns.create(conn)
    conn.execute(meta.insert(), [{"key": "next_projection_id", "value": "1"}])


def _v5_expectations(conn: Connection) -> None:
    """Data-quality expectations and their results."""
    expectations.create(conn)
    expectation_results.create(conn)
    expectation_runs.create(conn)
    conn.execute(meta.insert(), [{"key": "next_expectation_id", "value": "1"}])


def _v6_cluster_spark(conn: Connection) -> None:
    """A cluster's Spark Connect endpoint (``CREATE CLUSTER … SPARK 'sc://…'``)."""
    # TEXT, not VARCHAR(n): a URL's parameters (a token) have no useful bound, and
    # TEXT is a nullable column type SQLite and PostgreSQL both take in ADD COLUMN.
    conn.execute(sa.text("ALTER TABLE clusters ADD COLUMN spark TEXT"))


def _v9_roles(conn: Connection) -> None:
    """Roles, owners and grants. The built-in superuser ``materialize`` owns everything
    that exists; PUBLIC may use the database, its schema and the default cluster, as in
    Materialize (where PUBLIC may use the ``quickstart`` cluster)."""
    from mzflow.catalog import roles as role_rules

    for table in (roles, owners, grants):
        table.create(conn)
    oid = int(conn.execute(sa.select(meta.c.value).where(meta.c.key == "next_oid_id"))
              .scalar_one())
    conn.execute(meta.update().where(meta.c.key == "next_oid_id").values(value=str(oid + 1)))
    conn.execute(meta.insert(), [{"key": "next_role_id", "value": "2"}])
    owner = role_rules.MATERIALIZE_ID
    conn.execute(roles.insert().values(id=owner, oid=oid, name=role_rules.MATERIALIZE,
                                       inherit=True, login=True, superuser=True,
                                       verifier=None))
    rows = [{"object_type": "item", "object_id": r.id, "role_id": owner}
            for r in conn.execute(sa.select(items.c.id))]
    rows += [{"object_type": "cluster", "object_id": str(r.id), "role_id": owner}
             for r in conn.execute(sa.select(clusters.c.id))]
    if rows:
        conn.execute(owners.insert(), rows)
    public = [("database", role_rules.DATABASE_ID), ("schema", role_rules.SCHEMA_ID)]
    default = conn.execute(sa.select(clusters.c.id).where(clusters.c.name == "default")
                           ).scalar_one_or_none()
    if default is not None:
        public.append(("cluster", str(default)))
    conn.execute(grants.insert(), [
        {"object_type": kind, "object_id": object_id, "grantee": role_rules.PUBLIC_ID,
         "grantor": owner, "privileges": "U"} for kind, object_id in public])


def _v10_schemas(conn: Connection) -> None:
    """CREATE SCHEMA: every catalog has had ``public`` (u3, as Materialize numbers it)."""
    schemas.create(conn)
    conn.execute(schemas.insert().values(id="u3", oid=2200, database_name="materialize",
                                         name="public"))
    conn.execute(meta.insert(), [{"key": "next_schema_id", "value": "4"}])


def _v11_defaults(conn: Connection) -> None:
    default_privileges.create(conn)
    object_comments.create(conn)


def _v12_members(conn: Connection) -> None:
    """Role membership, and PostgreSQL's predefined roles that grant server file access
    (``pg_read_server_files``, ``pg_write_server_files``), with PostgreSQL's OIDs."""
    from mzflow.catalog import roles as role_rules

    role_members.create(conn)
    conn.execute(roles.insert(), [
        {"id": role_id, "oid": oid, "name": name, "inherit": True, "login": False,
         "superuser": False, "verifier": None}
        for role_id, oid, name in role_rules.PREDEFINED])


MIGRATIONS: tuple[tuple[int, str, Callable[[Connection], None]], ...] = (
    (1, "initial catalog", _v1_initial),
    (2, "timestamps and frontiers", _v2_time),
    (3, "comments", lambda conn: comments.create(conn)),
    (4, "projections and partitions", _v4_projections),
    (5, "expectations", _v5_expectations),
    (6, "cluster spark endpoint", _v6_cluster_spark),
    (7, "read_holds", lambda conn: read_holds.create(conn)),
    (8, "run_times", lambda conn: run_times.create(conn)),
    (9, "roles and privileges", _v9_roles),
    (10, "schemas", _v10_schemas),
    (11, "default privileges, object comments", _v11_defaults),
    (12, "role membership, predefined roles", _v12_members),
)
LATEST = MIGRATIONS[-1][0]


@contextmanager
def begin_write(engine: Engine) -> Iterator[Connection]:
    """A transaction that holds the catalog's write lock from its first statement."""
    with engine.connect() as conn:
        conn = conn.execution_options(mzflow_write=True)
        try:
            tx = conn.begin()
        except sa.exc.OperationalError as exc:
            # SQLite's BEGIN IMMEDIATE gave up after its busy timeout: say so in our
            # terms (a raw driver error read as a crash in the soak; issue 19).
            if "locked" not in str(exc).lower():
                raise
            raise CatalogBusy("the catalog is locked by another writer",
                              hint="retry; a long write or compaction holds the lock") from None
        try:
            with tx:
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(727274)"))
                yield conn
        except sa.exc.OperationalError as exc:
            # The database could not be written (a full disk: SQLite's "disk I/O error"):
            # the transaction rolled back; say so as ours (found by the soak's disk-full
            # fault, issue 19).
            first = str(exc.orig).splitlines()[0] if exc.orig is not None else str(exc)
            raise CatalogError(f"the catalog could not be written: {first}",
                               hint="its transaction rolled back; retry (a write with its "
                                    "idempotency key) once there is space") from exc


def upgrade(engine: Engine) -> None:
    # An up-to-date catalog (every connect after the first) needs no write lock: a
    # connect then never waits behind a long write, nor fails with CatalogBusy (the
    # soak's locked-catalog fault found workers unable to start; issue 19).
    with engine.connect() as conn:
        if sa.inspect(conn).has_table(schema_migrations.name):
            applied = set(conn.execute(sa.select(schema_migrations.c.version)).scalars())
            if all(v in applied for v, _, _ in MIGRATIONS) and max(applied) <= LATEST:
                return
    for version, name, apply in MIGRATIONS:
        with begin_write(engine) as conn:
            schema_migrations.create(conn, checkfirst=True)
            # Re-read inside the (write-locked) transaction: another process may have
            # applied this migration while we waited for the lock.
            applied = set(conn.execute(sa.select(schema_migrations.c.version)).scalars())
            newest = max(applied, default=0)
            if newest > LATEST:
                raise CatalogError(
                    f"catalog schema version {newest} is newer than this mzflow "
                    f"understands ({LATEST}); upgrade mzflow")
            if version in applied:
                continue
            apply(conn)
            conn.execute(schema_migrations.insert().values(version=version, name=name))
