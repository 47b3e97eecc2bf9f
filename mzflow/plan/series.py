"""Lowering a set-returning FROM item (``generate_series``) to a :class:`~ir.FlatMap`.

The binder left every form (in FROM, LATERAL, or moved out of a SELECT list) as one
``LATERAL ROWS FROM (…) AS alias(columns)`` item (``catalog/srf.py``). An item whose
arguments read columns of the FROM items to its left is a FlatMap over all of them:
one call per row there, which is also how it is maintained (row by row). An item whose
arguments are constants is a FlatMap without input, a constant relation, joined with
the rest like any other FROM item.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mzflow.catalog.srf import calls_of, column_names, is_series
from mzflow.plan import ir
from mzflow.plan.ir import Node

__all__ = ["correlated", "flat_map", "is_series", "push_below"]


def correlated(item: exp.Lateral) -> bool:
    """Whether the item's calls read columns (of the items to its left)."""
    return any(call.find(exp.Column) is not None for call in calls_of(item))


def flat_map(input: Node | None, item: exp.Lateral, fresh: Callable[[str], str],
             scope: dict[tuple[str, str], str], fix: Callable[[exp.Expr], exp.Expr]
             ) -> ir.FlatMap:
    """``item`` over ``input`` (None: constant arguments). ``fix`` rewrites an argument
    over the scope so far; the item's own columns join the scope after it."""
    calls = tuple(fix(c) for c in calls_of(item))
    alias = item.alias_or_name
    outputs = tuple(fresh(f"{alias}_{c}") for c in column_names(item))
    for column, name in zip(column_names(item), outputs, strict=True):
        scope[(alias, column)] = name
    own = input.columns if input is not None else ()
    return ir.FlatMap(columns=own + outputs, input=input, calls=calls)


def push_below(node: ir.FlatMap, preds: list[exp.Expr]) -> tuple[Node, list[exp.Expr]]:
    """WHERE conjuncts over the input's columns alone move below the FlatMap (a row's
    elements all carry its values, so they pass or fail together): rows are dropped
    before they are expanded. Returns the node and the conjuncts left above it."""
    if node.input is None:
        return node, preds
    own = set(node.input.columns)
    below = [p for p in preds if {c.name for c in p.find_all(exp.Column)} <= own]
    if not below:
        return node, preds
    inner = ir.Filter(columns=node.input.columns, input=node.input, predicates=tuple(below))
    return (ir.FlatMap(columns=node.columns, input=inner, calls=node.calls),
            [p for p in preds if not any(p is q for q in below)])
