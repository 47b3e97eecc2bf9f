"""The committed history of a soak, as a list of operations a single process can replay.

The workers ran concurrently and were killed at random, but what counts is what
committed. Operations, each a dict with ``op`` and an order ``key`` (milliseconds, the
clock mzflow's times are read from):

* ``sql``: the setup and every DDL statement that committed (seen done, or killed
  mid-way with its effect in the final catalog), at its journal time;
* ``write``: every write in a table's Delta log, by its key ``(worker, n)``, at its
  commit time (a COPY carries its file's rows);
* ``tick``: every tick committed, just after the writes it covered (its time), never
  before its view's CREATE: from the index's Delta log (the commits with its ``tick-``
  idempotency key) for a view the final catalog holds, else as the ticker journaled it;
* ``read`` (AS OF an index's upper), ``subscribe`` (``as_of`` in the soak's times,
  mapped onto the replay's), ``compact``, ``sink``: at their journal times.

A kill's effect on committed state is already in this: a write killed before its commit
is absent, one killed after it is present once, and so is a tick (a dropped view's tick
killed after its commit, never journaled, is covered by its next tick in the replay).
Paths under the soak's folder are written as ``$WORKDIR`` so a replay can run anywhere.
The file: one JSON header line (seed, the violation), then one operation per line.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mzflow_dev.soak import deltalog, ops
from mzflow_dev.soak.checker import Checker
from mzflow_dev.soak.journal import records

WORKDIR = "$WORKDIR"
Op = dict[str, Any]
# Violations found outside checker.py (coordinator.py's storage bound): no replay shows them.
UNCHECKED = ("storage of ",)


def build(workdir: Path, checker: Checker, snapshot: Any, warehouse: Path) -> list[Op]:
    """Every committed operation of the soak in ``workdir``, in order. ``checker`` has
    run its final pass (its ``committed`` writes); ``snapshot`` is the final catalog."""
    journals = workdir / "journals"

    def local(text: str) -> str:
        return text.replace(str(workdir), WORKDIR)

    out: list[Op] = []
    for rec in records(journals / "setup.jsonl"):
        if rec.get("ev") == "done":
            out.append({"op": "sql", "sql": local(rec["sql"]), "key": rec["t"] * 1000})
    out += _ddl(journals / "ddl.jsonl", snapshot)
    writes = checker.writes()
    for ts, table, _version, key in checker.committed:
        w = writes[key]
        op: Op = {"op": "write", "worker": w.worker, "n": w.n, "table": table,
                  "sql": local(w.sql), "oracle": w.oracle, "key": ts}
        if w.sql.startswith("COPY"):
            op["rows"] = _copy_rows(workdir / "copy" / f"{w.worker}-{w.n}.parquet")
        out.append(op)
    logged = _ticks(snapshot, warehouse)
    out += logged
    for path in sorted(journals.glob("ticker*.jsonl")):
        for rec in records(path):
            ev = rec.get("ev")
            if ev == "tick" and rec["view"] not in {op["view"] for op in logged}:
                # Just after the writes it covered (an old journal has no upper: its time).
                at = rec["upper"] - 1 + 0.5 if "upper" in rec else rec["t"] * 1000
                out.append({"op": "tick", "view": rec["view"], "key": at})
            elif ev == "read":
                out.append({"op": "read", "view": rec["view"], "key": rec["at"] + 0.6})
            elif ev == "subscribe":
                out.append({"op": "subscribe", "rel": rec["rel"], "as_of": rec["as_of"],
                            "key": rec["up_to"] - 1 + 0.7})
    for rec in itertools.chain(*(records(p) for p in [journals / "ddl.jsonl",
                                                      *sorted(journals.glob("ticker*.jsonl"))])):
        if rec.get("ev") == "query":  # a read shaped for a projection
            at = rec["at"] if rec["at"] is not None else rec["before"]
            out.append({"op": "query", "sql": re.sub(r" AS OF \d+$", "", rec["sql"]),
                        "as_of": rec["at"], "key": at + 0.6})
    for rec in records(journals / "compactor.jsonl"):
        if rec.get("ev") == "compact":
            out.append({"op": "compact", "key": rec["t"] * 1000})
        elif rec.get("ev") == "sink":
            out.append({"op": "sink", "sink": rec["sink"], "key": rec["t"] * 1000})
    out.sort(key=lambda o: o["key"])
    return _after_creation(out)


def _ticks(snapshot: Any, warehouse: Path) -> list[Op]:
    """The committed ticks of every materialized view in ``snapshot``: its default
    index's commits under the key ``(tick-<index>, time)``."""
    from mzflow.storage import paths

    out = []
    for item in snapshot.items:
        if item.kind != "index" or not item.is_default_index:
            continue
        view = snapshot.item(item.on_id).name
        for c in deltalog.commits(paths.index(warehouse, item.id)):
            for app, at in c.txns:
                if app == f"tick-{item.id}":
                    out.append({"op": "tick", "view": view, "key": at + 0.5})
    return out


