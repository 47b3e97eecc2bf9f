"""mzflow's type names (``Result.types``: ``numeric(10,2)``, ``timestamp with time
zone``) as PostgreSQL's type OIDs, sizes and typmods for RowDescription; values in
PostgreSQL's text format (``mzflow.values``); Bind's parameters, from text or binary.

A text parameter stays text: it goes to the statement with its type's name, and the
statement casts it as PostgreSQL's input function would (one parser for literals and
parameters). A binary parameter is decoded here, since its bytes mean nothing as text.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from mzflow.errors import InvalidTextRepresentation, Unsupported
from mzflow.values import pg_text


@dataclass(frozen=True)
class PgType:
    oid: int
    size: int  # typlen: -1 for variable length
    name: str  # the mzflow name a parameter of this OID gets
    array_oid: int = 0


_TYPES: dict[str, PgType] = {
    "boolean": PgType(16, 1, "boolean", 1000),
    "bytea": PgType(17, -1, "bytea", 1001),
    "bigint": PgType(20, 8, "bigint", 1016),
    "smallint": PgType(21, 2, "smallint", 1005),
    "integer": PgType(23, 4, "integer", 1007),
    "text": PgType(25, -1, "text", 1009),

    "oid": PgType(26, 4, "oid", 1028),
    "real": PgType(700, 4, "real", 1021),
    "double precision": PgType(701, 8, "double precision", 1022),
    "character": PgType(1042, -1, "character", 1014),
    "character varying": PgType(1043, -1, "character varying", 1015),
    "date": PgType(1082, 4, "date", 1182),
    "time": PgType(1083, 8, "time", 1183),
    "time without time zone": PgType(1083, 8, "time", 1183),
    "timestamp without time zone": PgType(1114, 8, "timestamp without time zone", 1115),
    "timestamp with time zone": PgType(1184, 8, "timestamp with time zone", 1185),
    "interval": PgType(1186, 16, "interval", 1187),
    "numeric": PgType(1700, -1, "numeric", 1231),
    "uuid": PgType(2950, 16, "uuid", 2951),
    "jsonb": PgType(3802, -1, "jsonb", 3807),
    # Materialize's own: SUBSCRIBE's and AS OF's times.
    "mz_timestamp": PgType(16552, 8, "mz_timestamp", 16553),
}
# The system catalogs' own types, for result columns only (a parameter of one of these
# OIDs is inferred, as before): clients see nspname, relname… as PostgreSQL types them.
_CATALOG_TYPES: dict[str, PgType] = {
    "name": PgType(19, 64, "name", 1003), '"char"': PgType(18, 1, '"char"', 1002),
    "int2vector": PgType(22, -1, "int2vector", 1006), "regproc": PgType(24, 4, "regproc", 1008),
    "xid": PgType(28, 4, "xid", 1011), "oidvector": PgType(30, -1, "oidvector", 1013),
    "pg_node_tree": PgType(194, -1, "pg_node_tree"), "aclitem": PgType(1033, 12, "aclitem", 1034),
    "regclass": PgType(2205, 4, "regclass", 2210), "regtype": PgType(2206, 4, "regtype", 2211),
    "anyarray": PgType(2277, -1, "anyarray"),
}
_ALIASES = {"json": "jsonb", "timestamp": "timestamp without time zone",
            "timestamptz": "timestamp with time zone", "varchar": "character varying",
            "int": "integer", "int4": "integer", "int8": "bigint", "int2": "smallint",
            "float8": "double precision", "float4": "real", "bool": "boolean",
            "decimal": "numeric", "char": "character", "bpchar": "character"}
TEXT = _TYPES["text"]
_BY_OID = {t.oid: t for t in _TYPES.values()}
_ARRAYS = {t.array_oid: t for t in _TYPES.values()}
_SHAPE = re.compile(r"([a-z_ ]+?)\s*(?:\(([\d*]+)(?:\s*,\s*(\d+))?\))?((?:\[\])*)")


@dataclass(frozen=True)
class Column:
    """A RowDescription column's type."""

    oid: int
    size: int
    typmod: int
    type_name: str  # as mzflow printed it, for rendering values


def column_type(type_name: str | None) -> Column:
    """``numeric(10,2)`` → numeric's OID, size -1, typmod (10 << 16 | 2) + 4. A name
    without an OID here (or none: SHOW's columns) is text."""
    if not type_name:
        return Column(TEXT.oid, TEXT.size, -1, "text")
    text = " ".join(type_name.strip().lower().split())
    if (exact := _CATALOG_TYPES.get(text)) is not None:  # '"char"' has no shape
        return Column(exact.oid, exact.size, -1, type_name)
    m = _SHAPE.fullmatch(text)
    if m is None:
        return Column(TEXT.oid, TEXT.size, -1, type_name)
    base, p, s, dims = m.group(1).strip(), m.group(2), m.group(3), m.group(4)
    found = _TYPES.get(_ALIASES.get(base, base)) or _CATALOG_TYPES.get(base)
    if found is None:
        return Column(TEXT.oid, TEXT.size, -1, type_name)
    if dims:
        return Column(found.array_oid, -1, -1, type_name)
    typmod = -1
    if p and p != "*":
        if found.name == "numeric":
            typmod = ((int(p) << 16) | int(s or 0)) + 4
        elif found.name in ("character varying", "character"):
            typmod = int(p) + 4
        elif found.name.startswith(("timestamp", "time")):
            typmod = int(p)
    return Column(found.oid, found.size, typmod, type_name)


