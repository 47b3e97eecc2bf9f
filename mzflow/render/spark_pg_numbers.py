"""Numbers for ``render/spark_pg.py``: exp/ln/log/sqrt/power raise PostgreSQL's errors
(Spark returns NULL, NaN or infinity); numerics of constants are computed in process."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mzflow.errors import Unsupported
from mzflow.render.spark_pg_base import FLOATS, case, double, fail, fn, is_, lit, op, operand, paren


def _math(node: exp.Expr) -> exp.Expr:
    """Spark returns NULL, NaN or infinity where PostgreSQL raises an error."""
    if node.is_type(exp.DType.DECIMAL):
        # The binder refused numeric arguments that read columns; a constant one is
        # computed in process, exactly.
        return _numeric_constant(node)
    x, y = node.this, node.args.get("expression")
    zero, inf = exp.Literal.number(0), double("Infinity")
    finite_x = op(exp.NEQ, this=fn("ABS", x), expression=inf)
    name = node.key
    if isinstance(node, exp.Log) and y is not None:
        raise Unsupported("log(double precision, double precision) does not exist")
    if isinstance(node, exp.Ln | exp.Log):
        return case((op(exp.EQ, this=x.copy(), expression=zero),
                      fail("2201E", "cannot take logarithm of zero")),
                     (op(exp.LT, this=x.copy(), expression=zero),
                      fail("2201E", "cannot take logarithm of a negative number")),
                     default=fn("LN" if isinstance(node, exp.Ln) else "LOG10", x))
    if isinstance(node, exp.Sqrt):
        return case((op(exp.LT, this=x.copy(), expression=zero),
                      fail("2201F", "cannot take square root of a negative number")),
                     default=fn("SQRT", x))
    if isinstance(node, exp.Exp):
        r = fn("EXP", x)
        return case((exp.And(this=op(exp.EQ, this=r, expression=inf), expression=finite_x),
                      fail("22003", "value out of range: overflow")),
                     (exp.And(this=op(exp.EQ, this=r.copy(), expression=zero),
                              expression=finite_x.copy()),
                      fail("22003", "value out of range: underflow")),
                     default=r)
    if isinstance(node, exp.Pow):
        assert y is not None
        r = fn("POWER", x, y)
        finite = exp.And(this=finite_x, expression=op(exp.NEQ, this=fn("ABS", y), expression=inf))
        return case(
            (op(exp.EQ, this=x.copy(), expression=exp.Literal.number(1)), double("1")),
            (exp.And(this=op(exp.EQ, this=x.copy(), expression=zero),
                     expression=op(exp.LT, this=y.copy(), expression=zero)),
             fail("2201F", "zero raised to a negative power is undefined")),
            (exp.And(this=exp.And(this=op(exp.LT, this=x.copy(), expression=zero),
                                  expression=op(exp.NEQ, this=y.copy(),
                                                     expression=fn("FLOOR", y))),
                     expression=op(exp.NEQ, this=fn("ABS", y), expression=inf.copy())),
             fail("2201F", "a negative number raised to a non-integer power yields a "
                            "complex result")),
            (exp.And(this=op(exp.EQ, this=fn("ABS", r), expression=inf.copy()),
                     expression=finite),
             fail("22003", "value out of range: overflow")),
            (exp.And(this=exp.And(this=op(exp.EQ, this=r.copy(), expression=zero),
                                  expression=op(exp.NEQ, this=x.copy(), expression=zero)),
                     expression=finite.copy()),
             fail("22003", "value out of range: underflow")),
            default=r)
    raise Unsupported(f"function {name} is not supported on Spark yet")


def _numeric_constant(node: exp.Expr) -> exp.Expr:
    """A numeric exp/ln/log/sqrt/power of constants: its exact value, computed in
    process (``arrow_functions``), as a literal of the bound type."""
    from mzflow.render import arrow_constants

    if node.find(exp.Column):
        raise Unsupported(f"function {node.key}(numeric) of column values is not supported yet",
                      hint="cast its argument to double precision")
    value = arrow_constants.value(node.copy()).to_pylist()[0]
    t = node.type.copy() if isinstance(node.type, exp.DataType) else exp.DataType.build(
        "DECIMAL(38, 16)")
    if value is None:
        return exp.Cast(this=exp.null(), to=t)
    return exp.Cast(this=lit(format(value, "f")), to=t)


def _floor_double(x: exp.Expr) -> exp.Expr:
    """floor of a double, as a double: Spark's FLOOR gives a bigint (overflowing past
    2**63). x - pmod(x, 1) is exact (a double past 2**52 is whole); an infinity stays."""
    whole = op(exp.Sub, this=x.copy(), expression=fn("PMOD", x, double("1")))
    # An infinity stays, and so does a zero (-0 - -0 would be +0).
    same = exp.or_(op(exp.EQ, this=fn("ABS", x), expression=double("Infinity")),
                   op(exp.EQ, this=x.copy(), expression=double("0")))
    return exp.If(this=same, true=x.copy(), false=whole)


def _ceil_double(x: exp.Expr) -> exp.Expr:
    return exp.Neg(this=paren(_floor_double(exp.Neg(this=paren(x)))))


def _rounding(node: exp.Ceil | exp.Floor | exp.Trunc) -> exp.Expr:
    """ceil, floor and trunc of doubles stay doubles; trunc(numeric[, s]) truncates
    (sqlglot writes a cast to bigint, which overflows and drops the digits)."""
    x = node.this
    t = operand(node, 0)
    if is_(t, *FLOATS):
        if isinstance(node, exp.Floor):
            return _floor_double(x)
        if isinstance(node, exp.Ceil):
            return _ceil_double(x)
        return exp.If(this=op(exp.LT, this=x.copy(), expression=exp.Literal.number(0)),
                      true=_ceil_double(x), false=_floor_double(x))
    if isinstance(node, exp.Trunc) and is_(t, exp.DType.DECIMAL):
        digits = node.args.get("decimals") or exp.Literal.number(0)
        return exp.If(this=op(exp.LT, this=x.copy(), expression=exp.Literal.number(0)),
                      true=fn("CEIL", x, digits), false=fn("FLOOR", x, digits))
    return node


def _sign(node: exp.Sign) -> exp.Expr:
    """sign(numeric) is a numeric; Spark's SIGN is a double, which then drags what it
    meets (coalesce, CASE) to double."""
    if is_(operand(node, 0), exp.DType.DECIMAL):
        return exp.Cast(this=fn("SIGN", node.this), to=exp.DataType.build("DECIMAL(1, 0)"))
    return node


REWRITES: dict[type[exp.Expr], Callable[[exp.Expr], exp.Expr]] = {
    exp.Sign: _sign,  # type: ignore[dict-item]
    exp.Ln: _math, exp.Log: _math, exp.Sqrt: _math, exp.Exp: _math, exp.Pow: _math,
    exp.Ceil: _rounding, exp.Floor: _rounding, exp.Trunc: _rounding,  # type: ignore[dict-item]
}
