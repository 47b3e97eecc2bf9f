"""Catalog → the maintenance graph, as plain data (no Airflow import).

Each cluster becomes one :class:`ClusterDag`: its pool, its slots, and one
:class:`Maintained` task per index it maintains (a materialized view is a view plus
its default index, so it is one task named after the view). ``dags.py`` turns this
into Airflow objects; the same data drives ``mzflow airflow sync`` and the tests, so
what Airflow will run can be printed and checked without Airflow.

Dependencies. An index on ``v2`` must tick after the index on ``v1`` when ``v2``
reads ``v1`` (through any number of plain views): walking ``v2``'s inputs, the walk
stops at the first objects that are maintained somewhere — those are its *nearest
maintained inputs*. One in the same cluster is an upstream task; one only maintained
in another cluster is an upstream *asset* (see ``dags.py`` for why assets). Tables
end the walk: their indexes serve reads, they do not feed ticks; the tables a walk
reaches are the task's *tables read*.

Two kinds of asset, told apart by their path: an index
is ``mzflow://<installation>/<database.schema.name>`` (one path segment, its qualified
name), a table ``mzflow://<installation>/<schema>/<table>`` (two). A cluster whose
objects refresh ON COMMIT is scheduled on the tables those objects read: every write
mzflow commits to one becomes an event of its asset (``triggers.py``), so ON COMMIT
means "after every commit", not "when somebody presses Trigger".

Each sink becomes one :class:`SinkDag`: a DAG of its own on the sink's schedule
(catch-up on, one run at a time), its one task in the pool of the sink's cluster.

A cluster's DAG runs on its objects' refresh policies (``catalog/refresh.py``): the one
schedule its scheduled objects share (the DDL refuses two that differ), or none when all
refresh ON COMMIT. ``mzflow_compact`` (:class:`CompactDag`) runs ``mzflow compact`` at an
interval from the shortest RETAIN HISTORY (``catalog/frontiers.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass
from urllib.parse import quote

from mzflow.catalog import frontiers, names, refresh, schedules, sizes
from mzflow.catalog import sinks as catalog_sinks
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, TABLE, Item, Snapshot

POOL_PREFIX = "mzflow_"
DAG_PREFIX = "mzflow_"
COMPACT_DAG = DAG_PREFIX + "compact"

# Airflow's task, DAG and pool ids: letters, digits, '_', '.', '-' (KEY_REGEX), 250 chars.
_UNSAFE = re.compile(r"[^\w.-]")


def safe_id(name: str) -> str:
    return _UNSAFE.sub("_", name)[:250]


def pool_name(cluster: str) -> str:
    return POOL_PREFIX + safe_id(cluster)


def dag_id(cluster: str) -> str:
    return DAG_PREFIX + safe_id(cluster)


def sink_dag_id(sink: str) -> str:
    return DAG_PREFIX + "sink_" + safe_id(sink)


def asset_uri(installation_id: str, index: Item) -> str:
    """One asset per maintained index. The installation id keeps two catalogs that
    share one Airflow apart; the qualified name keeps the UI readable."""
    return f"mzflow://{installation_id}/{_segment(index.qualified_name)}"


def table_asset_uri(installation_id: str, table: Item) -> str:
    """One asset per table, updated by every write mzflow commits to it. Two path
    segments (schema, table) where an index's URI has one (its dotted qualified name),
    so neither can be taken for the other."""
    return f"mzflow://{installation_id}/{_segment(table.schema)}/{_segment(table.name)}"


def _segment(name: str) -> str:
    """A name as one URI path segment: a quoted identifier may hold ``/``, ``?``, ``#``
    or spaces, which the mzflow scheme's normalizer (uris.py) would refuse, failing the
    whole DAG file's parse."""
    return quote(name, safe="")


@dataclass(frozen=True)
class TableInput:
    """A table a cluster's ticks read: its asset, and its id (where its writes land)."""

    id: str
    uri: str
    name: str  # qualified


@dataclass(frozen=True)
class Maintained:
    """One index to tick: a task in its cluster's DAG and pool."""

    task_id: str
    index: str  # the index's name: what ``conn.tick(object=...)`` takes
    on: str  # the indexed object's name
    asset: str  # the asset URI its successful tick updates
    upstream: tuple[str, ...]  # task ids in the same DAG that must tick first
    upstream_assets: tuple[str, ...]  # indexes maintained by other clusters it reads
    refresh: str = refresh.ON_COMMIT  # its REFRESH policy, as SQL
    tables: tuple[TableInput, ...] = ()  # the tables it reads (through plain views)

    def names(self) -> frozenset[str]:
        """What a user may type in the ``objects`` param to pick this task."""
        return frozenset((self.task_id, self.index, self.on))


