"""The machine's warm memory budget (issue 39, item 3): every warm cluster process of
the user, whatever its home, fits in ``warm_memory_budget`` together. A cluster that
does not fit starts nothing and ticks on the process's own Spark with a notice naming
the budget; the registry forgets processes that are gone; ``mzflow cluster status``
shows each process's memory and idle time.

Fast tests use a registry folder of their own with made-up entries (nothing is
started); the slow one runs real managed servers in two homes."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from pathlib import Path

import pytest

import mzflow
from mzflow import cli, config
from mzflow.catalog.model import Cluster
from mzflow.clusters import budget
from mzflow.maintain.ticks import TickReport
from mzflow.storage import processes

GB = 1 << 30
# No process has a pid above the kernel's limit: one that is certainly gone.
DEAD = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def cluster(name: str = "etl", size: str = "xsmall", cid: int = 2) -> Cluster:
    return Cluster(id=cid, name=name, size=size)


def tuning(value: str = "8GB") -> config.Tuning:
    return config.Tuning(warm_memory_budget=config.tuning_value("warm_memory_budget", value))


def put(registry: Path, pid: int, cluster: str, declared: int, home: str = "/h",
        cluster_id: int = 2, started_at: int | None = None) -> Path:
    registry.mkdir(parents=True, exist_ok=True)
    path = budget.entry_path(registry, pid)
    path.write_text(json.dumps({
        "pid": pid, "home": home, "cluster": cluster, "cluster_id": cluster_id,
        "declared": declared,
        "started_at": int(time.time() * 1000) if started_at is None else started_at}))
    return path


def test_a_cluster_declares_its_heap_overhead_service_and_hot_arrangements() -> None:
    small = budget.declared(cluster(size="small"), config.Tuning())
    assert (small.heap, small.hot) == (2 * GB, GB)  # hot_memory_share 0.5 of SIZE's 2g
    assert small.overhead == budget.JVM_OVERHEAD_MIN  # 10 % of 2g is under 384 MiB
    large = budget.declared(cluster(size="large"), config.Tuning(hot_arrangements=0))
    assert (large.heap, large.hot, large.overhead) == (8 * GB, 0, int(0.8 * GB))
    assert small.total == small.heap + small.overhead + small.service + small.hot


def test_admission_is_refused_over_the_budget_and_names_what_uses_it(tmp_path: Path) -> None:
    registry = tmp_path / "warm"
    put(registry, 101, "analytics", 3 * GB, "/home/a")
    put(registry, 102, "etl", 3 * GB, str(tmp_path / "b"))
    used = tmp_path / "b" / "clusters" / "2" / "last_used"  # its last tick: 10 min ago
    used.parent.mkdir(parents=True)
    used.touch()
    os.utime(used, (time.time() - 630, time.time() - 630))
    need = budget.declared(cluster(), tuning()).total  # 2.375 GB: 6 + 2.375 > 8
    assert 6 * GB + need > 8 * GB
    ask = budget.Ask(registry, tuning("8GB"))
    with pytest.raises(budget.OverBudget) as refused:
        with budget.admit(ask, tmp_path / "home", cluster("fresh"), alive=lambda pid: True):
            pytest.fail("admitted over the budget")
    message = refused.value.message
    assert message.startswith('cluster "fresh" ticks on the shared Spark: its warm '
                              "processes (2.4GB: a Spark server with a 1.0GB heap")
    assert "warm_memory_budget of 8.0GB (ALTER SYSTEM SET)" in message
    assert "6.0GB of which 2 warm clusters declare: analytics in /home/a (3.0GB), " \
           f"etl in {tmp_path / 'b'} (3.0GB, idle 10 min)" in message
    assert refused.value.code == "53000"
    assert len(list(registry.glob("*.json"))) == 2  # nothing registered
    # A budget it fits in admits it, and the entry it registers counts from then on.
    with budget.admit(budget.Ask(registry, tuning("9GB")), tmp_path / "home",
                      cluster("fresh"), alive=lambda pid: True) as register:
        path = register(103)
    entry = json.loads(path.read_text())
    assert (entry["cluster"], entry["declared"], entry["home"]) == (
        "fresh", need, str(tmp_path / "home"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(registry.stat().st_mode) == 0o700
    with pytest.raises(budget.OverBudget):
        with budget.admit(budget.Ask(registry, tuning("9GB")), tmp_path / "home",
                          cluster("another"), alive=lambda pid: True):
            pass


def test_the_registry_ignores_and_removes_processes_that_are_gone(tmp_path: Path) -> None:
    registry = tmp_path / "warm"
    gone = put(registry, DEAD, "dead", 6 * GB)
    put(registry, os.getpid(), "alive", GB)  # a live pid: both checked for real
    (registry / "stray.json").write_text("not json")
    assert [e.cluster for e in budget.live(registry)] == ["alive"]
    assert not gone.exists()
    # So a dead program's 6 GB no longer keeps a cluster out.
    put(registry, 202, "dead", 6 * GB)
    with budget.admit(budget.Ask(registry, tuning("4GB")), tmp_path / "h", cluster(),
                      alive=lambda pid: pid != 202) as register:
        register(203)
    assert sorted(p.name for p in registry.glob("*.json")) == sorted(
        [f"{os.getpid()}.json", "203.json", "stray.json"])
    assert [e.cluster for e in budget.live(registry)] == ["alive"]  # 203 is no process


def test_an_entry_whose_pid_went_to_a_newer_process_is_gone(tmp_path: Path) -> None:
    """pids are reused: an entry written before its pid's process started is about a
    supervisor that is gone, however alive the pid is."""
    registry = tmp_path / "warm"
    this_started = processes.started_ms(os.getpid())
    assert this_started is not None and abs(this_started / 1000 - time.time()) < 86_400 * 30
    stale = put(registry, os.getpid(), "before this process", 6 * GB,
                started_at=this_started - 3_600_000)
    assert budget.live(registry) == [] and not stale.exists()
    put(registry, os.getpid(), "this process", GB, started_at=this_started + 1_000)
    assert [e.cluster for e in budget.live(registry)] == ["this process"]


def test_two_starters_cannot_both_take_the_last_room(tmp_path: Path) -> None:
    registry = tmp_path / "warm"
    need = budget.declared(cluster(), tuning()).total
    ask = budget.Ask(registry, tuning(config.format_size(3 * need + need // 2)))
    admitted, refused = [], []
    start = threading.Barrier(8)

    def starter(pid: int) -> None:
        start.wait()
        try:
            with budget.admit(ask, tmp_path / "h", cluster(f"c{pid}"),
                              alive=lambda p: True) as register:
                time.sleep(0.01)  # a Popen's worth: another starter may be counting now
                register(pid)
                admitted.append(pid)
        except budget.OverBudget:
            refused.append(pid)

    threads = [threading.Thread(target=starter, args=(1000 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(admitted), len(refused)) == (3, 5)
    assert len(list(registry.glob("*.json"))) == 3


def test_sizes_auto_and_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MZFLOW_WARM_MEMORY_BUDGET", raising=False)
    assert config.parse_size("8GB") == 8 * GB
    assert config.parse_size("512 mb") == 512 << 20
    assert config.parse_size("1.5GB") == 3 * GB // 2
    assert config.parse_size("1024") == 1024
    assert config.parse_size("lots") is None and config.parse_size("8 GiBs") is None
    assert config.format_size(3 * GB // 2) == "1536MB"
    machine = budget.machine_memory()
    assert machine > 0
    assert budget.budget_bytes(config.Tuning()) == machine // 2
    with mzflow.connect(str(tmp_path / "home")) as conn:
        shown = conn.execute("SHOW warm_memory_budget").rows[0][0]
        assert shown == (f"auto ({budget.human(machine // 2)}: half of this machine's "
                         f"{budget.human(machine)})")
        conn.execute("ALTER SYSTEM SET warm_memory_budget = '8 gb'")
        assert conn.execute("SHOW warm_memory_budget").rows == [("8GB",)]
        tune = config.tuning(conn.store.snapshot().settings)
        assert budget.budget_bytes(tune) == 8 * GB
        with pytest.raises(mzflow.Error, match='invalid value for parameter '
                                               '"warm_memory_budget": "lots"'):
            conn.execute("ALTER SYSTEM SET warm_memory_budget = 'lots'")
        with pytest.raises(mzflow.Error, match="only be set with ALTER SYSTEM SET"):
            conn.execute("SET warm_memory_budget = '1GB'")
        conn.execute("ALTER SYSTEM RESET warm_memory_budget")
        assert conn.execute("SHOW warm_memory_budget").rows[0][0].startswith("auto (")


def test_a_cluster_that_does_not_fit_ticks_in_process_with_the_notice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No process starts: admission is decided before the supervisor would be."""
    from mzflow.session.cluster_spark import cluster_spark

    monkeypatch.setenv("MZFLOW_CLUSTER_SPARK", "managed")
    monkeypatch.setenv("MZFLOW_WARM_REGISTRY", str(tmp_path / "warm"))
    put(tmp_path / "warm", os.getpid(), "other", 4 * GB, "/elsewhere")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("CREATE CLUSTER etl (SIZE = 'xsmall')")
        conn.execute("CREATE TABLE t (k int)")
        conn.execute("CREATE MATERIALIZED VIEW m IN CLUSTER etl AS SELECT k FROM t")
        conn.execute("ALTER SYSTEM SET warm_memory_budget = '5GB'")
        snap = conn.store.snapshot()
        index = next(i for i in snap.items if i.cluster_id is not None)
        with cluster_spark(conn.config, snap, index) as notices:
            pass
    assert len(notices) == 1
    assert notices[0].startswith('cluster "etl" ticks on the shared Spark')
    assert "warm_memory_budget of 5.0GB" in notices[0] and "other in /elsewhere" in notices[0]
    assert not (tmp_path / "home" / "clusters" / str(index.cluster_id) / "spec.json").exists()
    report = TickReport("m", "m", "incremental", 1, 2, 0, 1, 0, 0, 0, None, 0.1,
                        notice=notices[0])
    assert report.line().endswith("\nNOTICE: " + notices[0])
    assert report.as_dict()["notice"] == notices[0]


