"""The machine's warm memory budget: every warm cluster process of this user, whatever
its home, fits in ``warm_memory_budget`` together.

A warm cluster is two long-lived processes beside a small supervisor: a Spark Connect
server (its driver heap from SIZE, plus the JVM's own overhead) and a tick service
(mzflow's runtime, plus hot arrangements up to a share of SIZE). A program that ticked
five homes' clusters and was killed left five of them for their idle minutes; each
home only saw its own. So the processes are listed in one folder per user on the
machine (the *registry*: ``$XDG_RUNTIME_DIR/mzflow/warm``, else
``~/.cache/mzflow/warm``, mode 0700), one file per supervisor, named by its pid, with
what the cluster declares it may use. A starter decides under the registry's lock,
so two starters cannot both squeeze into the last gigabytes: a cluster that does not
fit starts nothing and its ticks run on the ticking process's own Spark, as a VIRTUAL
cluster's do, with a notice (:class:`OverBudget`). The next tick asks again.

Admission counts what each cluster *declares* (its limits), not what it uses now: a
process admitted on today's small use would grow into tomorrow's swap. What each uses
now (its resident memory, from ``/proc``) is shown by ``mzflow cluster status``.

A supervisor removes its file when it stops; a file whose process is gone (killed
with SIGKILL) is ignored and removed by the next reader.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from mzflow import config
from mzflow.catalog import sizes
from mzflow.catalog.model import Cluster
from mzflow.errors import Error
from mzflow.storage import processes
from mzflow.storage.processes import process_alive, started_ms

LOCK = "lock"
# Spark sizes a driver's off-heap overhead as 10 % of its heap, at least 384 MiB
# (spark.driver.memoryOverhead); the JVM's metaspace, threads and direct buffers.
JVM_OVERHEAD_SHARE, JVM_OVERHEAD_MIN = 0.10, 384 << 20
# A tick service with mzflow's runtime imported (pyarrow, pandas, sqlglot, SQLAlchemy,
# pyspark's Connect client) and its supervisor, before any hot arrangement: measured at
# 150-300 MB and 15 MB resident (scripts/soakmem.py, the soaks' services).
SERVICE_BASE = 512 << 20


class OverBudget(Error):
    """A cluster's warm processes would not fit the machine's budget: its ticks run on
    the ticking process's own Spark instead (session/connection.py)."""

    code = "53000"  # insufficient_resources


def registry_folder(cfg: config.Config) -> Path:
    if cfg.warm_registry is not None:
        return cfg.warm_registry
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "mzflow" / "warm"
    return Path.home() / ".cache" / "mzflow" / "warm"


def machine_memory() -> int:
    """The machine's memory in bytes (MemTotal), or 0 when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def budget_bytes(tuning: config.Tuning) -> int:
    """``warm_memory_budget`` in bytes. 'auto' is half the machine: the other half is
    for the ticking processes' own Spark (a quarter of the machine by default) and
    for everything else that runs there."""
    if tuning.warm_memory_budget != "auto":
        size = config.parse_size(tuning.warm_memory_budget)
        assert size is not None  # config.tuning_value checked it
        return size
    return machine_memory() // 2


def describe_budget(tuning: config.Tuning) -> str:
    """The budget as SHOW prints it: '8GB', or 'auto (11GB: half of 23GB)'."""
    if tuning.warm_memory_budget != "auto":
        return tuning.warm_memory_budget
    return (f"auto ({human(budget_bytes(tuning))}: half of this machine's "
            f"{human(machine_memory())})")


def human(n: int) -> str:
    return f"{n / (1 << 30):.1f}GB" if n >= 1 << 30 else f"{n >> 20}MB"


@dataclass(frozen=True)
class Declared:
    """What one warm cluster may use: its server's heap and the JVM's overhead, its
    tick service with its hot arrangements (``hot_memory_share`` of SIZE)."""

    heap: int
    overhead: int
    service: int
    hot: int

    @property
    def total(self) -> int:
        return self.heap + self.overhead + self.service + self.hot

    def describe(self) -> str:
        hot = f" with {human(self.hot)} of hot arrangements" if self.hot else ""
        return (f"{human(self.total)}: a Spark server with a {human(self.heap)} heap, and "
                f"a tick service{hot}")


def declared(cluster: Cluster, tuning: config.Tuning) -> Declared:
    size = sizes.of_cluster(cluster.virtual, cluster.size)
    heap = size.memory_bytes
    hot = int(tuning.hot_memory_share * heap) if tuning.hot_arrangements else 0
    return Declared(heap, max(JVM_OVERHEAD_MIN, int(JVM_OVERHEAD_SHARE * heap)),
                    SERVICE_BASE, hot)


@dataclass(frozen=True)
class Entry:
    """One warm cluster in the registry: its supervisor's pid and what it declared."""

    pid: int
    home: str
    cluster: str
    cluster_id: int
    declared: int
    started_at: int  # ms

    @property
    def folder(self) -> Path:
        return Path(self.home) / "clusters" / str(self.cluster_id)


def _prepare(registry: Path) -> None:
    registry.mkdir(parents=True, exist_ok=True, mode=0o700)
    if registry.stat().st_mode & 0o077:  # made by someone else's umask, or by hand
        registry.chmod(0o700)


