"""A SQL session: parse, dispatch each statement to its stage, return results.

The session owns its variables (variables.py) and the two lists the features plug into
(wiring.py): write hooks and read sources. Everything durable lives in the catalog
store, so any number of sessions (processes) may share one home. Reads are select.py's,
writes writes.py's; this module is the API and the table of statements.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow import config
from mzflow.catalog import ddl, names, roles
from mzflow.catalog.ddl import default_privileges as default_privilege_ddl
from mzflow.catalog.ddl import roles as role_ddl
from mzflow.catalog.model import Column, Item, Snapshot
from mzflow.catalog.store import Store, now_ms
from mzflow.clusters import servers as cluster_servers
from mzflow.engine import spark as spark_runtime
from mzflow.engine.spark import configure as configure_spark
from mzflow.errors import Error, LoginRefused, ParseError, Unsupported
from mzflow.incremental.plan import require_incremental
from mzflow.maintain import arrangements, freshness, ticks
from mzflow.maintain import compaction as maintenance
from mzflow.maintain.tick import arrange
from mzflow.maintain.tick import holds as index_holds
from mzflow.projections import manage as projections
from mzflow.quality import quarantine
from mzflow.read import reads
from mzflow.session import access, explain, files, wiring
from mzflow.session import describe as describe_mod
from mzflow.session import params as params_mod
from mzflow.session import show as show_mod
from mzflow.session import sources as source_feed
from mzflow.session import subscribe as subscribe_mod
from mzflow.session import writes as tables
from mzflow.session.cluster_spark import cluster_spark
from mzflow.session.result import Result, value_types
from mzflow.session.select import Selects, advance_to, replace_functions, server
from mzflow.session.transactions import Transactions
from mzflow.session.variables import Variables
from mzflow.sinks import export as sinks
from mzflow.sql import ast
from mzflow.sql.parse_cache import parse
from mzflow.storage import paths
from mzflow.storage.delta import Shard
from mzflow.storage.types import arrow_schema, parse_type

log = logging.getLogger("mzflow.session")

_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Copy)


class Connection:
    """``conn.execute(sql)`` runs one or more statements; see :func:`mzflow.connect`."""

    def __init__(self, cfg: config.Config, role: str = roles.MATERIALIZE):
        self.config = cfg
        configure_spark(cfg.spark_settings)
        cfg.home.mkdir(parents=True, exist_ok=True)
        self.store = Store(cfg.catalog_url)
        found = roles.find(self.store.snapshot(), role)
        if found is None or not found.login:
            self.store.close()
            raise LoginRefused(f'role "{role}" does not exist' if found is None
                               else f'role "{role}" is not permitted to log in')
        # Statements run as this role (access.py checks them); what its DDL creates, it owns.
        self.role_id = found.id
        self.store.role_id = found.id
        self._role = role
        self._places = files.Places.of(cfg)  # where server files may be (files.py)
        self.write_hooks = wiring.write_hooks(self.store, cfg.warehouse)
        self.read_sources = wiring.read_sources(self.store, cfg.warehouse)
        self.vars = Variables(self.store, role)
        self._key: tables.IdempotencyKey | None = None
        self._checked: Snapshot | None = None  # the running statement's, once checked
        self.writes = tables.TableWrites(
            self.store, cfg.warehouse,
            lambda snap, query, at, versions=None: reads.read_arrow(
                snap, query, cfg.warehouse, at, versions),
            self.write_hooks)
        self.selects = Selects(self.store, cfg, self.vars, self.read_sources,
                               self._catch_up)
        self.transactions = Transactions(
            self.store, cfg, self.selects, self.writes, self._checking,
            lambda query: describe_mod.query_columns(self.store.snapshot(), query,
                                                     self.selects.described))
        # The process's Spark Connect clients close with its last open connection (or at
        # exit: engine/spark/closing.py), the warehouse's arrangements with its last one.
        spark_runtime.opened()
        arrange.opened(cfg.warehouse)
        self._open = True

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            self.transactions.close()
            self.store.close()
        finally:
            spark_runtime.closed()
            arrange.closed(self.config.warehouse)

    @property
    def role(self) -> str:
        """The session's role (``current_user`` and ``session_user``: mzflow has no
        SET ROLE)."""
        return self._role

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public API ------------------------------------------------------------

    def execute(self, sql: str, params: Sequence[Any] | None = None, *,
                idempotency_key: tuple[str, int] | None = None,
                param_types: Sequence[str | None] | None = None) -> Result:
        """Run every statement in ``sql``; return the last one's result. ``params`` are
        the values of ``$1 … $n`` in one statement (session/params.py); ``param_types``
        may declare their SQL types. ``idempotency_key=(app_id, n)`` makes a single write
        apply at most once: a retry with the same key (after a crash or a timeout) is
        skipped with a notice."""
        if params is None and param_types is None and idempotency_key is None:
            results = self.execute_all(sql)
            return results[-1] if results else Result(status="EMPTY")
        try:
            stmt = describe_mod.one_statement(sql)
            if stmt is not None and (params is not None or param_types is not None):
                with names.using(self.vars.search_path()):
                    stmt = params_mod.bind_values(self.store.snapshot(), stmt, params or [],
                                                  param_types)
        except Error:
            self.transactions.fail()
            raise
        if stmt is None:
            return Result(status="EMPTY")
        if idempotency_key is None:
            return self.execute_parsed(stmt)
        if not isinstance(stmt, _WRITES) or self.transactions.status != "I":
            raise Error("an idempotency key applies to exactly one INSERT, UPDATE, DELETE "
                        "or COPY statement, outside a transaction block")
        self._key = idempotency_key
        try:
            return self.execute_parsed(stmt)
        finally:
            self._key = None

    def execute_all(self, sql: str) -> list[Result]:
        try:
            statements = parse(sql)
        except ParseError:
            self.transactions.fail()
            raise
        return [self.execute_parsed(stmt) for stmt in statements]

    def describe(self, sql: str, param_types: Sequence[str | None] | None = None
                 ) -> describe_mod.Description:
        """What ``sql`` (one statement) would return, without running it: the types of
        its parameters and its result's columns (PostgreSQL's Describe)."""
        with names.using(self.vars.search_path()):
            return describe_mod.describe(self.store.snapshot(), sql, param_types, self._show,
                                         self.transactions.cursor_description,
                                         self.transactions.check_not_failed,
                                         self.selects.described)

    @property
    def transaction_status(self) -> str:
        """``I`` idle, ``T`` in a transaction block, ``E`` in a failed one."""
        return self.transactions.status

    def tick(self, cluster: str | None = None, object: str | None = None,
             at: int | None = None, *, full_refresh: bool = False) -> list[ticks.TickReport]:
        """Bring maintained indexes (all, one cluster's, or one object's) up to ``at``
        (default: every committed write); ``full_refresh`` recomputes them (R015)."""
        if object is None:  # a cluster's tick: its sources first, so its indexes see them
            self.feed_sources(cluster, at)
        snap = self.store.snapshot()
        if at is None:
            at = snap.read_ts
        elif at > snap.read_ts:
            snap = advance_to(self.store, at)
        reports = []
        for index in ticks.indexes_to_tick(snap, cluster, object):
            with cluster_spark(self.config, snap, index) as notices:
                report = self._catch_up(snap, index, at, full_refresh=full_refresh)
            reports.append(dataclasses.replace(report, notice=notices[0]) if notices
                           else report)
        return reports

    def feed_sources(self, cluster: str | None = None, at: int | None = None) -> None:
        """Advance every source of ``cluster`` (None: all) one step: the start of a
        cluster's tick. ``at``, a run's time, makes the same run's retry a no-op."""
        source_feed.advance_all(self, cluster, at)

    def _catch_up(self, snap: Snapshot, index: Item, at: int, *, full_refresh: bool = False
                  ) -> ticks.TickReport:
        """Tick ``index`` up to ``at`` here, recording and quarantining as a session."""
        return ticks.tick_index(snap, self.config.warehouse, index, at,
                                full_refresh=full_refresh, record=self._record_results,
                                quarantine=self._quarantine_rows,
                                named=partial(self._still_named, index),
                                store=self.store)

    def _still_named(self, index: Item) -> bool:
        return any(i.id == index.id for i in self.store.snapshot().items)

    def _record_results(self, rows: list[dict[str, Any]], runs: list[dict[str, Any]]
                        ) -> None:
        with self.store.write() as w:
            w.record_results(rows, runs)

    def _quarantine_rows(self, view_id: str, rows: pa.Table, key: tables.IdempotencyKey
                         ) -> None:
        snap = self.store.snapshot()
        target = quarantine.quarantine_of(snap, snap.item(view_id))
        self.writes.append(exp.table_(target.name, quoted=True), rows, key)

    def subscribe(self, sql: str, *, poll_seconds: float = 0.5) -> subscribe_mod.Subscription:
        """``SUBSCRIBE …`` as an iterator of rows (it waits for writes; stop iterating, or
        give UP TO, to end it). ``.columns`` names the rows' fields."""
        statements = parse(sql)
        if len(statements) != 1 or not isinstance(statements[0], ast.Subscribe):
            raise Error("subscribe() takes exactly one SUBSCRIBE statement")
        with names.using(self.vars.search_path()):
            self._authorize(statements[0])
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
            names.resolve(self.store.snapshot(), table)
        return maintenance.compact(self.store, self.config.warehouse, table)

    def variable(self, name: str) -> str:
        return self.vars.get(name)

    # -- dispatch ----------------------------------------------------------------

    def execute_parsed(self, stmt: exp.Expr) -> Result:
        """Run one statement already parsed by :func:`mzflow.sql.parse.parse`, as the
        transaction it is in allows (session/transactions.py)."""
        if stmt.find(exp.Parameter, exp.Placeholder) is not None:
            self.transactions.fail()
            refs = params_mod.numbers(stmt)  # a `?` or `:name` is a syntax error
            raise params_mod.UndefinedParameter(f"there is no parameter ${refs[0]}")
        return self.transactions.run(stmt, self._dispatch)

    def _dispatch(self, stmt: exp.Expr) -> Result:
        handler = _HANDLERS.get(type(stmt))
        if handler is None:
            raise Unsupported(f"{type(stmt).__name__.upper()} statements are not supported yet")
        with self._checking(stmt):
            return handler(self, stmt)

    @contextmanager
    def _checking(self, stmt: exp.Expr) -> Iterator[Snapshot | None]:
        """Run the block as ``stmt``'s: its names resolve by this session's search_path
        (catalog/names.py), the checks' as the statement's, and the role may run it. A
        transaction's reads and buffered INSERTs come here too, not only ``_dispatch``."""
        with names.using(self.vars.search_path()):
            self._checked = self._authorize(stmt)
            if isinstance(stmt, _WRITES):  # a source's tables are its cluster's to write
                source_feed.refuse_write(self._checked or self.store.snapshot(), stmt)
            try:
                yield self._checked
            finally:
                self._checked = None

    def _authorize(self, stmt: exp.Expr) -> Snapshot | None:
        """Check the role may run ``stmt``; the snapshot it checked on, if any.

        A superuser's statement sees one snapshot, its own; another role's checks load
        one first (a REVOKE that commits between them applies from the next statement).
        Where the store knows its snapshot current for a pragma (SQLite), the bit is the
        snapshot's, and a SELECT reads that snapshot: what was checked is what is read,
        and the pragma is asked once (each ask lets go of the GIL, which a server's other
        sessions then hand round)."""
        snap = None
        if self.store.watched:
            snap = self.store.snapshot()
            superuser = roles.is_superuser(snap, self.role_id)
        else:
            superuser = roles.is_superuser_now(self.store.engine, self.role_id)
        if not superuser:
            snap = self.store.snapshot()
            access.authorize(snap, self.role_id, stmt, self.variable("cluster"),
                             self._places)
        return snap

    def _create_role(self, stmt: ast.CreateRole) -> Result:
        return Result(status="CREATE ROLE", notices=role_ddl.create_role(self.store, stmt))

    def _alter_role(self, stmt: ast.AlterRole) -> Result:
        return Result(status="ALTER ROLE", notices=role_ddl.alter_role(self.store, stmt))

    def _drop_roles(self, stmt: ast.DropRoles) -> Result:
        return Result(status="DROP ROLE",
                      notices=role_ddl.drop_roles(self.store, stmt, self.role_id))

    def _grant(self, stmt: ast.GrantPrivileges) -> Result:
        return Result(status="REVOKE" if stmt.args.get("revoke") else "GRANT",
                      notices=role_ddl.grant(self.store, stmt))

    def _alter_default_privileges(self, stmt: ast.AlterDefaultPrivileges) -> Result:
        return Result(status="ALTER DEFAULT PRIVILEGES",
                      notices=default_privilege_ddl.alter_default_privileges(self.store, stmt))

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

    def _create_schema(self, stmt: ast.CreateSchema) -> Result:
        return Result(status="CREATE SCHEMA", notices=ddl.create_schema(self.store, stmt))

    def _create_table(self, stmt: ast.CreateTable) -> Result:
        return Result(status="CREATE TABLE",
                      notices=ddl.create_table(self.store, stmt, self._create_shard,
                                               self.write_hooks))

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
        notices = ddl.create_view(self.store, stmt, self.variable("cluster"),
                                  self.write_hooks, self._create_shard)
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

    def _create_source(self, stmt: ast.CreateSource) -> Result:
        return source_feed.create(self, stmt)

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
            self.store, stmt, self.write_hooks, self._create_shard))

    def _alter_projection(self, stmt: ast.AlterProjection) -> Result:
        return Result(status="ALTER TABLE",
                      notices=projections.alter(self.store, self.config.warehouse, stmt))

    def _swap(self, stmt: ast.SwapObject | ast.SwapObjects) -> Result:
        swaps = stmt.expressions if isinstance(stmt, ast.SwapObjects) else [stmt]
        notices = ddl.swap(self.store, swaps)
        if any(s.args["kind"] == "CLUSTER" for s in swaps):
            notices += self._sync_pools()
        return Result(status=f"ALTER {swaps[-1].args['kind']}", notices=notices)

    def _rename(self, stmt: ast.RenameObject) -> Result:
        return Result(status=f"ALTER {stmt.args['kind']}", notices=ddl.rename(self.store, stmt))

    def _explain(self, stmt: ast.Explain) -> Result:
        snap = self.store.snapshot()
        kind = stmt.args.get("kind")
        if kind is not None:
            lines = explain.explain_object(
                snap, stmt.this, kind,
                lambda index: ticks.last_switch(self.config.warehouse, index),
                lambda index: freshness.describe(snap, self.config.warehouse, index, now_ms()),
                lambda index: index_holds.lapsed(self.store, self.config.warehouse, index))
        else:
            query = stmt.this.this if isinstance(stmt.this, ast.AsOf) else stmt.this
            cluster = self.variable("cluster")
            found = snap.find_cluster(cluster)
            serve = server(self.config.warehouse, snap, found.id, True) if (
                found is not None) else None
            query = replace_functions(query, snap)
            lines = explain.explain_query(snap, query, serve, cluster)
            router = self.read_sources.router
            if router is not None:
                lines += router.explain(snap, self.config.warehouse, query,
                                        self.vars.enabled("optimize_use_projections"),
                                        partial(reads.table_refusal, snap, query,
                                                self.config.warehouse))
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

    def _show(self, stmt: ast.Show) -> Result:
        if stmt.args["kind"] == "VARIABLE":
            result = self.vars.show(stmt)
        else:
            columns, rows = show_mod.show(self.store.snapshot(), stmt)
            result = Result(columns, rows, status="SHOW")
        result.types = result.types or value_types(result.rows, len(result.columns))
        return result

    def _subscribe(self, stmt: ast.Subscribe) -> Result:
        if stmt.args.get("up_to") is None:
            raise Error("SUBSCRIBE without UP TO never ends",
                        hint="add UP TO <time>, iterate Connection.subscribe(…), or run "
                             "`mzflow subscribe`")
        sub = subscribe_mod.subscribe(self.store, self.config.warehouse, stmt,
                                      lease_seconds=self.config.read_hold_lease_seconds)
        rows = list(sub)
        return Result(sub.columns, rows, status=f"SUBSCRIBE {len(rows)}", types=sub.types)



