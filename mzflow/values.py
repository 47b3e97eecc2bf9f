"""Values as PostgreSQL's text output writes them (its ``*_out`` functions, with
DateStyle ISO, IntervalStyle postgres and extra_float_digits 1, the defaults): what
the shell prints and what the wire protocol sends in text format.

It sits at the top of the package, beside ``errors.py``: every edge that shows values
(the shell, the CLI, the pgwire server) needs it, none of them owns it, and it must
not import pyspark or anything past the standard library. A value arrives as the read
paths return it (``datetime``, ``Decimal``, ``timedelta``, lists for arrays, ``bytes``…);
the type name (as ``Result.types`` prints it) decides where the value alone cannot:
a ``real``'s digits.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
import uuid
from decimal import Decimal
from typing import Any

_SINGLE = ("real", "float4")
_ARRAY_SPECIAL = set('{}",\\') | {" ", "\t", "\n", "\r", "\v", "\f"}


def pg_text(value: Any, type_name: str | None) -> str | None:
    """``value`` of SQL type ``type_name`` as PostgreSQL writes it; None for NULL.
    Without a type name the value's Python type decides."""
    if value is None:
        return None
    t = (type_name or "").strip().lower()
    if isinstance(value, list | tuple) and t in ("int2vector", "oidvector"):
        # The catalogs' vectors print as their elements with spaces (int2vectorout),
        # which is what clients split (DBeaver's index columns).
        return " ".join(str(v) for v in value)
    if isinstance(value, list | tuple):
        element = t[:-2] if t.endswith("[]") else ""
        return _array(value, element)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return _float(value, single=t.split("(")[0] in _SINGLE)
    if isinstance(value, Decimal):
        return _numeric(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dt.datetime):
        return _timestamp(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return _time(value)
    if isinstance(value, dt.timedelta):
        return _interval(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def _array(values: list[Any] | tuple[Any, ...], element: str) -> str:
    """``{1,2}``, ``{a,"b c",NULL}``, ``{{1,2},{3,4}}`` (array_out)."""
    items = []
    for v in values:
        if isinstance(v, list | tuple):
            items.append(_array(v, element[:-2] if element.endswith("[]") else element))
            continue
        text = pg_text(v, element)
        if text is None:
            items.append("NULL")
        elif text == "" or text.upper() == "NULL" or any(c in _ARRAY_SPECIAL for c in text):
            items.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            items.append(text)
    return "{" + ",".join(items) + "}"


def _float(v: float, *, single: bool) -> str:
    """float4out/float8out: the shortest digits that read back as the same value,
    fixed-point for decimal exponents from -4 up to 5 (real) or 14 (double)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    sign, digits, exponent = _shortest(v, single)
    point = exponent + len(digits) - 1  # the decimal exponent of the first digit
    if -4 <= point < (6 if single else 15):
        if point < 0:
            text = "0." + "0" * (-point - 1) + digits
        elif len(digits) <= point + 1:
            text = digits + "0" * (point + 1 - len(digits))
        else:
            text = digits[:point + 1] + "." + digits[point + 1:]
    else:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        text = f"{mantissa}e{'-' if point < 0 else '+'}{abs(point):02d}"
    return ("-" if sign else "") + text


def _shortest(v: float, single: bool) -> tuple[int, str, int]:
    """(sign, digits, exponent) of the shortest decimal that rounds to ``v`` as a
    double, or as a float when ``single``."""
    text = repr(float4(v) if single else v)
    sign, digit_tuple, exponent = Decimal(text).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    assert isinstance(exponent, int)
    exponent += len(digit_tuple) - len(digits)
    return sign, digits, exponent


def float4(v: float) -> float:
    """A ``real`` as PostgreSQL prints it: the shortest decimal that reads back as the
    same 32-bit float (0.1, not the widened 0.10000000149011612)."""
    packed = struct.pack("<f", v)
    for digits in range(1, 10):
        shortest = float(f"{v:.{digits}g}")
        try:
            if struct.pack("<f", shortest) == packed:
                return shortest
        except OverflowError:  # rounded past the largest float4
            continue
    return v


def _numeric(v: Decimal) -> str:
    if v.is_nan():
        return "NaN"
    if v.is_infinite():
        return "Infinity" if v > 0 else "-Infinity"
    if v.is_zero():
        v = v.copy_abs()  # numeric has no negative zero
    return format(v, "f")


def _fraction(microseconds: int) -> str:
    return f".{microseconds:06d}".rstrip("0") if microseconds else ""


def _time(t: dt.time) -> str:
    return f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}{_fraction(t.microsecond)}"


def _timestamp(ts: dt.datetime) -> str:
    text = f"{ts.date().isoformat()} {_time(ts.time())}"
    offset = ts.utcoffset()
    if offset is None:
        return text
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text += f"{sign}{hours:02d}"
    if minutes or secs:
        text += f":{minutes:02d}"
    if secs:
        text += f":{secs:02d}"
    return text


def _interval(d: dt.timedelta) -> str:
    """IntervalStyle postgres: ``1 day 02:03:04.5``, ``-00:01:00``, ``-1 days``. A
    timedelta keeps no months and folds hours into days, so an interval PostgreSQL
    holds as ``26:00:00`` prints here as ``1 day 02:00:00``."""
    total = (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds
    sign = -1 if total < 0 else 1
    days, rest = divmod(abs(total), 86_400_000_000)
    parts = []
    if days:
        parts.append(f"{sign * days} day{'' if sign * days == 1 else 's'}")
    if rest or not days:
        hours, left = divmod(rest, 3_600_000_000)
        minutes, left = divmod(left, 60_000_000)
        seconds, micros = divmod(left, 1_000_000)
        parts.append(f"{'-' if sign < 0 and rest else ''}"
                     f"{hours:02d}:{minutes:02d}:{seconds:02d}{_fraction(micros)}")
    return " ".join(parts)
