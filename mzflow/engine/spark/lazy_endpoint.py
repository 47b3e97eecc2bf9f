"""A Spark Connect endpoint found on first use, not on entry to ``using``.

A cluster's managed server costs seconds to start (a JVM), but most ticks of a warm
cluster run in process (maintain/tick/local.py) and never need it: ``mzflow tick`` of
q01 after a restart paid 4.2 s starting a server its tick did not use. So the tick
enters ``using`` with a resolver, and the first ``session()`` inside the block calls
it (starting or finding the server); a block that runs no Spark work never does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Resolved = tuple[str, object] | None  # (url, key), or None: the process's own Spark


class LazyEndpoint:
    def __init__(self, resolve: Callable[[], Resolved]) -> None:
        self._resolve = resolve
        self._lock = threading.Lock()
        self._done = False
        self._value: Resolved = None
        self.thread: int | None = None  # the thread that resolved it
        self.before: Any = None  # that thread's active Connect session before

    def get(self, active: Callable[[], Any]) -> Resolved:
        """The endpoint, resolved now if it was not (an error is raised, not kept: the
        next call tries again). ``active`` reads the thread's active Connect session,
        which the block restores on exit."""
        with self._lock:
            if not self._done:
                value = self._resolve()
                if value is not None:
                    self.before, self.thread = active(), threading.get_ident()
                self._value, self._done = value, True
            return self._value

    def peek(self) -> Resolved:
        """The endpoint if resolved, else None (no Spark work ran in the block yet)."""
        return self._value if self._done else None

    def on_server(self) -> bool:
        """Whether the block counts as on a server: until it resolved, and after, if
        it resolved to one (not to the process's own Spark)."""
        return not self._done or self._value is not None
