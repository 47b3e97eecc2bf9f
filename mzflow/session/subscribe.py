"""SUBSCRIBE: a relation's changes as ``(mz_timestamp, [mz_progressed,] mz_diff, row…)``.

It starts at ``AS OF`` (default: every committed write), emits the contents at
that time (``SNAPSHOT``, on by default), then the changes at each later time as
writes commit, oldest first, until ``UP TO`` (exclusive) or until the caller stops
iterating. With ``PROGRESS``, a row ``(t, true, NULL, NULL…)`` says that every
time before ``t`` is complete. Column order follows Materialize's
(``mz_timestamp, mz_progressed, mz_diff``).

The changes come from ``read/history.py``: a table's own change feed, or the
query evaluated at each time one of its inputs changed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog import frontiers, names, normalize, sinks
from mzflow.catalog.exprtypes import display_name
from mzflow.catalog.model import RELATION_KINDS, Snapshot
from mzflow.catalog.store import Store, now_ms
from mzflow.errors import InvalidOption, WrongObjectType
from mzflow.read import history, holds, reads
from mzflow.sql import ast
from mzflow.storage.delta import DIFF
from mzflow.storage.types import python_values

OPTIONS = ("SNAPSHOT", "PROGRESS")
# The types of the columns SUBSCRIBE puts before the relation's, as Materialize's.
HEAD_TYPES = {"mz_timestamp": "numeric", "mz_progressed": "boolean", "mz_diff": "bigint"}


@dataclass
class Subscription:
    """Iterate for rows; ``columns`` names them. Each ``next`` may wait for writes."""

    store: Store
    warehouse: Path
    source: history.Source
    as_of: int
    up_to: int | None
    snapshot: bool
    progress: bool
    poll_seconds: float = 0.5
    lease_seconds: float = 60.0  # of its read hold (read/holds.py)
    columns: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    # Set from another thread (a cursor's CLOSE, a cancelled COPY (SUBSCRIBE …) TO
    # STDOUT): the waiting iterator ends at once instead of at the next write.
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.columns, self.types = columns(self.source, self.progress)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if self.up_to is not None and self.up_to <= self.as_of:
            return
        # Held while iterating: compaction keeps what the next rows are read from. Taken
        # here, not at subscribe(): a subscription never iterated holds nothing.
        with holds.acquire(self.store, self.source.inputs, self.as_of, "SUBSCRIBE",
                           self.lease_seconds) as hold:
            yield from self._stream(hold)

    def _stream(self, hold: holds.ReadHold) -> Iterator[tuple[Any, ...]]:
        snap = self.store.snapshot()
        contents = history.contents(snap, self.source, self.warehouse, self.as_of)
        if self.snapshot:
            yield from self._rows(self.as_of, contents)
        frontier = self.as_of  # every time <= frontier has been emitted
        if self.progress:
            yield self._progress(frontier + 1)
        while self.up_to is None or frontier + 1 < self.up_to:
            if self.stop.is_set():
                return
            target = self._target()
            if target <= frontier:
                if self.stop.wait(self.poll_seconds):
                    return
                continue
            if hold.lost:  # what the next changes are read from may be gone
                raise reads.InvalidTimestamp(
                    f"SUBSCRIBE lost its read hold at {frontier}: its lease ran out and a "
                    "compaction went past it", hint="raise read_hold_lease_seconds")
            snap = self.store.snapshot()
            for ts, diff in history.changes(snap, self.source, self.warehouse, frontier,
                                            target, contents):
                yield from self._rows(ts, diff)
                contents = _apply(contents, diff, self.source)
            frontier = target
            hold.advance(frontier)
            if self.progress:
                yield self._progress(frontier + 1)

    def _target(self) -> int:
        """The newest time complete now, capped below UP TO."""
        read_ts = self.store.snapshot().read_ts
        target = read_ts
        if self.progress or self.up_to is not None:
            # Times before now can be closed: later writes get later times.
            now = now_ms() - 1
            if self.up_to is not None:
                now = min(now, self.up_to - 1)
            if now > read_ts:
                self.store.advance_read_ts(now)
                target = now
        if self.up_to is not None:
            target = min(target, self.up_to - 1)
        return target

    def _rows(self, ts: int, table: pa.Table) -> Iterator[tuple[Any, ...]]:
        names = [c.name for c in self.source.columns]
        ordered = table.sort_by([(c, "ascending") for c in names]) if table.num_rows else table
        diffs = ordered.column(DIFF).to_pylist()
        values = [python_values(ordered.column(c.name).to_pylist(), c.type)
                  for c in self.source.columns]
        for i, d in enumerate(diffs):
            head: tuple[Any, ...] = (ts, False, d) if self.progress else (ts, d)
            yield head + tuple(col[i] for col in values)

    def _progress(self, ts: int) -> tuple[Any, ...]:
        return (ts, True, None) + (None,) * len(self.source.columns)


def columns(src: history.Source, progress: bool) -> tuple[list[str], list[str]]:
    """The names and types of a subscription's columns."""
    head = ["mz_timestamp"] + (["mz_progressed"] if progress else []) + ["mz_diff"]
    return (head + [c.name for c in src.columns],
            [HEAD_TYPES[h] for h in head] + [display_name(c.type) for c in src.columns])


