"""Arithmetic of ``engine/arrow_expr.py``: ``+``, ``-``, ``*`` and ``/`` over integers,
numerics and floats, with PostgreSQL's result types, rounding and errors (overflow,
underflow, division by zero)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.catalog.exprtypes import OPERANDS, sqlglot_scale
from mzflow.engine import division
from mzflow.engine.arrow_types import (
    Data,
    Value,
    _any,
    _array,
    _checked,
    _decimal,
    _fail,
    _kind,
    _pg,
    _ps,
    _typed,
    _widen,
)
from mzflow.errors import UnknownFunction, Unsupported
from mzflow.sql.parse import DIALECT


def _digits(v: Data, scale: int) -> int:
    """The digits v's values need (its type may allow more)."""
    top = (pc.abs(v) if isinstance(v, pa.Scalar) else pc.max(pc.abs(v))).as_py()
    return scale + max(Decimal(top).adjusted() + 1, 1) if top else scale + 1


def _arith(fn: str, op: str, a: Value, b: Value) -> Data:
    (a, b), t = _typed([a, b], op)
    k = _kind(t)
    if k not in ("int", "dec", "float"):
        raise UnknownFunction(f"operator does not exist: {_pg(a.type)} {op} {_pg(b.type)}")
    if k == "dec":
        # Each side keeps its own digits (a common type would make numeric * 2 need 77).
        # Arrow sizes the result by the operands' types: past decimal256's 76 digits
        # (numeric * numeric), size them by their values, which rarely need as many.
        def size(p1: int, p2: int) -> int:
            return p1 + p2 + 1 if fn == "multiply" else max(p1 - s1, p2 - s2) + max(s1, s2) + 1

        (p1, s1), (p2, s2) = _ps(a.type), _ps(b.type)
        if size(p1, p2) > 76:
            p1, p2 = _digits(a, s1), _digits(b, s2)
        wide = pa.decimal256 if _decimal(size(p1, p2), 0).bit_width == 256 else pa.decimal128
        a, b = _widen(a, wide(p1, s1)), _widen(b, wide(p2, s2))
    else:
        a, b = _widen(a, t), _widen(b, t)
    r = _checked(lambda: getattr(pc, fn + "_checked")(a, b), t)
    if k == "float":  # Arrow lets floats overflow to inf and underflow to 0; PostgreSQL not
        finite = pc.and_kleene(pc.invert(pc.is_inf(a)), pc.invert(pc.is_inf(b)))
        if _any(pc.and_kleene(pc.is_inf(r), finite)):
            raise _fail("value out of range: overflow", "22003")
        nonzero = pc.and_kleene(pc.not_equal(a, 0), pc.not_equal(b, 0))
        if fn == "multiply" and _any(pc.and_kleene(pc.equal(r, 0), nonzero)):
            raise _fail("value out of range: underflow", "22003")
    return r


def _divide(node: exp.Div, a: Value, b: Value, n: int) -> Data:
    """``a / b`` of the result type the binder gave the division (``catalog/exprtypes.py``;
    an unbound division is refused): integers truncate; a numeric quotient is exact,
    rounded half away from zero at the result's scale, where ``engine/division.py`` says
    both engines compute it; a double is IEEE's."""
    (a, b), t = _typed([a, b], "/")
    k, result = _kind(t), node.type
    assert isinstance(result, exp.DataType)
    if k not in ("int", "dec", "float"):
        raise UnknownFunction(f"operator does not exist: {_pg(a.type)} / {_pg(b.type)}")
    if k == "float" and result.is_type(exp.DType.DOUBLE):
        a, b = _widen(a, t), _widen(b, t)
        # PostgreSQL's float8div: NaN / 0 is NaN, anything else / 0 an error.
        if _any(pc.and_kleene(pc.equal(b, 0), pc.invert(pc.is_nan(a)))):
            raise _fail("division by zero", "22012")
        r = pc.divide(a, b)
        finite = pc.and_kleene(pc.invert(pc.is_inf(a)), pc.invert(pc.is_inf(b)))
        if _any(pc.and_kleene(pc.is_inf(r), finite)):
            raise _fail("value out of range: overflow", "22003")
        if _any(pc.and_kleene(pc.equal(r, 0), pc.and_kleene(pc.not_equal(a, 0),
                                                              pc.invert(pc.is_inf(b))))):
            raise _fail("value out of range: underflow", "22003")
        return r
    if k == "int" and result.is_type(*exp.DataType.INTEGER_TYPES):
        a, b = _widen(a, t), _widen(b, t)
        _no_zero_divisor(a, b)
        return _checked(lambda: pc.divide_checked(a, b), t)  # truncates toward zero
    if k in ("int", "dec") and result.is_type(exp.DType.DECIMAL):
        operands = node.meta.get(OPERANDS) or (None, node.expression.type)
        den_t = operands[1] if len(operands) > 1 else None
        scale = sqlglot_scale(result)
        q = None if den_t is None else division.exact(scale, sqlglot_scale(den_t))
        if q is None:
            raise Unsupported(f"cannot divide to numeric scale {scale} exactly yet")
        _no_zero_divisor(a, b)
        return quotient(a, b, q.scale, q.numerator_digits, n)
    raise Unsupported(f"cannot divide {_pg(a.type)} by {_pg(b.type)} into "
                      f"{result.sql(dialect=DIALECT).lower()} yet")


def _no_zero_divisor(a: Data, b: Data) -> None:
    if _any(pc.and_kleene(pc.equal(b, 0), pc.is_valid(a))):  # NULL / 0 is NULL
        raise _fail("division by zero", "22012")


def quotient(a: Data, b: Data, scale: int, digits: int, n: int) -> Data:
    """Exact ``a / b`` of integers or numerics as ``decimal(38, scale)``, rounded half
    away from zero, as PostgreSQL rounds and as Spark's HALF_UP does. ``a`` fits in
    ``digits`` digits at that scale and the quotient in 38, else numeric field overflow
    (the Spark path's casts fail there). Python integers, value by value: a routed
    read divides per group, a few rows."""
    scalar = isinstance(a, pa.Scalar) and isinstance(b, pa.Scalar)
    xs = [a.as_py()] if isinstance(a, pa.Scalar) else _array(a, n).to_pylist()
    ys = [b.as_py()] if isinstance(b, pa.Scalar) else _array(b, n).to_pylist()
    if len(xs) != len(ys):
        xs, ys = xs * (len(ys) if len(xs) == 1 else 1), ys * (len(xs) if len(ys) == 1 else 1)
    out: list[Decimal | None] = []
    for x, y in zip(xs, ys, strict=True):
        if x is None or y is None:
            out.append(None)
            continue
        if abs(x) >= Decimal(10) ** (digits - scale):
            raise _fail("numeric field overflow", "22003")
        (n1, d1), (n2, d2) = x.as_integer_ratio(), y.as_integer_ratio()
        num, den = n1 * d2 * 10 ** scale, d1 * n2
        q, r = divmod(abs(num), abs(den))
        q += 2 * r >= abs(den)
        q = -q if (num < 0) != (den < 0) else q
        if abs(q) >= 10 ** division.DIGITS:
            raise _fail("numeric field overflow", "22003")
        out.append(Decimal(q).scaleb(-scale))
    t = pa.decimal128(division.DIGITS, scale)
    return pa.scalar(out[0], t) if scalar else pa.array(out, t)
