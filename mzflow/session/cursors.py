"""Cursors: ``DECLARE c CURSOR FOR <SELECT | SUBSCRIBE>``, ``FETCH``, ``CLOSE``.

A cursor lives in one transaction (``WITHOUT HOLD``, the only kind Materialize has) and
goes forward only. A SELECT cursor runs its query at its first FETCH (as part of the
transaction: at its read time) and hands the rows out ``n`` at a time. A SUBSCRIBE
cursor streams: its subscription (``session/subscribe.py``) runs in a thread that fills
a bounded queue, and ``FETCH n c WITH (TIMEOUT = '1s')`` waits up to the timeout for
the first row, then takes the rows that are ready, up to ``n`` (without a timeout it
waits for at least one row, as Materialize's FETCH does).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from mzflow.catalog.intervals import parse_interval
from mzflow.errors import Error, InvalidOption
from mzflow.session.result import Result
from mzflow.session.subscribe import Subscription
from mzflow.sql import session_ast

log = logging.getLogger("mzflow.cursors")

BUFFER_ROWS = 10_000  # a SUBSCRIBE cursor's rows read ahead of its FETCHes, at most
_WAIT_STEP = 0.2  # seconds: a FETCH that waits wakes this often (so Ctrl-C reaches it)


class InvalidCursorName(Error):
    code = "34000"  # invalid_cursor_name


class DuplicateCursor(Error):
    code = "42P03"  # duplicate_cursor


@dataclass
class SelectCursor:
    """Rows of a query, computed at the first FETCH by ``run``."""

    columns: list[str]
    types: list[str]
    run: Callable[[], Result]
    rows: list[tuple[Any, ...]] | None = None
    position: int = 0

    def fetch(self, count: int | None, timeout: float | None) -> list[tuple[Any, ...]]:
        if self.rows is None:
            result = self.run()
            self.rows, self.columns, self.types = result.rows, result.columns, result.types
        end = len(self.rows) if count is None else min(len(self.rows), self.position + count)
        out = self.rows[self.position:end]
        self.position = end
        return out

    def close(self) -> None:
        self.rows = []


_END = object()


@dataclass
class _Failed:
    error: BaseException


@dataclass
class SubscribeCursor:
    """A subscription read by FETCH; ``started`` runs once, at the first FETCH (the
    transaction's check that SUBSCRIBE is its only read)."""

    sub: Subscription
    started: Callable[[], None]
    buffer: queue.Queue[Any] = field(default_factory=lambda: queue.Queue(BUFFER_ROWS))
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    done: bool = False

    @property
    def columns(self) -> list[str]:
        return self.sub.columns

    @property
    def types(self) -> list[str]:
        return self.sub.types

    def fetch(self, count: int | None, timeout: float | None) -> list[tuple[Any, ...]]:
        if self.thread is None:
            self.started()
            self.sub.stop = self.stop
            self.thread = threading.Thread(target=self._pump, daemon=True,
                                           name="subscribe-cursor")
            self.thread.start()
        if count == 0 or self.done:
            return []
        first = self._next(None if timeout is None else time.monotonic() + timeout)
        rows = [] if first is None else [first]
        while first is not None and (count is None or len(rows) < count):
            row = self._next(time.monotonic())  # what is ready now, no more waiting
            if row is None:
                break
            rows.append(row)
        return rows

    def _next(self, deadline: float | None) -> tuple[Any, ...] | None:
        """The next row, waiting until ``deadline`` (None: until one comes)."""
        while not self.done:
            wait = _WAIT_STEP if deadline is None else max(0.0, min(
                _WAIT_STEP, deadline - time.monotonic()))
            try:
                item = self.buffer.get(timeout=wait) if wait > 0 else self.buffer.get_nowait()
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            if item is _END:
                self.done = True
            elif isinstance(item, _Failed):
                self.done = True
                raise item.error
            else:
                return item
        return None

    def _pump(self) -> None:
        rows = iter(self.sub)
        try:
            for row in rows:
                if not self._put(row):
                    return
        except BaseException as e:  # handed to the FETCH that reads it
            self._put(_Failed(e))
            return
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()  # its read hold goes with it
        self._put(_END)

    def _put(self, item: object) -> bool:
        while not self.stop.is_set():
            try:
                self.buffer.put(item, timeout=_WAIT_STEP)
                return True
            except queue.Full:
                continue
        return False

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
            if self.thread.is_alive():
                log.warning("a SUBSCRIBE cursor's reader is still stopping")


Cursor = SelectCursor | SubscribeCursor


class Cursors:
    """One transaction's open cursors, by name."""

    def __init__(self) -> None:
        self.open: dict[str, Cursor] = {}

    def declare(self, name: str, cursor: Cursor) -> Result:
        if name in self.open:
            cursor.close()
            raise DuplicateCursor(f'cursor "{name}" already exists')
        self.open[name] = cursor
        return Result(status="DECLARE CURSOR")

    def get(self, name: str) -> Cursor:
        found = self.open.get(name)
        if found is None:
            raise InvalidCursorName(f'cursor "{name}" does not exist')
        return found

    def fetch(self, stmt: session_ast.Fetch) -> Result:
        cursor = self.get(stmt.this.name)
        count_node = stmt.args.get("count")
        count = None if count_node is None else int(count_node.this)
        timeout = fetch_timeout(stmt)
        rows = cursor.fetch(count, timeout)
        return Result(list(cursor.columns), rows, status=f"FETCH {len(rows)}",
                      types=list(cursor.types))

    def close(self, stmt: session_ast.Close) -> Result:
        if stmt.this is None:
            self.close_all()
        else:
            name = stmt.this.name
            self.get(name).close()
            del self.open[name]
        return Result(status="CLOSE CURSOR")

    def close_all(self) -> None:
        for cursor in self.open.values():
            cursor.close()
        self.open.clear()


def fetch_timeout(stmt: session_ast.Fetch) -> float | None:
    """``WITH (TIMEOUT = '1s')`` in seconds; None when not given."""
    timeout = None
    for opt in stmt.args.get("options") or []:
        if opt.name != "TIMEOUT":
            raise InvalidOption(f'unexpected FETCH option "{opt.name}"',
                                hint="the only FETCH option is TIMEOUT")
        value = opt.args.get("value")
        text = value.name if isinstance(value, exp.Literal) else None
        try:
            months, days, micros = parse_interval(text or "")
        except ValueError:
            raise InvalidOption(f'invalid TIMEOUT "{text if text is not None else value}"',
                                hint="give an interval, like '1s' or '500ms'") from None
        if months or days < 0 or micros < 0:
            raise InvalidOption("TIMEOUT must be a non-negative interval shorter than a "
                                "month")
        timeout = days * 86_400 + micros / 1_000_000
    return timeout
