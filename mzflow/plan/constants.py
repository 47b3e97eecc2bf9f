"""Evaluate constant expressions without an engine.

``INSERT … VALUES`` of literals is the common case and must not pay for a
Spark job. Anything that is not a plain constant raises :class:`NotConstant`
and the caller falls back to Spark.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlglot import exp


class NotConstant(Exception):
    pass


def evaluate(node: exp.Expr) -> Any:
    if isinstance(node, exp.Paren):
        return evaluate(node.this)
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
    if isinstance(node, exp.Neg):
        value = evaluate(node.this)
        if isinstance(value, Decimal):
            return value.copy_negate()  # exact: no rounding to the context's precision
        if isinstance(value, int):
            return -value
        raise NotConstant(node.sql())
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal | exp.Null):
        # The target column's type does the conversion; a cast of a literal only
        # says how to read it, and the column parses the text the same way.
        return evaluate(node.this)
    raise NotConstant(node.sql())


def evaluate_rows(values: exp.Values) -> list[list[Any]]:
    rows = []
    for row in values.expressions:
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        rows.append([evaluate(v) for v in items])
    return rows
