"""What a GROUP BY state rebuild costs, against one recompute (issue 15, item 6).

    .venv/bin/python bench/rebuild.py --sf 1 --queries 18,3

Loads TPC-H at ``--sf`` into a fresh home and hydrates each query as a materialized
view. Then, per repeat: a refresh batch, a tick with ``full_refresh`` (a recompute,
R015, which leaves the view's GROUP BY state behind), another batch, and a normal tick,
which must rebuild the state ("state rebuilt"). Prints both times, their ratio (the
target: a rebuild costs at most one recompute) and the rebuild's Spark jobs; with
``--profile`` the last rebuild runs under cProfile (top 25 by cumulative time). Every
result is checked against DuckDB.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

import mzflow
from mzflow_dev.tpch import data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    ap.add_argument("--queries", default="18,3", help="comma-separated query numbers")
    ap.add_argument("--batch", type=float, default=0.001,
                    help="line items per refresh batch, as a fraction of lineitem")
    ap.add_argument("--repeat", type=int, default=2, help="recompute + rebuild rounds")
    ap.add_argument("--profile", action="store_true", help="profile the last rebuild")
    args = ap.parse_args()
    queries = data.queries([int(q) for q in args.queries.split(",")])
    started = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {msg}", flush=True)

    files = data.generate(args.sf)
    db = duckdb.connect()
    data.load_duckdb(db, files)
    (lineitems,) = db.execute("SELECT count(*) FROM lineitem").fetchone()
    (per_order,) = db.execute("SELECT count(*) / count(DISTINCT l_orderkey) FROM lineitem"
                              ).fetchone()
    n_orders = max(1, round(args.batch * lineitems / per_order))
    home = Path(tempfile.mkdtemp(prefix="mzflow-rebuild-bench-"))
    recomputes: dict[str, list[float]] = {n: [] for n in queries}
    rebuilds: dict[str, list[float]] = {n: [] for n in queries}
    jobs: dict[str, list[int]] = {n: [] for n in queries}
    wrong = 0
    with mzflow.connect(str(home)) as conn:
        data.load_mzflow(conn, files, progress=say)
        conn.execute("CREATE CLUSTER tpch")
        for name, sql in queries.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER tpch AS {sql}")
            conn.tick(object=name)
            say(f"hydrated {name}")
        batches = 0

        def batch() -> None:
            nonlocal batches
            b = data.make_batch(db, n_orders, seed=9000 + batches)
            data.apply_mzflow(conn, b, home / "batches" / str(batches))
            data.apply_duckdb(db, b)
            batches += 1

        for i in range(args.repeat):
            for name, sql in queries.items():
                batch()
                t = time.perf_counter()
                (r,) = conn.tick(object=name, full_refresh=True)
                recomputes[name].append(time.perf_counter() - t)
                batch()
                profile = cProfile.Profile() if args.profile and i == args.repeat - 1 else None
                t = time.perf_counter()
                if profile:
                    profile.enable()
                (r,) = conn.tick(object=name)
                if profile:
                    profile.disable()
                rebuilds[name].append(time.perf_counter() - t)
                jobs[name].append(r.spark_jobs or 0)
                say(f"{name}: recompute {recomputes[name][-1]:.2f} s, then "
                    f"{rebuilds[name][-1]:.2f} s ({r.strategy}; {r.spark_jobs} Spark jobs)")
                if "rebuilt" not in r.strategy:
                    say(f"{name}: expected a state rebuild, got {r.strategy}")
                conn.execute("SET cluster = tpch; SET transaction_isolation = 'serializable'")
                got = conn.execute(f"SELECT * FROM {name}").rows
                conn.execute("RESET transaction_isolation; SET cluster = default")
                problem = data.same_rows(got, db.execute(sql).fetchall())
                if problem:
                    wrong += 1
                    say(f"{name}: DIFFERS FROM DUCKDB: {problem}")
                if profile:
                    print(f"--- profile of {name}'s rebuild")
                    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    print(f"\nTPC-H SF {args.sf:g}, medians of {args.repeat}")
    print(f"{'query':<6} {'recompute s':>12} {'rebuild s':>10} {'ratio':>6} {'jobs':>5}")
    for name in queries:
        full, rebuild = statistics.median(recomputes[name]), statistics.median(rebuilds[name])
        print(f"{name:<6} {full:>12.2f} {rebuild:>10.2f} {rebuild / full:>6.2f} "
              f"{statistics.median(jobs[name]):>5.0f}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
