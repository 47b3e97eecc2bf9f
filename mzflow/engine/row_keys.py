"""Row keys in Arrow, byte for byte the keys Spark's ``diffs.key_column`` computes.

Spark names a stored row by ``sha2(to_json(named_struct('c0', v0, …)), 256)`` with
NULL fields kept. An in-process tick must name the same row by the same key, so this
module writes the JSON text that Spark 4's Jackson generator writes for each value:

- integers and booleans as their digits and ``true``/``false``;
- decimals as Java's ``BigDecimal.toString`` at the column's scale (scientific when the
  adjusted exponent is below -6: ``0E-10``, ``1.000E-7``), which is what Arrow's
  decimal-to-string cast writes too;
- strings quoted, escaping only ``"``, ``\\`` and U+0000-U+001F (``\\b \\t \\n \\f \\r``
  short, the rest ``\\u00XX`` in upper case); DEL, U+2028 and non-ASCII stay as they are;
- dates as ``uuuu-MM-dd`` in the proleptic Gregorian calendar: years 0-9999 in four
  digits, later ones with ``+``, earlier ones with ``-`` (``+10000-01-01``, ``-0001-…``);
- timestamps as ``uuuu-MM-dd'T'HH:mm:ss.SSS``, then ``Z`` for ``timestamptz`` (the
  session's time zone is UTC): Spark's JSON keeps milliseconds only, so two timestamps
  that differ below a millisecond get the same key there, and here;
- bytea as padded base64 in quotes; arrays as ``[e0,e1,…]`` of their elements.

``real`` and ``double precision`` are not written here: Java 17's ``Double.toString`` is
not the shortest round-trip form (``1e23`` is ``9.999999999999999E22``, ``2e-323`` is
``2.0E-323``), and Java 19 changed it, so for those the caller keeps Spark.
tests/test_row_keys.py checks all of this against Spark.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mzflow.errors import Unsupported
from mzflow.storage.types import parse_type

# Jackson's short escapes; every other control character is \u00XX.
_SHORT = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_ESCAPES = {chr(code): _SHORT.get(code, f"\\u{code:04X}") for code in range(0x20)}
_CONTROL = r"[\x00-\x1f]"
_DAY_US = 86_400_000_000
# Days since the epoch of 0000-01-01 and 9999-12-31: between them Arrow's own date
# formatting writes what java.time's uuuu-MM-dd writes (checked day by day).
_FOUR_DIGITS = (-719_528, 2_932_896)


def row_keys(table: pa.Table, pg_types: Sequence[str]) -> pa.Array | None:
    """Each row's key (a ``string`` array), or None if a column's type is one whose JSON
    text is not known to match Spark's (the caller then computes the keys in Spark).
    ``table``'s columns are the index's, in order, conformed to the stored types."""
    if table.num_columns != len(pg_types):
        raise ValueError(f"{table.num_columns} columns but {len(pg_types)} types")
    if not pg_types:
        return None
    pieces: list[pa.Array | str] = []
    for i, (column, pg) in enumerate(zip(table.columns, pg_types, strict=True)):
        try:
            expected = parse_type(pg).arrow
        except Unsupported:
            return None
        text = _json(column.combine_chunks(), expected)
        if text is None:
            return None
        pieces += [("{" if i == 0 else ",") + f'"c{i}":', text]
    pieces.append("}")
    if table.num_rows == 0:
        return pa.array([], pa.string())
    return _sha256(pc.binary_join_element_wise(*pieces, ""))


def _json(values: pa.Array, expected: pa.DataType) -> pa.Array | None:
    """Each value's JSON text, "null" for NULL; None if not known to match Spark."""
    if values.type in (pa.string_view(), pa.large_string()):
        values = values.cast(pa.string())
    if values.type != expected:
        return None
    text = _text(values)
    if text is None:
        return None
    return pc.fill_null(text, "null")


