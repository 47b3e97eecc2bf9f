"""A session's reads: SELECT and AS OF. Which time a read reads (strict serializable:
every committed write; serializable: what its indexes already hold; AS OF: the one it
names), the catch-up tick of the indexes it reads first, the read holds that keep its
inputs readable until it has read them, and where it runs (in process for a catalog
query, else on Spark, through a projection where the router can).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from sqlglot import exp

from mzflow import config
from mzflow.catalog.exprtypes import display_name
from mzflow.catalog.model import Item, Snapshot
from mzflow.catalog.store import Store, now_ms
from mzflow.engine import catalog_sql
from mzflow.engine.local import NotEvaluable
from mzflow.engine.spark import evaluation_error
from mzflow.maintain import ticks
from mzflow.read import holds, pg_reads, reads
from mzflow.read.sources import ReadSources
from mzflow.session import catalog_cache, catalog_functions
from mzflow.session.result import Result
from mzflow.session.variables import Variables
from mzflow.sql import ast

# Catch an index up to a time before a read of it (on the session's Spark).
CatchUp = Callable[[Snapshot, Item, int], object]


class Selects:
    """The session's read path; ``catch_up`` ticks an index the read needs current."""

    def __init__(self, store: Store, cfg: config.Config, variables: Variables,
                 sources: ReadSources, catch_up: CatchUp):
        self.store = store
        self.config = cfg
        self.variables = variables
        self.sources = sources
        self.catch_up = catch_up
        # The time the last read read its inputs at; None when it read no stored data.
        # A read-only transaction reads every later SELECT at the first one's time.
        self.last_at: int | None = None

    def select(self, stmt: exp.Query, at: int | None = None, *,
               snap: Snapshot | None = None) -> Result:
        """``snap``: the statement's snapshot, when its checks have just read it."""
        self.last_at = None
        snap = snap if snap is not None else self.store.snapshot()
        stmt = catalog_functions.replace(replace_functions(stmt, snap), snap, self.variables)
        # Looked up first: an answer is kept only for a statement that went the way
        # below, and which way it goes is a function of the key's parts.
        cached = catalog_cache.key(snap, stmt) if at is None else None
        if cached is not None and (hit := catalog_cache.get(cached)) is not None:
            return hit
        if pg_reads.wants(snap, stmt):
            # A client's question about the catalog (psql's \d, an ORM's inspector).
            answer = self._on_duckdb(snap, stmt)
            return Result(answer.columns, answer.rows, status=f"SELECT {len(answer.rows)}",
                          types=answer.types)
        if cached is not None and catalog_cache.in_process(snap, stmt, self.sources.rows):
            with catalog_cache.first_computes(cached):
                if (hit := catalog_cache.get(cached)) is not None:
                    return hit
                return self._computed(snap, stmt, at, cached)
        return self._computed(snap, stmt, at, cached)

    def _computed(self, snap: Snapshot, stmt: exp.Query, at: int | None,
                  cached: catalog_cache.Key | None, *, retried: bool = False) -> Result:
        cluster = None
        p = reads.plan(snap, stmt)
        if p.bound.depends_on:
            # Reading user objects needs a cluster to run in (the cluster design).
            cluster = snap.cluster_by_name(self.variables.get("cluster"))
        strict = self.variables.get("transaction_isolation") == "strict serializable"
        if at is not None and at > snap.read_ts:
            snap = advance_to(self.store, at)
        if cluster is not None:
            # Plan again with the cluster's indexes serving the views they maintain;
            # catalog-only queries never get here and are planned once.
            p = reads.plan(snap, stmt, server(self.config.warehouse, snap, cluster.id,
                                              strict or at is not None))
        rows, local = None, False  # local: evaluated in process, kept for the next ask
        if not p.needs_spark:
            try:
                rows = reads.run_local(snap, p, self.sources)
            except NotEvaluable:
                if p.bound.system_tables:
                    # What the binder's types show the executor would get wrong (an int
                    # compared with a quoted literal): DuckDB gets it right.
                    rows = self._on_duckdb(snap, stmt).rows
                # A constant query the in-process executor cannot evaluate: Spark can.
            else:
                local = cached is not None and not p.bound.depends_on
        if rows is None:
            try:
                rows = self._select_in_spark(snap, p, at, strict,
                                             cluster.name if cluster else "default")
            except Exception:
                now = self.store.snapshot()
                if retried or not _dropped_meanwhile(now, p):
                    raise
                # An index this read was planned to read was dropped while it read (a
                # blue/green swap's clean-up, a DROP): what serves the view now is in
                # the catalog as it is now. Planned again there, once.
                return self._computed(now, stmt, at, cached, retried=True)
        notices = _stale_index_notices(snap, p, cluster.id if cluster else None)
        result = Result([c.name for c in p.bound.columns], rows, status=f"SELECT {len(rows)}",
                        notices=notices, types=[display_name(c.type) for c in p.bound.columns])
        if local and not notices:  # notices name the session's cluster: not in the key
            assert cached is not None
            catalog_cache.put(cached, result, p.bound.system_tables, self.sources.rows)
        return result

    def described(self, stmt: exp.Query
                  ) -> tuple[exp.Query, tuple[list[str], list[str]] | None]:
        """For a Describe: ``stmt`` with the session's functions evaluated as
        :meth:`select` evaluates them (their columns named as PostgreSQL names them),
        and, for a catalog question, its result columns and types as :meth:`select`
        answers it (DuckDB over the system relations, empty). A statement calling
        set_config is left as it is: evaluating that sets the variable."""
        if any(isinstance(n, exp.Anonymous) and n.name.lower() == "set_config"
               for n in stmt.walk()):
            return stmt, None
        snap = self.store.snapshot()
        stmt = catalog_functions.replace(replace_functions(stmt, snap), snap, self.variables)
        if not pg_reads.wants(snap, stmt):
            return stmt, None
        answer = pg_reads.describe(snap, stmt, self.variables.search_path())
        return stmt, (answer.columns, answer.types)

    def _on_duckdb(self, snap: Snapshot, stmt: exp.Query) -> catalog_sql.Answer:
        sources = ReadSources({**self.sources.rows, "pg_settings": lambda _: (
            catalog_functions.settings_rows(self.variables))}, self.sources.router)
        return pg_reads.run(snap, stmt, sources, self.variables.search_path())

    def _select_in_spark(self, snap: Snapshot, p: reads.Plan, at: int | None, strict: bool,
                         cluster: str) -> list[tuple[Any, ...]]:
        from mzflow.engine import spark

        with spark.memory_of(spark.in_process_memory(cluster)):
            as_of = at is not None
            if at is None:
                at = snap.read_ts if strict else self._serializable_time(snap, p)
            self.last_at = at
            with self._hold(snap, p, at, as_of):
                for _, index in p.indexes:
                    # Strict serializable: catch the index up first, so the read sees
                    # every earlier write. Then an error in the object's contents is the
                    # read's error. An index already there is not caught up: that would
                    # wait for the index's lock, behind a tick in progress, for nothing.
                    shard = ticks.index_shard(self.config.warehouse, index)
                    state = shard.state() if shard.exists() else None
                    if state is None or state.done_through < at:
                        self.catch_up(snap, index, at)
                        state = ticks.index_shard(self.config.warehouse, index).state()
                    if state.error is not None:
                        raise evaluation_error(state.error, state.error_code or "22000")
                router = self.sources.router if self.variables.enabled(
                    "optimize_use_projections") else None
                return reads.run_spark(snap, p, self.config.warehouse, at, router=router)

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

    def _serializable_time(self, snap: Snapshot, p: reads.Plan) -> int:
        at = snap.read_ts
        for _, index in p.indexes:
            at = min(at, ticks.index_shard(self.config.warehouse, index).state().done_through)
        return at

    def as_of(self, stmt: ast.AsOf) -> Result:
        return self.select(stmt.this, at=reads.as_of_value(stmt.args["at"]))


