"""Normalized ``create_sql``: names fully qualified, clusters explicit.

Stored statements must mean the same thing whatever the session that reads
them later has set, so every relation is written as
``"materialize"."public"."x"`` and every ``IN CLUSTER`` is spelled out.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog.model import DATABASE, SCHEMA, Column
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


def qualified(name: str) -> exp.Table:
    return exp.Table(
        this=exp.to_identifier(name, quoted=True),
        db=exp.to_identifier(SCHEMA, quoted=True),
        catalog=exp.to_identifier(DATABASE, quoted=True),
    )


def quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect=DIALECT)


def qualify_relations(query: exp.Query, user_relations: set[str]) -> exp.Query:
    """Copy of ``query`` with each user relation written fully qualified."""
    query = query.copy()
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    for table in list(query.find_all(exp.Table)):
        if table.name in user_relations and table.name not in ctes:
            new = qualified(table.name)
            alias = table.args.get("alias")
            if alias is not None:
                new.set("alias", alias)
            table.replace(new)
    return query


def sql(node: exp.Expr) -> str:
    return node.sql(dialect=DIALECT)


def column_type_sql(col: Column) -> str:
    base, _, rest = col.type.partition("(")
    pg = PG_TYPE_NAMES.get(base.strip(), base.strip())
    return f'"pg_catalog".{quoted(pg)}' + (f"({rest}" if rest else "")


def create_table_sql(name: str, columns: tuple[Column, ...]) -> str:
    parts = []
    for col in columns:
        part = f"{quoted(col.name)} {column_type_sql(col)}"
        if not col.nullable:
            part += " NOT NULL"
        if col.version_added is not None:
            part += f" VERSION ADDED {col.version_added}"
        parts.append(part)
    return f"CREATE TABLE {sql(qualified(name))} ({', '.join(parts)})"
