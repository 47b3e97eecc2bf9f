"""CREATE [DEFAULT] INDEX, and the default index a materialized view gets."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import names, normalize, refresh
from mzflow.catalog.ddl.core import Notices, active_cluster, check_new_name, new_item, retention
from mzflow.catalog.model import INDEX, RELATION_KINDS, TABLE, Cluster, IndexKey, Item
from mzflow.catalog.store import Store, Writer, now_ms
from mzflow.errors import UnknownObject, WrongObjectType
from mzflow.sql import ast
from mzflow.sql.ast import VersionedTable


def _index_name(w: Writer, on: Item, keys: list[IndexKey] | None, default: bool) -> str:
    if default or not keys:
        base = f"{on.name}_primary_idx"
    else:
        base = "_".join([on.name] + [k.column or "expr" for k in keys] + ["idx"])
    # Names dropped earlier in this transaction (CREATE OR REPLACE) are free again.
    freed = {d.name for d in w.dropped if d.schema == on.schema}
    name, n = base, 0
    while w.snapshot.find(name, on.schema) is not None and name not in freed:
        n += 1
        name = f"{base}{n}"
    return name


def insert_index(w: Writer, on: Item, cluster: Cluster, keys: list[IndexKey] | None,
                 name: str | None, default: bool, retain: int | None = None,
                 policy: list[ast.Option] | None = None, created_ts: int | None = None
                 ) -> Item:
    """``policy``: the index's own REFRESH options, as catalog/refresh.py stores them;
    ``created_ts``: the CREATE's time, for REFRESH AT CREATION."""
    if keys is None:
        # Default key: a known unique key, else all columns (no unique keys are known yet).
        keys = [IndexKey(column=c.name, expression=None) for c in on.columns]
    name = name or _index_name(w, on, keys, default)
    target = normalize.of_item(on)
    if on.kind == TABLE:
        # An index on a table is built on one version of it (Materialize's stored form).
        target = VersionedTable(**target.args, item_id=exp.to_identifier(on.id),
                                pinned=exp.Literal.number(on.version))
    create_sql = normalize.sql(ast.CreateIndex(
        this=exp.to_identifier(name, quoted=True), on=target, keys=[_key(k) for k in keys],
        cluster=exp.to_identifier(cluster.name, quoted=True), options=policy or None))
    # An index lives in the schema of the relation it indexes (as in Materialize).
    item = new_item(w, name=name, schema=on.schema, kind=INDEX, create_sql=create_sql,
                    cluster_id=cluster.id,
                    on_id=on.id, keys=tuple(keys), depends_on=(on.id,),
                    is_default_index=default, retain_history_ms=retain,
                    created_ts=created_ts)
    w.insert_item(item)
    return item


def _key(key: IndexKey) -> exp.Expr:
    if key.column is not None:
        return exp.column(key.column, quoted=True)
    assert key.expression is not None  # IndexKey holds one or the other
    # (as a condition: the statement parser reads a bare expression as a syntax error)
    return exp.Paren(this=exp.maybe_parse(key.expression, into=exp.Condition,
                                          dialect=normalize.DIALECT))


def create_index(store: Store, stmt: ast.CreateIndex, session_cluster: str) -> Notices:
    name = stmt.this.name if stmt.this else None
    options = stmt.args.get("options") or []
    retain = retention(options, allow_policy=True)
    # mzflow's: an index takes a materialized view's REFRESH options (catalog/refresh.py).
    created = now_ms()
    policy, stored = refresh.check(options, created)
    with store.write() as w:
        snap = w.snapshot
        rel = names.resolve(snap, stmt.args["on"])
        if name and snap.find(name, rel.schema) is not None:
            if stmt.args.get("exists"):
                return [f'index "{name}" already exists, skipping']
            check_new_name(snap, name, rel.schema)
        cluster = active_cluster(snap, stmt.args.get("cluster"), session_cluster)
        if rel.kind not in RELATION_KINDS:
            raise WrongObjectType(f"cannot create index on {rel.qualified_name}: it is a "
                                  f"{rel.kind_word}")
        keys = None
        if stmt.args.get("keys"):
            known = {c.name for c in rel.columns}
            keys = []
            for key in stmt.args["keys"]:
                if isinstance(key, exp.Column) and not key.table:
                    if key.name not in known:
                        raise UnknownObject(f'column "{key.name}" does not exist')
                    keys.append(IndexKey(column=key.name, expression=None))
                else:
                    keys.append(IndexKey(column=None, expression=normalize.sql(key)))
        index = insert_index(w, rel, cluster, keys=keys, name=name,
                             default=bool(stmt.args.get("default")), retain=retain,
                             policy=stored, created_ts=None if policy.on_commit else created)
        # (after the insert, to name the index; raising rolls the insert back)
        refresh.check_cluster(snap, cluster.id, f"index {index.qualified_name}", policy)
    return []
