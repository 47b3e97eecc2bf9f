"""A query in parentheses where a statement or a view's body stands: ``(SELECT …)``.

PostgreSQL and Materialize take ``CREATE VIEW v AS (SELECT …)`` and a bare ``(SELECT …)``
statement (dbt-materialize writes every view and materialized view that way); sqlglot
reads them as a subquery, which the binder would take for a scalar one.
"""

from __future__ import annotations

from sqlglot import exp

_MODIFIERS = ("order", "limit", "offset")


def unwrap(query: exp.Expr) -> exp.Expr:
    """The query inside unaliased parentheses; ``(q) ORDER BY … LIMIT …`` moves its
    modifiers onto ``q`` when ``q`` has none of its own, and otherwise reads ``q`` as a
    derived table, as PostgreSQL does."""
    while isinstance(query, exp.Subquery) and not query.alias and isinstance(
            query.this, exp.Query):
        inner = query.this
        outer = {key: query.args[key] for key in _MODIFIERS if query.args.get(key)}
        if outer and any(inner.args.get(key) for key in _MODIFIERS):
            derived = exp.select("*").from_(exp.Subquery(this=inner, alias=exp.TableAlias(
                this=exp.to_identifier("subquery"))))
            for key, node in outer.items():
                derived.set(key, node)
            return derived
        for key, node in outer.items():
            inner.set(key, node)
        query = inner
    return query
