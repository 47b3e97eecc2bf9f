"""Sink runs: export a relation's changes, one schedule interval at a time.

A sink starts at its creation time ``c`` (its as-of). Its schedule cuts time into
intervals ``[start, end)``; the run for one interval exports the changes at times
``start <= t < end`` (after ``c``), and the first interval also carries the
snapshot at ``c`` when ``SNAPSHOT`` is on (the default), ahead of the changes.

Exactly once: an interval's output is committed in one atomic step that is also
its progress record. For files that step is the rename to the interval's final
name (``<sink>-<start>-<end>.<ext>``, UTC); for Delta it is the commit carrying
the idempotency key ``(sink-<id>, end)``. A run first catches up every earlier
interval not yet exported, in order. Rows are sorted, so a rerun of an interval
rewrites the same bytes.

Envelopes (column layouts follow Materialize's SUBSCRIBE envelopes):
- APPEND: ``mz_timestamp, mz_diff, <columns>``: every change;
- UPSERT: ``mz_timestamp, mz_state ('upsert' | 'delete'), <columns>``: the latest
  row per KEY at the interval's end; a deleted key is a tombstone (its value
  columns NULL). A Delta upsert sink merges into the table instead;
- DEBEZIUM: ``mz_timestamp, mz_state ('insert' | 'update' | 'delete'), [KEY
  columns,] before_<c>…, after_<c>…``: one record per change, a deletion and an
  insertion of one KEY at one time paired into an update.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.catalog import names, schedules, sinks
from mzflow.catalog.model import SINK, Snapshot
from mzflow.catalog.sinks import SinkSpec
from mzflow.catalog.store import Store, now_ms
from mzflow.errors import Error, WrongObjectType
from mzflow.read import history
from mzflow.sinks import files as exports
from mzflow.storage.delta import DIFF, SinkTable

log = logging.getLogger("mzflow.sink")

TIME, DIFF_OUT, STATE = "mz_timestamp", "mz_diff", "mz_state"
Interval = tuple[dt.datetime, dt.datetime]


class SinkError(Error):
    code = "XX000"


@dataclass(frozen=True)
class Exported:
    sink: str
    start: dt.datetime
    end: dt.datetime
    target: str
    rows: int  # records written
    changes: int  # (time, diff, row) updates they came from
    seconds: float
    skipped: bool = False  # already exported (Delta: committed) before this run

    def line(self) -> str:
        span = f"{self.start.isoformat()} .. {self.end.isoformat()}"
        if self.skipped:
            return f"{self.sink} [{span}]: already exported to {self.target}"
        rate = self.changes / self.seconds if self.seconds > 0 else 0.0
        return (f"{self.sink} [{span}]: {self.rows} records from {self.changes} changes "
                f"-> {self.target} in {self.seconds:.2f} s ({rate:,.0f} changes/s)")


def _spec(snap: Snapshot, name: str) -> SinkSpec:
    item = names.resolve(snap, name)
    if item.kind != SINK:
        raise WrongObjectType(f"{item.qualified_name} is not a sink")
    return sinks.spec(item)


def _intervals(spec: SinkSpec) -> Iterator[Interval]:
    """The sink's schedule intervals, from the one holding its start time on."""
    first = schedules.containing(spec.schedule, spec.timezone, spec.start_ts)
    return schedules.following(spec.schedule, spec.timezone, first[0])


def run(store: Store, warehouse: Path, name: str, interval: Interval | None = None,
        on_progress: Callable[[Exported], None] | None = None) -> list[Exported]:
    """Export every interval due, through ``interval`` (default: the last one that has
    ended), in order. An interval named explicitly is exported again even if it was
    (files: the same bytes; Delta: skipped, its commit already holds it)."""
    spec = _spec(store.snapshot(), name)
    out = _Output(spec)
    out.clean()
    first = schedules.containing(spec.schedule, spec.timezone, spec.start_ts)
    now = now_ms()
    if interval is not None:
        if not schedules.is_interval(spec.schedule, spec.timezone, *interval):
            raise SinkError(
                f"{interval[0].isoformat()} .. {interval[1].isoformat()} is not an interval "
                f"of sink {spec.name}'s schedule '{spec.schedule}' ({spec.timezone})")
        if schedules.to_ms(interval[1]) <= schedules.to_ms(first[0]):
            raise SinkError(f"sink {spec.name} starts at "
                            f"{schedules.from_ms(spec.start_ts).isoformat()}, after that "
                            "interval")
    done: list[Exported] = []
    for start, end in _intervals(spec):
        end_ms = schedules.to_ms(end)
        if interval is None and end_ms > now:
            break
        explicit = interval is not None and end_ms == schedules.to_ms(interval[1])
        if out.exported(start, end) and not (explicit and out.rewritable):
            result = Exported(spec.name, start, end, out.target(start, end), 0, 0, 0.0, True)
        else:
            result = _export(store, warehouse, spec, out, (start, end))
        done.append(result)
        log.info("sink %s", result.line())
        if on_progress is not None:
            on_progress(result)
        if explicit:
            break
    return done


