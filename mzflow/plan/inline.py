"""Inline views: a bound query → the same query over base relations only.

Each view reference becomes a subquery of the view's definition, its outputs
renamed to the view's stored column names, under the reference's alias, so the
qualified column references of the outer query stay valid.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog.bind import bind, viewed
from mzflow.catalog.ddl.expectations import filtered_sql, read_filters
from mzflow.catalog.model import MATERIALIZED_VIEW, VIEW, Item, Snapshot
from mzflow.sql.joins import replace_relation
from mzflow.sql.parse import parse_query

_MAX_DEPTH = 64


def inline_views(snap: Snapshot, query: exp.Query, depth: int = 0) -> exp.Query:
    if depth > _MAX_DEPTH:
        raise RecursionError("views nested too deeply")
    query = query.copy()
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    for table in list(query.find_all(exp.Table)):
        if table.name in ctes:
            continue
        item = viewed(snap, table.name) if not table.db else None
        if item is None or item.kind not in (VIEW, MATERIALIZED_VIEW):
            continue
        assert item.definition is not None
        body = bind(snap, parse_query(item.definition)).query
        body = inline_views(snap, body, depth + 1)
        body = _rename_outputs(body, [c.name for c in item.columns])
        body = checked(snap, item, body)
        replace_relation(table, exp.Subquery(this=body, alias=exp.TableAlias(
            this=exp.to_identifier(table.alias_or_name))))
    return query


def checked(snap: Snapshot, item: Item, body: exp.Query) -> exp.Query:
    """``body`` (the view's rows) without those its DROP ROW and QUARANTINE expectations
    leave out; the conditions are bound against the view like any WHERE."""
    conditions = read_filters(snap, item)
    if not conditions:
        return body
    name = ".".join(exp.to_identifier(part, quoted=True).sql()
                    for part in (item.database, item.schema, item.name))
    wrapper = bind(snap, parse_query(filtered_sql(name, "_mz_checked", conditions))).query
    inner = next(wrapper.find_all(exp.Table))
    inner.replace(exp.Subquery(this=body, alias=exp.TableAlias(
        this=exp.to_identifier(inner.alias_or_name))))
    return _rename_outputs(wrapper, [c.name for c in item.columns])


def _rename_outputs(query: exp.Query, names: list[str]) -> exp.Query:
    if isinstance(query, exp.Select):
        query.set("expressions", [
            exp.alias_(p.this if isinstance(p, exp.Alias) else p, name, quoted=True)
            for p, name in zip(query.selects, names, strict=False)
        ])
        return query
    # A set operation: rename through an outer SELECT.
    inner = query.subquery("_v")
    return exp.select(*[
        exp.alias_(exp.column(src, table="_v", quoted=True), name, quoted=True)
        for src, name in zip(query.named_selects, names, strict=False)
    ]).from_(inner)
