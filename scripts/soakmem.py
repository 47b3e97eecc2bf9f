"""Memory of one long-lived process (issue 19's memory invariant): ``make soakmem``.

One process keeps seven small maintained views over three 10-row tables (joins, GROUP
BY, DISTINCT, UNION ALL, an opaque DISTINCT ON) and runs N steps; a step is a write
(an INSERT or DELETE), a tick of one maintained index (in turn), and a read (a view,
an ad hoc join, or a view ``AS OF`` an earlier time). After step ``--baseline`` (100)
and step N (1,000) it prints the JVM heap in use after full collections, the Python
RSS after ``gc.collect()``, and what Spark retains (``spark.retained()``); it exits 1
when either figure at N exceeds ``--limit`` (1.2) times its value at the baseline.
``--histogram N`` also prints the JVM's largest classes of live objects and those that
grew most (``jcmd GC.class_histogram``), ``--dump DIR`` writes a live heap dump per
figure, ``--objects`` the Python types that grew; each figure says how the ticks since
the last one ran (recomputes broadcast; incremental ticks do not).

On the default configuration (issue 39) the views live in a SIZEd cluster, so the
ticks run as users' do: through the cluster's warm tick service (which holds its hot
arrangements) on the cluster's managed Spark Connect server. Each of those two
processes must stay within ``--limit`` times its RSS at the baseline too (and must not
have been replaced meanwhile). ``--cluster-spark in-process`` ticks in this process,
as before.

    python scripts/soakmem.py --ticks 1000
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from mzflow.storage import processes

TABLES = "abc"
VIEWS = [
    "SELECT a.k, b.v FROM a JOIN b ON a.k = b.k",
    "SELECT a.v, count(*) AS n, sum(b.k) AS s FROM a JOIN b ON a.k = b.k GROUP BY a.v",
    "SELECT a.k, c.w FROM a JOIN c ON a.v = c.v WHERE a.k > 2",
    "SELECT DISTINCT v FROM c",
    "SELECT b.v, max(c.k) AS m FROM b JOIN c ON b.k = c.k GROUP BY b.v",
    "SELECT k, v FROM a UNION ALL SELECT k, v FROM b",
    # DISTINCT ON is left opaque (recomputed at both times), the join over it delta.
    "SELECT x.v, c.k FROM (SELECT DISTINCT ON (v) v, k FROM a ORDER BY v, k) x "
    "JOIN c ON x.v = c.v",
]
READS = [
    "SELECT * FROM v{i}",
    "SELECT a.k, count(*) FROM a JOIN b ON a.k = b.k JOIN c ON b.v = c.v GROUP BY a.k",
    "SELECT * FROM v{i} AS OF {t}",
    "SELECT DISTINCT w FROM c UNION ALL SELECT w FROM a",
]


def rss() -> int:
    """This process's resident set, in bytes."""
    return processes.rss_bytes() or 0


def histogram() -> dict[str, tuple[int, int]]:
    """The in-process JVM's live objects per class (``jcmd GC.class_histogram``, which
    runs a full collection first): class name → (instances, bytes)."""
    from mzflow.engine import spark

    pid = spark.session()._jvm.java.lang.ProcessHandle.current().pid()
    out = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)", line)
        if m:
            rows[m.group(3)] = (int(m.group(1)), int(m.group(2)))
    return rows


def show_histogram(classes: dict[str, tuple[int, int]], top: int) -> None:
    now = histogram()
    total = sum(b for _, b in now.values())
    print(f"  JVM live objects: {total / 2**20:.1f} MB; largest classes:", flush=True)
    for name, (n, b) in sorted(now.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"    {b / 2**20:8.1f} MB {n:9d}  {name}", flush=True)
    if classes:
        grown = sorted(((b - classes.get(c, (0, 0))[1], n - classes.get(c, (0, 0))[0], c)
                        for c, (n, b) in now.items()), reverse=True)[:top]
        print("  grown since the last figure:", flush=True)
        for db, dn, name in grown:
            print(f"    {db / 2**20:+8.1f} MB {dn:+9d}  {name}", flush=True)
    classes.clear()
    classes.update(now)


