"""`mzflow serve` under clients: issue 35's targets, through psycopg over TCP.

    .venv/bin/python bench/serve.py [--round-trips 500] [--clients 50] [--short 10000]
                                    [--parts 1,2,3,4] [--py-spy FILE]

Starts `mzflow serve` on a fresh home (a password set on the `materialize` role: every
login is a real SCRAM-SHA-256 exchange), then measures:

1. a system-table SELECT's round trip on one connection (target: p50 ≤ 5 ms);
2. ``--clients`` connections at once, each doing catalog reads (target: no errors,
   p99 ≤ 50 ms);
3. 8 concurrent Spark-backed reads (target: all complete; the spread of their finish
   times shows how fairly they were queued);
4. the server's memory (VmRSS) over ``--short`` short connections (target: flat).

``--parts 1,2`` runs only those (no Spark, no table of ``--rows`` rows). ``--py-spy
FILE`` samples the server's GIL-holding stacks during part 2 (py-spy's raw format, one
line per distinct stack with its count; py-spy must be installed).

Baseline: the issue's targets (there was no server before). Prints each figure and
its ratio to its target; no test asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

import mzflow

PASSWORD = "bench-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def round_trips(dsn: str, n: int) -> float:
    """1. One connection's round trips; the p50."""
    with psycopg.connect(dsn, autocommit=True) as c:
        for _ in range(20):
            c.execute("SELECT * FROM mz_clusters").fetchall()
        ms = []
        for _ in range(n):
            t = time.perf_counter()
            c.execute("SELECT * FROM mz_clusters").fetchall()
            ms.append((time.perf_counter() - t) * 1000)
    p50 = statistics.median(ms)
    print(f"1. system-table round trip: p50 {p50:.2f} ms, p99 {_pct(ms, 99):.2f} ms "
          f"(n={len(ms)}); target p50 ≤ 5 ms: {5 / p50:.2f}× "
          f"{'met' if p50 <= 5 else 'MISSED'}")
    return p50


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """The process's user and system CPU time so far (a busy machine slows the clock
    figures, not these)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def many_clients(dsn: str, clients: int, reads: int, server_pid: int) -> bool:
    """2. Many clients at once, each reading the catalog; whether the target was met."""
    cpu = _cpu_seconds(server_pid)
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                mine = []
                for _ in range(reads):
                    t = time.perf_counter()
                    c.execute("SELECT name FROM mz_clusters").fetchall()
                    mine.append((time.perf_counter() - t) * 1000)
            with lock:
                lat.extend(mine)
        except Exception as e:  # counted, and the figure says so
            with lock:
                errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    user, system = (now - then for now, then in zip(_cpu_seconds(server_pid), cpu,
                                                     strict=True))
    p99 = _pct(lat, 99) if lat else float("nan")
    ok = not errors and p99 <= 50
    print(f"2. {clients} concurrent clients × {reads} catalog reads: "
          f"{len(errors)} errors, p50 {statistics.median(lat):.2f} ms, p99 {p99:.2f} ms; "
          f"target no errors and p99 ≤ 50 ms: {'met' if ok else 'MISSED'}; the server's "
          f"CPU: {user:.2f} s user + {system:.2f} s system, "
          f"{(user + system) * 1000 / max(1, clients * reads):.3f} ms a read "
          f"(its client's login included)")
    for e in errors[:3]:
        print(f"   error: {e}")
    return ok


def spark_reads(dsn: str, rows: int) -> bool:
    """3. Spark-backed reads at once; whether all completed."""
    done: list[tuple[int, float]] = []
    failed: list[str] = []
    lock = threading.Lock()
    start = time.perf_counter()

    def spark_read(i: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f"SELECT k % {i + 2} AS g, sum(v) FROM big GROUP BY 1").fetchall()
            with lock:
                done.append((i, time.perf_counter() - start))
        except Exception as e:
            with lock:
                failed.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=spark_read, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    finish = sorted(s for _, s in done)
    print(f"3. 8 concurrent Spark-backed reads of {rows} rows: {len(done)} done, "
          f"{len(failed)} failed; finished at "
          f"{', '.join(f'{s:.1f}' for s in finish)} s; target all complete: "
          f"{'met' if not failed else 'MISSED'}")
    for e in failed[:3]:
        print(f"   error: {e}")
    return not failed


def memory(dsn: str, pid: int, short: int) -> bool:
    """4. The server's memory over many short connections; whether it stayed flat."""
    before = _rss_mib(pid)
    marks = []
    for i in range(1, short + 1):
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT 1").fetchall()
        if i % max(1, short // 5) == 0:
            marks.append((i, _rss_mib(pid)))
    grew = marks[-1][1] - marks[0][1] if marks else float("nan")
    flat = grew <= 0.05 * marks[0][1] if marks else False
    print(f"4. server RSS over {short} short connections: {before:.0f} MiB before, "
          + ", ".join(f"{m:.0f} MiB at {i}" for i, m in marks)
          + f"; grew {grew:+.0f} MiB from the first mark; target flat (≤ 5 %): "
          f"{'met' if flat else 'MISSED'}")
    return flat


def _py_spy(pid: int, out: str) -> subprocess.Popen[bytes] | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("py-spy is not installed: part 2 runs without it")
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--gil", "--format", "raw",
                             "--rate", "250", "--output", out], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--round-trips", type=int, default=500, help="SELECTs on one connection")
    ap.add_argument("--clients", type=int, default=50, help="concurrent connections")
    ap.add_argument("--reads", type=int, default=40, help="catalog reads per concurrent client")
    ap.add_argument("--short", type=int, default=10_000, help="short connections (memory)")
    ap.add_argument("--rows", type=int, default=2_000_000,
                    help="rows of the table the Spark-backed reads scan")
    ap.add_argument("--parts", default="1,2,3,4", help="which measurements to run")
    ap.add_argument("--py-spy", metavar="FILE", help="sample the server during part 2")
    args = ap.parse_args()
    parts = {int(p) for p in args.parts.split(",")}
    home = Path(tempfile.mkdtemp(prefix="mzflow-serve-bench-"))
    with mzflow.connect(str(home)) as conn:
        conn.execute(f"ALTER ROLE materialize WITH PASSWORD '{PASSWORD}'")
        if 3 in parts:
            conn.execute("CREATE TABLE big (k bigint, v bigint)")
            conn.execute("INSERT INTO big SELECT x % 1000, x "
                         f"FROM generate_series(1, {args.rows}) AS x")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mzflow.cli", "serve", "--port", str(port)],
        env={**os.environ, "MZFLOW_HOME": str(home)}, stdout=subprocess.DEVNULL,
        stderr=open(home / "serve.log", "w"))
    dsn = f"host=127.0.0.1 port={port} user=materialize password={PASSWORD} dbname=materialize"
    try:
        for _ in range(300):
            try:
                psycopg.connect(dsn, autocommit=True).close()
                break
            except psycopg.OperationalError:
                time.sleep(0.1)
        else:
            print(f"the server did not start: see {home / 'serve.log'}")
            return 1
        failures = 0
        if 1 in parts:
            failures += round_trips(dsn, args.round_trips) > 5
        if 2 in parts:
            spy = _py_spy(server.pid, args.py_spy) if args.py_spy else None
            failures += not many_clients(dsn, args.clients, args.reads, server.pid)
            if spy is not None:
                spy.send_signal(2)  # py-spy writes its file on SIGINT
                spy.wait(60)
                print(f"   py-spy's samples of part 2: {args.py_spy}")
        if 3 in parts:
            failures += not spark_reads(dsn, args.rows)
        if 4 in parts:
            failures += not memory(dsn, server.pid, args.short)
        return 1 if failures else 0
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    raise SystemExit(main())
