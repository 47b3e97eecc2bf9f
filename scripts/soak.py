"""The fault-injecting soak (issue 19): ``make soak DURATION=<seconds> SEED=<n>``.

Several worker processes share one fresh home (writers, a ticker that also reads AS OF
the maintained views' uppers, a compactor, a DDL worker); the coordinator kill -9s them
at random moments and restarts them, and checks the invariants (mzflow_dev/soak/
checker.py) against DuckDB replaying the committed history. Exits 1 on a violation,
printing the seed and the shortest history found that reproduces it in a serial replay
(mzflow_dev/soak/replay.py; ``--shrink FILE`` and ``--replay FILE`` run a saved one).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from mzflow_dev.soak import history
from mzflow_dev.soak.coordinator import Options, Soak


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=180)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="kept after the run (default: a temporary folder, removed on success)")
    ap.add_argument("--kill-mean", type=float, default=10.0)
    ap.add_argument("--check-every", type=float, default=30.0)
    ap.add_argument("--json", type=Path, default=None, help="write the summary here")
    ap.add_argument("--cluster-spark", choices=("managed", "in-process"), default="managed",
                    help="where the workers' cluster ticks run: the warm managed servers and "
                         "tick services users get by default, or each worker's own Spark")
    ap.add_argument("--no-swaps", action="store_true",
                    help="no blue/green applies (mzflow_dev/soak/swaps.py)")
    ap.add_argument("--shrink-seconds", type=float, default=300,
                    help="time to look for a shorter reproducing history (0: none)")
    ap.add_argument("--shrink", type=Path, metavar="HISTORY",
                    help="no soak: shrink a saved history (journals/history.jsonl); "
                         "exits 1 when a replay reproduces its violation")
    ap.add_argument("--replay", type=Path, metavar="HISTORY",
                    help="no soak: replay a saved history once and check it")
    a = ap.parse_args(argv)
    if a.replay or a.shrink:
        return offline(a)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix=f"mzflow-soak-{a.seed}-"))
    soak = Soak(Options(a.duration, a.seed, workdir, kill_mean=a.kill_mean,
                        check_every=a.check_every, cluster_spark=a.cluster_spark,
                        swaps=not a.no_swaps))
    began = time.monotonic()
    ok = soak.run()
    summary = {"seed": a.seed, "passed": ok, "seconds": round(time.monotonic() - began),
               "workdir": str(workdir), **soak.summary(),
               "violations": soak.checker.violations,
               "worker errors": dict(soak.errors().most_common(20))}
    text = json.dumps(summary, indent=2, default=str)
    print(text)
    if a.json:
        a.json.write_text(text)
    if not ok:
        print(f"SOAK FAILED with seed {a.seed}; journals and home kept in {workdir}",
              file=sys.stderr)
        # The first violation a replay can check, if any.
        violation = next((v for v in soak.checker.violations
                          if not v.startswith(history.UNCHECKED)), soak.checker.violations[0])
        try:
            path = record(soak, workdir, a.seed, violation)
            _, ops = history.load(path)
            if a.shrink_seconds > 0:
                shrunk(a.seed, path, ops, violation, workdir, a.shrink_seconds)
            else:
                print(f"violation: {violation}\nthe full history is in {path}",
                      file=sys.stderr)
        except Exception:  # noqa: BLE001 - the failure, not the shrinker's, is the news
            print(f"recording or shrinking the history failed:\n{traceback.format_exc()}",
                  file=sys.stderr)
        finally:
            print(f"seed {a.seed}", file=sys.stderr)
        return 1
    if a.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def record(soak: Soak, workdir: Path, seed: int, violation: str) -> Path:
    """Journal the committed history the checker found ``violation`` in."""
    import mzflow

    conn = mzflow.connect(str(soak.home))
    try:
        snap = conn.store.snapshot()
        warehouse = conn.config.warehouse
    finally:
        conn.close()
    path = soak.journals / "history.jsonl"
    ops = history.build(workdir, soak.checker, snap, warehouse)
    history.save(path, ops, seed=seed, violation=violation, workdir=str(workdir))
    return path


def shrunk(seed: int | None, path: Path, ops: list[dict], violation: str, workdir: Path,
           seconds: float) -> bool:
    """Shrink, print the outcome; whether a replay reproduced the violation."""
    from mzflow_dev.soak import replay

    def say(line: str) -> None:
        print(f"shrink: {line}", file=sys.stderr, flush=True)

    say(f"{violation[:300]}")
    report = replay.shrink(ops, violation, workdir / "shrink", seconds, say)
    st = report.stats
    done = (f"{st.replays} replays in {report.seconds:.0f} s"
            + (", stopped by --shrink-seconds" if st.timed_out else ""))
    print(f"violation: {violation}", file=sys.stderr)
    if not report.reproduced:
        print(f"{report.note}; the full history is in {path} ({done})", file=sys.stderr)
        for line in st.log[-3:]:
            print(f"  {line}", file=sys.stderr)
        if report.note.startswith("time ran out"):
            print(f"more time: python scripts/soak.py --shrink {path} --shrink-seconds "
                  f"{int(seconds * 4)}", file=sys.stderr)
        return False
    out = workdir / "shrunk.jsonl"
    history.save(out, report.history, seed=seed, violation=violation, shrunk_from=str(path))
    sql = history.as_sql(report.history)
    (workdir / "shrunk.sql").write_text("\n".join(sql) + "\n")
    again = {True: "yes", False: "NO (flaky under replay)", None: "not run"}[report.confirmed]
    print(f"shortest reproducing history: {len(report.history)} of {report.original} "
          f"operations ({report.first} in the first that reproduced; {done}; replayed "
          f"again: {again}); {out} (python scripts/soak.py --replay {out}), as SQL in "
          f"{workdir / 'shrunk.sql'}:", file=sys.stderr)
    print("\n".join(sql), file=sys.stderr)
    return True


def offline(a: argparse.Namespace) -> int:
    """``--replay`` or ``--shrink`` of a saved history, in this process."""
    path = a.replay or a.shrink
    header, ops = history.load(path)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="mzflow-replay-"))
    if a.replay:
        from mzflow_dev.soak import replay

        out = replay.replay(ops, workdir / "replay")
        print(json.dumps({"operations": len(ops), "seconds": round(out.seconds),
                          "error": out.error, "violations": out.violations,
                          "seconds per operation": [round(t, 1) for t in out.took]},
                         indent=2))
        return 1 if out.violations else 0
    ok = shrunk(header.get("seed"), path, ops, header["violation"], workdir,
                a.shrink_seconds)
    print(f"seed {header.get('seed')}", file=sys.stderr)
    return 1 if ok else 0


if __name__ == "__main__":
    sys.exit(main())
