"""Does a tick's cost follow the change or the tables? Two runs (issue 15):

    make bench-growth                               # SF 0.1, 0.5, 2; then 300 ticks
    .venv/bin/python bench/growth.py --sfs 0.01,0.05 --batches 2 --long 30

**Growth**: the same absolute batch (``--orders`` new orders, about 4 line items each,
inserted and as many of the oldest deleted: ~6,000 line items each way by default) at
every scale in ``--sfs``. For each view: the tick's median time, rows read and Spark
jobs, and a recompute of the same query in the same Spark session (``SELECT`` from a
plain view in the default cluster: Spark reads every input) — plus the growth of tick
time and rows read from the smallest to the largest scale (targets: ≤ 1.2× both, issue
34's; issue 15 asked < 1.5× of the time).

**Long run**: ``--long`` consecutive small ticks (``--long-orders`` per batch) of every
view at the smallest scale; the 10th and the last tick's time and Delta log entries
read for bookkeeping (target: the last within 10 % of the 10th).

The cost switch is off (``recompute_share`` = 1000): every tick is incremental, as
the targets ask. Each result is checked against DuckDB (``--no-check`` skips it).
Output: a table, ``bench/results/growth-<timestamp>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
from run import (  # bench/run.py: bench/ is the script's folder
    ALL_VIEWS,
    CLUSTER,
    profiled_tick,
    view_sql,
)

import mzflow
from mzflow.storage import delta
from mzflow_dev.tpch import data

ROOT = Path(__file__).resolve().parent.parent


class Say:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.started:7.1f} s] {msg}", flush=True)


def setup(sf: float, views: list[str], say: Say, size: str = "large"
          ) -> tuple[Any, mzflow.Connection, Path]:
    files = data.generate(sf)
    db = duckdb.connect()
    data.load_duckdb(db, files)
    home = Path(tempfile.mkdtemp(prefix=f"mzflow-growth-{sf:g}-"))
    conn = mzflow.connect(str(home))
    conn.execute("ALTER SYSTEM SET recompute_share = 1000")
    data.load_mzflow(conn, files)
    # Sized for the largest scale, as a user sizes a cluster for its data: at SF 2 the
    # default SIZE's memory budget (1 GB) holds neither of lineitem's arrangements, and
    # their lookups fall back to the Delta-backed ones (a notice says so).
    conn.execute(f"CREATE CLUSTER {CLUSTER} SIZE '{size}'")
    for name in views:
        conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER {CLUSTER} AS "
                     f"{view_sql(name)}")
        conn.execute(f"CREATE VIEW {name}_plain AS {view_sql(name)}")
    t = time.perf_counter()
    conn.tick(cluster=CLUSTER)
    say(f"SF {sf:g}: loaded, {len(views)} views hydrated in {time.perf_counter() - t:.1f} s")
    for name in views:  # the recompute path's planning, once
        conn.execute(f"SELECT * FROM {name}_plain")
    return db, conn, home


def check(conn: mzflow.Connection, db: Any, name: str) -> str | None:
    conn.execute(f"SET cluster = {CLUSTER}")
    got = conn.execute(f"SELECT * FROM {name}").rows
    conn.execute("SET cluster = default")
    return data.same_rows(got, db.execute(view_sql(name)).fetchall())


def growth(args: argparse.Namespace, views: list[str], say: Say) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sf in [float(s) for s in args.sfs.split(",")]:
        db, conn, home = setup(sf, views, say, args.cluster_size)
        cells: dict[str, dict[str, list[float]]] = {
            v: {"tick_s": [], "rows": [], "jobs": [], "recompute_s": []} for v in views}
        with conn:
            for i in range(args.batches):
                batch = data.make_batch(db, args.orders, seed=9000 + i)
                data.apply_mzflow(conn, batch, home / "batches" / str(i))
                data.apply_duckdb(db, batch)
                for name in views:
                    t = time.perf_counter()
                    (report,) = conn.tick(object=name)
                    c = cells[name]
                    c["tick_s"].append(time.perf_counter() - t)
                    c["rows"].append(report.rows_read)
                    c["jobs"].append(report.spark_jobs or 0)
                    t = time.perf_counter()
                    conn.execute(f"SELECT * FROM {name}_plain")
                    c["recompute_s"].append(time.perf_counter() - t)
                    problem = None if args.no_check else check(conn, db, name)
                    say(f"SF {sf:g} batch {i + 1} {name}: {report.line()}"
                        + (f" DIFFERS FROM DUCKDB: {problem}" if problem else ""))
                    if problem:
                        raise SystemExit(1)
            profiles = {}
            if args.profile:  # one more batch, each view's tick under cProfile
                batch = data.make_batch(db, args.orders, seed=9500)
                data.apply_mzflow(conn, batch, home / "batches" / "profile")
                data.apply_duckdb(db, batch)
                for name in views:
                    profiles[name] = profiled_tick(conn, name, everything=True)
                    say(f"SF {sf:g} profiled {name}: {profiles[name]['seconds']:.3f} s")
            # Each scale's server, DuckDB and home go before the next: at SF 2 the three
            # scales' large servers and oracles together ran the machine out of memory.
            conn.execute(f"DROP CLUSTER {CLUSTER} CASCADE")
        db.close()
        shutil.rmtree(home, ignore_errors=True)
        out[f"{sf:g}"] = {v: {k: statistics.median(xs) for k, xs in c.items()}
                          for v, c in cells.items()}
        if profiles:
            out[f"{sf:g}"]["profiles"] = profiles
    return out


def long_run(args: argparse.Namespace, views: list[str], say: Say) -> dict[str, Any]:
    sf = min(float(s) for s in args.sfs.split(","))
    db, conn, home = setup(sf, views, say, args.cluster_size)
    seconds, log_reads = [], []
    with conn:
        for i in range(args.long):
            batch = data.make_batch(db, args.long_orders, seed=20_000 + i)
            data.apply_mzflow(conn, batch, home / "batches" / str(i))
            data.apply_duckdb(db, batch)
            before = delta.LOG_ENTRIES_READ[0]
            t = time.perf_counter()
            conn.tick(cluster=CLUSTER)
            seconds.append(time.perf_counter() - t)
            log_reads.append(delta.LOG_ENTRIES_READ[0] - before)
            if (i + 1) % 10 == 0:
                say(f"long run: tick {i + 1}/{args.long}: {seconds[-1]:.2f} s, "
                    f"{log_reads[-1]} log entries read")
        problems = {} if args.no_check else {v: check(conn, db, v) for v in views}
    bad = {v: p for v, p in problems.items() if p}
    if bad:
        say(f"long run: DIFFERS FROM DUCKDB: {bad}")
        raise SystemExit(1)

    def around(i: int) -> float:  # a median of five ticks: one tick is noisy
        return statistics.median(seconds[max(0, i - 2):i + 3])
    tenth, last = min(9, len(seconds) - 1), len(seconds) - 1
    return {"sf": sf, "ticks": len(seconds), "seconds": seconds, "log_reads": log_reads,
            "tick10_s": around(tenth), "last_s": around(last),
            "tick10_log_reads": log_reads[tenth], "last_log_reads": log_reads[last]}


def table(result: dict[str, Any]) -> str:
    lines = []
    scales = list(result["growth"])
    if scales:
        lines.append(f"Growth: the same batch ({result['orders']} orders in, as many out) "
                     "at each scale; medians")
        lines.append(f"{'view':<6} {'SF':>5} {'tick s':>8} {'recompute s':>12} "
                     f"{'speed-up':>9} {'rows read':>10} {'jobs':>5}")
        for v in result["views"]:
            for sf in scales:
                c = result["growth"][sf][v]
                lines.append(f"{v:<6} {sf:>5} {c['tick_s']:>8.2f} {c['recompute_s']:>12.2f} "
                             f"{c['recompute_s'] / c['tick_s']:>8.1f}× {c['rows']:>10.0f} "
                             f"{c['jobs']:>5.0f}")
            lo, hi = result["growth"][scales[0]][v], result["growth"][scales[-1]][v]
            lines.append(f"{'':<6} {'growth':>5} {hi['tick_s'] / lo['tick_s']:>8.2f}× "
                         f"{'(target ≤ 1.2×)':>12}  rows read "
                         f"{hi['rows'] / max(1, lo['rows']):.2f}× (target ≤ 1.2×)")
    long = result.get("long")
    if long:
        lines.append(f"Long run at SF {long['sf']:g}: {long['ticks']} cluster ticks; tick 10 "
                     f"{long['tick10_s']:.2f} s ({long['tick10_log_reads']} log entries), "
                     f"tick {long['ticks']} {long['last_s']:.2f} s "
                     f"({long['last_log_reads']} log entries): "
                     f"{long['last_s'] / long['tick10_s']:.2f}× (target ≤ 1.10×)")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    scales = [float(s) for s in result["growth"]]
    for v in result["views"]:
        ticks = [result["growth"][f"{s:g}"][v]["tick_s"] for s in scales]
        full = [result["growth"][f"{s:g}"][v]["recompute_s"] for s in scales]
        line, = ax.plot(scales, ticks, "o-", label=f"{v} tick")
        ax.plot(scales, full, "s--", color=line.get_color(), alpha=0.5,
                label=f"{v} recompute")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("TPC-H scale factor (table size)")
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"The same batch ({result['orders']} orders) as the tables grow")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sfs", default="0.1,0.5,2", help="scale factors, comma-separated")
    ap.add_argument("--views", default=",".join(ALL_VIEWS))
    ap.add_argument("--orders", type=int, default=1500,
                    help="orders inserted (and deleted) per batch (~4 line items each)")
    ap.add_argument("--batches", type=int, default=3, help="batches per scale (medians)")
    ap.add_argument("--long", type=int, default=300, help="ticks in the long run (0: none)")
    ap.add_argument("--long-orders", type=int, default=20, help="orders per long-run batch")
    ap.add_argument("--no-growth", action="store_true", help="only the long run")
    ap.add_argument("--cluster-size", default="large",
                    help="SIZE of the cluster (default large: its memory budget holds "
                         "lineitem's arrangements at SF 2)")
    ap.add_argument("--no-check", action="store_true", help="skip the DuckDB comparison")
    ap.add_argument("--profile", action="store_true",
                    help="one more batch per scale with each tick under cProfile, built-ins "
                    "included (what grows with the tables)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    views = args.views.split(",")
    say = Say()
    result: dict[str, Any] = {"views": views, "orders": args.orders, "growth": {}}
    if not args.no_growth:
        result["growth"] = growth(args, views, say)
    if args.long:
        result["long"] = long_run(args, views, say)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"growth-{stamp}.json").write_text(json.dumps(result, indent=1))
    print(table(result))
    if result["growth"]:
        plot(result, out / f"growth-{stamp}.png")
        print(f"plot: {out / f'growth-{stamp}.png'}")
    print(f"results: {out / f'growth-{stamp}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