def measure(step: int, began: float, modes: Counter[str], objects: Counter[str] | None,
            classes: dict[str, tuple[int, int]] | None, top: int,
            dump: Path | None) -> tuple[int, int]:
    import pyarrow as pa

    from mzflow.engine import spark

    gc.collect()
    heap, resident = spark.heap_after_gc(), rss()
    print(f"step {step} ({time.monotonic() - began:.0f} s): heap after GC "
          f"{heap / 2**20:.1f} MB, Python RSS {resident / 2**20:.1f} MB, Arrow "
          f"{pa.total_allocated_bytes() / 2**20:.1f} MB; {spark.retained()}", flush=True)
    # Recomputes broadcast (Spark's default plans); incremental ticks do not.
    print(f"  ticks since the last figure: {dict(sorted(modes.items()))}", flush=True)
    modes.clear()
    if classes is not None:  # --histogram: the JVM's live objects by class
        pools = spark.session()._jvm.java.lang.management.ManagementFactory \
            .getMemoryPoolMXBeans()
        print("  heap pools: " + ", ".join(
            f"{p.getName()} {p.getUsage().getUsed() / 2**20:.1f} MB" for p in pools
            if str(p.getType()) == "Heap memory"), flush=True)
        show_histogram(classes, top)
    if dump is not None:  # --dump: the live heap, for a heap analyser
        from mzflow.engine import spark as sp

        pid = sp.session()._jvm.java.lang.ProcessHandle.current().pid()
        dump.mkdir(parents=True, exist_ok=True)
        subprocess.run(["jcmd", str(pid), "GC.heap_dump", str(dump / f"step{step}.hprof")],
                       capture_output=True, check=True, timeout=600)
    if objects is not None:  # --objects: the Python types whose count grew most
        now = Counter(type(o).__qualname__ for o in gc.get_objects())
        grown = (now - objects).most_common(8)
        objects.clear()
        objects.update(now)
        print(f"  Python objects: {sum(now.values())}, grown: {grown}", flush=True)
    return heap, resident


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=1000)
    ap.add_argument("--baseline", type=int, default=100)
    ap.add_argument("--every", type=int, default=100, help="also print figures this often")
    ap.add_argument("--limit", type=float, default=1.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--objects", action="store_true",
                    help="also print which Python object types grew between figures")
    ap.add_argument("--histogram", type=int, default=0, metavar="N",
                    help="also print the JVM's N largest classes of live objects and the N "
                         "that grew most between figures (jcmd GC.class_histogram)")
    ap.add_argument("--dump", type=Path, default=None, metavar="DIR",
                    help="also write the JVM's live heap at each figure to DIR/step<N>.hprof")
    ap.add_argument("--home", type=Path, default=None, help="kept (default: a temporary one)")
    ap.add_argument("--cluster-spark", choices=("managed", "in-process"), default="managed",
                    help="managed (the default configuration): the ticks run through a "
                         "warm cluster's tick service and Spark server, measured too")
    a = ap.parse_args(argv)
    # The process had Spark's 1 GB driver; a smaller heap shows growth sooner.
    os.environ.setdefault("MZFLOW_SPARK_DRIVER_MEMORY", "1g")
    os.environ["MZFLOW_CLUSTER_SPARK"] = a.cluster_spark
    import mzflow
    from mzflow_dev.soak import warm

    managed = a.cluster_spark == "managed"
    home = a.home or Path(tempfile.mkdtemp(prefix="mzflow-soakmem-"))
    s = mzflow.connect(str(home))
    into = ""
    if managed:  # a SIZEd cluster: a managed server and a tick service, kept warm
        import atexit

        atexit.register(warm.stop_all, home)  # else they idle on after an error
        s.execute("CREATE CLUSTER warm SIZE 'small'")
        s.execute("SET cluster = warm")
        into = " IN CLUSTER warm"
    for t in TABLES:
        s.execute(f"CREATE TABLE {t} (k int, v int, w text)")
        s.execute(f"INSERT INTO {t} VALUES "
                  + ",".join(f"({i}, {i * 3 % 7}, 'x{i}')" for i in range(10)))
    for i, q in enumerate(VIEWS):
        s.execute(f"CREATE MATERIALIZED VIEW v{i}{into} AS {q}")
    s.tick()
    if managed:
        served_by = _wait_for_service(s, home)
        print(f"cluster warm: ticks served by process {served_by}", flush=True)
    warm_figures: dict[int, dict[str, tuple[int, int]]] = {}
    rng = random.Random(a.seed)
    times: list[int] = []
    figures: dict[int, tuple[int, int]] = {}
    objects: Counter[str] | None = Counter() if a.objects else None
    modes: Counter[str] = Counter()
    classes: dict[str, tuple[int, int]] | None = {} if a.histogram else None
    began = time.monotonic()
    for step in range(1, a.ticks + 1):
        t, k = rng.choice(TABLES), rng.randrange(12)
        if rng.random() < 0.5:
            s.execute(f"INSERT INTO {t} VALUES ({k}, {rng.randrange(7)}, 'y{step}')")
        else:
            s.execute(f"DELETE FROM {t} WHERE k = {k}")
        times.append(s.store.snapshot().read_ts)
        i = step % len(VIEWS)
        for strategy in _tick(s, home, f"v{i}", managed):
            modes[" ".join(re.findall(r"^\w+|R\d{3}", strategy))] += 1
        # AS OF a time a few steps back, which the default history still holds.
        s.execute(READS[step % len(READS)].format(i=i, t=times[max(0, len(times) - 5)]))
        del times[:-5]
        if step in (a.baseline, a.ticks) or step % a.every == 0:
            figures[step] = measure(step, began, modes, objects, classes, a.histogram,
                                    a.dump)
            if managed:
                warm_figures[step] = warm.figures(home)
                print("  warm processes: " + ", ".join(
                    f"{name} ({pid}) RSS {kb / 1024:.0f} MB"
                    for name, (pid, kb) in sorted(warm_figures[step].items())), flush=True)
                for name, (pid, _) in warm_figures[step].items():
                    heap = warm.jvm_heap_after_gc(pid) if name.startswith(warm.SERVER) else None
                    if heap is not None:  # why its RSS moved: live data, or heap sizing
                        print(f"  {name}: heap after GC {heap / 2**20:.1f} MB", flush=True)
    s.close()
    warm.stop_all(home)
    if a.home is None:
        shutil.rmtree(home, ignore_errors=True)
    (heap0, rss0), (heap1, rss1) = figures[a.baseline], figures[a.ticks]
    ok = heap1 <= a.limit * heap0 and rss1 <= a.limit * rss0
    if managed:
        base, end = warm_figures[a.baseline], warm_figures[a.ticks]
        problems = warm.grown(base, end, a.limit)
        if not base:
            problems.append("no warm process ran at the baseline")
        for name, (_, kb) in sorted(base.items()):
            kb1 = end.get(name, (0, 0))[1]
            print(f"{name}: RSS {kb / 1024:.0f} MB at step {a.baseline}, {kb1 / 1024:.0f} MB "
                  f"at step {a.ticks} (x{kb1 / kb if kb else 0:.2f})", flush=True)
        print(f"ticks served by the tick service: {modes_served[0]}, in this process: "
              f"{modes_served[1]}", flush=True)
        for line in problems:
            print(f"EXCEEDED: {line}", flush=True)
        ok = ok and not problems
    print(f"heap after GC: {heap0 / 2**20:.1f} MB at step {a.baseline}, "
          f"{heap1 / 2**20:.1f} MB at step {a.ticks} (x{heap1 / heap0:.2f}); "
          f"Python RSS: {rss0 / 2**20:.1f} MB, {rss1 / 2**20:.1f} MB (x{rss1 / rss0:.2f}); "
          f"limit x{a.limit}: {'ok' if ok else 'EXCEEDED'}", flush=True)
    return 0 if ok else 1


