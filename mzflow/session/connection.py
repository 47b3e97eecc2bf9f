"""A SQL session: parse, dispatch each statement to its stage, return results.

The session owns only its variables; everything durable lives in the catalog
store, so any number of sessions (processes) may share one home.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow import config
from mzflow.catalog import ddl, frontiers, intervals
from mzflow.catalog.exprtypes import display_name
from mzflow.catalog.model import Column, Item, Snapshot
from mzflow.catalog.store import Store, now_ms
from mzflow.clusters import servers as cluster_servers
from mzflow.engine.local import NotEvaluable
from mzflow.engine.spark import configure as configure_spark
from mzflow.engine.spark import evaluation_error
from mzflow.errors import (
    Error,
    InvalidOption,
    OutOfMemory,
    SparkFailure,
    UnknownObject,
    Unsupported,
)
from mzflow.incremental.plan import require_incremental
from mzflow.maintain import arrangements, freshness, ticks
from mzflow.maintain import compaction as maintenance
from mzflow.projections import runtime as projections
from mzflow.quality import validate as quality
from mzflow.read import holds, reads
from mzflow.session import explain
from mzflow.session import show as show_mod
from mzflow.session import subscribe as subscribe_mod
from mzflow.session import writes as tables
from mzflow.sinks import export as sinks
from mzflow.sql import ast
from mzflow.sql.parse import parse
from mzflow.storage import paths
from mzflow.storage.delta import Shard
from mzflow.storage.types import arrow_schema, parse_type

log = logging.getLogger("mzflow.session")

ISOLATION_LEVELS = ("strict serializable", "serializable")
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Copy)


@dataclass
class Result:
    """What one statement returned. ``status`` is the command tag (``CREATE CLUSTER``)."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    status: str = ""
    notices: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)  # a query's column types, as printed


@dataclass(frozen=True)
class Variable:
    default: Callable[[Snapshot], str]
    description: str
    check: Callable[[str], None] | None = None


def _check_interval(value: str) -> None:
    intervals.to_ms(value)


_TRUE = ("true", "on", "1", "yes")
_BOOLS = (*_TRUE, "false", "off", "0", "no")


