"""The soak on the default configuration (issue 39, item 7): warm clusters.

A SIZEd cluster's ticks run, as every user's do by default, on the cluster's managed
Spark Connect server and through its tick service, which holds the cluster's hot
arrangements in memory (mzflow/clusters/servers.py, supervisor.py, tick_service.py,
session/tick_server.py, maintain/hot.py). Both outlive any worker: the supervisor runs
in a session of its own, so killing a worker's process group never reaches them.

Here: the ticker's tick through the service (else in the ticker, as the CLI and
Airflow fall back), the warm processes found from the records their supervisor writes
(``server.json``: the JVM, ``ticks.json``: the tick service), a kill -9 of one of
them, their RSS, and stopping them all when the soak ends (else they would idle on for
``cluster_idle_seconds``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mzflow.storage.processes import process_alive, rss_bytes, running

# Kinds of warm process, as the summary counts their kills.
SERVER, SERVICE = "cluster Spark server", "tick service"


@dataclass(frozen=True)
class Warm:
    kind: str  # SERVER or SERVICE
    folder: str  # the cluster's id (its folder under <home>/clusters)
    cluster: str
    pid: int


@dataclass
class Report:
    """What the ticker journals of one index's tick (a TickReport's fields)."""

    strategy: str
    error: str | None
    seconds: float
    upper_after: int
    served: bool  # by the cluster's tick service (else in the ticker's process)


def processes(home: Path) -> list[Warm]:
    """The running warm processes of every cluster of ``home``."""
    out = []
    for where in sorted((home / "clusters").glob("*")):
        for name, kind, field in (("server.json", SERVER, "jvm_pid"),
                                  ("ticks.json", SERVICE, "pid")):
            try:
                record = json.loads((where / name).read_text())
                pid = int(record[field])
            except (OSError, ValueError, KeyError):
                continue
            if process_alive(pid):
                out.append(Warm(kind, where.name, str(record.get("cluster", "?")), pid))
    return out


def kill_one(home: Path, rng: random.Random) -> Warm | None:
    """kill -9 one warm process, chosen by ``rng``; None when none runs. A dead JVM
    takes its supervisor and tick service down with it (the next tick starts a new
    server); a dead tick service is restarted by its supervisor (callers tick
    themselves meanwhile)."""
    found = processes(home)
    if not found:
        return None
    victim = rng.choice(found)
    try:
        os.kill(victim.pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return victim


def stop_all(home: Path, wait: float = 60.0) -> int:
    """Stop every managed server of ``home`` (its supervisor's process group: the
    JVM and the tick service too); how many were running."""
    groups = []
    for pid in supervisors(home):
        try:
            os.killpg(pid, signal.SIGTERM)  # the supervisor leads its own session
            groups.append(pid)
        except ProcessLookupError:
            continue
    stopped, deadline = len(groups), time.monotonic() + wait
    while groups and time.monotonic() < deadline:
        groups = [g for g in groups if _group_alive(g)]
        time.sleep(0.2)
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return stopped


def supervisors(home: Path) -> set[int]:
    """The supervisors of ``home``'s clusters: those ``server.json`` names, and those
    still starting their JVM (no ``server.json`` yet: the 30-minute soak left one
    running that a worker, stopped at the end, had started), found by their command
    line, whose last argument is the cluster's folder."""
    found = set()
    for where in (home / "clusters").glob("*"):
        try:
            found.add(int(json.loads((where / "server.json").read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    clusters = (home / "clusters").resolve()
    for pid, words, cwd in running("mzflow.clusters.supervisor"):
        # (a relative folder is relative to that process's working directory)
        if (cwd / words[-1]).resolve().parent == clusters:
            found.add(pid)
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def rss_kb(pid: int) -> int:
    """Resident set size in kB (0 when gone)."""
    return (rss_bytes(pid) or 0) // 1024


def tick(conn: Any, view: str, cluster: str) -> list[Report]:
    """Tick ``view``'s index as ``mzflow tick --cluster`` does: through the cluster's
    tick service when it runs and takes it, else here (a service killed mid-tick, or
    restarting, answers nothing: the tick is retried here, and is idempotent)."""
    from mzflow.clusters import tick_service

    cfg = conn.config
    answer = tick_service.ask(str(cfg.home), cfg.catalog_url, cluster, {
        "op": "tick", "object": view, "at": None, "full_refresh": False,
        "view_means_default_index": True})
    if answer is None:
        return [Report(r.strategy, r.error, r.seconds, r.upper_after, False)
                for r in conn.tick(object=view)]
    failure = tick_service.failure_of(answer)
    reports = [Report(r["strategy"], r["error"], r["seconds"], r["upper_after"], True)
               for r in answer.get("reports", [])]
    if failure is not None:
        raise failure
    return reports


def memory_report(samples: list[tuple[Warm, int, int]]) -> dict[str, Any]:
    """Per warm process (kind, cluster, pid): RSS in MB at its first sample and its
    last, the samples' count and the ticks the ticker saw served meanwhile."""
    by: dict[Warm, list[tuple[int, int]]] = {}
    for w, served, kb in samples:
        if kb:
            by.setdefault(w, []).append((served, kb))
    return {f"{w.kind} {w.cluster} ({w.pid})": {
        "MB": [round(s[0][1] / 1024), round(s[-1][1] / 1024)],
        "ticks served": [s[0][0], s[-1][0]], "samples": len(s)} for w, s in by.items()}


def figures(home: Path) -> dict[str, tuple[int, int]]:
    """Each warm process's (pid, RSS kB), by kind and cluster: soakmem's figure."""
    return {f"{w.kind} of {w.cluster}": (w.pid, rss_kb(w.pid)) for w in processes(home)}


def grown(baseline: dict[str, tuple[int, int]], final: dict[str, tuple[int, int]],
          limit: float) -> list[str]:
    """What breaks "each warm process stays within ``limit`` times its size at the
    baseline": one that grew past it, one that was replaced meanwhile (a new process
    starts small: its growth would be hidden), one that is gone."""
    out = []
    for name, (pid, kb) in sorted(baseline.items()):
        if name not in final:
            out.append(f"{name} (process {pid}) is gone")
            continue
        pid1, kb1 = final[name]
        if pid1 != pid:
            out.append(f"{name} was replaced (process {pid} → {pid1})")
        elif kb1 > limit * kb:
            out.append(f"{name} (process {pid}) grew from {kb / 1024:.0f} MB to "
                       f"{kb1 / 1024:.0f} MB (x{kb1 / kb:.2f} > x{limit})")
    return out


def jvm_heap_after_gc(pid: int) -> int | None:
    """A JVM's heap in use after a full collection, in bytes (``jcmd``: GC.run, then
    GC.heap_info); None when jcmd is missing or fails."""
    import re
    import subprocess

    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, check=True,
                       timeout=120)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True,
                              text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"used (\d+)K", info)
    return int(m.group(1)) * 1024 if m else None


def start_all(conn: Any) -> float:
    """Start every SIZEd cluster's server at once, as ``mzflow cluster start`` would
    (else the ticker's first round starts them one after the other); the seconds it
    took. Nothing under the in-process configuration."""
    import threading

    from mzflow.clusters import servers

    cfg = conn.config
    if cfg.cluster_spark != "managed":
        return 0.0
    began = time.monotonic()
    wanted = [c for c in conn.store.snapshot().clusters if not c.virtual and not c.spark
              and c.size]
    threads = [threading.Thread(target=servers.ensure, args=(
        cfg.home, c, cfg.cluster_idle_seconds), kwargs={"catalog_url": cfg.catalog_url})
        for c in wanted]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - began


def check_recovery(journals: Path, fail: Any, counts: Any, grace: float = 120.0) -> None:
    """Ticks recover from a warm kill: after each, a tick of that cluster succeeded
    later (served or not). A kill within ``grace`` seconds of the last tick is only
    counted when nothing followed it (the soak may have ended first), and so is one of
    a cluster blue/green swaps rename and drop (its server's record keeps the name it
    started under)."""
    from mzflow_dev.soak import ops
    from mzflow_dev.soak.journal import records

    ticks = [(r["t"], r.get("cluster"), r.get("served")) for r in records(
        journals / "ticker.jsonl") if r.get("ev") == "tick" and not r.get("error")]
    last = max((t for t, _, _ in ticks), default=0.0)
    for r in records(journals / "coordinator.jsonl"):
        if r.get("ev") != "kill" or not str(r.get("name", "")).startswith((SERVER, SERVICE)):
            continue
        cluster = str(r["name"]).rsplit(" ", 1)[1]
        after = [s for t, c, s in ticks if c == cluster and t > r["t"]]
        if after:
            counts["warm kills recovered from (a later tick succeeded)"] += 1
            counts["warm kills after which the tick service served again"] += any(after)
        elif r["t"] < last - grace and cluster in ops.CLUSTERS:
            fail(f"no tick of cluster {cluster} succeeded after the kill of its "
                 f"{str(r['name']).rsplit(' ', 1)[0]} at {r['t']:.0f}")
        else:
            counts["warm kills with no later tick of that cluster (near the end, or swapped)"] += 1
