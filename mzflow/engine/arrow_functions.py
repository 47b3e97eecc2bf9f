"""More of PostgreSQL's functions and operators for ``engine/arrow_expr.py``: what
constant queries commonly use (``%``, ``||``, ``concat``, ``substr``, ``CASE``,
``greatest``, ``nullif``, rounding, ``exp``/``ln``/``sqrt``/``power``, ``to_char``,
casts to and from text, bytea and boolean, intervals added to dates and timestamps).

Each follows PostgreSQL: its result types, its errors (SQLSTATE and wording) and its
NULLs. Values a kernel cannot take are computed per value in Python (numerics exactly,
with ``decimal``); these are constants and EXPECT batches, not bulk reads.
``engine/spark/pg_functions.py`` gives Spark the same semantics; ``tests/test_scalar_semantics.py``
checks both against PostgreSQL itself.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation, localcontext
from decimal import Overflow as DecimalOverflow
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.engine import arrow_arith as ar
from mzflow.engine import arrow_expr as ax
from mzflow.engine import arrow_types as at
from mzflow.engine import pg_text as pt
from mzflow.errors import TypeMismatch, UnknownFunction, Unsupported
from mzflow.sql import to_char as pg_format
from mzflow.storage import rows as rowconv

Value = Any
Eval = Callable[[exp.Expr], Value]
_EXACT = Context(prec=80, rounding=ROUND_HALF_UP)
NUMERIC_SCALE = 16  # transcendental numeric results: exprtypes.DIV_SCALE digits


def evaluate(node: exp.Expr, table: pa.Table) -> Value | None:
    """``node``'s value, or None when this module does not evaluate it."""
    handler = _HANDLERS.get(type(node))
    if handler is None:
        from mzflow.engine import arrow_strings

        return arrow_strings.evaluate(node, table, _per_value)
    return handler(node, table)


def _ev(table: pa.Table) -> Eval:
    return lambda n: ax._eval(n, table)


def _n(table: pa.Table) -> int:
    return table.num_rows


def _values(v: at.Data, n: int) -> list[Any]:
    return [v.as_py()] if isinstance(v, pa.Scalar) else at._array(v, n).to_pylist()


def _result(out: list[Any], t: pa.DataType, scalar: bool) -> at.Data:
    return pa.scalar(out[0] if out else None, t) if scalar else pa.array(out, t)


def _per_value(fn: Callable[..., Any], args: Sequence[at.Data], t: pa.DataType, n: int
               ) -> at.Data:
    """``fn`` over the rows' values; NULL where any argument is NULL."""
    scalar = all(isinstance(a, pa.Scalar) for a in args)
    columns = [_values(a, n) for a in args]
    width = 1 if scalar else n
    columns = [c * width if isinstance(a, pa.Scalar) else c for a, c in zip(args, columns,
                                                                          strict=True)]
    out = [None if any(v is None for v in row) else fn(*row) for row in zip(*columns,
                                                                            strict=True)]
    return _result(out, t, scalar)


# -- operators ------------------------------------------------------------------------


def _mod(node: exp.Mod, table: pa.Table) -> at.Data:
    (a, b), t = at._typed([_ev(table)(node.this), _ev(table)(node.expression)], "%")
    k = at._kind(t)
    if k == "int":
        a, b = at._widen(a, t), at._widen(b, t)
        ar._no_zero_divisor(a, b)
        # int % -1 is 0 (PostgreSQL spares INT_MIN's overflow); else the dividend's sign.
        safe = pc.if_else(pc.equal(b, -1), pa.scalar(1, t), b)
        return pc.subtract(a, pc.multiply(pc.divide(a, safe), safe))
    if k == "dec":
        (p1, s1), (p2, s2) = at._ps(a.type), at._ps(b.type)
        scale = max(s1, s2)
        ar._no_zero_divisor(a, b)
        out_t = at._decimal(max(p1 - s1, p2 - s2) + scale, scale)
        return _per_value(lambda x, y: _EXACT.remainder(Decimal(x), Decimal(y)),
                          [a, b], out_t, _n(table))
    raise UnknownFunction(f"operator does not exist: {at._pg(a.type)} % {at._pg(b.type)}")


