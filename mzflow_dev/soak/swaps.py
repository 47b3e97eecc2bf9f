"""Blue/green applies mid-soak (issue 39, item 7; docs/deploy.md).

Setup adds a schema of its own, ``bg``, maintained by a cluster of its own, ``c3``,
holding one materialized view ``bg.mv_swap`` over the soak's tables (blue/green deploys
a whole schema and its clusters, and refuses a schema that holds tables). The ``swaps``
worker now and then changes the view's definition with ``mzflow apply --blue-green``:
the desired file is the live catalog as it stands (``desired_sql``) with the view's new
SELECT. Each definition carries its generation as a constant column, ``gen``, so that
the checker knows which definition any index or read of the view has: the oracle is
DuckDB's view ``mv_swap_g<gen>``.

The worker is killed like the others, mid-apply too; on restart it continues an
unfinished apply with ``--resume`` before starting a new one. A resume that cannot
succeed (refused: its file went stale, the DDL worker having added a column to a table
since; or failed ``RESUME_TRIES`` times in a row) is abandoned with ``apply --abort``
(journaled ``aborted``), and a new apply starts with a fresh file; past the swap the
abort is refused and --resume finishes the apply. A process reads the view throughout
(serializable: what its index holds), journaling each read with the time it read at.
The invariants: no read fails, each read sees one generation whole (the oracle's rows
for it at the read's time: never empty, never half-built), every index of the view
equals its generation's oracle, after a finished apply the live view has the new
generation, and an aborted generation never goes live (no read, finished apply or live
view has one). An apply refused because the catalog moved meanwhile (the DDL worker
created or dropped a view between the file and the plan) is counted, not an error of
mzflow's.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from mzflow_dev.soak.journal import Journal, records

SCHEMA, CLUSTER, VIEW = "bg", "c3", "mv_swap"
JOURNAL = "swaps.jsonl"
# The view's definitions in turn (generation g uses VARIANTS[g % 3]): same columns, a
# different answer each, over the tables the writers write most.
VARIANTS = (
    "SELECT {g} AS gen, k, count(*) AS n, sum(v) AS sv FROM t1 GROUP BY k",
    "SELECT {g} AS gen, k, count(*) AS n, max(v) AS sv FROM t1 WHERE v IS NOT NULL "
    "GROUP BY k",
    "SELECT {g} AS gen, k, count(*) AS n, sum(w) AS sv FROM t2 GROUP BY k",
)
_GEN = re.compile(r"SELECT (\d+) AS gen\b", re.IGNORECASE)


def select(gen: int) -> str:
    return VARIANTS[gen % len(VARIANTS)].format(g=gen)


def setup_sql() -> list[str]:
    return [f"CREATE SCHEMA {SCHEMA}", f"CREATE CLUSTER {CLUSTER} SIZE 'small'",
            f"CREATE MATERIALIZED VIEW {SCHEMA}.{VIEW} IN CLUSTER {CLUSTER} AS {select(0)}"]


def oracle_name(gen: int) -> str:
    return f"{VIEW}_g{gen}"


def generation(create_sql: str) -> int | None:
    """The generation a stored definition of the view has (None: not the view's)."""
    m = _GEN.search(create_sql)
    return int(m.group(1)) if m else None


def desired_sql(snap: Any, gen: int) -> str:
    """The live catalog as a desired catalog file (docs/deploy.md: the file is the
    whole catalog), with the view's definition of generation ``gen``. Tables by their
    current columns (ADD COLUMN leaves a table's stored statement as it was made);
    materialized views' own indexes, sources and their tables are not planned."""
    from mzflow.deploy import diff

    out = [f'CREATE CLUSTER "{c.name}" SIZE \'{c.size}\'' for c in snap.clusters
           if c.size and not c.virtual and not c.spark and c.name != "default"]
    # (the landing folder's sources tick in a VIRTUAL cluster: without it here, the plan
    # drops it, and a blue/green apply refuses a plan that drops a cluster)
    out += [f'CREATE CLUSTER "{c.name}" VIRTUAL' for c in snap.clusters
            if c.virtual and not c.spark and c.name != "default"]
    out += [f'CREATE SCHEMA "{s.name}"' for s in snap.schemas if s.name != "public"]
    for item in sorted(snap.items, key=lambda i: i.oid):
        if item.is_source or snap.source_of(item) is not None:
            continue
        if item.kind == "index" and item.is_default_index and any(
                i.id == item.on_id and i.kind == "materialized-view" for i in snap.items):
            continue
        if item.kind == "table":
            cols = ", ".join(f'"{c.name}" {c.type}' for c in item.columns)
            out.append(f'CREATE TABLE "{item.schema}"."{item.name}" ({cols})')
        elif item.schema == SCHEMA and item.name == VIEW:
            out.append(f"CREATE MATERIALIZED VIEW {SCHEMA}.{VIEW} IN CLUSTER {CLUSTER} AS "
                       f"{select(gen)}")
        else:
            out.append(diff.canonical(item))
    return ";\n".join(out) + ";\n"


# -- the worker ----------------------------------------------------------------------

# A resume that failed this many times in a row is given up: the apply is aborted.
RESUME_TRIES = 3


def worker(args: dict[str, Any], conn: Any, j: Journal) -> None:
    from mzflow.deploy import apply, bluegreen

    home = Path(args["home"])
    recs = list(records(j.path))
    gen = max((r["gen"] for r in recs if r.get("ev") == "start"), default=0)
    last_text = next((r["sql"] for r in reversed(recs) if r.get("ev") == "start"), None)
    # The reader is a process of its own (in this worker's process group, so killed
    # with it): another client, as users' readers are, and pyspark's Connect mode is
    # process-wide (a tick on a cluster's server sets it while it runs).
    reader = subprocess.Popen([sys.executable, "-m", "mzflow_dev.soak.swaps",
                               json.dumps(args)])
    pace = random.Random(f"{args['seed']}/swaps/{os.getpid()}")
    first = True
    fails = 0  # the unfinished apply's failed runs in a row (RESUME_TRIES: give up)
    try:
        while not os.path.exists(args["stop"]):
            state = bluegreen.load_state(home)
            unfinished = state is not None and state.step != "done"
            if state is not None and unfinished and (
                    state.aborting or last_text is None or fails >= RESUME_TRIES):
                # A resume that cannot succeed (its file went stale: the DDL worker
                # added a column since; or it failed again and again): abandon it and
                # start anew. Past the swap the abort is refused, and --resume finishes
                # it without the file.
                how = _abandon(conn, j, gen, home)
                if how == "aborted":
                    last_text, fails = None, 0
                    continue
                if how == "failed":
                    _sleep(args, 2)
                    continue
            if not unfinished:
                # The first apply once the tables have rows; then now and then.
                pause = args.get("swap_pause", 40.0)
                if _sleep(args, pace.uniform(15, 30) if first else
                          pace.uniform(pause / 2, pause)):
                    break
                gen += 1
                last_text = desired_sql(conn.store.snapshot(), gen)
                j.write(ev="start", gen=gen, sql=last_text)
                fails = 0
            first = False
            out = io.StringIO()
            j.write(ev="apply", gen=gen, resume=unfinished)
            code: int | None = None
            try:  # (no file only past the swap, where --resume plans none)
                code = apply.run(conn, last_text or "", None, "soak", out,
                                 blue_green=not unfinished, resume=unfinished,
                                 lag_ms=120_000, timeout_s=240)
            except Exception as exc:  # noqa: BLE001 - journaled; --resume continues it
                if isinstance(exc, bluegreen.BlueGreenRefused):
                    j.write(ev="refused", gen=gen, msg=str(exc)[:500])
                else:
                    _error(j, "apply", exc, gen=gen, out=out.getvalue()[-2000:])
                refused = isinstance(exc, bluegreen.BlueGreenRefused)
            else:
                refused = code != 0
            state = bluegreen.load_state(home)
            if code == 0 and (state is None or state.step == "done"):
                live = conn.store.snapshot().find(VIEW, SCHEMA)
                j.write(ev="done", gen=gen, resumed=unfinished,
                        live_gen=generation(live.create_sql) if live is not None else None,
                        out=out.getvalue()[-1500:])
                last_text, fails = None, 0
                continue
            if code is not None:  # refusals in the plan (the catalog moved)
                j.write(ev="refused", gen=gen, code=code, out=out.getvalue()[-2000:])
            if state is None or state.step == "done":
                last_text = None  # nothing started: the next one is new
            else:  # a refused resume cannot succeed by trying again: abort it next
                fails = RESUME_TRIES if refused else fails + 1
            _sleep(args, 2)
    finally:
        try:  # it stops on the stop file too
            reader.wait(timeout=60 if os.path.exists(args["stop"]) else 0.1)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()


def _abandon(conn: Any, j: Journal, gen: int, home: Path) -> str:
    """``apply --abort`` of the unfinished apply: "aborted", "past swap" (refused: the
    new version is live) or "failed". Journaled with the generations it abandons: the
    worker's and the staged view's (the same, unless a start was lost to a kill)."""
    from mzflow.deploy import bluegreen

    staged = conn.store.snapshot().find(VIEW, SCHEMA + bluegreen.SUFFIX)
    staged_gen = generation(staged.create_sql) if staged is not None else None
    out = io.StringIO()
    try:
        bluegreen.abort(conn, out)
    except Exception as exc:  # noqa: BLE001 - journaled
        state = bluegreen.load_state(home)
        if isinstance(exc, bluegreen.BlueGreenRefused) and state is not None and (
                bluegreen.past_swap(conn.store.snapshot(), state)):
            j.write(ev="abort_refused", gen=gen, msg=str(exc)[:500])
            return "past swap"
        _error(j, "abort", exc, gen=gen, out=out.getvalue()[-2000:])
        return "failed"
    j.write(ev="aborted", gen=gen, staged_gen=staged_gen, out=out.getvalue()[-1500:])
    return "aborted"


def _sleep(args: dict[str, Any], seconds: float) -> bool:
    """Sleep, waking for the stop file; whether it appeared."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(args["stop"]):
            return True
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return os.path.exists(args["stop"])


def _hydrated(conn: Any) -> bool:
    """Has the live view's index been ticked once? Before, a serializable read
    recomputes the view on this process's Spark: a JVM here for nothing."""
    from mzflow.maintain import ticks

    snap = conn.store.snapshot()
    view = snap.find(VIEW, SCHEMA)
    index = next((i for i in snap.indexes_on(view.id) if i.is_default_index), None) if (
        view is not None) else None
    if index is None:
        return False
    shard = ticks.index_shard(conn.config.warehouse, index)
    return bool(shard.exists() and shard.state().done_through >= 0)


def reader(args: dict[str, Any]) -> None:
    """Read the view (serializable: what its index holds) until the stop file appears;
    each read journaled with the time it read at, or its error."""
    import mzflow

    j = Journal(Path(args["journal"]))
    conn = mzflow.connect(args["home"])
    try:
        conn.execute(f"SET cluster = {CLUSTER}")
        conn.execute("SET transaction_isolation = 'serializable'")
        while not _sleep(args, 2.0) and not _hydrated(conn):
            pass
        while not os.path.exists(args["stop"]):
            started = time.time()
            try:
                res = conn.execute(f"SELECT * FROM {SCHEMA}.{VIEW}")
            except Exception as exc:  # noqa: BLE001 - every failure is journaled
                _error(j, "swap read", exc, started=started)
                _sleep(args, 1.0)
                continue
            at = conn.selects.last_at
            if at is None:  # a never-ticked index, read as a recompute in process?
                j.write(ev="swap_read_untimed", started=started, n=len(res.rows))
            else:
                j.write(ev="swap_read", started=started, at=at, columns=res.columns,
                        rows=[[_plain(v) for v in row] for row in res.rows])
            _sleep(args, 1.0)
    finally:
        conn.close()


def _error(j: Journal, op: str, exc: BaseException, **kw: Any) -> None:
    """As the other workers journal an error (clean: one of mzflow's own)."""
    import mzflow

    j.write(ev="error", op=op, type=type(exc).__name__, msg=str(exc)[:500],
            clean=isinstance(exc, mzflow.Error), **kw)


def _plain(v: Any) -> Any:
    from decimal import Decimal

    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


# -- the checker's hooks ------------------------------------------------------------

def oracle_views(journals: Path) -> dict[str, str]:
    """DuckDB views for every generation the journal started (and the setup's)."""
    gens = {0} | {r["gen"] for r in records(journals / JOURNAL) if r.get("ev") == "start"}
    return {oracle_name(g): select(g) for g in sorted(gens)}


def index_oracle(view: Any) -> str | None:
    """The oracle's name for an index probe of ``view`` (an Item): the generation's,
    for the swapped view wherever its schema is now (live or staged), else None."""
    if view.name != VIEW or not view.schema.startswith(SCHEMA):
        return None
    g = generation(view.create_sql)
    return None if g is None else oracle_name(g)


def read_probes(journals: Path, seen: dict[str, int], fail: Any, counts: Counter
                ) -> list[tuple[int, str, Any]]:
    """The reader's reads as probes (``(time, "swap read", (oracle, columns, rows))``);
    fails a read that errs or that mixes generations."""
    from mzflow_dev.soak.checker import bag

    out = []
    for i, rec in enumerate(records(journals / JOURNAL)):
        if i < seen.get(JOURNAL, 0):
            continue
        seen[JOURNAL] = i + 1
        ev = rec.get("ev")
        if ev == "error" and rec.get("op") == "swap read":
            fail(f"a read of {SCHEMA}.{VIEW} failed at {rec['t']:.0f}: {rec['type']}: "
                 f"{rec['msg'][:300]}")
        elif ev == "swap_read_untimed":
            counts["swap reads not checked (no read time)"] += 1
        elif ev == "swap_read":
            cols = rec["columns"]
            gens = {row[cols.index("gen")] for row in rec["rows"]}
            counts["swap reads"] += 1
            if len(gens) > 1:
                fail(f"a read of {SCHEMA}.{VIEW} at {rec['at']} mixed generations {gens}")
                continue
            if not gens:  # empty: which generation the oracle's empty answer is
                gens = {_live_gen_at(journals, rec["t"])}
            g = gens.pop()
            out.append((rec["at"], "swap read", (oracle_name(g), cols, bag(rec["rows"]))))
        elif ev == "done":
            counts["blue/green applies done"] += 1
            if rec.get("live_gen") != rec["gen"]:
                fail(f"blue/green apply of generation {rec['gen']} done, but the live "
                     f"view has generation {rec.get('live_gen')}")
        elif ev == "refused" or ev == "error" and rec.get("op") == "apply":
            counts[f"blue/green applies {'refused' if ev == 'refused' else 'failed'}"] += 1
        elif ev == "aborted":
            counts["blue/green applies aborted"] += 1
        elif ev == "abort_refused" or ev == "error" and rec.get("op") == "abort":
            how = "refused (past the swap)" if ev == "abort_refused" else "failed"
            counts[f"blue/green aborts {how}"] += 1
        elif ev == "apply" and rec.get("resume"):
            counts["blue/green applies resumed"] += 1
    return out


def check_aborted(journals: Path, snap: Any, fail: Any, counts: Counter) -> None:
    """An aborted generation never becomes live: no read of the view ever saw one
    (before its abort or after), no apply finished with one, and the live view is none
    (``snap``: the catalog now). The whole journal each pass: a read may be journaled
    before the abort of the generation it saw."""
    recs = list(records(journals / JOURNAL))
    aborted = {g for r in recs if r.get("ev") == "aborted"
               for g in (r["gen"], r.get("staged_gen")) if g is not None}
    if not aborted:
        return
    counts["aborted generation checks"] += 1
    for r in recs:
        if r.get("ev") == "swap_read":
            seen = {row[r["columns"].index("gen")] for row in r["rows"]} & aborted
            if seen:
                fail(f"a read of {SCHEMA}.{VIEW} at {r['at']} saw generation "
                     f"{min(seen)}, whose apply was aborted")
        elif r.get("ev") == "done" and r.get("live_gen") in aborted:
            fail(f"the aborted generation {r['live_gen']} of {SCHEMA}.{VIEW} went live")
    live = snap.find(VIEW, SCHEMA)
    g = generation(live.create_sql) if live is not None else None
    if g in aborted:
        fail(f"the live {SCHEMA}.{VIEW} has generation {g}, whose apply was aborted")


def _live_gen_at(journals: Path, t: float) -> int:
    """The generation live at wall-clock ``t``, by the journal: the last done before."""
    live = 0
    for rec in records(journals / JOURNAL):
        if rec.get("ev") == "done" and rec["t"] <= t:
            live = rec["gen"]
    return live


if __name__ == "__main__":
    reader(json.loads(sys.argv[1]))