def intervals_due(snap: Snapshot, name: str, until_ms: int | None = None) -> list[Interval]:
    """The sink's intervals that have ended and are not exported yet."""
    spec = _spec(snap, name)
    out = _Output(spec)
    until_ms = now_ms() if until_ms is None else until_ms
    due: list[Interval] = []
    for start, end in _intervals(spec):
        if schedules.to_ms(end) > until_ms:
            return due
        if not out.exported(start, end):
            due.append((start, end))
    return due


def holds(snap: Snapshot) -> dict[str, int]:
    """Read holds: table id → the oldest time a sink still has to export from.
    Compaction keeps history from there on, so a sink that lags (a paused DAG, a
    failing target) can still catch up."""
    out: dict[str, int] = {}
    now = now_ms()
    for spec in sinks.specs(snap):
        item = snap.item(spec.source_id)
        src = history.source(snap, exp.select("*").from_(exp.table_(item.name, quoted=True)), item)
        written = _Output(spec)
        need = spec.start_ts
        for start, end in _intervals(spec):
            need = max(schedules.to_ms(start) - 1, spec.start_ts)
            if schedules.to_ms(start) > now or not written.exported(start, end):
                break
        for table in src.inputs:
            out[table.id] = min(out.get(table.id, need), need)
    return out


def _export(store: Store, warehouse: Path, spec: SinkSpec, out: _Output,
            span: Interval) -> Exported:
    started = time.perf_counter()
    start_ms, end_ms = schedules.to_ms(span[0]), schedules.to_ms(span[1])
    through = end_ms - 1
    if through > now_ms():
        raise SinkError(f"sink {spec.name}: interval ending {span[1].isoformat()} has not "
                        "ended yet")
    # Close every time before the interval's end: later writes get later times.
    snap = store.snapshot()
    if snap.read_ts < through:
        store.advance_read_ts(through)
        snap = store.snapshot()
    source_item = snap.item(spec.source_id)
    query = exp.select("*").from_(exp.table_(source_item.name, quoted=True))
    src = history.source(snap, query, source_item)
    after = max(start_ms - 1, spec.start_ts)
    history.check_available(snap, src, after)
    parts: list[pa.Table] = []
    previous = None
    if spec.snapshot and start_ms <= spec.start_ts < end_ms:
        previous = history.contents(snap, src, warehouse, spec.start_ts)
        parts.append(_stamp(previous, spec.start_ts))
    for ts, rows in history.changes(snap, src, warehouse, after, through, previous):
        parts.append(_stamp(rows, ts))
    updates = _updates(parts, src)
    records = _envelope(spec, updates, src)
    target = out.write(records, span)
    return Exported(spec.name, span[0], span[1], target, records.num_rows, updates.num_rows,
                    time.perf_counter() - started)


# -- updates and envelopes -------------------------------------------------------------


def _stamp(rows: pa.Table, ts: int) -> pa.Table:
    return rows.add_column(0, TIME, pa.array([ts] * rows.num_rows, pa.int64()))


def _updates(parts: list[pa.Table], src: history.Source) -> pa.Table:
    """``mz_timestamp, <columns>, _mz_diff``, sorted by time, then row, then diff."""
    schema = src.schema.insert(0, pa.field(TIME, pa.int64())).append(
        pa.field(DIFF, pa.int64()))
    table = pa.concat_tables([p.cast(schema) for p in parts]) if parts else (
        schema.empty_table())
    if table.num_rows == 0:
        return table
    return table.take(pc.sort_indices(table, sort_keys=_ascending(table.column_names)))


def _ascending(columns: list[str]) -> list[tuple[str, str, str]]:
    return [(c, "ascending", "at_start") for c in columns]


def _envelope(spec: SinkSpec, updates: pa.Table, src: history.Source) -> pa.Table:
    cols = [c.name for c in src.columns]
    if spec.envelope == "APPEND":
        return updates.select([TIME, DIFF, *cols]).rename_columns([TIME, DIFF_OUT, *cols])
    if spec.envelope == "UPSERT":
        return _upsert(spec, updates, cols)
    return _debezium(spec, updates, cols)


