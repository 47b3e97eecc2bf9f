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
end the walk: their indexes serve reads, they do not feed ticks.

Each sink becomes one :class:`SinkDag`: a DAG of its own on the sink's schedule
(catch-up on, one run at a time), its one task in the pool of the sink's cluster.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from mzflow.catalog import schedules, sizes
from mzflow.catalog import sinks as catalog_sinks
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, TABLE, Item, Snapshot

POOL_PREFIX = "mzflow_"
DAG_PREFIX = "mzflow_"

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
    return f"mzflow://{installation_id}/{index.qualified_name}"


@dataclass(frozen=True)
class Maintained:
    """One index to tick: a task in its cluster's DAG and pool."""

    task_id: str
    index: str  # the index's name: what ``conn.tick(object=...)`` takes
    on: str  # the indexed object's name
    asset: str  # the asset URI its successful tick updates
    upstream: tuple[str, ...]  # task ids in the same DAG that must tick first
    upstream_assets: tuple[str, ...]  # indexes maintained by other clusters it reads

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

    @property
    def upstream_assets(self) -> tuple[str, ...]:
        seen = dict.fromkeys(a for t in self.tasks for a in t.upstream_assets)
        return tuple(seen)


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
            for obj in nearest_maintained(ix.on_id, by_id, indexes_on):
                here = [j for j in indexes_on[obj] if j.cluster_id == cluster.id]
                if here:
                    upstream += [task_ids[j.id] for j in here]
                else:
                    assets += [asset_uri(snap.installation_id, j) for j in indexes_on[obj]]
            tasks.append(Maintained(
                task_id=task_ids[ix.id], index=ix.name, on=by_id[ix.on_id].name,
                asset=asset_uri(snap.installation_id, ix),
                upstream=tuple(dict.fromkeys(upstream)), upstream_assets=tuple(
                    dict.fromkeys(assets))))
        out.append(ClusterDag(cluster=cluster.name, dag_id=dag_id(cluster.name),
                              pool=pool_name(cluster.name),
                              slots=sizes.of_cluster(cluster.virtual, cluster.size).pool_slots,
                              tasks=tuple(toposort(tasks))))
    return out


def sink_dags(snap: Snapshot) -> list[SinkDag]:
    """One entry per sink, in catalog order."""
    out = []
    for spec in catalog_sinks.specs(snap):
        cluster = snap.cluster(spec.cluster_id)
        assert cluster is not None
        start, _ = schedules.containing(spec.schedule, spec.timezone, spec.start_ts)
        out.append(SinkDag(
            sink=spec.name, dag_id=sink_dag_id(spec.name), cluster=cluster.name,
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
    found: list[str] = []
    seen = {on_id}
    stack = list(by_id[on_id].depends_on)
    while stack:
        dep = stack.pop()
        if dep in seen or dep not in by_id:
            continue
        seen.add(dep)
        item = by_id[dep]
        if item.kind == TABLE:
            continue
        if dep in indexes_on:
            found.append(dep)
            continue
        stack.extend(item.depends_on)
    return sorted(found, key=lambda i: by_id[i].oid)


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
