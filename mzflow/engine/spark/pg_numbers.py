"""Numbers for ``pg_functions.py``: exp/ln/log/sqrt/power raise PostgreSQL's errors
(Spark returns NULL, NaN or infinity); numerics of constants are computed in process."""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mzflow.catalog.exprtypes import OPERANDS as OPERANDS_KEY
from mzflow.engine.spark.pg_base import FLOATS, case, double, fail, fn, is_, lit, op, operand, paren
from mzflow.errors import Unsupported


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
            (exp.and_(op(exp.EQ, this=x.copy(), expression=exp.Literal.number(1)),
                      exp.Not(this=exp.Is(this=y.copy(), expression=exp.null()))),
             double("1")),  # 1 ^ NaN is 1 (Spark: NaN)
            (fn("ISNAN", y), double("NaN")),
            (fn("ISNAN", x), exp.If(this=op(exp.EQ, this=y.copy(), expression=zero),
                                    true=double("1"), false=double("NaN"))),
            (exp.And(this=op(exp.EQ, this=x.copy(), expression=zero),
                     expression=op(exp.LT, this=y.copy(), expression=zero)),
             fail("2201F", "zero raised to a negative power is undefined")),
            (exp.And(this=exp.And(this=op(exp.LT, this=x.copy(), expression=zero),
                                  expression=op(exp.NEQ, this=y.copy(),
                                                expression=_floor_double(y))),
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
    from mzflow.engine import arrow_constants

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
    # An infinity stays, and so does a zero (-0 - -0 would be +0); between -1 and 0,
    # pmod's x + 1 may round to 1 (-5e-324 would stay itself).
    same = exp.or_(op(exp.EQ, this=fn("ABS", x), expression=double("Infinity")),
                   op(exp.EQ, this=x.copy(), expression=double("0")))
    below = exp.and_(op(exp.LT, this=x.copy(), expression=double("0")),
                     op(exp.GT, this=x.copy(), expression=double("-1")))
    return case((same, x.copy()), (below, double("-1")), default=whole)


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
    x = node.this
    if is_(operand(node, 0), exp.DType.DECIMAL):
        return exp.Cast(this=fn("SIGN", x), to=exp.DataType.build("DECIMAL(1, 0)"))
    # PostgreSQL's sign of NaN and of -0 is 0 (Spark's: NaN, -0).
    return case((exp.Is(this=x.copy(), expression=exp.null()),
                 exp.Cast(this=exp.null(), to=exp.DataType.build("DOUBLE"))),
                (exp.or_(fn("ISNAN", x), op(exp.EQ, this=x, expression=double("0"))),
                 double("0")),
                (op(exp.GT, this=x, expression=double("0")), double("1")), default=double("-1"))


# -- decimals: Spark's widening rounds --------------------------------------------------
#
# Spark types an operation on decimals by the operands' types, and where the result
# would need more than 38 digits it cuts the scale (decimal(38,0) with decimal(10,2)
# compare and coalesce as decimal(38,0): 1.50 = 2 is true; decimal(38,10) + decimal(38,10)
# keeps 9 places). Casting the operands first to the type PostgreSQL's result has keeps
# every digit, or fails (numeric field overflow) where 38 are not enough.


def _digits(t: exp.DataType | None) -> tuple[int, int] | None:
    """(precision, scale) of a decimal or integer type."""
    if is_(t, exp.DType.DECIMAL):
        assert t is not None
        params = [int((p.this if isinstance(p, exp.DataTypeParam) else p).name)
                  for p in t.expressions]
        return (params + [38, 0])[0], (params[1:] + [0])[0] if params else 10
    widths = {exp.DType.SMALLINT: 5, exp.DType.INT: 10, exp.DType.BIGINT: 19}
    for kind, width in widths.items():
        if is_(t, kind):
            return width, 0
    return None


def _as(e: exp.Expr, precision: int, scale: int) -> exp.Expr:
    return exp.Cast(this=e.copy(), to=exp.DataType.build(f"DECIMAL({precision}, {scale})"))


def float_checked(node: exp.Expr) -> exp.Expr:
    """+ - * / of doubles (or reals): PostgreSQL's overflow and underflow errors where
    Spark gives infinity or zero, and NaN / 0 is NaN (Spark: division by zero)."""
    if not is_(node.type, *FLOATS):
        return node
    a, b = node.this, node.expression
    inf = double("Infinity")
    finite = exp.and_(op(exp.NEQ, this=fn("ABS", a), expression=inf),
                      op(exp.NEQ, this=fn("ABS", b), expression=inf.copy()))
    divide = isinstance(node, exp.Div)
    branches = []
    if divide:
        branches.append((exp.and_(fn("ISNAN", a), op(exp.EQ, this=b, expression=double("0"))),
                         double("NaN")))
    r = node.copy()
    branches.append((exp.and_(op(exp.EQ, this=fn("ABS", r), expression=inf.copy()), finite),
                     fail("22003", "value out of range: overflow")))
    if isinstance(node, exp.Mul | exp.Div):
        nonzero = op(exp.NEQ, this=a, expression=double("0"))
        other = (op(exp.NEQ, this=fn("ABS", b), expression=inf.copy()) if divide
                 else op(exp.NEQ, this=b, expression=double("0")))
        branches.append((exp.and_(op(exp.EQ, this=r, expression=double("0")), nonzero, other),
                         fail("22003", "value out of range: underflow")))
    return case(*branches, default=r)


def widened(node: exp.Expr) -> exp.Expr:
    """Comparisons and + - % of decimals of different scales: both sides at the larger
    scale, with room for the result; + - of doubles checked (:func:`float_checked`)."""
    if isinstance(node, exp.Add | exp.Sub) and is_(node.type, *FLOATS):
        return float_checked(node)
    a, b = _digits(operand(node, 0)), _digits(operand(node, 1))
    if a is None or b is None or not (is_(operand(node, 0), exp.DType.DECIMAL)
                                      or is_(operand(node, 1), exp.DType.DECIMAL)):
        return node
    scale = max(a[1], b[1])
    whole = max(a[0] - a[1], b[0] - b[1])
    arith = isinstance(node, exp.Add | exp.Sub | exp.Mod)
    if whole + scale + (1 if arith else 0) <= 38 and (arith or a[1] == b[1]):
        return node  # Spark's own type holds every digit
    precision = 37 if arith else 38  # an arithmetic result may need one more digit
    out = node.copy()
    out.set("this", _as(node.this, precision, scale))
    out.set("expression", _as(node.expression, precision, scale))
    return out


def product(node: exp.Mul) -> exp.Expr:
    """``a * b`` of decimals at PostgreSQL's scale (the sum of the operands'). Where the
    operands' declared digits add past 38, Spark cuts the product's scale, to 6 at
    worst (an unconstrained numeric, decimal(38,10), times 2 lost 4 places). The
    operands are cast first to types whose digits fit: each keeps its scale, the
    integer digits left over are shared, a literal keeping just the ones it has. A
    value too large for its share fails (numeric field overflow), never rounds."""
    if is_(node.type, *FLOATS):
        return float_checked(node)
    a, b = _digits(operand(node, 0)), _digits(operand(node, 1))
    if a is None or b is None or not is_(node.type, exp.DType.DECIMAL):
        return node
    scale = a[1] + b[1]
    whole = (a[0] - a[1]) + (b[0] - b[1]) + 1
    if whole + scale <= 38 or scale <= 6:
        return node  # Spark's own type keeps the scale (6 places survive its cut)
    budget = 38 - scale - 1  # integer digits both operands may have between them
    if budget < 2:
        return node  # no room: Spark's rounding stands (a scale past 36 is refused earlier)
    needs = [_literal_digits(node.this) or a[0] - a[1], _literal_digits(node.expression)
             or b[0] - b[1]]
    small = 0 if needs[0] <= needs[1] else 1
    share = [0, 0]
    share[small] = min(needs[small], budget // 2)
    share[1 - small] = min(needs[1 - small], budget - share[small])
    out = node.copy()
    out.set("this", _as(node.this, share[0] + a[1], a[1]))
    out.set("expression", _as(node.expression, share[1] + b[1], b[1]))
    return out


def _literal_digits(e: exp.Expr) -> int | None:
    """The integer digits a numeric literal has (at least 1), else None."""
    inner = e.this if isinstance(e, exp.Paren | exp.Neg) else e
    if isinstance(inner, exp.Literal) and not inner.is_string:
        digits = inner.this.lstrip("-").split(".")[0].lstrip("0")
        if "e" not in inner.this.lower():
            return max(1, len(digits))
    return None


def _in(node: exp.In) -> exp.Expr:
    if not node.expressions or not is_(node.type, exp.DType.BOOLEAN):
        return node
    kinds = [_digits(t) for t in node.meta.get(OPERANDS_KEY, ())]
    if not kinds or any(k is None for k in kinds) or len({k[1] for k in kinds if k}) <= 1:
        return node
    scale = max(k[1] for k in kinds if k)
    out = node.copy()
    out.set("this", _as(node.this, 38, scale))
    out.set("expressions", [_as(e, 38, scale) for e in node.expressions])
    return out


def _unified(node: exp.Expr) -> exp.Expr:
    """COALESCE, GREATEST, LEAST, CASE, IF, NULLIF of a decimal type: each value cast to
    that type before Spark picks one of its own."""
    t = node.type
    if not is_(t, exp.DType.DECIMAL):
        return node
    assert isinstance(t, exp.DataType)
    out = node.copy()
    if isinstance(out, exp.Case):
        for branch in out.args.get("ifs") or []:
            branch.set("true", exp.Cast(this=branch.args["true"], to=t.copy()))
        if out.args.get("default") is not None:
            out.set("default", exp.Cast(this=out.args["default"], to=t.copy()))
        return out
    if isinstance(out, exp.If):
        for key in ("true", "false"):
            if out.args.get(key) is not None:
                out.set(key, exp.Cast(this=out.args[key], to=t.copy()))
        return out
    if isinstance(out, exp.Nullif):
        return exp.If(this=widened(_as_compare(node)), true=exp.Cast(this=exp.null(),
                                                                      to=t.copy()),
                      false=exp.Cast(this=node.this.copy(), to=t.copy()))
    out.set("this", exp.Cast(this=out.this, to=t.copy()))
    out.set("expressions", [exp.Cast(this=e, to=t.copy()) for e in out.expressions])
    return out


def _as_compare(node: exp.Expr) -> exp.Expr:
    eq = exp.EQ(this=paren(node.this), expression=paren(node.expression))
    eq.meta[OPERANDS_KEY] = node.meta.get(OPERANDS_KEY)
    return eq


REWRITES: dict[type[exp.Expr], Callable[[exp.Expr], exp.Expr]] = {
    **dict.fromkeys((exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.NullSafeEQ,
                     exp.NullSafeNEQ, exp.Mod), widened),
    exp.In: _in, exp.Mul: product, exp.Div: float_checked,  # type: ignore[dict-item]
    **dict.fromkeys((exp.Coalesce, exp.Greatest, exp.Least, exp.Case, exp.If, exp.Nullif),
                    _unified),
    exp.Sign: _sign,  # type: ignore[dict-item]
    exp.Ln: _math, exp.Log: _math, exp.Sqrt: _math, exp.Exp: _math, exp.Pow: _math,
    exp.Ceil: _rounding, exp.Floor: _rounding, exp.Trunc: _rounding,  # type: ignore[dict-item]
}