def test_cluster_status_shows_each_process_memory_idle_time_and_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    registry = tmp_path / "warm"
    monkeypatch.setenv("MZFLOW_WARM_REGISTRY", str(registry))
    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE CLUSTER etl (SIZE = 'xsmall')")
        conn.execute("ALTER SYSTEM SET warm_memory_budget = '6GB'")
        etl = conn.store.snapshot().cluster_by_name("etl")
    # This process stands in for the supervisor, the JVM and the tick service.
    me = os.getpid()
    where = home / "clusters" / str(etl.id)
    where.mkdir(parents=True)
    (where / "server.json").write_text(json.dumps({"pid": me, "jvm_pid": me,
                                                   "url": "sc://127.0.0.1:1"}))
    (where / "ticks.json").write_text(json.dumps({"pid": me}))
    (where / "last_used").touch()
    then = time.time() - 150
    os.utime(where / "last_used", (then, then))
    put(registry, me, "etl", 2 * GB, str(home), etl.id)
    put(registry, DEAD, "gone", 2 * GB, "/gone")  # no such process: not shown
    assert cli.main(["--home", str(home), "cluster", "status"]) == 0
    out = capsys.readouterr().out
    assert "warm processes on this machine: 2.0GB declared of warm_memory_budget 6GB " \
           "(6.0GB), 1 cluster" in out
    row = next(line for line in out.splitlines() if str(home) in line)
    cells = [c.strip() for c in row.split("|")]
    assert cells[:3] == ["etl", str(home), str(me)]
    rss = cells[3:6]  # spark server, tick service, supervisor: this process's RSS
    assert all(re.fullmatch(r"\d+MB|\d+\.\dGB", c) for c in rss), cells
    assert cells[6] == "2.0GB"
    assert re.fullmatch(r"2 min 3\d s", cells[7]), cells
    assert "gone" not in out
    # Named as the catalog names the process's cluster now, not as when it started.
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE CLUSTER etl_next (SIZE = 'xsmall')")
        conn.execute("ALTER CLUSTER etl SWAP WITH etl_next")
    assert cli.main(["--home", str(home), "cluster", "status"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if str(home) in line)
    assert [c.strip() for c in row.split("|")][:3] == ["etl_next", str(home), str(me)]


def _newest_tick_ran_on(home: Path, view: str) -> str:
    from mzflow.maintain.ticks import SPARK_KEY, index_shard

    with mzflow.connect(str(home)) as conn:
        snap = conn.store.snapshot()
        item = snap.find(view)
        assert item is not None
        index = next(i for i in snap.indexes_on(item.id) if i.is_default_index)
        return str(index_shard(conn.config.warehouse, index).ticks(1)[0][SPARK_KEY])


def _view_and_recompute(home: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with mzflow.connect(str(home)) as conn:
        conn.execute("SET cluster = etl")
        kept = conn.execute("SELECT k, s FROM m ORDER BY k").rows
        conn.execute("SET cluster = default")  # no index there: computed from t
        again = conn.execute("SELECT k, sum(v) AS s FROM t GROUP BY k ORDER BY k").rows
    return kept, again


@pytest.mark.slow
@pytest.mark.spark
def test_two_homes_under_a_tiny_budget_the_second_ticks_on_the_shared_spark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real managed servers: home a's cluster takes the budget (one xsmall cluster
    declares 2.4 GB of 3 GB); home b's ticks in this process with the notice, and still
    right; once a's server stops, b's next tick starts its own."""
    registry = tmp_path / "warm"
    monkeypatch.setenv("MZFLOW_CLUSTER_SPARK", "managed")
    monkeypatch.setenv("MZFLOW_WARM_REGISTRY", str(registry))
    monkeypatch.delenv("MZFLOW_WARM_MEMORY_BUDGET", raising=False)
    homes = [tmp_path / "a", tmp_path / "b"]
    for n, home in enumerate(homes):
        with mzflow.connect(str(home)) as conn:
            conn.execute("ALTER SYSTEM SET warm_memory_budget = '3GB'")
            conn.execute("CREATE CLUSTER etl (SIZE = 'xsmall')")
            conn.execute("CREATE TABLE t (k int, v int)")
            conn.execute("CREATE MATERIALIZED VIEW m IN CLUSTER etl AS "
                         "SELECT k, sum(v) AS s FROM t GROUP BY k")
            conn.execute(f"INSERT INTO t VALUES (1, {n + 10}), (1, 3), (2, 5)")
    try:
        reports = {}
        for home in homes:
            with mzflow.connect(str(home)) as conn:
                reports[home] = conn.tick(cluster="etl")
        a, b = homes
        assert [r.notice for r in reports[a]] == [None]
        assert [e.home for e in budget.live(registry)] == [str(a)]
        url = json.loads((a / "clusters" / "2" / "server.json").read_text())["url"]
        assert _newest_tick_ran_on(a, "m") == url
        (notice,) = [r.notice for r in reports[b]]
        assert notice is not None and notice.startswith(
            'cluster "etl" ticks on the shared Spark: its warm processes (2.4GB')
        assert f"warm_memory_budget of 3.0GB (ALTER SYSTEM SET), 2.4GB of which 1 warm " \
               f"cluster declares: etl in {a} (2.4GB)" in notice
        assert "NOTICE: " + notice in reports[b][0].line()
        assert not (b / "clusters" / "2" / "spec.json").exists()  # nothing started
        assert _newest_tick_ran_on(b, "m") == "in-process"
        # Writes and deletes, ticked again where each runs: both equal a recompute.
        for home in homes:
            with mzflow.connect(str(home)) as conn:
                conn.execute("INSERT INTO t VALUES (3, 7), (2, 1)")
                conn.execute("DELETE FROM t WHERE k = 1 AND v = 3")
                again = conn.tick(cluster="etl")
            assert [r.notice is None for r in again] == [home == a]
        for home in homes:
            kept, recomputed = _view_and_recompute(home)
            assert kept == recomputed and len(kept) == 3, (home, kept, recomputed)
        # a's server stops: its room is free, and b's next tick starts its own server.
        with mzflow.connect(str(a)) as conn:
            conn.execute("DROP CLUSTER etl CASCADE")
        assert budget.live(registry) == []
        with mzflow.connect(str(b)) as conn:
            conn.execute("INSERT INTO t VALUES (4, 4)")
            assert [r.notice for r in conn.tick(cluster="etl")] == [None]
        assert [e.home for e in budget.live(registry)] == [str(b)]
        assert _newest_tick_ran_on(b, "m").startswith("sc://127.0.0.1:")
        kept, recomputed = _view_and_recompute(b)
        assert kept == recomputed and len(kept) == 4
    finally:
        for home in homes:  # no server outlives its test
            with mzflow.connect(str(home)) as conn:
                conn.execute("DROP CLUSTER IF EXISTS etl CASCADE")
