"""ALTER TABLE … ADD / DROP PROJECTION, and the projections of CREATE TABLE.

A projection's definition is checked by binding it over its table, which is the
planner's job: the caller passes ``check`` (it raises the definition's error).
MATERIALIZE and CLEAR change storage only; they are run time's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sqlglot import exp

from mzflow import config
from mzflow.catalog import normalize
from mzflow.catalog.ddl.core import Notices, table_named
from mzflow.catalog.model import Item, Projection, Snapshot
from mzflow.catalog.store import Writer
from mzflow.errors import DuplicateObject, InvalidDefinition, UnknownObject
from mzflow.sql import ast

Check = Callable[[Snapshot, Item, Projection], None]
DropStorage = Callable[[Projection], None]


def table_of(snap: Snapshot, name: exp.Table) -> Item:
    return table_named(snap, name, "projections")


def query_sql(query: exp.Query) -> str:
    """The stored form: normalized, without the table (a projection reads its own)."""
    q = query.copy()
    q.set("from_", None)
    q.set("from", None)
    return normalize.sql(q)


def insert(w: Writer, snap: Snapshot, table: Item, name: str, query: exp.Query,
           ts: int, check: Check) -> Projection:
    """Check and record one projection of ``table`` (``snap`` already holds the table)."""
    existing = snap.projections_on(table.id)
    if any(p.name == name for p in existing):
        raise DuplicateObject(f'projection "{name}" of table "{table.name}" already exists')
    limit = config.tuning(snap.settings).max_projections_per_table
    if len(existing) >= limit:
        raise InvalidDefinition(
            f'table "{table.name}" already has {len(existing)} projections',
            hint="each projection is computed by every write; raise "
                 "max_projections_per_table with ALTER SYSTEM SET if it is worth it")
    projection = Projection(id=f"p{w.next_id('projection')}", table_id=table.id, name=name,
                            query=query_sql(query), created_ts=ts)
    check(snap, table, projection)
    w.insert_projection(projection)
    return projection


def alter(store: object, stmt: ast.AlterProjection, check: Check,
          drop_storage: DropStorage) -> tuple[Notices, Item | None, Projection | None]:
    """ADD or DROP PROJECTION (MATERIALIZE and CLEAR only resolve here). Returns the
    notices, the table and the projection acted on."""
    from mzflow.catalog.store import Store

    assert isinstance(store, Store)
    action = stmt.args["action"]
    name = stmt.args["name"].name
    if action == "ADD":
        with store.write() as w:
            table = table_of(w.snapshot, stmt.this)
            if any(p.name == name for p in w.snapshot.projections_on(table.id)) and (
                    stmt.args.get("exists")):
                return ([f'projection "{name}" of table "{table.name}" already exists, '
                         "skipping"], table, None)
            ts = w.allocate_ts()
            projection = insert(w, w.snapshot, table, name, stmt.args["query"], ts, check)
            w.committed(ts)
        return [], table, projection
    if action == "DROP":
        with store.write() as w:
            table = table_of(w.snapshot, stmt.this)
            found = _find(w.snapshot, table, name, missing_ok=bool(stmt.args.get("exists")))
            if found is None:
                return ([f'projection "{name}" of table "{table.name}" does not exist, '
                         "skipping"], table, None)
            w.delete_projection(found.id)
        drop_storage(found)
        return [], table, found
    snap = store.snapshot()
    table = table_of(snap, stmt.this)
    return [], table, _find(snap, table, name, missing_ok=False)


def _find(snap: Snapshot, table: Item, name: str, *, missing_ok: bool) -> Projection | None:
    for p in snap.projections_on(table.id):
        if p.name == name:
            return p
    if missing_ok:
        return None
    raise UnknownObject(f'projection "{name}" of table "{table.name}" does not exist')


def of_create(w: Writer, stmt: ast.CreateTable, table: Item, ts: int, check: Check) -> None:
    """The PROJECTION clauses of a CREATE TABLE, recorded with the table."""
    snap = dataclasses.replace(w.snapshot, items=w.snapshot.items + (table,))
    for node in stmt.this.expressions:
        if isinstance(node, ast.Projection):
            projection = insert(w, snap, table, node.this.name, node.args["query"], ts, check)
            snap = dataclasses.replace(snap, projections=snap.projections + (projection,))
