"""Whether a process is alive, and its resident memory: the standard library only, so
that callers that must start fast (the CLI handing a tick to a cluster's tick service)
can ask too. The one reader of /proc for mzflow, its soak and its benchmarks."""

from __future__ import annotations

import os
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Running, not a zombie: a process whose parent has exited may wait unreaped for a
    while when nothing reaps orphans (containers), and it holds nothing any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def rss_bytes(pid: int | str = "self") -> int | None:
    """The resident memory of ``pid`` (or this process) in bytes; None when it is gone,
    0 for a zombie (it has no VmRSS line)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return 0