@dataclass(frozen=True)
class ClusterDag:
    cluster: str
    dag_id: str
    pool: str
    slots: int
    tasks: tuple[Maintained, ...]  # in dependency order
    # What the DAG runs on: its scheduled objects' shared schedule (a list of instants
    # holds the creation times of those refreshed AT CREATION); None: all ON COMMIT.
    refresh: refresh.Schedule | None = None

    @property
    def upstream_assets(self) -> tuple[str, ...]:
        seen = dict.fromkeys(a for t in self.tasks for a in t.upstream_assets)
        return tuple(seen)

    @property
    def tables(self) -> tuple[TableInput, ...]:
        """The tables the cluster's ON COMMIT objects read: what its DAG is scheduled on
        besides upstream assets (objects on a schedule wait for it instead)."""
        seen = dict.fromkeys(t for m in self.tasks if m.refresh == refresh.ON_COMMIT
                             for t in m.tables)
        return tuple(seen)


@dataclass(frozen=True)
class CompactDag:
    """``mzflow_compact``: ``mzflow compact`` every ``interval_ms``."""

    dag_id: str
    interval_ms: int
    reason: str  # where the interval comes from


@dataclass(frozen=True)
class SinkDag:
    """One sink's DAG: its intervals are the sink's (``catalog/schedules.py``), the first
    one the interval holding the sink's creation time."""

    sink: str  # unqualified: what ``sinks.export.run`` takes
    dag_id: str
    cluster: str
    pool: str
    source: str
    format: str
    path: str
    envelope: str
    schedule: str  # as written in CREATE SINK
    cron: str  # presets spelled out
    timezone: str
    start: dt.datetime  # start of the first interval, in ``timezone``


def pools(snap: Snapshot) -> dict[str, int]:
    """Pool name → slots for every cluster (clusters without indexes included, so a
    pool exists as soon as its cluster does)."""
    return {pool_name(c.name): sizes.of_cluster(c.virtual, c.size).pool_slots
            for c in snap.clusters}


def cluster_dags(snap: Snapshot) -> list[ClusterDag]:
    """One entry per cluster that maintains at least one index, in catalog order."""
    by_id = {i.id: i for i in snap.items}
    indexes = [i for i in snap.items if i.kind == INDEX and i.cluster_id is not None]
    indexes_on: dict[str, list[Item]] = {}
    for ix in indexes:
        assert ix.on_id is not None
        indexes_on.setdefault(ix.on_id, []).append(ix)
    task_ids = _task_ids(indexes, by_id)
    out = []
    for cluster in snap.clusters:
        mine = [ix for ix in indexes if ix.cluster_id == cluster.id]
        if not mine:
            continue
        tasks = []
        for ix in mine:
            assert ix.on_id is not None
            upstream: list[str] = []
            assets: list[str] = []
            maintained, tables = inputs(ix.on_id, by_id, indexes_on)
            for obj in maintained:
                here = [j for j in indexes_on[obj] if j.cluster_id == cluster.id]
                if here:
                    upstream += [task_ids[j.id] for j in here]
                else:
                    assets += [asset_uri(snap.installation_id, j) for j in indexes_on[obj]]
            tasks.append(Maintained(
                task_id=task_ids[ix.id], index=names.short(ix), on=by_id[ix.on_id].name,
                asset=asset_uri(snap.installation_id, ix),
                upstream=tuple(dict.fromkeys(upstream)), upstream_assets=tuple(
                    dict.fromkeys(assets)), refresh=refresh.of_index(snap, ix).describe(),
                tables=tuple(TableInput(t, table_asset_uri(snap.installation_id, by_id[t]),
                                        by_id[t].qualified_name) for t in tables)))
        out.append(ClusterDag(cluster=cluster.name, dag_id=dag_id(cluster.name),
                              pool=pool_name(cluster.name),
                              slots=sizes.of_cluster(cluster.virtual, cluster.size).pool_slots,
                              tasks=tuple(toposort(tasks)),
                              refresh=cluster_schedule(snap, mine) or source_schedule(
                                  snap, cluster.id)))
    return out


def source_schedule(snap: Snapshot, cluster_id: int) -> refresh.Schedule | None:
    """A cluster that feeds sources runs on their TICK INTERVAL (the shortest; a
    minute at least, cron's grain; FROM FILES: every minute): their steps are what
    would trigger it, so no write ever would."""
    minutes = [_tick_minutes(s.create_sql) for s in snap.items
               if s.is_source and s.cluster_id == cluster_id]
    if not minutes:
        return None
    every = min(minutes)
    return refresh.Schedule(crons=("* * * * *" if every <= 1 else f"*/{every} * * * *",))


