"""COMMENT ON an object or a column."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import names
from mzflow.catalog.ddl.core import KINDS, Notices
from mzflow.catalog.store import Store
from mzflow.errors import UnknownObject, Unsupported, WrongObjectType


def comment(store: Store, stmt: exp.Comment) -> Notices:
    """COMMENT ON {TABLE|VIEW|MATERIALIZED VIEW|INDEX|SINK|COLUMN|SCHEMA} … IS '…'."""
    kind = str(stmt.args.get("kind") or "").upper()
    if kind == "VIEW" and stmt.args.get("materialized"):  # sqlglot keeps MATERIALIZED apart
        kind = "MATERIALIZED VIEW"
    value = stmt.args.get("expression")
    # An empty comment drops it, as NULL does (PostgreSQL's CreateComments).
    text = None if value is None or isinstance(value, exp.Null) else value.name or None
    with store.write() as w:
        if kind == "SCHEMA":
            target = stmt.this
            schema = names.require_schema(w.snapshot, target.args.get("db") and target.db or
                                          None, target.name)
            if schema in names.SYSTEM_SCHEMAS:
                raise Unsupported(f"COMMENT ON SCHEMA {schema}: a system schema")
            w.set_object_comment("schema", w.snapshot.schema_id(schema), text)
        elif kind == "COLUMN":
            column = stmt.this
            item = names.resolve(w.snapshot, exp.Table(
                this=column.args.get("table"), db=column.args.get("db"),
                catalog=column.args.get("catalog")))
            columns = [c.name for c in item.columns]
            if column.name not in columns:
                raise UnknownObject(f'column "{column.name}" of relation "{item.name}" '
                                    "does not exist")
            w.set_comment(item.id, columns.index(column.name) + 1, text)
        elif kind in KINDS:
            item = names.resolve(w.snapshot, stmt.this)
            if item.kind != KINDS[kind]:
                raise WrongObjectType(f"{item.qualified_name} is not a {kind.lower()}")
            w.set_comment(item.id, 0, text)
        else:
            raise Unsupported(f"COMMENT ON {kind} is not supported")
    return []
