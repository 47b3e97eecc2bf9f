"""Median latency of catalog work: a DDL statement and a `SELECT … FROM mz_clusters`.

    python bench/catalog_latency.py [--n 200] [--catalog-url URL]

Baseline: none yet (the foundation issue asks only for the figures). Prints
the median and p95 in milliseconds, measured on a fresh home.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import mzflow


def measure(conn: mzflow.Connection, sql_for: list[str]) -> list[float]:
    out = []
    for sql in sql_for:
        start = time.perf_counter()
        conn.execute(sql)
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(name: str, ms: list[float]) -> str:
    p95 = statistics.quantiles(ms, n=20)[18]
    return f"{name:<42} median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   n={len(ms)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="statements per measurement")
    parser.add_argument("--catalog-url", help="SQLAlchemy URL (default: SQLite in a temp home)")
    args = parser.parse_args()
    with mzflow.connect(tempfile.mkdtemp(prefix="mzflow-bench-"),
                        catalog_url=args.catalog_url) as conn:
        conn.execute("SELECT 1")  # warm imports and the engine
        ddl = measure(conn, [f"CREATE CLUSTER c{i} SIZE 'small'" for i in range(args.n)])
        views = measure(conn, [f"CREATE VIEW v{i} AS SELECT {i} AS x" for i in range(args.n)])
        select = measure(conn, ["SELECT * FROM mz_clusters"] * args.n)
        join = measure(conn, ["SELECT c.name FROM mz_clusters c JOIN mz_indexes i "
                              "ON c.id = i.cluster_id"] * args.n)
    print(f"catalog: {args.catalog_url or 'sqlite (temp home)'}; "
          f"{args.n} clusters and {args.n} views by the end")
    print(summary("DDL: CREATE CLUSTER", ddl))
    print(summary("DDL: CREATE VIEW", views))
    print(summary("SELECT * FROM mz_clusters", select))
    print(summary("SELECT … mz_clusters JOIN mz_indexes", join))


if __name__ == "__main__":
    main()