def source_of(snap: Snapshot, stmt: ast.Subscribe) -> history.Source:
    """What ``stmt`` subscribes to, bound now (nothing read)."""
    target = stmt.this
    if isinstance(target, exp.Table):
        item = names.resolve(snap, target)
        if item.kind not in RELATION_KINDS:
            raise WrongObjectType(f"{item.qualified_name} is not a relation")
        return history.source(snap, exp.select("*").from_(normalize.of_item(item)), item)
    return history.source(snap, target)


def options_of(stmt: ast.Subscribe) -> dict[str, bool]:
    opts = {"SNAPSHOT": True, "PROGRESS": False}
    for opt in stmt.args.get("options") or []:
        if opt.name not in OPTIONS:
            raise InvalidOption(f'unexpected SUBSCRIBE option "{opt.name}"',
                                hint=f"valid options are {', '.join(OPTIONS)}")
        value = opt.args.get("value")
        opts[opt.name] = True if value is None else sinks.flag(value, opt.name)
    return opts


def subscribe(store: Store, warehouse: Path, stmt: ast.Subscribe,
              poll_seconds: float = 0.5, lease_seconds: float = 60.0) -> Subscription:
    snap = store.snapshot()
    src = source_of(snap, stmt)
    opts = options_of(stmt)
    as_of = snap.read_ts
    if stmt.args.get("as_of") is not None:
        as_of = reads.as_of_value(stmt.args["as_of"])
        if stmt.args.get("at_least"):
            as_of = max([as_of] + [frontiers.since(i, snap) for i in src.inputs])
    up_to = reads.as_of_value(stmt.args["up_to"]) if stmt.args.get("up_to") is not None \
        else None
    if up_to is not None and up_to < as_of:
        raise reads.InvalidTimestamp(f"UP TO ({up_to}) is before AS OF ({as_of})")
    _check_as_of(store, src, as_of)
    return Subscription(store, warehouse, src, as_of, up_to, opts["SNAPSHOT"],
                        opts["PROGRESS"], poll_seconds, lease_seconds)


def _check_as_of(store: Store, src: history.Source, as_of: int) -> None:
    """``AS OF`` must lie in ``[since, upper)``; a past time not yet closed is closed."""
    snap = store.snapshot()
    reads.check_time(snap, src.inputs, as_of)
    if as_of > snap.read_ts:
        now = now_ms()
        if as_of > now:
            raise reads.InvalidTimestamp(
                f"Timestamp ({as_of}) is not valid for all inputs: it is past their upper "
                f"({snap.read_ts + 1}), {as_of - now} ms in the future")
        store.advance_read_ts(as_of)


def _apply(contents: pa.Table, diff: pa.Table, src: history.Source) -> pa.Table:
    return history.consolidate(pa.concat_tables([contents, diff.cast(contents.schema)]), src)
