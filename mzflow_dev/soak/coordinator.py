"""The coordinator: one fresh home, the workers on it, kill -9 at random moments,
restarts, and the checker every ``check_every`` seconds and at the end.

Each worker runs in its own session (process group), so a kill reaches its Spark JVM
too, exactly as a machine losing the process would; nothing else is ever signalled.
The kill schedule comes from the seed; what the workers interleave is up to the OS.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mzflow_dev.soak import ops, warm, wire
from mzflow_dev.soak.checker import Checker
from mzflow_dev.soak.journal import Journal, records

WORKER = "mzflow_dev.soak.worker"  # run as a module: the package, not a path


@dataclass
class Options:
    duration: float
    seed: int
    workdir: Path
    kill_mean: float = 10.0  # mean seconds between kills
    check_every: float = 30.0
    retain: str = "90s"
    writers: int = 2
    write_pause: float = 0.3
    tick_pause: float = 1.0
    compact_pause: float = 20.0
    ddl_pause: float = 3.0
    lock_mean: float = 40.0  # mean seconds between locked-catalog faults
    full_mean: float = 45.0  # mean seconds between disk-full faults
    lock_wait: float = 60.0  # how long the locked-catalog fault waits for the lock
    # Issue 39: the default configuration (warm.py), "in-process" to force the old one;
    # a share of the kills hits a cluster's tick service or Spark server instead.
    cluster_spark: str = "managed"
    warm_kill_share: float = 0.3
    swaps: bool = True  # blue/green applies (swaps.py)
    swap_pause: float = 40.0


@dataclass
class Proc:
    role: str
    name: str
    args: dict[str, Any]
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0


@dataclass
class Soak:
    opts: Options
    counts: Counter = field(default_factory=Counter)
    procs: list[Proc] = field(default_factory=list)
    memory: list[tuple[int, int, int, int]] = field(default_factory=list)  # pid, ticks, rss
    warm_memory: list[tuple[warm.Warm, int, int]] = field(default_factory=list)
    storage: dict[str, tuple[int, int]] = field(default_factory=dict)  # live, on disk

    def __post_init__(self) -> None:
        w = self.opts.workdir
        self.home = w / "home"
        self.journals = w / "journals"
        self.stop = w / "stop"
        self.logs = w / "logs"
        for d in (self.journals, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.events = Journal(self.journals / "coordinator.jsonl")
        self.checker = Checker(self.home, self.journals)

    def _args(self, role: str, name: str, **extra: Any) -> dict[str, Any]:
        o = self.opts
        return {"role": role, "name": name, "home": str(self.home), "seed": o.seed,
                "journal": str(self.journals / f"{name}.jsonl"), "stop": str(self.stop),
                "retain": o.retain, "write_pause": o.write_pause, "tick_pause": o.tick_pause,
                "compact_pause": o.compact_pause, "ddl_pause": o.ddl_pause,
                "swaps": o.swaps, "swap_pause": o.swap_pause, **extra}

    def _start(self, p: Proc) -> None:
        args_path = self.logs / f"{p.name}.json"
        args_path.write_text(json.dumps(p.args))
        env = dict(os.environ, MZFLOW_CLUSTER_SPARK=self.opts.cluster_spark,
                   PYTHONUNBUFFERED="1")
        with open(self.logs / f"{p.name}.{p.starts}.log", "wb") as log:
            p.popen = subprocess.Popen([sys.executable, "-m", WORKER, str(args_path)],
                                       stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
        p.starts += 1

    def _kill(self, p: Proc) -> None:
        assert p.popen is not None
        try:
            os.killpg(p.popen.pid, signal.SIGKILL)  # the worker and its JVM: its own group
        except ProcessLookupError:
            pass
        p.popen.wait()

    def setup(self) -> None:
        p = Proc("setup", "setup", self._args("setup", "setup"))
        self._start(p)
        assert p.popen is not None
        if p.popen.wait() != 0:
            raise RuntimeError(f"setup failed: see {self.logs}/setup.0.log")

    def run(self) -> bool:
        o = self.opts
        self.setup()
        for i in range(o.writers):
            # Writer 1 also UPDATEs and DELETEs (on Spark); the others only append.
            name = f"w{i + 1}"
            self.procs.append(Proc("writer", name, self._args("writer", name, index=i + 1,
                                                                spark=i == 0)))
        for role in ("ticker", "compactor", "ddl") + (("swaps",) if o.swaps else ()):
            self.procs.append(Proc(role, role, self._args(role, role)))
        # `mzflow serve`, a client through it as three roles, a landing folder (wire.py,
        # landing.py): killed and restarted like the rest.
        port = wire.free_port()
        for role in ("server", "pgclient", "landing"):
            self.procs.append(Proc(role, role, self._args(role, role, port=port)))
        for p in self.procs:
            self._start(p)
        rng = random.Random(f"{o.seed}/kills")
        began = time.monotonic()
        next_kill = began + rng.expovariate(1 / o.kill_mean)
        next_check = began + o.check_every
        next_lock = began + rng.expovariate(1 / o.lock_mean)
        next_full = began + rng.expovariate(1 / o.full_mean)
        next_sample = began
        try:
            self._loop(o, rng, began, next_kill, next_check, next_lock, next_full,
                       next_sample)
        except BaseException:
            for p in self.procs:  # else they go on, unwatched, on the soak's home
                if p.popen is not None and p.popen.poll() is None:
                    self._kill(p)
            warm.stop_all(self.home)
            raise
        self._finish()
        return not self.checker.violations

    def _loop(self, o: Any, rng: random.Random, began: float, next_kill: float,
              next_check: float, next_lock: float, next_full: float,
              next_sample: float) -> None:
        while time.monotonic() - began < o.duration and not self.checker.violations:
            time.sleep(0.2)
            now = time.monotonic()
            for p in self.procs:
                assert p.popen is not None
                if p.popen.poll() is not None:
                    self.counts["unexpected exits"] += 1
                    self.events.write(ev="exited", name=p.name, rc=p.popen.returncode)
                    self._start(p)
            if now >= next_kill and rng.random() < o.warm_kill_share and (
                    hit := warm.kill_one(self.home, rng)) is not None:
                self.counts["kills"] += 1
                self.counts[f"kills: {hit.kind}"] += 1
                self.events.write(ev="kill", name=f"{hit.kind} {hit.cluster}", pid=hit.pid)
                next_kill = time.monotonic() + rng.expovariate(1 / o.kill_mean)
            if now >= next_kill:
                # The ticker restarts slowest (its Spark): killed less often, it ticks.
                weights = [0.4 if p.role in ("ticker", "swaps") else 1.0 for p in self.procs]
                victim = rng.choices(self.procs, weights)[0]
                self._kill(victim)
                self.counts["kills"] += 1
                self.events.write(ev="kill", name=victim.name)
                time.sleep(rng.uniform(0.2, 2.0))
                self._start(victim)
                next_kill = time.monotonic() + rng.expovariate(1 / o.kill_mean)
            if now >= next_full:
                self._disk_full(rng.choice([p for p in self.procs if p.role != "ticker"]),
                                rng.uniform(1.0, 5.0))
                next_full = time.monotonic() + rng.expovariate(1 / o.full_mean)
            if now >= next_lock:
                self._lock_catalog(rng.uniform(0.5, 4.0))
                next_lock = time.monotonic() + rng.expovariate(1 / o.lock_mean)
            if now >= next_sample:
                self._sample_memory()
                next_sample = now + 5
            if now >= next_check:
                self._check()
                next_check = time.monotonic() + o.check_every

    def _lock_catalog(self, seconds: float) -> None:
        """The locked-catalog fault: hold SQLite's write lock a while, as a long DDL or
        a stuck process would; writers must wait it out (or fail cleanly), never err."""
        import sqlite3

        db = sqlite3.connect(self.home / "catalog.db", isolation_level=None,
                             timeout=self.opts.lock_wait)
        try:
            started = time.monotonic()
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                # Someone held the write lock for the whole minute (the second 60-minute
                # soak of session 15 died here, its workers left running): a finding
                # for the summary, not the end of the soak.
                self.counts["catalog locks not taken (busy for the whole wait)"] += 1
                self.events.write(ev="lock_busy", error=str(e),
                                  waited=time.monotonic() - started)
                return
            waited = time.monotonic() - started
            # The longest any writer waited here for the lock: how long a writer can be
            # held back (compaction once held it for every table at once).
            key = "longest wait for the catalog lock (ms)"
            self.counts[key] = max(self.counts[key], int(waited * 1000))
            time.sleep(seconds)
            db.execute("ROLLBACK")
            self.counts["catalog locks"] += 1
            self.events.write(ev="lock", seconds=seconds, waited=waited)
        finally:
            db.close()

    def _disk_full(self, p: Proc, seconds: float) -> None:
        """The disk-full fault, for one worker: no file it writes may grow past 4 kB
        (RLIMIT_FSIZE; its writes fail with EFBIG, as on a full disk) for a while. The
        catalog's WAL and Delta's files alike: a write must fail whole or land once."""
        import resource

        assert p.popen is not None
        pid = p.popen.pid
        try:
            _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (4096, hard))
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(seconds)
        try:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        except ProcessLookupError:
            pass
        self.counts["disk-full faults"] += 1
        self.events.write(ev="disk_full", name=p.name, seconds=seconds)

    def _sample_memory(self) -> None:
        """RSS of the ticker's Python and of its process group (its JVM), with how
        many ticks this incarnation has done: the summary compares tick 100 with the last."""
        p = next(p for p in self.procs if p.role == "ticker")
        assert p.popen is not None
        group = 0
        py = warm.rss_kb(p.popen.pid)
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if os.getpgid(int(pid)) == p.popen.pid:
                        group += warm.rss_kb(int(pid))
                except OSError:
                    continue
        ticks = sum(1 for r in records(self.journals / "ticker.jsonl")
                    if r.get("ev") == "tick" and r.get("pid") == p.popen.pid)
        self.memory.append((p.popen.pid, ticks, py, group))
        served = sum(1 for r in records(self.journals / "ticker.jsonl")
                     if r.get("ev") == "tick" and r.get("served"))
        self.warm_memory += [(w, served, warm.rss_kb(w.pid)) for w in warm.processes(self.home)]

    def _check(self, final: bool = False) -> None:
        try:
            self.checker.run(final=final)
        except Exception as exc:  # a checker that cannot read is not a verdict: retry
            self.counts["check passes failed"] += 1
            self.events.write(ev="check_failed", error=repr(exc)[:500])
            if final:
                raise

    def _finish(self) -> None:
        self.stop.write_text("stop")
        for p in self.procs:  # the server watches no stop file: SIGTERM stops it cleanly
            if p.role == "server" and p.popen is not None and p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 120
        for p in self.procs:
            assert p.popen is not None
            try:
                p.popen.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._kill(p)
        self._check(final=True)
        warm.check_recovery(self.journals, self.checker.fail, self.checker.counts)
        try:
            self._storage_bounded()
        finally:
            # The warm servers would idle on for cluster_idle_seconds after the soak.
            self.counts["warm servers stopped at the end"] += warm.stop_all(self.home)

    def _storage_bounded(self) -> None:
        """Storage stays bounded after compaction: with history retained for 1 s and
        every time closed, ``mzflow compact`` leaves each table and index with about the
        files of its newest version (a sink's hold may keep a few more)."""
        from deltalake import DeltaTable

        import mzflow
        from mzflow.catalog.store import now_ms
        from mzflow.storage import paths

        conn = mzflow.connect(str(self.home))
        try:
            conn.execute("ALTER SYSTEM SET retain_history = '1s'")
            # Each index holds its inputs from where its next tick starts (issue 39):
            # tick them all first, so that no index lagging since its last kill holds
            # the tables' history (an index whose tick fails keeps its hold: excused below).
            try:
                conn.tick()
            except Exception as e:  # the check below says what stayed held
                self.checker.counts[f"final tick failed: {type(e).__name__}"] += 1
            # Twice: the files a compaction's own OPTIMIZE replaces are still needed at
            # its since (the version before the OPTIMIZE); the next one may remove them.
            # With one, the bound depended on how recently the compactor worker had run.
            for _ in range(2):
                time.sleep(1.5)
                conn.store.advance_read_ts(now_ms() - 1)
                conn.compact()
            snap = conn.store.snapshot()
            report = {}
            # What a sink holds: its source, and the tables a view it exports reads.
            held = set(ops.SINKS.values()) | {
                snap.item(dep).name for src in ops.SINKS.values()
                if (found := snap.find(src)) is not None for dep in found.depends_on}
            from mzflow.catalog import holds as catalog_holds

            by_index = {h.object_id for h in catalog_holds.listed(conn.store.engine)
                        if h.holder == "INDEX" and h.read_time < now_ms() - 5_000}
            ids = {i.id: i.name for i in snap.items}
            lagging = {ids[i] for i in by_index if i in ids}
            self.checker.counts["tables held by a lagging index at the end"] += len(lagging)
            held |= lagging
            for item in snap.items:
                if item.kind not in ("table", "index"):
                    continue
                path = conn.config.warehouse / item.id
                if not (path / "_delta_log").is_dir():
                    continue
                live = len(DeltaTable(str(path)).file_uris())
                on_disk = sum(1 for f in path.rglob("*.parquet") if "_delta_log" not in f.parts)
                report[item.name] = (live, on_disk)
                self.checker.counts["storage checks"] += 1
                if item.name in held:
                    continue  # its sink's hold keeps the versions of the open interval
                if on_disk > 2 * live + 10:
                    self.checker.fail(f"storage of {item.name} not bounded after compaction: "
                                      f"{on_disk} files on disk, {live} live")
            # A projection's shard gains a file per write too; compaction vacuums it.
            for projection in snap.projections:
                path = paths.projection(conn.config.warehouse, projection.table_id,
                                        projection.id)
                if not (path / "_delta_log").is_dir():
                    continue
                live = len(DeltaTable(str(path)).file_uris())
                # files and folders: a projection's part folders are named after its
                # table's files ("…parquet"), and each would stay behind, empty
                on_disk = sum(1 for f in path.rglob("*.parquet")
                              if "_delta_log" not in f.parts)
                report[f"projection {projection.name}"] = (live, on_disk)
                self.checker.counts["storage checks"] += 1
                if snap.item(projection.table_id).name in held:
                    continue  # its parts go with its table's files, which the hold keeps
                if on_disk > 2 * live + 10:
                    self.checker.fail(f"storage of projection {projection.name} not bounded "
                                      f"after compaction: {on_disk} files on disk, {live} "
                                      "live")
            self.events.write(ev="storage", files=report)
            self.storage = report
        finally:
            conn.close()

    def summary(self) -> dict[str, Any]:
        c = Counter(self.counts)
        c.update(self.checker.counts)
        for path in self.journals.glob("*.jsonl"):
            for rec in records(path):
                ev = rec.get("ev")
                if ev in ("tick", "read", "compact"):
                    c[f"{ev}s"] += 1
                    if ev == "tick":
                        c["index ticks"] += rec["n"]
                        c["ticks served by a tick service"] += 1 if rec.get("served") else 0
                elif ev == "start" and path.stem.startswith("w"):
                    c["write attempts"] += 1
                elif ev == "done" and path.stem == "ddl":
                    c["ddl done"] += 1
                    c[f"ddl done: {rec.get('kind')}"] += 1
                elif ev == "query":
                    c["projection-shaped reads"] += 1
                    c["reads routed to a projection"] += 1 if rec.get("routed") else 0
                elif ev == "warm":  # setup started the clusters' servers (warm.py)
                    c["seconds to start the clusters' servers"] = rec["seconds"]
                elif ev == "query_skipped":
                    c["projection-shaped reads not run (not in process)"] += 1
                elif ev == "rejected":
                    c["writes rejected (FAIL expectation)"] += 1
                elif ev == "error":
                    c[f"errors ({rec['op']})"] += 1
                    if not rec.get("clean"):
                        c["unclean errors"] += 1
        c["invariants checked"] = sum(v for k, v in c.items()
                                      if k.endswith("checks") or k in (
                                          "writes checked", "catalog items checked",
                                          "expectation timings checked",
                                          "rejected writes checked"))
        out: dict[str, Any] = dict(sorted(c.items()))
        out["memory"] = self.memory_report()
        out["warm process memory"] = warm.memory_report(self.warm_memory)
        out["files (live, on disk) after the final compaction"] = self.storage
        return out

    def memory_report(self) -> dict[str, Any]:
        """The longest-lived ticker incarnation: RSS (MB) after its first samples and
        its last, and the ticks between."""
        by_pid: dict[int, list[tuple[int, int, int]]] = {}
        for pid, ticks, py, group in self.memory:
            by_pid.setdefault(pid, []).append((ticks, py, group))
        if not by_pid:
            return {}
        samples = max(by_pid.values(), key=lambda v: v[-1][0])
        early = next((s for s in samples if s[0] >= min(100, samples[-1][0])), samples[0])
        last = samples[-1]
        mb = 1 / 1024
        return {"ticks": [early[0], last[0]], "python MB": [early[1] * mb, last[1] * mb],
                "python+jvm MB": [round(early[2] * mb), round(last[2] * mb)]}

    def errors(self) -> Counter:
        """Worker errors by kind and first line (clean errors are allowed; the list
        shows what they were)."""
        out: Counter = Counter()
        for path in self.journals.glob("*.jsonl"):
            for rec in records(path):
                if rec.get("ev") == "error":
                    tag = "" if rec.get("clean") else "UNCLEAN "
                    first = rec["msg"].splitlines()[0][:160] if rec["msg"] else ""
                    out[f"{tag}{rec['op']}: {rec['type']}: {first}"] += 1
        return out
