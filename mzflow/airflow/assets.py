"""The Airflow Assets a cluster's DAG is scheduled on (names from ``graph.py``).

An upstream index is a plain asset, updated by the tick task that maintains it. A table
is an asset with a watcher: ``triggers.TableWriteTrigger`` in the triggerer turns each
write mzflow commits to it into an event. Why a watcher, rather than the writer posting
asset events through Airflow's REST API: a writer (``mzflow sql``, ``mzflow serve``,
the Python API) then needs no Airflow address, credentials or availability, a write
never fails or waits because Airflow is down, and a triggerer that was down catches up
from the Delta log, the writes' own record (see ``triggers.py``).
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import Asset, AssetAny, AssetWatcher

from mzflow.airflow.graph import ClusterDag, TableInput
from mzflow.airflow.triggers import TableWriteTrigger
from mzflow.storage import paths


def table_asset(table: TableInput, warehouse: Path) -> Asset:
    log = paths.table(warehouse, table.id) / "_delta_log"
    trigger = TableWriteTrigger(table=table.name, log_dir=str(log))
    return Asset(uri=table.uri, name=table.uri,
                 watchers=[AssetWatcher(name=table.uri, trigger=trigger)])


def inputs(plan: ClusterDag, warehouse: Path) -> AssetAny | None:
    """Any of: the upstream indexes' assets, the tables' its ON COMMIT objects read. A
    run started by several events (or by events that came while a run was active:
    ``max_active_runs=1`` queues them) is one run, which ticks once to the newest of
    their times."""
    found = [Asset(uri=u, name=u) for u in plan.upstream_assets]
    found += [table_asset(t, warehouse) for t in plan.tables]
    return AssetAny(*found) if found else None
