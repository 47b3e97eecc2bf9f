"""PostgreSQL's ``to_char(timestamp, template)``: the template read as PostgreSQL reads
it, for both engines (``arrow_functions`` formats values in process, ``spark/pg_time``
writes Spark SQL for each piece).

The template's keywords are matched case-sensitively at each position against
PostgreSQL's own table (``formatting.c: DCH_keywords``, longest first), so ``Mi`` is
a literal ``M`` then the ISO year's last digit ``i``. Keywords outside the supported
set, and the TH/SP/TM modifiers, are refused by name rather than printed wrongly.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache

from mzflow.errors import Unsupported

# Every keyword of PostgreSQL's table, longest first within a letter, as it matches.
_ALL = [
    "A.D.", "A.M.", "AD", "AM", "B.C.", "BC", "CC", "DAY", "DDD", "DD", "DY", "Day", "Dy",
    "D", "FF1", "FF2", "FF3", "FF4", "FF5", "FF6", "FX", "HH24", "HH12", "HH", "IDDD", "ID",
    "IW", "IYYY", "IYY", "IY", "I", "J", "MI", "MM", "MONTH", "MON", "MS", "Month", "Mon",
    "OF", "P.M.", "PM", "Q", "RM", "SSSSS", "SSSS", "SS", "TZH", "TZM", "TZ", "US", "WW",
    "W", "Y,YYY", "YYYY", "YYY", "YY", "Y", "a.d.", "a.m.", "ad", "am", "b.c.", "bc", "cc",
    "day", "ddd", "dd", "dy", "d", "ff1", "ff2", "ff3", "ff4", "ff5", "ff6", "fx", "hh24",
    "hh12", "hh", "iddd", "id", "iw", "iyyy", "iyy", "iy", "i", "j", "mi", "mm", "month",
    "mon", "ms", "of", "p.m.", "pm", "q", "rm", "sssss", "ssss", "ss", "tzh", "tzm", "tz",
    "us", "ww", "w", "y,yyy", "yyyy", "yyy", "yy", "y",
]
_KEYWORDS = sorted(_ALL, key=len, reverse=True)
# Keywords whose value is a number: FM drops their padding.
NUMBERS = {"YYYY", "YYY", "YY", "Y", "MM", "DD", "DDD", "D", "ID", "HH24", "HH12", "HH", "MI",
           "SS", "MS", "US", "Q", "SSSS", "SSSSS", "CC", "FF1", "FF2", "FF3", "FF4", "FF5",
           "FF6", "Y,YYY"}
_NAMES = {"MONTH", "MON", "DAY", "DY"}
_MERIDIEM = {"AM", "PM", "A.M.", "P.M."}
SUPPORTED = NUMBERS | _NAMES | _MERIDIEM | {"TZ", "OF", "FX"}


@dataclass(frozen=True)
class Piece:
    """A keyword (``key``: its upper-case spelling, ``text``: as written) or literal text
    (``key`` None)."""

    text: str
    key: str | None = None
    fill: bool = False  # FM: no padding


@lru_cache(maxsize=256)
def parse(template: str) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    literal: list[str] = []
    i, n, fill = 0, len(template), False

    def flush() -> None:
        if literal:
            pieces.append(Piece("".join(literal)))
            literal.clear()

    while i < n:
        if template.startswith(("FM", "fm"), i):
            fill, i = True, i + 2
            continue
        if template.startswith(("TM", "tm"), i):
            raise Unsupported("to_char's TM modifier is not supported yet")
        if template[i] == '"':
            j = i + 1
            while j < n and template[j] != '"':
                if template[j] == "\\" and j + 1 < n:
                    j += 1
                literal.append(template[j])
                j += 1
            i, fill = j + 1, False
            continue
        if template[i] == "\\":
            raise Unsupported("to_char templates with backslashes are not supported yet")
        key = next((k for k in _KEYWORDS if template.startswith(k, i)), None)
        if key is None:
            literal.append(template[i])
            i += 1
            fill = False
            continue
        upper = key.upper()
        if upper not in SUPPORTED:
            raise Unsupported(f'to_char pattern "{key}" is not supported yet')
        i += len(key)
        if template.startswith(("TH", "th", "SP", "sp"), i) and upper in NUMBERS:
            raise Unsupported(f"to_char's {template[i:i + 2]} suffix is not supported yet")
        flush()
        if upper != "FX":
            pieces.append(Piece(key, upper, fill))
        fill = False
    flush()
    return tuple(pieces)


_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def number(key: str, t: dt.datetime) -> tuple[int, int]:
    """A numeric keyword's value and its width without FM."""
    hour12 = t.hour % 12 or 12
    values = {
        "YYYY": (t.year, 4), "YYY": (t.year % 1000, 3), "YY": (t.year % 100, 2),
        "Y": (t.year % 10, 1), "Y,YYY": (t.year, 0), "MM": (t.month, 2), "DD": (t.day, 2),
        "DDD": (t.timetuple().tm_yday, 3), "D": (t.isoweekday() % 7 + 1, 1),
        "ID": (t.isoweekday(), 1), "HH24": (t.hour, 2), "HH12": (hour12, 2),
        "HH": (hour12, 2), "MI": (t.minute, 2), "SS": (t.second, 2),
        "MS": (t.microsecond // 1000, 3), "US": (t.microsecond, 6),
        "Q": ((t.month - 1) // 3 + 1, 1), "SSSS": (t.hour * 3600 + t.minute * 60 + t.second, 0),
        "CC": ((t.year - 1) // 100 + 1, 2),
    }
    values["SSSSS"] = values["SSSS"]
    for digits in range(1, 7):
        values[f"FF{digits}"] = (t.microsecond // 10 ** (6 - digits), digits)
    return values[key]


def format_value(pieces: tuple[Piece, ...], t: dt.datetime, zoned: bool) -> str:
    """One timestamp (UTC for a timestamptz: the session's zone) as the template says."""
    out: list[str] = []
    for p in pieces:
        key = p.key
        if key is None:
            out.append(p.text)
        elif key == "Y,YYY":
            out.append(f"{t.year // 1000},{t.year % 1000:03d}")
        elif key in NUMBERS:
            value, width = number(key, t)
            # MS, US and FFn keep their digits under FM, as PostgreSQL prints them.
            pad = width if not p.fill or key in ("MS", "US") or key.startswith("FF") else 0
            out.append(f"{value:0{pad}d}")
        elif key in _NAMES:
            full = (_MONTHS[t.month - 1] if key.startswith("MON") else _DAYS[t.weekday()])
            name = full[:3] if key in ("MON", "DY") else full
            if key in ("MONTH", "DAY") and not p.fill:
                name = name.ljust(9)
            out.append(_case(name, p.text))
        elif key in _MERIDIEM:
            word = ("PM" if t.hour >= 12 else "AM")
            if "." in key:
                word = f"{word[0]}.{word[1]}."
            out.append(word if p.text[0].isupper() else word.lower())
        elif key == "TZ":
            out.append(("UTC" if p.text == "TZ" else "utc") if zoned else "")
        elif key == "OF":
            out.append("+00")
    return "".join(out)


def _case(name: str, written: str) -> str:
    """Month/MONTH/month: as the keyword is written."""
    if written.isupper():
        return name.upper()
    return name.lower() if written.islower() else name
