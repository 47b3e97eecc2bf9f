"""ALTER SCHEMA a SWAP WITH b and ALTER CLUSTER a SWAP WITH b (Materialize's blue/green
cut-over): the two names are exchanged in one catalog transaction, so a reader sees the
old names or the new ones, never a mix.

Objects keep their ids, data and frontiers; only names move. Stored SQL names catalog
relations fully qualified and clusters by name, so every stored statement that names
an object of either schema (or either cluster) is rewritten on its syntax tree: a view
that read ``blue.t`` before the swap still reads the same table, now called ``green.t``
(as in Materialize, where references are by id). The Airflow DAGs and pools are named
after clusters: they follow at the next parse and pool sync.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mzflow.catalog import names, normalize
from mzflow.catalog.ddl.core import Notices
from mzflow.catalog.model import DATABASE
from mzflow.catalog.store import Store, Writer
from mzflow.errors import InvalidOption, ReservedName, UnknownObject, UnknownSchema
from mzflow.sql import ast
from mzflow.sql.parse import parse_one, parse_query


def swap(store: Store, stmts: list[ast.SwapObject]) -> Notices:
    """One swap, or a transaction's several (dbt-materialize's deploy_promote swaps its
    schemas, then its clusters, in one ``BEGIN … COMMIT``): all in one catalog
    transaction, each seeing the ones before it; an error in any undoes them all."""
    with store.write() as w:
        for stmt in stmts:
            kind = stmt.args["kind"]
            a, b = stmt.this.name, stmt.args["to"].name
            if a == b:
                raise InvalidOption(f"cannot swap {kind.lower()} '{a}' with itself")
            if kind == "SCHEMA":
                _swap_schemas(w, a, b)
            else:
                _swap_clusters(w, a, b)
            w.reread()
    return []


def _swap_schemas(w: Writer, a: str, b: str) -> None:
    for name in (a, b):
        if name in names.SYSTEM_SCHEMAS:
            raise ReservedName(f"cannot swap system schema '{name}'")
        if w.snapshot.schema_named(name) is None:
            raise UnknownSchema(f"unknown schema '{name}'")
    swapped = {a: b, b: a}

    def rewrite(tree: exp.Expr) -> bool:
        changed = False
        for table in tree.find_all(exp.Table):
            if table.catalog == DATABASE and table.db in swapped:
                table.set("db", exp.to_identifier(swapped[table.db], quoted=True))
                changed = True
        return changed

    _rewrite_all(w, rewrite)
    w.swap_schemas(w.snapshot.schema_named(a), w.snapshot.schema_named(b))  # type: ignore[arg-type]


def _swap_clusters(w: Writer, a: str, b: str) -> None:
    found = [w.snapshot.find_cluster(n) for n in (a, b)]
    for name, cluster in zip((a, b), found, strict=True):
        if cluster is None:
            raise UnknownObject(f"unknown cluster '{name}'")
        if cluster.name.startswith("mz_"):
            raise ReservedName(f"cannot swap system cluster '{name}'")
    swapped = {a: b, b: a}

    def rewrite(tree: exp.Expr) -> bool:
        changed = False
        for node in tree.walk():
            cluster = node.args.get("cluster") if isinstance(node, exp.Expression) else None
            if isinstance(cluster, exp.Identifier) and cluster.name in swapped:
                node.set("cluster", exp.to_identifier(swapped[cluster.name], quoted=True))
                changed = True
        return changed

    _rewrite_all(w, rewrite)
    w.swap_clusters(found[0], found[1])  # type: ignore[arg-type]


def _rewrite_all(w: Writer, rewrite: Callable[[exp.Expr], bool]) -> None:
    """Every item's stored CREATE and definition through ``rewrite`` (edits a tree in
    place and says whether it changed it)."""
    for item in w.snapshot.items:
        create = parse_one(item.create_sql)
        definition = parse_query(item.definition) if item.definition else None
        changed_create = rewrite(create)
        changed_definition = definition is not None and rewrite(definition)
        if changed_create or changed_definition:
            w.rename_item(item.id, None,
                          normalize.sql(create) if changed_create else item.create_sql,
                          normalize.sql(definition) if changed_definition and definition
                          else item.definition)
