"""CREATE SINK (its options are checked by :mod:`mzflow.catalog.sinks`)."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import names, normalize, sinks
from mzflow.catalog.ddl.core import Notices, active_cluster, check_new_name, new_item, new_name
from mzflow.catalog.model import RELATION_KINDS, SINK
from mzflow.catalog.store import Store
from mzflow.errors import WrongObjectType
from mzflow.sql import ast


def create_sink(store: Store, stmt: ast.CreateSink, session_cluster: str) -> Notices:
    with store.write() as w:
        snap = w.snapshot
        schema, name = new_name(snap, stmt.this)
        if snap.find(name, schema) is not None:
            if stmt.args.get("exists"):
                return [f'sink "{name}" already exists, skipping']
            check_new_name(snap, name, schema)
        cluster = active_cluster(snap, stmt.args.get("cluster"), session_cluster)
        source = names.resolve(snap, stmt.args["source"])
        if source.kind not in RELATION_KINDS:
            raise WrongObjectType(f"{source.qualified_name} is not a relation")
        sinks.options(stmt, tuple(c.name for c in source.columns))
        explicit = stmt.copy()
        explicit.set("this", normalize.qualified(name, schema))
        explicit.set("source", normalize.of_item(source))
        explicit.set("cluster", exp.to_identifier(cluster.name, quoted=True))
        explicit.set("exists", None)
        # The sink's as-of: its snapshot is the source at this time, its changes follow.
        ts = w.allocate_ts()
        w.committed(ts)
        w.insert_item(new_item(w, name=name, schema=schema, kind=SINK,
                               create_sql=normalize.sql(explicit),
                               cluster_id=cluster.id, on_id=source.id,
                               depends_on=(source.id,), created_ts=ts))
    return []
