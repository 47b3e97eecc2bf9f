"""SHOW statements as small result tables, filtered by LIKE or WHERE.

Like Materialize, every SHOW is a query over the catalog: we build its rows
from the snapshot, then run ``LIKE``/``WHERE`` through the same in-process
executor as any catalog SELECT.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import names, normalize, privileges, roles, system
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
    Item,
    Snapshot,
)
from mzflow.engine import local
from mzflow.errors import UnknownDatabase, UnknownObject, UnknownSchema, WrongObjectType
from mzflow.maintain import arrangements
from mzflow.sql import ast
from mzflow.sql.parse import parse_one

Rows = list[tuple[object, ...]]

_LIST_KINDS = {"TABLES": (TABLE,), "VIEWS": (VIEW,), "MATERIALIZED VIEWS": (MATERIALIZED_VIEW,),
               "OBJECTS": (TABLE, VIEW, MATERIALIZED_VIEW, SINK, SOURCE)}
_CREATE_KINDS = {"TABLE": TABLE, "VIEW": VIEW, "MATERIALIZED VIEW": MATERIALIZED_VIEW,
                 "INDEX": INDEX, "SINK": SINK, "SOURCE": SOURCE}


def show(snap: Snapshot, stmt: ast.Show) -> tuple[list[str], Rows]:
    kind = stmt.args["kind"]
    columns: list[str]
    rows: Rows
    if kind == "CREATE CLUSTER":
        named = snap.cluster_by_name(stmt.this.name)
        return ["Cluster", "Create Cluster"], [
            (named.name, normalize.create_cluster_sql(named))]
    if kind.startswith("CREATE "):
        return _show_create(snap, kind.removeprefix("CREATE "), stmt.this)
    if kind == "CLUSTERS":
        columns, rows = ["name"], [(c.name,) for c in snap.clusters]
    elif kind == "ROLES":
        # Materialize's SHOW ROLES lists the user's roles, not the predefined ones.
        columns, rows = ["name", "comment"], [(r.name, "") for r in snap.roles
                                              if r.id not in roles.PREDEFINED_IDS]
    elif kind == "PRIVILEGES":
        role = stmt.args.get("role")
        role_id = None
        if role is not None:
            found = roles.find(snap, role.name)
            if found is None:
                raise UnknownObject(f"unknown role '{role.name}'")
            role_id = found.id
        columns = privileges.SHOW_COLUMNS
        rows = privileges.show_rows(snap, stmt.args.get("on"), role_id)
    elif kind in ("SCHEMAS", "EXTENDED SCHEMAS"):
        columns, rows = _show_schemas(snap, stmt, extended=kind == "EXTENDED SCHEMAS")
    elif kind == "SOURCES":
        columns, rows = _show_sources(snap, stmt)
    elif kind == "INDEXES":
        columns, rows = _show_indexes(snap, stmt)
    elif kind == "SINKS":
        columns, rows = _show_sinks(snap, stmt)
    elif kind == "COLUMNS":
        rel = _relation(snap, stmt.args["on"])
        columns = ["name", "nullable", "type", "comment"]
        rows = [(c.name, c.nullable, display_name(c.type), snap.comment(rel.id, pos) or "")
                for pos, c in enumerate(rel.columns, start=1)]
    elif kind == "PROJECTIONS":
        on = stmt.args.get("on")
        table_id = names.resolve(snap, on).id if on is not None else None
        columns = ["table", "name", "kind", "definition"]
        rows = [(snap.item(p.table_id).name, p.name, system.projection_kind(p.query), p.query)
                for p in snap.projections if table_id is None or p.table_id == table_id]
    elif kind == "CONSTRAINTS":
        from mzflow.catalog.ddl.expectations import clause

        on = stmt.args.get("on")
        item_id = names.resolve(snap, on).id if on is not None else None
        columns = ["table", "name", "kind", "definition", "action"]
        rows = [(snap.item(e.item_id).name, e.name, e.kind, clause(e).split(" EXPECT ", 1)[1]
                 .rsplit(" ON VIOLATION ", 1)[0], e.action)
                for e in snap.expectations if item_id is None or e.item_id == item_id]
    elif kind == "FULL MATERIALIZED VIEWS":
        columns, rows = ["cluster", "name", "type"], []
        for item in _listed(snap, "MATERIALIZED VIEWS", stmt):
            cluster = snap.cluster(system.materialized_view_cluster(snap, item))
            rows.append((cluster.name if cluster else None, item.name, "user"))
    else:
        columns, rows = _show_list(snap, kind, stmt)
    return columns, _filter(columns, rows, stmt)


def _relation(snap: Snapshot, name: names.Ref) -> Item:
    item = names.resolve(snap, name)
    if item.kind not in RELATION_KINDS:
        raise WrongObjectType(f"{item.qualified_name} is not a relation")
    return item


def _cluster_filter(snap: Snapshot, stmt: ast.Show) -> int | None:
    cluster = stmt.args.get("cluster")
    return snap.cluster_by_name(cluster.name).id if cluster is not None else None


def _listed_schema(snap: Snapshot, stmt: ast.Show) -> str:
    """The schema a SHOW lists (FROM [database.]schema, else the current schema:
    Materialize refuses the SHOW when the search path names none that exists)."""
    schema = stmt.args.get("schema")
    if schema is None:
        current = names.current_schema(snap)
        if current is None:
            raise UnknownSchema("no valid schema selected",
                                hint="SET search_path to a schema that exists, or SHOW … "
                                     "FROM <schema>")
        return current
    # FROM s is parsed as a one-part object name: its "table" is the schema.
    database = schema.db or None
    return names.require_schema(snap, database, schema.name)


def _listed(snap: Snapshot, kind: str, stmt: ast.Show) -> list[Item]:
    kinds = _LIST_KINDS[kind]
    cluster_id = _cluster_filter(snap, stmt)
    schema = _listed_schema(snap, stmt)
    out: list[Item] = []
    for item in snap.items:
        if item.kind not in kinds or item.schema != schema or (
                item.is_source and SOURCE not in kinds):
            continue
        if cluster_id is not None and (
            item.kind != MATERIALIZED_VIEW
            or system.materialized_view_cluster(snap, item) != cluster_id
        ):
            continue
        out.append(item)
    return out


def _show_list(snap: Snapshot, kind: str, stmt: ast.Show) -> tuple[list[str], Rows]:
    return ["name"], [(item.name,) for item in _listed(snap, kind, stmt)]


def _show_schemas(snap: Snapshot, stmt: ast.Show, extended: bool) -> tuple[list[str], Rows]:
    """The database's schemas by name; EXTENDED adds the system's (Materialize's)."""
    database = stmt.args.get("schema")  # SHOW SCHEMAS FROM <database>
    if database is not None and database.name != DATABASE:
        raise UnknownDatabase(f"unknown database '{database.name}'")
    found = [*(names.SYSTEM_SCHEMAS if extended else ()), *(s.name for s in snap.schemas)]
    return ["name"], [(n,) for n in sorted(found)]


def _show_indexes(snap: Snapshot, stmt: ast.Show) -> tuple[list[str], Rows]:
    on = stmt.args.get("on")
    on_id = _relation(snap, on.name).id if on is not None else None
    cluster_id = _cluster_filter(snap, stmt)
    columns = ["cluster_name", "on_name", "key_name", "seq_in_index", "column_name",
               "expression", "nullable", "enabled"]
    rows: Rows = []
    for idx in snap.items:
        if idx.kind != INDEX or (on_id and idx.on_id != on_id):
            continue
        if cluster_id is not None and idx.cluster_id != cluster_id:
            continue
        cluster = snap.cluster(idx.cluster_id)
        target = snap.item(idx.on_id) if idx.on_id else None
        nullable = {c.name: c.nullable for c in target.columns} if target else {}
        for pos, key in enumerate(idx.keys, start=1):
            rows.append((
                cluster.name if cluster else None, target.name if target else None, idx.name,
                pos, key.column, key.expression,
                nullable.get(key.column, True) if key.column else True, True,
            ))
    # The arrangements the cluster keeps for its joins are indexes in all but name
    # (Materialize shows them as its arrangements); one an index already is, once.
    explicit = {(i.cluster_id, i.on_id, i.keys[0].column) for i in snap.items
                if i.kind == INDEX and len(i.keys) == 1}
    for c_id, found in sorted(arrangements.wanted(snap).items()):
        if cluster_id is not None and c_id != cluster_id:
            continue
        cluster = snap.cluster(c_id)
        for need in sorted(found):
            table = snap.item(need.item_id)
            if (c_id, table.id, need.column) in explicit or (on_id and table.id != on_id):
                continue
            nullable = {c.name: c.nullable for c in table.columns}
            rows.append((cluster.name if cluster else None, table.name,
                         f"{table.name}_{need.column}_arrangement", 1, need.column, None,
                         nullable.get(need.column, True), True))
    return columns, rows


def _show_sources(snap: Snapshot, stmt: ast.Show) -> tuple[list[str], Rows]:
    """Materialize's columns: name, type, cluster, comment."""
    schema = _listed_schema(snap, stmt)
    cluster_id = _cluster_filter(snap, stmt)
    rows: Rows = []
    for source in snap.items:
        if not source.is_source or source.schema != schema or (
                cluster_id is not None and source.cluster_id != cluster_id):
            continue
        cluster = snap.cluster(source.cluster_id)
        rows.append((source.name, system.source_type(source),
                     cluster.name if cluster else None, snap.comment(source.id, 0) or ""))
    return ["name", "type", "cluster", "comment"], rows


def _show_sinks(snap: Snapshot, stmt: ast.Show) -> tuple[list[str], Rows]:
    schema = _listed_schema(snap, stmt)
    cluster_id = _cluster_filter(snap, stmt)
    rows: Rows = []
    for sink in snap.items:
        if sink.kind != SINK or (cluster_id is not None and sink.cluster_id != cluster_id):
            continue
        if sink.schema != schema:
            continue
        cluster = snap.cluster(sink.cluster_id)
        # Parsed, not split on " INTO ": a quoted sink or relation name may contain that.
        fmt = parse_one(sink.create_sql).args["into"].name.lower()
        rows.append((sink.name, fmt, cluster.name if cluster else None))
    return ["name", "type", "cluster_name"], rows


def _show_create(snap: Snapshot, kind_sql: str, name: names.Ref) -> tuple[list[str], Rows]:
    item = names.resolve(snap, name)
    wanted = _CREATE_KINDS[kind_sql]
    if item.kind != wanted and not (item.is_source and wanted == SOURCE) or (
            item.is_source and wanted != SOURCE):
        word = kind_sql.lower()
        own = "source" if item.is_source else item.kind_word
        raise WrongObjectType(
            f"{item.qualified_name} is not a {word}",
            hint=f"Use SHOW CREATE {own.upper()} to show a {own}.")
    title = kind_sql.title()
    create_sql = item.create_sql
    if item.kind == TABLE and (snap.projections_on(item.id) or snap.expectations_on(item.id)):
        from mzflow.catalog.ddl.expectations import create_sql_parts

        create_sql = normalize.create_table_sql(
            item.name, item.columns, item.partition_by,
            tuple((p.name, p.query) for p in snap.projections_on(item.id)),
            create_sql_parts(snap, item), schema=item.schema)
    return [title, f"Create {title}"], [(item.qualified_name,
                                         normalize.humanize(create_sql))]


def _filter(columns: list[str], rows: Rows, stmt: ast.Show) -> Rows:
    like, where = stmt.args.get("like"), stmt.args.get("where")
    if like is None and where is None:
        return rows
    name_col = "name" if "name" in columns else ("key_name" if "key_name" in columns
                                                 else columns[0])
    condition = where.this if isinstance(where, exp.Where) else where
    if like is not None:
        condition = exp.Like(this=exp.column(name_col, quoted=True), expression=like)
    query = exp.select(*[exp.column(c, quoted=True) for c in columns]).from_(
        "show_result").where(condition)
    return local.run(query, {"show_result": (columns, rows)})
