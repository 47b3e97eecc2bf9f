"""The process's Spark, as one object: ``SparkRuntime`` starts the JVM on first use,
connects to a cluster's Spark Connect server inside ``using``, and forgets a JVM that
died so that the next statement starts another.

A process has one runtime (:func:`process`); the module functions of the package
delegate to it. Everything about Spark that lives as long as the process is its
state, so a test can run against a runtime of its own (monkeypatch ``_PROCESS``).

Where Spark starts and with how much heap is the configuration's
(``config.SparkSettings``): a connection hands its settings over with
:meth:`SparkRuntime.configure`; a process that opened none (a test, a benchmark)
starts with the process's configuration (``config.spark_settings``). The first start
decides: the JVM stays where it started for the life of the process.
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mzflow import config
from mzflow.engine.spark import closing, tags
from mzflow.errors import SparkFailure

if TYPE_CHECKING:
    from mzflow.engine.spark.failures import Memory

_LOG4J = Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties"

# What every mzflow session needs, whichever way Spark is reached.
_SHUFFLE = "spark.sql.shuffle.partitions"
_SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.ansi.enabled": "true",
    # Spark substitutes ${…} in a query's text before parsing it, string literals
    # included: SELECT '${env:HOME}' answered the server's home folder (an environment
    # variable read by anyone who can send a query).
    "spark.sql.variable.substitute": "false",
}

# pyspark picks classic or Connect code for every function call (F.col, createDataFrame
# …) by this variable, which it sets for good when a Connect session is made, so that
# the two never mix in one process. A process that ticks on a cluster's server and
# reads on its own Spark does mix them, one block at a time: the variable is set inside
# ``using`` and restored after. (Not for threads running Spark work concurrently.)
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


class SparkRuntime:
    """The Spark of one process: its in-process session (started on first use), the
    sessions of the Spark Connect servers it ticks on, and what a block of Spark work
    runs against (a server, whose memory)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # session() may forget a dead JVM while holding it
        self._session: Any = None
        self._starting = False
        self._suspect: Any = None  # a session whose JVM ran out of memory and still answered
        self._started_master: str | None = None
        self._settings: config.SparkSettings | None = None  # from a connection's config
        self._jvm_log: Path | None = None
        self._names = itertools.count()
        # A cluster's ticks run on its own Spark Connect server (clusters/servers.py):
        # inside ``using(url, key)``, session() is the session connected there. Sessions
        # are kept per (url, key): a restarted server (a new key) gets a new session,
        # since the old one's server-side state died with it.
        self._remote: dict[tuple[str, object], Any] = {}
        self._endpoint: contextvars.ContextVar[tuple[str, object] | None] = (
            contextvars.ContextVar("mzflow_spark_endpoint", default=None))
        self._memory: contextvars.ContextVar[Memory | None] = contextvars.ContextVar(
            "mzflow_spark_memory", default=None)
        # How long a Spark Connect endpoint may take to answer its first calls
        # (spark_connect_timeout, from the catalog's settings: set_connect_timeout).
        self._connect_timeout = 30.0
        self._connections = 0  # open mzflow connections: the last to close closes clients
        self._exit_hook = False

    # -- configuration ------------------------------------------------------------------

    def configure(self, settings: config.SparkSettings) -> None:
        """Start with ``settings`` (a connection's configuration) when Spark starts; a
        JVM already running stays as it is."""
        self._settings = settings

    def set_connect_timeout(self, seconds: float) -> None:
        """How long a Spark Connect endpoint may take to answer (0: no limit)."""
        self._connect_timeout = seconds

    def master(self) -> str:
        """The master the process's Spark started with, or starts with."""
        if self._started_master is not None:
            return self._started_master
        return (self._settings or config.spark_settings()).master

    def driver_memory(self) -> str:
        """The driver JVM's heap: the configured size, else a quarter of the machine's
        memory between 1 and 8 GB. Spark's own default (1 GB) ran out at TPC-H SF 1 with
        10 % batches: in local mode the driver is the executor too, and ticks bring
        change rows and lookups into it as local relations."""
        given = self._settings.driver_memory if self._settings is not None else None
        return given or config.spark_settings().driver_memory or _machine_memory()

    def log_jvm_to(self, path: Path) -> None:
        """Send what the JVM prints (its start-up warnings, log4j's console) to ``path``
        instead of this process's terminal; the CLI points it into the home."""
        self._jvm_log = path

    # -- where a block's Spark work runs ---------------------------------------------------

    @contextmanager
    def using(self, url: str | None, key: object = None) -> Iterator[None]:
        """Run the block's Spark work on the Spark Connect server at ``url`` (None: the
        process's own Spark)."""
        token = self._endpoint.set((url, key) if url else None)
        before = os.environ.get(_CONNECT_MODE)
        active = _active_connect_session() if url else None
        if url:
            os.environ[_CONNECT_MODE] = "1"
        try:
            yield
        finally:
            self._endpoint.reset(token)
            if before is None:
                os.environ.pop(_CONNECT_MODE, None)
            else:
                os.environ[_CONNECT_MODE] = before
            if url:
                _make_active(active)

    def endpoint(self) -> tuple[str, object] | None:
        """The server the block's work runs on ((url, key)); None: the process's Spark."""
        return self._endpoint.get()

    def where(self) -> str:
        """The Spark that session() gives now: a server's URL, or "in-process"."""
        endpoint = self._endpoint.get()
        if endpoint is not None:
            return endpoint[0]
        master = self._started_master
        return master if master and master.startswith(("sc://", "spark://")) else "in-process"

    @contextmanager
    def memory_of(self, memory: Memory) -> Iterator[None]:
        """Whose memory the block's Spark work uses, for an out-of-memory error."""
        token = self._memory.set(memory)
        try:
            yield
        finally:
            self._memory.reset(token)

    def memory(self) -> Memory | None:
        return self._memory.get()

    def next_name(self) -> int:
        """A number no other temporary view or job group of this process has."""
        return next(self._names)

    # -- the session ------------------------------------------------------------------

    def starting(self) -> bool:
        """Whether the JVM is being started right now (several seconds)."""
        return self._starting

    def started(self) -> bool:
        return self._session is not None

    def session(self, master: str | None = None) -> Any:
        """The process's SparkSession (the first call starts the JVM, several seconds),
        or the cluster server's inside ``using``."""
        endpoint = self._endpoint.get()
        if endpoint is not None and master is None:
            connected = self._connected(*endpoint)
            tags.apply(connected)
            return connected
        with self._lock:
            if self._session is not None and self._session is self._suspect:
                self._suspect = None
                if _dying(self._session):
                    self.forget(self._session)
            if self._session is not None and _exited(self._session):
                # It died after its last statement's error was told (an out-of-memory
                # JVM may take longer to exit than translate_error waits, on a loaded
                # machine): a new one, not a refused connection (found by CI, issue 18).
                self.forget(self._session)
            if self._session is None:
                self._starting = True
                try:
                    self._session = self._start(master or self.master())
                finally:
                    self._starting = False
            session = self._session
        tags.apply(session)  # the statement's cancel (tags.py), in its thread
        return session

    def in_process(self) -> Any:
        """The in-process session the block's work runs on; None inside ``using`` (a
        server's JVM is its supervisor's) or before Spark started."""
        return None if self._endpoint.get() is not None else self._session

    def live(self, spark: Any) -> bool:
        """Whether a block's cleanup can still reach ``spark``: not if the JVM died during
        the block (translate_error forgot it), whose state went with it."""
        if spark is self._session or self._endpoint.get() is not None:
            return True
        # A sibling session (queries._interruptibly) lives as long as the JVM it shares.
        return self._session is not None and getattr(spark, "_sc", None) is getattr(
            self._session, "_sc", False)

    def suspect(self, spark: Any) -> None:
        """``spark``'s JVM ran out of memory but still answered: the next session()
        checks it again before handing it out (it may have been exiting)."""
        self._suspect = spark

    def forget(self, dead: Any) -> None:
        """Forget the in-process session ``dead`` (its JVM died or was stopped), so that
        the next session() starts a new one."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        with self._lock:
            if self._session is dead:
                self._session = None
            # pyspark keeps the dead context, its gateway and session as class state, and
            # would hand them out again.
            SparkContext._active_spark_context = None
            SparkContext._gateway = None
            SparkContext._jvm = None
            SparkSession._instantiatedSession = None
            SparkSession._activeSession = None

    def _connected(self, url: str, key: object) -> Any:
        with self._lock:
            found = self._remote.get((url, key))
            if found is None:
                # The server restarted: that session is gone with it. Closed now, not
                # left to __del__ (pyspark keeps its first session for the process's
                # life, and closes it at interpreter exit, which could hang: closing.py).
                closing.close_sessions([(k[0], self._remote.pop(k)) for k in
                                        [k for k in self._remote if k[0] == url]],
                                       budget=closing.CLOSE_WAIT)

                def setup(remote: Any) -> None:
                    if key is not None:
                        _retry_briefly(remote)
                    elif self._connect_timeout > 0:  # an external endpoint's retries too
                        remote.client.set_retry_policies(
                            [closing.bounded_retries(self._connect_timeout)])
                    for conf_key, value in _SESSION_CONF.items():
                        if key is not None and conf_key == _SHUFFLE:
                            continue  # a managed server has its SIZE's (cluster_servers.command)
                        remote.conf.set(conf_key, value)

                found = closing.connect(url, self._connect_timeout, _create_remote(url), setup)
                self._remote[(url, key)] = found
                self._close_at_exit()
            _make_active(found)
            return found

    # -- closing ----------------------------------------------------------------------------

    def opened(self) -> None:
        """An mzflow connection opened: clients stay open until the last one closes."""
        with self._lock:
            self._connections += 1

    def closed(self) -> None:
        """An mzflow connection closed; the last one closes the Spark Connect clients."""
        with self._lock:
            self._connections = max(0, self._connections - 1)
            last = self._connections == 0
        if last:
            self.close_clients()

    def close_clients(self) -> list[str]:
        """Close every Spark Connect client this process opened, in the order they were
        opened, each within a bounded wait (closing.py); the endpoints whose close was
        abandoned. The next statement that needs one connects again."""
        # Not waiting for ever on the lock either: at exit, a thread may hold it while
        # it connects (closing.connect bounds that too).
        locked = self._lock.acquire(timeout=closing.CLOSE_WAIT)
        try:
            sessions = [(url, s) for (url, _), s in list(self._remote.items())]
            self._remote.clear()
            own = self._session
            if own is not None and _is_connect(own):  # spark_master = 'sc://…'
                sessions.append((self._started_master or "sc://", own))
                self._session = None
        finally:
            if locked:
                self._lock.release()
        return closing.close_sessions(sessions)

    def _close_at_exit(self) -> None:
        """Close the clients when the interpreter exits, before it finalizes: atexit runs
        the last registered first, so the hook moves behind each new client's own (which
        would otherwise send an RPC first, to a client that is about to close)."""
        if self._exit_hook:
            atexit.unregister(self.close_clients)
        atexit.register(self.close_clients)
        self._exit_hook = True

    def _start(self, url: str) -> Any:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # One machine by default: skip the hostname lookup and its warning.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        self._started_master = url
        _quiet_query_context_loggers()
        if url.startswith("sc://"):
            # Spark Connect: the server owns the JVM and its configuration; only
            # session settings travel with the client.
            def setup(remote: Any) -> None:
                if self._connect_timeout > 0:
                    remote.client.set_retry_policies(
                        [closing.bounded_retries(self._connect_timeout)])
                for key, value in _SESSION_CONF.items():
                    remote.conf.set(key, value)

            def make() -> Any:
                found = SparkSession.builder.remote(url).getOrCreate()
                # One this process closed (close_clients) may still be a thread's active
                # session in pyspark: a new one then.
                return (SparkSession.builder.remote(url).create()
                        if found.client.is_closed else found)

            remote = closing.connect(url, self._connect_timeout, make, setup)
            self._close_at_exit()
            return remote
        os.environ.pop(_CONNECT_MODE, None)  # classic (see ``using``)
        builder = (
            SparkSession.builder.appName("mzflow")
            .master(url)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            # The status store keeps every SQL execution, job and stage up to these
            # counts (1,000 each by default) even with the UI off: in a long-lived
            # process that is memory that grows for its first thousand statements and
            # serves nobody. Jobs stay enough for counting_jobs, which reads a tick's
            # jobs right after it.
            .config("spark.sql.ui.retainedExecutions", "20")
            .config("spark.ui.retainedJobs", "200")
            .config("spark.ui.retainedStages", "200")
            # Every read hands Spark new Delta files by name, and Spark keeps each file's
            # status in a cache shared by the session, up to 250 MB by default: ~1 KB per
            # file, never read again once compaction replaced the file. A few thousand
            # files' worth still spares re-reading the statuses of a read's live files.
            .config("spark.sql.hive.filesourcePartitionFileCacheSize", str(8 * 2**20))
            # A broadcast join's hash relation stays in the block manager until the
            # ContextCleaner sees its broadcast collected, which with a heap mostly idle
            # may take a long while (a full GC every 30 minutes by default): hundreds of
            # them were seen waiting in a process that ticked for 40 minutes.
            .config("spark.cleaner.periodicGC.interval", "5min")
            .config("spark.driver.memory", self.driver_memory())
            .config("spark.driver.extraJavaOptions",
                    f"-Dlog4j2.configurationFile={_LOG4J} -Dderby.system.home=/tmp")
        )
        for key, value in _SESSION_CONF.items():
            builder = builder.config(key, value)
        interrupt = signal.getsignal(signal.SIGINT)
        try:
            with _jvm_output(self._jvm_log):
                spark = builder.getOrCreate()
        except Exception as e:
            if "JAVA_GATEWAY_EXITED" not in str(e):
                raise
            # pyspark's words say nothing of why: a full disk (the soak's), no memory
            # for the heap, a broken Java. The JVM wrote why to its log.
            where = f"; its output is in {self._jvm_log}" if self._jvm_log else ""
            raise SparkFailure(f"could not start Spark: its JVM exited as it started{where}"
                               ) from e
        if threading.current_thread() is threading.main_thread():
            # pyspark installs a Ctrl-C handler that cancels jobs over the main thread's
            # Py4J connection, which is busy with the interrupted call: the cancel fails
            # and logs a traceback. Keep the caller's handler (the shell cancels from
            # another thread).
            signal.signal(signal.SIGINT, interrupt)
        spark.sparkContext.setLogLevel("OFF")
        return spark


_PROCESS = SparkRuntime()


def process() -> SparkRuntime:
    """This process's runtime."""
    return _PROCESS


