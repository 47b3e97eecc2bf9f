"""CREATE [OR REPLACE] [MATERIALIZED] VIEW."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from sqlglot import exp

from mzflow.catalog import normalize, refresh, roles
from mzflow.catalog.bind import bind
from mzflow.catalog.ddl.core import (
    Notices,
    active_cluster,
    check_new_name,
    new_item,
    new_name,
    retention,
)
from mzflow.catalog.ddl.drops import drop_items
from mzflow.catalog.ddl.indexes import insert_index
from mzflow.catalog.determinism import check_deterministic
from mzflow.catalog.hooks import WriteHook, check_of
from mzflow.catalog.model import (
    DATABASE,
    MATERIALIZED_VIEW,
    VIEW,
    Column,
    Expectation,
    Item,
)
from mzflow.catalog.store import Store, now_ms
from mzflow.errors import DuplicateObject, InvalidDefinition, InvalidOption, Unsupported
from mzflow.sql import ast


def create_view(store: Store, stmt: ast.CreateView, session_cluster: str,
                hooks: Sequence[WriteHook] = (),
                create_shard: Callable[[Item, int], None] | None = None) -> Notices:
    """``hooks`` check the expectations it defines (none: they are refused)."""
    check_expectation = check_of(hooks, Expectation)
    materialized = bool(stmt.args.get("materialized"))
    options = stmt.args.get("options") or []
    if options and not materialized:
        raise InvalidOption("a view takes no options: it stores nothing",
                            hint="RETAIN HISTORY applies to tables, indexes and "
                                 "materialized views")
    # WITH (EXPECT name (<condition>) …): the view's expectations, checked on every tick.
    expects = [o.args["value"] for o in options if o.name == "EXPECT"]
    if expects and check_expectation is None:
        raise InvalidOption("expectations are not supported here")
    retain = retention([o for o in options if o.name != "EXPECT"], allow_refresh=True,
                       allow_policy=True)
    created = now_ms()
    # REFRESH EVERY …: checked, its times made literals for the stored statement.
    policy, stored = refresh.check(options, created)
    options = refresh.replace_policies(options, stored)
    kind = MATERIALIZED_VIEW if materialized else VIEW
    word = "materialized view" if materialized else "view"
    if stmt.args.get("replace") and stmt.args.get("exists"):
        raise InvalidDefinition("cannot specify both OR REPLACE and IF NOT EXISTS")
    with store.write() as w:
        snap = w.snapshot
        schema, name = new_name(snap, stmt.this)
        cluster = active_cluster(snap, stmt.args.get("cluster"), session_cluster) if (
            materialized) else None
        existing = snap.find(name, schema)
        if existing is not None:
            if stmt.args.get("exists"):
                return [f'{word} "{name}" already exists, skipping']
            if not stmt.args.get("replace") or existing.kind != kind:
                check_new_name(snap, name, schema)
        if materialized:
            check_deterministic(stmt.args["query"], "materialized views")
        bound = bind(snap, stmt.args["query"])
        if existing is not None and existing.id in bound.depends_on:
            # OR REPLACE of a view that its own new definition reads (Materialize's wording).
            raise InvalidDefinition(f"cannot replace {word} {existing.qualified_name}: depended "
                                    f"upon by new {existing.qualified_name} definition")
        if cluster is not None:
            refresh.check_cluster(snap, cluster.id, f"materialized view {DATABASE}.{schema}."
                                  f"{name}", policy, skip=[existing.id] if existing else ())
        if materialized and bound.system_tables:
            raise Unsupported("materialized views over system catalog tables are not supported")
        qualified = normalize.qualified(name, schema).sql(dialect=normalize.DIALECT)
        columns = _rename_columns(bound.columns, stmt.args.get("columns"), word, qualified)
        query = normalize.qualify_relations(stmt.args["query"], snap)
        definition = normalize.sql(query)
        create_sql = normalize.sql(ast.CreateView(
            this=normalize.qualified(name, schema), query=query, materialized=materialized,
            columns=[exp.to_identifier(c.name, quoted=True) for c in columns]
            if stmt.args.get("columns") else None,
            cluster=exp.to_identifier(cluster.name, quoted=True) if cluster else None,
            options=[o.copy() for o in options]))
        if existing is not None:
            drop_items(w, [existing], cascade=False)
        # A materialized view belongs to a cluster through its default index only, so
        # the item itself records no cluster (dropping the index releases the cluster).
        item = new_item(w, name=name, schema=schema, kind=kind, columns=columns,
                        definition=definition,
                        create_sql=create_sql, depends_on=bound.depends_on,
                        retain_history_ms=retain,
                        # REFRESH AT CREATION's time (catalog/refresh.py)
                        created_ts=None if policy.on_commit else created)
        w.insert_item(item)
        if existing is not None:
            roles.carry_over(w.conn, snap, ("item", existing.id), ("item", item.id))
        if materialized and cluster is not None:
            # The cluster design: a materialized view is a view plus a default index.
            insert_index(w, item, cluster, keys=None, name=None, default=True,
                         retain=retain)
        if expects:
            from mzflow.catalog.ddl import expectations

            assert check_expectation is not None
            snap = dataclasses.replace(w.snapshot, items=w.snapshot.items + (item,))
            # A QUARANTINE expectation makes a table, whose shard starts at a time.
            ts = w.allocate_ts()
            for node in expects:
                snap = expectations.insert(w, snap, item, node, ts, check_expectation,
                                           create_shard or _no_shard)
            w.committed(ts)
    return []


def _no_shard(item: Item, ts: int) -> None:
    raise AssertionError("a quarantine needs its caller's create_shard")


def _rename_columns(columns: tuple[Column, ...], names: list[exp.Identifier] | None, word: str,
                    qualified: str) -> tuple[Column, ...]:
    if names:
        if len(names) != len(columns):
            plural = "" if len(columns) == 1 else "s"
            raise InvalidDefinition(
                f"{word} {qualified} definition names {len(names)} columns, but {word} "
                f"{qualified} has {len(columns)} column{plural}")
        columns = tuple(Column(n.name, c.type, c.nullable) for n, c in zip(names, columns,
                                                                            strict=True))
    seen: set[str] = set()
    for col in columns:
        if col.name in seen:
            raise DuplicateObject(f'column "{col.name}" specified more than once')
        seen.add(col.name)
    return columns
