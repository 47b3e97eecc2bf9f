"""The ``mz_*`` system tables, computed from a catalog snapshot.

They are plain rows in memory: DDL, SHOW and catalog queries never need Spark.
Some columns are *hidden*: selectable by name but left out of ``SELECT *``,
like PostgreSQL's system columns. That keeps ``SELECT * FROM mz_clusters``
shaped as Materialize's cluster design prints it, ``(id, name)``, while
``virtual``, ``size`` and ``spark`` are still there for whoever asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from mzflow.catalog import frontiers, names, normalize, refresh, sizes
from mzflow.catalog.exprtypes import display_name
from mzflow.catalog.model import (
    DATABASE,
    INDEX,
    MATERIALIZED_VIEW,
    RELATION_KINDS,
    SINK,
    SOURCE,
    TABLE,
    VIEW,
    Column,
    Item,
    Snapshot,
)

Row = tuple[object, ...]


@dataclass(frozen=True)
class SystemTable:
    name: str
    columns: tuple[Column, ...]
    hidden: tuple[Column, ...]
    rows: Callable[[Snapshot], list[Row]]  # each row: visible values, then hidden ones
    schema: str = "mz_catalog"

    @property
    def all_columns(self) -> tuple[Column, ...]:
        return self.columns + self.hidden

    @property
    def key(self) -> str:
        """The name a bound query reads it by: unique across the system schemas."""
        return self.name if self.schema != "information_schema" else f"_mz_is_{self.name}"


def _cols(spec: str) -> tuple[Column, ...]:
    """``"name type [null]"`` pairs separated by commas."""
    out = []
    for part in spec.split(","):
        words = part.split()
        nullable = words[-1] == "null"
        if nullable:
            words = words[:-1]
        out.append(Column(words[0], " ".join(words[1:]), nullable=nullable))
    return tuple(out)


def _cluster_name(snap: Snapshot, cluster_id: int | None) -> str | None:
    cluster = snap.cluster(cluster_id)
    return cluster.name if cluster else None


def materialized_view_cluster(snap: Snapshot, mv: Item) -> int | None:
    """A materialized view lives where its default index lives (the cluster design)."""
    for idx in snap.indexes_on(mv.id):
        if idx.is_default_index:
            return idx.cluster_id
    return None


def _definition(item: Item) -> str:
    return f"{normalize.humanize(item.definition)};" if item.definition else ""


def _clusters(snap: Snapshot) -> list[Row]:
    from mzflow.catalog import privileges

    out: list[Row] = []
    for c in snap.clusters:
        size = sizes.of_cluster(c.virtual, c.size)
        obj = privileges.cluster_object(c.id)
        # managed, with one replica: Materialize's managed cluster of replication factor 1
        out.append((c.id, c.name, c.virtual, c.size, size.pool_slots, c.spark, True, 1,
                    privileges.owner_of(snap, obj), privileges.aclitems(snap, obj)))
    return out


def _replica_rows(snap: Snapshot) -> list[Row]:
    return [(f"r{c.id}", "r1", c.id, None if c.virtual else c.size or sizes.DEFAULT_SIZE,
             None, None, None, None) for c in snap.clusters]


def _index_rows(snap: Snapshot) -> list[Row]:
    return [(i.id, i.oid, i.name, i.on_id, i.cluster_id, refresh.of_index(snap, i).describe())
            for i in snap.items if i.kind == INDEX]


def _sink_rows(snap: Snapshot) -> list[Row]:
    return [(i.id, i.oid, snap.schema_id(i.schema), i.name, i.on_id, i.cluster_id)
            for i in snap.items if i.kind == SINK]


def source_type(item: Item) -> str:
    """mz_sources.type: Materialize's ``load-generator``; ``files`` for a landing folder
    (Materialize has none)."""
    return "load-generator" if " LOAD GENERATOR " in item.create_sql else "files"


def _source_rows(snap: Snapshot) -> list[Row]:
    from mzflow.catalog import privileges

    acl: dict[str, list[str]] = {}
    for obj, grantee, grantor, letters in privileges.held_rows(snap):
        if obj[0] == "item":
            acl.setdefault(obj[1], []).append(f"{grantee}={letters}/{grantor}")
    out: list[Row] = []
    for i in snap.items:
        if not i.is_source:
            continue
        sql = normalize.humanize(i.create_sql)
        # No envelope or formats: a generator's rows are no key/value encoding. (A
        # redacted statement hides literals; a source's options hold no secret.)
        out.append((i.id, i.oid, snap.schema_id(i.schema), i.name, source_type(i), None,
                    None, "none", None, None, str(i.cluster_id),
                    privileges.owner_of(snap, ("item", i.id)),
                    "{" + ",".join(acl.get(i.id, [])) + "}", sql, sql))
    return out


def _kind_rows(kind: str) -> Callable[[Snapshot], list[Row]]:
    def rows(snap: Snapshot) -> list[Row]:
        out: list[Row] = []
        for i in snap.items:
            if i.kind != kind or i.is_source:  # a single-output source: mz_sources'
                continue
            schema_id = snap.schema_id(i.schema)
            if kind == VIEW:
                out.append((i.id, i.oid, schema_id, i.name, _definition(i)))
            elif kind == MATERIALIZED_VIEW:
                out.append((i.id, i.oid, schema_id, i.name,
                            materialized_view_cluster(snap, i), _definition(i),
                            refresh.of_sql(i.create_sql).describe()))
            else:
                out.append((i.id, i.oid, schema_id, i.name))
        return out

    return rows


def _column_rows(snap: Snapshot) -> list[Row]:
    return [
        (i.id, c.name, pos, c.nullable, display_name(c.type))
        for i in snap.items if i.kind in RELATION_KINDS
        for pos, c in enumerate(i.columns, start=1)
    ]


def _object_rows(snap: Snapshot) -> list[Row]:
    from mzflow.catalog import privileges

    return [(i.id, i.oid, snap.schema_id(i.schema), i.name, SOURCE if i.is_source else i.kind,
             privileges.owner_of(snap, ("item", i.id)),
             str(i.cluster_id) if i.cluster_id is not None else None) for i in snap.items]


def _schema_rows(snap: Snapshot) -> list[Row]:
    """The system schemas belong to no database (Materialize's ambient schemas)."""
    from mzflow.catalog import privileges, roles

    system: list[Row] = [(sid, oid, None, name, roles.MATERIALIZE_ID, [])
                         for name, (sid, oid) in names.SYSTEM_SCHEMAS.items()]
    return system + [(s.id, s.oid, names.DATABASE_ID, s.name,
                      privileges.owner_of(snap, ("schema", s.id)),
                      privileges.aclitems(snap, ("schema", s.id))) for s in snap.schemas]


def _database_rows(snap: Snapshot) -> list[Row]:
    return [(names.DATABASE_ID, names.DATABASE_OID, DATABASE)]


def _collection_rows(snap: Snapshot) -> list[Row]:
    return [(item_id, global_id, version) for item_id, global_id, version in snap.collection_ids]


def _frontier_rows(snap: Snapshot) -> list[Row]:
    return [(i.id, frontiers.since(i, snap), frontiers.upper(snap))
            for i in snap.items if i.kind == TABLE]


def _comment_rows(snap: Snapshot) -> list[Row]:
    kinds = {i.id: i.kind for i in snap.items}
    schemas = {s.id for s in snap.schemas}
    rows: list[Row] = [(item_id, kinds.get(item_id), sub or None, text, sub or None)
                       for item_id, sub, text in snap.comments]
    return rows + [
        (object_id, kind, None, text, None) for kind, object_id, text in snap.object_comments
        if kind == "schema" and object_id in schemas]


def projection_kind(query: str) -> str:
    """``aggregate`` (GROUP BY or aggregates) or ``sorted``, from the SELECT's text."""
    from mzflow.sql.parse import parse

    select = parse(query)[0]
    grouped = select.args.get("group") is not None or select.find(exp.AggFunc) is not None
    return "aggregate" if grouped else "sorted"


def _projection_rows(snap: Snapshot) -> list[Row]:
    return [(p.id, p.table_id, p.name, projection_kind(p.query), p.query, None, None, None,
             None, None) for p in snap.projections]


def _role_rows(snap: Snapshot) -> list[Row]:
    # Never the verifier: mz_roles is readable by every role.
    return [(r.id, r.oid, r.name, r.inherit, r.login, r.superuser) for r in snap.roles]


def _expectation_rows(snap: Snapshot) -> list[Row]:
    return [(e.id, e.item_id, e.name, e.kind, e.definition, e.args, e.action)
            for e in snap.expectations]


TABLES: dict[str, SystemTable] = {
    t.name: t
    for t in (
        # managed … privileges: Materialize's columns that dbt-materialize's deploy_init reads.
        SystemTable("mz_clusters", _cols("id bigint, name text"),
                    _cols("virtual boolean, size text null, pool_slots integer, "
                          "spark text null, managed boolean, replication_factor integer, "
                          "owner_id text, privileges mz_aclitem[]"),
                    _clusters),
        # refresh: the REFRESH policy as SQL (catalog/refresh.py; mzflow's column).
        SystemTable("mz_indexes",
                    _cols("id text, oid integer, name text, on_id text, cluster_id bigint"),
                    _cols("refresh text"), _index_rows),
        SystemTable("mz_sinks",
                    _cols("id text, oid integer, schema_id text, name text, on_id text, "
                          "cluster_id bigint null"), (), _sink_rows),
        SystemTable("mz_tables", _cols("id text, oid integer, schema_id text, name text"), (),
                    _kind_rows(TABLE)),
        SystemTable("mz_views",
                    _cols("id text, oid integer, schema_id text, name text, definition text"),
                    (), _kind_rows(VIEW)),
        SystemTable("mz_materialized_views",
                    _cols("id text, oid integer, schema_id text, name text, "
                          "cluster_id bigint null, definition text"), _cols("refresh text"),
                    _kind_rows(MATERIALIZED_VIEW)),
        SystemTable("mz_materialized_view_refresh_strategies",
                    _cols("materialized_view_id text, type text, interval interval null, "
                          "aligned_to timestamp with time zone null, "
                          "at timestamp with time zone null"),
                    _cols("schedule text null, timezone text null"), refresh.strategy_rows),
        SystemTable("mz_columns",
                    _cols("id text, name text, position bigint, nullable boolean, type text"),
                    (), _column_rows),
        # owner_id and cluster_id as Materialize has them (dbt-materialize reads them).
        SystemTable("mz_objects",
                    _cols("id text, oid integer, schema_id text, name text, type text"),
                    _cols("owner_id text, cluster_id text null"), _object_rows),
        SystemTable("mz_frontiers",
                    _cols("object_id text, read_frontier bigint, write_frontier bigint"), (),
                    _frontier_rows),
        # Rows come from storage, not the catalog: maintain/arrangements.py fills them
        # in, as a read source (read/sources.py; a catalog-only reader sees none).
        SystemTable("mz_arrangements",
                    _cols("id text, object_id text, cluster_id bigint, key text, "
                          "rows bigint null, bytes bigint null, files bigint null, "
                          "records_read_last_tick bigint null"), (), lambda snap: []),
        # An arrangement held in a ticking process's memory (maintain/hot.py), as its
        # last tick left it: Materialize's mz_arrangement_sizes, per arrangement.
        SystemTable("mz_arrangement_sizes",
                    _cols("object_id text, cluster_id bigint, key text, records bigint, "
                          "batches bigint, size bigint, "
                          "hydration_seconds double precision null"), (), lambda snap: []),
        # Projections: the catalog's part here, their storage's in projections/manage.py.
        SystemTable("mz_projections",
                    _cols("id text, table_id text, name text, kind text, definition text, "
                          "parts bigint null, rows bigint null, bytes bigint null, "
                          "write_rows bigint null, write_seconds double precision null"), (),
                    _projection_rows),
        SystemTable("mz_projection_history",
                    _cols("projection_id text, operation text, parts bigint, rows bigint, "
                          "bytes bigint, seconds double precision, "
                          "table_version bigint null, occurred_at_ms bigint null"), (),
                    lambda snap: []),
        SystemTable("mz_expectations",
                    _cols("id text, object_id text, name text, kind text, definition text, "
                          "arguments text, action text"), (), _expectation_rows),
        # Rows kept by the catalog store outside the snapshot: a read source fills them
        # (read/sources.py, registered by session/wiring.py).
        SystemTable("mz_expectation_results",
                    _cols("occurred_at_ms bigint, object_id text, expectation text, "
                          "statement text, rows_evaluated bigint, unexpected bigint, "
                          "action text, outcome text, sample text"), (), lambda snap: []),
        # A cluster's one "replica": where its ticks run (clusters/servers.py
        # fills endpoint, state and times; a catalog-only reader sees NULLs).
        SystemTable("mz_cluster_replicas",
                    _cols("id text, name text, cluster_id bigint, size text null"),
                    _cols("endpoint text null, state text null, "
                          "started_at timestamp with time zone null, "
                          "last_used timestamp with time zone null"), _replica_rows),
        # Freshness, read from the index shards' tick commits: maintain/freshness.py.
        SystemTable("mz_wallclock_lag_history",
                    _cols("object_id text, lag interval, occurred_at timestamp with time zone"),
                    (), lambda snap: []),
        SystemTable("mz_hydration_statuses",
                    _cols("object_id text, replica_id text, hydrated boolean, "
                          "hydration_time interval null"), (), lambda snap: []),
        # Read holds (catalog/holds.py), kept by the catalog store outside the snapshot:
        # a read source fills them in (read/sources.py). Expired holds stay listed
        # until a compaction drops them.
        SystemTable("mz_read_holds",
                    _cols("object_id text, hold_id text, holder text, read_time bigint, "
                          "pid integer, host text, "
                          "acquired_at timestamp with time zone, "
                          "expires_at timestamp with time zone"), (), lambda snap: []),
        # object_sub_id: Materialize's name for object_sub (dbt-materialize reads it).
        SystemTable("mz_comments",
                    _cols("id text, object_type text, object_sub integer null, comment text"),
                    _cols("object_sub_id integer null"), _comment_rows),
        # Roles (catalog/roles.py) and their members (GRANT <role> TO <role>).
        SystemTable("mz_roles",
                    _cols("id text, oid integer, name text, inherit boolean, "
                          "rolcanlogin boolean, rolsuper boolean"), (), _role_rows),
        SystemTable("mz_role_members", _cols("role_id text, member text, grantor text"), (),
                    lambda snap: list(snap.role_members)),
        SystemTable("mz_collection_ids", _cols("item_id text, global_id text, version integer"),
                    (), _collection_rows),
        SystemTable("mz_schemas",
                    _cols("id text, oid integer, database_id text null, name text"),
                    _cols("owner_id text, privileges mz_aclitem[]"), _schema_rows),
        SystemTable("mz_databases", _cols("id text, oid integer, name text"), (),
                    _database_rows),
        # One row per file a landing-folder COPY attempted (storage/landing.py fills
        # them in, as a read source: loads from the tables' Delta logs, failures from
        # each table's failure log). Snowflake's COPY_HISTORY; Materialize has none.
        SystemTable("mz_copy_history", _cols(
            "table_id text, path text, identity text, size bigint, "
            "modified_at timestamp with time zone, rows bigint null, bytes bigint, "
            "status text, error text null, table_version bigint null, "
            "loaded_at timestamp with time zone"), (), lambda snap: []),
        # Materialize's columns; privileges as its mz_aclitem[] prints them.
        SystemTable("mz_sources",
                    _cols("id text, oid integer, schema_id text, name text, type text, "
                          "connection_id text null, size text null, envelope_type text null, "
                          "key_format text null, value_format text null, "
                          "cluster_id text null, owner_id text, privileges text, "
                          "create_sql text null, redacted_create_sql text null"), (),
                    _source_rows),
    )
}


# A fixed table, filled once (not a cache: it never grows past the relations defined).
_OTHERS: dict[str, SystemTable] | None = None


def _others() -> dict[str, SystemTable]:
    """pg_catalog's and information_schema's relations (their modules build on this one,
    so they are read on first use, not imported here)."""
    global _OTHERS
    if _OTHERS is None:
        from mzflow.catalog import information_schema, mz_internal, pg_catalog

        found: dict[str, SystemTable] = {}
        for t in [*pg_catalog.TABLES, *information_schema.TABLES, *mz_internal.TABLES]:
            if t.key in TABLES or t.key in found:
                raise ValueError(f"two system relations keyed {t.key}")
            found[t.key] = t
        _OTHERS = found
    return _OTHERS


def every() -> list[SystemTable]:
    return [*TABLES.values(), *_others().values()]


def by_key(key: str) -> SystemTable | None:
    return TABLES.get(key) or _others().get(key)


def lookup(name: str, schema: str | None = None) -> SystemTable | None:
    """The system relation ``name`` of ``schema`` (any of the implicit ones if None)."""
    if schema is None:
        return next((lookup(name, s) for s in names.IMPLICIT if lookup(name, s)), None)
    if schema == "information_schema":
        return _others().get(f"_mz_is_{name}")
    found = by_key(name)
    if found is None:
        return None
    # mzflow keeps Materialize's mz_internal relations with mz_catalog's: either
    # qualifier reads them.
    wanted = "mz_catalog" if schema == "mz_internal" else schema
    return found if found.schema == wanted else None


def find_relation(snap: Snapshot, table: exp.Table) -> SystemTable | Item | None:
    """What a relation name in a query means: a system relation or a user item, by the
    schema it names or the search path's order (system schemas first)."""
    db, schema, name = names.split(table)
    if schema is not None:
        names.require_schema(snap, db, schema)
        if schema in names.SYSTEM_SCHEMAS:
            return lookup(name, schema)
        return snap.find(name, schema)
    for candidate in names.lookup_order(snap):
        found = (lookup(name, candidate) if candidate in names.SYSTEM_SCHEMAS
                 else snap.find(name, candidate))
        if found is not None:
            return found
    return None
