"""PostgreSQL's types as clients see them: OIDs, typmods and ``format_type``'s names.

The facts are PostgreSQL 15's (``tests/test_pg_catalog.py`` checks them against a
real server): each base type as ``pg_type`` describes it, its array type derived
as PostgreSQL derives it. An mzflow type name (``numeric(10,2)``, ``timestamp with
time zone``, ``oid``, ``text[]``…) maps to an (OID, typmod) pair by :func:`oid_of`,
which the system catalogs (pg_attribute) and the wire protocol's RowDescription use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PG_CATALOG_OID = 11
DEFAULT_COLLATION = 100


# Types without a binary form (no receive and send functions).
_TEXT_ONLY = ("aclitem", "anyelement", "trigger", "event_trigger", "language_handler",
              "internal")


@dataclass(frozen=True)
class PgType:
    oid: int
    name: str
    len: int
    byval: bool
    type: str  # b base, p pseudo
    category: str
    preferred: bool
    elem: int
    array: int
    input: str  # its input function; output, receive and send follow its pattern
    modin: str
    subscript: str
    align: str
    storage: str
    collation: int

    @property
    def output(self) -> str:
        return self.input[:-2] + "out"

    @property
    def receive(self) -> str:
        return "-" if self.name in _TEXT_ONLY else self.input[:-2] + "recv"

    @property
    def send(self) -> str:
        return "-" if self.name in _TEXT_ONLY else self.input[:-2] + "send"

    @property
    def modout(self) -> str:
        return self.modin.replace("typmodin", "typmodout")


_BASE = [PgType(*row) for row in (
    (16, "bool", 1, True, "b", "B", True, 0, 1000, "boolin", "-", "-", "c", "p", 0),
    (17, "bytea", -1, False, "b", "U", False, 0, 1001, "byteain", "-", "-", "i", "x", 0),
    (18, "char", 1, True, "b", "Z", False, 0, 1002, "charin", "-", "-", "c", "p", 0),
    (19, "name", 64, False, "b", "S", False, 18, 1003, "namein", "-",
     "raw_array_subscript_handler", "c", "p", 950),
    (20, "int8", 8, True, "b", "N", False, 0, 1016, "int8in", "-", "-", "d", "p", 0),
    (21, "int2", 2, True, "b", "N", False, 0, 1005, "int2in", "-", "-", "s", "p", 0),
    (22, "int2vector", -1, False, "b", "A", False, 21, 1006, "int2vectorin", "-",
     "array_subscript_handler", "i", "p", 0),
    (23, "int4", 4, True, "b", "N", False, 0, 1007, "int4in", "-", "-", "i", "p", 0),
    (24, "regproc", 4, True, "b", "N", False, 0, 1008, "regprocin", "-", "-", "i", "p", 0),
    (25, "text", -1, False, "b", "S", True, 0, 1009, "textin", "-", "-", "i", "x", 100),
    (26, "oid", 4, True, "b", "N", True, 0, 1028, "oidin", "-", "-", "i", "p", 0),
    (28, "xid", 4, True, "b", "U", False, 0, 1011, "xidin", "-", "-", "i", "p", 0),
    (30, "oidvector", -1, False, "b", "A", False, 26, 1013, "oidvectorin", "-",
     "array_subscript_handler", "i", "p", 0),
    (114, "json", -1, False, "b", "U", False, 0, 199, "json_in", "-", "-", "i", "x", 0),
    (194, "pg_node_tree", -1, False, "b", "Z", False, 0, 0, "pg_node_tree_in", "-", "-",
     "i", "x", 100),
    (700, "float4", 4, True, "b", "N", False, 0, 1021, "float4in", "-", "-", "i", "p", 0),
    (701, "float8", 8, True, "b", "N", True, 0, 1022, "float8in", "-", "-", "d", "p", 0),
    (705, "unknown", -2, False, "p", "X", False, 0, 0, "unknownin", "-", "-", "c", "p", 0),
    (1033, "aclitem", 12, False, "b", "U", False, 0, 1034, "aclitemin", "-", "-", "i", "p",
     0),
    (1042, "bpchar", -1, False, "b", "S", False, 0, 1014, "bpcharin", "bpchartypmodin", "-",
     "i", "x", 100),
    (1043, "varchar", -1, False, "b", "S", False, 0, 1015, "varcharin", "varchartypmodin",
     "-", "i", "x", 100),
    (1082, "date", 4, True, "b", "D", False, 0, 1182, "date_in", "-", "-", "i", "p", 0),
    (1083, "time", 8, True, "b", "D", False, 0, 1183, "time_in", "timetypmodin", "-", "d",
     "p", 0),
    (1114, "timestamp", 8, True, "b", "D", False, 0, 1115, "timestamp_in",
     "timestamptypmodin", "-", "d", "p", 0),
    (1184, "timestamptz", 8, True, "b", "D", True, 0, 1185, "timestamptz_in",
     "timestamptztypmodin", "-", "d", "p", 0),
    (1186, "interval", 16, False, "b", "T", True, 0, 1187, "interval_in", "intervaltypmodin",
     "-", "d", "p", 0),
    (1266, "timetz", 12, False, "b", "D", False, 0, 1270, "timetz_in", "timetztypmodin", "-",
     "d", "p", 0),
    (1700, "numeric", -1, False, "b", "N", False, 0, 1231, "numeric_in", "numerictypmodin",
     "-", "i", "m", 0),
    (2205, "regclass", 4, True, "b", "N", False, 0, 2210, "regclassin", "-", "-", "i", "p",
     0),
    (2206, "regtype", 4, True, "b", "N", False, 0, 2211, "regtypein", "-", "-", "i", "p", 0),
    (2249, "record", -1, False, "p", "P", False, 0, 2287, "record_in", "-", "-", "d", "x", 0),
    (2275, "cstring", -2, False, "p", "P", False, 0, 1263, "cstring_in", "-", "-", "c", "p",
     0),
    (2277, "anyarray", -1, False, "p", "P", False, 0, 0, "anyarray_in", "-", "-", "d", "x",
     0),
    (2278, "void", 4, True, "p", "P", False, 0, 0, "void_in", "-", "-", "i", "p", 0),
    (2279, "trigger", 4, True, "p", "P", False, 0, 0, "trigger_in", "-", "-", "i", "p", 0),
    (2280, "language_handler", 4, True, "p", "P", False, 0, 0, "language_handler_in", "-",
     "-", "i", "p", 0),
    (2281, "internal", 8, True, "p", "P", False, 0, 0, "internal_in", "-", "-", "d", "p", 0),
    (2283, "anyelement", 4, True, "p", "P", False, 0, 0, "anyelement_in", "-", "-", "i",
     "p", 0),
    (3838, "event_trigger", 4, True, "p", "P", False, 0, 0, "event_trigger_in", "-", "-",
     "i", "p", 0),
    (2950, "uuid", 16, False, "b", "U", False, 0, 2951, "uuid_in", "-", "-", "c", "p", 0),
    (3802, "jsonb", -1, False, "b", "U", False, 0, 3807, "jsonb_in", "-",
     "jsonb_subscript_handler", "i", "x", 0),
    (4089, "regnamespace", 4, True, "b", "N", False, 0, 4090, "regnamespacein", "-", "-",
     "i", "p", 0),
    (4096, "regrole", 4, True, "b", "N", False, 0, 4097, "regrolein", "-", "-", "i", "p", 0),
)]


def _array_of(base: PgType) -> PgType:
    return PgType(base.array, f"_{base.name}", -1, False, "b", "A", False, base.oid, 0,
                  "array_in", base.modin, "array_subscript_handler",
                  "d" if base.align == "d" else "i", "x", base.collation)


TYPES: tuple[PgType, ...] = tuple(_BASE) + tuple(
    _array_of(t) for t in _BASE if t.array and t.type != "p")
BY_OID = {t.oid: t for t in TYPES}
BY_NAME = {t.name: t for t in TYPES}

# format_type's names where they are not the pg_type name.
_SQL_NAMES = {
    "bool": "boolean", "int8": "bigint", "int2": "smallint", "int4": "integer",
    "float4": "real", "float8": "double precision", "bpchar": "character",
    "varchar": "character varying", "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone", "time": "time without time zone",
    "timetz": "time with time zone", "char": '"char"',
}
# mzflow's type names (and their aliases) → pg_type names.
_ALIASES = {v: k for k, v in _SQL_NAMES.items()} | {
    "int": "int4", "numeric": "numeric", "decimal": "numeric", "double": "float8",
    "char": "bpchar", "character": "bpchar", "string": "text", "unknown": "text",
}
_WITH_PRECISION = {"timestamp", "timestamptz", "time", "timetz", "interval"}


def format_type(oid: int | None, typmod: int | None) -> str | None:
    """PostgreSQL's ``format_type(oid, typmod)``."""
    if oid is None:
        return None
    t = BY_OID.get(oid)
    if t is None:
        return "???"
    if t.category == "A" and t.elem and t.name.startswith("_"):
        inner = format_type(t.elem, typmod)
        return f"{inner}[]"
    name = _SQL_NAMES.get(t.name, t.name)
    mod = typmod if typmod is not None and typmod >= 0 else None
    if mod is None:
        return name
    if t.name == "numeric" and mod >= 4:
        mod -= 4
        return f"numeric({mod >> 16},{mod & 0xFFFF})"
    if t.name in ("varchar", "bpchar") and mod >= 4:
        return f"{name}({mod - 4})"
    if t.name in _WITH_PRECISION and t.name != "interval":
        words = name.split(" ", 1)
        return f"{words[0]}({mod})" + (f" {words[1]}" if len(words) > 1 else "")
    return name