def _ddl(path: Path, snapshot: Any) -> list[Op]:
    """DDL that committed: seen done, or started and visible in the final catalog (a
    CREATE whose object exists, a DROP whose object does not, a column t3 has)."""
    started: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    for rec in records(path):
        if rec.get("ev") == "start":
            started[rec["n"]] = rec
        elif rec.get("ev") == "done":
            done[rec["n"]] = rec
    names = {i.name for i in snapshot.items}
    t3 = snapshot.find("t3")
    t3_columns = {c.name for c in t3.columns} if t3 is not None else set()
    projections = {p.name for p in snapshot.projections}
    expectations = {e.name for e in snapshot.expectations}
    dropped_later = {m.group(1) for n, d in done.items() if (m := re.search(
        r"DROP CONSTRAINT (\w+)$", d["sql"]))}  # without IF EXISTS: it existed
    out = []
    for n, rec in sorted(started.items()):
        sql = rec["sql"]
        if n in done:
            # An expectation from its own time (writes after it met it), else the
            # statement's end.
            key = done[n].get("created_ts") or done[n]["t"] * 1000
            out.append({"op": "sql", "sql": sql, "key": key})
            continue
        created = re.match(r"CREATE \w+(?: VIEW)? (\w+)", sql)
        added = re.match(r"ALTER TABLE t3 ADD COLUMN (\w+)", sql)
        projection = re.match(r"ALTER TABLE \w+ (ADD|DROP) PROJECTION(?: IF (?:NOT )?EXISTS)? "
                              r"(\w+)", sql)
        expectation = re.match(r"ALTER TABLE \w+ (ADD|DROP) CONSTRAINT(?: IF EXISTS)? (\w+)",
                               sql)
        if (created and created.group(1) in names
                or sql.startswith("DROP") and rec.get("view") not in names
                or added and added.group(1) in t3_columns
                or projection and (projection.group(2) in projections)
                == (projection.group(1) == "ADD")
                or expectation and expectation.group(1) == "ADD"
                and (expectation.group(2) in expectations | dropped_later)
                or expectation and expectation.group(1) == "DROP"
                and expectation.group(2) not in expectations):
            out.append({"op": "sql", "sql": sql, "key": rec["t"] * 1000, "uncertain": True})
    return out


def _copy_rows(path: Path) -> list[list[Any]]:
    import pyarrow.parquet as pq

    data = pq.read_table(path)
    return [list(r) for r in zip(*(c.to_pylist() for c in data.columns), strict=True)]


def _after_creation(history: list[Op]) -> list[Op]:
    """Move a tick or read whose time precedes its view's CREATE (a tick's time is the
    newest write's, which can be older than the DDL) to just after it; drop one of a
    view never created."""
    out: list[Op] = []
    live: set[str] = set()
    waiting: dict[str, list[Op]] = {}
    for op in history:
        if op["op"] == "sql":
            out.append(op)
            m = re.match(r"CREATE (?:MATERIALIZED VIEW|VIEW|TABLE) (\w+)", op["sql"])
            if m:
                live.add(m.group(1))
                out += waiting.pop(m.group(1), [])
        elif op["op"] in ("tick", "read") and op["view"] not in live:
            waiting.setdefault(op["view"], []).append(op)
        else:
            out.append(op)
    return out


