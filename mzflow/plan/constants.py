"""Evaluate constant expressions without an engine.

``INSERT … VALUES`` of literals is the common case and must not pay for a
Spark job. A literal stays as written: the target column converts it, as
PostgreSQL assigns an unknown-typed literal (and rounds a numeric into an integer
column). Any other expression goes to ``evaluate_other`` (the caller's in-process
evaluator, with PostgreSQL's semantics: ``7.5::int8`` is 8); what that cannot
evaluate raises :class:`NotConstant` and the caller falls back to Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlglot import exp

from mzflow.errors import Unsupported


class NotConstant(Exception):
    pass


Other = Callable[[exp.Expr], Any]


def evaluate(node: exp.Expr, evaluate_other: Other | None = None) -> Any:
    if isinstance(node, exp.Paren):
        return evaluate(node.this, evaluate_other)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        if any(c in text for c in ".eE"):
            return Decimal(text)
        return int(text)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        value = evaluate(node.this)
        if isinstance(value, Decimal):
            return value.copy_negate()  # exact: no rounding to the context's precision
        if isinstance(value, int):
            return -value
    if evaluate_other is not None and not node.find(exp.Column, exp.Query):
        try:
            return evaluate_other(node)
        except Unsupported:
            pass
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal | exp.Null):
        # A cast the evaluator does not know: the target column's type does the
        # conversion, and parses the text as the cast would.
        return evaluate(node.this)
    raise NotConstant(node.sql())


def evaluate_rows(values: exp.Values, evaluate_other: Other | None = None
                  ) -> list[list[Any]]:
    rows = []
    for row in values.expressions:
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        rows.append([evaluate(v, evaluate_other) for v in items])
    return rows
