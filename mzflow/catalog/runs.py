"""The time a maintenance run ticks to, recorded once per run.

Every tick of one Airflow run of a cluster's DAG targets one time, so that the run
leaves the cluster's indexes consistent with each other. The run's first tick records
the catalog's newest time under the run's key (its DAG and run id); every later tick of
the run, and a retry of any of them, reads it back. This replaced a ``pick_time`` task
that ran before the ticks: that was a whole Airflow task (a process, a DAG parse, state
calls to the API server), about a second of every run's trigger-to-success time
(issue 18's 4 s target).

Like read holds, these rows are not DDL: they never bump ``catalog_version``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mzflow.catalog import migrations

# Kept this long, then pruned by a later run's record: a task retried after that
# would tick to the newest time instead (still a consistent run, only a later one).
KEEP_MS = 30 * 24 * 3600 * 1000


def run_time(engine: Engine, key: str, now_ms: int) -> int:
    """The time recorded for run ``key``, recording the newest committed time if the run
    has none yet. Under the catalog's write lock: two ticks of one run starting at once
    record one time."""
    t = migrations.run_times
    meta = migrations.meta
    with migrations.begin_write(engine) as conn:
        found = conn.execute(sa.select(t.c.ts).where(t.c.run_key == key)).scalar()
        if found is not None:
            return int(found)
        ts = int(conn.execute(sa.select(meta.c.value).where(meta.c.key == "read_ts")
                              ).scalar_one())
        conn.execute(t.delete().where(t.c.recorded_at < now_ms - KEEP_MS))
        conn.execute(t.insert().values(run_key=key, ts=ts, recorded_at=now_ms))
        return ts
