"""The soak's warm-cluster and blue/green parts (mzflow_dev/soak/warm.py, swaps.py;
issue 39 item 7), without a soak: the live catalog written as a desired file plans
exactly the view's change, the checker's oracle follows the view's definition over
time, the swap reads' invariants, the warm processes found from their records, and
soakmem's growth verdict. No Spark, no servers."""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter
from pathlib import Path

import pytest

import mzflow
from mzflow.deploy import bluegreen, desired, diff
from mzflow_dev.soak import ops, swaps, warm
from mzflow_dev.soak.checker import Checker
from mzflow_dev.soak.journal import Journal


def _soak_catalog(tmp_path: Path) -> mzflow.Connection:
    conn = mzflow.connect(str(tmp_path / "home"))
    for sql in ops.setup_sql("90s", str(tmp_path / "sinks")) + swaps.setup_sql():
        conn.execute(sql)
    # What the DDL worker does meanwhile: a column added, views and an index.
    conn.execute("ALTER TABLE t3 ADD COLUMN x5 int")
    conn.execute("CREATE VIEW pv1 AS SELECT DISTINCT name FROM t2")
    conn.execute("CREATE INDEX ix3 IN CLUSTER c1 ON t1 (k)")
    conn.execute("CREATE MATERIALIZED VIEW dv2 IN CLUSTER c2 AS SELECT * FROM pv1")
    return conn


def test_the_live_catalog_as_a_file_plans_only_the_views_change(tmp_path: Path) -> None:
    conn = _soak_catalog(tmp_path)
    try:
        live = conn.store.snapshot()
        for gen, same in ((0, True), (4, False)):
            wanted = desired.replay(swaps.desired_sql(live, gen))
            assert wanted.refused == []
            d = diff.diff(live, wanted.snapshot)
            assert d.refusals == []
            if same:  # generation 0 is the live one: nothing to do
                assert d.changes == []
                continue
            assert [(c.action, c.name) for c in d.changes] == [
                ("replace", "materialize.bg.mv_swap")]
            state = bluegreen.scope(live, wanted.snapshot, d)
            assert (state.schemas, state.clusters) == (["bg"], ["c3"])
        # The DDL worker created a view after the file was written: the plan would
        # drop it, in public, which holds tables: refused, nothing changed (counted).
        text = swaps.desired_sql(live, 5)
        conn.execute("CREATE MATERIALIZED VIEW dv9 IN CLUSTER c1 AS SELECT DISTINCT k FROM t1")
        moved = conn.store.snapshot()
        wanted = desired.replay(text)
        with pytest.raises(bluegreen.BlueGreenRefused, match="holds table"):
            bluegreen.scope(moved, wanted.snapshot, diff.diff(moved, wanted.snapshot))
        # The stored definition tells the checker which generation an index has.
        view = moved.find(swaps.VIEW, swaps.SCHEMA)
        assert view is not None and swaps.index_oracle(view) == "mv_swap_g0"
        assert swaps.index_oracle(moved.find("mv_agg")) is None
    finally:
        conn.close()


def _journal(tmp_path: Path, recs: list[dict]) -> Path:
    journals = tmp_path / "journals"
    journals.mkdir(exist_ok=True)
    j = Journal(journals / swaps.JOURNAL)
    for r in recs:
        j.write(**r)
    return journals


