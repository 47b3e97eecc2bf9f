"""The soak checker's probes: what each part of the system said at a time, to be
compared with the oracle's replay then (``Checker._replay``). Each reads its journals or
shards from where the last pass stopped (``Checker._reads_seen``)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from mzflow_dev.soak import deltalog, ops, swaps
from mzflow_dev.soak.checker import Checker, bag, norm
from mzflow_dev.soak.journal import records


def quarantine(checker: Checker, snap: Any, warehouse: Path) -> list[tuple[int, str, Any]]:
    """t2's quarantine at its newest commit (read before the tables' logs: its
    rows' writes are in them)."""
    from deltalake import DeltaTable

    from mzflow.storage import paths

    item = snap.find(ops.QUARANTINE)
    if item is None:
        return []
    path = paths.table(warehouse, item.id)
    commits = [c for c in deltalog.commits(path) if c.ts is not None]
    if not commits:
        return []
    try:
        data = DeltaTable(str(path), version=commits[-1].version).to_pyarrow_table()
    except Exception:  # vacuumed under us: the next pass reads again
        checker.counts["table reads skipped"] += 1
        return []
    cols = [c.split()[0] for c in ops.QUARANTINE_COLS.split(", ")]
    rows = []
    for row in zip(*(data.column(c).to_pylist() for c in cols), strict=True):
        names = ", ".join(sorted(str(row[3]).split(", ")))
        rows.append((*row[:3], names, *row[4:]))
    return [(max(c.ts for c in commits if c.ts is not None), "quarantine",
             (ops.QUARANTINE, cols, bag(rows)))]


def queries(checker: Checker) -> list[tuple[int, str, Any]]:
    """The DDL worker's reads shaped for projections: at their AS OF, or a plain
    read whose time (``read_ts``) did not move while it ran."""
    out = []
    for path in [checker.journals / "ddl.jsonl", *sorted(checker.journals.glob("ticker*.jsonl"))]:
        out += _queries_of(checker, path)
    return out


def _queries_of(checker: Checker, path: Path) -> list[tuple[int, str, Any]]:
    out = []
    for i, rec in enumerate(records(path)):
        if i < checker._reads_seen.get(f"query:{path.name}", 0):
            continue
        checker._reads_seen[f"query:{path.name}"] = i + 1
        if rec.get("ev") != "query":
            continue
        checker.counts["routed reads"] += 1 if rec.get("routed") else 0
        at = rec["at"]
        if at is None and rec["before"] != rec["after"]:
            checker.counts["plain reads not checked (time moved)"] += 1
            continue
        sql = re.sub(r" AS OF \d+$", "", rec["sql"])
        out.append((at if at is not None else rec["before"], "query",
                    (sql, "SQL", bag(rec["rows"]))))
    return out


def tables(checker: Checker, tables: dict[str, Any], logs: dict[str, list[Any]],
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
            checker.counts["table reads skipped"] += 1
            del exc
            continue
        cols = [c for c in data.column_names if not c.startswith("_mz")]
        rows = list(zip(*(data.column(c).to_pylist() for c in cols), strict=True))
        out.append((ts, "table", (t, cols, bag(rows))))
    return out


def indexes(checker: Checker, snap: Any, warehouse: Path) -> list[tuple[int, str, Any]]:
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
            checker.fail(f"index of {view.name}: tick error {head.error}")
            continue
        try:
            data = DeltaTable(str(path), version=commits[-1].version).to_pyarrow_table()
        except Exception:
            checker.counts["index reads skipped"] += 1
            continue
        cols = [c for c in data.column_names if not c.startswith("_mz")]
        counts = data.column("_mz_count").to_pylist()
        rows = list(zip(*(data.column(c).to_pylist() for c in cols), strict=True))
        got: Counter = Counter()
        for row, n in zip(rows, counts, strict=True):
            got[tuple(norm(v) for v in row)] += n
        name = swaps.index_oracle(view) or view.name  # by the definition it has
        out.append((head.ts, "index", (name, cols, +got)))
    return out


def reads(checker: Checker) -> list[tuple[int, str, Any]]:
    out = []
    for path in sorted(checker.journals.glob("ticker*.jsonl")):
        for i, rec in enumerate(records(path)):
            if i < checker._reads_seen.get(path.name, 0):
                continue
            checker._reads_seen[path.name] = i + 1
            if rec["ev"] == "read":
                out.append((rec["at"], "read", (rec["view"], None, bag(rec["rows"]))))
    return out


def subscribes(checker: Checker) -> list[tuple[int, str, Any]]:
    """A SUBSCRIBE's stream, accumulated: ordered by time, within [AS OF, UP TO),
    never a negative count, and at its AS OF, at each time it names and at UP TO - 1
    the oracle's contents then (complete: no change left out)."""
    out = []
    for path in sorted(checker.journals.glob("ticker*.jsonl")):
        key = f"sub:{path.name}"
        for i, rec in enumerate(records(path)):
            if i < checker._reads_seen.get(key, 0):
                continue
            checker._reads_seen[key] = i + 1
            if rec["ev"] != "subscribe":
                continue
            rel, as_of, up_to, rows = rec["rel"], rec["as_of"], rec["up_to"], rec["rows"]
            cols = rec["columns"][2:]
            checker.counts["subscribes checked"] += 1
            times = [row[0] for row in rows]
            if times != sorted(times) or any(not as_of <= t < up_to for t in times):
                checker.fail(f"SUBSCRIBE {rel} AS OF {as_of} UP TO {up_to}: times out of "
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
                    checker.fail(f"SUBSCRIBE {rel} AS OF {as_of}: negative count at {at}")
                    break
                out.append((at, "subscribe", (rel, cols, +acc)))
    return out


def sinks(checker: Checker) -> list[tuple[int, str, Any]]:
    """Each sink's files: intervals back to back, every change inside its interval,
    and the changes replayed through an interval equal the oracle at its end - 1."""
    import datetime as dt

    import pyarrow.parquet as pq

    def ms(label: str) -> int:
        when = dt.datetime.strptime(label, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
        return int(when.timestamp() * 1000)

    out = []
    for name, source in ops.SINKS.items():
        folder = checker.home.parent / "sinks" / name
        files = []
        for f in folder.glob(f"{name}-*-*.parquet"):
            start, end = f.stem[len(name) + 1:].split("-")
            files.append((ms(start), ms(end), f))
        files.sort()
        acc: Counter = Counter()
        for i, (start, end, f) in enumerate(files):
            if i and start != files[i - 1][1]:
                checker.fail(f"sink {name}: interval {f.name} does not follow the one before")
            data = pq.read_table(f)
            cols = [c for c in data.column_names if not c.startswith("mz_")]
            times = data.column("mz_timestamp").to_pylist()
            if any(not (start <= t < end or i == 0 and t < end) for t in times):
                checker.fail(f"sink {name}: {f.name} has changes outside its interval")
            diffs = data.column("mz_diff").to_pylist()
            rows = zip(*(data.column(c).to_pylist() for c in cols), strict=True)
            for row, d in zip(rows, diffs, strict=True):
                acc[tuple(norm(v) for v in row)] += d
            if any(n < 0 for n in acc.values()):
                checker.fail(f"sink {name}: negative count after {f.name}")
            checker.counts["sink intervals checked"] += 1 if i >= checker._sinks_seen.get(
                name, 0) else 0
            out.append((end - 1, "sink", (source, cols, +acc)))
        checker._sinks_seen[name] = len(files)
    return out
