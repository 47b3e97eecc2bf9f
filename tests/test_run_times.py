"""The time a maintenance run ticks to (catalog/runs.py): recorded by the run's first
tick, read back by every later tick and retry of that run."""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy as sa

import mzflow
from mzflow.catalog import migrations, runs


def test_a_run_keeps_the_time_its_first_tick_recorded(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as conn:
        engine = conn.store.engine
        conn.execute("CREATE TABLE t (k int)")
        conn.execute("INSERT INTO t VALUES (1)")
        first = runs.run_time(engine, "mzflow_c/manual__1", 1_000)
        assert first == conn.store.snapshot().read_ts
        conn.execute("INSERT INTO t VALUES (2)")  # a write after the run's first tick
        newer = conn.store.snapshot().read_ts
        assert newer > first
        # The run's other ticks (and a retry) tick to the same time ...
        assert runs.run_time(engine, "mzflow_c/manual__1", 2_000) == first
        # ... a new run, or another task group of the same run, to the newest.
        assert runs.run_time(engine, "mzflow_c/manual__2", 3_000) == newer
        assert runs.run_time(engine, "mzflow_c/manual__1/maintain_b", 3_000) == newer


def test_old_records_are_pruned_by_later_runs(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as conn:
        engine = conn.store.engine
        runs.run_time(engine, "old", 1_000)
        runs.run_time(engine, "recent", runs.KEEP_MS)
        runs.run_time(engine, "new", runs.KEEP_MS + 1_500)
        with engine.connect() as c:
            kept = set(c.execute(sa.select(migrations.run_times.c.run_key)).scalars())
        assert kept == {"recent", "new"}


def test_ticks_of_one_run_starting_together_record_one_time(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path)) as conn:
        conn.execute("CREATE TABLE t (k int)")
        times: list[int] = []

        def first_tick(i: int) -> None:
            if i % 2:  # writes interleave with the ticks' first reads
                with mzflow.connect(str(tmp_path)) as other:
                    other.execute(f"INSERT INTO t VALUES ({i})")
            times.append(runs.run_time(conn.store.engine, "mzflow_c/run", 5_000))

        threads = [threading.Thread(target=first_tick, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(times) == 6 and len(set(times)) == 1


def test_a_dags_own_pick_task_still_gives_one_time_per_run(tmp_path: Path) -> None:
    # DAG files written before ticks recorded their run's time name a
    # MzflowPickTimeOperator as their ticks' time_task_id; it still works.
    from types import SimpleNamespace

    from mzflow.airflow import tasks

    home = str(tmp_path)
    with mzflow.connect(home) as conn:
        conn.execute("CREATE TABLE t (k int)")
        conn.execute("INSERT INTO t VALUES (1)")
        now = conn.store.snapshot().read_ts

    def context(run: str, **params: object) -> dict[str, object]:
        return {"params": params, "ti": SimpleNamespace(dag_id="d", run_id=run,
                                                        task_id="pick_time")}

    assert tasks.pick_time(home, None, context("r1", at=123)) == 123
    first = tasks.pick_time(home, None, context("r1"))
    assert first == now
    with mzflow.connect(home) as conn:
        conn.execute("INSERT INTO t VALUES (2)")
        later = conn.store.snapshot().read_ts
    assert tasks.pick_time(home, None, context("r1")) == first  # a retry
    assert tasks.pick_time(home, None, context("r2")) == later