def _dpipe(node: exp.DPipe, table: pa.Table) -> at.Data:
    """``a || b``: text with text, or anything else cast to text (``true || 'a'`` is
    ``truea``); NULL if either is NULL. Two non-text values have no operator."""
    a, b = _ev(table)(node.this), _ev(table)(node.expression)
    kinds = [None if isinstance(v, at.Unknown) else at._kind(v.type) for v in (a, b)]
    if kinds == ["binary", "binary"] or ("binary" in kinds and None in kinds):
        raise Unsupported("EXPECT cannot use bytea || yet")
    if not any(k in (None, "text") for k in kinds):
        raise UnknownFunction(f"operator does not exist: {at._pg(a.type)} || "
                              f"{at._pg(b.type)}")
    texts = [pt.as_text(v, cast=True) for v in (a, b)]
    return pc.binary_join_element_wise(*texts, "")


def _concat(node: exp.Concat, table: pa.Table) -> at.Data:
    """concat(…): each argument's output text (``true`` is ``t``), NULLs skipped."""
    parts = [pt.as_text(_ev(table)(e), cast=False) for e in node.expressions]
    if not parts:
        return pa.scalar("", pa.string())
    return pc.binary_join_element_wise(*parts, "", null_handling="replace", null_replacement="")


def _substring(node: exp.Substring, table: pa.Table) -> at.Data:
    """substr(s, start[, count]): characters from ``start`` (1-based; before 1 counts
    toward ``count`` but yields nothing); a negative count is an error."""
    ev = _ev(table)
    s = at._text(ev(node.this), "substr")
    start = _integer(ev(node.args["start"]), "substr")
    length = node.args.get("length")
    if length is None:
        return _per_value(lambda x, f: x[max(f, 1) - 1:], [s, start], pa.string(), _n(table))
    count = _integer(ev(length), "substr")
    if at._any(pc.less(count, 0)) and at._any(pc.and_kleene(pc.is_valid(s),
                                                            pc.is_valid(start))):
        raise at._fail("negative substring length not allowed", "22011")

    def cut(x: str, f: int, c: int) -> str:
        end = f + c
        return x[max(f, 1) - 1:max(end - 1, 0)] if end > 1 else ""

    return _per_value(cut, [s, start, count], pa.string(), _n(table))


def _integer(v: Value, fn: str) -> at.Data:
    if isinstance(v, at.Unknown):
        return at._parse(v, pa.int32())
    if at._kind(v.type) == "null":
        return pa.scalar(None, pa.int32())
    if at._kind(v.type) != "int" or v.type.bit_width > 32:
        raise UnknownFunction(f"function {fn}(text, {at._pg(v.type)}) does not exist")
    return v


def _case(node: exp.Case, table: pa.Table) -> at.Data:
    """CASE: each row runs its conditions in order and the one result it reaches."""
    subject = node.this
    ifs = node.args.get("ifs") or []
    default = node.args.get("default")
    pending: at.Data = pa.scalar(True)
    results: list[Value] = []
    picks: list[at.Data] = []
    def arm(result: exp.Expr, mask: at.Data) -> Value:
        # PostgreSQL's planner drops an arm a constant condition never reaches.
        if isinstance(mask, pa.Scalar) and mask.as_py() is False:
            return ax.typed_only(result, table)
        return ax._lazy(result, table, mask)

    for branch in ifs:
        cond = branch.this if subject is None else exp.EQ(this=subject.copy(),
                                                          expression=branch.this.copy())
        if isinstance(pending, pa.Scalar) and pending.as_py() is False:
            hit: at.Data = pa.scalar(False)
            at._bool(ax.typed_only(cond, table), "CASE")
        else:
            hit = pc.fill_null(at._bool(ax._lazy(cond, table, pending), "CASE"), False)
        mine = pc.and_kleene(pending, hit)
        results.append(arm(branch.args["true"], mine))
        picks.append(mine)
        pending = pc.and_kleene(pending, pc.invert(hit))
    results.append(arm(default, pending) if default is not None else pa.scalar(None))
    picks.append(pending)
    values = at._unify(results, "CASE")
    out = values[-1]
    for pick, v in reversed(list(zip(picks[:-1], values[:-1], strict=True))):
        out = pc.if_else(pick, v, out)
    return out


