"""The maintenance graph → Airflow DAGs: one DAG and one pool per cluster, one DAG per sink.

Why one DAG per cluster, linked by Assets, rather than one DAG with tasks in many
pools:

- A cluster is the unit users size, pause and reason about (DESIGN §1: a cluster is
  a pool *plus the DAG(s)* that maintain its indexes). Its own DAG can be triggered,
  paused, retried and given params on its own, and a slow cluster does not hold a
  single global run open.
- Cross-cluster reads are data dependencies, which is what Assets model: every
  index is an Asset (``mzflow://<installation>/<name>``) that its task updates, and
  a cluster whose indexes read another cluster's indexes is scheduled on those
  assets (any of them). The asset event carries the time the upstream tick reached,
  and the downstream run ticks to exactly that time.
- Cycles between clusters (A reads B, B reads A) are allowed by the catalog; a tick
  that finds its index already at the run's time is *skipped*, which emits no asset
  event, so the back-and-forth ends after one round.

Within a DAG, tasks follow dependencies; the run's first tick records the time the
whole run targets (catalog/runs.py: no task of its own, which cost every run a
second). Params (``full_refresh``, ``objects``, ``at``) render as a form in the
Airflow 3 trigger dialog.

Each sink is a DAG of its own, ``mzflow_sink_<sink>``, on the sink's schedule as a
``CronDataIntervalTimetable`` in the sink's time zone, starting with the interval that
holds the sink's creation time. ``catchup=True`` and one active run make missed
intervals run in order; its one task (``export``) runs in the pool of the sink's
cluster and exports the run's data interval (a rerun rewrites the same file).

Parsing reads the catalog (SQLAlchemy, no Spark, no delta-rs): see ``load``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetAny, CronDataIntervalTimetable, Param

from mzflow.airflow.graph import ClusterDag, SinkDag, cluster_dags, sink_dags
from mzflow.airflow.operators import (
    MzflowSinkOperator,
    MzflowTickOperator,
)
from mzflow.airflow.tasks import EXPORT
from mzflow.catalog.model import Snapshot

log = logging.getLogger(__name__)

# Ticks are idempotent, so retrying a failed one (a lost worker, a Spark hiccup) is safe.
DEFAULT_ARGS: dict[str, Any] = {"retries": 2, "retry_delay": dt.timedelta(seconds=30)}


def params(names: Iterable[str]) -> dict[str, Param]:
    return {
        "full_refresh": Param(
            False, type="boolean", title="Full refresh",
            description="Recompute the batch instead of propagating its changes."),
        "objects": Param(
            [], type="array", items={"type": "string"}, examples=sorted(names),
            title="Objects",
            description="Only tick these (materialized views or indexes); empty: all."),
        "at": Param(
            None, type=["null", "integer"], title="Target time (ms)",
            description="Tick to this time (ms since the epoch); empty: every committed "
                        "write, or the upstream cluster's time for asset-triggered runs."),
    }


def build_dag(plan: ClusterDag, home: str, catalog_url: str | None,
              schedule: Any = None) -> DAG:
    """``schedule`` applies to clusters that read no other cluster (the roots);
    the others run when their upstream assets are updated."""
    if plan.upstream_assets:
        schedule = AssetAny(*(Asset(uri=u, name=u) for u in plan.upstream_assets))
    names = {n for t in plan.tasks for n in (t.task_id, t.on)}
    dag = DAG(
        dag_id=plan.dag_id,
        schedule=schedule,
        start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        catchup=False,
        max_active_runs=1,  # two runs would race to tick the same indexes
        default_args=DEFAULT_ARGS,
        params=params(names),
        tags=["mzflow", f"cluster:{plan.cluster}"],
        description=f"Maintains the indexes of mzflow cluster {plan.cluster!r} "
                    f"(pool {plan.pool}, {plan.slots} slots)",
        doc_md=_doc(plan),
    )
    with dag:
        ops: dict[str, MzflowTickOperator] = {}
        for t in plan.tasks:
            op = MzflowTickOperator(
                task_id=t.task_id, index=t.index, names=sorted(t.names()), home=home,
                catalog_url=catalog_url, pool=plan.pool, pool_slots=1, cluster=plan.cluster,
                outlets=[Asset(uri=t.asset, name=t.asset)],
                # An upstream skipped as up to date (or not selected) does not block.
                trigger_rule="none_failed",
                doc_md=f"Ticks index `{t.index}` on `{t.on}`.",
            )
            for u in t.upstream:
                ops[u] >> op
            ops[t.task_id] = op
    return dag


def build_sink_dag(plan: SinkDag, home: str, catalog_url: str | None) -> DAG:
    dag = DAG(
        dag_id=plan.dag_id,
        schedule=CronDataIntervalTimetable(plan.cron, timezone=plan.timezone),
        start_date=plan.start,  # in the sink's time zone: the DAG's time zone
        catchup=True,  # every interval is exported, the missed ones too ...
        max_active_runs=1,  # ... in order
        default_args=DEFAULT_ARGS,  # an export rewrites the same bytes: retries are safe
        tags=["mzflow", f"cluster:{plan.cluster}", "sink"],
        description=f"Exports mzflow sink {plan.sink!r} ({plan.source} → {plan.format} "
                    f"{plan.path}) every '{plan.schedule}' ({plan.timezone})",
        doc_md=_sink_doc(plan),
    )
    with dag:
        MzflowSinkOperator(task_id=EXPORT, sink=plan.sink, home=home, catalog_url=catalog_url,
                           pool=plan.pool, pool_slots=1,
                           doc_md=f"Exports sink `{plan.sink}` for the run's data interval.")
    return dag


def build(snap: Snapshot, home: str | Path, catalog_url: str | None = None,
          schedule: Any = None) -> dict[str, DAG]:
    """Every cluster's and every sink's DAG, keyed by dag id (what a DAG file puts in
    its globals)."""
    out = {p.dag_id: build_dag(p, str(home), catalog_url, schedule)
           for p in cluster_dags(snap)}
    for s in sink_dags(snap):
        if s.dag_id in out:  # a cluster named sink_<x>: its DAG keeps the id
            log.warning("mzflow: sink %s gets no DAG: %s is taken", s.sink, s.dag_id)
            continue
        out[s.dag_id] = build_sink_dag(s, str(home), catalog_url)
    return out


def load(home: str | None = None, catalog_url: str | None = None,
         schedule: Any = None) -> dict[str, DAG]:
    """The DAGs of the configured home (``mzflow.config``). A home without a catalog
    yet gives no DAGs rather than creating one from inside the dag-processor."""
    from mzflow import config
    from mzflow.catalog.store import Store

    cfg = config.load(home, catalog_url)
    if cfg.catalog_url.startswith("sqlite:///") and not Path(
            cfg.catalog_url.removeprefix("sqlite:///")).exists():
        log.warning("mzflow: no catalog at %s yet, no DAGs", cfg.catalog_url)
        return {}
    store = Store(cfg.catalog_url)
    try:
        snap = store.snapshot()
    finally:
        store.close()
    # Tasks get the explicit URL only when it is not the home's default SQLite file.
    url = None if cfg.catalog_url == f"sqlite:///{cfg.home / 'catalog.db'}" else cfg.catalog_url
    return build(snap, cfg.home, url, schedule)


def _sink_doc(plan: SinkDag) -> str:
    return (f"### mzflow sink `{plan.sink}`\n\nGenerated from the catalog: edit the sink "
            f"with SQL, not this DAG.\n\n| | |\n|---|---|\n| source | `{plan.source}` |\n"
            f"| into | {plan.format} `{plan.path}` |\n| envelope | {plan.envelope} |\n"
            f"| schedule | `{plan.schedule}` ({plan.timezone}) |\n"
            f"| first interval | {plan.start.isoformat()} |\n"
            f"| pool | `{plan.pool}` (cluster `{plan.cluster}`) |\n")


def _doc(plan: ClusterDag) -> str:
    rows = "\n".join(f"| `{t.task_id}` | `{t.index}` | `{t.on}` | "
                     f"{', '.join(t.upstream_assets) or '—'} |" for t in plan.tasks)
    return (f"### mzflow cluster `{plan.cluster}`\n\nGenerated from the catalog: edit the "
            f"catalog with SQL, not this DAG. Pool `{plan.pool}` ({plan.slots} slots).\n\n"
            f"| task | index | on | reads other clusters' |\n|---|---|---|---|\n{rows}\n")