def _tick_minutes(create_sql: str) -> int:
    from mzflow.catalog import intervals
    from mzflow.sql.parse import parse_one

    for option in parse_one(create_sql).args.get("options") or []:
        value = option.args.get("value")
        if option.name == "TICK INTERVAL" and value is not None:
            return min(59, max(1, intervals.to_ms(str(value.name)) // 60_000))
    return 1


def cluster_schedule(snap: Snapshot, indexes: list[Item]) -> refresh.Schedule | None:
    """The schedule the cluster's scheduled objects share (the first one's, should an
    older catalog hold two), with the creation times of those refreshed AT CREATION
    among the instants of a list."""
    found: refresh.Schedule | None = None
    created: set[int] = set()
    for ix in indexes:
        owner = refresh.owner(snap, ix)
        policy = refresh.of_sql(owner.create_sql)
        schedule = policy.schedule()
        if schedule is None or found not in (None, schedule):
            continue
        found = schedule
        if policy.at_creation and owner.created_ts is not None:
            created.add(owner.created_ts)
    if found is None or found.crons:
        return found
    return dataclasses.replace(found, ats=tuple(sorted(set(found.ats) | created)))


def compact_dag(snap: Snapshot) -> CompactDag | None:
    """The compaction DAG, when the catalog holds anything to compact."""
    if not any(i.kind in (TABLE, INDEX) for i in snap.items):
        return None
    ms, reason = frontiers.compaction_interval(snap)
    return CompactDag(dag_id=COMPACT_DAG, interval_ms=ms, reason=reason)


def sink_dags(snap: Snapshot) -> list[SinkDag]:
    """One entry per sink, in catalog order."""
    out = []
    for spec in catalog_sinks.specs(snap):
        cluster = snap.cluster(spec.cluster_id)
        assert cluster is not None
        start, _ = schedules.containing(spec.schedule, spec.timezone, spec.start_ts)
        sink = names.short(snap.item(spec.id))
        out.append(SinkDag(
            sink=sink, dag_id=sink_dag_id(sink), cluster=cluster.name,
            pool=pool_name(cluster.name), source=snap.item(spec.source_id).qualified_name,
            format=spec.format, path=spec.path, envelope=spec.envelope,
            schedule=spec.schedule, cron=schedules.cron(spec.schedule),
            timezone=spec.timezone, start=start))
    return out


def _task_ids(indexes: list[Item], by_id: dict[str, Item]) -> dict[str, str]:
    """A materialized view's default index is the task named after the view (users
    think in views); any other index is named after itself. Ids stay unique."""
    ids: dict[str, str] = {}
    used: set[str] = set()
    for ix in indexes:
        assert ix.on_id is not None
        on = by_id[ix.on_id]
        base = safe_id(on.name if ix.is_default_index and on.kind == MATERIALIZED_VIEW
                       else ix.name)
        tid, n = base, 1
        while tid in used:
            n += 1
            tid = f"{base}_{n}"
        used.add(tid)
        ids[ix.id] = tid
    return ids


def nearest_maintained(on_id: str, by_id: dict[str, Item],
                        indexes_on: dict[str, list[Item]]) -> list[str]:
    """Objects read by ``on_id`` (transitively through unmaintained views) that are
    themselves maintained. The object itself is not its own input."""
    return list(inputs(on_id, by_id, indexes_on)[0])


def inputs(on_id: str, by_id: dict[str, Item], indexes_on: dict[str, list[Item]]
           ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What an index on ``on_id`` reads: its nearest maintained inputs, and the tables
    reached without passing one (the indexed object itself when it is a table), each in
    catalog order."""
    found: list[str] = []
    tables = [on_id] if by_id[on_id].kind == TABLE else []
    seen = {on_id}
    stack = list(by_id[on_id].depends_on)
    while stack:
        dep = stack.pop()
        if dep in seen or dep not in by_id:
            continue
        seen.add(dep)
        item = by_id[dep]
        if item.kind == TABLE:
            tables.append(dep)
            continue
        if dep in indexes_on:
            found.append(dep)
            continue
        stack.extend(item.depends_on)
    return (tuple(sorted(found, key=lambda i: by_id[i].oid)),
            tuple(sorted(tables, key=lambda i: by_id[i].oid)))


def toposort(tasks: list[Maintained]) -> list[Maintained]:
    """Stable topological order (catalog order among independent tasks). The catalog
    cannot hold a cycle, so every task is emitted."""
    by_id = {t.task_id: t for t in tasks}
    done: set[str] = set()
    out: list[Maintained] = []

    def visit(t: Maintained) -> None:
        if t.task_id in done:
            return
        done.add(t.task_id)
        for u in t.upstream:
            visit(by_id[u])
        out.append(t)

    for t in tasks:
        visit(t)
    return out
