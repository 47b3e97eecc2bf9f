"""Reads: pick one time valid for every input, then run on Spark or in-process.

A SELECT binds against the catalog, inlines its views, and finds the table
versions it reads. Catalog-only queries run in-process; anything that reads a
table runs on Spark over the exact files of each table's version at the
chosen time. The time is the catalog's ``read_ts`` unless the query says
``AS OF``, and it must lie in every input's ``[since, upper)``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog import frontiers, system
from mzflow.catalog.model import ROWID, Item, Snapshot
from mzflow.engine import local
from mzflow.errors import Error
from mzflow.plan.query import Plan, plan
from mzflow.read import local_reads
from mzflow.read.sources import ReadSources, Router
from mzflow.storage import paths
from mzflow.storage.delta import COUNT, KEY, IndexShard, Shard
from mzflow.storage.types import spark_ddl


class InvalidTimestamp(Error):
    code = "22008"  # datetime_field_overflow: what Materialize reports for bad AS OF times


def check_time(snap: Snapshot, items: Iterable[Item], at: int) -> None:
    for item in items:
        lower = frontiers.since(item, snap)
        if at < lower:
            raise InvalidTimestamp(
                f"Timestamp ({at}) is not valid for all inputs: {item.qualified_name} has "
                f"since {lower}",
                hint="read at or after since; RETAIN HISTORY FOR '<interval>' keeps more")


def as_of_value(node: exp.Expr) -> int:
    """``AS OF`` takes milliseconds since the epoch, or a timestamp."""
    inner = node.this if isinstance(node, exp.Cast) else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        return int(inner.this)
    if isinstance(inner, exp.Literal):
        try:
            when = dt.datetime.fromisoformat(inner.this.replace(" ", "T", 1))
        except ValueError:
            raise InvalidTimestamp(f'invalid AS OF time "{inner.this}"') from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)
    raise InvalidTimestamp(f"AS OF needs a constant time, not {node.sql()}")


def relations(p: Plan, warehouse: Path, at: int, snap: Snapshot | None = None,
              versions: dict[str, int] | None = None) -> dict[str, Any]:
    """``versions``: filled with the Delta version read of each table and index, by its
    shard's path (what a write computed outside the lock checks under it)."""
    from mzflow.engine.spark import Relation

    out: dict[str, Relation] = {}
    for key, index in p.indexes:
        assert snap is not None and index.on_id is not None
        on = snap.item(index.on_id)
        contents = IndexShard(paths.index(warehouse, index.id))
        version = contents.version_at(at)
        if version is None:
            raise InvalidTimestamp(f"{index.qualified_name} has no contents at {at}")
        if versions is not None:
            versions[str(contents.path)] = version
        cols = [(c.name, c.type) for c in on.columns]
        out[key] = Relation(files=tuple(contents.files(version)),
                            schema_ddl=spark_ddl(cols + [(KEY, "text"), (COUNT, "bigint")]),
                            columns=tuple(c for c, _ in cols), count_column=COUNT)
    for key, item, version in p.tables:
        shard = Shard(paths.table(warehouse, item.id))
        delta_version = shard.version_at(at)
        if delta_version is None:
            raise InvalidTimestamp(f"{item.qualified_name} did not exist at {at}")
        if versions is not None:
            versions[str(shard.path)] = delta_version
        all_cols = [(c.name, c.type) for c in item.columns] + [(ROWID, "bigint")]
        visible = tuple(c.name for c in item.columns_at(version)) + (ROWID,)
        out[key] = Relation(files=tuple(shard.files(delta_version)),
                            schema_ddl=spark_ddl(all_cols), columns=visible)
    return out


def run_local(snap: Snapshot, p: Plan, sources: ReadSources | None = None
              ) -> list[tuple[Any, ...]]:
    """A catalog query, in process. ``sources`` give the system tables whose rows live
    outside the catalog snapshot their rows (without them: the catalog's)."""
    tables: dict[str, tuple[list[str], local.Rows]] = {}
    for table in p.query.find_all(exp.Table):
        sys_table = system.by_key(table.name)
        if sys_table is not None:
            source = sources.rows.get(table.name) if sources is not None else None
            found = source(snap) if source is not None else sys_table.rows(snap)
            tables[table.name] = ([c.name for c in sys_table.all_columns], found)
    return local.run(p.query, tables, [c.type for c in p.bound.columns])


def run_spark(snap: Snapshot, p: Plan, warehouse: Path, at: int, *,
              router: Router | None = None) -> list[tuple[Any, ...]]:
    """``router``: answer from less than the tables when it can (a projection)."""
    from mzflow.engine import spark

    if p.bound.system_tables:
        raise Error("a query cannot read system tables and user tables together yet")
    check_time(snap, (item for _, item, _ in p.tables), at)
    routing = router.route(snap, warehouse, p.query, at) if (
        router is not None and not p.indexes) else None
    types = [c.type for c in p.bound.columns]
    if routing is not None:
        assert router is not None
        # Few rows, read already: answered in process when the evaluator can (Spark's
        # fixed cost per query is most of such a read's time), else on Spark.
        found = router.answer(routing, types)
        if found is None:
            # Beyond the evaluator over the projection's rows: small tables are still
            # answered in process, from the tables themselves (a JVM's start and
            # Spark's fixed cost per query are most of such a read's time).
            found = local_reads.answer(snap, p, warehouse, at)
        if found is None:
            others = {k: v for k, v in relations(p, warehouse, at, snap).items()
                      if any(t.name == k for t in routing.query.find_all(exp.Table))}
            # A projection's rows are few and local: one Spark job per action, not one
            # per adaptive stage.
            with spark.few_jobs():
                found = spark.run(routing.query, {**others, **routing.relations}, types)
        rows = found
    else:
        # A small table: in process when exact (Spark's fixed cost is most of the time).
        local_rows = local_reads.answer(snap, p, warehouse, at)
        rows = local_rows if local_rows is not None else spark.run(
            p.query, relations(p, warehouse, at, snap), types)
    tz = [i for i, c in enumerate(p.bound.columns) if c.type == "timestamp with time zone"]
    if tz:
        rows = [tuple(spark.as_utc(v) if i in tz else v for i, v in enumerate(r)) for r in rows]
    return rows


def table_refusal(snap: Snapshot, query: exp.Query, warehouse: Path) -> str | None:
    """Why a read of ``query`` now would not be answered in process from its tables
    (None: it may be, if the evaluator can express it). EXPLAIN's, from the Delta log."""
    return local_reads.refusal(snap, plan(snap, query), warehouse, snap.read_ts)


def read_arrow(snap: Snapshot, query: exp.Query, warehouse: Path, at: int,
               versions: dict[str, int] | None = None) -> pa.Table:
    """Evaluate ``query`` at ``at`` into Arrow (INSERT … SELECT, UPDATE, DELETE).
    ``versions``: filled with the version read of each shard, by path."""
    from mzflow.engine import spark

    p = plan(snap, query)
    if not p.needs_spark:
        try:
            rows = run_local(snap, p)
        except local.NotEvaluable:
            if p.bound.system_tables:
                raise
            rows = None  # a constant the in-process path cannot evaluate: Spark can
        if rows is not None:
            names = [c.name for c in p.bound.columns]
            return pa.table({f"c{i}": [r[i] for r in rows] for i in range(len(names))})
    with spark.registered(relations(p, warehouse, at, snap, versions)) as views:
        try:
            return spark.collect_arrow(spark.dataframe(p.query, views,
                                                    [c.type for c in p.bound.columns]))
        except Error:
            raise
        except Exception as e:
            raise spark.translate_error(e) from None

