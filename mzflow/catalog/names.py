"""Which object a name means, as Materialize resolves names.

A name is ``item``, ``schema.item`` or ``database.schema.item``; the one database is
``materialize``. A qualified name must name a schema that exists. An unqualified one
is looked up in the system schemas ``mz_catalog`` and ``pg_catalog`` first (for system
relations), then in each schema of the session's ``search_path`` that exists, in order.
A new object goes into the first schema of ``search_path`` that exists (``current_schema``);
none at all is Materialize's "no schema has been selected to create in".

The session sets the search path around each statement it runs (:func:`using`), so the
DDL functions, the binder and the writers read it here instead of each taking it as an
argument; code outside a session (a tick, a DAG task) sees the default, ``public``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlglot import exp

from mzflow.catalog.model import DATABASE, SCHEMA, Item, Snapshot
from mzflow.errors import ReadOnlySchema, UnknownDatabase, UnknownObject, UnknownSchema

_SEARCH_PATH: ContextVar[tuple[str, ...]] = ContextVar("mzflow_search_path",
                                                        default=(SCHEMA,))

# The schemas only the system writes, with the ids Materialize gives them (its
# schemas.slt) and their pg_namespace OIDs (pg_catalog's is PostgreSQL's).
SYSTEM_SCHEMAS: dict[str, tuple[str, int]] = {
    "mz_catalog": ("s1", 16),
    "pg_catalog": ("s2", 11),
    "mz_internal": ("s4", 17),
    "information_schema": ("s5", 18),
}
# Searched before the search path for an unqualified name (current_schemas(true)).
IMPLICIT = ("mz_catalog", "pg_catalog")
DATABASE_ID = "u1"
DATABASE_OID = 16384  # pg_database's OID for materialize

Ref = exp.Table | str
_PLAIN = re.compile(r"[a-z_][a-z0-9_$]*")


@contextmanager
def using(path: tuple[str, ...]) -> Iterator[None]:
    """Resolve names by ``path`` (a session's search_path) inside the block."""
    token = _SEARCH_PATH.set(tuple(path))
    try:
        yield
    finally:
        _SEARCH_PATH.reset(token)


def search_path() -> tuple[str, ...]:
    return _SEARCH_PATH.get()


def split(ref: Ref) -> tuple[str | None, str | None, str]:
    """(database, schema, item) of a name; None for the parts not written. A text name
    (from the CLI or an API call) is split on dots: ``s.t``, ``materialize.s.t``."""
    if isinstance(ref, exp.Table):
        return ref.catalog or None, ref.db or None, ref.name
    parts = ref.split(".")
    if len(parts) > 3:
        raise UnknownObject(f"unknown catalog item '{ref}'")
    padded: list[str | None] = [None] * (3 - len(parts)) + list(parts)
    return padded[0], padded[1], str(padded[2])


def quote_ident(name: str) -> str:
    """``name`` as PostgreSQL's quote_ident writes it: quoted unless it is a plain
    lower-case identifier."""
    if _PLAIN.fullmatch(name):
        return name
    return '"' + name.replace('"', '""') + '"'


def format_path(schemas: list[str]) -> str:
    """search_path's text, as SHOW prints it: ``"ba r", foo``."""
    return ", ".join(quote_ident(s) for s in schemas)


def parse_path(text: str) -> tuple[str, ...]:
    """:func:`format_path`'s inverse."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        if text[i] == '"':
            j, part = i + 1, []
            while j < n:
                if text[j] == '"' and text[j + 1:j + 2] == '"':
                    part.append('"')
                    j += 2
                elif text[j] == '"':
                    break
                else:
                    part.append(text[j])
                    j += 1
            out.append("".join(part))
            i = j + 1
        else:
            j = text.find(",", i)
            j = n if j < 0 else j
            out.append(text[i:j].strip())
            i = j
    return tuple(out)


def written(ref: Ref) -> str:
    """The name as the statement wrote it, for messages."""
    db, schema, name = split(ref)
    return ".".join(p for p in (db, schema, name) if p)


def exists(snap: Snapshot, schema: str) -> bool:
    return schema in SYSTEM_SCHEMAS or snap.schema_named(schema) is not None


def require_schema(snap: Snapshot, database: str | None, schema: str) -> str:
    if database not in (None, DATABASE):
        raise UnknownDatabase(f"unknown database '{database}'")
    if not exists(snap, schema):
        raise UnknownSchema(f"unknown schema '{schema}'")
    return schema


def lookup_order(snap: Snapshot) -> list[str]:
    """Where an unqualified name is looked for, in order."""
    return current_schemas(snap, implicit=True)


def find(snap: Snapshot, ref: Ref) -> Item | None:
    """The user item ``ref`` names, or None (its schema, if written, must exist)."""
    db, schema, name = split(ref)
    if schema is not None:
        return snap.find(name, require_schema(snap, db, schema))
    if db is not None:
        raise UnknownDatabase(f"unknown database '{db}'")
    for candidate in search_path():
        if snap.schema_named(candidate) is not None:
            found = snap.find(name, candidate)
            if found is not None:
                return found
    return None


def resolve(snap: Snapshot, ref: Ref) -> Item:
    found = find(snap, ref)
    if found is None:
        raise UnknownObject(f"unknown catalog item '{written(ref)}'")
    return found


def creation_schema(snap: Snapshot, ref: Ref) -> str:
    """The schema a new object called ``ref`` goes into."""
    db, schema, _ = split(ref)
    if schema is None:
        if db is not None:
            raise UnknownDatabase(f"unknown database '{db}'")
        schema = current_schema(snap)
        if schema is None:
            raise UnknownSchema("no schema has been selected to create in")
    require_schema(snap, db, schema)
    if schema in SYSTEM_SCHEMAS:
        raise ReadOnlySchema(f"system schema '{schema}' cannot be modified")
    return schema


def current_schema(snap: Snapshot) -> str | None:
    """The first schema of the search path that exists (NULL if none does)."""
    return next((s for s in search_path() if exists(snap, s)), None)


def current_schemas(snap: Snapshot, implicit: bool) -> list[str]:
    found = [s for s in search_path() if exists(snap, s)]
    if not implicit:
        return found
    return [s for s in IMPLICIT if s not in found] + found


def schema_id(snap: Snapshot, schema: str) -> str:
    if schema in SYSTEM_SCHEMAS:
        return SYSTEM_SCHEMAS[schema][0]
    return snap.schema_id(schema)


def schema_oid(snap: Snapshot, schema: str) -> int:
    if schema in SYSTEM_SCHEMAS:
        return SYSTEM_SCHEMAS[schema][1]
    found = snap.schema_named(schema)
    if found is None:
        raise UnknownSchema(f"unknown schema '{schema}'")
    return found.oid


def visible(snap: Snapshot, item: Item) -> bool:
    """Whether the unqualified name of ``item`` means ``item`` (pg_table_is_visible)."""
    return find(snap, item.name) == item


def short(item: Item) -> str:
    """``item``'s name as text that resolves to it whatever the search path, as short
    as allowed: bare in ``public`` (where everything was before schemas), else
    ``schema.name`` (for the CLI, DAGs and tasks, which name objects by text)."""
    return item.name if item.schema == SCHEMA else f"{item.schema}.{item.name}"


def minimal(snap: Snapshot, item: Item) -> str:
    """``item``'s name qualified as little as the search path allows (regclass output)."""
    name = quote_ident(item.name)
    return name if visible(snap, item) else f"{quote_ident(item.schema)}.{name}"
