"""DROP of catalog items and clusters, with their indexes and (CASCADE) dependents."""

from __future__ import annotations

from collections.abc import Callable

from mzflow.catalog import names
from mzflow.catalog.ddl.core import KINDS, Notices
from mzflow.catalog.model import INDEX, KIND_WORDS, MATERIALIZED_VIEW, Item
from mzflow.catalog.store import Store, Writer
from mzflow.errors import (
    DependentObjects,
    UnknownDatabase,
    UnknownObject,
    UnknownSchema,
    WrongObjectType,
)
from mzflow.sql import ast
from mzflow.sql.parse import parse_one

Dropped = Callable[[list[Item]], None]


def drop(store: Store, stmt: ast.DropObjects, on_dropped: Dropped | None = None) -> Notices:
    """Drop the named objects; ``on_dropped`` gets every item removed, after the commit
    (their storage goes after the catalog no longer names it, never before)."""
    kind_sql = stmt.args["kind"]
    cascade = bool(stmt.args.get("cascade"))
    notices: Notices = []
    with store.write() as w:
        for target in stmt.expressions:
            if kind_sql == "CLUSTER":
                notices += _drop_cluster(w, target.name, bool(stmt.args.get("exists")), cascade)
                continue
            if kind_sql == "SCHEMA":
                from mzflow.catalog.ddl.schemas import drop_schema

                notices += drop_schema(w, target, bool(stmt.args.get("exists")), cascade)
                continue
            try:
                item = names.find(w.snapshot, target)
            except (UnknownSchema, UnknownDatabase):
                if not stmt.args.get("exists"):
                    raise
                item = None
            if item is None:
                if stmt.args.get("exists"):
                    notices.append(f'{kind_sql.lower()} "{names.written(target)}" does not '
                                   "exist, skipping")
                    continue
                raise UnknownObject(f"unknown catalog item '{names.written(target)}'")
            wanted = KINDS[kind_sql]
            if (item.is_source and kind_sql != "SOURCE") or (
                    item.kind != wanted and not (item.is_source and kind_sql == "SOURCE")):
                word = "source" if item.is_source else item.kind_word
                raise WrongObjectType(
                    f"{item.qualified_name} is not a {KIND_WORDS[wanted]}",
                    hint=f"Use DROP {word.upper()} to remove a {word}.")
            feeding = w.snapshot.source_of(item)
            if feeding is not None and feeding.id != item.id:
                # Its rows are the source's to write: it goes with the source.
                raise DependentObjects(
                    f"cannot drop {item.qualified_name}: it is fed by source "
                    f"'{feeding.qualified_name}'",
                    hint=f"DROP SOURCE {feeding.name} drops it with the source")
            drop_items(w, [item], cascade=cascade)
        dropped = list(w.dropped)
    if on_dropped is not None and dropped:
        on_dropped(dropped)
    return notices


def drop_items(w: Writer, targets: list[Item], *, cascade: bool) -> None:
    """Drop ``targets`` with their indexes, and with every dependent if ``cascade``."""
    snap = w.snapshot
    doomed: dict[str, Item] = {}
    stack = list(targets)
    while stack:
        item = stack.pop()
        if item.id in doomed:
            continue
        doomed[item.id] = item
        for dep in snap.dependents(item.id):
            if dep.on_id == item.id and (dep.kind == INDEX or item.is_source):
                stack.append(dep)  # an object's own indexes (a source's tables) go with it
            elif cascade:
                stack.append(dep)
            elif dep.id not in doomed:
                raise DependentObjects(
                    f"cannot drop {item.qualified_name}: still depended upon by catalog item "
                    f"'{dep.qualified_name}'")
    # Dependents before what they depend on.
    for item in _dependents_first(list(doomed.values())):
        w.delete_item(item.id)
        w.dropped.append(item)


def _dependents_first(items: list[Item]) -> list[Item]:
    ids = {i.id for i in items}
    done: set[str] = set()
    out: list[Item] = []

    def visit(item: Item) -> None:
        if item.id in done:
            return
        done.add(item.id)
        for other in items:
            if item.id in other.depends_on or other.on_id == item.id:
                visit(other)
        out.append(item)

    for item in items:
        if item.id in ids:
            visit(item)
    return out


def _drop_cluster(w: Writer, name: str, if_exists: bool, cascade: bool) -> Notices:
    cluster = w.snapshot.find_cluster(name)
    if cluster is None:
        if if_exists:
            return [f"cluster \"{name}\" does not exist, skipping"]
        raise UnknownObject(f"unknown cluster '{name}'")
    members = w.snapshot.in_cluster(cluster.id)
    if members and not cascade:
        # cluster-2022.slt's wording. (materialized-views-2022.slt, from a later Materialize,
        # expects "…indexes, sinks, materialized views, or replicas" for the same case.)
        raise DependentObjects("cannot drop cluster with active indexes or sinks")
    # A materialized view created in this cluster (its default index lives here) goes
    # with the cluster.
    mat_views = [w.snapshot.item(i.on_id) for i in members
                 if i.kind == INDEX and i.is_default_index and i.on_id is not None
                 and w.snapshot.item(i.on_id).kind == MATERIALIZED_VIEW
                 and _created_in(w.snapshot.item(i.on_id), cluster.name)]
    if members:
        drop_items(w, members + mat_views, cascade=True)
    w.delete_cluster(cluster.id)
    return []


def _created_in(mat_view: Item, cluster: str) -> bool:
    in_cluster = parse_one(mat_view.create_sql).args.get("cluster")
    return in_cluster is not None and in_cluster.name == cluster
