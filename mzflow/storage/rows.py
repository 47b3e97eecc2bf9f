"""Rows into a table's Arrow schema, or a clear error naming the row and column.

Two entry points: :func:`from_values` for a few Python values (INSERT … VALUES)
and :func:`conform` for a whole Arrow table (COPY, INSERT … SELECT, UPDATE).
Either the whole input converts, or nothing is written.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.errors import Error, InvalidTextRepresentation, TypeMismatch
from mzflow.storage.types import parse_type


class NotNullViolation(Error):
    code = "23502"  # not_null_violation


# PostgreSQL's codes for values a column cannot hold (TypeMismatch says 42804, which
# PostgreSQL reserves for expressions of the wrong type); 22P02 is errors.py's
# InvalidTextRepresentation.
class StringTooLong(TypeMismatch):
    code = "22001"  # string_data_right_truncation


class OutOfRange(TypeMismatch):
    code = "22003"  # numeric_value_out_of_range


class DateTimeOutOfRange(TypeMismatch):
    code = "22008"  # datetime_field_overflow


@dataclass(frozen=True)
class Target:
    """A column of the table being written."""

    name: str
    type: str
    nullable: bool


def _where(row: int, column: str) -> str:
    return f'in row {row}, column "{column}"'


def _convert(value: Any, sql_type: str, arrow: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_integer(arrow):
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, Decimal):  # PostgreSQL's numeric → integer rounds half away
            return int(value.to_integral_value(rounding=ROUND_HALF_UP))
        if isinstance(value, float):  # and float → integer half to even (rint)
            return round(value)
        return int(value) if not isinstance(value, str) else int(value.strip())
    if pa.types.is_decimal(arrow):
        d = Decimal(str(value).strip())
        if not d.is_finite():
            raise ValueError
        # Python's default context holds 28 digits and rounds half to even; a numeric
        # column holds up to 38 and PostgreSQL rounds half away from zero.
        return d.quantize(Decimal(1).scaleb(-arrow.scale), context=_NUMERIC)
    if pa.types.is_floating(arrow):
        return float(value)
    if pa.types.is_boolean(arrow):
        if isinstance(value, bool):
            return value
        return parse_bool(str(value))
    if pa.types.is_string(arrow):
        return value if isinstance(value, str) else _text(value)
    if pa.types.is_binary(arrow):
        return value if isinstance(value, bytes) else bytea(str(value))
    if pa.types.is_date(arrow):
        if isinstance(value, dt.datetime):
            return value.date()
        return value if isinstance(value, dt.date) else parse_timestamp(str(value))[0].date()
    if pa.types.is_timestamp(arrow):
        ts = value if isinstance(value, dt.datetime) else _parse_timestamp(str(value))
        if arrow.tz is None:
            return ts.replace(tzinfo=None) if ts.tzinfo is None else (
                ts.astimezone(dt.UTC).replace(tzinfo=None))
        return ts.replace(tzinfo=dt.UTC) if ts.tzinfo is None else ts.astimezone(dt.UTC)
    raise ValueError


_BOOL = ((True, ("true", "yes", "on", "1")), (False, ("false", "no", "off", "0")))


def parse_bool(text: str) -> bool:
    """PostgreSQL's boolin: any unambiguous prefix of its words, case and surrounding
    white space ignored (``of`` is off; ``o`` is ambiguous). ValueError otherwise."""
    word = text.strip(" \t\n\r\f\v").lower()
    for value, words in _BOOL:
        if word and word != "o" and any(w.startswith(word) for w in words):
            return value
    raise ValueError(text)


_NUMERIC = Context(prec=2 * 38 + 1, rounding=ROUND_HALF_UP)


def bytea(text: str) -> bytes:
    """PostgreSQL's bytea input: ``\\x`` then hex digits, else the escape format
    (``\\\\`` for a backslash, ``\\nnn`` for an octal byte, anything else as UTF-8)."""
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])  # ValueError on a bad digit, as PostgreSQL errors
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
        elif text[i + 1:i + 2] == "\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", text[i + 1:i + 4]):
            out.append(int(text[i + 1:i + 4], 8))
            i += 4
        else:
            raise ValueError(f"invalid input syntax for type bytea: {text!r}")
    return bytes(out)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# PostgreSQL's ISO 8601 forms: one- or two-digit fields, a space or T before the time,
# any fraction of a second (rounded to microseconds), a zone as Z, UTC or an offset.
TIMESTAMP = re.compile(
    r"\s*(\d{4,})-(\d\d?)-(\d\d?)(?:(?:\s+|T)(\d\d?):(\d\d?)(?::(\d\d?)(?:\.(\d*))?)?)?"
    r"\s*(z|utc|gmt|[+-]\d\d?(?::?\d\d)?)?\s*", re.I | re.A)


class OutOfRangeTime(ValueError):
    """A well-formed date or time with a field out of range (PostgreSQL's 22008)."""


def parse_timestamp(text: str) -> tuple[dt.datetime, int | None]:
    """A timestamp in PostgreSQL's ISO forms → (naive datetime, its zone's offset in
    seconds east of UTC or None). ValueError if the text is not one of those forms,
    :class:`OutOfRangeTime` if a field is out of range. 24:00:00 is the next midnight
    and second 60 the next minute, as PostgreSQL reads them."""
    m = TIMESTAMP.fullmatch(text)
    if m is None:
        raise ValueError(text)
    year, month, day, hour, minute, second = (int(g or 0) for g in m.groups()[:6])
    fraction = Decimal("0." + (m.group(7) or "0")).quantize(Decimal("0.000001"))
    try:
        date = dt.date(year, month, day)
        if hour > 24 or minute > 59 or second > 60 or (
                hour == 24 and (minute or second or fraction)):
            raise ValueError
    except ValueError:
        raise OutOfRangeTime(text) from None
    value = dt.datetime.combine(date, dt.time()) + dt.timedelta(
        hours=hour, minutes=minute, seconds=second, microseconds=int(fraction * 1_000_000))
    zone = (m.group(8) or "").lower()
    if zone in ("", ):
        return value, None
    if zone in ("z", "utc", "gmt"):
        return value, 0
    digits = zone[1:].replace(":", "")
    hours, minutes = (int(digits[:-2]), int(digits[-2:])) if len(digits) > 2 else (
        int(digits), 0)
    return value, (-1 if zone[0] == "-" else 1) * (hours * 3600 + minutes * 60)


def _parse_timestamp(text: str) -> dt.datetime:
    value, offset = parse_timestamp(text)
    return value if offset is None else value.replace(
        tzinfo=dt.timezone(dt.timedelta(seconds=offset)))


def from_values(rows: Sequence[Sequence[Any]], targets: Sequence[Target]) -> pa.Table:
    """Python rows (one value per target) → an Arrow table in the targets' schema."""
    arrays = []
    for j, target in enumerate(targets):
        arrow = parse_type(target.type).arrow
        out = []
        for i, row in enumerate(rows, start=1):
            value = row[j]
            try:
                converted = _convert(value, target.type, arrow)
            except OutOfRangeTime:
                raise DateTimeOutOfRange(f'date/time field value out of range: "{value}"',
                                         detail=_where(i, target.name)) from None
            except (ValueError, TypeError, InvalidOperation, OverflowError):
                raise InvalidTextRepresentation(
                    f'invalid input syntax for type {target.type}: "{value}"',
                                   detail=_where(i, target.name)) from None
            limit = parse_type(target.type).max_length
            if limit is not None and isinstance(converted, str) and len(converted) > limit:
                raise StringTooLong(f"value too long for type {target.type}",
                                   detail=_where(i, target.name))
            if converted is None and not target.nullable:
                raise NotNullViolation(
                    f'null value in column "{target.name}" violates not-null constraint',
                    detail=_where(i, target.name))
            out.append(converted)
        try:
            arrays.append(pa.array(out, type=arrow))
        except (pa.ArrowInvalid, OverflowError) as e:
            bad = _first_bad(out, arrow)
            raise OutOfRange(_out_of_range(rows[bad - 1][j], target.type, arrow, e),
                             detail=_where(bad, target.name)) from None
    schema = pa.schema([pa.field(t.name, parse_type(t.type).arrow, nullable=t.nullable)
                        for t in targets])
    return pa.Table.from_arrays(arrays, schema=schema)


def _out_of_range(value: Any, type_name: str, arrow: pa.DataType, e: Exception) -> str:
    """PostgreSQL's words: a number cast to a narrower integer is ``integer out of
    range``, a text is ``value "…" is out of range for type integer`` (Arrow's own said
    ``Value … too large to fit in C integer type``)."""
    if pa.types.is_decimal(arrow):
        return "numeric field overflow"
    if pa.types.is_integer(arrow):
        if isinstance(value, str):
            return f'value "{value.strip()}" is out of range for type {type_name}'
        return f"{type_name} out of range"
    return f"value out of range for type {type_name}: {e}"


def _first_bad(values: list[Any], arrow: pa.DataType) -> int:
    for i, v in enumerate(values, start=1):
        try:
            pa.array([v], type=arrow)
        except (pa.ArrowInvalid, OverflowError):
            return i
    return 1


def conform(table: pa.Table, targets: Sequence[Target], *, first_row: int = 1) -> pa.Table:
    """Cast ``table`` (same column order as ``targets``) to the targets' types, safely."""
    if table.num_columns != len(targets):
        raise TypeMismatch(f"expected {len(targets)} columns, found {table.num_columns}")
    arrays = []
    for j, target in enumerate(targets):
        arrow = parse_type(target.type).arrow
        column = table.column(j)
        if (pa.types.is_decimal(arrow) and pa.types.is_decimal(column.type)
                and column.type.scale > arrow.scale):
            # PostgreSQL rounds a numeric assigned to a column of smaller scale, half
            # away from zero (1/8.0 into numeric(10,2) is 0.13); the cast below still
            # refuses what then overflows the precision.
            column = pc.round(column, arrow.scale, round_mode="half_towards_infinity")
        if column.type != arrow:
            try:
                column = pc.cast(column, arrow, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                # Slow path only to name the offending row.
                values = column.to_pylist()
                from_values([[v] for v in values], [target])
                raise TypeMismatch(f"cannot convert {table.column(j).type} to {target.type}",
                                   detail=f'column "{target.name}"') from None
        limit = parse_type(target.type).max_length
        if limit is not None and len(column) and pa.types.is_string(column.type):
            lengths = pc.utf8_length(column)
            longest = pc.max(lengths).as_py()
            if longest is not None and longest > limit:
                row = pc.index(pc.greater(lengths, limit), True).as_py() + first_row
                raise StringTooLong(f"value too long for type {target.type}",
                                   detail=_where(row, target.name))
        if not target.nullable and column.null_count:
            nulls = pc.is_null(column)
            row = pc.index(nulls, True).as_py() + first_row
            raise NotNullViolation(
                f'null value in column "{target.name}" violates not-null constraint',
                detail=_where(row, target.name))
        arrays.append(column)
    schema = pa.schema([pa.field(t.name, parse_type(t.type).arrow, nullable=t.nullable)
                        for t in targets])
    return pa.Table.from_arrays(arrays, schema=schema)


def plain_type(t: pa.DataType) -> pa.DataType:
    """``t``, a view or large string or binary, as its plain type (see plain_strings)."""
    if t in (pa.string_view(), pa.large_string()):
        return pa.string()
    return pa.binary() if t == pa.binary_view() else t


def plain_strings(table: pa.Table) -> pa.Table:
    """Strings (and binaries) as ``string`` (``binary``). A Parquet file read back may
    give ``string_view`` (delta-rs writes what it is handed; Spark's Arrow, some pyarrow
    readers hand views), which neither concatenates with ``string`` nor sorts or takes
    (pyarrow 26): every Arrow reader of stored files that combines them goes through
    here."""
    if all(plain_type(f.type) == f.type for f in table.schema):
        return table
    return table.cast(pa.schema([f.with_type(plain_type(f.type)) for f in table.schema]))