def _text(values: pa.Array) -> pa.Array | None:
    t = values.type
    if pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t):
        return values.cast(pa.string())
    if pa.types.is_string(t):
        return _quoted(values)
    if pa.types.is_date32(t):
        days = values.cast(pa.int32()).fill_null(0).to_numpy().astype(np.int64)
        return _masked(_quote(_date(days)), values)
    if pa.types.is_timestamp(t) and t.unit == "us" and t.tz in (None, "UTC"):
        micros = values.cast(pa.int64()).fill_null(0).to_numpy()
        return _masked(_quote(_timestamp(micros, zoned=t.tz is not None)), values)
    if pa.types.is_binary(t):
        return pa.array([None if b is None else '"' + base64.b64encode(b).decode() + '"'
                         for b in values.to_pylist()], pa.string())
    if pa.types.is_list(t):
        return _array(values)
    return None


def _quoted(values: pa.Array) -> pa.Array:
    text = pc.replace_substring(values, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    control = pc.fill_null(pc.match_substring_regex(text, _CONTROL), False)
    if pc.any(control).as_py():  # rare: one pass over those rows per character present
        rows = text.filter(control)
        for char in sorted(set("".join(rows.to_pylist())) & _ESCAPES.keys()):
            rows = pc.replace_substring(rows, char, _ESCAPES[char])
        text = pc.replace_with_mask(text, control, rows)
    return _quote(text)


def _quote(text: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', text, '"', "")


def _array(values: pa.Array) -> pa.Array | None:
    elements = _text(values.values)
    if elements is None:
        return None
    elements = pc.fill_null(elements, "null")
    # A NULL list's offsets still bound its (ignored) elements: keep them as they are.
    lists = pa.ListArray.from_arrays(values.offsets, elements, mask=values.is_null())
    joined = pc.binary_join(lists, ",")
    return pc.binary_join_element_wise("[", joined, "]", "")


def _masked(text: pa.Array, values: pa.Array) -> pa.Array:
    return pc.if_else(values.is_null(), pa.scalar(None, pa.string()), text)


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Days since 1970-01-01 → proleptic Gregorian (year, month, day), exact for any
    int64 a date or timestamp holds (H. Hinnant's civil_from_days)."""
    z = days + 719468
    era = np.floor_divide(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return year, month, day


def _padded(n: np.ndarray, width: int) -> pa.Array:
    return pc.utf8_lpad(pa.array(n).cast(pa.string()), width=width, padding="0")


def _date(days: np.ndarray) -> pa.Array:
    if not len(days) or (days.min() >= _FOUR_DIGITS[0] and days.max() <= _FOUR_DIGITS[1]):
        return pa.array(days.astype(np.int32)).cast(pa.date32()).cast(pa.string())
    year, month, day = _civil(days)
    # java.time's uuuu: four digits at least, a sign when the year is outside 0-9999
    digits = _padded(np.abs(year), 4)
    sign = pa.array(np.where(year < 0, "-", np.where(year > 9999, "+", "")))
    return pc.binary_join_element_wise(sign, digits, "-", _padded(month, 2), "-",
                                       _padded(day, 2), "")


def _timestamp(micros: np.ndarray, zoned: bool) -> pa.Array:
    days = np.floor_divide(micros, _DAY_US)
    of_day = micros - days * _DAY_US
    seconds, fraction = np.divmod(of_day, 1_000_000)
    return pc.binary_join_element_wise(
        _date(days), "T", _padded(seconds // 3600, 2), ":", _padded(seconds // 60 % 60, 2),
        ":", _padded(seconds % 60, 2), ".", _padded(fraction // 1000, 3),
        "Z" if zoned else "", "")


def _sha256(json: pa.Array) -> pa.Array:
    """SHA-256 in lower-case hex of each string's UTF-8 bytes (Spark's sha2)."""
    json = json.cast(pa.string())
    n = len(json)
    offsets = np.frombuffer(json.buffers()[1], np.int32)[json.offset:json.offset + n + 1]
    data = json.buffers()[2].to_pybytes() if json.buffers()[2] is not None else b""
    bounds = offsets.tolist()
    sha256 = hashlib.sha256
    return pa.array([sha256(data[a:b]).hexdigest() for a, b in zip(bounds, bounds[1:],
                                                                    strict=False)],
                    pa.string())