def _extreme(node: exp.Greatest | exp.Least, table: pa.Table) -> at.Data:
    """greatest/least: NULLs skipped (NULL only when every argument is), PostgreSQL's
    order (NaN above every number)."""
    vals = at._unify([_ev(table)(e) for e in [node.this, *node.expressions]],
                     node.key.upper())
    fn = "greater" if isinstance(node, exp.Greatest) else "less"

    def pick(best: at.Data, v: at.Data) -> at.Data:
        better = pc.fill_null(ax._compare(fn, "", v, best), False)
        return pc.if_else(pc.or_(pc.is_null(best), better), v, best)

    return reduce(pick, vals[1:], vals[0])


def _nullif(node: exp.Nullif, table: pa.Table) -> at.Data:
    """nullif(a, b): NULL where a = b, else a (of a's type)."""
    (a, b), _ = at._typed([_ev(table)(node.this), _ev(table)(node.expression)], "=")
    same = pc.fill_null(ax._compare("equal", "=", a, b), False)
    return pc.if_else(same, pa.scalar(None, a.type), a)


# -- rounding and transcendental functions ---------------------------------------------


def _rounding(node: exp.Round | exp.Ceil | exp.Floor, table: pa.Table) -> at.Data:
    v = at._typed([_ev(table)(node.this)], node.key)[0][0]
    k = at._kind(v.type)
    digits = node.args.get("decimals")
    if k == "int":
        v, k = at._widen(v, pa.float64()), "float"  # round(int) is round(double precision)
    if k == "float":
        if digits is not None:
            raise UnknownFunction(f"function {node.key}(double precision, integer) does "
                                  "not exist")
        mode = {"round": "half_to_even", "ceil": "up", "floor": "down"}[node.key]
        return pc.round(v, 0, round_mode=mode)
    if k != "dec":
        raise UnknownFunction(f"function {node.key}({at._pg(v.type)}) does not exist")
    scale = 0
    if digits is not None:
        d = _ev(table)(digits)
        if not isinstance(d, pa.Scalar) or at._kind(d.type) != "int":
            raise Unsupported(f"EXPECT cannot use {node.key} with non-constant digits yet")
        scale = d.as_py()
    if scale < 0:
        raise Unsupported(f"EXPECT cannot {node.key} to negative digits yet")
    mode = {"round": "half_towards_infinity", "ceil": "up", "floor": "down"}[node.key]
    p, s = at._ps(v.type)
    if scale >= s:
        return v
    wide = pc.cast(v, at._decimal(p + 1, s))
    return at._checked(lambda: pc.cast(pc.round(wide, scale, round_mode=mode),
                                       at._decimal(p + 1 - s + scale, scale)), v.type)


def _math(node: exp.Expr, table: pa.Table) -> at.Data:
    """exp, ln, log, log10, sqrt, cbrt, power: double precision for doubles and
    integers, exact numerics (16 decimal places) for numerics."""
    name = {"pow": "power"}.get(node.key, node.key)
    args = [_ev(table)(a) for a in (node.this, node.expression) if a is not None]
    if isinstance(node, exp.Log) and len(args) == 1:
        name = "log10"
    typed, t = at._typed(args, name)
    if at._kind(t) == "dec" or (name == "log" and len(args) == 2):
        if at._kind(t) not in ("int", "dec"):
            raise UnknownFunction(f"function log({', '.join(at._pg(a.type) for a in typed)}) "
                                  "does not exist")
        return _per_value(lambda *xs: _numeric_math(name, *[Decimal(x) for x in xs]),
                          typed, pa.decimal128(38, NUMERIC_SCALE), _n(table))
    if at._kind(t) not in ("int", "float"):
        raise UnknownFunction(f"function {name}({at._pg(t)}) does not exist")
    return _per_value(lambda *xs: _float_math(name, *xs),
                      [at._widen(a, pa.float64()) for a in typed], pa.float64(), _n(table))


