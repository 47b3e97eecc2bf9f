"""What a generated task runs, in the worker (never at parse time).

mzflow itself is imported inside the callables: the DAG file only names them, so
the dag-processor never loads the runtime, let alone Spark or delta-rs. A tick goes
through ``mzflow.connect(...).tick(...)``, the same runtime as ``mzflow tick``.

Every run ticks all its tasks to one time, recorded by the run's first tick
(catalog/runs.py), so a run leaves the cluster's indexes consistent with each other.
A tick is one idempotent Delta commit (txn id ``tick-<index>`` + time): a retried
or duplicated task either finds the work done or does it once.

A sink's ``export`` task exports its run's data interval through
``mzflow.sinks.export.run``, which first catches up earlier intervals and writes
each one atomically under a name (or Delta commit) fixed by the interval, so a rerun
rewrites the same bytes or finds the commit done.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

EXPORT = "export"


def pick_time(home: str, catalog_url: str | None, context: Mapping[str, Any],
              cluster: str | None = None) -> int:
    """The time of a run's ``MzflowPickTimeOperator`` (DAGs written before ticks found
    their run's time themselves, see ``tick``): the same rules, recorded per pick task."""
    at = given_time(context)
    if at is not None:
        return at
    key = run_key(context, context["ti"].task_id)
    answer = _on_service(home, catalog_url, cluster, {"op": "run_time", "run": key})
    if answer is not None and "run_time" in answer:
        ts = int(answer["run_time"])
    else:
        ts = _recorded_time(home, catalog_url, key)
    log.info("mzflow: target time %s (every committed write)", ts)
    return ts


def given_time(context: Mapping[str, Any]) -> int | None:
    """The run's target time if the run says it: the ``at`` param; else, for a run
    triggered by asset events, the latest time they say their assets reached (another
    cluster's ticks, a table's writes), so the run catches up to exactly what its inputs
    hold, every event's write included: several events make one run. None: the run's
    first tick records every committed write's time (catalog/runs.py)."""
    at = context["params"].get("at")
    if at is not None:
        log.info("mzflow: target time %s (param at)", at)
        return int(at)
    upstream = [at for events in _events(context) for e in events
                if (at := _event_time(e.extra)) is not None]
    if upstream:
        log.info("mzflow: target time %s (from asset events)", max(upstream))
        return max(upstream)
    return None


def _event_time(extra: Mapping[str, Any] | None) -> int | None:
    """The time an asset event says its asset reached: an upstream tick's ``at``, or
    the write time in a table watcher's payload (triggers.py)."""
    if not extra:
        return None
    at = extra.get("at")
    if at is None and isinstance(extra.get("payload"), Mapping):
        at = extra["payload"].get("at")
    return None if at is None else int(at)


def run_key(context: Mapping[str, Any], scope: str = "") -> str:
    """What the run's ticks record their time under: the DAG run, and ``scope`` (a task
    group of its own, whose ticks may follow other work in the same run)."""
    ti = context["ti"]
    return "/".join(p for p in (ti.dag_id, ti.run_id, scope) if p)


def _recorded_time(home: str, catalog_url: str | None, key: str) -> int:
    import mzflow
    from mzflow.catalog import runs
    from mzflow.catalog.store import now_ms

    with mzflow.connect(home, catalog_url=catalog_url) as conn:
        return runs.run_time(conn.store.engine, key, now_ms())


def _events(context: Mapping[str, Any]) -> list[Any]:
    events = context.get("triggering_asset_events")
    return list(events.values()) if events else []


