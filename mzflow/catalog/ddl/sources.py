"""CREATE SOURCE: the source item and the tables it feeds, in one transaction.

What a source's tables look like (a load generator's outputs, a landing folder's
columns) is the sources wing's to say (mzflow/sources/); the session passes it in, so
the catalog never imports a wing. A source is no relation: its tables are, each with
``on_id`` naming the source. A single-output source (COUNTER, FILES) has one table
named as the source, as Materialize's source is its own relation: then the table is
the source (its ``on_id`` its own id, its create_sql the CREATE SOURCE).
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from mzflow.catalog import normalize
from mzflow.catalog.ddl.core import Notices, active_cluster, check_new_name, new_item, new_name
from mzflow.catalog.ddl.tables import CreateShard
from mzflow.catalog.model import SOURCE, TABLE, Column, Item
from mzflow.catalog.store import Store
from mzflow.errors import DuplicateObject
from mzflow.sql import ast

# A source's outputs: (table name, or None for the source's own name; its columns).
Outputs = list[tuple[str | None, tuple[Column, ...]]]


def create_source(store: Store, stmt: ast.CreateSource, session_cluster: str,
                  outputs: Outputs, create_shard: CreateShard
                  ) -> tuple[Notices, Item | None]:
    """Record the source and its tables and create their shards; the new source item
    (None: IF NOT EXISTS found one)."""
    with store.write() as w:
        snap = w.snapshot
        schema, name = new_name(snap, stmt.this)
        found = snap.find(name, schema)
        if found is not None and found.is_source and stmt.args.get("exists"):
            return [f'source "{name}" already exists, skipping'], None
        names = [table or name for table, _ in outputs]
        for table_name in {name, *names}:
            check_new_name(snap, table_name, schema)
        if len(set(names)) != len(names) or (outputs[0][0] is not None and name in names):
            raise DuplicateObject("a source's tables need distinct names")
        cluster = active_cluster(snap, stmt.args.get("cluster"), session_cluster)
        explicit = stmt.copy()
        explicit.set("this", normalize.qualified(name, schema))
        explicit.set("cluster", exp.to_identifier(cluster.name, quoted=True))
        explicit.set("exists", None)
        if stmt.args.get("generator") is not None:  # as Materialize prints it: AUCTION
            explicit.set("generator", exp.to_identifier(stmt.args["generator"].name.upper()))
        ts = w.allocate_ts()
        create_sql = normalize.sql(explicit)
        if len(outputs) == 1 and outputs[0][0] is None:
            table = new_item(w, name=name, schema=schema, kind=TABLE, columns=outputs[0][1],
                             create_sql=create_sql, cluster_id=cluster.id, created_ts=ts)
            source = replace(table, on_id=table.id)
            w.insert_item(source)
            create_shard(source, ts)
        else:
            source = new_item(w, name=name, schema=schema, kind=SOURCE,
                              create_sql=create_sql, cluster_id=cluster.id, created_ts=ts)
            w.insert_item(source)
            for table_name, (_, columns) in zip(names, outputs, strict=True):
                item = new_item(w, name=table_name, schema=schema, kind=TABLE,
                                columns=columns, created_ts=ts, on_id=source.id,
                                create_sql=normalize.create_table_sql(table_name, columns,
                                                                      schema=schema))
                w.insert_item(item)
                create_shard(item, ts)
        w.committed(ts)
    return [], source