def _float_math(name: str, x: float, y: float | None = None) -> float:
    finite = math.isfinite(x) and (y is None or math.isfinite(y))
    if math.isnan(x) or (y is not None and math.isnan(y)):
        return math.nan if not (name == "power" and (x == 1 or y == 0)) else 1.0
    if name in ("ln", "log10"):
        if x == 0:
            raise at._fail("cannot take logarithm of zero", "2201E")
        if x < 0:
            raise at._fail("cannot take logarithm of a negative number", "2201E")
        r = math.log(x) if name == "ln" else math.log10(x)
    elif name == "sqrt":
        if x < 0:
            raise at._fail("cannot take square root of a negative number", "2201F")
        r = math.sqrt(x)
    elif name == "cbrt":
        r = math.cbrt(x)  # the C library's, as PostgreSQL's
    elif name == "exp":
        try:
            r = math.exp(x)
        except OverflowError:
            raise at._fail("value out of range: overflow", "22003") from None
        if r == 0 and finite:
            raise at._fail("value out of range: underflow", "22003")
    else:
        assert y is not None
        if x == 0 and y < 0:
            raise at._fail("zero raised to a negative power is undefined", "2201F")
        if x < 0 and math.isfinite(y) and y != int(y):
            raise at._fail("a negative number raised to a non-integer power yields a "
                           "complex result", "2201F")
        try:
            r = math.pow(x, y)
        except OverflowError:
            raise at._fail("value out of range: overflow", "22003") from None
        if r == 0 and x != 0 and finite:
            raise at._fail("value out of range: underflow", "22003")
    if math.isinf(r) and finite:
        raise at._fail("value out of range: overflow", "22003")
    return r


def _numeric_math(name: str, x: Decimal, y: Decimal | None = None) -> Decimal:
    try:
        return _exact_math(name, x, y)
    except (DecimalOverflow, InvalidOperation):  # past the context's digits: past 38 anyway
        raise at._fail("numeric field overflow", "22003") from None


def _exact_math(name: str, x: Decimal, y: Decimal | None = None) -> Decimal:
    with localcontext(_EXACT):
        if name in ("ln", "log10", "log"):
            arg = y if name == "log" else x
            assert arg is not None
            for v in (arg, x):
                if v == 0:
                    raise at._fail("cannot take logarithm of zero", "2201E")
                if v < 0:
                    raise at._fail("cannot take logarithm of a negative number", "2201E")
            if name == "log":
                assert y is not None
                if x == 1:
                    raise at._fail("division by zero", "22012")
                r = y.ln() / x.ln()
            else:
                r = x.ln() if name == "ln" else x.log10()
        elif name == "sqrt":
            if x < 0:
                raise at._fail("cannot take square root of a negative number", "2201F")
            r = x.sqrt()
        elif name == "exp":
            r = x.exp()
        else:
            assert y is not None
            if x == 0 and y < 0:
                raise at._fail("zero raised to a negative power is undefined", "2201F")
            if x < 0 and y != y.to_integral_value():
                raise at._fail("a negative number raised to a non-integer power yields a "
                               "complex result", "2201F")
            r = x ** y if x != 0 or y != 0 else Decimal(1)
        return r.quantize(Decimal(1).scaleb(-NUMERIC_SCALE))


# -- casts ----------------------------------------------------------------------------


