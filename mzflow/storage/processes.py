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


def started_ms(pid: int) -> int | None:
    """When ``pid`` started, in ms since the epoch, to within about a second (the boot
    time /proc gives is in whole seconds); None when it is gone. A record of a pid made
    before that process started is about an earlier process: pids are reused."""
    try:
        after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(after_name[19])  # field 22, starttime: clock ticks after boot
        boot = next(int(line.split()[1]) for line in
                    Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return int((boot + ticks / os.sysconf("SC_CLK_TCK")) * 1000)


def running(module: str) -> list[tuple[int, list[str], Path]]:
    """(pid, command line, working directory) of each process whose command line runs
    ``module`` (``python -m <module> …``) and that this user may read."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            words = [a.decode(errors="replace")
                     for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            if module in words:
                out.append((int(proc.name), words, (proc / "cwd").resolve()))
        except OSError:  # gone meanwhile, or another user's
            continue
    return out
