"""A tick's time limit (``tick_timeout``): a tick that exceeds it is cancelled and
fails naming the limit, with nothing committed, and its index's lock is free again.

A tick used to hold its index's lock (storage/locks.py) for as long as it ran: one stuck
in Spark blocked every later tick of that index for ever. Now the tick runs under a job
tag of its own (engine/spark/tags.py), and a watchdog thread cancels the tag's Spark
work at the deadline (and again every second after, for a job started meanwhile); the
tick's own thread then fails out of Spark, and its ``with`` blocks let go of the lock.
Work outside Spark cannot be interrupted from another thread: the tick checks the
deadline between its steps, and before it commits. The wait for the lock counts too,
so that a tick behind a stuck one fails after the same limit, naming it.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mzflow.errors import Error, QueryCanceled

_tags = itertools.count()


class TickTimeout(QueryCanceled):
    """A tick cancelled at its ``tick_timeout`` (PostgreSQL's statement_timeout)."""


class LockTimeout(Error):
    """A tick that waited out its ``tick_timeout`` for another tick of its index."""

    code = "55P03"  # lock_not_available


HINT = ("the index keeps its last commit, and the next tick starts from there; raise the "
        "limit with ALTER SYSTEM SET tick_timeout = <seconds> (0: no limit)")


class Limit:
    """One tick's deadline; ``seconds`` 0 is none."""

    def __init__(self, name: str, seconds: float):
        self.name, self.seconds = name, seconds
        self.deadline = time.monotonic() + seconds if seconds > 0 else None
        self.expired = False

    def remaining(self) -> float | None:
        """Seconds left (None: no limit)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        """Raise the limit's error if the deadline passed (between a tick's steps)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.expired = True
        if self.expired:
            raise self.error()

    def error(self) -> TickTimeout:
        return TickTimeout(f"canceling tick of {self.name} due to tick_timeout "
                           f"({self.seconds:g} s)", hint=HINT)

    def lock_error(self) -> LockTimeout:
        return LockTimeout(f"could not tick {self.name}: another tick or compaction of it "
                           f"held its lock for all of tick_timeout ({self.seconds:g} s)",
                           hint="if that tick is stuck, its own limit cancels it; "
                                + HINT.split("; ", 1)[1])

    @contextmanager
    def running(self) -> Iterator[None]:
        """Run the block's Spark work under a tag that a watchdog cancels at the
        deadline; whatever the block raises after that is this limit's error."""
        if self.deadline is None:
            yield
            return
        from mzflow.engine.spark import tags

        tag = f"mzflow-tick-{os.getpid()}-{next(_tags)}"
        stop = threading.Event()

        def watch() -> None:
            remaining = self.remaining()
            if stop.wait(remaining if remaining is not None else 0):
                return
            self.expired = True
            while True:  # again each second: a job may have started after the first
                tags.interrupt(tag)
                if stop.wait(1.0):
                    return

        watchdog = threading.Thread(target=watch, name="mzflow-tick-limit", daemon=True)
        watchdog.start()
        try:
            with tags.tagged(tag):
                yield
        except TickTimeout:
            raise
        except BaseException as e:
            if self.expired:
                raise self.error() from e
            raise
        finally:
            stop.set()  # a block that ended, committed or not, is not cancelled after
