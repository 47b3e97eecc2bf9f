"""Replaying a committed history serially, and shrinking a failing one.

``replay`` runs a history (``history.py``) in one process on a fresh home laid out like
the soak's (``home``, ``journals``, ``copy``, ``sinks``), journaling what it did as the
workers would (a write under its original key ``(worker, n)``), then runs the soak's
checker over it. No kills: a kill's effect on committed state is already in the history.

``shrink`` looks for the shortest sub-history whose replay still fails the checker the
same way (``history.signature``): first the relevant slice (``history.relevant``), else
the whole history, then ``shrink.ddmin``, every candidate on its own fresh home, all
within a time budget.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mzflow_dev.soak import history as hist
from mzflow_dev.soak.checker import Checker
from mzflow_dev.soak.shrink import Stats, ddmin, plausible

Op = dict[str, Any]


class _Log:
    """A journal without fsync: a replay that dies is simply run again."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, **record: Any) -> None:
        record.setdefault("t", time.time())
        with open(self.path, "a") as f:
            f.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")


@dataclass
class Outcome:
    violations: list[str] = field(default_factory=list)
    error: str | None = None  # the operation that failed: the replay stopped there
    timed_out: bool = False
    seconds: float = 0.0
    took: list[float] = field(default_factory=list)  # seconds per operation run


def replay(history: list[Op], workdir: Path, deadline: float | None = None) -> Outcome:
    """Run ``history`` on a fresh home in ``workdir`` and check it."""
    import os

    os.environ.setdefault("MZFLOW_CLUSTER_SPARK", "in-process")
    import mzflow

    began = time.monotonic()
    home, journals = workdir / "home", workdir / "journals"
    for d in (journals, workdir / "copy", workdir / "sinks", workdir / "landing"):
        d.mkdir(parents=True, exist_ok=True)
    logs: dict[str, _Log] = {}

    def log(name: str) -> _Log:
        return logs.setdefault(name, _Log(journals / f"{name}.jsonl"))

    conn = mzflow.connect(str(home))
    times: list[tuple[float, int]] = []  # (the soak's order key, the replay's read_ts)
    took: list[float] = []
    try:
        for i, op in enumerate(history):
            if deadline is not None and time.monotonic() > deadline:
                return Outcome(timed_out=True, seconds=time.monotonic() - began, took=took)
            t0 = time.monotonic()
            try:
                _run(conn, op, i, workdir, log, times)
            except Exception as exc:  # noqa: BLE001 - any failure: not this history
                return Outcome(error=f"operation {i} ({_describe(op)}): "
                                     f"{type(exc).__name__}: {str(exc)[:300]}",
                               seconds=time.monotonic() - began, took=took)
            took.append(time.monotonic() - t0)
            times.append((op["key"], conn.store.snapshot().read_ts))
    finally:
        conn.close()
    checker = Checker(home, journals)
    try:
        checker.run(final=True)
    except Exception as exc:  # noqa: BLE001
        return Outcome(error=f"checker: {type(exc).__name__}: {str(exc)[:300]}\n"
                             + traceback.format_exc(limit=3),
                       seconds=time.monotonic() - began)
    return Outcome(checker.violations, seconds=time.monotonic() - began, took=took)


def _describe(op: Op) -> str:
    return " ".join(str(v) for k, v in op.items() if k not in ("key", "rows", "oracle"))[:200]


def _run(conn: Any, op: Op, i: int, workdir: Path, log: Any,
         times: list[tuple[float, int]]) -> None:
    from mzflow_dev.soak.worker import _norm, _write_parquet, created, read_at_upper

    kind = op["op"]
    if kind == "sql":
        sql = op["sql"].replace(hist.WORKDIR, str(workdir))
        m = re.match(r"CREATE (?:MATERIALIZED )?VIEW (\w+) .*?AS (SELECT .*)$", sql)
        # The checker's oracle learns each view's SELECT from the DDL journal.
        record = {"n": i, "sql": sql, "view": m.group(1) if m else None,
                  "select": m.group(2) if m else None}
        log("ddl").write(ev="start", **record)
        conn.execute(sql)
        log("ddl").write(ev="done", **record, **created(conn, sql))
    elif kind == "write":
        sql = op["sql"].replace(hist.WORKDIR, str(workdir))
        if op.get("rows"):
            path = re.search(r"FROM '([^']+)'", sql)
            assert path is not None, sql
            _write_parquet(Path(path.group(1)), [tuple(r) for r in op["rows"]])
        j = log(op["worker"])
        j.write(ev="start", n=op["n"], kind="write", table=op["table"], sql=sql,
                oracle=op["oracle"])
        try:
            r = conn.execute(sql, idempotency_key=(op["worker"], op["n"]))
        except Exception as exc:
            if getattr(exc, "code", None) != "23514":
                raise
            # Rejected by a FAIL expectation here, committed in the soak: an expectation
            # timed differently (a DROP's time is known only from the journal).
            j.write(ev="rejected", n=op["n"], msg=str(exc)[:300])
            return
        j.write(ev="done", n=op["n"], status=r.status)
    elif kind == "tick":
        for rep in conn.tick(object=op["view"]):
            log("ticker").write(ev="tick", n=1, view=op["view"], mode=rep.strategy,
                                error=rep.error, upper=rep.upper_after)
    elif kind == "read":
        snap = conn.store.snapshot()
        view = snap.resolve(op["view"])
        index = next(it for it in snap.items if it.kind == "index"
                     and it.is_default_index and it.on_id == view.id)
        read_at_upper(conn, log("ticker"), view.name, index.id,
                      snap.cluster(index.cluster_id).name)
    elif kind == "subscribe":
        # The soak's AS OF, mapped: the replay's time after the last operation before it.
        as_of = next((ts for key, ts in reversed(times) if key <= op["as_of"]),
                     times[0][1] if times else 0)
        up_to = conn.store.snapshot().read_ts + 1
        as_of = min(as_of, up_to - 1)
        conn.execute("SET cluster = c1")
        res = conn.execute(f"SUBSCRIBE {op['rel']} AS OF {as_of} UP TO {up_to}")
        log("ticker").write(ev="subscribe", rel=op["rel"], as_of=as_of, up_to=up_to,
                            columns=res.columns,
                            rows=[[_norm(v) for v in row] for row in res.rows])
    elif kind == "query":
        sql = op["sql"]
        before = conn.store.snapshot().read_ts
        at = None
        if op["as_of"] is not None:  # the soak's AS OF, mapped like a SUBSCRIBE's
            at = next((ts for key, ts in reversed(times) if key <= op["as_of"]),
                      times[0][1] if times else 0)
            sql = f"{sql} AS OF {at}"
        from mzflow.projections import route as projections

        routed = projections.ROUTED[0]
        res = conn.execute(sql)
        log("ddl").write(ev="query", sql=sql, at=at, before=before,
                         after=conn.store.snapshot().read_ts,
                         routed=projections.ROUTED[0] - routed,
                         rows=[[_norm(v) for v in row] for row in res.rows])
    elif kind == "compact":
        conn.compact()
    elif kind == "sink":
        for e in conn.run_sink(op["sink"]):
            if not e.skipped:
                log("compactor").write(ev="sink", sink=op["sink"], rows=e.rows, end=str(e.end))
    else:
        raise ValueError(f"unknown operation {kind!r}")


