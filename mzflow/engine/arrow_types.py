"""Values of ``engine/arrow_expr.py``'s expressions: their types as PostgreSQL names and
converts them (implicit casts to a common type, numeric precision), and literals read as
PostgreSQL reads them (an unquoted number's type; a quoted one typed by its context).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import Context, Decimal
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.engine.spark import EvaluationError, evaluation_error
from mzflow.errors import TypeMismatch, UnknownFunction, Unsupported
from mzflow.storage import rows


class Unknown(str):
    """A quoted literal whose type is not known yet."""


class Wide(Unknown):
    """A number too wide for Arrow's decimals: usable only beside a float, which
    PostgreSQL converts it to."""


Data = Any  # pa.Array | pa.ChunkedArray | pa.Scalar: pyarrow has no type hints
Value = Any  # Data | Unknown
NULL_BOOL = pa.scalar(None, pa.bool_())
_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # the decimal digits an integer type needs


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


def _any(mask: Data) -> bool:
    return (mask if isinstance(mask, pa.Scalar) else pc.any(mask)).as_py() is True


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