def server(warehouse: Path, snap: Snapshot, cluster_id: int, any_state: bool
           ) -> Callable[[Item], Item | None]:
    """Which index (in the active cluster only) serves a view's reads."""
    def serve(item: Item) -> Item | None:
        candidates = [i for i in snap.indexes_on(item.id) if i.cluster_id == cluster_id]
        candidates.sort(key=lambda i: (not i.is_default_index, i.oid))
        for index in candidates:
            shard = ticks.index_shard(warehouse, index)
            # Serializable reads use what an index already holds; an empty one
            # would mean a catch-up tick, so the view is recomputed instead.
            if any_state or (shard.exists() and shard.state().done_through >= 0):
                return index
        return None

    return serve


def advance_to(store: Store, at: int) -> Snapshot:
    now = now_ms()
    if at > now:
        raise reads.InvalidTimestamp(
            f"Timestamp ({at}) is not yet available: it is {at - now} ms in the future")
    store.advance_read_ts(at)
    return store.snapshot()


def _dropped_meanwhile(now: Snapshot, p: reads.Plan) -> bool:
    ids = {i.id for i in now.items}
    return any(index.id not in ids for _, index in p.indexes)


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


def replace_functions(query: exp.Query, snap: Snapshot) -> exp.Query:
    """Evaluate catalog functions up front: they are constants for one statement."""
    name = "mz_legacy_installation_id"

    def is_call(node: exp.Expr) -> bool:
        return isinstance(node, exp.Anonymous) and node.name.lower() == name

    if not any(is_call(n) for n in query.walk()):
        return query
    query = query.copy()
    if isinstance(query, exp.Select):
        query.set("expressions", [exp.alias_(p, name) if is_call(p) else p
                                  for p in query.expressions])
    swapped = query.transform(
        lambda n: exp.Literal.string(snap.installation_id) if is_call(n) else n)
    assert isinstance(swapped, exp.Query)
    return swapped
