"""TPC-H ticks vs full recompute: what a refresh batch costs a maintained view.

    .venv/bin/python bench/tpch_ticks.py --sf 1 --queries 1,3,18 --batch 0.001

Loads TPC-H (``tpchgen-cli``) at ``--sf`` into a fresh mzflow home, creates the
queries as materialized views in cluster ``tpch`` and ticks once (hydration). Then,
``--repeat`` times: applies a refresh batch (RF1 inserts new orders whose line items
make ``--batch`` of lineitem, RF2 deletes as many of the oldest orders), ticks each
view on its own (``conn.tick(object=…)``) and runs the same query from scratch in
the same Spark session (``SELECT * FROM <plain view>`` in the default cluster,
where no index serves it). Prints medians: tick seconds, recompute seconds, their
ratio, and the rows and files each tick read.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

import mzflow
from mzflow_dev.tpch import data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=0.01, help="TPC-H scale factor")
    ap.add_argument("--queries", default="1,3,18", help="comma-separated query numbers")
    ap.add_argument("--batch", type=float, default=0.001,
                    help="line items inserted (and about as many deleted) per batch, as a "
                         "fraction of lineitem")
    ap.add_argument("--repeat", type=int, default=3, help="batches (each ticked and timed)")
    ap.add_argument("--home", help="mzflow home (default: a fresh temporary directory)")
    ap.add_argument("--no-check", action="store_true",
                    help="skip comparing each view with DuckDB after each batch")
    args = ap.parse_args()
    numbers = [int(q) for q in args.queries.split(",")]
    queries = data.queries(numbers)
    started = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {msg}", flush=True)

    files = data.generate(args.sf)
    say(f"TPC-H SF {args.sf:g} in {files}")
    db = duckdb.connect()
    data.load_duckdb(db, files)
    (lineitems,) = db.execute("SELECT count(*) FROM lineitem").fetchone()
    (per_order,) = db.execute("SELECT count(*) / count(DISTINCT l_orderkey) FROM lineitem"
                              ).fetchone()
    n_orders = max(1, round(args.batch * lineitems / per_order))
    home = Path(args.home or tempfile.mkdtemp(prefix="mzflow-tpch-bench-"))
    say(f"mzflow home {home}; {lineitems} line items, batches of {n_orders} orders")
    with mzflow.connect(str(home)) as conn:
        data.load_mzflow(conn, files, progress=say)
        conn.execute("CREATE CLUSTER tpch SIZE 'small'")
        for name, sql in queries.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER tpch AS {sql}")
            conn.execute(f"CREATE VIEW {name}_plain AS {sql}")
        for name in queries:
            t = time.perf_counter()
            (report,) = conn.tick(object=name)
            say(f"hydrated {name} in {time.perf_counter() - t:.1f} s ({report.strategy})"
                + (f" ERROR: {report.error}" if report.error else ""))
        for name in queries:
            plan = conn.execute(f"EXPLAIN MATERIALIZED VIEW {name}").rows[0][0]
            strategy = [ln.strip() for ln in plan.splitlines() if "Strategy" in ln]
            say(f"{name}: {'; '.join(strategy) or plan.splitlines()[0]}")
        # warm up the recompute path once so that the first measurement pays no planning
        for name in queries:
            conn.execute(f"SELECT * FROM {name}_plain")
        ticks: dict[str, list[float]] = {n: [] for n in queries}
        recomputes: dict[str, list[float]] = {n: [] for n in queries}
        read: dict[str, list[tuple[int, int]]] = {n: [] for n in queries}
        jobs: dict[str, list[int]] = {n: [] for n in queries}
        strategies: dict[str, set[str]] = {n: set() for n in queries}
        for i in range(args.repeat):
            batch = data.make_batch(db, n_orders, seed=7000 + i)
            t = time.perf_counter()
            data.apply_mzflow(conn, batch, home / "batches" / str(i))
            data.apply_duckdb(db, batch)
            say(f"batch {i + 1}: {batch} applied in {time.perf_counter() - t:.1f} s")
            for name, sql in queries.items():
                t = time.perf_counter()
                (report,) = conn.tick(object=name)
                ticks[name].append(time.perf_counter() - t)
                read[name].append((report.rows_read, report.files_read))
                jobs[name].append(report.spark_jobs or 0)
                strategies[name].add(report.strategy)
                if report.error:
                    say(f"  {name}: tick error {report.error}")
                t = time.perf_counter()
                conn.execute(f"SELECT * FROM {name}_plain")
                recomputes[name].append(time.perf_counter() - t)
                say(f"  {name}: tick {ticks[name][-1]:.2f} s (read {report.rows_read} rows, "
                    f"{report.files_read} files, {report.rows_changed} changed, "
                    f"{report.spark_jobs} Spark jobs), recompute "
                    f"{recomputes[name][-1]:.2f} s")
                if not args.no_check:
                    conn.execute("SET cluster = tpch; SET transaction_isolation = "
                                 "'serializable'")
                    got = conn.execute(f"SELECT * FROM {name}").rows
                    conn.execute("RESET transaction_isolation; SET cluster = default")
                    problem = data.same_rows(got, db.execute(sql).fetchall())
                    if problem:
                        say(f"  {name}: DIFFERS FROM DUCKDB: {problem}")
    print()
    print(f"TPC-H SF {args.sf:g}, batches of {n_orders} orders (~{args.batch:g} of "
          f"lineitem), medians of {args.repeat}")
    print(f"{'query':<6} {'tick s':>8} {'recompute s':>12} {'ratio':>7} {'rows read':>11} "
          f"{'files read':>10} {'jobs':>5}  strategy")
    for name in queries:
        tick, full = statistics.median(ticks[name]), statistics.median(recomputes[name])
        rows = statistics.median(r for r, _ in read[name])
        nfiles = statistics.median(f for _, f in read[name])
        print(f"{name:<6} {tick:>8.2f} {full:>12.2f} {tick / full:>7.2f} {rows:>11.0f} "
              f"{nfiles:>10.0f} {statistics.median(jobs[name]):>5.0f}  "
              f"{', '.join(sorted(strategies[name]))}")


if __name__ == "__main__":
    main()
