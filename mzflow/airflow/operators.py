"""mzflow's Airflow operators: thin, they delegate to ``tasks.py`` (provider style).

They import only ``airflow.sdk`` at module level, so DAG files that use them parse
without loading mzflow's runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from mzflow.airflow import tasks


class MzflowPickTimeOperator(BaseOperator):
    """The one time every tick of a run targets, as a task of its own. Generated DAGs no
    longer have it (a tick finds its run's time itself: catalog/runs.py); kept for DAG
    files that name it as their ticks' ``time_task_id``."""

    ui_color = "#e8f1fb"

    def __init__(self, *, home: str, catalog_url: str | None = None,
                 cluster: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.home, self.catalog_url, self.cluster = home, catalog_url, cluster

    def execute(self, context: Any) -> int:
        return tasks.pick_time(self.home, self.catalog_url, context, self.cluster)


def _default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (False unless set), as every
    provider's deferrable operator reads it: deferral needs a running triggerer."""
    from airflow.sdk.configuration import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


class MzflowTickOperator(BaseOperator):
    """Tick one maintained index (``mzflow tick --object <index>``) to the run's time:
    the ``at`` param, the upstream cluster's time, the one recorded for the run (and
    ``run_scope``) by its first tick, or the XCom of the pick task ``time_task_id``.

    ``deferrable`` (default: Airflow's ``[operators] default_deferrable``): when the
    cluster's warm tick service runs, hand it the tick and defer, so the worker slot
    is free while the cluster ticks; the triggerer waits for the answer (triggers.py's
    ``TickTrigger``) and ``execute_complete`` reports it as ``execute`` would. With no
    service, the task ticks in its own process, deferrable or not."""

    template_fields: Sequence[str] = ("index",)
    ui_color = "#d6eadf"

    def __init__(self, *, index: str, home: str, catalog_url: str | None = None,
                 names: Sequence[str] = (), time_task_id: str | None = None,
                 cluster: str | None = None, run_scope: str = "",
                 deferrable: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index, self.home, self.catalog_url = index, home, catalog_url
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self.names = list(names) or [index]
        self.time_task_id = time_task_id  # a MzflowPickTimeOperator, if the DAG has one
        self.cluster = cluster  # whose warm tick service may run it (tick_service.py)
        self.run_scope = run_scope  # ticks sharing a run's time: the DAG's, or a group's

    def execute(self, context: Any) -> dict[str, Any]:
        if self.deferrable:
            where = tasks.service_file(self.home, self.catalog_url, self.cluster)
            if where is not None:
                request = tasks.tick_request(self.index, self.names, context,
                                             self.time_task_id, self.run_scope)
                from mzflow.airflow.triggers import TickTrigger

                self.log.info("mzflow: tick handed to cluster %s's tick service; deferring",
                              self.cluster)
                self.defer(trigger=TickTrigger(where, request),
                           method_name="execute_complete", kwargs={"request": request})
        self._done = tasks.tick(self.home, self.catalog_url, self.index, self.names,
                                context, self.time_task_id, self.cluster, self.run_scope)
        return self._done

    def execute_complete(self, context: Any, event: dict[str, Any],
                         request: dict[str, Any]) -> dict[str, Any]:
        """Resumed after the trigger fired: the service's answer reported as ``execute``
        reports it (XCom, asset events, lineage); the tick done here if no service
        took it."""
        answer = event.get("answer") if event.get("status") == "answer" else None
        self._done = tasks.tick_done(self.home, self.catalog_url, self.index, request,
                                     context, answer)
        return self._done

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The tables read at the run's time in, the index out (lineage.py)."""
        from mzflow.airflow import lineage

        done = getattr(self, "_done", {})
        snap = lineage.snapshot(self.home, self.catalog_url)
        return lineage.operator_lineage(lineage.of_index(snap, done.get("index", self.index)),
                                        done.get("at"), done.get("version_after"),
                                        done.get("rows_changed"))


class MzflowSinkOperator(BaseOperator):
    """Export a sink's changes for the run's data interval (``mzflow.sinks.export``)."""

    template_fields: Sequence[str] = ("sink",)
    ui_color = "#efe3f7"

    def __init__(self, *, sink: str, home: str, catalog_url: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sink, self.home, self.catalog_url = sink, home, catalog_url

    def execute(self, context: Any) -> list[dict[str, Any]]:
        self._done = tasks.export(self.home, self.catalog_url, self.sink, context)
        return self._done

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The source's tables in, the sink's target out (lineage.py)."""
        from mzflow.airflow import lineage

        done = getattr(self, "_done", [])
        snap = lineage.snapshot(self.home, self.catalog_url)
        return lineage.operator_lineage(lineage.of_sink(snap, self.sink), None, None,
                                        sum(e["rows"] for e in done) if done else None)


class MzflowCompactOperator(BaseOperator):
    """Advance since and reclaim storage of every table and index (``mzflow compact``)."""

    ui_color = "#f3ead9"

    def __init__(self, *, home: str, catalog_url: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.home, self.catalog_url = home, catalog_url

    def execute(self, context: Any) -> list[dict[str, Any]]:
        return tasks.compact(self.home, self.catalog_url)


class MzflowDeployOperator(BaseOperator):
    """Create the DAG file's declared mzflow objects that the catalog lacks (dsl.py)."""

    ui_color = "#fdf1d6"

    def __init__(self, *, home: str, decls: list[dict[str, Any]],
                 catalog_url: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.home, self.catalog_url, self.decls = home, catalog_url, decls

    def execute(self, context: Any) -> list[str]:
        return tasks.deploy(self.home, self.catalog_url, self.decls)
