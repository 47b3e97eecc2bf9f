"""Reads of PostgreSQL's catalogs: the queries clients send about what exists.

A query that reads only system relations, one of them in ``pg_catalog`` or
``information_schema`` (or that calls a PostgreSQL catalog function such as
``format_type``, or casts to ``regclass``), runs in process on DuckDB
(``engine/catalog_sql.py``) rather than through the binder and the Arrow or Spark
paths, which are built for user data. Its result columns are named as PostgreSQL
names them, and typed with the system relations' declared types where a column is
read as it is.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import srf, system
from mzflow.catalog.bind import output_name
from mzflow.catalog.model import Item, Snapshot
from mzflow.catalog.pg_functions import CatalogFunctions
from mzflow.engine import catalog_sql, local
from mzflow.errors import Error
from mzflow.read.sources import ReadSources
from mzflow.sql.joins import replace_relation

_PG_SCHEMAS = ("pg_catalog", "information_schema")
# Casts whose target types exist only in PostgreSQL's catalogs.
_PG_TYPES = ("regclass", "regtype", "regnamespace", "regrole", "regproc", "name", "oid",
             '"char"', "xid", "int2vector", "oidvector")


def tables(query: exp.Expr) -> list[exp.Table]:
    """The relations ``query`` names (a CTE's name is not one)."""
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    return [t for t in query.find_all(exp.Table)
            if not (t.name in ctes and not t.db) and t.name]


def wants(snap: Snapshot, query: exp.Expr) -> bool:
    """Whether ``query`` is a catalog query for DuckDB (see the module's docstring)."""
    srf.bind_catalog_functions(query)
    found = []
    for table in tables(query):
        try:
            rel = system.find_relation(snap, table)
        except Error:
            return False  # the ordinary path reports it
        if rel is None or isinstance(rel, Item):
            return False
        found.append(rel)
    if any(rel.schema in _PG_SCHEMAS for rel in found):
        return True
    if found:
        # An mz_* query the sqlglot executor cannot answer exactly (CASE, COALESCE, an
        # outer join's padding…: dbt-materialize's relation listing) runs here too.
        try:
            local.verify(query)
        except local.NotEvaluable:
            return True
    for node in query.walk():
        name = catalog_sql.function_name(node)
        if name in catalog_sql._UDFS or name in catalog_sql._CONSTANTS:
            return True
        if isinstance(node, exp.Operator):
            return True
        if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and (
                node.this.name.lower() == "pg_catalog"):
            return True
        if isinstance(node, exp.Cast) and catalog_sql._cast_type(node.to).removesuffix(
                "[]") in _PG_TYPES:
            return True
    return False


def describe(snap: Snapshot, query: exp.Query, search_path: tuple[str, ...]
             ) -> catalog_sql.Answer:
    """``query``'s result columns and types without its rows: it runs over empty
    relations (for a Describe, which runs nothing it need not)."""
    return run(snap, query, None, search_path, empty=True)


def run(snap: Snapshot, query: exp.Query, sources: ReadSources | None,
        search_path: tuple[str, ...], *, empty: bool = False) -> catalog_sql.Answer:
    query = query.copy()
    relations: dict[str, catalog_sql.Relation] = {}
    by_alias: dict[str, system.SystemTable] = {}
    for table in tables(query):
        found = system.find_relation(snap, table)
        if not isinstance(found, system.SystemTable):
            raise Error("a query cannot read system tables and user tables together yet")
        alias = table.alias_or_name
        by_alias[alias] = found
        if found.key not in relations:
            source = sources.rows.get(found.key) if sources is not None else None
            rows = [] if empty else source(snap) if source is not None else found.rows(snap)
            relations[found.key] = catalog_sql.Relation(
                f"_mz_{found.key}", tuple((c.name, c.type) for c in found.all_columns), rows)
        given = table.args.get("alias")
        replace_relation(table, exp.Table(
            this=exp.to_identifier(f"_mz_{found.key}"),
            alias=exp.TableAlias(this=exp.to_identifier(alias), columns=[
                c.copy() for c in (given.columns if given is not None else [])])))
    query = catalog_sql.unqualified(query)
    for select in query.find_all(exp.Select):
        _expand_stars(select, by_alias)
    _zero_based_subscripts(query, by_alias)
    _typed_sums(query, by_alias)
    names, types = _described(query, by_alias)
    return catalog_sql.run(query, list(relations.values()), CatalogFunctions(snap, search_path),
                           names, types)


_ZERO_BASED = ("int2vector", "oidvector")  # PostgreSQL numbers their elements from 0


def _zero_based_subscripts(query: exp.Query, by_alias: dict[str, system.SystemTable]) -> None:
    """``indkey[0]`` is an int2vector's first element in PostgreSQL (its lower bound is
    0), DuckDB's list counts from 1: a subscript of such a column is shifted by one.
    (It was not: ``pg_index.indkey[0]`` read NULL, ``[1]`` the first key column.)"""
    for bracket in list(query.find_all(exp.Bracket)):
        if not isinstance(bracket.this, exp.Column) or _column_type(
                bracket.this, by_alias) not in _ZERO_BASED:
            continue
        for index in bracket.expressions:  # (a slice is refused: catalog_sql.verify)
            index.replace(exp.Add(this=exp.Paren(this=index.copy()),
                                  expression=exp.Literal.number(1)))


# PostgreSQL's sum of these types is of the type named (DuckDB's: HUGEINT or DOUBLE).
_SUM_TYPES = {"smallint": "BIGINT", "integer": "BIGINT", "real": "FLOAT"}


def _typed_sums(query: exp.Query, by_alias: dict[str, system.SystemTable]) -> None:
    """``sum`` of a smallint or an integer is a bigint in PostgreSQL, of a real a real:
    DuckDB's HUGEINT (a numeric here) and DOUBLE are cast to them. The argument's type
    is known for a system relation's column or a cast."""
    for total in list(query.find_all(exp.Sum)):
        arg = total.this
        if isinstance(arg, exp.Column):
            kind = _column_type(arg, by_alias)
        elif isinstance(arg, exp.Cast):
            kind = catalog_sql._cast_type(arg.to)
            kind = catalog_sql._PG_NAMES.get(kind, kind)
        else:
            continue
        to = _SUM_TYPES.get(kind or "")
        if to is not None:  # sum(…) OVER (…) is cast as a whole
            node = total.parent if isinstance(total.parent, exp.Window) else total
            node.replace(exp.Cast(this=node.copy(), to=exp.DataType.build(to, dialect="duckdb")))


def _column_type(column: exp.Column, by_alias: dict[str, system.SystemTable]) -> str | None:
    """The declared type of ``column``, from the innermost SELECT whose FROM items name
    it outwards (a correlated subquery reads the outer query's relations)."""
    select = column.find_ancestor(exp.Select)
    while select is not None:
        found = _declared(column, _sources(select, by_alias))
        if found is not None:
            return found
        select = select.find_ancestor(exp.Select)
    return None


def _expand_stars(select: exp.Select, by_alias: dict[str, system.SystemTable]) -> None:
    """``*`` over a relation with hidden columns names its visible ones (DuckDB sees
    them all)."""
    from_ = select.args.get("from_")
    items = [from_.this] if from_ is not None else []
    items += [j.this for j in select.args.get("joins") or []]
    in_from = [t.alias_or_name for t in items]
    if not any(by_alias.get(a) is not None and by_alias[a].hidden for a in in_from):
        return
    only_relations = all(isinstance(t, exp.Table) for t in items)
    out: list[exp.Expr] = []
    for proj in select.expressions:
        star = isinstance(proj, exp.Star) or (isinstance(proj, exp.Column)
                                              and isinstance(proj.this, exp.Star))
        if not star:
            out.append(proj)
            continue
        qualifier = proj.table if isinstance(proj, exp.Column) else ""
        if not qualifier and not only_relations:
            out.append(proj)  # beside a derived table: DuckDB's expansion (all columns)
            continue
        for alias in [qualifier] if qualifier else in_from:
            rel = by_alias.get(alias)
            if rel is None:  # a derived table: its own columns, as DuckDB expands them
                out.append(exp.Column(this=exp.Star(), table=exp.to_identifier(alias)))
                continue
            out += [exp.column(c.name, table=alias, quoted=True) for c in rel.columns]
    select.set("expressions", out)


def _described(query: exp.Query, by_alias: dict[str, system.SystemTable]
               ) -> tuple[list[str] | None, list[str | None]]:
    """The result columns' names as PostgreSQL gives them (None with a ``*``), and the
    declared type of each that reads a system relation's column as it is."""
    left: exp.Expr = query
    while isinstance(left, exp.SetOperation):
        left = left.left
    if not isinstance(left, exp.Select):
        return None, []
    names: list[str] | None = []
    types: list[str | None] = []
    sources = _sources(left, by_alias)
    for proj in left.selects:
        inner = proj.this if isinstance(proj, exp.Alias) else proj
        if isinstance(inner, exp.Star) or (isinstance(inner, exp.Column)
                                           and isinstance(inner.this, exp.Star)):
            names = None
            types += _star_types(inner, sources)
            continue
        if names is not None:
            names.append("unnest" if isinstance(inner, exp.Explode) and not isinstance(
                proj, exp.Alias) else output_name(proj))
        types.append(_declared(inner, sources))
    return names, types


# A FROM item's columns as (name, declared type) and how many of them * expands to
# (a system relation's hidden columns come last), or None where only DuckDB knows them.
_Source = tuple[list[tuple[str, str | None]], int] | None


def _sources(select: exp.Select, by_alias: dict[str, system.SystemTable]
             ) -> dict[str, _Source]:
    """The FROM items of ``select`` by alias: a system relation's columns, or a derived
    table's or a CTE's as their own select lists declare them (so ``nspname`` read
    through ``SELECT * FROM (SELECT n.nspname …) c`` keeps its type, ``name``)."""
    ctes = {cte.alias_or_name: cte.this for cte in select.root().find_all(exp.CTE)}
    items = [select.args["from_"].this] if select.args.get("from_") else []
    items += [j.this for j in select.args.get("joins") or []]
    out: dict[str, _Source] = {}
    for item in items:
        alias = item.alias_or_name
        inner = item.this if isinstance(item, exp.Subquery) else (
            ctes.get(item.name) if isinstance(item, exp.Table) and not item.db else None)
        if isinstance(item, exp.Table) and alias in by_alias:
            rel = by_alias[alias]
            out[alias] = [(c.name, c.type) for c in rel.all_columns], len(rel.columns)
        elif isinstance(inner, exp.Query):
            names, types = _described(inner, by_alias)
            out[alias] = None if names is None else (list(zip(names, types, strict=False)),
                                                     len(names))
        else:
            out[alias] = None
    return out


def _declared(node: exp.Expr, sources: dict[str, _Source]) -> str | None:
    if isinstance(node, exp.Cast):  # current_database()'s name, inside a derived table
        kind = catalog_sql._cast_type(node.to)
        # A reg* value's type is the rewrite's to decide (catalog_sql._carry_reg_out:
        # it prints as a name where an outer query selects it as it is).
        return None if kind in catalog_sql._REG_TYPES else catalog_sql._PG_NAMES.get(kind, kind)
    if not isinstance(node, exp.Column):
        return None
    for alias in [node.table] if node.table else list(sources):
        columns = (sources.get(alias) or ([], 0))[0]
        found = next((t for name, t in columns if name == node.name), None)
        if found is not None:
            return found
    return None


def _star_types(node: exp.Expr, sources: dict[str, _Source]) -> list[str | None]:
    qualifier = node.table if isinstance(node, exp.Column) else ""
    out: list[str | None] = []
    for alias in [qualifier] if qualifier else list(sources):
        source = sources.get(alias)
        if source is None:
            return out  # DuckDB's types from here on
        columns, visible = source
        out += [t for _, t in columns[:visible]]
    return out