def type_name_of(oid: int) -> str | None:
    """A parameter's mzflow type name from its OID; None for 0 (unspecified), unknown
    (705) or an OID mzflow has no type for: the statement infers it."""
    found = _BY_OID.get(oid)
    return found.name if found is not None else None


def oid_of(type_name: str | None) -> int:
    """A described parameter's OID (0 when the statement could not tell)."""
    return column_type(type_name).oid if type_name else 0


def encode_text(value: Any, column: Column) -> bytes | None:
    text = pg_text(value, column.type_name)
    return None if text is None else text.encode("utf-8")


# -- parameters ---------------------------------------------------------------------------

_PG_EPOCH = dt.datetime(2000, 1, 1)
_PG_EPOCH_DATE = dt.date(2000, 1, 1)


def decode_param(raw: bytes | None, fmt: int, oid: int) -> Any:
    """A Bind parameter as the value the statement binds: text stays a str, binary is
    decoded by its OID; an OID without a binary decoder here is refused by name."""
    if raw is None:
        return None
    if fmt == 0:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidTextRepresentation('invalid byte sequence for encoding "UTF8"'
                                            ) from None
    decoder = _BINARY.get(oid)
    if decoder is None:
        name = type_name_of(oid) or f"OID {oid}"
        raise Unsupported(f"binary format for parameters of type {name} is not supported",
                          hint="send the parameter in text format")
    try:
        return decoder(raw)
    except (struct.error, ValueError, OverflowError, UnicodeDecodeError):
        raise InvalidTextRepresentation(
            f"incorrect binary data format in bind parameter of type {type_name_of(oid)}"
        ) from None


def _int(fmt: str) -> Any:
    unpack = struct.Struct(fmt).unpack

    def decode(raw: bytes) -> int:
        return int(unpack(raw)[0])
    return decode


def _float(fmt: str) -> Any:
    unpack = struct.Struct(fmt).unpack

    def decode(raw: bytes) -> float:
        return float(unpack(raw)[0])
    return decode


def _bool(raw: bytes) -> bool:
    if len(raw) != 1:
        raise ValueError("bool")
    return raw != b"\0"


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


def _jsonb(raw: bytes) -> str:
    if not raw or raw[0] != 1:
        raise ValueError("jsonb version")
    return raw[1:].decode("utf-8")


def _date(raw: bytes) -> dt.date:
    (days,) = struct.unpack("!i", raw)
    return _PG_EPOCH_DATE + dt.timedelta(days=days)


def _timestamp(raw: bytes) -> dt.datetime:
    (micros,) = struct.unpack("!q", raw)
    return _PG_EPOCH + dt.timedelta(microseconds=micros)


def _timestamptz(raw: bytes) -> dt.datetime:
    return _timestamp(raw).replace(tzinfo=dt.UTC)


def _interval(raw: bytes) -> dt.timedelta:
    micros, days, months = struct.unpack("!qii", raw)
    if months:
        raise Unsupported("binary interval parameters with months are not supported",
                          hint="send the parameter in text format")
    return dt.timedelta(days=days, microseconds=micros)


def _numeric(raw: bytes) -> Decimal:
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHH", raw)
    if len(raw) != 8 + 2 * ndigits:
        raise ValueError("numeric length")
    if sign == 0xC000:
        return Decimal("NaN")
    if sign == 0xD000:
        return Decimal("Infinity")
    if sign == 0xF000:
        return Decimal("-Infinity")
    if sign not in (0, 0x4000):
        raise ValueError("numeric sign")
    digits = struct.unpack_from(f"!{ndigits}H", raw, 8)
    if any(d > 9999 for d in digits):
        raise ValueError("numeric digit")
    whole = 0
    for d in digits:
        whole = whole * 10_000 + d
    # Exact: an integer and a decimal exponent, brought to the value's display scale.
    exponent = 4 * (weight - ndigits + 1)
    if exponent > -dscale:
        whole, exponent = whole * 10 ** (exponent + dscale), -dscale
    elif exponent < -dscale:
        whole, rest = divmod(whole, 10 ** (-dscale - exponent))
        if rest:
            raise ValueError("numeric digits past its scale")
        exponent = -dscale
    return Decimal((1 if sign == 0x4000 else 0, tuple(map(int, str(whole))), exponent))


_BINARY: dict[int, Any] = {
    16: _bool, 17: bytes, 20: _int("!q"), 21: _int("!h"), 23: _int("!i"), 26: _int("!I"),
    25: _utf8, 1042: _utf8, 1043: _utf8, 19: _utf8, 114: _utf8, 3802: _jsonb,
    700: _float("!f"), 701: _float("!d"), 1082: _date, 1114: _timestamp,
    1184: _timestamptz, 1186: _interval, 1700: _numeric,
    2950: lambda raw: uuid.UUID(bytes=raw),
}
