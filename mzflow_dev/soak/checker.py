"""The invariants, checked against an independent oracle: DuckDB replaying every
committed write of every table in commit-time order.

What a table holds is decided by its Delta log (``deltalog.py``): each write commit
carries its idempotency key ``(worker, n)``, which names the journaled statement to
replay. The checks:

* keys: every write a worker saw finish is committed exactly once, an uncertain one
  (killed mid-way, or given up) at most once, no commit changes data without a key,
  and a table's write times increase with its versions;
* tables: each table's newest version equals the replay (rows as a multiset);
* indexes: each materialized view's index, at its newest tick, equals DuckDB's answer
  of the view's SQL at the time the tick says it is complete through;
* reads: every ``SELECT … AS OF <upper>`` a worker made equals DuckDB's answer then,
  and so does every read shaped for a projection (``ops.PROJECTION_READS``, answered
  from one when one is live: projections never change an answer);
* expectations (on t2): each write meets the expectations live at its time (from
  ``mz_expectation_results``, cross-checked against the DDL journal's times): DuckDB
  replays DROP ROW and QUARANTINE as filters, the quarantine table equals the rows
  filtered out (exactly once), a write committed never fails a FAIL expectation it met,
  and a write rejected by one (SQLSTATE 23514) committed nothing;
* catalog: dependencies and indexed objects exist, GlobalIds are unique, and every
  ``since`` is at most its ``upper``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from mzflow_dev.soak import deltalog, ops, swaps
from mzflow_dev.soak.journal import records


def norm(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else round(float(v), 6)
    if isinstance(v, float):
        return round(v, 6)
    return v


def bag(rows: Any) -> Counter:
    return Counter(tuple(norm(v) for v in row) for row in rows)


def diff(got: Counter, want: Counter, limit: int = 6) -> str:
    extra = list((got - want).items())[:limit]
    missing = list((want - got).items())[:limit]
    return f"extra {extra}, missing {missing}"


@dataclass
class Write:
    worker: str
    n: int
    table: str
    sql: str
    oracle: str
    outcome: str = "uncertain"  # done, rejected (by a FAIL expectation), uncertain
    # Its last attempt found it already applied: an earlier attempt committed the table
    # and may have died before the catalog's commit (which records its results).
    retried: bool = False


@dataclass
class Expect:
    """An expectation the DDL worker added to t2, with what the journal says of when:
    wall-clock seconds of its ADD and DROP (start, end), its oracle time when known."""

    name: str
    condition: str
    action: str
    add: tuple[float, float]
    created_ts: int | None = None
    drop: tuple[float, float] | None = None
    uncertain: bool = False  # its ADD was killed mid-way

    def status(self, ts: int) -> str:
        """Whether it was live for a write at ``ts``: live, dead or unknown. A write's
        time is allocated under the catalog's write lock, as are the DDL's, and is the
        wall clock then (ms, a few ms ahead at most)."""
        if self.created_ts is not None:
            if ts < self.created_ts:
                return "dead"
        elif ts < self.add[0] * 1000:
            return "dead"
        elif ts <= self.add[1] * 1000 + SLACK_MS:
            return "unknown"
        if self.drop is None or ts < self.drop[0] * 1000:
            return "live"
        return "dead" if ts > self.drop[1] * 1000 + SLACK_MS else "unknown"


SLACK_MS = 50


@dataclass
class Checker:
    home: Path
    journals: Path
    counts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    _reads_seen: dict[str, int] = field(default_factory=dict)
    _sinks_seen: dict[str, int] = field(default_factory=dict)
    failed: list[tuple[str, int]] = field(default_factory=list)  # (relation, time)
    # This pass's expectations, results by write key, and rejected INSERTs to re-check.
    _expects: dict[str, Expect] = field(default_factory=dict)
    _results: dict[tuple[str, int], list[tuple[int, str, str, int, str]]] = field(
        default_factory=dict)
    _reject_checks: list[tuple[tuple[str, int], Expect, str]] = field(default_factory=list)
    events: list[tuple[int, str, int, Any]] = field(default_factory=list)  # last replay's
    # The last pass's committed writes: (time, table, version, key), in commit order.
    committed: list[tuple[int, str, int, tuple[str, int]]] = field(default_factory=list)
    # A deliberate oracle bug, for tests/test_soak_shrink.py only: the oracle ignores
    # every statement that starts with this text (so a known history violates).
    oracle_bug: str | None = field(
        default_factory=lambda: os.environ.get("MZFLOW_SOAK_ORACLE_BUG") or None)

    def fail(self, what: str) -> None:
        if what not in self.violations:
            self.violations.append(what)

    # -- journals -------------------------------------------------------------------

    def writes(self) -> dict[tuple[str, int], Write]:
        out: dict[tuple[str, int], Write] = {}
        for path in sorted(self.journals.glob("w*.jsonl")):
            worker = path.stem
            for rec in records(path):
                key = (worker, rec.get("n", -1))
                if rec["ev"] == "start":
                    out.setdefault(key, Write(worker, rec["n"], rec["table"], rec["sql"],
                                              rec["oracle"]))
                elif rec["ev"] == "done":
                    out[key].outcome = "done"
                    out[key].retried = any("already applied" in n
                                           for n in rec.get("notices") or [])
                elif rec["ev"] == "rejected":
                    out[key].outcome = "rejected"
        return out

    def expectations(self, catalog: Callable[[], Any], ran: set[str]) -> dict[str, Expect]:
        """Every expectation the DDL worker added to t2 that committed. ``ran``: the
        names mz_expectation_results holds (an ADD killed mid-way committed if it ran,
        is in the final catalog, or a DROP without IF EXISTS of it succeeded).
        ``catalog`` reads the catalog now: after the journal, so that every DROP the
        journal says is done is done in it too. (A catalog read before the journal
        still held an expectation that a DROP, journaled meanwhile, had removed: the
        drop was ignored and the writes after it were said to have skipped a live
        expectation; the 60-minute soak of seed 61 saw it.)"""
        recs = list(records(self.journals / "ddl.jsonl"))
        snap = catalog()
        table = snap.find(ops.EXPECT_TABLE)
        final = {e.name: e for e in snap.expectations_on(table.id)} if table is not None else {}
        ended = {r["n"]: r for r in recs if r.get("ev") in ("done", "error") and "n" in r}
        adds: dict[str, Expect] = {}
        drops: dict[str, list[tuple[float, float, str]]] = {}  # name -> (start, end, how)
        for rec in records(self.journals / "setup.jsonl"):  # before any write
            found = ops.expectation_of(rec.get("sql") or "")
            if found and rec.get("ev") == "done":
                adds[found[1]] = Expect(found[1], found[2], found[3], (0.0, rec["t"]), 0)
        for i, rec in enumerate(recs):
            if rec.get("ev") != "start":
                continue
            sql = rec.get("sql") or ""
            end = ended.get(rec["n"])
            # A statement killed mid-way ended before the restarted worker's next record.
            t_end = end["t"] if end else recs[i + 1]["t"] if i + 1 < len(recs) else 1e12
            how = end["ev"] if end else "uncertain"
            found = ops.expectation_of(sql)
            dropped = re.match(r"ALTER TABLE \w+ DROP CONSTRAINT( IF EXISTS)? (\w+)$", sql)
            if found and how != "error":
                name = found[1]
                created = (end or {}).get("created_ts") or (
                    final[name].created_ts if name in final else None)
                adds[name] = Expect(name, found[2], found[3], (rec["t"], t_end), created)
                if how == "uncertain":
                    adds[name].uncertain = True
            elif dropped and how != "error":
                drops.setdefault(dropped.group(2), []).append(
                    (rec["t"], t_end, "strict" if how == "done" and not dropped.group(1)
                     else how))
        out = {}
        for name, e in adds.items():
            attempts = drops.get(name, [])
            if e.uncertain and not (name in final or name in ran
                                    or any(h == "strict" for *_, h in attempts)):
                continue  # killed before its commit (as far as anything shows)
            if name not in final and attempts:
                done = [a for a in attempts if a[2] != "uncertain"]
                last = done[0] if done else attempts[-1]
                e.drop = (attempts[0][0], last[1])
            out[name] = e
        return out

    def results(self) -> dict[tuple[str, int], list[tuple[int, str, str, int, str]]]:
        """mz_expectation_results by write key: (ts, expectation, action, unexpected,
        outcome); the statement names the key (``INSERT w1:5``)."""
        import mzflow

        conn = mzflow.connect(str(self.home))
        try:
            rows = conn.store.expectation_results()
        finally:
            conn.close()
        out: dict[tuple[str, int], list[tuple[int, str, str, int, str]]] = {}
        for ts, _obj, name, statement, _n, unexpected, action, outcome, _sample in rows:
            m = re.match(r"^\w+ (\w+):(\d+)$", str(statement))
            if m:
                out.setdefault((m.group(1), int(m.group(2))), []).append(
                    (int(ts), str(name), str(action), int(unexpected), str(outcome)))
        return out

    def views(self) -> dict[str, str]:
        """Every view's SELECT: the fixed ones and each the DDL worker tried to create."""
        out = {name: q for name, (_, q) in ops.FIXED_VIEWS.items()}
        for rec in records(self.journals / "ddl.jsonl"):
            if rec["ev"] == "start" and rec.get("select") and rec["sql"].startswith("CREATE"):
                out[rec["view"]] = rec["select"]
        out.update(swaps.oracle_views(self.journals))  # the swapped view's generations
        return out

    # -- the pass ---------------------------------------------------------------------

    def run(self, final: bool = False) -> None:
        import mzflow
        from mzflow.storage import paths
        from mzflow_dev.soak import probes as soak_probes
        from mzflow_dev.soak import wire_check

        conn = mzflow.connect(str(self.home))
        try:
            # The order matters while workers run. What finished is read first (a
            # write seen done is in the logs read later); then the probes (a tick, read,
            # SUBSCRIBE or sink at time T saw only writes committed before, which the
            # logs read later hold); then the tables' logs; then the journals again for
            # the SQL of every write started (a commit's start record precedes it).
            snap = conn.store.snapshot()
            warehouse = conn.config.warehouse
            self._catalog(snap)
            finished = {k for k, w in self.writes().items() if w.outcome == "done"}
            probes = soak_probes.indexes(self, snap, warehouse)
            probes += soak_probes.reads(self)
            probes += soak_probes.subscribes(self)
            probes += soak_probes.sinks(self)
            probes += soak_probes.queries(self)
            probes += wire_check.read_probes(self)  # reads through `mzflow serve`
            probes += swaps.read_probes(self.journals, self._reads_seen, self.fail,
                                        self.counts)
            swaps.check_aborted(self.journals, snap, self.fail, self.counts)
            probes += soak_probes.quarantine(self, snap, warehouse)
            # A replayed sub-history (replay.py) may lack a table: nothing to check.
            tables = {t: snap.find(t) for t in ops.TABLES if snap.find(t) is not None}
            logs = {t: deltalog.commits(paths.table(warehouse, it.id))
                    for t, it in tables.items()}
            writes = self.writes()
            rejected = {k for k, w in writes.items() if w.outcome == "rejected"}
            for key, w in writes.items():
                w.outcome = ("done" if key in finished else
                             "rejected" if key in rejected else "uncertain")
            # Results are recorded in the write's own catalog transaction: read after
            # the logs' writes, they hold every write's that finished.
            self._results = self.results()
            ran = {r[1] for rs in self._results.values() for r in rs}
            self._expects = self.expectations(conn.store.snapshot, ran)
            self._reject_checks = []
            events = self._keys(writes, logs)
            self.events = events
            probes += soak_probes.tables(self, tables, logs, warehouse)
            self._replay(events, probes, self.views())
            wire_check.check(self, conn)  # denials, the wire's writes, the landing folder
        finally:
            conn.close()
        self.counts["check passes"] += 1

    def _catalog(self, snap: Any) -> None:
        ids = {i.id for i in snap.items}
        gids = [i.global_id for i in snap.items]
        if len(gids) != len(set(gids)):
            self.fail(f"catalog: GlobalIds not unique: {sorted(gids)}")
        upper = snap.read_ts + 1
        from mzflow.catalog import frontiers

        for item in snap.items:
            for dep in item.depends_on:
                if dep not in ids:
                    self.fail(f"catalog: {item.name} depends on missing {dep}")
            if item.on_id is not None and item.on_id not in ids:
                self.fail(f"catalog: {item.name} is on missing {item.on_id}")
            if item.kind == "table" and frontiers.since(item, snap) > upper:
                self.fail(f"catalog: since of {item.name} beyond upper {upper}")
            if (item.since_ts or 0) > upper:
                self.fail(f"catalog: since_ts {item.since_ts} of {item.name} > upper {upper}")
            self.counts["catalog items checked"] += 1

    def _keys(self, writes: dict[tuple[str, int], Write],
              logs: dict[str, list[deltalog.Commit]]) -> list[tuple[int, str, int, Any]]:
        """Check the keys; return the replay's events ``(ts, table, version, sql)``."""
        seen: dict[tuple[str, int], list[str]] = {}
        events = []
        self.committed = []
        for table, commits in logs.items():
            last_ts = -1
            for c in commits:
                if c.version == 0:
                    continue
                if c.columns is not None and not c.txns and c.ts is not None:
                    events.append((c.ts, table, c.version, f"#columns {','.join(c.columns)}"))
                if not c.txns:
                    if c.data_change and c.operation not in ("OPTIMIZE",):
                        self.fail(f"{table} v{c.version}: {c.operation} changed data "
                                  "without an idempotency key")
                    continue
                for key in c.txns:
                    seen.setdefault(key, []).append(f"{table} v{c.version}")
                    w = writes.get(key)
                    if w is None:
                        self.fail(f"{table} v{c.version}: commit of unknown write {key}")
                        continue
                    if w.table != table:
                        self.fail(f"write {key} ({w.table}) committed to {table}")
                    events.append((c.ts or 0, table, c.version,
                                   self._oracle(w, key, c.ts or 0)))
                    self.committed.append((c.ts or 0, table, c.version, key))
                if c.ts is None or c.ts <= last_ts:
                    self.fail(f"{table} v{c.version}: write time {c.ts} not after {last_ts}")
                last_ts = c.ts or last_ts
        for key, w in writes.items():
            where = seen.get(key, [])
            self.counts["writes checked"] += 1
            if w.outcome == "rejected":
                self._rejected(key, w, bool(where))
            if len(where) > 1:
                self.fail(f"write {key} applied {len(where)} times: {where}: {w.sql}")
            elif w.outcome == "done" and not where:
                self.fail(f"write {key} finished but is not committed (lost): {w.sql}")
            if where:
                self.counts["writes committed"] += 1
            elif w.outcome != "done":
                self.counts["uncertain writes not committed"] += 1
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        self.committed.sort(key=lambda e: (e[0], e[1], e[2]))
        return events

    # -- expectations ------------------------------------------------------------------

    def _applied(self, w: Write, key: tuple[str, int], ts: int) -> dict[str, Expect]:
        """The expectations a write at ``ts`` met: as mz_expectation_results records
        them, checked against the DDL journal's times. A write with no results met
        none, unless it may have died between its table's commit and its catalog's
        (killed, or its retry found it applied): then the journal's times decide (an
        expectation whose DDL overlapped the write: live if the write is nearer the
        DDL's end, counted)."""
        recorded = {r[1]: r for r in self._results.get(key, []) if r[0] == ts}
        orphan = w.retried or w.outcome != "done"
        out = {}
        for name, e in self._expects.items():
            status = e.status(ts)
            if recorded:
                self.counts["expectation timings checked"] += 1
                if status == "live" and name not in recorded:
                    self.fail(f"write {key} at {ts}: expectation {name} was live (added "
                              "before it, not dropped) but not applied")
                elif status == "dead" and name in recorded:
                    self.fail(f"write {key} at {ts}: expectation {name} applied but it "
                              "was not live then")
                if name in recorded:
                    out[name] = e
                    if recorded[name][2] != e.action:
                        self.fail(f"write {key}: expectation {name} acted as "
                                  f"{recorded[name][2]}, defined {e.action}")
            elif not orphan:
                # An INSERT's batch is never empty: had it met one, results would say so.
                if status == "live" and w.sql.startswith("INSERT"):
                    self.fail(f"write {key} at {ts}: expectation {name} was live (added "
                              "before it, not dropped) but no result records it")
            elif status == "live":
                out[name] = e
            elif status == "unknown":
                self.counts["writes with expectation timing guessed"] += 1
                dropping = e.drop is not None and ts >= e.drop[0] * 1000
                lo, hi = e.drop if e.drop is not None and dropping else e.add
                if (ts > (lo + hi) * 500) != dropping:  # nearer the ADD's end or DROP's start
                    out[name] = e
        unknown = set(recorded) - set(self._expects)
        if unknown:
            self.fail(f"write {key}: unknown expectations applied: {sorted(unknown)}")
        return out

    def _oracle(self, w: Write, key: tuple[str, int], ts: int) -> Any:
        """What DuckDB replays for a committed write: its SQL, or (a t2 write that met
        DROP ROW, QUARANTINE or FAIL expectations) statements applying them."""
        if w.table != ops.EXPECT_TABLE or w.sql.startswith("DELETE"):
            return w.oracle
        applied = self._applied(w, key, ts)
        acting = sorted((e for e in applied.values() if e.action != "WARN"),
                        key=lambda e: e.name)
        if not acting:
            return w.oracle
        statement = f"{w.sql.split()[0]} {key[0]}:{key[1]}"
        every = sorted(applied.values(), key=lambda e: e.name)
        if w.sql.startswith("INSERT"):
            values = w.oracle.split(" VALUES ", 1)[1]
            source, cols, new = "_batch", "k, name, w", lambda c: c
            out = ["DELETE FROM _batch", f"INSERT INTO _batch VALUES {values}"]
            where = "TRUE"
        else:
            m = re.match(r"^UPDATE t2 SET w = w \+ 10, name = 'upd' WHERE (.*)$", w.oracle)
            assert m, w.oracle
            source, cols, where, out = "t2", "k, 'upd', w + 10", m.group(1), []

            def new(c: str) -> str:
                return re.sub(r"\bw\b", "(w + 10)", re.sub(r"\bname\b", "'upd'", c))

        def bad(e: Expect) -> str:
            return f"(({new(e.condition)}) IS FALSE)"  # NULL passes, as in CHECK

        def any_of(es: list[Expect]) -> str:
            return "(" + " OR ".join(bad(e) for e in es) + ")" if es else "FALSE"

        failing = [e for e in acting if e.action == "FAIL"]
        if failing:
            out.append(f"#assert-none write {key} committed although rows fail a FAIL "
                       f"expectation|SELECT count(*) FROM {source} WHERE ({where}) AND "
                       f"{any_of(failing)}")
        held = [e for e in acting if e.action == "QUARANTINE"]
        removed = [e for e in acting if e.action in ("DROP ROW", "QUARANTINE")]
        if held:
            names = ("concat_ws(', ', " + ", ".join(
                f"CASE WHEN {bad(e)} THEN '{e.name}' END" for e in every) + ")")
            out.append(f"INSERT INTO {ops.QUARANTINE} SELECT {cols}, {names}, {ts}, "
                       f"'{statement}' FROM {source} WHERE ({where}) AND {any_of(held)}")
        if w.sql.startswith("INSERT"):
            out.append(f"INSERT INTO t2 SELECT {cols} FROM _batch WHERE NOT {any_of(removed)}")
        else:
            out.append(f"UPDATE t2 SET w = w + 10, name = 'upd' WHERE ({where}) AND NOT "
                       f"{any_of(removed)}")
        self.counts["writes replayed with expectations"] += 1
        return out

    def _rejected(self, key: tuple[str, int], w: Write, committed: bool) -> None:
        """A write a FAIL expectation rejected: nothing committed, and the results say
        which expectation failed it (one the DDL journal knows as FAIL)."""
        self.counts["rejected writes checked"] += 1
        if committed:
            self.fail(f"write {key} was rejected by an expectation but is committed: {w.sql}")
        failed = [r for r in self._results.get(key, []) if r[4] == "FAIL" and r[3] > 0]
        if not failed:
            self.fail(f"write {key} was rejected but no FAIL expectation result records it")
        for r in failed:
            e = self._expects.get(r[1])
            if e is None or e.action != "FAIL":
                self.fail(f"write {key} rejected by {r[1]}, not a FAIL expectation")
            elif w.sql.startswith("INSERT"):
                self._reject_checks.append((key, e, w.oracle.split(" VALUES ", 1)[1]))

    def _replay(self, events: list[tuple[int, str, int, Any]],
                probes: list[tuple[int, str, Any]], views: dict[str, str]) -> None:
        import duckdb

        db = duckdb.connect()
        for t, cols in ops.TABLES.items():
            db.execute(f"CREATE TABLE {t} ({cols})")
        db.execute(f"CREATE TABLE {ops.QUARANTINE} ({ops.QUARANTINE_COLS})")
        db.execute(f"CREATE TEMP TABLE _batch ({ops.TABLES[ops.EXPECT_TABLE]})")
        for name, select in views.items():
            db.execute(f"CREATE VIEW {name} AS {select}")
        probes.sort(key=lambda p: p[0])
        i = 0
        for ts, kind, payload in probes:
            while i < len(events) and events[i][0] <= ts:
                self._apply(db, events[i])
                i += 1
            self._probe(db, ts, kind, payload)
        while i < len(events):  # the rest still has to replay cleanly
            self._apply(db, events[i])
            i += 1
        for key, e, values in self._reject_checks:  # a rejected INSERT's rows fail it
            db.execute("DELETE FROM _batch")
            db.execute(f"INSERT INTO _batch VALUES {values}")
            n = db.execute(f"SELECT count(*) FROM _batch WHERE ({e.condition}) IS FALSE"
                           ).fetchone()
            if not n or not n[0]:
                self.fail(f"write {key} was rejected by {e.name} but no row fails it")
        db.close()

    def _apply(self, db: Any, event: tuple[int, str, int, Any]) -> None:
        ts, table, version, sql = event
        if isinstance(sql, list):
            for one in sql:
                if one.startswith("#assert-none "):
                    what, query = one[len("#assert-none "):].split("|", 1)
                    got = db.execute(query).fetchone()
                    if got and got[0]:
                        self.fail(f"{what} (at {ts})")
                else:
                    self._apply(db, (ts, table, version, one))
            return
        if sql.startswith("#columns "):
            have = {r[0] for r in db.execute(f"DESCRIBE {table}").fetchall()}
            for col in sql.split(" ", 1)[1].split(","):
                if col not in have and not col.startswith("_mz"):
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {col} int")
            return
        if self.oracle_bug and sql.startswith(self.oracle_bug):
            return  # the deliberate bug (tests only)
        db.execute(sql)
        self.counts["oracle statements"] += 1

    def _probe(self, db: Any, ts: int, kind: str, payload: Any) -> None:
        name, cols, got = payload
        select = ", ".join(cols) if cols else "*"
        query = name if cols == "SQL" else f"SELECT {select} FROM {name}"
        want = bag(db.execute(query).fetchall())
        self.counts[f"{kind} checks"] += 1
        if got != want:
            self.fail(f"{kind} {name} at {ts} differs from the oracle: {diff(got, want)}")
            self.failed.append((name, ts))