_MODS = re.compile(r"^(.*?)\s*\(([^)]*)\)\s*(.*)$")


def oid_of(type_text: str) -> tuple[int, int]:
    """(type OID, typmod) of an mzflow type name; unknown names read as text."""
    t = type_text.strip().lower()
    if t.endswith("[]"):
        inner, _ = oid_of(t[:-2])
        base = BY_OID.get(inner)
        return (base.array if base is not None and base.array else 1009), -1
    mods: list[str] = []
    m = _MODS.match(t)
    if m:
        t = f"{m.group(1)} {m.group(3)}".strip()
        mods = [p.strip() for p in m.group(2).split(",")]
    # "char" quoted is PostgreSQL's one-byte type; char unquoted is character(1).
    name = "char" if t == '"char"' else _ALIASES.get(t, t)
    found = BY_NAME.get(name)
    if found is None:
        return 25, -1
    return found.oid, _typmod(found.name, mods)


def _typmod(name: str, mods: list[str]) -> int:
    if not mods or any(not p.isdigit() for p in mods):
        return -1  # numeric(*,2): any precision, which PostgreSQL cannot say
    if name == "numeric":
        precision, scale = int(mods[0]), int(mods[1]) if len(mods) > 1 else 0
        return ((precision << 16) | scale) + 4
    if name in ("varchar", "bpchar"):
        return int(mods[0]) + 4
    return int(mods[0])


def type_name(oid: int) -> str | None:
    """The ``pg_type`` name of an OID (regtype's input's inverse, qualified never)."""
    t = BY_OID.get(oid)
    return None if t is None else format_type(oid, None)
