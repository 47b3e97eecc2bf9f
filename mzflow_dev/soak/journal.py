"""Append-only JSONL journals, one per worker, fsynced per record.

A worker writes ``start`` before it runs an operation and ``done`` (or ``error``) after;
a ``kill -9`` can land between the two, so the checker treats a start without an end as
"uncertain": it may or may not have committed, but never partly or twice. The fsync
makes a record written before a kill survive it (the page cache would too, but not a
machine crash, and the soak should not depend on which one it gets).
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Journal:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, **record: Any) -> None:
        record.setdefault("t", time.time())
        record.setdefault("pid", os.getpid())
        line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
        for _ in range(600):
            try:
                # One write(2) per record: O_APPEND keeps it whole.
                os.write(self._fd, line.encode())
                os.fsync(self._fd)
                return
            except OSError as e:
                # The disk-full fault applies to the worker's own files too; the journal
                # is the harness's memory, as if on another disk: wait for the space.
                if e.errno not in (errno.EFBIG, errno.ENOSPC):
                    raise
                time.sleep(0.1)
        raise OSError(errno.ENOSPC, f"journal {self.path}: no space for a minute")

    def close(self) -> None:
        os.close(self._fd)


def records(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete record; a last line torn by a kill (no newline) is skipped."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        data = f.read()
    for line in data.split(b"\n")[:-1]:
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # torn by a kill mid-write (never seen: one write(2) per record)