def relevant(history: list[Op], relation: str | None, kind: str | None,
             at: int | None) -> list[Op]:
    """The first candidate to shrink from: without what cannot matter to a wrong answer
    of ``relation`` (of kind ``table``, ``index``, ``read``, ``subscribe`` or ``sink``)
    at ``at``: writes to tables it does not read, ticks of views it does not read, other
    probes, and (for a table, index or read) everything after ``at``."""
    if relation is None:
        return list(history)
    views = {name: q for name, (_, q) in ops.FIXED_VIEWS.items()}
    for op in history:
        m = re.match(r"CREATE (?:MATERIALIZED )?VIEW (\w+) .*?AS (SELECT .*)$", op.get("sql", ""))
        if op["op"] == "sql" and m:
            views[m.group(1)] = m.group(2)
    reads: set[str] = set()
    todo = [relation]
    if kind == "query":  # its SQL: the tables it reads
        todo = [t for t in ops.TABLES if re.search(rf"\b{t}\b", relation)]
    elif relation == ops.QUARANTINE:  # filled by t2's writes
        todo = [relation, ops.EXPECT_TABLE]
    while todo:
        name = todo.pop()
        if name in reads:
            continue
        reads.add(name)
        if name in views:
            todo += [w for w in [*ops.TABLES, *views] if w != name
                     and re.search(rf"\b{w}\b", views[name])]
    cut = (at + 1 if at is not None and kind in ("table", "index", "read", "query", "quarantine")
           else None)
    out = []
    for op in history:
        if cut is not None and op["key"] >= cut:
            break
        k = op["op"]
        if (k == "sql" or k == "compact"
                or k == "write" and op["table"] in reads
                or k == "tick" and op["view"] in reads
                or k == "read" and kind == "read" and op["view"] == relation
                or k == "subscribe" and kind == "subscribe" and op["rel"] == relation
                or k == "query" and kind == "query" and op["sql"] == relation
                or k == "sink" and kind == "sink"):
            out.append(op)
    return out


def save(path: Path, history: Iterable[Op], **header: Any) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"history": 1, **header}, default=str) + "\n")
        for op in history:
            f.write(json.dumps(op, default=str) + "\n")


def load(path: Path) -> tuple[dict[str, Any], list[Op]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines[0], lines[1:]


def as_sql(history: Iterable[Op]) -> list[str]:
    """The history as statements for ``mzflow sql`` (``$WORKDIR`` left for the reader),
    with what is not SQL as the command that does it, commented."""
    out = []
    for op in history:
        k = op["op"]
        if k == "sql":
            out.append(f"{op['sql']};")
        elif k == "write" and op.get("rows"):
            out.append(f"{op['oracle']};  -- COPY t1 FROM a Parquet file of these rows")
        elif k == "write":
            out.append(f"{op['sql']};")
        elif k == "tick":
            out.append(f"-- $ mzflow tick --object {op['view']}")
        elif k == "read":
            out.append(f"SELECT * FROM {op['view']};  -- AS OF its index's upper")
        elif k == "subscribe":
            out.append(f"-- SUBSCRIBE {op['rel']} AS OF <the time after the writes "
                       f"before {op['as_of']}> UP TO <now>")
        elif k == "query":
            at = "" if op["as_of"] is None else " AS OF <the time after the writes before it>"
            out.append(f"{op['sql']}{at};  -- a read a projection may answer")
        elif k == "compact":
            out.append("-- $ mzflow compact")
        elif k == "sink":
            out.append(f"-- $ mzflow sink run {op['sink']}")
    return out


_KIND = re.compile(r"^(table|index|read|subscribe|sink|quarantine) (\S+) at (\d+) differs")


def target(violation: str) -> tuple[str | None, str | None, int | None]:
    """(kind, relation, time) of a checker violation, as far as it names them."""
    m = re.match(r"^query (SELECT .*?) at (\d+) differs", violation)
    if m:  # a read shaped for a projection: the relation is its SQL
        return "query", m.group(1), int(m.group(2))
    m = _KIND.match(violation)
    if m:
        return m.group(1), m.group(2), int(m.group(3))
    m = re.match(r"^index of (\w+): tick error", violation)
    if m:
        return "index", m.group(1), None
    m = re.match(r"^(?:SUBSCRIBE|sink) (\w+)", violation)
    if m:
        return violation.split()[0].lower(), m.group(1), None
    return None, None, None


def signature(violation: str) -> str:
    """What two violations must share to be the same failure: the text before its
    details, times and numbers left out ("index mv_agg differs from the oracle")."""
    head = re.sub(r" at \d+", "", violation.split(":")[0])
    return re.sub(r"\b\d+\b", "#", head)
