"""Durations: written in SQL options (``RETAIN HISTORY FOR '1 hour'``) → milliseconds;
interval literals (a ``generate_series`` step) → PostgreSQL's three interval parts."""

from __future__ import annotations

import re

from mzflow.errors import InvalidOption

_UNITS_MS = {
    "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000, "secs": 1000,
    "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000, "mins": 60_000,
    "h": 3_600_000, "hr": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "hrs": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}


def to_ms(text: str) -> int:
    """``'1h'``, ``'90 minutes'``, ``'1 day 2 hours'`` → milliseconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text.strip().lower())
    rebuilt = "".join(f"{n}{u}" for n, u in parts)
    if not parts or rebuilt != re.sub(r"\s+", "", text.strip().lower()):
        raise InvalidOption(f'invalid interval "{text}"',
                            hint="write it like '1h', '30 minutes' or '2 days'")
    total = 0.0
    for number, unit in parts:
        if unit not in _UNITS_MS:
            raise InvalidOption(f'invalid interval "{text}": unknown unit "{unit}"')
        total += float(number) * _UNITS_MS[unit]
    return int(total)


# PostgreSQL's interval input: a unit → (months, days, microseconds) per one of it.
_MONTHS = {"year": 12, "years": 12, "y": 12, "yr": 12, "yrs": 12, "decade": 120,
           "decades": 120, "century": 1200, "centuries": 1200, "millennium": 12000,
           "millennia": 12000, "month": 1, "months": 1, "mon": 1, "mons": 1}
_DAYS = {"week": 7, "weeks": 7, "w": 7, "day": 1, "days": 1, "d": 1}
_MICROS = {"hour": 3_600_000_000, "hours": 3_600_000_000, "h": 3_600_000_000,
           "hr": 3_600_000_000, "hrs": 3_600_000_000, "minute": 60_000_000,
           "minutes": 60_000_000, "m": 60_000_000, "min": 60_000_000, "mins": 60_000_000,
           "second": 1_000_000, "seconds": 1_000_000, "s": 1_000_000, "sec": 1_000_000,
           "secs": 1_000_000, "millisecond": 1000, "milliseconds": 1000, "ms": 1000,
           "msec": 1000, "msecs": 1000, "microsecond": 1, "microseconds": 1, "us": 1,
           "usec": 1, "usecs": 1}
_TOKEN = re.compile(r"\s*(?:(?P<clock>[+-]?\d+:\d{1,2}(?::\d{1,2}(?:\.\d{1,6})?)?)"
                    r"|(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))\s*(?P<unit>[a-z]+)?|(?P<word>@|ago))",
                    re.I)


def parse_interval(text: str, unit: str | None = None) -> tuple[int, int, int]:
    """An interval literal as PostgreSQL reads it → (months, days, microseconds), the
    three parts PostgreSQL keeps apart (a month is not a fixed number of days). Covers
    ``'1 day 2 hours'``, ``'-1 month'``, ``'01:30:00'``, ``'1 day 01:30'``, ``'@ 1 hour
    ago'`` and ``INTERVAL '2' DAY``; fractions of days and smaller units; other forms
    raise :class:`ValueError`."""
    months = days = micros = 0
    pos, seen, bare = 0, False, 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(text)
        pos = m.end()
        if m.group("word"):
            if m.group("word").lower() == "ago":
                months, days, micros = -months, -days, -micros
            continue
        seen = True
        if m.group("clock"):
            clock = m.group("clock")
            sign = -1 if clock.startswith("-") else 1
            parts = clock.lstrip("+-").split(":")
            seconds = float(parts[2]) if len(parts) > 2 else 0.0
            micros += sign * (int(parts[0]) * 3_600_000_000 + int(parts[1]) * 60_000_000
                              + round(seconds * 1_000_000))
            continue
        number = m.group("number")
        bare += m.group("unit") is None
        name = (m.group("unit") or unit or "second").lower()
        if name in _MONTHS:
            if "." in number:
                raise ValueError(text)  # fractional months become days: not needed yet
            months += int(number) * _MONTHS[name]
        elif name in _DAYS:
            whole = float(number) * _DAYS[name]
            days += int(whole)
            micros += round((whole - int(whole)) * 86_400_000_000)
        elif name in _MICROS:
            micros += round(float(number) * _MICROS[name])
        else:
            raise ValueError(text)
    if not seen or bare > 1:  # '1-2' is a year and two months, not two numbers
        raise ValueError(text)
    return months, days, micros