def test_the_oracle_follows_the_views_generations(tmp_path: Path) -> None:
    """Reads of generation 0 and 2 checked against DuckDB's view of each, the table
    replayed in between; a wrong answer, a mix, an error and a done apply that left the
    old view live are violations."""
    journals = _journal(tmp_path, [
        {"ev": "start", "gen": 2, "sql": "…"},
        # t1 at 15: (1, k=1, v=5), (2, k=1, v=7); at 25 also (3, k=2, v=1)
        {"ev": "swap_read", "started": 1.0, "at": 20, "columns": ["gen", "k", "n", "sv"],
         "rows": [[0, 1, 2, 12]]},
        {"ev": "swap_read", "started": 2.0, "at": 30, "columns": ["gen", "k", "n", "sv"],
         "rows": [[2, 1, 2, 7], [2, 2, 1, 1]]},  # gen 2 = VARIANTS[2]: over t2 …
        {"ev": "swap_read", "started": 3.0, "at": 30, "columns": ["gen", "k", "n", "sv"],
         "rows": [[0, 1, 2, 12], [2, 2, 1, 1]]},
        {"ev": "error", "op": "swap read", "started": 4.0, "type": "SparkFailure",
         "msg": "boom", "clean": True},
        {"ev": "done", "gen": 2, "live_gen": 0},
    ])
    checker = Checker(tmp_path / "home", journals)
    probes = swaps.read_probes(journals, {}, checker.fail, checker.counts)
    assert len(probes) == 2  # the mixed read is a violation, not a probe
    events = [(15, "t1", 1, "INSERT INTO t1 VALUES (1, 1, 5, 'x'), (2, 1, 7, 'y')"),
              (25, "t1", 2, "INSERT INTO t1 VALUES (3, 2, 1, 'x')"),
              (25, "t2", 1, "INSERT INTO t2 VALUES (1, 'ann', 3)")]
    views = checker.views()
    assert views["mv_swap_g0"] == swaps.select(0) and views["mv_swap_g2"] == swaps.select(2)
    checker._replay(events, probes, views)
    assert checker.counts["swap read checks"] == 2
    found = "\n".join(checker.violations)
    assert "mixed generations" in found
    assert "failed" in found and "boom" in found
    assert "generation 2 done, but the live view has generation 0" in found
    # The gen-0 read at 20 was right; the gen-2 read at 30 was not (t2 holds k=1 only).
    assert "swap read mv_swap_g2 at 30 differs" in found
    assert "mv_swap_g0 at 20" not in found


def test_an_aborted_generation_never_goes_live(tmp_path: Path) -> None:
    """Why the worker aborts: a file written before the DDL worker added a column plans
    a refusal (so its --resume is refused for good). And the checker's rule after an
    abort: a read, a finished apply or the live view with an aborted generation is a
    violation, also when the read was journaled before the abort."""
    conn = _soak_catalog(tmp_path)
    try:
        stale = swaps.desired_sql(conn.store.snapshot(), 3)
        conn.execute("ALTER TABLE t3 ADD COLUMN x6 int")
        moved = conn.store.snapshot()
        assert diff.diff(moved, desired.replay(stale).snapshot).refusals
        assert not diff.diff(moved, desired.replay(swaps.desired_sql(moved, 4)).snapshot
                             ).refusals  # a fresh file plans
        cols = ["gen", "k", "n", "sv"]
        journals = _journal(tmp_path, [
            {"ev": "start", "gen": 3, "sql": stale},
            {"ev": "swap_read", "started": 1.0, "at": 20, "columns": cols,
             "rows": [[0, 1, 2, 12]]},
            {"ev": "swap_read", "started": 2.0, "at": 30, "columns": cols,
             "rows": [[3, 1, 2, 12]]},  # never live: a violation found after the abort
            {"ev": "aborted", "gen": 3, "staged_gen": 3},
            {"ev": "start", "gen": 4, "sql": "…"},
            {"ev": "done", "gen": 4, "live_gen": 4},
        ])
        checker = Checker(tmp_path / "home", journals)
        swaps.read_probes(journals, {}, checker.fail, checker.counts)
        assert checker.counts["blue/green applies aborted"] == 1
        swaps.check_aborted(journals, moved, checker.fail, checker.counts)
        assert checker.violations == [
            "a read of bg.mv_swap at 30 saw generation 3, whose apply was aborted"]
        # The live view itself with the aborted generation.
        conn.execute("DROP MATERIALIZED VIEW bg.mv_swap")
        conn.execute(f"CREATE MATERIALIZED VIEW bg.mv_swap IN CLUSTER c3 AS {swaps.select(3)}")
        swaps.check_aborted(journals, conn.store.snapshot(), checker.fail, checker.counts)
        assert checker.violations[-1] == (
            "the live bg.mv_swap has generation 3, whose apply was aborted")
        assert checker.counts["aborted generation checks"] == 2
    finally:
        conn.close()


