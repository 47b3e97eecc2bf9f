"""Whether a process is alive: the standard library only, so that callers that must
start fast (the CLI handing a tick to a cluster's tick service) can ask too."""

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
