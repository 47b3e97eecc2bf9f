"""Airflow pools in step with the catalog's clusters: create, resize, delete.

Every pool counts deferred tasks (``include_deferred``): a tick deferred while the
cluster's warm tick service runs it (operators.py) still holds its slot, so one
cluster's pool bounds its ticks whether they run in a worker or wait in the triggerer.

Runs against the Airflow metadata database of ``$AIRFLOW_HOME`` (its configured
``sql_alchemy_conn``) through Airflow's own ``Pool`` model, outside any task — the
way ``airflow pools set`` does it. Only pools this catalog created are ever deleted:
their description names the catalog's installation id, so two mzflow catalogs (or
hand-made pools that happen to start with ``mzflow_``) can share one Airflow.

>>> from mzflow.airflow.pools import sync            # doctest: +SKIP
>>> sync(store.snapshot())                           # doctest: +SKIP
[PoolChange(action='create', pool='mzflow_etl', slots=2)]
"""

from __future__ import annotations

from dataclasses import dataclass

from mzflow.airflow.graph import pool_name
from mzflow.airflow.graph import pools as wanted_pools
from mzflow.catalog.model import Snapshot

CREATE, RESIZE, DELETE, KEEP = "create", "resize", "delete", "keep"


@dataclass(frozen=True)
class PoolChange:
    action: str
    pool: str
    slots: int


def marker(installation_id: str) -> str:
    return f"[mzflow {installation_id}]"


def plan(snap: Snapshot, existing: dict[str, tuple[int, str]]) -> list[PoolChange]:
    """What to do, given existing pools (name → (slots, description)). Pure, so the
    CLI can print it with ``--dry-run`` and tests can check it without Airflow."""
    want = wanted_pools(snap)
    mine = marker(snap.installation_id)
    changes = []
    for name, slots in want.items():
        have = existing.get(name)
        action = CREATE if have is None else KEEP if have[0] == slots else RESIZE
        changes.append(PoolChange(action, name, slots))
    for name, (slots, description) in sorted(existing.items()):
        if name not in want and mine in (description or ""):
            changes.append(PoolChange(DELETE, name, slots))
    return changes


def sync(snap: Snapshot, dry_run: bool = False) -> list[PoolChange]:
    """Apply :func:`plan` to the Airflow database in one session (one transaction)."""
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    with create_session() as session:
        have = {p.pool: p for p in Pool.get_pools(session=session) if p.pool}
        existing = {name: (p.slots, p.description or "") for name, p in have.items()}
        changes = plan(snap, existing)
        if dry_run:
            return changes
        for ch in changes:
            # A pool made before deferrable ticks counted only running tasks: it now
            # counts deferred ones too, so a cluster's pool still bounds its ticks.
            stale = ch.action == KEEP and not have[ch.pool].include_deferred
            if ch.action in (CREATE, RESIZE) or stale:
                Pool.create_or_update_pool(
                    ch.pool, ch.slots, _description(snap, ch.pool), include_deferred=True,
                    session=session)
            elif ch.action == DELETE:
                Pool.delete_pool(ch.pool, session=session)
    return changes


def _description(snap: Snapshot, pool: str) -> str:
    cluster = next((c.name for c in snap.clusters if pool_name(c.name) == pool), pool)
    return f"mzflow cluster {cluster!r} {marker(snap.installation_id)}"