def test_warm_processes_from_their_records(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    gone = 2**22 + 12345  # beyond pid_max: no such process
    one, two = home / "clusters" / "1", home / "clusters" / "2"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    (one / "server.json").write_text(json.dumps(
        {"pid": gone, "jvm_pid": os.getpid(), "cluster": "c1"}))
    (one / "ticks.json").write_text(json.dumps({"pid": gone, "cluster": "c1"}))
    (two / "ticks.json").write_text("{torn")
    found = warm.processes(home)
    assert found == [warm.Warm(warm.SERVER, "1", "c1", os.getpid())]
    assert warm.rss_kb(os.getpid()) > 0 and warm.rss_kb(gone) == 0
    killed: list[tuple[int, int]] = []
    real_kill = os.kill  # signal 0 (is it alive?) still asks the kernel

    def kill(pid: int, sig: int) -> None:
        if sig == 0:
            real_kill(pid, sig)
        else:
            killed.append((pid, sig))

    monkeypatch.setattr(warm.os, "kill", kill)
    assert warm.kill_one(home, random.Random(1)) == found[0]
    assert killed == [(os.getpid(), signal.SIGKILL)]
    (one / "server.json").unlink()
    assert warm.processes(home) == [] and warm.kill_one(home, random.Random(1)) is None


def test_soakmems_verdict_on_the_warm_processes() -> None:
    base = {"tick service of warm": (10, 100_000), "cluster Spark server of warm": (11, 500_000)}
    assert warm.grown(base, {"tick service of warm": (10, 119_000),
                             "cluster Spark server of warm": (11, 600_000)}, 1.2) == []
    problems = warm.grown(base, {"tick service of warm": (10, 121_000),
                                 "cluster Spark server of warm": (12, 400_000)}, 1.2)
    assert len(problems) == 2
    assert "replaced (process 11 → 12)" in problems[0]
    assert "grew from 98 MB to 118 MB" in problems[1]
    assert warm.grown(base, {}, 1.2)[0].endswith("is gone")


def test_the_memory_report_per_warm_process() -> None:
    w = warm.Warm(warm.SERVICE, "1", "c1", 42)
    report = warm.memory_report([(w, 3, 2048), (w, 90, 4096), (w, 95, 0)])
    assert report == {"tick service c1 (42)": {"MB": [2, 4], "ticks served": [3, 90],
                                               "samples": 2}}


def test_ticks_recover_from_a_warm_kill(tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    journals.mkdir()
    coordinator, ticker = Journal(journals / "coordinator.jsonl"), Journal(
        journals / "ticker.jsonl")
    coordinator.write(ev="kill", name="tick service c1", pid=1, t=100.0)
    coordinator.write(ev="kill", name="cluster Spark server c2", pid=2, t=110.0)
    coordinator.write(ev="kill", name="cluster Spark server c3_mzflow_deploy", pid=3,
                      t=112.0)
    coordinator.write(ev="kill", name="w1", t=120.0)  # a worker: not a warm kill
    ticker.write(ev="tick", cluster="c1", t=105.0, served=False, error=None)
    ticker.write(ev="tick", cluster="c2", t=111.0, served=True, error="boom")  # failed
    ticker.write(ev="tick", cluster="c1", t=400.0, served=True, error=None)
    violations: list[str] = []
    counts: Counter = Counter()
    warm.check_recovery(journals, violations.append, counts)
    assert violations == ["no tick of cluster c2 succeeded after the kill of its cluster "
                          "Spark server at 110"]
    assert counts["warm kills recovered from (a later tick succeeded)"] == 1
    assert counts["warm kills after which the tick service served again"] == 1
    assert counts["warm kills with no later tick of that cluster (near the end, or "
                  "swapped)"] == 1


@pytest.mark.slow  # starts processes
def test_the_soaks_end_stops_supervisors_still_starting(tmp_path: Path) -> None:
    """A supervisor that has not published ``server.json`` yet (its JVM starting) is
    stopped too, found by its command line; another home's is left alone."""
    import subprocess
    import sys

    def fake_supervisor(home: Path, folder: str, cwd: Path) -> subprocess.Popen[bytes]:
        (home / "clusters" / "7").mkdir(parents=True, exist_ok=True)
        # The supervisor's command line, on a process that only sleeps.
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                 "-m", "mzflow.clusters.supervisor", folder], cwd=cwd,
                                start_new_session=True)

    home, other = tmp_path / "home", tmp_path / "other"
    starting = fake_supervisor(home, "home/clusters/7", tmp_path)  # relative, as started
    elsewhere = fake_supervisor(other, str(other / "clusters" / "7"), tmp_path)
    try:
        assert warm.supervisors(home) == {starting.pid}
        assert warm.stop_all(home, wait=10) == 1
        assert starting.wait(timeout=10) == -signal.SIGTERM
        assert elsewhere.poll() is None
    finally:
        for p in (starting, elsewhere):
            p.kill()
            p.wait()
