"""A one-line status on the terminal while something slow runs.

After about a second (at once while Spark starts) a thread redraws
``⋯ <what> 3.2 s`` in place on stderr, and the line is cleared before the
result prints. Nothing is drawn unless stderr is a terminal, so piped output
and logs never see it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

DELAY = 1.0  # seconds before a statement's status appears
REDRAW = 0.2


class Status:
    def __init__(self) -> None:
        self.what = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False
        self._lock = threading.Lock()  # the line is drawn or cleared by one side at a time
        # A copy of the terminal's descriptor: Spark's start-up points fd 2 at a log
        # file for a while, and the status must still reach the screen then.
        self._fd = os.dup(2) if sys.stderr.isatty() else None

    @contextmanager
    def running(self, what: str) -> Iterator[Status]:
        """Show ``what`` with its elapsed time until the block ends (however it ends)."""
        self.what = what
        if self._fd is None:
            yield self
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._draw, args=(time.monotonic(),),
                                        daemon=True)
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self._clear()

    def print(self, line: str) -> None:
        """Print a line of output above the status (``mzflow tick``'s reports)."""
        with self._lock:
            self._clear()
            print(line, flush=True)

    def _clear(self) -> None:
        if self._drawn:
            assert self._fd is not None
            os.write(self._fd, b"\r\x1b[K")
            self._drawn = False

    def _draw(self, start: float) -> None:
        from mzflow.engine import spark

        while not self._stop.wait(REDRAW):
            elapsed = time.monotonic() - start
            what = "starting Spark" if spark.starting() else self.what
            if elapsed < DELAY and not spark.starting():
                continue
            assert self._fd is not None
            line = f"⋯ {what} {elapsed:.1f} s"
            width = os.get_terminal_size(self._fd).columns - 1
            if len(line) > width:  # a wrapped line cannot be redrawn in place
                line = f"⋯ {what[:max(width - 12, 0)]}… {elapsed:.1f} s"
            with self._lock:
                os.write(self._fd, f"\r\x1b[K{line}".encode())
                self._drawn = True
