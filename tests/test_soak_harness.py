"""The soak coordinator's own failure paths (mzflow_dev/soak/coordinator.py, issue 19),
without a soak and without Spark.

The second 60-minute soak of session 15 died when its locked-catalog fault found the
lock held for a whole minute, and its workers ran on unwatched for 40 minutes.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mzflow_dev.soak import coordinator
from mzflow_dev.soak.coordinator import Options, Proc, Soak


def _events(soak: Soak) -> list[dict]:
    path = soak.journals / "coordinator.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_catalog_lock_busy_for_the_whole_wait_is_counted_not_a_crash(tmp_path: Path) -> None:
    soak = Soak(Options(duration=1, seed=1, workdir=tmp_path, lock_wait=0.3))
    soak.home.mkdir(parents=True)
    holder = sqlite3.connect(soak.home / "catalog.db", isolation_level=None)
    holder.execute("CREATE TABLE x (a int)")
    holder.execute("BEGIN IMMEDIATE")  # someone holds the write lock past the wait
    soak._lock_catalog(0.05)
    assert soak.counts["catalog locks not taken (busy for the whole wait)"] == 1
    assert soak.counts["catalog locks"] == 0
    assert [e["ev"] for e in _events(soak)] == ["lock_busy"]
    holder.execute("ROLLBACK")
    soak._lock_catalog(0.05)
    assert soak.counts["catalog locks"] == 1
    assert soak.counts["longest wait for the catalog lock (ms)"] < 300
    assert [e["ev"] for e in _events(soak)] == ["lock_busy", "lock"]
    holder.close()


@pytest.mark.slow  # starts (stand-in) worker processes
def test_an_error_in_the_coordinators_loop_kills_every_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    soak = Soak(Options(duration=60, seed=1, workdir=tmp_path, writers=1))
    started: list[subprocess.Popen[bytes]] = []

    def start(self: Soak, p: Proc) -> None:
        # A stand-in worker: its own session, as a real one, so that the kill is the
        # coordinator's process-group kill.
        p.popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                   start_new_session=True)
        started.append(p.popen)

    def broken_loop(self: Soak, *args: object) -> None:
        raise RuntimeError("the coordinator's check failed (injected)")

    monkeypatch.setattr(Soak, "setup", lambda self: None)
    monkeypatch.setattr(Soak, "_start", start)
    monkeypatch.setattr(Soak, "_loop", broken_loop)
    with pytest.raises(RuntimeError, match="injected"):
        soak.run()
    # a writer, the ticker, the compactor, the DDL and swaps workers; the server, its
    # client and the landing worker
    assert len(started) == 8
    assert all(p.poll() is not None for p in started), [p.pid for p in started]
    assert coordinator.signal.SIGKILL in {-p.returncode for p in started}
