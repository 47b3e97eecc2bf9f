"""A SQL boolean expression evaluated over an Arrow table, vectorized, with PostgreSQL's
semantics: EXPECT constraints judge every batch a table write commits, in-process.

``check`` runs ``evaluate`` over an empty table of the columns' Arrow types: every
type-driven decision (and every refusal) is taken before a row is seen, so the two
cannot disagree about what is supported. A quoted literal is typed from its context
(``d > '2024-01-01'`` compares dates), as PostgreSQL types an ``unknown`` literal.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from decimal import Context, Decimal
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.catalog.exprtypes import OPERANDS, sqlglot_scale
from mzflow.errors import TypeMismatch, UnknownColumn, UnknownFunction, Unsupported
from mzflow.render.spark import EvaluationError, evaluation_error
from mzflow.sql.parse import DIALECT
from mzflow.storage import rows
from mzflow.storage.types import parse_type


class Unknown(str):
    """A quoted literal whose type is not known yet."""


class Wide(Unknown):
    """A number too wide for Arrow's decimals: usable only beside a float, which
    PostgreSQL converts it to."""


Data = Any  # pa.Array | pa.ChunkedArray | pa.Scalar: pyarrow has no type hints
Value = Any  # Data | Unknown
NULL_BOOL = pa.scalar(None, pa.bool_())
_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # the decimal digits an integer type needs
Ops = dict[type[exp.Expr], tuple[str, str]]
_CMP: Ops = {exp.EQ: ("equal", "="), exp.NEQ: ("not_equal", "<>"), exp.LT: ("less", "<"),
             exp.LTE: ("less_equal", "<="), exp.GT: ("greater", ">"),
             exp.GTE: ("greater_equal", ">=")}
_ARITH: Ops = {exp.Add: ("add", "+"), exp.Sub: ("subtract", "-"), exp.Mul: ("multiply", "*")}
_OPERATORS: dict[type[exp.Expr], str] = {
    exp.Div: "operator /", exp.Mod: "operator %", exp.DPipe: "operator ||", exp.Case: "CASE",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM", exp.NullSafeNEQ: "IS DISTINCT FROM",
    exp.SimilarTo: "SIMILAR TO"}


def check(expr: exp.Expr, types: Mapping[str, str], *, boolean: bool = True) -> None:
    """Raise Unsupported (or PostgreSQL's error for a bad expression) unless evaluate()
    can evaluate ``expr`` over columns of these catalog types. ``boolean`` False: any
    value (a projection's keys and aggregate arguments)."""
    evaluate(expr, pa.schema([(n, parse_type(t).arrow) for n, t in types.items()])
             .empty_table(), boolean=boolean)


def evaluate(expr: exp.Expr, table: pa.Table, *, boolean: bool = True,
             clause: str = "EXPECT") -> pa.ChunkedArray | pa.Array:
    """The expression's value per row: a boolean array (any type when ``boolean`` is
    False), NULL where SQL gives NULL. ``clause``: the boolean's clause, as a
    non-boolean's error names it (PostgreSQL: argument of WHERE must be type boolean)."""
    try:
        v = _eval(expr, table)
        if boolean:
            v = _bool(v, clause)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:  # no kernel for the types
        raise Unsupported(f"EXPECT cannot evaluate {expr.sql(dialect=DIALECT)} yet ({e})",
                          ) from None
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, table.num_rows)
    if not isinstance(v, pa.Array | pa.ChunkedArray):  # an untyped literal alone
        raise Unsupported(f"cannot evaluate {expr.sql(dialect=DIALECT)} on its own yet")
    return v


def _eval(node: exp.Expr, table: pa.Table) -> Value:
    ev = lambda n: _eval(n, table)  # noqa: E731
    if isinstance(node, exp.Paren):
        return ev(node.this)
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        if node.name not in table.column_names:
            raise UnknownColumn(f'column "{node.name}" does not exist')
        col = table.column(node.name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        return col.cast(pa.large_string()) if pa.types.is_string_view(col.type) else col
    if isinstance(node, exp.Literal):
        return Unknown(node.this) if node.is_string else _number(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return _number("-" + node.this.this)  # the grammar folds the sign into the constant
    if isinstance(node, exp.Null):
        return pa.scalar(None)
    if isinstance(node, exp.Boolean):
        return pa.scalar(node.this, pa.bool_())
    if type(node) in _CMP:
        return _compare(*_CMP[type(node)], ev(node.this), ev(node.expression))
    if isinstance(node, exp.And | exp.Or):
        return _connective(node, table)
    if isinstance(node, exp.Not):
        return pc.invert(_bool(ev(node.this), "NOT"))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null | exp.Boolean):
        v = ev(node.this)
        if isinstance(node.expression, exp.Null):
            return _isnull(v)
        b = _bool(v, "IS")
        return pc.fill_null(b if node.expression.this else pc.invert(b), False)
    if isinstance(node, exp.Between) and not node.args.get("symmetric"):
        # PostgreSQL rewrites it to x >= low AND x <= high, short-circuit included.
        x, low, high = (node.this.copy(), node.args["low"].copy(), node.args["high"].copy())
        return ev(exp.And(this=exp.GTE(this=x, expression=low),
                          expression=exp.LTE(this=x.copy(), expression=high)))
    if isinstance(node, exp.In) and not any(node.args.get(k) for k in ("query", "unnest",
                                                                         "field")):
        x, *items = _unify([ev(e) for e in [node.this, *node.expressions]], "=")
        return reduce(pc.or_kleene, [_compare("equal", "=", x, v) for v in items])
    if isinstance(node, exp.Like | exp.ILike | exp.Escape):
        return _like(node, table)
    if type(node) in _ARITH:
        a, b = ev(node.this), ev(node.expression)
        if isinstance(node, exp.Add | exp.Sub) and _fn().is_dated(a, b):
            return _fn().date_arith(node, a, b, table.num_rows)
        return _arith(*_ARITH[type(node)], a, b)
    if isinstance(node, exp.Div) and isinstance(node.type, exp.DataType):
        return _divide(node, ev(node.this), ev(node.expression), table.num_rows)
    if isinstance(node, exp.Neg | exp.Abs):
        v, fn = _typed([ev(node.this)], "")[0][0], node.key
        if _kind(v.type) not in ("int", "dec", "float"):
            raise UnknownFunction(f"function {fn}({_pg(v.type)}) does not exist")
        return _checked(lambda: getattr(pc, "negate_checked" if fn == "neg" else "abs_checked")(v),
                        v.type)
    if type(node) is exp.Cast:
        return _cast(ev(node.this), node.to)
    if isinstance(node, exp.Length) and not (node.args.get("binary")
                                             or node.args.get("encoding")):
        return pc.utf8_length(_text(ev(node.this), "length"))
    if isinstance(node, exp.Lower | exp.Upper):
        # Unicode's simple case mapping (upper('ß') is 'ẞ'); PostgreSQL's follows the
        # database's locale (C: ASCII only; ICU: full mappings, 'SS'). ASCII agrees.
        return getattr(pc, f"utf8_{node.key}")(_text(ev(node.this), node.key))
    if isinstance(node, exp.Trim) and not node.args.get("collation"):
        chars = node.expression
        if chars is not None and not (isinstance(chars, exp.Literal) and chars.is_string):
            raise Unsupported("EXPECT cannot use trim of non-constant characters yet")
        trim = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(
            str(node.args.get("position") or "").upper(), pc.utf8_trim)
        # PostgreSQL trims spaces, not every kind of whitespace.
        return trim(_text(ev(node.this), "btrim"), characters=chars.this if chars else " ")
    if isinstance(node, exp.Coalesce):
        vals: list[Value] = []
        args = [node.this, *node.expressions]
        for k, arg in enumerate(args):  # each row runs them until one is not NULL
            pending = reduce(pc.and_kleene, [_isnull(v) for v in vals], pa.scalar(True))
            vals.append(_lazy(arg, table, pending))
            if isinstance(vals[-1], Unknown) or (isinstance(vals[-1], pa.Scalar)
                                                 and vals[-1].is_valid):
                # The planner drops what follows a constant: typed, never run.
                rest = [typed_only(a, table) for a in args[k + 1:]]
                vals += [v if isinstance(v, pa.Scalar | Unknown) else pa.scalar(None, v.type)
                         for v in rest]
                break
        return pc.coalesce(*_unify(vals, "COALESCE"))
    found = _fn().evaluate(node, table)
    if found is not None:
        return found
    raise _unsupported(node)


def _fn() -> Any:
    """render/arrow_functions.py: more functions, built on this module's helpers."""
    from mzflow.render import arrow_functions

    return arrow_functions


def _connective(node: exp.And | exp.Or, table: pa.Table) -> Data:
    """AND/OR as PostgreSQL runs them. The planner folds constant operands first, and a
    FALSE one decides an AND (a TRUE one an OR) without running the rest; then each row
    runs the others left to right, up to the first that decides it."""
    is_and, name = isinstance(node, exp.And), node.key.upper()
    combine = pc.and_kleene if is_and else pc.or_kleene
    ops = _operands(node, type(node))
    consts = {id(o) for o in ops if not o.find(exp.Column)}
    result = None
    for op in (o for o in ops if id(o) in consts):
        v = _bool(_eval(op, table), name)
        if v.as_py() is (not is_and):
            for rest in ops:  # still typed, as PostgreSQL's parser types them
                if id(rest) not in consts:
                    _bool(_eval(rest, table.slice(0, 0)), name)
            return v
        result = v if result is None else combine(result, v)  # for AND, TRUE or NULL
    for op in ops:
        if id(op) in consts:
            continue
        if result is None:
            result = _bool(_eval(op, table), name)
        else:
            needed = pc.fill_null(result if is_and else pc.invert(result), True)
            result = combine(result, _bool(_lazy(op, table, needed), name))
    return result


def typed_only(node: exp.Expr, table: pa.Table) -> Value:
    """``node`` typed but not run, as PostgreSQL's planner treats a part it drops (after
    a constant COALESCE argument, a constant CASE condition): NULL of its type; a
    constant that fails contributes no type."""
    try:
        return _eval(node, table.slice(0, 0))
    except EvaluationError:
        return pa.scalar(None)


def _operands(node: exp.Expr, cls: type) -> list[exp.Expr]:
    node = node.unnest()
    if type(node) is cls:
        return _operands(node.this, cls) + _operands(node.expression, cls)
    return [node]


def _unsupported(node: exp.Expr) -> Unsupported:
    if type(node) in _OPERATORS:
        what = _OPERATORS[type(node)]
    elif isinstance(node, exp.Anonymous):
        what = f"function {node.name}"
    elif node.find(exp.Query):
        what = "subquery"
    elif isinstance(node, exp.Column):
        what = f"column reference {node.sql(dialect=DIALECT)}"
    elif isinstance(node, exp.Func):
        what = f"function {node.sql_name().lower()}"
    else:
        what = node.key.replace("_", " ")
    return Unsupported(f"EXPECT cannot use {what} yet")


def _lazy(node: exp.Expr, table: pa.Table, needed: Data) -> Value:
    """node's value where it is ``needed``: an evaluation error counts only in rows that
    PostgreSQL's short-circuit evaluation reaches (elsewhere the value is NULL, unused)."""
    try:
        return _eval(node, table)
    except EvaluationError:
        mask = _array(needed, table.num_rows)
        v = _eval(node, table.filter(mask))  # raises again if a needed row fails
        if isinstance(v, pa.Scalar | Unknown):
            return v
        return pc.replace_with_mask(pa.nulls(table.num_rows, v.type), mask, _array(v, 0))


def _array(v: Data, n: int) -> pa.Array:
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, n)
    return v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v


def _isnull(v: Value) -> Data:
    return pa.scalar(False) if isinstance(v, Unknown) else pc.is_null(v)


def _fail(message: str, code: str) -> EvaluationError:
    return evaluation_error(f"Evaluation error: {message}", code)


def _checked(run: Callable[[], Data], t: pa.DataType) -> Data:
    """run(), with Arrow's overflow (checked kernels, safe casts) as PostgreSQL's error."""
    try:
        return run()
    except pa.ArrowInvalid:
        what = {"int": f"{_pg(t)} out of range", "dec": "numeric field overflow"}
        raise _fail(what.get(_kind(t), "value out of range: overflow"), "22003") from None


# -- types ----------------------------------------------------------------------------


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_decimal(t):
        return "dec"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "time"
    return "bool" if pa.types.is_boolean(t) else "null" if pa.types.is_null(t) else str(t)


def _pg(t: pa.DataType) -> str:
    k = _kind(t)
    if k == "int":
        return {64: "bigint", 32: "integer"}.get(t.bit_width, "smallint")
    if k == "float":
        return "real" if t.bit_width == 32 else "double precision"
    if pa.types.is_timestamp(t):
        return f"timestamp with{'' if t.tz else 'out'} time zone"
    return {"dec": "numeric", "bool": "boolean", "null": "unknown", "time": "date"}.get(k, k)


def _decimal(p: int, s: int) -> pa.DataType:
    if p > 76:
        raise Unsupported(f"EXPECT cannot use numeric values of {p} digits yet (76 at most)")
    return pa.decimal128(max(p, 1), s) if p <= 38 else pa.decimal256(p, s)


def _ps(t: pa.DataType) -> tuple[int, int]:
    return (t.precision, t.scale) if _kind(t) == "dec" else (_DIGITS[t.bit_width], 0)


def _common(a: pa.DataType, b: pa.DataType, op: str) -> pa.DataType:
    """The type both convert to, as PostgreSQL's implicit casts choose it."""
    ka, kb = _kind(a), _kind(b)
    if a == b or kb == "null":
        return a
    if ka == "null":
        return b
    if ka == kb == "int":
        return a if a.bit_width >= b.bit_width else b
    if {ka, kb} <= {"int", "dec"}:  # exact: enough digits on both sides of the point
        (p1, s1), (p2, s2) = _ps(a), _ps(b)
        return _decimal(max(p1 - s1, p2 - s2) + max(s1, s2), max(s1, s2))
    if {ka, kb} <= {"int", "dec", "float"}:  # even real vs numeric: float8, as PostgreSQL
        return pa.float64()
    if ka == kb == "time":  # date < timestamp < timestamptz (the session zone is UTC)
        return max(a, b, key=lambda t: (pa.types.is_timestamp(t), bool(getattr(t, "tz", None))))
    if ka == kb == "text":
        return pa.large_string()
    if op == "COALESCE":
        raise TypeMismatch(f"COALESCE types {_pg(a)} and {_pg(b)} cannot be matched")
    raise UnknownFunction(f"operator does not exist: {_pg(a)} {op} {_pg(b)}")


def _typed(vals: list[Value], op: str) -> tuple[list[Data], pa.DataType]:
    """Quoted literals read as the others' type, NULLs typed; and the common type."""
    def common(vs: list[Value]) -> pa.DataType:
        return reduce(lambda a, b: _common(a, b, op),
                      [v.type for v in vs if not isinstance(v, Unknown)], pa.null())

    t = common(vals)
    if _kind(t) == "null" and any(isinstance(v, Unknown) for v in vals):
        t = pa.string()
    typed = [_parse(v, t) if isinstance(v, Unknown) else v for v in vals]
    t = common(typed)  # a numeric literal keeps its digits: x = '1.555' is numeric(4,3)
    return [pc.cast(v, t) if _kind(v.type) == "null" else v for v in typed], t


def _unify(vals: list[Value], op: str) -> list[Data]:
    typed, t = _typed(vals, op)
    return [_widen(v, t) for v in typed]


def _widen(v: Data, t: pa.DataType) -> Data:
    if v.type == t:
        return v
    if _kind(v.type) == "int" and _kind(t) == "dec":  # Arrow wants every digit its type has
        v = pc.cast(v, _decimal(*_ps(v.type)))
    if _kind(v.type) == "dec" and _kind(t) == "float":
        # Arrow's decimal→double is not correctly rounded (3.03 gives 3.0300000000000002);
        # PostgreSQL's is (strtod of the text), and so is Arrow's text→double.
        return pc.cast(pc.cast(v, pa.string()), t)
    # Widening, or narrowing to digits the values fit in; unsafe lets int64 → float64 round.
    return pc.cast(v, t, safe=False)


def _bool(v: Value, what: str) -> Data:
    if isinstance(v, Unknown):
        return _parse(v, pa.bool_())
    if _kind(v.type) == "null":
        return NULL_BOOL
    if _kind(v.type) != "bool":
        raise TypeMismatch(f"argument of {what} must be type boolean, not type {_pg(v.type)}")
    return v


def _text(v: Value, fn: str) -> Data:
    if isinstance(v, Wide):
        raise UnknownFunction(f"function {fn}(numeric) does not exist")
    if isinstance(v, Unknown) or _kind(v.type) == "null":
        return pa.scalar(str(v) if isinstance(v, Unknown) else None, pa.string())
    if _kind(v.type) != "text":
        raise UnknownFunction(f"function {fn}({_pg(v.type)}) does not exist")
    return v


# -- operators ------------------------------------------------------------------------


def _compare(fn: str, op: str, a: Value, b: Value) -> Data:
    a, b = _unify([a, b], op)
    k = _kind(a.type)
    if k == "null":
        return NULL_BOOL
    if k != "float":
        return getattr(pc, fn)(a, b)
    # PostgreSQL: NaN equals NaN and sorts above every other number; IEEE says neither.
    flip = {"not_equal": "equal", "greater_equal": "less", "less_equal": "greater"}
    if fn in flip:
        return pc.invert(_compare(flip[fn], op, a, b))
    if fn == "greater":
        a, b, fn = b, a, "less"
    nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
    nan = pc.and_kleene(nan_a if fn == "equal" else pc.invert(nan_a), nan_b)
    return pc.or_kleene(getattr(pc, fn)(a, b), nan)


def _any(mask: Data) -> bool:
    return (mask if isinstance(mask, pa.Scalar) else pc.any(mask)).as_py() is True


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
    rounded half away from zero at the result's scale, within the 38 digits the Spark
    path (``render/spark.py: _decimal_quotient``) gives it; a double is IEEE's."""
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
        scale, den_scale = sqlglot_scale(result), sqlglot_scale(den_t)
        if den_t is None or scale < 6 or scale + den_scale > 37:
            raise Unsupported(f"cannot divide to numeric scale {scale} exactly yet")
        _no_zero_divisor(a, b)
        return quotient(a, b, scale, 38 - den_scale, n)
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
        if abs(q) >= 10 ** 38:
            raise _fail("numeric field overflow", "22003")
        out.append(Decimal(q).scaleb(-scale))
    t = pa.decimal128(38, scale)
    return pa.scalar(out[0], t) if scalar else pa.array(out, t)


def cast(v: Value, to: exp.DataType) -> Data:
    """``v`` cast to ``to`` as PostgreSQL casts (Unsupported where not known)."""
    return _cast(v, to)


def _cast(v: Value, to: exp.DataType) -> Data:
    found = _fn().cast(v, to)
    if found is not None:
        return found
    if to.is_type("decimal") and not to.expressions:  # numeric: every digit kept
        v = _parse(v, pa.decimal128(38, 0)) if isinstance(v, Unknown) else v
        if _kind(v.type) in ("int", "null"):
            return pc.cast(v, _decimal(*_ps(v.type)) if _kind(v.type) == "int"
                           else pa.decimal128(38, 0))
        if _kind(v.type) == "dec":
            return v
        raise Unsupported(f"EXPECT cannot cast {_pg(v.type)} to numeric yet")
    st = parse_type(to.sql(dialect=DIALECT))
    t, kt = st.arrow, _kind(st.arrow)
    # Not: real, timestamp(p) (rounds), char (pads), varchar(n) (truncates), jsonb, boolean.
    if (kt not in ("int", "dec", "float", "text", "time") or t == pa.float32()
            or (to.expressions and kt != "dec") or st.name in ("character", "jsonb")):
        raise Unsupported(f"EXPECT cannot cast to {to.sql(dialect=DIALECT).lower()} yet")
    v = _parse(v, t) if isinstance(v, Unknown) else v
    ks = _kind(v.type)
    if v.type == t or ks == "null" or (ks, kt) in (("text", "text"), ("float", "float")):
        return pc.cast(v, t)
    if ks == "int" and kt in ("int", "float", "text"):
        return _checked(lambda: pc.cast(v, t, safe=kt != "float"), t)
    if ks == "int" and kt == "dec":
        return _checked(lambda: pc.cast(pc.cast(v, _decimal(_ps(v.type)[0] + t.scale,
                                                            t.scale)), t), t)
    if ks == "dec" and kt in ("int", "dec"):  # rounds half away from zero, as PostgreSQL
        p, s, scale = v.type.precision, v.type.scale, t.scale if kt == "dec" else 0
        return _checked(lambda: pc.cast(pc.round(
            pc.cast(v, _decimal(p + 1, s)), scale, round_mode="half_towards_infinity")
            if s > scale else v, t), t)
    if ks == "dec" and kt == "float":
        return _widen(v, t)
    if ks == "float" and kt == "int":  # rint(), then a range check (NaN fails it)
        return _checked(lambda: pc.cast(pc.round(v, 0, round_mode="half_to_even"), t), t)
    if ks == kt == "time":  # a timestamp's date is its floor; zones are UTC's
        return pc.cast(v, t, safe=False)
    raise Unsupported(f"EXPECT cannot cast {_pg(v.type)} to {st.name} yet")


def _like(node: exp.Expr, table: pa.Table) -> Data:
    """LIKE as PostgreSQL: % and _, backslash (or ESCAPE's) escape; ILIKE is LIKE on
    lower(string) and lower(pattern)."""
    escape = "\\"
    if isinstance(node, exp.Escape):
        esc = node.expression
        if not (isinstance(esc, exp.Literal) and esc.is_string):
            raise Unsupported("EXPECT cannot use a non-constant LIKE escape yet")
        if len(esc.this) > 1:
            raise _fail("invalid escape string", "22025")
        escape, node = esc.this, node.this
    if not isinstance(node, exp.Like | exp.ILike):
        raise _unsupported(node)
    v, pattern = _eval(node.this, table), node.expression
    if not isinstance(v, Unknown) and _kind(v.type) not in ("text", "null"):
        raise UnknownFunction(f"operator does not exist: {_pg(v.type)} ~~ unknown")
    if isinstance(pattern, exp.Null):
        return NULL_BOOL
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise Unsupported("EXPECT cannot use a non-constant LIKE pattern yet")
    text, tokens, i = pattern.this, [], 0  # (is a wildcard, character)
    while i < len(text):
        if text[i] == escape:
            if i + 1 == len(text):  # PostgreSQL fails only in rows whose match gets there
                raise Unsupported("EXPECT cannot use a LIKE pattern that ends with its escape "
                                  "character", hint="escape it too to match it: \\\\")
            i += 1
            tokens.append((False, text[i]))
        else:
            tokens.append((text[i] in "%_", text[i]))
        i += 1
    s = _text(v, "like")
    if isinstance(node, exp.ILike):
        s = pc.utf8_lower(s)
        lowered = iter(pc.utf8_lower(pa.array([c for w, c in tokens if not w],
                                               pa.string())).to_pylist())
        tokens = [(w, c if w else next(lowered)) for w, c in tokens]
    regex = "".join((".*" if c == "%" else ".") if w else f"\\x{{{ord(c):x}}}"
                    for w, c in tokens)
    found = pc.match_substring_regex(s, f"(?s)\\A{regex}\\z")
    return pc.invert(found) if node.args.get("negate") else found


# -- literals -------------------------------------------------------------------------


def _number(text: str) -> pa.Scalar | Wide:
    """An unquoted number: integer if it fits, else bigint, else numeric, as PostgreSQL."""
    if re.fullmatch(r"[+-]?\d+", text):
        for t in (pa.int32(), pa.int64()):
            if -(1 << (t.bit_width - 1)) <= int(text) < 1 << (t.bit_width - 1):
                return pa.scalar(int(text), t)
    d = Decimal(text)
    digits, exponent = len(d.as_tuple().digits), int(d.as_tuple().exponent)
    p, s = (digits + exponent, 0) if exponent >= 0 else (max(digits, -exponent), -exponent)
    if p > 76:
        return Wide(text)
    # 1e3 is 1000, numeric(4,0)
    return pa.scalar(d.quantize(Decimal(1), context=Context(prec=p)) if exponent > 0 else d,
                     _decimal(p, s))


_NUM = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*", re.I | re.A)
_WS = " \t\n\r\f\v"  # what PostgreSQL's input functions skip: C's isspace()
_OTHER_FORMS = re.compile(r"_|^\s*[+-]?0[xob]|nan|inf", re.I)  # 1_000, 0x1F, NaN: refused


def _parse(text: str, t: pa.DataType) -> pa.Scalar:
    """A quoted literal as a value of t's kind (numeric: its own digits), or PostgreSQL's
    error; a form PostgreSQL accepts but this does not read is Unsupported."""
    k, num = _kind(t), _NUM.fullmatch(text)
    if isinstance(text, Wide) and k != "float":
        raise Unsupported(f"EXPECT cannot use {text} as {_pg(t)} yet (76 digits at most)")
    invalid = _fail(f'invalid input syntax for type {_pg(t)}: "{text}"', "22P02")
    if k == "text":
        return pa.scalar(str(text), t)
    if k in ("int", "dec", "float") and _OTHER_FORMS.search(text) and not (
            k == "float" and text.strip(_WS).lower().lstrip("+-") in ("inf", "infinity", "nan")):
        raise Unsupported(f"EXPECT cannot read '{text}' as {_pg(t)} yet")
    if k == "int":
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text, re.A):
            raise invalid
        if not -(1 << (t.bit_width - 1)) <= int(text) < 1 << (t.bit_width - 1):
            raise _fail(f'value "{text}" is out of range for type {_pg(t)}', "22003")
        return pa.scalar(int(text), t)
    if k == "dec" and num:
        v = _number(num.group(1))
        if isinstance(v, Wide):
            raise Unsupported(f"EXPECT cannot use '{text}' as numeric yet (76 digits at most)")
        return v
    if k == "float" and (num or text.strip(_WS).lower().lstrip("+-") in ("inf", "infinity",
                                                                          "nan")):
        v = pc.cast(pa.scalar(text.strip(_WS)), t)  # correctly rounded, to float4 directly
        if num and (pc.is_inf(v).as_py() or (v.as_py() == 0 and Decimal(num.group(1)) != 0)):
            raise _fail(f'"{text}" is out of range for type {_pg(t)}', "22003")
        return v
    if k == "bool":
        try:
            return pa.scalar(rows.parse_bool(text))
        except ValueError:
            raise invalid from None
    if k == "time":
        try:
            v, offset = rows.parse_timestamp(text)
        except rows.OutOfRangeTime:
            raise _fail(f'date/time field value out of range: "{text}"', "22008") from None
        except ValueError:
            v, offset = None, None
        if v is not None:
            if getattr(t, "tz", None) and offset:  # no zone: the session's, always UTC
                v -= dt.timedelta(seconds=offset)
            # PostgreSQL ignores a zone given to a timestamp, and a time given to a date.
            return pa.scalar(v.date() if pa.types.is_date(t) else v, t)
    if k in ("dec", "float"):
        raise invalid
    raise Unsupported(f"EXPECT cannot read '{text}' as {_pg(t)} yet"
                      + (" (write YYYY-MM-DD[ HH:MM:SS])" if k == "time" else ""))
