"""CREATE SCHEMA and DROP SCHEMA, with Materialize's errors."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import names
from mzflow.catalog.ddl.core import Notices
from mzflow.catalog.model import DATABASE, Schema
from mzflow.catalog.store import Store, Writer
from mzflow.errors import (
    DependentObjects,
    DuplicateSchema,
    Error,
    UnknownDatabase,
    UnknownSchema,
)
from mzflow.sql import ast

# Names the system keeps for its own schemas (Materialize and PostgreSQL reserve them).
RESERVED_PREFIXES = ("mz_", "pg_")


class ReservedName(Error):
    code = "42939"  # reserved_name


def create_schema(store: Store, stmt: ast.CreateSchema) -> Notices:
    name = stmt.this.name
    database = stmt.args.get("database")
    if database is not None and database.name != DATABASE:
        raise UnknownDatabase(f"unknown database '{database.name}'")
    with store.write() as w:
        if names.exists(w.snapshot, name):
            if stmt.args.get("exists"):
                return [f'schema "{name}" already exists, skipping']
            raise DuplicateSchema(f"schema '{name}' already exists")
        if name.startswith(RESERVED_PREFIXES):
            raise ReservedName(f"unacceptable schema name '{name}'",
                               detail=f'The prefix "{name[:3]}" is reserved for system '
                                      "schemas.")
        w.insert_schema(Schema(id=f"u{w.next_id('schema')}", oid=w.next_id("oid"),
                               name=name))
    return []


def drop_schema(w: Writer, target: exp.Table, if_exists: bool, cascade: bool) -> Notices:
    """DROP SCHEMA inside DROP's transaction; its items go with it under CASCADE."""
    from mzflow.catalog.ddl.drops import drop_items

    # DROP SCHEMA names a schema, optionally qualified by its database: ``db.s``.
    name = target.name
    database = target.db or None
    if target.catalog:
        raise Error(f"qualified name did not meet preconditions: {names.written(target)}",
                    hint="a schema name has at most two parts: database.schema")
    if database not in (None, DATABASE):
        if if_exists:
            return [f'schema "{database}.{name}" does not exist, skipping']
        raise UnknownDatabase(f"unknown database '{database}'")
    if name in names.SYSTEM_SCHEMAS:
        raise DependentObjects(f"cannot drop schema {name} because it is required by the "
                               "database system")
    schema = w.snapshot.schema_named(name)
    if schema is None:
        if if_exists:
            return [f'schema "{name}" does not exist, skipping']
        raise UnknownSchema(f"unknown schema '{name}'")
    members = w.snapshot.in_schema(name)
    if members and not cascade:
        raise DependentObjects(f"schema '{DATABASE}.{name}' cannot be dropped without CASCADE "
                               "while it contains objects")
    if members:
        drop_items(w, members, cascade=True)
    w.delete_schema(schema.id)
    return []
