"""How long a large UPDATE holds the catalog's write lock, against its Spark computation.

    python bench/write_lock.py [--rows 1000000] [--share 0.5] [--spark-pause 0]

Issue 39's target: the write lock is held ≤ 0.5 s while Spark computes the UPDATE's
changes for 30 s. An UPDATE of ``--share`` of a ``--rows``-row table; Store.write and
the statement's Spark read are timed, and a second thread INSERTs one row into another
table every 0.05 s meanwhile (its slowest INSERT says whether writers waited).
``--spark-pause`` adds that many seconds to the Spark computation (a sleep after the
read, outside the lock, as a longer Spark job would take): the lock's time must not
grow with it. Printed: the Spark time, each lock hold of the UPDATE, the ratio, and
the concurrent INSERTs' latency.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import mzflow
from mzflow.catalog.store import Store
from mzflow.read import reads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--share", type=float, default=0.5, help="share of rows updated")
    parser.add_argument("--spark-pause", type=float, default=0.0,
                        help="seconds added to the Spark computation (simulated)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mzflow-bench-lock-"))
    n = args.rows
    pq.write_table(pa.table({"k": pa.array(range(n), pa.int64()),
                             "x": pa.array([i % 1000 for i in range(n)], pa.int64())}),
                   home / "t.parquet")
    conn = mzflow.connect(str(home / "home"))
    conn.execute("CREATE TABLE t (k bigint, x bigint)")
    conn.execute("CREATE TABLE u (a int)")
    conn.execute(f"COPY t FROM '{home / 't.parquet'}' (FORMAT PARQUET)")
    conn.execute("UPDATE t SET x = x WHERE k < 0")  # warm Spark and the paths

    holds: list[tuple[str, float]] = []  # (thread, seconds held)
    spark_s: list[float] = []
    original, real = Store.write, reads.read_arrow

    @contextmanager
    def write(store: Store) -> Iterator[Any]:
        with original(store) as w:
            start = time.perf_counter()
            try:
                yield w
            finally:
                holds.append((threading.current_thread().name, time.perf_counter() - start))

    def read_arrow(*a: Any, **k: Any) -> pa.Table:
        start = time.perf_counter()
        out = real(*a, **k)
        time.sleep(args.spark_pause)
        spark_s.append(time.perf_counter() - start)
        return out

    Store.write = write  # type: ignore[method-assign]
    reads.read_arrow = read_arrow
    other = mzflow.connect(str(home / "home"))
    stop = threading.Event()
    latencies: list[float] = []

    def inserter() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            other.execute("INSERT INTO u VALUES (1)")
            latencies.append(time.perf_counter() - start)
            stop.wait(0.05)

    side = threading.Thread(target=inserter, name="inserter")
    side.start()
    time.sleep(0.3)
    holds.clear()
    started = time.perf_counter()
    result = conn.execute(f"UPDATE t SET x = x + 1 WHERE k < {int(n * args.share)}")
    wall = time.perf_counter() - started
    mine = [s for name, s in holds if name == threading.current_thread().name]
    stop.set()
    side.join()
    held = sum(mine)
    print(f"{result.status} of {n} rows; statement {wall:.2f} s; recomputed "
          f"{conn.writes.recomputed} times")
    print(f"Spark computation: {sum(spark_s):.2f} s (of which {args.spark_pause:.1f} s "
          f"simulated) in {len(spark_s)} read(s)")
    print(f"write lock held by the UPDATE: {held:.3f} s in {len(mine)} hold(s) "
          f"(longest {max(mine):.3f} s); lock / Spark = {held / sum(spark_s):.3f}; "
          f"target ≤ 0.5 s while Spark computes 30 s: {'met' if held <= 0.5 else 'missed'}")
    if latencies:
        print(f"concurrent INSERTs into u: {len(latencies)}, median "
              f"{statistics.median(latencies) * 1000:.0f} ms, slowest "
              f"{max(latencies) * 1000:.0f} ms")
    other.close()
    conn.close()


if __name__ == "__main__":
    main()