# -- the package's functions of the runtime (callers say ``spark.session()``) -----------

def configure(settings: config.SparkSettings) -> None:
    process().configure(settings)


def session(master: str | None = None) -> Any:
    return process().session(master)


def started() -> bool:
    return process().started()


def starting() -> bool:
    return process().starting()


def using(url: str | None, key: object = None) -> AbstractContextManager[None]:
    return process().using(url, key)


def where() -> str:
    return process().where()


def opened() -> None:
    process().opened()


def closed() -> None:
    process().closed()


def set_connect_timeout(seconds: float) -> None:
    process().set_connect_timeout(seconds)


def driver_memory() -> str:
    return process().driver_memory()


def log_jvm_to(path: Path) -> None:
    process().log_jvm_to(path)


# -- starting a JVM ---------------------------------------------------------------------

def _machine_memory() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // 4 // 2**30))}g"


def _dying(spark: Any, wait: float = 5.0) -> bool:
    """Whether ``spark``'s JVM, which ran out of memory, exits within ``wait`` seconds or
    no longer answers (then it is killed): the next statement's first call was refused
    when a JVM that still answered at the error exited just after (CI, test_memory)."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is None:
        return False
    try:
        proc.wait(wait)
        return True
    except Exception:  # still running (TimeoutExpired): does it answer?
        pass
    try:
        # Spark stops its context after an uncaught OutOfMemoryError and the JVM exits
        # once its shutdown hooks ran: answering a call is not enough to be usable.
        if not spark.sparkContext._jsc.sc().isStopped():
            return False
    except Exception:  # noqa: BLE001 - refused, reset, closed: it does not answer
        pass
    proc.kill()
    proc.wait(30)
    return True


def _exited(spark: Any) -> bool:
    """Whether ``spark``'s in-process JVM has exited (a poll: no wait, no call to it)."""
    try:
        proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    except Exception:  # no SparkContext (Spark Connect): no JVM of ours
        return False
    return proc is not None and proc.poll() is not None