def _key_of(row: dict[str, Any], key: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(row[k] for k in key)


def _upsert(spec: SinkSpec, updates: pa.Table, cols: list[str]) -> pa.Table:
    """The latest row of each KEY changed in the interval, or a tombstone."""
    net: dict[tuple[Any, ...], dict[tuple[Any, ...], int]] = {}
    last: dict[tuple[Any, ...], int] = {}
    for row in updates.to_pylist():
        k = _key_of(row, spec.key)
        values = tuple(row[c] for c in cols)
        per_key = net.setdefault(k, {})
        per_key[values] = per_key.get(values, 0) + row[DIFF]
        last[k] = row[TIME]
    out: list[dict[str, Any]] = []
    for k, rows in net.items():
        present = [(v, n) for v, n in rows.items() if n > 0]
        if not present and all(n == 0 for n in rows.values()):
            continue  # the key came back to where it was: nothing to say
        if len(present) > 1 or any(n > 1 for _, n in present):
            raise SinkError(f"sink {spec.name}: upsert key is not unique: "
                            f"({', '.join(map(repr, k))}) has more than one row",
                            hint="choose KEY columns that identify one row")
        if present:
            values = present[0][0]
            out.append({TIME: last[k], STATE: "upsert", **dict(zip(cols, values, strict=True))})
        else:
            out.append({TIME: last[k], STATE: "delete",
                        **{c: (k[spec.key.index(c)] if c in spec.key else None)
                           for c in cols}})
    schema = pa.schema([pa.field(TIME, pa.int64()), pa.field(STATE, pa.string())]
                       + [updates.schema.field(c) for c in cols])
    table = pa.Table.from_pylist(out, schema=schema)
    if not table.num_rows:
        return table
    return table.take(pc.sort_indices(table, sort_keys=_ascending([*spec.key, TIME])))


def _debezium(spec: SinkSpec, updates: pa.Table, cols: list[str]) -> pa.Table:
    values = [c for c in cols if c not in spec.key]
    shown = values if spec.key else cols
    out: list[dict[str, Any]] = []

    def record(ts: int, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        state = "update" if before and after else ("insert" if after else "delete")
        rec: dict[str, Any] = {TIME: ts, STATE: state}
        either = after or before or {}
        rec.update({k: either[k] for k in spec.key})
        rec.update({f"before_{c}": (before or {}).get(c) for c in shown})
        rec.update({f"after_{c}": (after or {}).get(c) for c in shown})
        out.append(rec)

    for ts, rows in _by_time(updates):
        if not spec.key:
            for row in rows:
                for _ in range(abs(row[DIFF])):
                    record(ts, None if row[DIFF] > 0 else row, row if row[DIFF] > 0 else None)
            continue
        per_key: dict[tuple[Any, ...], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        for row in rows:
            minus, plus = per_key.setdefault(_key_of(row, spec.key), ([], []))
            (plus if row[DIFF] > 0 else minus).extend([row] * abs(row[DIFF]))
        for k, (minus, plus) in per_key.items():
            if len(minus) > 1 or len(plus) > 1:
                raise SinkError(f"sink {spec.name}: debezium key is not unique: "
                                f"({', '.join(map(repr, k))}) changed more than one row at "
                                f"{ts}", hint="choose KEY columns that identify one row")
            record(ts, minus[0] if minus else None, plus[0] if plus else None)
    fields = {f.name: f for f in updates.schema}
    schema = pa.schema(
        [pa.field(TIME, pa.int64()), pa.field(STATE, pa.string())]
        + [fields[k] for k in spec.key]
        + [fields[c].with_name(f"before_{c}") for c in shown]
        + [fields[c].with_name(f"after_{c}") for c in shown])
    return pa.Table.from_pylist(out, schema=schema)


def _by_time(updates: pa.Table) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    rows = updates.to_pylist()
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][TIME] == rows[i][TIME]:
            j += 1
        yield rows[i][TIME], rows[i:j]
        i = j


# -- where an interval goes ------------------------------------------------------------


class _Output:
    def __init__(self, spec: SinkSpec):
        self.spec = spec
        self.delta = SinkTable(spec.path, f"sink-{spec.id}") if spec.format == "DELTA" else None
        self.rewritable = self.delta is None
        self._done_through: int | None = None

    def target(self, start: dt.datetime, end: dt.datetime) -> str:
        if self.delta is not None:
            return f"{self.spec.path} (Delta, commit for {schedules.label(end)})"
        return str(self._file(start, end))

    def _file(self, start: dt.datetime, end: dt.datetime) -> Path:
        ext = sinks.EXTENSIONS[self.spec.format]
        return Path(self.spec.path) / (f"{self.spec.name}-{schedules.label(start)}-"
                                       f"{schedules.label(end)}.{ext}")

    def clean(self) -> None:
        if self.delta is None:
            for path in exports.remove_stale(Path(self.spec.path), self.spec.name + "-"):
                log.info("removed %s, left by a run that did not finish", path)

    def exported(self, start: dt.datetime, end: dt.datetime) -> bool:
        if self.delta is not None:
            if self._done_through is None:
                self._done_through = self.delta.done_through()
            return self._done_through is not None and self._done_through >= (
                schedules.to_ms(end))
        return self._file(start, end).is_file()

    def write(self, records: pa.Table, span: Interval) -> str:
        if self.delta is None:
            final = self._file(*span)
            exports.write_file(records, final, self.spec.format)
            return str(final)
        end_ms = schedules.to_ms(span[1])
        try:
            if self.spec.envelope == "UPSERT":
                self.delta.upsert(records, list(self.spec.key), STATE, end_ms)
            else:
                self.delta.append(records, end_ms)
        except OSError as e:
            raise exports.ExportError(f'cannot write "{self.spec.path}": {e}') from None
        except Exception as e:
            raise exports.ExportError(f'cannot write the Delta table "{self.spec.path}": '
                                      f"{str(e).splitlines()[0]}") from None
        self._done_through = end_ms
        return self.target(*span)