def _select(conn: Connection, stmt: exp.Query) -> Result:
    return conn.selects.select(stmt, snap=conn._checked)


_HANDLERS: dict[type, Callable[[Connection, Any], Result]] = {
    ast.CreateCluster: Connection._create_cluster,
    ast.CreateRole: Connection._create_role,
    ast.AlterRole: Connection._alter_role,
    ast.DropRoles: Connection._drop_roles,
    ast.GrantPrivileges: Connection._grant,
    ast.AlterDefaultPrivileges: Connection._alter_default_privileges,
    ast.Subscribe: Connection._subscribe,
    ast.AlterCluster: Connection._alter_cluster,
    ast.CreateTable: Connection._create_table,
    ast.CreateSchema: Connection._create_schema,
    ast.AlterProjection: Connection._alter_projection,
    ast.AlterExpectation: Connection._alter_expectation,
    exp.Insert: Connection._insert,
    exp.Update: Connection._update,
    exp.Delete: Connection._delete,
    exp.Copy: Connection._copy,
    exp.Comment: Connection._comment,
    ast.RenameObject: Connection._rename,
    ast.SwapObject: Connection._swap,
    ast.SwapObjects: Connection._swap,
    ast.Explain: Connection._explain,
    ast.AsOf: lambda conn, stmt: conn.selects.as_of(stmt),
    ast.CreateView: Connection._create_view,
    ast.CreateIndex: Connection._create_index,
    ast.CreateSink: Connection._create_sink,
    ast.CreateSource: Connection._create_source,
    ast.DropObjects: Connection._drop,
    exp.Alter: Connection._alter_table,
    ast.SetVariable: lambda conn, stmt: conn.vars.set(stmt),
    ast.ResetVariable: lambda conn, stmt: conn.vars.reset(stmt),
    ast.Show: Connection._show,
    exp.Select: _select,
    exp.Union: _select,
    exp.Except: _select,
    exp.Intersect: _select,
}


def connect(home: str | None = None, *, catalog_url: str | None = None,
            spark_master: str | None = None, role: str = roles.MATERIALIZE) -> Connection:
    """Open a session on ``home`` (default: ``$MZFLOW_HOME``, else ``conf/``'s ``home``);
    ``spark_master`` overrides the configured one (Airflow's ``mzflow_spark``). The
    session runs as ``role`` (default ``materialize``, the built-in superuser).

    >>> conn = connect("/tmp/mzflow-doc")              # doctest: +SKIP
    >>> conn.execute("SHOW CLUSTERS").rows             # doctest: +SKIP
    [('default',)]
    """
    return Connection(config.load(home, catalog_url, spark_master=spark_master), role=role)
