"""Materialize's ``mz_internal`` relations that dbt-materialize's blue/green macros
(``deploy_init``, ``deploy_await``, ``deploy_promote``) read, with Materialize's names
and columns: cluster schedules, default privileges, replica status history, the
current lag of each maintained object.

mzflow's clusters are scheduled by their objects' REFRESH policies, not by a cluster
schedule: each has Materialize's default, ``manual``. A cluster's one replica is never
killed for memory by an orchestrator (a failed tick is the object's error), so the
replica status history has no rows. The current lag is maintain/freshness.py's, filled
in as a read source (a catalog-only reader sees none).
"""

from __future__ import annotations

from mzflow.catalog import default_privileges
from mzflow.catalog.model import Snapshot
from mzflow.catalog.system import Row, SystemTable, _cols


def _schedule_rows(snap: Snapshot) -> list[Row]:
    return [(c.id, "manual", None) for c in snap.clusters]


TABLES: tuple[SystemTable, ...] = (
    # cluster_id as mz_clusters.id is here (bigint).
    SystemTable("mz_cluster_schedules",
                _cols("cluster_id bigint, type text, refresh_hydration_time_estimate "
                      "interval null"), (), _schedule_rows),
    SystemTable("mz_default_privileges",
                _cols("role_id text, database_id text null, schema_id text null, "
                      "object_type text, grantee text, privileges text"), (),
                default_privileges.catalog_rows),
    SystemTable("mz_show_default_privileges",
                _cols("object_owner text, database text null, schema text null, "
                      "object_type text, grantee text, privilege_type text"), (),
                default_privileges.show_rows),
    SystemTable("mz_cluster_replica_status_history",
                _cols("replica_id text, process_id bigint, status text, reason text null, "
                      "occurred_at timestamp with time zone"), (), lambda snap: []),
    # Materialize lists its own replicas here (mzflow has none).
    SystemTable("mz_internal_cluster_replicas", _cols("id text"), (), lambda snap: []),
    # The lag of each maintained object now (NULL before its first tick).
    SystemTable("mz_wallclock_global_lag", _cols("object_id text, lag interval null"), (),
                lambda snap: []),
)
