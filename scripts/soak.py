"""The fault-injecting soak (issue 19): ``make soak DURATION=<seconds> SEED=<n>``.

Several worker processes share one fresh home (writers, a ticker that also reads AS OF
the maintained views' uppers, a compactor, a DDL worker); the coordinator kill -9s them
at random moments and restarts them, and checks the invariants (scripts/soaklib/
checker.py) against DuckDB replaying the committed history. Exits 1 on a violation,
printing the seed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from soaklib.checker import history  # noqa: E402
from soaklib.coordinator import Options, Soak  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=180)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="kept after the run (default: a temporary folder, removed on success)")
    ap.add_argument("--kill-mean", type=float, default=10.0)
    ap.add_argument("--check-every", type=float, default=30.0)
    ap.add_argument("--json", type=Path, default=None, help="write the summary here")
    a = ap.parse_args(argv)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix=f"mzflow-soak-{a.seed}-"))
    soak = Soak(Options(a.duration, a.seed, workdir, kill_mean=a.kill_mean,
                        check_every=a.check_every))
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
        for relation, at in soak.checker.failed[:3]:
            lines = history(soak.checker, relation, at)
            path = workdir / f"history-{relation}-{at}.sql"
            path.write_text("\n".join(lines) + "\n")
            print(f"history of {relation} at {at} ({len(lines) - 1} statements): {path}",
                  file=sys.stderr)
            print("\n".join(lines[:40]), file=sys.stderr)
        print(f"SOAK FAILED with seed {a.seed}; journals and home kept in {workdir}",
              file=sys.stderr)
        return 1
    if a.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
