"""Normalized ``create_sql``: names fully qualified, clusters explicit.

Stored statements must mean the same thing whatever the session that reads
them later has set, so every relation is written as
``"materialize"."public"."x"`` and every ``IN CLUSTER`` is spelled out.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog.model import (
    DATABASE,
    RELATION_KINDS,
    SCHEMA,
    TABLE,
    Cluster,
    Column,
    Item,
    Snapshot,
)
from mzflow.sql.ast import CreateTable, VersionAdded, VersionedTable
from mzflow.sql.joins import replace_relation
from mzflow.sql.parse import DIALECT

# Materialize prints column types by their pg_catalog names in SHOW CREATE TABLE.
PG_TYPE_NAMES = {
    "integer": "int4",
    "bigint": "int8",
    "smallint": "int2",
    "boolean": "bool",
    "double precision": "float8",
    "real": "float4",
    "text": "text",
    "numeric": "numeric",
    "date": "date",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
    "bytea": "bytea",
    "jsonb": "jsonb",
    "character varying": "varchar",
    "interval": "interval",
}


def qualified(name: str, schema: str = SCHEMA) -> exp.Table:
    return exp.Table(
        this=exp.to_identifier(name, quoted=True),
        db=exp.to_identifier(schema, quoted=True),
        catalog=exp.to_identifier(DATABASE, quoted=True),
    )


def of_item(item: Item) -> exp.Table:
    """``item``'s fully qualified name."""
    return qualified(item.name, item.schema)


def quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect=DIALECT)


def create_cluster_sql(cluster: Cluster) -> str:
    """The statement that makes ``cluster`` as it is now (clusters store no statement:
    ALTER CLUSTER changes them in place). Options in parentheses, as Materialize prints."""
    options = ["VIRTUAL"] if cluster.virtual else []
    for name, value in (("SIZE", cluster.size), ("SPARK", cluster.spark)):
        if value is not None:
            options.append(f"{name} = {exp.Literal.string(value).sql(dialect=DIALECT)}")
    return f"CREATE CLUSTER {quoted(cluster.name)}" + (
        f" ({', '.join(options)})" if options else "")


def qualify_relations(query: exp.Query, snap: Snapshot) -> exp.Query:
    """Copy of ``query`` with each user relation written fully qualified, and each
    table pinned to a version: ``[u1 AS "materialize"."public"."t" VERSION 0]``, the
    version named in the query or else the table's newest. A view keeps reading the
    columns it was created with after the table gains new ones."""
    from mzflow.catalog import system

    query = query.copy()
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    for table in list(query.find_all(exp.Table)):
        if table.name in ctes and not isinstance(table, VersionedTable):
            continue
        if isinstance(table, VersionedTable):
            item: Item | None = snap.item(table.args["item_id"].name)
        else:
            found = system.find_relation(snap, table)
            item = found if isinstance(found, Item) else None
        if item is None or item.kind not in RELATION_KINDS:
            continue
        new: exp.Table = of_item(item)
        if item.kind == TABLE:
            version = (int(table.args["pinned"].name) if isinstance(table, VersionedTable)
                       else item.version)
            new = VersionedTable(**new.args, item_id=exp.to_identifier(item.id),
                                 pinned=exp.Literal.number(version))
        alias = table.args.get("alias")
        if alias is not None:
            new.set("alias", alias)
        replace_relation(table, new)
    return query


def humanize(sql_text: str) -> str:
    """Stored SQL as users read it: version pins shown as plain qualified names."""
    from mzflow.sql.parse import parse_one

    if "[" not in sql_text:
        return sql_text
    tree = parse_one(sql_text)
    for table in list(tree.find_all(VersionedTable)):
        plain = exp.Table(**{k: v for k, v in table.args.items()
                             if k in ("this", "db", "catalog", "alias")})
        replace_relation(table, plain)
    return sql(tree)


def sql(node: exp.Expr) -> str:
    return node.sql(dialect=DIALECT)


def column_type(col: Column) -> exp.DataType:
    """``"pg_catalog"."numeric"(12, 2)``: the type by its pg_catalog name, modifiers kept."""
    base, _, rest = col.type.partition("(")
    pg = PG_TYPE_NAMES.get(base.strip(), base.strip())
    params = [exp.DataTypeParam(this=exp.Literal.number(p.strip()))
              for p in rest.rstrip(")").split(",")] if rest else []
    return exp.DataType(this=exp.DataType.Type.USERDEFINED, expressions=params,
                        kind=exp.Dot(this=exp.to_identifier("pg_catalog", quoted=True),
                                     expression=exp.to_identifier(pg, quoted=True)))


def create_table_sql(name: str, columns: tuple[Column, ...],
                     partition_by: tuple[str, ...] = (),
                     projections: tuple[tuple[str, str], ...] = (),
                     expectations: tuple[tuple[str, str], ...] = (),
                     schema: str = SCHEMA) -> str:
    """``projections``: (name, SELECT) pairs, shown by SHOW CREATE TABLE (the stored
    statement has none: they are added and dropped without a new table version)."""
    defs = []
    for col in columns:
        constraints = []
        if not col.nullable:
            constraints.append(exp.ColumnConstraint(kind=exp.NotNullColumnConstraint()))
        if col.version_added is not None:
            constraints.append(exp.ColumnConstraint(
                kind=VersionAdded(this=exp.Literal.number(col.version_added))))
        defs.append(exp.ColumnDef(this=exp.to_identifier(col.name, quoted=True),
                                  kind=column_type(col), constraints=constraints))
    from mzflow.sql.ast import Projection
    from mzflow.sql.parse import parse

    items: list[exp.Expr] = list(defs)
    for pname, query in projections:
        parsed = parse(query)[0]
        items.append(Projection(this=exp.to_identifier(pname), query=parsed))
    for _, clause in expectations:  # CONSTRAINT … EXPECT …, as recorded
        constraint = parse(f"CREATE TABLE x (a int, {clause})")[0].this.expressions[-1]
        items.append(constraint)
    parts = [exp.to_identifier(c, quoted=True) for c in partition_by] or None
    return sql(CreateTable(this=exp.Schema(this=qualified(name, schema), expressions=items),
                           partition_by=parts))