@contextmanager
def _jvm_output(log_path: Path | None) -> Iterator[None]:
    """The JVM is a child process that inherits file descriptors 1 and 2 when it starts,
    and writes to them directly: point them at the log while it is launched."""
    if log_path is None:
        yield
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (log, *saved):
            os.close(fd)


def _quiet_query_context_loggers() -> None:
    """pyspark logs every failed query's JVM stack on these loggers; the user gets the
    same failure as an mzflow error instead.

    They must be pyspark's own logger class: it calls them with keywords
    (``errorClass=``) that a plain ``logging.Logger`` refuses with a TypeError, which
    then replaced the query's real error. ``disabled`` alone is not enough either: a
    later ``logging.config.dictConfig`` (Airflow's, in the same process) re-enables every
    existing logger it does not name, so the level keeps them quiet too."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logger = PySparkLogger.getLogger(name)
        logger.setLevel(logging.CRITICAL + 10)
        logger.propagate = False
        logger.disabled = True


def _active_connect_session() -> Any:
    """The calling thread's active Spark Connect session (pyspark's), if any."""
    from pyspark.sql.connect.session import SparkSession

    return getattr(SparkSession._active_session, "session", None)


def _make_active(remote: Any) -> None:
    """Make ``remote`` the calling thread's active Spark Connect session (None: none).

    pyspark binds the frame a ``localCheckpoint``/``checkpoint`` returns to the *active*
    session (connect/conversion.py: ``proto_to_remote_cached_dataframe`` calls
    ``SparkSession.active()``), not to the session that ran it, and the first session a
    thread (or, falling back, the process) ever created stays the active one. A process
    that ticked on one server and then on another (``mzflow tick`` over two clusters, a
    server restarted under a long-lived session) ran later plans of the checkpointed frame
    on the first session, which has no such frame ("[CONNECT_INVALID_PLAN.
    DATAFRAME_NOT_FOUND] … No DataFrame with id … is found in the session …", issue 34:
    a state-mode view's first tick), or whose server is gone. pyspark has no public
    setter: a Connect session only ever becomes active when none is."""
    from pyspark.sql.connect.session import SparkSession

    SparkSession._active_session.session = remote


def _create_remote(url: str) -> Any:
    def create() -> Any:
        from pyspark.sql import SparkSession

        _quiet_query_context_loggers()
        return SparkSession.builder.remote(url).create()

    return create


def _is_connect(session: Any) -> bool:
    """Whether ``session`` is a Spark Connect client's (which owns a grpc channel)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _retry_briefly(remote: Any) -> None:
    """A managed server (a ``key``: its start time) runs on this machine: it answers, or
    it died and the next tick starts another. The Connect client's default retries of a
    lost server wait 10 minutes; a few seconds cover a busy one."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = remote.client
    client.set_retry_policies([
        DefaultPolicy(max_retries=5, max_backoff=2000) if isinstance(p, DefaultPolicy) else p
        for p in client.get_retry_policies()])