def live(registry: Path, alive: Callable[[int], bool] = process_alive) -> list[Entry]:
    """The registry's warm clusters whose supervisor still runs; the files of those
    that are gone are removed."""
    out = []
    for path in sorted(registry.glob("*.json")):
        try:
            entry = Entry(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue  # being written (written whole by rename, so rarely), or not ours
        if alive(entry.pid) and not _reused(entry):
            out.append(entry)
        else:
            path.unlink(missing_ok=True)
    return out


# Slack for comparing a process's start with its entry's: /proc's boot time is in whole
# seconds, and the entry is written after its supervisor started.
_START_SLACK_MS = 5_000


def _reused(entry: Entry) -> bool:
    """The entry's pid now names a process that started after the entry was written:
    its supervisor is gone and the pid went to another process (which must not keep
    a cluster out of the budget until it ends)."""
    started = started_ms(entry.pid)
    return started is not None and started > entry.started_at + _START_SLACK_MS


def entry_path(registry: Path, pid: int) -> Path:
    return registry / f"{pid}.json"


@contextmanager
def _locked(registry: Path) -> Iterator[None]:
    _prepare(registry)
    with open(registry / LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Ask:
    """What a starter needs to be admitted: where the registry is, and the budget and
    declaration its installation's tuning gives."""

    registry: Path
    tuning: config.Tuning


@contextmanager
def admit(ask: Ask, home: Path, cluster: Cluster,
          alive: Callable[[int], bool] = process_alive) -> Iterator[Callable[[int], Path]]:
    """Admit ``cluster``'s warm processes, or raise :class:`OverBudget`. Inside the
    block the caller starts its supervisor and registers its pid with the function
    given (the registry stays locked until then, so no other starter counts without
    it); the path it returns is the file the supervisor removes when it stops."""
    need = declared(cluster, ask.tuning)
    budget = budget_bytes(ask.tuning)
    with _locked(ask.registry):
        running = live(ask.registry, alive)
        used = sum(e.declared for e in running)
        if used + need.total > budget:
            raise OverBudget(notice(cluster.name, need, budget, ask.tuning, running))

        def register(pid: int) -> Path:
            path = entry_path(ask.registry, pid)
            record = Entry(pid, str(home), cluster.name, cluster.id, need.total,
                           int(time.time() * 1000))
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(asdict(record), f)
            os.replace(tmp, path)
            return path

        yield register


def notice(cluster: str, need: Declared, budget: int, tuning: config.Tuning,
           running: list[Entry]) -> str:
    """Why ``cluster`` ticks on the shared Spark: the budget, and what uses it."""
    used = sum(e.declared for e in running)
    users = ", ".join(f"{e.cluster} in {e.home} ({human(e.declared)}{_idle_note(e)})"
                      for e in running)
    setting = ("auto: half of this machine's memory" if tuning.warm_memory_budget == "auto"
               else "ALTER SYSTEM SET")
    return (f'cluster "{cluster}" ticks on the shared Spark: its warm processes '
            f"({need.describe()}) do not fit the machine's warm_memory_budget of "
            f"{human(budget)} ({setting}), {human(used)} of which "
            f"{len(running)} warm cluster{'s' if len(running) != 1 else ''} declare"
            f"{'' if len(running) != 1 else 's'}"
            + (f": {users}" if users else "")
            + ". It starts its own once they fit (an idle one stops after "
              "cluster_idle_seconds; `mzflow --home <home> cluster stop <cluster>` "
              "stops one now)")


def idle_seconds(entry: Entry) -> float | None:
    """How long since the cluster's last tick started (None: unknown)."""
    try:
        return max(0.0, time.time() - (entry.folder / "last_used").stat().st_mtime)
    except OSError:
        return None


def _idle_note(entry: Entry) -> str:
    idle = idle_seconds(entry)
    return "" if idle is None or idle < 60 else f", idle {int(idle // 60)} min"


# -- what each uses now (mzflow cluster status) ----------------------------------------

def rss(pid: int) -> int | None:
    """The resident memory of ``pid`` in bytes (None: gone)."""
    return processes.rss_bytes(pid)


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            out.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def tree_rss(pid: int, children: dict[int, list[int]]) -> int | None:
    """The resident memory of ``pid`` and its descendants (spark-submit's JVM)."""
    own = rss(pid)
    if own is None:
        return None
    return own + sum(tree_rss(c, children) or 0 for c in children.get(pid, []))


@dataclass(frozen=True)
class Usage:
    entry: Entry
    server: int | None  # the Spark server's JVM (bytes resident), None: not running
    service: int | None  # the tick service
    supervisor: int | None
    idle_seconds: float | None


def _pid_in(path: Path, key: str) -> int | None:
    try:
        return int(json.loads(path.read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def usage(registry: Path) -> list[Usage]:
    """Every live warm cluster of the machine, with what its processes hold now."""
    children = _children() if Path("/proc").is_dir() else {}
    out = []
    for e in live(registry):
        jvm = _pid_in(e.folder / "server.json", "jvm_pid")
        service = _pid_in(e.folder / "ticks.json", "pid")
        out.append(Usage(e, None if jvm is None else tree_rss(jvm, children),
                         None if service is None else rss(service), rss(e.pid),
                         idle_seconds(e)))
    return out