def _check_bool(name: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value.lower() not in _BOOLS:
            raise InvalidOption(f'parameter "{name}" requires a Boolean value')
    return check


def _check_isolation(value: str) -> None:
    if value.lower() not in ISOLATION_LEVELS:
        raise InvalidOption(f'invalid value for parameter "transaction_isolation": "{value}"',
                            hint=f"valid values are {', '.join(ISOLATION_LEVELS)}")


VARIABLES: dict[str, Variable] = {
    "cluster": Variable(lambda s: s.settings.get("cluster", "default"),
                        "Sets the current cluster (Materialize)."),
    "database": Variable(lambda s: "materialize", "Sets the current database (CockroachDB)."),
    "search_path": Variable(lambda s: "public",
                            "Sets the schema search order for names that are not "
                            "schema-qualified (PostgreSQL)."),
    "retain_history": Variable(
        lambda s: s.settings.get("retain_history", frontiers.DEFAULT_RETAIN_HISTORY),
        "How long tables keep readable history unless they say RETAIN HISTORY FOR "
        "(mzflow; set with ALTER SYSTEM SET).", _check_interval),
    "optimize_use_projections": Variable(
        lambda s: s.settings.get("optimize_use_projections", "true"),
        "Answers queries from a table's projections when one can (ClickHouse; set the "
        "default with ALTER SYSTEM SET).", _check_bool("optimize_use_projections")),
    "transaction_isolation": Variable(lambda s: "strict serializable",
                                      "Sets the current transaction's isolation level "
                                      "(PostgreSQL).", _check_isolation),
}
def _tuning_variable(name: str) -> Variable:
    def current(snap: Snapshot) -> str:
        return str(getattr(config.tuning(snap.settings), name))

    def check(value: str) -> None:
        config.tuning_value(name, value)
    doc = config.TUNING_FIELDS[name].metadata["doc"]
    return Variable(current, f"{doc} (mzflow tuning; set with ALTER SYSTEM SET).", check)


# The tuning thresholds (mzflow/config.py: Tuning): shown by SHOW ALL, set for the
# installation with ALTER SYSTEM SET.
VARIABLES.update({name: _tuning_variable(name) for name in config.TUNING_FIELDS})
SYSTEM_VARIABLES = ("cluster", "retain_history", "optimize_use_projections",
                    *config.TUNING_FIELDS)
SYSTEM_ONLY = ("retain_history", *config.TUNING_FIELDS)


class Connection:
    """``conn.execute(sql)`` runs one or more statements; see :func:`mzflow.connect`."""

    def __init__(self, cfg: config.Config):
        self.config = cfg
        # The process's Spark, when it starts, starts as this configuration says.
        configure_spark(cfg.spark_settings)
        cfg.home.mkdir(parents=True, exist_ok=True)
        self.store = Store(cfg.catalog_url)
        warehouse = cfg.warehouse
        self.store.on_lock.append(lambda: quality.recover(warehouse))
        self._vars: dict[str, str] = {}
        self._key: tables.IdempotencyKey | None = None
        self.writes = tables.TableWrites(
            self.store, cfg.warehouse,
            lambda snap, query, at: reads.read_arrow(snap, query, cfg.warehouse, at))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public API ------------------------------------------------------------

    def execute(self, sql: str, *, idempotency_key: tuple[str, int] | None = None) -> Result:
        """Run every statement in ``sql``; return the last one's result.

        ``idempotency_key=(app_id, n)`` makes a single write apply at most once: a retry
        with the same key (after a crash or a timeout) is skipped with a notice.
        """
        if idempotency_key is None:
            results = self.execute_all(sql)
            return results[-1] if results else Result(status="EMPTY")
        statements = parse(sql)
        if len(statements) != 1 or not isinstance(statements[0], _WRITES):
            raise Error("an idempotency key applies to exactly one INSERT, UPDATE, DELETE "
                        "or COPY statement")
        self._key = idempotency_key
        try:
            return self.execute_parsed(statements[0])
        finally:
            self._key = None

    def execute_all(self, sql: str) -> list[Result]:
        return [self.execute_parsed(stmt) for stmt in parse(sql)]

    def tick(self, cluster: str | None = None, object: str | None = None,
             at: int | None = None, *, full_refresh: bool = False) -> list[ticks.TickReport]:
        """Bring maintained indexes (all, one cluster's, or one object's) up to ``at``
        (default: every committed write); ``full_refresh`` recomputes them (R015)."""
        snap = self.store.snapshot()
        if at is None:
            at = snap.read_ts
        elif at > snap.read_ts:
            snap = self._advance_to(at)
        reports = []
        for index in ticks.indexes_to_tick(snap, cluster, object):
            with self._cluster_spark(snap, index):
                reports.append(ticks.tick_index(
                    snap, self.config.warehouse, index, at, full_refresh=full_refresh,
                    record=self._record_results, quarantine=self._quarantine_rows,
                    named=partial(self._still_named, index)))
        return reports

    def _still_named(self, index: Item) -> bool:
        return any(i.id == index.id for i in self.store.snapshot().items)

    @contextmanager
    def _cluster_spark(self, snap: Snapshot, index: Item) -> Iterator[None]:
        """The index's cluster's warm Spark, if it has one (clusters/servers.py).
        A read's catch-up tick stays on the session's Spark, which the read needs anyway."""
        from mzflow.engine import spark

        found = snap.cluster(index.cluster_id) if index.cluster_id is not None else None
        endpoint = cluster_servers.endpoint_for(self.config, found)
        if found is None:
            yield
            return
        memory = spark.memory_of(cluster_servers.memory(found, endpoint))
        if endpoint is None:
            with memory:
                yield
            return
        log.info("tick %s on cluster %s's Spark at %s", index.qualified_name, found.name,
                 endpoint.url)
        started = int(time.time() * 1000)
        with memory, spark.using(endpoint.url, endpoint.started_at):
            try:
                yield
            except SparkFailure as e:
                if isinstance(e, OutOfMemory) or found.spark:
                    raise
                # A managed server that died under the tick: Spark stops its JVM after
                # an OutOfMemoryError (exit code 52), and the client saw only a lost
                # connection.
                code = cluster_servers.died_since(self.config.home, found, started)
                if code == spark.OOM_EXIT_CODE:
                    raise spark.out_of_memory(" (its server stopped; the next tick starts "
                                              "a new one)") from None
                if code is not None:
                    raise SparkFailure(
                        f'cluster "{found.name}": its Spark server died (exit code {code}) '
                        "during the tick", detail=str(e),
                        hint="the next tick starts a new one; its log is "
                             f"{cluster_servers.folder(self.config.home, found) / 'server.log'}"
                    ) from None
                raise

    def _record_results(self, rows: list[dict[str, Any]], runs: list[dict[str, Any]]
                        ) -> None:
        with self.store.write() as w:
            w.record_results(rows, runs)

    def _quarantine_rows(self, view_id: str, rows: pa.Table, key: tables.IdempotencyKey
                         ) -> None:
        snap = self.store.snapshot()
        target = quality.quarantine_of(snap, snap.item(view_id))
        self.writes.append(exp.to_table(target.name), rows, key)

    def subscribe(self, sql: str, *, poll_seconds: float = 0.5) -> subscribe_mod.Subscription:
        """``SUBSCRIBE …`` as an iterator of rows (it waits for writes; stop iterating, or
        give UP TO, to end it). ``.columns`` names the rows' fields."""
        statements = parse(sql)
        if len(statements) != 1 or not isinstance(statements[0], ast.Subscribe):
            raise Error("subscribe() takes exactly one SUBSCRIBE statement")
        return subscribe_mod.subscribe(self.store, self.config.warehouse, statements[0],
                                       poll_seconds, self.config.read_hold_lease_seconds)

    def run_sink(self, name: str, interval: sinks.Interval | None = None,
                 on_progress: Callable[[sinks.Exported], None] | None = None
                 ) -> list[sinks.Exported]:
        """Export a sink's intervals that are due (``mzflow sink run``)."""
        return sinks.run(self.store, self.config.warehouse, name, interval, on_progress)

    def compact(self, table: str | None = None) -> list[maintenance.Compacted]:
        """Advance ``since`` and reclaim storage (``mzflow compact``)."""
        if table is not None:
            self.store.snapshot().resolve(table)
        return maintenance.compact(self.store, self.config.warehouse, table)

    def variable(self, name: str) -> str:
        name = name.lower()
        var = VARIABLES.get(name)
        if var is None:
            raise UnknownObject(f'unrecognized configuration parameter "{name}"')
        return self._vars.get(name) or var.default(self.store.snapshot())

    # -- dispatch ----------------------------------------------------------------

    def execute_parsed(self, stmt: exp.Expr) -> Result:
        """Run one statement already parsed by :func:`mzflow.sql.parse.parse`."""
        handler = _HANDLERS.get(type(stmt))
        if handler is None:
            raise Unsupported(f"{type(stmt).__name__.upper()} statements are not supported yet")
        return handler(self, stmt)

    def _create_cluster(self, stmt: ast.CreateCluster) -> Result:
        notices = ddl.create_cluster(self.store, stmt)
        return Result(status="CREATE CLUSTER", notices=notices + self._sync_pools())

    def _alter_cluster(self, stmt: ast.AlterCluster) -> Result:
        notices = ddl.alter_cluster(self.store, stmt)
        return Result(status="ALTER CLUSTER", notices=notices + self._sync_pools())

    def _sync_pools(self) -> list[str]:
        """Clusters are Airflow pools: keep them in step when an Airflow home is set."""
        if self.config.airflow_home is None:
            return []
        from mzflow.clusters.pools import sync_pools

        return sync_pools(self.config)

    def _create_table(self, stmt: ast.CreateTable) -> Result:
        return Result(status="CREATE TABLE",
                      notices=ddl.create_table(self.store, stmt, self._create_shard,
                                               projections.check, quality.check))

    def _shard(self, item: Item) -> Shard:
        return tables.shard_of(self.config.warehouse, item)

    def _create_shard(self, item: Item, ts: int) -> None:
        shard = self._shard(item)
        if shard.path.exists():
            # Left by a CREATE that died before its catalog transaction committed:
            # the catalog never named it, so nothing can read it.
            shutil.rmtree(shard.path)
        shard.create(arrow_schema([(c.name, c.type, c.nullable) for c in item.columns]), ts,
                     item.partition_by)

    def _drop_storage(self, items: list[Item]) -> None:
        warehouse = self.config.warehouse
        for item in items:
            for p in paths.of_item(warehouse, item.id):
                shutil.rmtree(p, ignore_errors=True)
        # An arrangement goes with the last object that used it.
        arrangements.release(self.store.snapshot(), warehouse)

    def _create_view(self, stmt: ast.CreateView) -> Result:
        if ddl.refresh_mode(stmt.args.get("options") or []) == "incremental":
            require_incremental(self.store.snapshot(), stmt.args["query"], stmt.this.name)
        notices = ddl.create_view(self.store, stmt, self.variable("cluster"), quality.check,
                                  self._create_shard)
        kind = "MATERIALIZED VIEW" if stmt.args.get("materialized") else "VIEW"
        return Result(status=f"CREATE {kind}", notices=notices)

    def _create_index(self, stmt: ast.CreateIndex) -> Result:
        return Result(status="CREATE INDEX",
                      notices=ddl.create_index(self.store, stmt, self.variable("cluster")))

    def _create_sink(self, stmt: ast.CreateSink) -> Result:
        path = stmt.args["path"].name
        if "://" not in path and not path.startswith("/"):
            # Relative to the home, and stored absolute: Airflow workers and the CLI
            # run from different folders but must write to the same place.
            stmt = stmt.copy()
            stmt.set("path", exp.Literal.string(str(self.config.home / path)))
        return Result(status="CREATE SINK",
                      notices=ddl.create_sink(self.store, stmt, self.variable("cluster")))

    def _drop(self, stmt: ast.DropObjects) -> Result:
        before = self.store.snapshot().clusters
        notices = ddl.drop(self.store, stmt, self._drop_storage)
        if stmt.args["kind"] == "CLUSTER":
            # A dropped cluster's warm Spark goes with it (after the catalog commit).
            left = {c.id for c in self.store.snapshot().clusters}
            for gone in (c for c in before if c.id not in left):
                if cluster_servers.stop(self.config.home, gone):
                    notices = [*notices, f"stopped cluster {gone.name}'s Spark server"]
                shutil.rmtree(cluster_servers.folder(self.config.home, gone),
                              ignore_errors=True)
            notices = notices + self._sync_pools()
        return Result(status=f"DROP {stmt.args['kind']}", notices=notices)

    def _alter_table(self, stmt: exp.Alter) -> Result:
        def add(item: Item, column: Column, ts: int) -> None:
            self._shard(item).add_column(column.name, parse_type(column.type).arrow, ts)

        return Result(status="ALTER TABLE", notices=ddl.add_column(self.store, stmt, add))

    def _alter_expectation(self, stmt: ast.AlterExpectation) -> Result:
        from mzflow.catalog.ddl import expectations

        if stmt.args["action"] == "SUITE":  # a relative suite path: from the home
            path = Path(stmt.args["name"].name)
            if not path.is_absolute() and not path.exists():
                stmt = stmt.copy()
                stmt.set("name", exp.Literal.string(str(self.config.home / path)))
        return Result(status="ALTER TABLE", notices=expectations.alter(
            self.store, stmt, quality.check, self._create_shard))

    def _alter_projection(self, stmt: ast.AlterProjection) -> Result:
        return Result(status="ALTER TABLE",
                      notices=projections.alter(self.store, self.config.warehouse, stmt))

    def _use_projections(self) -> bool:
        return self.variable("optimize_use_projections").lower() in _TRUE

    def _rename(self, stmt: ast.RenameObject) -> Result:
        return Result(status=f"ALTER {stmt.args['kind']}", notices=ddl.rename(self.store, stmt))

    def _explain(self, stmt: ast.Explain) -> Result:
        snap = self.store.snapshot()
        kind = stmt.args.get("kind")
        if kind is not None:
            lines = explain.explain_object(
                snap, stmt.this.name, kind,
                lambda index: ticks.last_switch(self.config.warehouse, index),
                lambda index: freshness.describe(snap, self.config.warehouse, index, now_ms()))
        else:
            query = stmt.this.this if isinstance(stmt.this, ast.AsOf) else stmt.this
            cluster = self.variable("cluster")
            found = snap.find_cluster(cluster)
            serve = self._server(snap, found.id, True) if found is not None else None
            query = _replace_functions(query, snap)
            lines = explain.explain_query(snap, query, serve, cluster)
            lines += projections.explain_read(snap, self.config.warehouse, query,
                                              self._use_projections())
        return Result(["Optimized Plan"], [("\n".join(lines) + "\n",)], status="EXPLAIN")

    def _comment(self, stmt: exp.Comment) -> Result:
        return Result(status="COMMENT", notices=ddl.comment(self.store, stmt))

    def _write(self, result: tables.WriteResult) -> Result:
        return Result(status=result.status, notices=list(result.notices))

    def _insert(self, stmt: exp.Insert) -> Result:
        return self._write(self.writes.insert(stmt, self._key))

    def _update(self, stmt: exp.Update) -> Result:
        return self._write(self.writes.update(stmt, self._key))

    def _delete(self, stmt: exp.Delete) -> Result:
        return self._write(self.writes.delete(stmt, self._key))

    def _copy(self, stmt: exp.Copy) -> Result:
        return self._write(self.writes.copy(stmt, self._key))

    def _set(self, stmt: ast.SetVariable) -> Result:
        name = stmt.this.name.lower()
        var = VARIABLES.get(name)
        if var is None:
            raise UnknownObject(f'unrecognized configuration parameter "{name}"')
        value_node = stmt.args.get("value")
        value = None if value_node is None else value_node.name
        if isinstance(value_node, exp.Boolean):  # SET x = false: a Boolean has no name
            value = "true" if value_node.this else "false"
        if value is not None and var.check:
            var.check(value)
        if stmt.args.get("system"):
            if name not in SYSTEM_VARIABLES:
                raise Unsupported(f'ALTER SYSTEM SET "{name}" is not supported')
            return Result(status="ALTER SYSTEM", notices=ddl.set_system(self.store, name, value))
        if name in SYSTEM_ONLY:
            raise InvalidOption(f'parameter "{name}" can only be set with ALTER SYSTEM SET')
        if value is None:
            self._vars.pop(name, None)
        else:
            self._vars[name] = value.lower() if name == "transaction_isolation" else value
        return Result(status="SET")

    def _reset(self, stmt: ast.ResetVariable) -> Result:
        return self._set(ast.SetVariable(this=stmt.this, value=None,
                                         system=stmt.args.get("system")))

    def _show(self, stmt: ast.Show) -> Result:
        if stmt.args["kind"] == "VARIABLE":
            name = stmt.this.name.lower()
            if name == "all":
                rows: list[tuple[Any, ...]] = [
                    (n, self.variable(n), v.description) for n, v in VARIABLES.items()]
                return Result(["name", "setting", "description"], rows, "SHOW")
            return Result([name], [(self.variable(name),)], "SHOW")
        columns, rows = show_mod.show(self.store.snapshot(), stmt)
        return Result(columns, rows, status="SHOW")

    def _select(self, stmt: exp.Query, at: int | None = None) -> Result:
        snap = self.store.snapshot()
        stmt = _replace_functions(stmt, snap)
        cluster = None
        p = reads.plan(snap, stmt)
        if p.bound.depends_on:
            # Reading user objects needs a cluster to run in (the cluster design).
            cluster = snap.cluster_by_name(self.variable("cluster"))
        strict = self.variable("transaction_isolation") == "strict serializable"
        if at is not None and at > snap.read_ts:
            snap = self._advance_to(at)
        if cluster is not None:
            # Plan again with the cluster's indexes serving the views they maintain;
            # catalog-only queries never get here and are planned once.
            p = reads.plan(snap, stmt, self._server(snap, cluster.id, strict or at is not None))
        rows = None
        if not p.needs_spark:
            try:
                rows = reads.run_local(snap, p, self.config.warehouse,
                                       self.store.expectation_results,
                                       lambda: holds.rows(self.store))
            except NotEvaluable:
                if p.bound.system_tables:
                    raise
                # A constant query the in-process executor cannot evaluate: Spark can.
        if rows is None:
            rows = self._select_in_spark(snap, p, at, strict,
                                         cluster.name if cluster else "default")
        notices = _stale_index_notices(snap, p, cluster.id if cluster else None)
        return Result([c.name for c in p.bound.columns], rows, status=f"SELECT {len(rows)}",
                      notices=notices, types=[display_name(c.type) for c in p.bound.columns])

    def _select_in_spark(self, snap: Snapshot, p: reads.Plan, at: int | None, strict: bool,
                         cluster: str) -> list[tuple[Any, ...]]:
        from mzflow.engine import spark

        with spark.memory_of(spark.in_process_memory(cluster)):
            as_of = at is not None
            if at is None:
                at = snap.read_ts if strict else self._serializable_time(snap, p)
            with self._hold(snap, p, at, as_of):
                for _, index in p.indexes:
                    # Strict serializable: catch the index up first, so the read sees
                    # every earlier write. Then an error in the object's contents is the
                    # read's error.
                    ticks.tick_index(snap, self.config.warehouse, index, at,
                                     record=self._record_results,
                                     quarantine=self._quarantine_rows,
                                     named=partial(self._still_named, index))
                    state = ticks.index_shard(self.config.warehouse, index).state()
                    if state.error is not None:
                        raise evaluation_error(state.error, state.error_code or "22000")
                return reads.run_spark(snap, p, self.config.warehouse, at,
                                       projections=self._use_projections())

    def _hold(self, snap: Snapshot, p: reads.Plan, at: int, as_of: bool
              ) -> AbstractContextManager[Any]:
        """A read AS OF a time holds what it reads until it has read it; a read at the
        current time only when an input keeps little history (read/holds.py)."""
        tables = [item for _, item, _ in p.tables]
        if not as_of and not holds.plain_read_needs_hold(snap, tables):
            return nullcontext()
        objects = tables + [index for _, index in p.indexes]
        return holds.acquire(self.store, objects, at, "SELECT AS OF" if as_of else "SELECT",
                             self.config.read_hold_lease_seconds)

    def _server(self, snap: Snapshot, cluster_id: int, any_state: bool
                ) -> Callable[[Item], Item | None]:
        """Which index (in the active cluster only) serves a view's reads."""
        def serve(item: Item) -> Item | None:
            candidates = [i for i in snap.indexes_on(item.id) if i.cluster_id == cluster_id]
            candidates.sort(key=lambda i: (not i.is_default_index, i.oid))
            for index in candidates:
                shard = ticks.index_shard(self.config.warehouse, index)
                # Serializable reads use what an index already holds; an empty one
                # would mean a catch-up tick, so the view is recomputed instead.
                if any_state or (shard.exists() and shard.state().done_through >= 0):
                    return index
            return None

        return serve

    def _serializable_time(self, snap: Snapshot, p: reads.Plan) -> int:
        at = snap.read_ts
        for _, index in p.indexes:
            at = min(at, ticks.index_shard(self.config.warehouse, index).state().done_through)
        return at

    def _advance_to(self, at: int) -> Snapshot:
        now = now_ms()
        if at > now:
            raise reads.InvalidTimestamp(
                f"Timestamp ({at}) is not yet available: it is {at - now} ms in the future")
        self.store.advance_read_ts(at)
        return self.store.snapshot()

    def _subscribe(self, stmt: ast.Subscribe) -> Result:
        if stmt.args.get("up_to") is None:
            raise Error("SUBSCRIBE without UP TO never ends",
                        hint="add UP TO <time>, iterate Connection.subscribe(…), or run "
                             "`mzflow subscribe`")
        sub = subscribe_mod.subscribe(self.store, self.config.warehouse, stmt,
                                      lease_seconds=self.config.read_hold_lease_seconds)
        rows = list(sub)
        return Result(sub.columns, rows, status=f"SUBSCRIBE {len(rows)}")

    def _as_of(self, stmt: ast.AsOf) -> Result:
        return self._select(stmt.this, at=reads.as_of_value(stmt.args["at"]))


def _stale_index_notices(snap: Snapshot, p: reads.Plan, cluster_id: int | None) -> list[str]:
    """An index built on an older version of a table cannot serve newer-version reads."""
    out = []
    for _, table, version in p.tables:
        for index in snap.indexes_on(table.id):
            m = re.search(r"VERSION (\d+)\]", index.create_sql)
            if index.cluster_id == cluster_id and m and int(m.group(1)) < version:
                out.append(f"index {index.qualified_name} was created for version "
                           f"{m.group(1)} of {table.qualified_name} and cannot be used to "
                           f"read version {version}; recreate it to use it")
    return out


def _replace_functions(query: exp.Query, snap: Snapshot) -> exp.Query:
    """Evaluate catalog functions up front: they are constants for one statement."""
    name = "mz_legacy_installation_id"

    def is_call(node: exp.Expr) -> bool:
        return isinstance(node, exp.Anonymous) and node.name.lower() == name

    query = query.copy()
    if isinstance(query, exp.Select):
        query.set("expressions", [exp.alias_(p, name) if is_call(p) else p
                                  for p in query.expressions])
    swapped = query.transform(
        lambda n: exp.Literal.string(snap.installation_id) if is_call(n) else n)
    assert isinstance(swapped, exp.Query)
    return swapped


_HANDLERS: dict[type, Callable[[Connection, Any], Result]] = {
    ast.CreateCluster: Connection._create_cluster,
    ast.Subscribe: Connection._subscribe,
    ast.AlterCluster: Connection._alter_cluster,
    ast.CreateTable: Connection._create_table,
    ast.AlterProjection: Connection._alter_projection,
    ast.AlterExpectation: Connection._alter_expectation,
    exp.Insert: Connection._insert,
    exp.Update: Connection._update,
    exp.Delete: Connection._delete,
    exp.Copy: Connection._copy,
    exp.Comment: Connection._comment,
    ast.RenameObject: Connection._rename,
    ast.Explain: Connection._explain,
    ast.AsOf: Connection._as_of,
    ast.CreateView: Connection._create_view,
    ast.CreateIndex: Connection._create_index,
    ast.CreateSink: Connection._create_sink,
    ast.DropObjects: Connection._drop,
    exp.Alter: Connection._alter_table,
    ast.SetVariable: Connection._set,
    ast.ResetVariable: Connection._reset,
    ast.Show: Connection._show,
    exp.Select: Connection._select,
    exp.Union: Connection._select,
    exp.Except: Connection._select,
    exp.Intersect: Connection._select,
}


def connect(home: str | None = None, *, catalog_url: str | None = None,
            spark_master: str | None = None) -> Connection:
    """Open a session on ``home`` (default: ``$MZFLOW_HOME``, else ``conf/``'s ``home``);
    ``spark_master`` overrides the configured one (Airflow's ``mzflow_spark``).

    >>> conn = connect("/tmp/mzflow-doc")              # doctest: +SKIP
    >>> conn.execute("SHOW CLUSTERS").rows             # doctest: +SKIP
    [('default',)]
    """
    return Connection(config.load(home, catalog_url, spark_master=spark_master))
