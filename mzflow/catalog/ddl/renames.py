"""ALTER {TABLE|VIEW|MATERIALIZED VIEW|INDEX|SINK} … RENAME TO.

The stored SQL of the item and of everything that reads it is rewritten on its
syntax tree, never as text: a string literal that happens to spell the old name
is data and stays as it was, and only the references that resolve to the renamed
item change.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import names, normalize
from mzflow.catalog.ddl.core import KINDS, Notices, check_new_name
from mzflow.catalog.model import DATABASE, INDEX, KIND_WORDS, Item
from mzflow.catalog.store import Store
from mzflow.errors import WrongObjectType
from mzflow.sql import ast
from mzflow.sql.ast import VersionedTable
from mzflow.sql.parse import parse_one, parse_query


def rename(store: Store, stmt: ast.RenameObject) -> Notices:
    """ALTER … RENAME TO: the item keeps its ids; stored SQL that names it is rewritten."""
    kind_sql = stmt.args["kind"]
    new = stmt.args["to"].name
    with store.write() as w:
        item = names.resolve(w.snapshot, stmt.this)
        wanted = KINDS[kind_sql]
        if item.kind != wanted:
            raise WrongObjectType(
                f"{item.qualified_name} is not a {KIND_WORDS[wanted]}",
                hint=f"Use ALTER {item.kind_word.upper()} to rename a {item.kind_word}.")
        check_new_name(w.snapshot, new, item.schema)  # a rename keeps the schema
        # Only the item and what reads it directly can name it (stored SQL names the
        # relations a definition reads, never the ones those read in turn).
        for other in [item, *w.snapshot.dependents(item.id)]:
            create_sql = _renamed(parse_one(other.create_sql), item, new)
            definition = (_renamed(parse_query(other.definition), item, new)
                          if other.definition else None)
            if other.id == item.id or create_sql is not None or definition is not None:
                w.rename_item(other.id, new if other.id == item.id else None,
                              create_sql or other.create_sql,
                              definition or other.definition)
    return []


def _renamed(tree: exp.Expr, item: Item, new: str) -> str | None:
    """``tree`` with every reference to ``item`` renamed, as SQL; None if it has none."""
    changed = False
    if isinstance(tree, ast.CreateIndex) and item.kind == INDEX and (
            tree.this is not None and tree.this.name == item.name):
        # An index's own name is not schema-qualified in its CREATE INDEX.
        tree.set("this", exp.to_identifier(new, quoted=True))
        changed = True
    qualifies = {c.table for c in tree.find_all(exp.Column)}
    for table in list(tree.find_all(exp.Table)):
        if not _names(table, item):
            continue
        table.set("this", exp.to_identifier(new, quoted=True))
        if (not table.alias and item.name in qualifies
                and isinstance(table.parent, exp.From | exp.Join)):
            # Columns written `old.x` keep resolving: the relation keeps the old name as
            # its alias. (Renaming the qualifiers instead could capture references to
            # another relation that is called by the new name in an inner scope.)
            table.set("alias", exp.TableAlias(this=exp.to_identifier(item.name, quoted=True)))
        changed = True
    return normalize.sql(tree) if changed else None


def _names(table: exp.Table, item: Item) -> bool:
    if isinstance(table, VersionedTable):
        return table.args["item_id"].name == item.id
    # Stored SQL writes every catalog relation fully qualified; anything else (a CTE,
    # a system table) is not this item.
    return (table.name == item.name and table.db == item.schema
            and table.catalog == DATABASE)