modes_served = [0, 0]  # ticks the tick service ran, ticks this process ran


def _wait_for_service(s: Any, home: Path) -> int:
    """The cluster's tick service, once it listens (its server was started by the
    first tick); its pid."""
    from mzflow.clusters import servers, tick_service

    cluster = s.store.snapshot().cluster_by_name("warm")
    record = tick_service.wait_for(servers.folder(home, cluster), timeout=300)
    if record is None:
        raise SystemExit(f"the tick service of cluster warm did not start: see "
                         f"{servers.folder(home, cluster) / 'server.log'}")
    return int(record["pid"])


def _tick(s: Any, home: Path, view: str, managed: bool) -> list[str]:
    """One view's tick: through the warm cluster's tick service (as ``mzflow tick
    --cluster warm`` runs it), else here; the strategies."""
    if managed:
        from mzflow.clusters import tick_service

        answer = tick_service.ask(str(home), None, "warm", {
            "op": "tick", "object": view, "at": None, "full_refresh": False,
            "view_means_default_index": True})
        if answer is not None:
            failure = tick_service.failure_of(answer)
            if failure is not None:
                raise failure
            modes_served[0] += 1
            return [r["strategy"] for r in answer["reports"]]
    modes_served[1] += 1
    return [r.strategy for r in s.tick(object=view)]


if __name__ == "__main__":
    sys.exit(main())
