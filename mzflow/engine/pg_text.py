"""PostgreSQL's text forms of values, for the in-process evaluator: what a cast to text
and ``concat`` print (each type's output function), and interval input.

``engine/spark/pg_functions.py`` writes the same forms in Spark SQL where Spark can; where it
cannot (a double's shortest digits), it refuses by name.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.engine import arrow_types as at
from mzflow.errors import Unsupported
from mzflow.storage.types import float4


def float_text(v: float, real: bool = False) -> str:
    """float8out/float4out: the shortest digits that read back as the value, in
    positional form for decimal exponents -4 to 14 (-4 to 5 for a real)."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0" if str(v).startswith("-") else "0"
    shortest = repr(float4(v) if real else v)
    sign, digits, exponent = Decimal(shortest).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + int(exponent) - 1  # the leading digit's decimal exponent
    head = "-" if sign else ""
    if -4 <= point < (6 if real else 15):
        if point < 0:
            return f"{head}0.{'0' * (-point - 1)}{text}"
        whole = text[:point + 1].ljust(point + 1, "0")
        frac = text[point + 1:]
        return f"{head}{whole}{'.' + frac if frac else ''}"
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{head}{mantissa}e{'-' if point < 0 else '+'}{abs(point):02d}"


def timestamp_text(v: dt.datetime, zoned: bool) -> str:
    text = v.replace(tzinfo=None).isoformat(sep=" ")
    if "." in text:
        text = text.rstrip("0")
    return text + ("+00" if zoned else "")


def _numeric_text(v: Decimal) -> str:
    return format(v, "f")


def as_text(v: Any, *, cast: bool) -> at.Data:
    """``v`` as text: a cast's (``cast``: booleans are ``true``) or the type's output
    function's (``f``), as concat uses it."""
    if isinstance(v, at.Unknown):
        return pa.scalar(str(v), pa.string())
    k = at._kind(v.type)
    if k == "text":
        return v
    if k == "null":
        return pa.scalar(None, pa.string())
    if k == "int":
        return pc.cast(v, pa.string())
    if k == "bool":
        t, f = ("true", "false") if cast else ("t", "f")
        return pc.if_else(v, pa.scalar(t), pa.scalar(f))
    if pa.types.is_date(v.type):
        return pc.cast(v, pa.string())
    if k == "dec":
        fn: Any = _numeric_text
    elif k == "float":
        real = v.type == pa.float32()
        fn = lambda x: float_text(x, real)  # noqa: E731
    elif pa.types.is_timestamp(v.type):
        zoned = bool(v.type.tz)
        fn = lambda x: timestamp_text(x, zoned)  # noqa: E731
    elif pa.types.is_binary(v.type):
        fn = lambda x: "\\x" + x.hex()  # noqa: E731
    else:
        raise Unsupported(f"EXPECT cannot convert {at._pg(v.type)} to text yet")
    if isinstance(v, pa.Scalar):
        return pa.scalar(None if not v.is_valid else fn(v.as_py()), pa.string())
    return pa.array([None if x is None else fn(x) for x in at._array(v, len(v)).to_pylist()],
                    pa.string())


# -- intervals --------------------------------------------------------------------------

_US = {"microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000,
       "hour": 3_600_000_000}
_UNITS = {
    "microsecond": ("microsecond", "microseconds", "usec", "usecs", "us"),
    "millisecond": ("millisecond", "milliseconds", "msec", "msecs", "ms"),
    "second": ("second", "seconds", "sec", "secs", "s"),
    "minute": ("minute", "minutes", "min", "mins", "m"),
    "hour": ("hour", "hours", "hr", "hrs", "h"),
    "day": ("day", "days", "d"),
    "week": ("week", "weeks", "w"),
    "month": ("month", "months", "mon", "mons"),
    "year": ("year", "years", "yr", "yrs", "y"),
}
_UNIT = {spelling: unit for unit, spellings in _UNITS.items() for spelling in spellings}
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_TIME = re.compile(r"([+-]?)(\d+):(\d\d)(?::(\d\d(?:\.\d*)?))?")


def parse_interval(text: str, unit: str | None = None) -> tuple[int, int, int]:
    """(months, days, microseconds) of PostgreSQL's interval input: ``1 year 2 mons``,
    ``3 days 04:05:06.5``, ``-1.5 hours``; ``unit`` for ``INTERVAL '1' YEAR``. Forms
    outside these (``ago``, ISO 8601, fractional months or years) are Unsupported."""
    words = text.strip().lower().split()
    refused = Unsupported(f"interval '{text}'{' ' + unit if unit else ''} is not supported yet")
    if unit is not None:
        if len(words) != 1 or not re.fullmatch(_NUMBER, words[0]):
            raise refused
        words = [words[0], unit.lower()]
    months = days = micros = 0
    i = 0
    while i < len(words):
        word = words[i]
        time = _TIME.fullmatch(word)
        if time:
            sign = -1 if time.group(1) == "-" else 1
            secs = Decimal(time.group(4) or 0)
            micros += sign * (int(time.group(2)) * 3_600_000_000 + int(time.group(3)) *
                              60_000_000 + int((secs * 1_000_000).to_integral_value()))
            i += 1
            continue
        if not re.fullmatch(_NUMBER, word):
            raise refused
        number = Decimal(word)
        name = _UNIT.get(words[i + 1]) if i + 1 < len(words) else "second"
        if name is None:
            raise refused
        i += 2
        if name in _US:
            micros += int((number * _US[name]).to_integral_value())
        elif name in ("day", "week"):
            whole_days = number * (7 if name == "week" else 1)
            whole = int(whole_days)
            days += whole
            micros += int(((whole_days - whole) * 86_400_000_000).to_integral_value())
        elif number != int(number):
            raise Unsupported(f"interval '{text}' (fractional {name}s) is not supported yet")
        else:
            months += int(number) * (12 if name == "year" else 1)
    return months, days, micros


def add_interval(start: dt.datetime, months: int, days: int, micros: int) -> dt.datetime:
    """``start`` + an interval as PostgreSQL adds one: months (the day clipped to the
    month's end), then days, then time."""
    try:
        years, month = divmod(start.month - 1 + months, 12)
        year = start.year + years
        day = min(start.day, calendar.monthrange(year, month + 1)[1])
        moved = start.replace(year=year, month=month + 1, day=day)
        return moved + dt.timedelta(days=days, microseconds=micros)
    except (ValueError, OverflowError):
        raise Unsupported("EXPECT cannot compute timestamps outside years 1 to 9999 yet"
                          ) from None
