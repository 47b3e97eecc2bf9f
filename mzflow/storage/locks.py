"""Per-shard file locks between processes (``flock``: the kernel drops a lock with its
process, so a ``kill -9`` never leaves one held).

A tick of an index and the compaction of that index's shards both read the shard's
newest commit and then commit on top of it; Delta's optimistic check does not catch
every interleaving (an optimize commit repeating an older tick's time over a newer
tick's rows), so they take the index's lock. Found by the soak (issue 19): compaction
failed with delta-rs's raw CommitFailedError when a tick committed under it.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def index_lock(warehouse: Path, index_id: str) -> Path:
    return warehouse / "_locks" / f"{index_id}.lock"


@contextmanager
def exclusive(path: Path, *, wait: bool = True, timeout: float | None = None
              ) -> Iterator[bool]:
    """Hold ``path``'s lock for the block; yields False (not held) when ``wait`` is
    off and another process holds it, or when it was not free within ``timeout``
    seconds (None: wait as long as it takes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        if not _take(f, wait, timeout):
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _take(f: IO[str], wait: bool, timeout: float | None) -> bool:
    if wait and timeout is None:
        fcntl.flock(f, fcntl.LOCK_EX)
        return True
    # flock has no timeout: try, and sleep a little longer each time (a holder that
    # lets go is seen within half a second).
    deadline = time.monotonic() + (timeout if wait and timeout is not None else 0.0)
    pause = 0.01
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(0.5, pause * 2)