def cast(v: Value, to: exp.DataType) -> at.Data | None:
    """Casts ``arrow_expr`` leaves to this module: to and from text, bytea, boolean.
    None: not one of these."""
    src = None if isinstance(v, at.Unknown) else at._kind(v.type)
    if to.is_type(exp.DType.VARBINARY):
        if src is None:
            return pa.scalar(_bytea(str(v)), pa.binary())
        if src == "text":
            return _per_value(_bytea, [v], pa.binary(), len(v) if not isinstance(
                v, pa.Scalar) else 1)
        if src in ("binary", "null"):
            return pc.cast(v, pa.binary())
        raise TypeMismatch(f"cannot cast type {at._pg(v.type)} to bytea")
    if to.is_type(exp.DType.BOOLEAN):
        if src is None:
            return at._parse(v, pa.bool_())
        if src in ("bool", "null"):
            return pc.cast(v, pa.bool_())
        if src == "text":
            return _per_value(lambda s: at._parse(at.Unknown(s), pa.bool_()).as_py(), [v],
                              pa.bool_(), len(v) if not isinstance(v, pa.Scalar) else 1)
        if src == "int" and v.type.bit_width == 32:
            return pc.not_equal(v, 0)
        raise TypeMismatch(f"cannot cast type {at._pg(v.type)} to boolean")
    if to.is_type(exp.DType.TEXT) or (to.is_type(exp.DType.VARCHAR) and not to.expressions):
        if src in ("text", None, "null"):
            return None
        return pt.as_text(v, cast=True)
    if src == "bool" and to.is_type(exp.DType.INT):
        return pc.cast(v, pa.int32())
    if src in ("binary", "bool") and not to.is_type(exp.DType.TEXT):
        raise TypeMismatch(f"cannot cast type {at._pg(v.type)} to "
                           f"{to.sql(dialect='postgres').lower()}")
    return None


def _bytea(text: str) -> bytes:
    try:
        return rowconv.bytea(text)
    except ValueError:
        raise at._fail(f'invalid input syntax for type bytea: "{text}"', "22P02") from None


# -- dates, timestamps and intervals ---------------------------------------------------


def _interval(node: exp.Interval, table: pa.Table) -> at.Data:
    text = node.this
    if not (isinstance(text, exp.Literal)):
        raise Unsupported("EXPECT cannot use a non-constant interval yet")
    unit = node.args.get("unit")
    months, days, micros = pt.parse_interval(text.this, unit.name if unit is not None else None)
    return pa.scalar((months, days, micros * 1000), pa.month_day_nano_interval())


def is_interval(v: Value) -> bool:
    return not isinstance(v, at.Unknown) and pa.types.is_interval(v.type)


def _is_date(v: Value) -> bool:
    return not isinstance(v, at.Unknown) and pa.types.is_date(v.type)


def is_dated(a: Value, b: Value) -> bool:
    """Whether ``a ± b`` is date or interval arithmetic (this module's)."""
    return is_interval(a) or is_interval(b) or _is_date(a) or _is_date(b)


_EPOCH = dt.date(1970, 1, 1)
PG_DAYS = (-2440588, 2145042905)  # PostgreSQL's first and last date, from 1970-01-01


def date_arith(node: exp.Expr, a: Value, b: Value, n: int) -> at.Data:
    """date ± integer (a date), date - date (an integer), and intervals."""
    if is_interval(a) or is_interval(b):
        return interval_arith(node, a, b, n)
    add = isinstance(node, exp.Add)
    if _is_date(a) and _is_date(b) and not add:
        return pc.cast(pc.subtract(pc.cast(a, pa.int32()), pc.cast(b, pa.int32())), pa.int32())
    if add and not _is_date(a):
        a, b = b, a
    if isinstance(b, at.Unknown):
        b = at._parse(b, pa.int32())
    if not (_is_date(a) and at._kind(b.type) in ("int", "null")) or (
            at._kind(b.type) == "int" and b.type.bit_width > 32):
        raise UnknownFunction(f"operator does not exist: {at._pg(a.type)} "
                              f"{'+' if add else '-'} {at._pg(b.type)}")

    def move(day: dt.date, k: int) -> dt.date:
        total = (day - _EPOCH).days + (k if add else -k)
        if not PG_DAYS[0] <= total <= PG_DAYS[1]:
            raise at._fail("date out of range", "22008")
        try:
            return _EPOCH + dt.timedelta(days=total)
        except OverflowError:
            raise Unsupported("dates after 9999-12-31 or before 0001-01-01 are not "
                              "supported yet") from None

    return _per_value(move, [a, pc.cast(b, pa.int64())], pa.date32(), n)


