"""Memory of a warm cluster's processes over many ticks (issue 39's target: each warm
cluster process over 1,000 ticks stays within 20 % of its size at tick 100):
``make warmmem``.

Unlike ``scripts/soakmem.py`` (one process, its own Spark), this runs the default
configuration: a SIZEd cluster with its managed Spark Connect server and its tick
service, with hot arrangements. One home keeps small maintained views (joins, GROUP BY,
DISTINCT) over three tables in cluster ``etl``; a step is a write from this process
(an INSERT or DELETE) and a tick of one view handed to the cluster's tick service, as
``mzflow tick --cluster etl`` does. After step ``--baseline`` (100) and step N (1,000)
it prints each warm process's resident memory (the Spark server's JVM, the tick
service, the supervisor; ``clusters/budget.py: usage``, as ``mzflow cluster status``
shows it) and exits 1 when any exceeds ``--limit`` (1.2) times its baseline, or when a
tick was not served by the service.

    python scripts/warm_memory.py --ticks 1000
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

TABLES = "abc"
VIEWS = [
    "SELECT a.k, b.v FROM a JOIN b ON a.k = b.k",
    "SELECT a.v, count(*) AS n, sum(b.k) AS s FROM a JOIN b ON a.k = b.k GROUP BY a.v",
    "SELECT a.k, c.w FROM a JOIN c ON a.v = c.v WHERE a.k > 2",
    "SELECT DISTINCT v FROM c",
    "SELECT b.v, max(c.k) AS m FROM b JOIN c ON b.k = c.k GROUP BY b.v",
]
PROCESSES = ("server", "service", "supervisor")


def figures(registry: Path, home: Path) -> dict[str, int]:
    from mzflow.clusters import budget

    found = [u for u in budget.usage(registry) if u.entry.home == str(home)]
    if len(found) != 1:
        raise SystemExit(f"expected one warm cluster of {home} in {registry}, found "
                         f"{len(found)}")
    u = found[0]
    return {"server": u.server or 0, "service": u.service or 0,
            "supervisor": u.supervisor or 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=1000)
    ap.add_argument("--baseline", type=int, default=100)
    ap.add_argument("--every", type=int, default=100, help="also print figures this often")
    ap.add_argument("--limit", type=float, default=1.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--size", default="xsmall", help="the cluster's SIZE")
    ap.add_argument("--home", type=Path, default=None, help="kept (default: a temporary one)")
    a = ap.parse_args(argv)
    os.environ["MZFLOW_CLUSTER_SPARK"] = "managed"
    os.environ.pop("MZFLOW_SPARK_MASTER", None)
    import mzflow
    from mzflow import config
    from mzflow.clusters import budget, servers, tick_service

    home = (a.home or Path(tempfile.mkdtemp(prefix="mzflow-warmmem-"))).resolve()
    s = mzflow.connect(str(home))
    s.execute(f"CREATE CLUSTER etl (SIZE = '{a.size}')")
    for t in TABLES:
        s.execute(f"CREATE TABLE {t} (k int, v int, w text)")
        s.execute(f"INSERT INTO {t} VALUES "
                  + ",".join(f"({i}, {i * 3 % 7}, 'x{i}')" for i in range(10)))
    for i, q in enumerate(VIEWS):
        s.execute(f"CREATE MATERIALIZED VIEW v{i} IN CLUSTER etl AS {q}")
    cfg, snap = s.config, s.store.snapshot()
    registry = budget.registry_folder(cfg)
    etl = snap.cluster_by_name("etl")
    servers.ensure(cfg.home, etl, cfg.cluster_idle_seconds, catalog_url=cfg.catalog_url,
                   admission=budget.Ask(registry, config.tuning(snap.settings)))
    if tick_service.wait_for(servers.folder(cfg.home, etl)) is None:
        raise SystemExit("the cluster's tick service did not start: "
                         f"{servers.folder(cfg.home, etl) / 'server.log'}")
    rng = random.Random(a.seed)
    measured: dict[int, dict[str, int]] = {}
    unserved = errors = 0
    began = time.monotonic()
    try:
        for step in range(1, a.ticks + 1):
            t, k = rng.choice(TABLES), rng.randrange(12)
            if rng.random() < 0.5:
                s.execute(f"INSERT INTO {t} VALUES ({k}, {rng.randrange(7)}, 'y{step}')")
            else:
                s.execute(f"DELETE FROM {t} WHERE k = {k}")
            answer = tick_service.ask(str(home), cfg.catalog_url, "etl", {
                "op": "tick", "object": f"v{step % len(VIEWS)}", "at": None,
                "full_refresh": False, "view_means_default_index": True})
            if answer is None:
                unserved += 1
            elif answer.get("error") or any(r["error"] for r in answer.get("reports", [])):
                errors += 1
                print(f"step {step}: {answer}", flush=True)
            if step in (a.baseline, a.ticks) or step % a.every == 0:
                measured[step] = figures(registry, home)
                print(f"step {step} ({time.monotonic() - began:.0f} s): " + ", ".join(
                    f"{p} {measured[step][p] / 2**20:.0f} MB" for p in PROCESSES)
                    + f"; unserved {unserved}, errors {errors}", flush=True)
    finally:
        servers.stop(cfg.home, etl)
        s.close()
        if a.home is None:
            shutil.rmtree(home, ignore_errors=True)
    base, last = measured[a.baseline], measured[a.ticks]
    grown = {p: last[p] / base[p] for p in PROCESSES if base[p]}
    ok = all(g <= a.limit for g in grown.values()) and not unserved and not errors
    print(f"resident memory at step {a.ticks} against step {a.baseline}: " + ", ".join(
        f"{p} x{g:.2f}" for p, g in grown.items())
        + f"; limit x{a.limit}; unserved {unserved}, errors {errors}: "
        + ("ok" if ok else "EXCEEDED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
