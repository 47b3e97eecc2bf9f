"""Building blocks for ``pg_functions.py`` and its parts: Spark SQL trees, and PostgreSQL's
errors raised from inside a Spark query (``raise_error('mzflow:<SQLSTATE>:<message>')``,
which ``pg_functions.raised`` turns back into the error)."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog.exprtypes import OPERANDS

PREFIX = "mzflow:"
INTS = exp.DataType.INTEGER_TYPES
FLOATS = (exp.DType.DOUBLE, exp.DType.FLOAT)
TEXTS = (exp.DType.TEXT, exp.DType.VARCHAR, exp.DType.CHAR)


def fn(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=[a.copy() for a in args])


def lit(text: str) -> exp.Expr:
    return exp.Literal.string(text)


def fail(code: str, *message: exp.Expr | str) -> exp.Expr:
    parts = [lit(PREFIX + code + ":")] + [lit(m) if isinstance(m, str) else m
                                            for m in message]
    return fn("RAISE_ERROR", fn("CONCAT", *parts) if len(parts) > 1 else parts[0])


def case(*branches: tuple[exp.Expr, exp.Expr], default: exp.Expr | None = None) -> exp.Expr:
    out = exp.Case()
    for cond, value in branches:
        out = out.when(cond.copy(), value.copy())
    return out.else_(default.copy()) if default is not None else out


def cast(e: exp.Expr, to: str) -> exp.Expr:
    return exp.Cast(this=e.copy(), to=exp.DataType.build(to, dialect="spark"))


def operand(node: exp.Expr, i: int) -> exp.DataType | None:
    recorded = node.meta.get(OPERANDS)
    if recorded is not None and i < len(recorded):
        return recorded[i]
    return None


def is_(t: exp.DataType | None, *kinds: exp.DType) -> bool:
    return t is not None and t.is_type(*kinds)


def type_name(t: exp.DataType) -> str:
    from mzflow.catalog.exprtypes import display_name, from_sqlglot

    return display_name(from_sqlglot(t))


def double(value: str) -> exp.Expr:
    return cast(lit(value), "DOUBLE")


_ATOMS = (exp.Column, exp.Literal, exp.Func, exp.Paren, exp.Null, exp.Boolean, exp.Case)


def paren(e: exp.Expr) -> exp.Expr:
    """``e`` as an operand: a tree built here has no Paren nodes, and the generator
    writes none (``a - (b - c)`` would read as ``a - b - c``)."""
    return e.copy() if isinstance(e, _ATOMS) else exp.Paren(this=e.copy())


def op(cls: type[exp.Binary], *, this: exp.Expr, expression: exp.Expr) -> exp.Expr:
    """A binary operator over parenthesized operands."""
    return cls(this=paren(this), expression=paren(expression))
