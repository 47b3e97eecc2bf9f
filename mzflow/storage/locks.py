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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def index_lock(warehouse: Path, index_id: str) -> Path:
    return warehouse / "_locks" / f"{index_id}.lock"


@contextmanager
def exclusive(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold ``path``'s lock for the block; yields False (not held) when ``wait`` is
    off and another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