def tick(home: str, catalog_url: str | None, index: str, names: list[str],
         context: Mapping[str, Any], time_task_id: str | None = None,
         cluster: str | None = None, scope: str = "") -> dict[str, Any]:
    """Tick one index to the run's time; log and return what it read and wrote. The
    time: ``given_time``, else the one recorded for the run (and ``scope``) by its first
    tick; ``time_task_id`` names a pick task whose XCom holds it instead.

    Skips (no asset event, so nothing downstream is woken) when the run is restricted
    to other ``objects`` or when the index already holds that time — the latter is
    what ends the ping-pong between two clusters that read each other. The cluster's
    warm tick service runs the tick when there is one (clusters/tick_service.py): this
    task process then never imports the runtime."""
    request = tick_request(index, names, context, time_task_id, scope)
    master = _spark_connection()
    answer = _on_service(home, catalog_url, cluster, request, spark_master=master)
    return tick_done(home, catalog_url, index, request, context, answer, master)


def tick_request(index: str, names: list[str], context: Mapping[str, Any],
                 time_task_id: str | None = None, scope: str = "") -> dict[str, Any]:
    """The tick service's request for this task's tick (the time fixed: the run's
    ``at``, or the run whose recorded time it ticks to); skips a run restricted to
    other ``objects``."""
    from airflow.sdk.exceptions import AirflowSkipException

    params = context["params"]
    wanted = params.get("objects") or []
    if wanted and not set(wanted) & set(names):
        raise AirflowSkipException(f"not among the run's objects {wanted}")
    at = (context["ti"].xcom_pull(task_ids=time_task_id) if time_task_id is not None
          else given_time(context))
    run = run_key(context, scope) if at is None else None
    return {"op": "tick", "object": index, "at": at, "run": run,
            "full_refresh": bool(params.get("full_refresh")),
            "view_means_default_index": True}


def service_file(home: str, catalog_url: str | None, cluster: str | None) -> str | None:
    """The record of ``cluster``'s running tick service (a deferred tick's trigger
    calls it), or None: no service, or a configuration under which ticks do not run on
    the managed servers (tick_service.ask's rules), or a ``mzflow_spark`` connection."""
    if cluster is None or _spark_connection():
        return None
    from mzflow import config, errors
    from mzflow.clusters import tick_service

    try:
        cfg = config.load(home, catalog_url=catalog_url)
    except errors.Error:
        return None
    if cfg.cluster_spark != "managed" or cfg.spark_master != "local[*]":
        return None
    return tick_service.find_file(cfg.home, cfg.catalog_url, cluster)


