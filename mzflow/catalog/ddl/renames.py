"""ALTER {TABLE|VIEW|MATERIALIZED VIEW|INDEX|SINK} … RENAME TO."""

from __future__ import annotations

from mzflow.catalog import normalize
from mzflow.catalog.ddl.core import KIND_WORDS, KINDS, Notices, check_new_name
from mzflow.catalog.model import INDEX
from mzflow.catalog.store import Store
from mzflow.errors import WrongObjectType
from mzflow.sql import ast


def rename(store: Store, stmt: ast.RenameObject) -> Notices:
    """ALTER … RENAME TO: the item keeps its ids; stored SQL that names it is rewritten."""
    kind_sql = stmt.args["kind"]
    new = stmt.args["to"].name
    with store.write() as w:
        item = w.snapshot.resolve(stmt.this.name)
        wanted = KINDS[kind_sql]
        if item.kind != wanted:
            raise WrongObjectType(
                f"{item.qualified_name} is not a {KIND_WORDS[wanted]}",
                hint=f"Use ALTER {item.kind_word.upper()} to rename a {item.kind_word}.")
        check_new_name(w.snapshot, new)
        old_ref = normalize.sql(normalize.qualified(item.name))
        new_ref = normalize.sql(normalize.qualified(new))
        for other in w.snapshot.items:
            create_sql = other.create_sql.replace(old_ref, new_ref)
            if other.id == item.id and item.kind == INDEX:
                # An index's own name is not schema-qualified in its CREATE INDEX.
                old_head = f"CREATE INDEX {normalize.quoted(item.name)} "
                if create_sql.startswith(old_head):
                    create_sql = (f"CREATE INDEX {normalize.quoted(new)} "
                                  f"{create_sql[len(old_head):]}")
            definition = (other.definition.replace(old_ref, new_ref)
                          if other.definition else None)
            if other.id == item.id or create_sql != other.create_sql:
                w.rename_item(other.id, new if other.id == item.id else None, create_sql,
                              definition)
    return []