def interval_arith(node: exp.Expr, a: Value, b: Value, n: int) -> at.Data:
    """date/timestamp ± interval (a date becomes a timestamp), interval + date/timestamp.
    Months first (clipped to the month's end), then days, then time, as PostgreSQL."""
    if isinstance(a, at.Unknown) or isinstance(b, at.Unknown):
        raise Unsupported("EXPECT cannot read a quoted literal beside an interval yet")
    if is_interval(a) and isinstance(node, exp.Add):
        a, b = b, a
    if not is_interval(b) or is_interval(a) or at._kind(a.type) not in ("time", "null"):
        raise UnknownFunction(f"operator does not exist: {at._pg(a.type)} "
                              f"{'+' if isinstance(node, exp.Add) else '-'} interval")
    t = a.type if pa.types.is_timestamp(a.type) else pa.timestamp("us")
    sign = 1 if isinstance(node, exp.Add) else -1

    def add(x: dt.date, iv: Any) -> dt.datetime:
        start = x if isinstance(x, dt.datetime) else dt.datetime.combine(x, dt.time())
        return pt.add_interval(start, sign * iv.months, sign * iv.days,
                               sign * (iv.nanoseconds // 1000))

    out = _per_value(add, [a, b], pa.timestamp("us"), n)
    return pc.cast(out, t) if t != out.type else out


def _to_char(node: exp.ToChar, table: pa.Table) -> at.Data:
    ev = _ev(table)
    v, template = ev(node.this), node.args.get("format")
    if not (isinstance(template, exp.Literal) and template.is_string):
        raise Unsupported("EXPECT cannot use to_char with a non-constant template yet")
    if isinstance(v, at.Unknown):
        v = at._parse(v, pa.timestamp("us", tz="UTC"))
    if not (pa.types.is_timestamp(v.type) or pa.types.is_date(v.type)):
        raise Unsupported(f"to_char of {at._pg(v.type)} is not supported yet")
    pieces = pg_format.parse(template.this)
    zoned = pa.types.is_date(v.type) or bool(v.type.tz)  # a date is read as timestamptz

    def fmt(x: dt.date) -> str:
        start = x if isinstance(x, dt.datetime) else dt.datetime.combine(x, dt.time())
        return pg_format.format_value(pieces, start.replace(tzinfo=None), zoned)

    return _per_value(fmt, [v], pa.string(), _n(table))


def initcap(text: str) -> str:
    """PostgreSQL's initcap in the C locale: an ASCII letter after an ASCII letter or
    digit is lower case, any other ASCII letter upper case; other characters stay."""
    out, after_word = [], False
    for ch in text:
        if ch.isascii():
            out.append(ch.lower() if after_word else ch.upper())
            after_word = ch.isalnum()
        else:
            out.append(ch)
            after_word = False
    return "".join(out)


def _initcap(node: exp.Initcap, table: pa.Table) -> at.Data:
    # sqlglot's parser gives initcap(x) its default delimiters: PostgreSQL has no other.
    return _per_value(initcap, [at._text(_ev(table)(node.this), "initcap")], pa.string(),
                      _n(table))


_HANDLERS: dict[type[exp.Expr], Callable[[Any, pa.Table], at.Data]] = {
    exp.Initcap: _initcap,
    exp.Mod: _mod, exp.DPipe: _dpipe, exp.Concat: _concat, exp.Substring: _substring,
    exp.Case: _case, exp.Greatest: _extreme, exp.Least: _extreme, exp.Nullif: _nullif,
    exp.Round: _rounding, exp.Ceil: _rounding, exp.Floor: _rounding,
    exp.Exp: _math, exp.Ln: _math, exp.Log: _math, exp.Sqrt: _math, exp.Cbrt: _math,
    exp.Pow: _math, exp.Interval: _interval, exp.ToChar: _to_char,
}
