"""Who plugs into the session's two lists (issue 33): the one place that names the
features for the core's sake. The write hooks (catalog/hooks.py) run in this order:
validation, then projection upkeep. The read sources (read/sources.py): the system
tables whose rows live outside the catalog snapshot, and projection routing.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from mzflow.catalog.hooks import WriteHook
from mzflow.catalog.store import Store
from mzflow.clusters import servers as cluster_servers
from mzflow.maintain import arrangements, freshness
from mzflow.projections import manage as projection_storage
from mzflow.projections import route as projection_routing
from mzflow.projections import write as projection_upkeep
from mzflow.quality import write as expectations
from mzflow.read import holds
from mzflow.read.sources import ReadSources
from mzflow.storage import landing


def write_hooks(store: Store, warehouse: Path) -> list[WriteHook]:
    """The hooks, and each one's recovery under every write lock of ``store``."""
    hooks = [expectations.HOOK, projection_upkeep.HOOK]
    for hook in hooks:
        if hook.on_lock is not None:
            store.on_lock.append(partial(hook.on_lock, warehouse))
    return hooks


def read_sources(store: Store, warehouse: Path) -> ReadSources:
    sources = ReadSources()
    # kept by the catalog store outside the snapshot
    sources.add_rows(["mz_expectation_results"], lambda snap: store.expectation_results())
    sources.add_rows(["mz_read_holds"], lambda snap: holds.rows(store))
    # from storage: the arrangement shards, the index shards' tick commits
    sources.add_rows(["mz_arrangements"], partial(arrangements.rows, warehouse=warehouse))
    sources.add_rows(["mz_arrangement_sizes"], partial(arrangements.sizes,
                                                       warehouse=warehouse))
    sources.add_rows(["mz_wallclock_lag_history"],
                     partial(freshness.lag_history, warehouse=warehouse))
    sources.add_rows(["mz_copy_history"], partial(landing.rows, warehouse=warehouse))
    sources.add_rows(["mz_hydration_statuses"],
                     partial(freshness.hydration, warehouse=warehouse))
    sources.add_rows(["mz_wallclock_global_lag"],
                     partial(freshness.global_lag, warehouse=warehouse))
    for name in projection_storage.SYSTEM_TABLES:
        sources.add_rows([name], partial(projection_storage.system_rows, name,
                                         warehouse=warehouse))
    # the cluster servers' folders
    sources.add_rows(["mz_cluster_replicas"],
                     partial(cluster_servers.replica_rows, home=warehouse.parent))
    sources.set_router(projection_routing.ROUTER)
    return sources
