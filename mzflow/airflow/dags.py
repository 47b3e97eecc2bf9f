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

A cluster's DAG runs on its objects' refresh policies (``catalog/refresh.py``), with
Airflow's own timetables only, so the scheduler needs no plugin to read them: crons
(EVERY, ON SCHEDULE) as a ``CronTriggerTimetable`` or ``MultipleCronTriggerTimetable``
without catch-up (a late scheduler runs the latest due point once, and a new DAG's
first check runs it at once), instants (AT) as an ``EventsTimetable`` with catch-up
(every listed refresh runs, in order). A scheduled cluster that also reads other
clusters runs on either (``AssetOrTimeSchedule``). ON COMMIT objects run on the assets
of the tables they read, whose watchers turn every committed write into an event
(``assets.py``, ``triggers.py``); no timetable.

``mzflow_compact`` runs ``mzflow compact`` (one task, Airflow's default pool) every
``compaction_interval``, from the shortest RETAIN HISTORY unless ALTER SYSTEM sets it.

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

import pendulum
from airflow.sdk import (
    DAG,
    Asset,
    AssetOrTimeSchedule,
    CronDataIntervalTimetable,
    CronTriggerTimetable,
    DeltaTriggerTimetable,
    MultipleCronTriggerTimetable,
    Param,
)

from mzflow.airflow.assets import inputs
from mzflow.airflow.graph import (
    ClusterDag,
    CompactDag,
    SinkDag,
    cluster_dags,
    compact_dag,
    sink_dags,
)
from mzflow.airflow.operators import (
    MzflowCompactOperator,
    MzflowSinkOperator,
    MzflowTickOperator,
)
from mzflow.airflow.tasks import EXPORT
from mzflow.catalog.model import Snapshot
from mzflow.catalog.refresh import Schedule

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


START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def timetable(schedule: Schedule) -> Any:
    """Airflow's timetable for a refresh schedule."""
    if len(schedule.crons) == 1:
        return CronTriggerTimetable(schedule.crons[0], timezone=schedule.timezone)
    if schedule.crons:
        return MultipleCronTriggerTimetable(*schedule.crons, timezone=schedule.timezone)
    # Airflow core's, not the SDK's: Airflow 3.3's serializer drops the SDK one's
    # summary, which its decoder requires (apache/airflow#69401), so a DAG with the SDK
    # EventsTimetable cannot be parsed.
    from airflow.timetables.events import EventsTimetable

    return EventsTimetable(event_dates=[pendulum.from_timestamp(t / 1000) for t in
                                        schedule.ats], presorted=True,
                           description=f"REFRESH AT ({len(schedule.ats)} times)")


def build_dag(plan: ClusterDag, home: str, catalog_url: str | None,
              schedule: Any = None, warehouse: Path | None = None) -> DAG:
    """The DAG runs on its objects' refresh schedule, or, all ON COMMIT and reading no
    table, ``schedule``; it also runs when the assets it reads are updated: other
    clusters' indexes, and the tables its ON COMMIT objects read (``assets.py``)."""
    timed = timetable(plan.refresh) if plan.refresh is not None else None
    if timed is not None:
        schedule = timed
    assets = inputs(plan, warehouse if warehouse is not None else Path(home) / "warehouse")
    if assets is not None:
        schedule = assets if timed is None else AssetOrTimeSchedule(timetable=timed,
                                                                    assets=assets)
    events = plan.refresh is not None and not plan.refresh.crons
    names = {n for t in plan.tasks for n in (t.task_id, t.on)}
    dag = DAG(
        dag_id=plan.dag_id,
        schedule=schedule,
        # A list of REFRESH AT times runs each of them, in order (all past ones too).
        start_date=min([START, *(pendulum.from_timestamp(t / 1000) for t in plan.refresh.ats)])
        if events and plan.refresh is not None else START,
        catchup=events,
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


def build_compact_dag(plan: CompactDag, home: str, catalog_url: str | None) -> DAG:
    dag = DAG(
        dag_id=plan.dag_id,
        schedule=DeltaTriggerTimetable(dt.timedelta(milliseconds=plan.interval_ms)),
        start_date=START,
        catchup=False,  # compacting once catches up any number of missed runs
        max_active_runs=1,
        default_args=DEFAULT_ARGS,  # a compaction is safe to run again
        tags=["mzflow", "compaction"],
        description=f"Runs mzflow compact every {dt.timedelta(milliseconds=plan.interval_ms)}"
                    f" ({plan.reason})",
        doc_md=f"### mzflow compaction\n\nGenerated from the catalog: `mzflow compact` every "
               f"{dt.timedelta(milliseconds=plan.interval_ms)}, from {plan.reason}. Set "
               f"it with `ALTER SYSTEM SET compaction_interval = '<interval>'`.\n",
    )
    with dag:
        MzflowCompactOperator(task_id="compact", home=home, catalog_url=catalog_url,
                              doc_md="Advances since and reclaims storage (`mzflow compact`).")
    return dag


def build(snap: Snapshot, home: str | Path, catalog_url: str | None = None,
          schedule: Any = None, warehouse: Path | None = None) -> dict[str, DAG]:
    """Every cluster's and every sink's DAG, and the compaction DAG, keyed by dag id
    (what a DAG file puts in its globals)."""
    out = {p.dag_id: build_dag(p, str(home), catalog_url, schedule, warehouse)
           for p in cluster_dags(snap)}
    for s in sink_dags(snap):
        if s.dag_id in out:  # a cluster named sink_<x>: its DAG keeps the id
            log.warning("mzflow: sink %s gets no DAG: %s is taken", s.sink, s.dag_id)
            continue
        out[s.dag_id] = build_sink_dag(s, str(home), catalog_url)
    compact = compact_dag(snap)
    if compact is not None:
        if compact.dag_id in out:  # a cluster named compact keeps its DAG
            log.warning("mzflow: no compaction DAG: %s is taken", compact.dag_id)
        else:
            out[compact.dag_id] = build_compact_dag(compact, str(home), catalog_url)
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
    return build(snap, cfg.home, url, schedule, cfg.warehouse)


def _sink_doc(plan: SinkDag) -> str:
    return (f"### mzflow sink `{plan.sink}`\n\nGenerated from the catalog: edit the sink "
            f"with SQL, not this DAG.\n\n| | |\n|---|---|\n| source | `{plan.source}` |\n"
            f"| into | {plan.format} `{plan.path}` |\n| envelope | {plan.envelope} |\n"
            f"| schedule | `{plan.schedule}` ({plan.timezone}) |\n"
            f"| first interval | {plan.start.isoformat()} |\n"
            f"| pool | `{plan.pool}` (cluster `{plan.cluster}`) |\n")


def _doc(plan: ClusterDag) -> str:
    rows = "\n".join(f"| `{t.task_id}` | `{t.index}` | `{t.on}` | {t.refresh} | "
                     f"{', '.join(t.upstream_assets) or '—'} |" for t in plan.tasks)
    runs = (f" Runs {plan.refresh.describe()} (REFRESH policies)." if plan.refresh else "")
    return (f"### mzflow cluster `{plan.cluster}`\n\nGenerated from the catalog: edit the "
            f"catalog with SQL, not this DAG. Pool `{plan.pool}` ({plan.slots} slots).{runs}"
            f"\n\n| task | index | on | refresh | reads other clusters' |\n"
            f"|---|---|---|---|---|\n{rows}\n")
