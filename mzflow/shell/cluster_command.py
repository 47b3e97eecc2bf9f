"""``mzflow cluster start|stop|status``: a cluster's warm processes, and the machine's.

``status`` shows this home's clusters (endpoint, state, started, last used), then every
warm cluster process of this user on the machine, whatever its home: the resident
memory of its Spark server and tick service, what it declared against the machine's
``warm_memory_budget``, and how long it has been idle (clusters/budget.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

from mzflow import config
from mzflow.clusters import budget, servers, tick_service
from mzflow.errors import Error
from mzflow.shell.output import format_table
from mzflow.shell.status import Status


def run(conn: Any, args: argparse.Namespace) -> int:
    cfg, snap = conn.config, conn.store.snapshot()
    try:
        if args.cluster_command == "status":
            print(home_table(cfg, snap))
            print()
            # Each process registered its cluster's name when it started; this home's are
            # named as they are now (ALTER CLUSTER … SWAP WITH / RENAME TO since).
            names = {(str(Path(cfg.home).resolve()), c.id): c.name for c in snap.clusters}
            print(machine_table(budget.registry_folder(cfg), config.tuning(snap.settings),
                                names))
            return 0
        found = snap.cluster_by_name(args.name)
        if args.cluster_command == "stop":
            stopped = servers.stop(cfg.home, found)
            print(f"cluster {found.name}: " + ("server stopped" if stopped else
                                                "no server was running"))
            return 0
        if found.virtual or found.spark:
            print(f"cluster {found.name} has no managed server: "
                  + ("it is VIRTUAL (in-process Spark)" if found.virtual else
                     f"it uses {found.spark}"), file=sys.stderr)
            return 1
        with Status().running(f"starting cluster {found.name}'s Spark Connect server"):
            endpoint = servers.ensure(
                cfg.home, found, cfg.cluster_idle_seconds, port=args.port,
                catalog_url=cfg.catalog_url, admission=budget.Ask(
                    budget.registry_folder(cfg), config.tuning(snap.settings)))
        print(f"cluster {found.name}: serving at {endpoint.url}")
        with Status().running(f"warming cluster {found.name}'s tick service"):
            ticks = tick_service.wait_for(servers.folder(cfg.home, found))
        print(f"cluster {found.name}: " + (
            f"ticks served by process {ticks['pid']}" if ticks is not None else
            "its tick service did not start (ticks run in the calling process; see "
            f"{servers.folder(cfg.home, found) / 'server.log'})"))
        return 0
    except Error as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 1


def _when(ms: int | None) -> str:
    return "" if ms is None else dt.datetime.fromtimestamp(
        ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def home_table(cfg: config.Config, snap: Any) -> str:
    rows = [(c.name, endpoint or "", state, _when(started), _when(used))
            for c in snap.clusters
            for endpoint, state, started, used in [servers.status(cfg.home, c)]]
    return format_table(["cluster", "endpoint", "state", "started", "last used"], rows)


def _mem(n: int | None) -> str:
    return "" if n is None else budget.human(n)


def _idle(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(max(0.0, seconds))
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def machine_table(registry: Any, tuning: config.Tuning,
                  names: dict[tuple[str, int], str] | None = None) -> str:
    """Every warm cluster process on the machine, and the budget they share. ``names``:
    clusters' current names by (resolved home, cluster id); else as registered."""
    found = budget.usage(registry)
    declared = sum(u.entry.declared for u in found)
    names = names or {}
    rows = [(names.get((str(Path(u.entry.home).resolve()), u.entry.cluster_id),
                       u.entry.cluster), u.entry.home, str(u.entry.pid), _mem(u.server),
             _mem(u.service), _mem(u.supervisor), budget.human(u.entry.declared),
             _idle(u.idle_seconds)) for u in found]
    title = (f"warm processes on this machine: {budget.human(declared)} declared of "
             f"warm_memory_budget {budget.describe_budget(tuning)}"
             + ("" if tuning.warm_memory_budget == "auto" else
                f" ({budget.human(budget.budget_bytes(tuning))})")
             + f", {len(found)} cluster{'' if len(found) == 1 else 's'}")
    return title + "\n" + format_table(
        ["cluster", "home", "pid", "spark server", "tick service", "supervisor",
         "declared", "idle"], rows)
