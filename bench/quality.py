"""What expectations add to a write: a 1M-row COPY with three column expectations against
the same COPY without any (issue 17's target: at most 1.5x), and with 1 % of the rows
failing a QUARANTINE expectation.

    python bench/quality.py [--rows 1000000] [--rounds 3]

Baseline named by the issue: the unvalidated COPY of the same file. Each round COPYs
into a fresh table; the figures are medians. Nothing here starts Spark.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from table_writes import orders_file  # bench/ is the script's folder

import mzflow

COLUMNS = "id bigint NOT NULL, customer int, amount numeric(12,2), note text"
# Three column expectations: two SQL conditions and one Great Expectations type.
CHECKS = ("CONSTRAINT amount_ok EXPECT (amount >= 0 AND amount < 100000) ON VIOLATION FAIL, "
          "CONSTRAINT note_ok EXPECT (note LIKE 'order %') ON VIOLATION FAIL, "
          "CONSTRAINT customer_known EXPECT expect_column_values_to_not_be_null "
          "(column => 'customer') ON VIOLATION FAIL")
QUARANTINE = "CONSTRAINT small EXPECT (customer < 9900) ON VIOLATION QUARANTINE"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mzflow-bench-quality-"))
    n = args.rows
    path = orders_file(home, n)  # the same file bench/table_writes.py COPYs
    variants = {"none": "", "three": ", " + CHECKS, "quarantine 1 %": ", " + QUARANTINE}
    times: dict[str, list[float]] = {v: [] for v in variants}
    statuses: dict[str, str] = {}
    with mzflow.connect(str(home)) as conn:
        for r in range(args.rounds):
            for i, (variant, checks) in enumerate(variants.items()):
                table = f"t{r}_{i}"
                conn.execute(f"CREATE TABLE {table} ({COLUMNS}{checks})")
                start = time.perf_counter()
                result = conn.execute(f"COPY {table} FROM '{path}' WITH (FORMAT parquet)")
                times[variant].append(time.perf_counter() - start)
                statuses[variant] = result.status
                print(f"round {r + 1}: {variant:>15}: {times[variant][-1]:.2f} s "
                      f"({result.status})", flush=True)
        quarantined = conn.execute("SELECT count(*) FROM mz_expectation_results WHERE "
                                   "expectation = 'small'").rows[0][0]
    base = statistics.median(times["none"])
    print(f"\nCOPY of {n:,} rows (median of {args.rounds}):")
    for variant in variants:
        t = statistics.median(times[variant])
        print(f"  {variant:>15}: {t:.2f} s = {t / base:.2f}x the unvalidated COPY "
              f"({statuses[variant]})")
    print("target: three expectations at most 1.50x "
          f"({'met' if statistics.median(times['three']) <= 1.5 * base else 'MISSED'}); "
          f"quarantine results recorded: {quarantined}")


if __name__ == "__main__":
    main()