@dataclass
class Report:
    violation: str
    reproduced: bool
    history: list[Op]  # the shortest reproducing one found (the whole one if none)
    original: int  # operations in the whole history
    first: int  # in the first candidate that reproduced (0: none)
    stats: Stats
    seconds: float
    confirmed: bool | None = None  # the shortest, replayed once more, failed again
    note: str = ""


def shrink(history: list[Op], violation: str, workdir: Path, seconds: float,
           say: Any = print) -> Report:
    """The shortest sub-history of ``history`` whose replay fails like ``violation``,
    found within ``seconds`` (a final confirming replay gets at least a minute more)."""
    began = time.monotonic()
    deadline = began + seconds
    sig = hist.signature(violation)
    kind, relation, at = hist.target(violation)
    workdir.mkdir(parents=True, exist_ok=True)
    counter = itertools.count()
    stats = Stats()
    if violation.startswith(hist.UNCHECKED):
        return Report(violation, False, history, len(history), 0, stats, 0.0,
                      note="not reproduced by a serial replay (its checker does not look "
                           "at storage after a final compaction)")

    memo: dict[tuple[int, ...], bool] = {}  # shared by the three ddmin passes
    timed_out: list[int] = []  # lengths of the candidates whose replay the deadline cut

    def test(idx: list[int], until: float = deadline, again: bool = False) -> bool:
        if tuple(idx) in memo and not again:
            stats.cached += 1
            return memo[tuple(idx)]
        cand = [history[i] for i in idx]
        if not plausible(cand):
            memo[tuple(idx)] = False
            return False
        stats.replays += 1
        d = workdir / f"candidate-{next(counter)}"
        try:
            out = replay(cand, d, until)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        ok = any(hist.signature(v) == sig for v in out.violations)
        verdict = ("reproduced" if ok else "timed out" if out.timed_out else
                   f"error at {out.error}" if out.error else
                   "other violations" if out.violations else "passed")
        stats.log.append(f"{len(cand)} ops, {out.seconds:.0f} s: {verdict}")
        if out.timed_out:
            timed_out.append(len(idx))
        else:
            memo[tuple(idx)] = ok
        return ok

    every = list(range(len(history)))
    keep = {id(op) for op in hist.relevant(history, relation, kind, at)}
    slice_ = [i for i, op in enumerate(history) if id(op) in keep]
    start = None
    for first in [slice_] + ([every] if slice_ != every else []):
        if not first or time.monotonic() >= deadline:
            continue
        stats.tested += 1
        if test(first):
            start = first
            break
    if start is None:
        # Not reproduced: by the whole history replayed to its end, or for lack of time.
        whole = tuple(every) in memo
        return Report(violation, False, history, len(history), 0, stats,
                      time.monotonic() - began,
                      note="not reproduced by a serial replay" if whole else
                      "time ran out before a replay reproduced it")
    say(f"shrinking from {len(start)} of {len(history)} operations ({sig})")
    # The operations first, every DDL statement kept (a chunk that held a CREATE could
    # not go, so the writes beside it would wait for single-item rounds); then the DDL
    # with those operations kept; then everything, much of it answered from the memo.
    ddl = [i for i in start if history[i]["op"] == "sql"]
    rest = [i for i in start if history[i]["op"] != "sql"]
    rest = ddmin(rest, lambda c: test(sorted(ddl + c)), deadline, stats=stats, say=say)
    ddl = ddmin(ddl, lambda c: test(sorted(c + rest)), deadline, stats=stats, say=say)
    best = ddmin(sorted(ddl + rest), test, deadline, stats=stats, say=say)
    confirmed = test(best, max(deadline, time.monotonic() + 60), again=True)
    return Report(violation, True, [history[i] for i in best], len(history), len(start),
                  stats, time.monotonic() - began, confirmed)