def tick_done(home: str, catalog_url: str | None, index: str, request: dict[str, Any],
              context: Mapping[str, Any], answer: dict[str, Any] | None,
              master: str | None = None) -> dict[str, Any]:
    """Report the tick ``answer`` (a tick service's, directly or through a deferred
    task's trigger); without one, tick in this task process. Log it, set the outlets'
    asset events, return what it read and wrote; fail with the tick's error."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    at, run, full_refresh = request["at"], request["run"], request["full_refresh"]
    served = answer is not None and "reports" in answer
    if answer is not None and served:
        # A failed tick's answer has no "at": its error is what the task reports.
        at = answer.get("at", at)
        from mzflow.clusters import tick_service

        failure = tick_service.failure_of(answer)
        if failure is not None:
            if answer["error"]["type"] == "ExpectationFailed":
                # As below: the same rows fail on every retry; fixing them helps.
                raise AirflowFailException(f"{index}: {failure.message}\n"
                                           f"{failure.detail or ''}".strip())
            raise failure
        reports = answer["reports"]
    else:
        at, reports = _tick_here(home, catalog_url, index, at, run, full_refresh, master)
    if not reports:
        raise AirflowFailException(f"{index} is no longer maintained")
    report = reports[0]
    log.info("mzflow tick: %s", report["line"])
    out = {
        "index": report["index"], "on": report["on"], "strategy": report["strategy"],
        "frontier_before": report["upper_before"], "frontier_after": report["upper_after"],
        "version_before": report["version_before"], "version_after": report["version_after"],
        "rows_read": report["rows_read"], "files_read": report["files_read"],
        "rows_changed": report["rows_changed"], "error": report["error"],
        "seconds": round(report["seconds"], 3), "spark_jobs": report["spark_jobs"], "at": at,
        "served_by": "tick service" if served else "task process",
    }
    if report["error"]:
        # An evaluation error is deterministic: retrying cannot help, fixing the data can.
        raise AirflowFailException(f"{report['index']}: {report['error']}")
    if report["upper_after"] == report["upper_before"]:
        raise AirflowSkipException(f"already up to date through {report['upper_after'] - 1}")
    # The asset event carries the time reached: downstream clusters tick to it.
    outlets = context.get("outlet_events")
    task = context.get("task")
    if outlets is not None and task is not None:
        for asset in task.outlets:
            outlets[asset].extra = {"at": at, "version": report["version_after"]}
    return out


def _tick_here(home: str, catalog_url: str | None, index: str, at: int | None,
               run: str | None, full_refresh: bool, spark_master: str | None
               ) -> tuple[int, list[dict[str, Any]]]:
    """The tick in this task process (no tick service, or it did not take it): the time
    it ticked to (``at``, else the one recorded for ``run``) and its reports."""
    from airflow.sdk.exceptions import AirflowFailException

    import mzflow
    from mzflow.catalog import runs
    from mzflow.catalog.store import now_ms
    from mzflow.maintain import ticks
    from mzflow.quality.validate import ExpectationFailed

    with mzflow.connect(home, catalog_url=catalog_url, spark_master=spark_master) as conn:
        if at is None:
            at = (runs.run_time(conn.store.engine, run, now_ms()) if run is not None
                  else conn.store.snapshot().read_ts)
        name = ticks.default_index_name(conn.store.snapshot(), index)
        try:
            # The cluster's sources advance once per run (its time keys the step).
            snap = conn.store.snapshot()
            for cluster_id in {i.cluster_id for i in ticks.indexes_to_tick(snap, None, name)}:
                cluster = snap.cluster(cluster_id)
                if cluster is not None:
                    conn.feed_sources(cluster.name, at)
            found = conn.tick(object=name, at=at, full_refresh=full_refresh)
        except ExpectationFailed as e:
            # A FAIL expectation: the same rows fail on every retry; fixing them helps.
            raise AirflowFailException(f"{index}: {e}\n{e.detail or ''}".strip()) from e
    return at, [r.as_dict() for r in found]


def _on_service(home: str, catalog_url: str | None, cluster: str | None,
                request: dict[str, Any], spark_master: str | None = None
                ) -> dict[str, Any] | None:
    """``request`` answered by the cluster's tick service; None: the task does the work
    (no service, or the ``mzflow_spark`` connection names a Spark: ``spark_master``)."""
    if spark_master:
        return None
    from mzflow.clusters import tick_service

    return tick_service.ask(home, catalog_url, cluster, request)


def export(home: str, catalog_url: str | None, sink: str,
           context: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Export the sink's intervals through the run's data interval; log and return
    one record per interval (earlier ones the runtime caught up included)."""
    from airflow.sdk.exceptions import AirflowFailException

    import mzflow
    from mzflow.catalog import schedules
    from mzflow.catalog import sinks as catalog_sinks
    from mzflow.sinks import export as sinks
    from mzflow.sinks.files import ExportError

    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        raise AirflowFailException("a sink run needs a data interval (a scheduled run, or "
                                   "a manual one with a logical date)")
    if schedules.to_ms(end) > time.time() * 1000:
        # Only a manual run can get here; retrying after the interval ends helps.
        raise RuntimeError(f"interval ending {end.isoformat()} has not ended yet")
    master = _spark_connection()
    try:
        with mzflow.connect(home, catalog_url=catalog_url, spark_master=master) as conn:
            spec = catalog_sinks.spec(conn.store.snapshot().resolve(sink))
            interval = sink_interval(spec.schedule, spec.timezone, start, end)
            if interval != (start, end):
                log.warning("mzflow sink: Airflow's interval %s .. %s is not one of sink "
                            "%s's intervals; exporting through %s .. %s", start.isoformat(),
                            end.isoformat(), sink, interval[0].isoformat(),
                            interval[1].isoformat())
            done = sinks.run(conn.store, conn.config.warehouse, sink, interval=interval,
                             on_progress=lambda e: log.info("mzflow sink: %s", e.line()))
    except ExportError:
        raise  # I/O: a retry may succeed
    except mzflow.Error as e:
        # The sink is gone, its options or its data are wrong: retrying cannot help.
        raise AirflowFailException(f"sink {sink}: {e}") from e
    return [{"start": e.start.isoformat(), "end": e.end.isoformat(), "target": e.target,
             "rows": e.rows, "changes": e.changes, "skipped": e.skipped,
             "seconds": round(e.seconds, 3)} for e in done]


