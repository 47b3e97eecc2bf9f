"""Durations written in SQL options (``RETAIN HISTORY FOR '1 hour'``) → milliseconds."""

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
