"""Write throughput of tables: COPY of a 1M-row Parquet file, and single-row INSERT latency.

    python bench/table_writes.py [--rows 1000000] [--inserts 200]

Baseline named by the tables issue: none, these are the figures it asks for.
Runs on a fresh temporary home; nothing here starts Spark.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import mzflow


def orders_file(home: Path, n: int) -> Path:
    """A Parquet file of ``n`` orders (id, customer, amount numeric(12,2), note)."""
    data = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "customer": pa.array([i % 9973 for i in range(n)], pa.int32()),
        "amount": pa.array([f"{(i % 100000) / 100:.2f}" for i in range(n)]).cast(
            pa.decimal128(12, 2)),
        "note": pa.array([f"order {i}" for i in range(n)]),
    })
    path = home / "orders.parquet"
    pq.write_table(data, path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--inserts", type=int, default=200)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mzflow-bench-"))
    n = args.rows
    path = orders_file(home, n)
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE orders (id bigint NOT NULL, customer int, "
                     "amount numeric(12,2), note text)")
        start = time.perf_counter()
        result = conn.execute(f"COPY orders FROM '{path}' WITH (FORMAT parquet)")
        copy_s = time.perf_counter() - start
        conn.execute("CREATE TABLE events (id bigint NOT NULL, kind text)")
        lat = []
        for i in range(args.inserts):
            start = time.perf_counter()
            conn.execute(f"INSERT INTO events VALUES ({i}, 'click')")
            lat.append((time.perf_counter() - start) * 1000)
    print(f"COPY FROM Parquet: {n:,} rows in {copy_s:.2f} s = {n / copy_s:,.0f} rows/s "
          f"({result.status})")
    print(f"single-row INSERT: median {statistics.median(lat):.1f} ms, "
          f"p95 {statistics.quantiles(lat, n=20)[18]:.1f} ms over {len(lat)} inserts")


if __name__ == "__main__":
    main()
