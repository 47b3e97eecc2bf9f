"""Projections (issue 16): a Q1-shaped aggregate read with and without an aggregate
projection, and what the projection adds to a 1 % INSERT.

    .venv/bin/python bench/projections.py --sf 1

Loads TPC-H's lineitem at ``--sf`` twice (``lineitem`` with the projection, and
``lineitem_plain`` without), then prints, as medians of ``--repeat`` runs:

* the Q1-shaped read with ``optimize_use_projections`` off and on, and their ratio
  (target: at least 20× faster with the projection); both answers are checked against
  DuckDB;
* a 1 % INSERT (COPY of new line items) into each table, and their ratio (target: at
  most 1.5× the time without the projection).

* a point lookup ``WHERE l_orderkey = …`` with routing off and on, answered by a
  sorted projection on l_orderkey (target: at least 10× faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

import mzflow
from mzflow_dev.tpch import data

Q1_AGGS = """sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS sum_base_price,
  sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
  sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
  avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price,
  avg(l_discount) AS avg_disc, count(*) AS count_order"""
Q1_WHERE = "l_shipdate <= DATE '1998-09-02'"
PROJECTION = (f"ALTER TABLE lineitem ADD PROJECTION q1 (SELECT l_returnflag, l_linestatus, "
              f"{Q1_AGGS} WHERE {Q1_WHERE} GROUP BY l_returnflag, l_linestatus)")
SORTED = ("ALTER TABLE lineitem ADD PROJECTION by_order (SELECT l_orderkey, l_partkey, "
          "l_quantity, l_extendedprice, l_shipdate ORDER BY l_orderkey)")
LOOKUP = ("SELECT l_partkey, l_quantity, l_extendedprice, l_shipdate FROM lineitem "
          "WHERE l_orderkey = {key} ORDER BY 1, 2, 3")
QUERY = (f"SELECT l_returnflag, l_linestatus, {Q1_AGGS} FROM lineitem WHERE {Q1_WHERE} "
         "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement")
    args = ap.parse_args()
    started = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {msg}", flush=True)

    files = data.generate(args.sf)
    source = files / "lineitem.parquet"
    db = duckdb.connect()
    db.execute(data.create_sql("lineitem"))
    db.execute(f"INSERT INTO lineitem SELECT * FROM read_parquet('{source}')")
    home = Path(tempfile.mkdtemp(prefix="mzflow-proj-bench-"))
    wrong = 0
    with mzflow.connect(str(home)) as conn:
        for table in ("lineitem", "lineitem_plain"):
            conn.execute(data.create_sql("lineitem").replace("lineitem", table, 1))
            conn.execute(f"COPY {table} FROM '{source}' WITH (FORMAT parquet)")
        say(f"loaded {db.execute('SELECT count(*) FROM lineitem').fetchone()[0]} line items "
            "twice")
        for ddl, name in ((PROJECTION, "q1"), (SORTED, "by_order")):
            t = time.perf_counter()
            conn.execute(ddl)
            notice = conn.execute(f"ALTER TABLE lineitem MATERIALIZE PROJECTION {name}"
                                  ).notices
            say(f"projection {name} added and materialized in "
                f"{time.perf_counter() - t:.2f} s: {notice}")
        say("EXPLAIN: " + "; ".join(line for line in conn.execute(f"EXPLAIN {QUERY}").rows[0][0]
                                    .splitlines() if line.startswith(("Projection:", "Read:"))))
        expected = db.execute(QUERY).fetchall()

        def read(on: bool) -> float:
            nonlocal wrong
            conn.execute(f"SET optimize_use_projections = {'on' if on else 'off'}")
            t = time.perf_counter()
            rows = conn.execute(QUERY).rows
            took = time.perf_counter() - t
            problem = data.same_rows(rows, expected)
            if problem:
                wrong += 1
                say(f"routing {'on' if on else 'off'}: DIFFERS FROM DUCKDB: {problem}")
            return took

        read(False), read(True)  # warm-up
        off = [read(False) for _ in range(args.repeat)]
        on = [read(True) for _ in range(args.repeat)]
        say(f"Q1-shaped read: off {statistics.median(off):.3f} s, on "
            f"{statistics.median(on):.3f} s")

        keys = [k for (k,) in db.execute("SELECT l_orderkey FROM lineitem USING SAMPLE 7 "
                                         "ROWS").fetchall()]
        say("EXPLAIN lookup: " + "; ".join(line for line in conn.execute(
            "EXPLAIN " + LOOKUP.format(key=keys[0])).rows[0][0].splitlines()
            if line.startswith(("Projection:", "Read:"))))

        def lookup(on: bool, key: int) -> float:
            nonlocal wrong
            conn.execute(f"SET optimize_use_projections = {'on' if on else 'off'}")
            sql = LOOKUP.format(key=key)
            t = time.perf_counter()
            rows = conn.execute(sql).rows
            took = time.perf_counter() - t
            problem = data.same_rows(rows, db.execute(sql).fetchall())
            if problem:
                wrong += 1
                say(f"lookup, routing {'on' if on else 'off'}: DIFFERS FROM DUCKDB: {problem}")
            return took

        lookup(False, keys[0]), lookup(True, keys[0])  # warm-up
        look_off = [lookup(False, k) for k in keys[1:1 + args.repeat]]
        look_on = [lookup(True, k) for k in keys[1:1 + args.repeat]]
        say(f"point lookup: off {statistics.median(look_off):.3f} s, on "
            f"{statistics.median(look_on):.3f} s")

        # 1 % INSERTs: the same new line items into both tables, alternately.
        rows = pq.read_table(source)
        n = max(1, rows.num_rows // 100)
        insert: dict[str, list[float]] = {"lineitem": [], "lineitem_plain": []}
        for i in range(args.repeat):
            batch = home / f"batch{i}.parquet"
            pq.write_table(rows.slice(i * n, n), batch)
            for table in ("lineitem_plain", "lineitem"):
                t = time.perf_counter()
                conn.execute(f"COPY {table} FROM '{batch}' WITH (FORMAT parquet)")
                insert[table].append(time.perf_counter() - t)
            db.execute(f"INSERT INTO lineitem SELECT * FROM read_parquet('{batch}')")
        say(f"1 % insert ({n} rows): plain {statistics.median(insert['lineitem_plain']):.2f} s, "
            f"with projection {statistics.median(insert['lineitem']):.2f} s")
        expected = db.execute(QUERY).fetchall()
        read(True)
        say("after the inserts, EXPLAIN: " + [
            line for line in conn.execute(f"EXPLAIN {QUERY}").rows[0][0].splitlines()
            if "rojection" in line][0])
        history = conn.execute("SELECT operation, parts, rows, seconds FROM "
                               "mz_projection_history").rows
        say(f"mz_projection_history: {history}")

    read_ratio = statistics.median(off) / statistics.median(on)
    insert_ratio = (statistics.median(insert["lineitem"])
                    / statistics.median(insert["lineitem_plain"]))
    print(f"\nTPC-H SF {args.sf:g}, medians of {args.repeat}")
    print(f"{'measure':<44} {'without':>9} {'with':>9} {'ratio':>7}  target")
    print(f"{'Q1-shaped read (aggregate projection)':<44} {statistics.median(off):>9.3f} "
          f"{statistics.median(on):>9.3f} {read_ratio:>6.1f}×  >= 20× faster: "
          f"{'met' if read_ratio >= 20 else 'MISSED'}")
    print(f"{'1 % INSERT into lineitem':<44} "
          f"{statistics.median(insert['lineitem_plain']):>9.2f} "
          f"{statistics.median(insert['lineitem']):>9.2f} {insert_ratio:>6.2f}×  <= 1.5×: "
          f"{'met' if insert_ratio <= 1.5 else 'MISSED'}")
    look_ratio = statistics.median(look_off) / statistics.median(look_on)
    print(f"{'point lookup on l_orderkey (sorted projection)':<44} "
          f"{statistics.median(look_off):>9.3f} {statistics.median(look_on):>9.3f} "
          f"{look_ratio:>6.1f}×  >= 10× faster: {'met' if look_ratio >= 10 else 'MISSED'}")
    if wrong:
        print(f"{wrong} answers differed from DuckDB")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
