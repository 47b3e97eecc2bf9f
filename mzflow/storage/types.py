"""SQL column types and their Arrow / Delta / Spark counterparts.

A column's type is stored in the catalog as the name Materialize prints
(``integer``, ``numeric(12,2)``, ``timestamp without time zone``); this module
parses that name once and knows its Arrow type (what delta-rs writes) and its
Spark DDL (what Spark reads). ``jsonb`` is stored as text: Delta has no JSON type.

A computed numeric (``sum``, ``avg``, ``a * b``) is ``numeric`` to PostgreSQL, whose
values carry their own scale; Delta stores one scale per column, so the catalog
types it ``numeric(*,s)`` (any precision, scale ``s``: see ``catalog/exprtypes.py``)
and prints it as ``numeric`` (``catalog/exprtypes.py: display_name``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa

from mzflow.errors import Unsupported
from mzflow.values import float4

# Unconstrained numeric: Materialize allows 39 digits, Spark and Delta 38.
NUMERIC_DEFAULT = (38, 10)


@dataclass(frozen=True)
class SqlType:
    name: str  # canonical catalog name
    arrow: pa.DataType
    spark: str  # Spark SQL DDL type
    max_length: int | None = None  # varchar(n)

    @property
    def is_text(self) -> bool:
        return pa.types.is_string(self.arrow)


_SIMPLE: dict[str, tuple[pa.DataType, str]] = {
    "smallint": (pa.int16(), "smallint"),
    "integer": (pa.int32(), "int"),
    "bigint": (pa.int64(), "bigint"),
    "real": (pa.float32(), "float"),
    "double precision": (pa.float64(), "double"),
    "text": (pa.string(), "string"),
    "character varying": (pa.string(), "string"),
    "character": (pa.string(), "string"),
    "boolean": (pa.bool_(), "boolean"),
    "date": (pa.date32(), "date"),
    "timestamp without time zone": (pa.timestamp("us"), "timestamp_ntz"),
    "timestamp with time zone": (pa.timestamp("us", tz="UTC"), "timestamp"),
    "bytea": (pa.binary(), "binary"),
    "jsonb": (pa.string(), "string"),
}

_ALIASES = {
    "int": "integer", "int4": "integer", "int2": "smallint", "int8": "bigint",
    "float4": "real", "float8": "double precision", "float": "double precision",
    "double": "double precision", "bool": "boolean", "varchar": "character varying",
    "string": "text", "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone", "decimal": "numeric", "json": "jsonb",
}


@lru_cache(maxsize=256)
def parse_type(name: str) -> SqlType:
    text = re.sub(r"\s+", " ", name.strip().lower())
    if text.endswith("[]"):  # array_agg's result, in a maintained view
        element = parse_type(text[:-2])
        return SqlType(f"{element.name}[]", pa.list_(element.arrow), f"array<{element.spark}>")
    m = re.fullmatch(r"([a-z ]+?)\s*(?:\((\d+|\*)(?:\s*,\s*(\d+))?\))?", text)
    if not m:
        raise Unsupported(f"type {name!r} is not supported")
    base, p, s = m.group(1).strip(), m.group(2), m.group(3)
    base = _ALIASES.get(base, base)
    if base == "numeric" and p == "*":
        scale = int(s or 0)
        if scale > NUMERIC_DEFAULT[0]:
            raise Unsupported(f"numeric scale {scale} is outside what Delta stores (0 to 38)")
        return SqlType(f"numeric(*,{scale})", pa.decimal128(NUMERIC_DEFAULT[0], scale),
                       f"decimal({NUMERIC_DEFAULT[0]},{scale})")
    if p == "*":
        raise Unsupported(f"type {name!r} is not supported")
    if base == "numeric":
        precision, scale = (int(p), int(s or 0)) if p else NUMERIC_DEFAULT
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise Unsupported(f"numeric({precision},{scale}) is outside what Delta stores "
                              "(precision 1 to 38, scale 0 to precision)")
        canon = f"numeric({precision},{scale})" if p else "numeric"
        return SqlType(canon, pa.decimal128(precision, scale), f"decimal({precision},{scale})")
    if base not in _SIMPLE:
        raise Unsupported(f"type {name!r} is not supported",)
    arrow, spark = _SIMPLE[base]
    if p and base in ("character varying", "character"):
        return SqlType(f"{base}({p})", arrow, spark, max_length=int(p))
    return SqlType(base, arrow, spark)


def python_values(values: Sequence[object], type_name: str) -> list[object]:
    """Column values for clients: a ``real`` column's floats as :func:`float4` prints."""
    if type_name != "real":
        return list(values)
    return [float4(v) if isinstance(v, float) else v for v in values]


def arrow_schema(columns: list[tuple[str, str, bool]]) -> pa.Schema:
    """``(name, type name, nullable)`` triples → an Arrow schema."""
    return pa.schema([pa.field(n, parse_type(t).arrow, nullable=nullable)
                      for n, t, nullable in columns])


def spark_ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{n}` {parse_type(t).spark}" for n, t in columns)