def compact(home: str, catalog_url: str | None) -> list[dict[str, Any]]:
    """``mzflow compact``: log and return what each object's compaction did."""
    import mzflow

    with mzflow.connect(home, catalog_url=catalog_url) as conn:
        done = conn.compact()
    out = [{"object": c.table, "kind": c.kind, "since": c.since, "version": c.version,
            "files_merged": c.files_merged, "files_removed": c.files_removed} for c in done]
    for c in out:
        log.info("mzflow compact: %s (%s): since %s, version %s, %s files merged, %s removed",
                 c["object"], c["kind"], c["since"], c["version"], c["files_merged"],
                 c["files_removed"])
    return out


def sink_interval(schedule: str, timezone: str, start: dt.datetime, end: dt.datetime
                  ) -> tuple[dt.datetime, dt.datetime]:
    """The sink's own interval for Airflow's ``[start, end)``: the same one, since
    ``catalog/schedules.py`` steps exactly as Airflow's cron timetables do (DST
    included; tests/test_airflow_sinks.py compares them). Should they ever disagree
    (a changed Airflow), the run exports through the sink's last interval that ends
    by ``end``: every interval still once and in order, the runtime catching up."""
    from mzflow.catalog import schedules

    if schedules.is_interval(schedule, timezone, start, end):
        return start, end
    end_ms = schedules.to_ms(end)
    s, e = schedules.containing(schedule, timezone, end_ms - 1)
    if schedules.to_ms(e) > end_ms:
        s, e = schedules.containing(schedule, timezone, schedules.to_ms(s) - 1)
    return s, e


def _spark_connection() -> str | None:
    """The Spark master the ``mzflow_spark`` connection names, if there is one: the
    task's connection to mzflow is opened with it (``mzflow.connect(spark_master=…)``)."""
    from mzflow.airflow.hooks import CONN_ID, MzflowSparkHook

    master = MzflowSparkHook().master()
    if master is not None:
        log.info("mzflow: Spark master %s (connection %s)", master, CONN_ID)
    return master



def deploy(home: str, catalog_url: str | None, decls: list[dict[str, Any]]) -> list[str]:
    """Apply DAG-as-code declarations (``dsl.py``) to the catalog, idempotently: what
    exists is left alone (a cluster whose SIZE differs is resized), what is missing is
    created in declaration order. Safe to retry and to run twice."""
    import mzflow
    from mzflow.catalog import names

    done = []
    with mzflow.connect(home, catalog_url=catalog_url) as conn:
        for d in decls:
            snap = conn.store.snapshot()
            if d["kind"] == "cluster":
                have = snap.find_cluster(d["name"])
                if have is None:
                    conn.execute(d["sql"])
                    done.append(f"created cluster {d['name']}")
                elif d.get("size") and not have.virtual and have.size != d["size"]:
                    conn.execute(d["alter_sql"])
                    done.append(f"resized cluster {d['name']} to {d['size']}")
            elif names.find(snap, d["name"]) is None:
                conn.execute(d["sql"])
                done.append(f"created {d['kind']} {d['name']}")
    for line in done or ["catalog already up to date"]:
        log.info("mzflow deploy: %s", line)
    return done
