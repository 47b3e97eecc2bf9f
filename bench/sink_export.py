"""Sink export throughput: a one-million-row snapshot written as one interval's file.

    python bench/sink_export.py [--rows 1000000] [--runs 3] [--formats PARQUET,CSV,JSON,DELTA]

The table has five columns (bigint, text, numeric(12,2), date, double precision).
A sink is created on it, the clock is moved past the sink's first hourly interval
(pendulum.travel_to), and the interval, which carries the whole table as its
snapshot, is exported ``--runs`` times (the file is rewritten each time: a rerun of
an interval). Printed: median seconds and rows per second per format, and for
Parquet also through a view (evaluated by Spark instead of read from the Delta
table), against the baseline of pyarrow writing the same rows to one Parquet file
(the floor for an export: no reading, consolidating or sorting).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import statistics
import tempfile
import time
from pathlib import Path

import pendulum
import pyarrow as pa
import pyarrow.parquet as pq

import mzflow

DAY = pendulum.datetime(2026, 3, 1, tz="UTC")


def _data(n: int) -> pa.Table:
    base = dt.date(2020, 1, 1)
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "name": pa.array([f"customer-{i % 50_000}" for i in range(n)]),
        "amount": pa.array([decimal.Decimal(i % 100_000).scaleb(-2) for i in range(n)],
                           pa.decimal128(12, 2)),
        "day": pa.array([base + dt.timedelta(days=i % 2000) for i in range(n)], pa.date32()),
        "score": pa.array([(i * 7919) % 1000 / 7.0 for i in range(n)], pa.float64()),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--formats", default="PARQUET,CSV,JSON,DELTA")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mzflow-sink-bench-"))
    pendulum.travel_to(DAY.add(hours=9, minutes=50), freeze=False)
    conn = mzflow.connect(str(work / "home"))
    conn.execute("CREATE TABLE t (id bigint, name text, amount numeric(12,2), day date, "
                 "score double precision)")
    data = _data(args.rows)
    source = work / "data.parquet"
    pq.write_table(data, source)
    print(f"loading {args.rows:,} rows ...", flush=True)
    conn.execute(f"COPY t FROM '{source}' (FORMAT PARQUET)")
    conn.execute("CREATE VIEW v AS SELECT * FROM t WHERE id >= 0")
    formats = [f.strip().upper() for f in args.formats.split(",")]
    cases = [(f"t_{f.lower()}", "t", f) for f in formats] + [("v_parquet", "v", "PARQUET")]
    for name, src, fmt in cases:
        conn.execute(f"CREATE SINK {name} FROM {src} INTO {fmt} '{work / name}' "
                     "WITH (SCHEDULE = '@hourly')")
    pendulum.travel_to(DAY.add(hours=10, minutes=5), freeze=False)
    interval = (DAY.add(hours=9), DAY.add(hours=10))

    baseline = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        pq.write_table(data, work / "baseline.parquet", compression="snappy")
        baseline.append(time.perf_counter() - t0)
    base = statistics.median(baseline)
    rows = [("pyarrow write_table (baseline)", "PARQUET", base, args.rows / base, 1.0)]
    for name, src, fmt in cases:
        seconds = []
        for run in range(args.runs if fmt != "DELTA" else 1):
            (done,) = conn.run_sink(name, interval)
            assert done.rows == args.rows, done.line()
            seconds.append(done.seconds)
            print(f"  {name} run {run + 1}: {done.line()}", flush=True)
        med = statistics.median(seconds)
        label = f"sink from {'table' if src == 't' else 'view (Spark)'}"
        rows.append((label, fmt, med, args.rows / med, med / base))
    print()
    print(f"{'export':34} {'format':8} {'median s':>9} {'rows/s':>12} {'x baseline':>11}")
    for label, fmt, sec, rate, ratio in rows:
        print(f"{label:34} {fmt:8} {sec:9.2f} {rate:12,.0f} {ratio:11.1f}")
    if args.json:
        args.json.write_text(json.dumps([dict(zip(
            ["export", "format", "median_seconds", "rows_per_second", "vs_baseline"], r,
            strict=True)) for r in rows], indent=2))
    conn.close()
    pendulum.travel_back()


if __name__ == "__main__":
    main()
