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
* reads: every ``SELECT … AS OF <upper>`` a worker made equals DuckDB's answer then;
* catalog: dependencies and indexed objects exist, GlobalIds are unique, and every
  ``since`` is at most its ``upper``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from soaklib import deltalog, ops
from soaklib.journal import records


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
    outcome: str = "uncertain"  # done, uncertain (killed or given up)


@dataclass
class Checker:
    home: Path
    journals: Path
    counts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    _reads_seen: dict[str, int] = field(default_factory=dict)
    _sinks_seen: dict[str, int] = field(default_factory=dict)
    failed: list[tuple[str, int]] = field(default_factory=list)  # (relation, time)
    events: list[tuple[int, str, int, str]] = field(default_factory=list)  # last replay's
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
        return out

    def views(self) -> dict[str, str]:
        """Every view's SELECT: the fixed ones and each the DDL worker tried to create."""
        out = {name: q for name, (_, q) in ops.FIXED_VIEWS.items()}
        for rec in records(self.journals / "ddl.jsonl"):
            if rec["ev"] == "start" and rec.get("select") and rec["sql"].startswith("CREATE"):
                out[rec["view"]] = rec["select"]
        return out

    # -- the pass ---------------------------------------------------------------------

    def run(self, final: bool = False) -> None:
        import mzflow
        from mzflow.storage import paths

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
            probes = self._index_probes(snap, warehouse)
            probes += self._read_probes()
            probes += self._subscribe_probes()
            probes += self._sink_probes()
            # A replayed sub-history (replay.py) may lack a table: nothing to check.
            tables = {t: snap.find(t) for t in ops.TABLES if snap.find(t) is not None}
            logs = {t: deltalog.commits(paths.table(warehouse, it.id))
                    for t, it in tables.items()}
            writes = self.writes()
            for key, w in writes.items():
                w.outcome = "done" if key in finished else "uncertain"
            events = self._keys(writes, logs)
            self.events = events
            probes += self._table_probes(tables, logs, warehouse)
            self._replay(events, probes, self.views())
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
              logs: dict[str, list[deltalog.Commit]]) -> list[tuple[int, str, int, str]]:
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
                    events.append((c.ts or 0, table, c.version, w.oracle))
                    self.committed.append((c.ts or 0, table, c.version, key))
                if c.ts is None or c.ts <= last_ts:
                    self.fail(f"{table} v{c.version}: write time {c.ts} not after {last_ts}")
                last_ts = c.ts or last_ts
        for key, w in writes.items():
            where = seen.get(key, [])
            self.counts["writes checked"] += 1
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

    def _table_probes(self, tables: dict[str, Any], logs: dict[str, list[Any]],
                      warehouse: Path) -> list[tuple[int, str, Any]]:
        from deltalake import DeltaTable

        from mzflow.storage import paths

        out = []
        for t, item in tables.items():
            commits = logs[t]
            last = commits[-1]
            ts = max((c.ts for c in commits if c.ts is not None), default=None)
            if ts is None:
                continue
            try:
                data = DeltaTable(str(paths.table(warehouse, item.id)),
                                  version=last.version).to_pyarrow_table()
            except Exception as exc:  # vacuumed under us: the next pass reads again
                self.counts["table reads skipped"] += 1
                del exc
                continue
            cols = [c for c in data.column_names if not c.startswith("_mz")]
            rows = list(zip(*(data.column(c).to_pylist() for c in cols), strict=True))
            out.append((ts, "table", (t, cols, bag(rows))))
        return out

    def _index_probes(self, snap: Any, warehouse: Path) -> list[tuple[int, str, Any]]:
        from deltalake import DeltaTable

        from mzflow.storage import paths

        out = []
        for item in snap.items:
            if item.kind != "index" or not item.is_default_index:
                continue
            view = snap.item(item.on_id)
            path = paths.index(warehouse, item.id)
            commits = deltalog.commits(path)
            stamped = [c for c in commits if c.ts is not None]
            if not stamped or stamped[-1].version == 0:
                continue  # never ticked
            head = stamped[-1]
            if head.error:
                self.fail(f"index of {view.name}: tick error {head.error}")
                continue
            try:
                data = DeltaTable(str(path), version=commits[-1].version).to_pyarrow_table()
            except Exception:
                self.counts["index reads skipped"] += 1
                continue
            cols = [c for c in data.column_names if not c.startswith("_mz")]
            counts = data.column("_mz_count").to_pylist()
            rows = list(zip(*(data.column(c).to_pylist() for c in cols), strict=True))
            got: Counter = Counter()
            for row, n in zip(rows, counts, strict=True):
                got[tuple(norm(v) for v in row)] += n
            out.append((head.ts, "index", (view.name, cols, +got)))
        return out

    def _read_probes(self) -> list[tuple[int, str, Any]]:
        out = []
        for path in sorted(self.journals.glob("ticker*.jsonl")):
            for i, rec in enumerate(records(path)):
                if i < self._reads_seen.get(path.name, 0):
                    continue
                self._reads_seen[path.name] = i + 1
                if rec["ev"] == "read":
                    out.append((rec["at"], "read", (rec["view"], None, bag(rec["rows"]))))
        return out

    def _subscribe_probes(self) -> list[tuple[int, str, Any]]:
        """A SUBSCRIBE's stream, accumulated: ordered by time, within [AS OF, UP TO),
        never a negative count, and at its AS OF, at each time it names and at UP TO - 1
        the oracle's contents then (complete: no change left out)."""
        out = []
        for path in sorted(self.journals.glob("ticker*.jsonl")):
            key = f"sub:{path.name}"
            for i, rec in enumerate(records(path)):
                if i < self._reads_seen.get(key, 0):
                    continue
                self._reads_seen[key] = i + 1
                if rec["ev"] != "subscribe":
                    continue
                rel, as_of, up_to, rows = rec["rel"], rec["as_of"], rec["up_to"], rec["rows"]
                cols = rec["columns"][2:]
                self.counts["subscribes checked"] += 1
                times = [row[0] for row in rows]
                if times != sorted(times) or any(not as_of <= t < up_to for t in times):
                    self.fail(f"SUBSCRIBE {rel} AS OF {as_of} UP TO {up_to}: times out of "
                              f"order or range: {times[:20]}")
                    continue
                acc: Counter = Counter()
                checkpoints = sorted({as_of, up_to - 1, *times})
                j = 0
                for at in checkpoints:
                    while j < len(rows) and rows[j][0] <= at:
                        acc[tuple(norm(v) for v in rows[j][2:])] += rows[j][1]
                        j += 1
                    if any(n < 0 for n in acc.values()):
                        self.fail(f"SUBSCRIBE {rel} AS OF {as_of}: negative count at {at}")
                        break
                    out.append((at, "subscribe", (rel, cols, +acc)))
        return out

    def _sink_probes(self) -> list[tuple[int, str, Any]]:
        """Each sink's files: intervals back to back, every change inside its interval,
        and the changes replayed through an interval equal the oracle at its end - 1."""
        import datetime as dt

        import pyarrow.parquet as pq

        def ms(label: str) -> int:
            when = dt.datetime.strptime(label, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
            return int(when.timestamp() * 1000)

        out = []
        for name, source in ops.SINKS.items():
            folder = self.home.parent / "sinks" / name
            files = []
            for f in folder.glob(f"{name}-*-*.parquet"):
                start, end = f.stem[len(name) + 1:].split("-")
                files.append((ms(start), ms(end), f))
            files.sort()
            acc: Counter = Counter()
            for i, (start, end, f) in enumerate(files):
                if i and start != files[i - 1][1]:
                    self.fail(f"sink {name}: interval {f.name} does not follow the one before")
                data = pq.read_table(f)
                cols = [c for c in data.column_names if not c.startswith("mz_")]
                times = data.column("mz_timestamp").to_pylist()
                if any(not (start <= t < end or i == 0 and t < end) for t in times):
                    self.fail(f"sink {name}: {f.name} has changes outside its interval")
                diffs = data.column("mz_diff").to_pylist()
                rows = zip(*(data.column(c).to_pylist() for c in cols), strict=True)
                for row, d in zip(rows, diffs, strict=True):
                    acc[tuple(norm(v) for v in row)] += d
                if any(n < 0 for n in acc.values()):
                    self.fail(f"sink {name}: negative count after {f.name}")
                self.counts["sink intervals checked"] += 1 if i >= self._sinks_seen.get(
                    name, 0) else 0
                out.append((end - 1, "sink", (source, cols, +acc)))
            self._sinks_seen[name] = len(files)
        return out

    def _replay(self, events: list[tuple[int, str, int, str]],
                probes: list[tuple[int, str, Any]], views: dict[str, str]) -> None:
        import duckdb

        db = duckdb.connect()
        for t, cols in ops.TABLES.items():
            db.execute(f"CREATE TABLE {t} ({cols})")
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
        db.close()

    def _apply(self, db: Any, event: tuple[int, str, int, str]) -> None:
        ts, table, version, sql = event
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
        want = bag(db.execute(f"SELECT {select} FROM {name}").fetchall())
        self.counts[f"{kind} checks"] += 1
        if got != want:
            self.fail(f"{kind} {name} at {ts} differs from the oracle: {diff(got, want)}")
            self.failed.append((name, ts))

