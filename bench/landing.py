"""Landing folders (issue 37's targets): a folder of many small files in one COPY, a
second COPY with nothing new (target <= 1 s), and the throughput of a folder against a
single COPY of the same rows as one file (target: within 1.2x).

    .venv/bin/python bench/landing.py [--files 1000] [--rows 1] [--big-files 10]
        [--big-rows 100000] [--format csv] [--s3] [--profile]

Loads into fresh tables of one home, wall-clock, in this process (no Spark):

1. ``--files`` files of ``--rows`` rows each, then the same COPY again;
2. ``--big-files`` files of ``--big-rows`` rows each (the throughput case: data, not
   per-file overhead);
3. the same rows as (2) in one file, through the one-file COPY: the baseline.

``--s3`` puts the folders in a moto S3 server on loopback (moto must be installed: the
dev extra). ``--profile`` prints cProfile's top functions of load (1).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mzflow


def _write(folder: Path, files: int, rows: int, fmt: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    n = 0
    for i in range(files):
        p = folder / f"part{i:05d}.{fmt}"
        lines = []
        for _ in range(rows):
            lines.append(f"{n},name-{n},{n * 0.25:.2f}\n")
            n += 1
        p.write_text("".join(lines))
        out.append(p)
    return out


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint})
    return proc, endpoint


def _upload(files: list[Path], prefix: str) -> str:
    import boto3

    s3 = boto3.client("s3")
    if not any(b["Name"] == "bench" for b in s3.list_buckets().get("Buckets", [])):
        s3.create_bucket(Bucket="bench")
    for f in files:
        s3.put_object(Bucket="bench", Key=f"{prefix}/{f.name}", Body=f.read_bytes())
    return f"s3://bench/{prefix}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--big-files", type=int, default=10)
    ap.add_argument("--big-rows", type=int, default=100_000)
    ap.add_argument("--format", default="csv", choices=["csv"])
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of loads 2 and 3, alternating; medians are reported")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    proc = None
    if args.s3:
        proc, endpoint = _moto()
        print(f"S3: moto on {endpoint}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            small = _write(root / "small", args.files, args.rows, args.format)
            big = _write(root / "big", args.big_files, args.big_rows, args.format)
            one = root / "one.csv"
            with open(one, "w") as out:
                for f in big:
                    out.write(f.read_text())
            small_at, big_at = str(root / "small"), str(root / "big")
            if args.s3:
                small_at, big_at = _upload(small, "small"), _upload(big, "big")
            with mzflow.connect(str(root / "home")) as conn:
                for t in ["small"] + [f"{k}{i}" for i in range(args.repeat)
                                      for k in ("big", "one")]:
                    conn.execute(f"CREATE TABLE {t} (id bigint, name text, amount numeric(12,2))")
                prof = cProfile.Profile() if args.profile else None
                t0 = time.perf_counter()
                if prof:
                    prof.enable()
                r = conn.execute(f"COPY small FROM '{small_at}' WITH (FORMAT csv)")
                if prof:
                    prof.disable()
                first = time.perf_counter() - t0
                assert r.status == f"COPY {args.files * args.rows}", r.status
                t0 = time.perf_counter()
                again = conn.execute(f"COPY small FROM '{small_at}' WITH (FORMAT csv)")
                second = time.perf_counter() - t0
                assert again.status == "COPY 0", again.status
                folders, singles = [], []
                for i in range(args.repeat):
                    t0 = time.perf_counter()
                    conn.execute(f"COPY big{i} FROM '{big_at}' WITH (FORMAT csv)")
                    folders.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    conn.execute(f"COPY one{i} FROM '{one}' WITH (FORMAT csv)")
                    singles.append(time.perf_counter() - t0)
                    counts = [conn.execute(f"SELECT count(*) FROM {t}{i}").rows[0][0]
                              for t in ("big", "one")]
                    assert counts[0] == counts[1] == args.big_files * args.big_rows, counts
                folder, single = statistics.median(folders), statistics.median(singles)
        print(f"1. {args.files} files of {args.rows} row(s): {first:.2f} s "
              f"({first / args.files * 1000:.1f} ms a file)")
        print(f"   a second COPY, nothing new: {second:.3f} s (target <= 1 s: "
              f"{'met' if second <= 1 else 'MISSED'})")
        rows = args.big_files * args.big_rows
        print(f"2. {args.big_files} files of {args.big_rows:,} rows, median of "
              f"{args.repeat}: {folder:.2f} s "
              f"({rows / folder:,.0f} rows/s)")
        print(f"3. the same {rows:,} rows as one file: {single:.2f} s "
              f"({rows / single:,.0f} rows/s)")
        ratio = folder / single
        print(f"   folder / one file: {ratio:.2f}x (target <= 1.2x: "
              f"{'met' if ratio <= 1.2 else 'MISSED'})")
        if prof:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    finally:
        if proc is not None:
            proc.terminate()


if __name__ == "__main__":
    main()
