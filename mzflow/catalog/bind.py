"""Binding: resolve the names in a query against the catalog.

Produces the query's dependencies (catalog item ids), its output columns
(names as PostgreSQL/Materialize name them, types, nullability) and a fully
qualified copy of the query that later stages can trust.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from mzflow.catalog import system
from mzflow.catalog.model import (
    DATABASE,
    RELATION_KINDS,
    ROWID,
    SCHEMA,
    TABLE,
    Column,
    Item,
    Snapshot,
)
from mzflow.errors import (
    Error,
    InvalidDefinition,
    UnknownColumn,
    UnknownObject,
    UnknownRelation,
    Unsupported,
    WrongObjectType,
)
from mzflow.sql.ast import VersionedTable
from mzflow.sql.parse import DIALECT

UNNAMED = "?column?"
ROWID_COLUMN = Column(ROWID, "bigint", nullable=False)

# sqlglot type → the name Materialize prints in SHOW COLUMNS / mz_columns.
_TYPE_NAMES = {
    "INT": "integer",
    "SMALLINT": "smallint",
    "BIGINT": "bigint",
    "TEXT": "text",
    "VARCHAR": "character varying",
    "CHAR": "character",
    "BOOLEAN": "boolean",
    "DOUBLE": "double precision",
    "FLOAT": "real",
    "DECIMAL": "numeric",
    "DATE": "date",
    "TIMESTAMP": "timestamp without time zone",
    "TIMESTAMPTZ": "timestamp with time zone",
    "VARBINARY": "bytea",
    "JSONB": "jsonb",
    "INTERVAL": "interval",
    "NULL": "text",
}


@dataclass(frozen=True)
class Bound:
    query: exp.Query  # qualified: every column carries its relation
    columns: tuple[Column, ...]
    depends_on: tuple[str, ...]  # item ids of user relations read
    system_tables: tuple[str, ...]  # mz_* tables read


def type_name(dtype: exp.DataType | None) -> str:
    if dtype is None:
        return "text"
    key = dtype.this.name if hasattr(dtype.this, "name") else str(dtype.this)
    name = _TYPE_NAMES.get(key, dtype.sql(dialect=DIALECT).lower())
    # Keep type modifiers: numeric(12,2) and varchar(10) constrain what may be stored.
    params = [p.this.name if isinstance(p, exp.DataTypeParam) else p.name
              for p in dtype.expressions]
    if params and key in ("DECIMAL", "VARCHAR", "CHAR"):
        return f"{name}({','.join(params)})"
    return name


def output_name(projection: exp.Expr) -> str:
    """The column name PostgreSQL gives an un-aliased projection."""
    if isinstance(projection, exp.Alias):
        return projection.alias
    if isinstance(projection, exp.Column):
        return projection.name
    if isinstance(projection, exp.Cast) and isinstance(projection.this, exp.Column):
        return projection.this.name
    if isinstance(projection, exp.Anonymous):
        return str(projection.this).lower()
    if isinstance(projection, exp.Func):
        return projection.sql_name().lower()
    return UNNAMED


_PIN = re.compile(r"^mz_(u\d+)_v(\d+)$")


def pin_key(item: Item, version: int) -> str:
    """The relation name a bound query uses for one version of a table."""
    return f"mz_{item.id}_v{version}"


def pinned(name: str) -> tuple[str, int] | None:
    """``(item id, version)`` if ``name`` is a :func:`pin_key`."""
    m = _PIN.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def resolve_relation(snap: Snapshot, table: exp.Table) -> Item | system.SystemTable:
    """An ``exp.Table`` in a FROM clause → a user relation or a system table."""
    if isinstance(table, VersionedTable):
        item_id = table.args["item_id"].name
        try:
            item = snap.item(item_id)
        except UnknownObject:
            raise UnknownObject(f"unknown catalog item '{item_id}'") from None
        if item.kind != TABLE:
            raise WrongObjectType(f"{item.qualified_name} is not a table")
        return item
    name, schema, db = table.name, table.db or None, table.catalog or None
    if db not in (None, DATABASE):
        raise UnknownObject(f"unknown database '{db}'")
    if schema in (None, "mz_catalog", "mz_internal") and (sys_table := system.lookup(name)):
        return sys_table
    if schema not in (None, SCHEMA):
        raise UnknownObject(f"unknown schema '{schema}'")
    found = snap.find(name)
    if found is None:
        raise UnknownRelation(f"unknown catalog item '{name}'")
    item = found
    if item.kind not in RELATION_KINDS:
        raise WrongObjectType(f"{item.qualified_name} is not a relation")
    return item


def bind(snap: Snapshot, query: exp.Query) -> Bound:
    query = query.copy()
    cte_names = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    visible: dict[str, object] = {}
    full: dict[str, object] = {}
    nullable: dict[tuple[str, str], bool] = {}
    deps: list[str] = []
    sys_tables: list[str] = []
    for table in query.find_all(exp.Table):
        if table.name in cte_names and not table.db:
            continue
        if table.args.get("joins"):
            # What sql/joins.py could not flatten; renaming the table would drop its joins.
            raise Unsupported("a parenthesized join with an alias or on the right of an "
                              "outer join is not supported yet")
        rel = resolve_relation(snap, table)
        alias = table.alias_or_name
        key = rel.name
        if isinstance(rel, system.SystemTable):
            cols, hidden = rel.columns, rel.hidden
            if rel.name not in sys_tables:
                sys_tables.append(rel.name)
        elif rel.kind == TABLE:
            # A table reference reads one version of the table: the one it names, or
            # the newest. It is renamed to that version's pin key from here on.
            version = _version_of(rel, table)
            cols, hidden = rel.columns_at(version), (ROWID_COLUMN,)
            key = pin_key(rel, version)
        else:
            cols, hidden = rel.columns, ()
        if not isinstance(rel, system.SystemTable) and rel.id not in deps:
            deps.append(rel.id)
        # Later stages see bare names; the catalog namespace has one schema.
        table.replace(exp.Table(this=exp.to_identifier(key),
                                alias=exp.TableAlias(this=exp.to_identifier(alias))))
        visible[key] = {c.name: _schema_type(c.type) for c in cols}
        full[key] = {c.name: _schema_type(c.type) for c in cols + hidden}
        for c in cols + hidden:
            nullable[(alias, c.name)] = c.nullable
    names = _output_names(query, visible)
    _alias_subquery_projections(query)
    try:
        # Pass 1 expands * to visible columns only; pass 2 resolves and validates
        # every column, hidden ones included.
        query = qualify(query, schema=visible, dialect=DIALECT, validate_qualify_columns=False,
                        identify=False)
        query = qualify(query, schema=full, dialect=DIALECT, identify=False)
        query = annotate_types(query, schema=full, dialect=DIALECT)
    except OptimizeError as e:
        raise bind_error(e) from None
    except Error:
        raise
    except Exception as e:  # sqlglot optimizer internals on constructs it cannot type
        raise Unsupported(f"cannot plan this query: {e}") from None
    columns = tuple(
        Column(name=name, type=_type_of(proj, nullable), nullable=_nullable(proj, nullable))
        for name, proj in zip(names, query.selects, strict=False)
    )
    return Bound(query=query, columns=columns, depends_on=tuple(deps),
                 system_tables=tuple(sys_tables))


def _alias_subquery_projections(query: exp.Query) -> None:
    """Give each unaliased scalar subquery in a select list an ``Alias`` node. sqlglot
    names it through the subquery's own alias instead, and then cannot resolve an ORDER
    BY ordinal that points at it. The output names are already taken (``names``)."""
    for select in list(query.find_all(exp.Select)):
        for i, proj in enumerate(list(select.selects)):
            if isinstance(proj, exp.Subquery):
                alias = proj.alias or f"_col_{i}"
                proj.set("alias", None)
                # Not exp.alias_: on a subquery it sets the subquery's own alias again.
                proj.replace(exp.Alias(this=proj.copy(), alias=exp.to_identifier(alias)))


def _version_of(item: Item, table: exp.Table) -> int:
    if not isinstance(table, VersionedTable):
        return item.version
    version = int(table.args["version"].name)
    if not 0 <= version <= item.version:
        raise InvalidDefinition(f'invalid version "{version}" for "{item.name}"')
    return version


def _type_of(proj: exp.Expr, base_columns: dict[tuple[str, str], bool]) -> str:
    inner = proj.this if isinstance(proj, exp.Alias) else proj
    if isinstance(inner, exp.Literal) and inner.is_string:
        return "text"  # PostgreSQL and Materialize type an unknown-typed literal as text
    name = type_name(proj.type)
    # Only a table's own column or a cast carries a type modifier: like PostgreSQL and
    # Materialize, numeric(15,2) * numeric(15,2), sum(numeric(15,2)) and substring of a
    # varchar(n) are unconstrained numeric / text (sqlglot keeps the operand's modifier,
    # which would then reject results with a larger scale or length).
    keeps = isinstance(inner, exp.Cast) or (
        isinstance(inner, exp.Column) and (inner.table, inner.name) in base_columns)
    return name if keeps else name.split("(")[0]


def _schema_type(type_: str) -> str:
    # sqlglot understands these spellings; keep the schema parseable.
    return {"timestamp without time zone": "timestamp",
            "timestamp with time zone": "timestamptz",
            "character varying": "varchar"}.get(type_, type_)


def _output_names(query: exp.Query, visible: dict[str, object]) -> list[str]:
    left = query
    while isinstance(left, exp.SetOperation):
        left = left.left
    if not isinstance(left, exp.Select):
        return [UNNAMED] * len(query.selects)
    names: list[str] = []
    for proj in left.selects:
        if isinstance(proj, exp.Star) or (
            isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)
        ):
            qualifier = proj.table if isinstance(proj, exp.Column) else ""
            names.extend(_star_names(left, qualifier, visible))
        else:
            names.append(output_name(proj))
    return names


def _star_names(select: exp.Select, qualifier: str, visible: dict[str, object]
                ) -> list[str]:
    names: list[str] = []
    sources = [select.args.get("from_") or select.args.get("from")] + list(
        select.args.get("joins") or [])
    for src in sources:
        if src is None:
            continue
        rel = src.this
        alias = rel.alias_or_name
        if qualifier and alias != qualifier:
            continue
        if isinstance(rel, exp.Table) and isinstance(cols := visible.get(rel.name), dict):
            names.extend(cols)
        elif isinstance(rel, exp.Subquery | exp.Table):
            inner = rel.this if isinstance(rel, exp.Subquery) else None
            if isinstance(inner, exp.Query):
                names.extend(_output_names(inner, visible))
    return names


def _nullable(proj: exp.Expr, nullable: dict[tuple[str, str], bool]) -> bool:
    inner = proj.this if isinstance(proj, exp.Alias) else proj
    if isinstance(inner, exp.Literal):
        return False
    if isinstance(inner, exp.Boolean):
        return False
    if isinstance(inner, exp.Count):
        return False
    if isinstance(inner, exp.Column):
        return nullable.get((inner.table, inner.name), True)
    return True


def bind_error(e: OptimizeError) -> Error:
    msg = str(e)
    m = re.search(r"Column '([^']+)' could not be resolved", msg)
    if m:
        return UnknownColumn(f'column "{m.group(1)}" does not exist')
    m = re.search(r"Unknown table: '?([^'\s]+)'?", msg)
    if m:
        return UnknownRelation(f"unknown catalog item '{m.group(1)}'")
    m = re.search(r"Ambiguous column '([^']+)'", msg)
    if m:
        return UnknownColumn(f'column reference "{m.group(1)}" is ambiguous')
    return Error(msg.split(". Line")[0])
