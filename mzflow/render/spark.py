"""Run bound queries on Spark: one session per process, started on first use.

Each relation a query reads is a Delta version handed over as its exact file
list plus the schema the query may see; Spark reads those Parquet files
directly (the delta-spark jars are not available, see DESIGN.md §3), so files
written before an ADD COLUMN read the new column as NULL. sqlglot transpiles
the query to Spark SQL.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import itertools
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlglot import exp

if TYPE_CHECKING:
    import pyarrow as pa

from mzflow.catalog.exprtypes import OPERANDS, sqlglot_scale
from mzflow.errors import Error, OutOfMemory, SparkFailure, UnknownFunction, Unsupported
from mzflow.render import series
from mzflow.render.aggregates import array_aggs
from mzflow.storage.types import parse_type, python_values

_LOG4J = Path(__file__).resolve().parents[1] / "conf" / "log4j2.properties"
_lock = threading.RLock()  # session() may forget a dead JVM (_forget) while holding it
_session: Any = None
_starting = False
_jvm_log: Path | None = None
_names = itertools.count()


class EvaluationError(Error):
    """A row whose evaluation failed (division by zero, a bad cast), as Materialize says it."""

    code = "22000"  # data_exception


@dataclass(frozen=True)
class Relation:
    """What Spark reads for one table reference."""

    files: tuple[str, ...]
    schema_ddl: str  # every column in the files' current schema
    columns: tuple[str, ...]  # what the query may see, in order (a version's columns)
    count_column: str | None = None  # consolidated contents: repeat each row this often
    frame: Any = None  # a ready DataFrame (a projection's rows): files and schema unused


# What every mzflow session needs, whichever way Spark is reached.
_SHUFFLE = "spark.sql.shuffle.partitions"
_SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.ansi.enabled": "true",
}


def log_jvm_to(path: Path) -> None:
    """Send what the JVM prints (its start-up warnings, log4j's console) to ``path``
    instead of this process's terminal; the CLI points it into the home."""
    global _jvm_log
    _jvm_log = path


@contextmanager
def _jvm_output() -> Iterator[None]:
    """The JVM is a child process that inherits file descriptors 1 and 2 when it starts,
    and writes to them directly: point them at the log while it is launched."""
    if _jvm_log is None:
        yield
        return
    _jvm_log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log = os.open(_jvm_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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


def starting() -> bool:
    """Whether the JVM is being started right now (several seconds)."""
    return _starting


# A cluster's ticks run on its own Spark Connect server (runtime/cluster_servers.py):
# inside ``using(url, key)``, session() is the session connected there. Sessions are
# kept per (url, key): a restarted server (a new key) gets a new session, since the
# old one's server-side state died with it.
_remote: dict[tuple[str, object], Any] = {}
_master: list[str | None] = [None]  # the process session's master, once started
_using: contextvars.ContextVar[tuple[str, object] | None] = contextvars.ContextVar(
    "mzflow_spark_endpoint", default=None)


# pyspark picks classic or Connect code for every function call (F.col, createDataFrame
# …) by this variable, which it sets for good when a Connect session is made, so that
# the two never mix in one process. A process that ticks on a cluster's server and
# reads on its own Spark does mix them, one block at a time: the variable is set inside
# ``using`` and restored after. (Not for threads running Spark work concurrently.)
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@contextmanager
def using(url: str | None, key: object = None) -> Iterator[None]:
    """Run the block's Spark work on the Spark Connect server at ``url`` (None: the
    process's own Spark)."""
    token = _using.set((url, key) if url else None)
    before = os.environ.get(_CONNECT_MODE)
    if url:
        os.environ[_CONNECT_MODE] = "1"
    try:
        yield
    finally:
        _using.reset(token)
        if before is None:
            os.environ.pop(_CONNECT_MODE, None)
        else:
            os.environ[_CONNECT_MODE] = before


def where() -> str:
    """The Spark that session() gives now: a server's URL, or "in-process"."""
    endpoint = _using.get()
    if endpoint is not None:
        return endpoint[0]
    master = _master[0]
    return master if master and master.startswith(("sc://", "spark://")) else "in-process"


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


def _connected(url: str, key: object) -> Any:
    with _lock:
        found = _remote.get((url, key))
        if found is None:
            for old in [k for k in _remote if k[0] == url]:
                _remote.pop(old)  # the server restarted: that session is gone
            from pyspark.sql import SparkSession

            _quiet_query_context_loggers()
            found = SparkSession.builder.remote(url).create()
            if key is not None:
                _retry_briefly(found)
            for conf_key, value in _SESSION_CONF.items():
                if key is not None and conf_key == _SHUFFLE:
                    continue  # a managed server has its SIZE's (cluster_servers.command)
                found.conf.set(conf_key, value)
            _remote[(url, key)] = found
        return found


def _retry_briefly(remote: Any) -> None:
    """A managed server (a ``key``: its start time) runs on this machine: it answers, or
    it died and the next tick starts another. The Connect client's default retries of a
    lost server wait 10 minutes; a few seconds cover a busy one."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    client = remote.client
    client.set_retry_policies([
        DefaultPolicy(max_retries=5, max_backoff=2000) if isinstance(p, DefaultPolicy) else p
        for p in client.get_retry_policies()])


def session(master: str | None = None) -> Any:
    """The process's SparkSession (the first call starts the JVM, several seconds), or
    the cluster server's inside ``using``."""
    global _session, _starting
    endpoint = _using.get()
    if endpoint is not None and master is None:
        return _connected(*endpoint)
    with _lock:
        if _session is not None and _exited(_session):
            # It died after its last statement's error was told (an out-of-memory JVM
            # may take longer to exit than translate_error waits, on a loaded machine):
            # a new one, not a refused connection (found by CI, issue 18).
            _forget(_session)
        if _session is None:
            _starting = True
            try:
                _session = _start(master)
            finally:
                _starting = False
        return _session


def _exited(spark: Any) -> bool:
    """Whether ``spark``'s in-process JVM has exited (a poll: no wait, no call to it)."""
    try:
        proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    except Exception:  # no SparkContext (Spark Connect): no JVM of ours
        return False
    return proc is not None and proc.poll() is not None


def driver_memory() -> str:
    """The driver JVM's heap: ``MZFLOW_SPARK_DRIVER_MEMORY``, else a quarter of the
    machine's memory between 1 and 8 GB. Spark's own default (1 GB) ran out at TPC-H
    SF 1 with 10 % batches: in local mode the driver is the executor too, and ticks
    bring change rows and lookups into it as local relations."""
    configured = os.environ.get("MZFLOW_SPARK_DRIVER_MEMORY")
    if configured:
        return configured
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // 4 // 2**30))}g"


def _start(master: str | None) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    # One machine by default: skip the hostname lookup and its warning.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    url = master or os.environ.get("MZFLOW_SPARK_MASTER", "local[*]")
    _master[0] = url
    _quiet_query_context_loggers()
    if url.startswith("sc://"):
        # Spark Connect: the server owns the JVM and its configuration; only
        # session settings travel with the client.
        remote = SparkSession.builder.remote(url).getOrCreate()
        for key, value in _SESSION_CONF.items():
            remote.conf.set(key, value)
        return remote
    os.environ.pop(_CONNECT_MODE, None)  # classic (see ``using``)
    builder = (
        SparkSession.builder.appName("mzflow")
        .master(url)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # The status store keeps every SQL execution, job and stage up to these counts
        # (1,000 each by default) even with the UI off: in a long-lived process that is
        # memory that grows for its first thousand statements and serves nobody. Jobs
        # stay enough for counting_jobs, which reads a tick's jobs right after it.
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
        .config("spark.driver.memory", driver_memory())
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile={_LOG4J} -Dderby.system.home=/tmp")
    )
    for key, value in _SESSION_CONF.items():
        builder = builder.config(key, value)
    interrupt = signal.getsignal(signal.SIGINT)
    with _jvm_output():
        spark = builder.getOrCreate()
    if threading.current_thread() is threading.main_thread():
        # pyspark installs a Ctrl-C handler that cancels jobs over the main thread's
        # Py4J connection, which is busy with the interrupted call: the cancel fails and
        # logs a traceback. Keep the caller's handler (the shell cancels from another
        # thread).
        signal.signal(signal.SIGINT, interrupt)
    spark.sparkContext.setLogLevel("OFF")
    return spark


def started() -> bool:
    return _session is not None


def _python() -> str:
    return sys.executable


def from_arrow(table: pa.Table) -> Any:
    """A DataFrame of ``table``'s rows, as one contiguous record batch. PySpark 4.3's
    ``createDataFrame(pa.Table)`` sends the table's record batches one per partition
    and loses rows after an empty batch (batches of 0, 0, 1 rows give an empty frame).
    Filtered Delta scans and Arrow joins produce such empty batches."""
    return session().createDataFrame(table.combine_chunks())


# An incremental tick's inputs are mostly local rows (change feeds, arrangement
# lookups), where what costs is Spark's fixed price per job. Adaptive execution runs
# each shuffle stage as a job of its own and a broadcast join adds one more; without
# them an action is one job, whatever the plan (a join + aggregate: 3-4 jobs → 1).
_FEW_JOBS = {"spark.sql.adaptive.enabled": "false",
             "spark.sql.autoBroadcastJoinThreshold": "-1"}


def to_arrow(df: Any) -> pa.Table:
    """``df``'s rows as Arrow. ``toArrow()`` always runs a Spark job (its batches come
    from an RDD), ~0.3 s even for a handful of rows; a plan Spark's optimizer folded
    into local rows (projections and filters over change rows or lookups) collects
    on the driver without one, and is converted here with toArrow's own types."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        local = (df._jdf.queryExecution().optimizedPlan().getClass().getSimpleName()
                 == "LocalRelation")
    except Exception:  # a Spark Connect frame has no JVM handle; its toArrow is cheap
        local = False
    if not local:
        return collect_arrow(df)
    schema = to_arrow_schema(df.schema, timezone="UTC")
    rows = df.collect()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    return pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(columns, schema,
                                                                           strict=True)],
                                schema=schema)


def collect_arrow(df: Any) -> pa.Table:
    """``df.toArrow()``, one round trip on Spark Connect. pyspark's Connect ``toArrow``
    first asks the server for the frame's schema (an analyze request: the plan analysed
    once more) only to cast the result to it, though the execution's own response
    carries that schema: on a warm cluster's tick those requests were 0.05-0.3 s of
    every collect (issue 18)."""
    import pyarrow as pa

    run = getattr(df, "_to_table", None)  # Spark Connect's frames only
    if run is None:
        return pa.table(df.toArrow())
    from pyspark.sql.pandas.types import to_arrow_schema

    table, schema = run()
    if schema is None:  # not sent (never seen): ask, as toArrow does
        schema = df.schema
    return table.cast(to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True,
                                      timezone="UTC"))


@contextmanager
def few_jobs() -> Iterator[None]:
    """Run the block with one Spark job per action (restored afterwards)."""
    spark = session()
    conf = spark.conf
    saved = {k: conf.get(k, None) for k in _FEW_JOBS}
    for k, v in _FEW_JOBS.items():
        conf.set(k, v)
    def restore() -> None:
        for k, v in saved.items():
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)

    with _cleaning_up(spark, restore):
        yield


def _live(spark: Any) -> bool:
    """Whether a block's cleanup can still reach ``spark``: not if the JVM died during
    the block (translate_error forgot it), whose state went with it."""
    return spark is _session or _using.get() is not None


@contextmanager
def _cleaning_up(spark: Any, undo: Callable[[], None]) -> Iterator[None]:
    """Run the block, then ``undo`` what it set in ``spark``. The JVM may have died
    during the block and still be exiting when translate_error stopped waiting for it
    (an out-of-memory JVM, on a loaded machine): its state went with it, and a refused
    connection here must never replace the block's own error (CI saw a
    ConnectionRefusedError where the out-of-memory error belonged)."""
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        if _live(spark):
            try:
                undo()
            except Exception as e:
                if not failed and _jvm_exit(e, oom=False) is None:
                    raise translate_error(e) from None


@contextmanager
def counting_jobs() -> Iterator[Callable[[], int | None]]:
    """Count the Spark jobs run inside the block (a tick's), by a job group of its own
    and the status tracker. A Spark Connect session has no tracker here: None."""
    spark = session()
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext in the client
        yield lambda: None
        return
    group = f"mzflow-{next(_names)}"
    sc.setJobGroup(group, "mzflow tick")
    tracker = sc.statusTracker()
    def ungroup() -> None:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)

    with _cleaning_up(spark, ungroup):
        yield lambda: len(tracker.getJobIdsForGroup(group))


@contextmanager
def registered(relations: Mapping[str, Relation]) -> Iterator[dict[str, str]]:
    """Register each relation as a uniquely named temp view; drop them afterwards."""
    spark = session()
    names: dict[str, str] = {}

    def drop() -> None:
        for view in names.values():
            spark.catalog.dropTempView(view)

    with _cleaning_up(spark, drop):
        for ref, rel in relations.items():
            view = f"mz_rel_{next(_names)}"
            if rel.frame is not None:
                rel.frame.createOrReplaceTempView(view)
                names[ref] = view
                continue
            if rel.files:
                df = spark.read.schema(rel.schema_ddl).parquet(*rel.files)
            else:
                df = spark.createDataFrame([], rel.schema_ddl)
            if rel.count_column is not None:
                from pyspark.sql import functions as F

                df = df.withColumn("_mz_copy", F.explode(F.sequence(
                    F.lit(1), F.col(rel.count_column).cast("int"))))
            df.select(*[f"`{c}`" for c in rel.columns]).createOrReplaceTempView(view)
            names[ref] = view
        yield names


def to_spark_sql(query: exp.Query, views: Mapping[str, str]) -> str:
    query = query.copy()
    for table in query.find_all(exp.Table):
        if table.name in views and not table.db:
            alias = table.alias_or_name
            table.set("this", exp.to_identifier(views[table.name]))
            if not table.args.get("alias"):
                table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    rewritten = pg_semantics(query)
    assert isinstance(rewritten, exp.Query)
    query = rewritten
    series.to_spark(query, lambda e: e.sql(dialect="spark"))  # generate_series
    # Innermost first, so an outer rewrite copies already rewritten subqueries.
    for select in reversed(list(query.find_all(exp.Select))):
        on = select.args.get("distinct") and select.args["distinct"].args.get("on")
        if isinstance(on, exp.Tuple):
            rewritten = _without_distinct_on(select, on)
            if select is query:
                query = rewritten
            else:
                select.replace(rewritten)
    return query.sql(dialect="spark")


def pg_semantics(tree: exp.Expr) -> exp.Expr:
    """Rewrite what Spark computes differently from PostgreSQL, reading the result types
    the binder set (``catalog/exprtypes.py``); deepest nodes first, so an outer rewrite
    sees rewritten operands.

    - ``/`` on integers truncates to the operands' type (int4 / int4 is int4). sqlglot
      writes that for Spark as a double division cast back to BIGINT, which is wrong
      past 2**53; Spark's ``DIV`` divides integers exactly.
    - ``/`` on numerics and ``avg`` of integers or numerics are numeric with the scale
      the binder chose; Spark would give 6 decimal places (or a double for ``avg(int)``).
    - ``round`` of a double rounds half to even (C's rint), as Spark's ``bround`` does.
    - An explicit cast to ``varchar(n)`` cuts the text to ``n`` characters.
    - ``array_agg`` keeps NULLs and its ORDER BY (``render/aggregates.py``).
    - Casts, concatenation, substr, to_char and exp/ln/sqrt/power: ``render/spark_pg.py``.
    """
    from mzflow.render import spark_pg  # functions, operators, casts: a module of its own

    root = tree
    for node in reversed(list(tree.find_all(exp.Div, exp.Avg, exp.Round, *spark_pg.NODES))):
        if isinstance(node, exp.Div):
            new = _division(node)
            new = spark_pg.rewrite(node) if new is node else new
        elif type(node) is exp.Cast:
            new = _to_varchar(node)
            new = spark_pg.rewrite(node) if new is node else new
        elif not isinstance(node, exp.Avg | exp.Round):
            new = spark_pg.rewrite(node)
        elif isinstance(node, exp.Round):
            new = node
            if node.args.get("decimals") is None and node.is_type(exp.DType.DOUBLE):
                new = exp.Anonymous(this="BROUND", expressions=[node.this])
        else:
            assert isinstance(node, exp.Avg)
            new = _average(node)
        if new is node:
            continue
        new.type = node.type
        if node is root:
            root = new
        else:
            window = node.parent
            target: exp.Expr = node
            if isinstance(window, exp.Window):  # avg(x) OVER w → sum(x) OVER w / count…
                new = _windowed(window, new)
                target = window
                if target is root:
                    root = new
            target.replace(new)
    return array_aggs(root)


def _to_varchar(node: exp.Cast) -> exp.Expr:
    to = node.to
    if not to.is_type(exp.DType.VARCHAR, exp.DType.CHAR) or not to.expressions:
        return node
    length = to.expressions[0]
    n = (length.this if isinstance(length, exp.DataTypeParam) else length).name
    text = exp.cast(node.this, exp.DType.TEXT)
    return exp.Substring(this=text, start=exp.Literal.number(1),
                         length=exp.Literal.number(int(n)))


def _operand(node: exp.Expr, i: int) -> exp.DataType | None:
    """The type of a division's or an average's ``i``-th operand. The binder records
    them on the node (``exprtypes.OPERANDS``): lowering to the IR renames columns, and
    the new column nodes carry no type."""
    recorded = node.meta.get(OPERANDS)
    if recorded is not None and i < len(recorded):
        return recorded[i]
    operand = node.args.get("this" if i == 0 else "expression")
    return operand.type if isinstance(operand, exp.Expr) and isinstance(
        operand.type, exp.DataType) else None


def _cast(e: exp.Expr, to: exp.DataType | exp.DType) -> exp.Cast:
    """Always a new cast: ``exp.cast`` drops it when ``e`` is already a cast to another
    decimal (it compares the base types only)."""
    dtype = to if isinstance(to, exp.DataType) else exp.DataType.build(to)
    cast = exp.Cast(this=e, to=dtype)
    cast.type = dtype
    return cast


def _is(dtype: exp.DataType | None, *kinds: exp.DType) -> bool:
    return dtype is not None and dtype.is_type(*kinds)


def _division(node: exp.Div) -> exp.Expr:
    left, right, result = node.left, node.right, node.type
    left_t, right_t = _operand(node, 0), _operand(node, 1)
    ints = exp.DataType.INTEGER_TYPES
    if _is(left_t, *ints) and _is(right_t, *ints) and (
            node.args.get("typed") or _is(result, *ints)):
        quotient = exp.IntDiv(this=_cast(left, exp.DType.BIGINT),
                              expression=_cast(right, exp.DType.BIGINT))
        if result is not None and _is(result, *ints) and not result.is_type(
                exp.DType.BIGINT):
            return _cast(quotient, result.copy())
        return quotient
    if result is None or not result.is_type(exp.DType.DECIMAL):
        return node
    return _decimal_quotient(left, right, result, left_t, right_t) or node


def _decimal_quotient(num: exp.Expr, den: exp.Expr, result: exp.DataType,
                      num_t: exp.DataType | None, den_t: exp.DataType | None
                      ) -> exp.Expr | None:
    """``num / den`` at the result's scale. Spark types a decimal quotient by its
    operands, so the numerator is cast to leave exactly that scale: with numerator
    ``decimal(38 - s2, t)`` and denominator ``decimal(38, s2)``, Spark's rule (scale
    ``max(6, t + 39)``, cut to keep ``38 - t`` integer digits) gives ``decimal(38, t)``."""
    exact = (exp.DType.DECIMAL, *exp.DataType.INTEGER_TYPES)
    if not (_is(num_t, *exact) and _is(den_t, *exact)):
        return None
    t, s2 = sqlglot_scale(result), sqlglot_scale(den_t)
    if t < 6 or t + s2 > 37:
        return None
    quotient = exp.Div(this=_cast(num, exp.DataType.build(f"DECIMAL({38 - s2}, {t})")),
                       expression=_cast(den, exp.DataType.build(f"DECIMAL(38, {s2})")))
    return _cast(quotient, result.copy())


def _average(node: exp.Avg) -> exp.Expr:
    """``avg(x)`` of integers or numerics → ``sum(x) / count(x)`` at the result's scale
    (PostgreSQL's avg is exactly that numeric division)."""
    result, value_t = node.type, _operand(node, 0)
    if result is None or not result.is_type(exp.DType.DECIMAL) or not _is(
            value_t, exp.DType.DECIMAL, *exp.DataType.INTEGER_TYPES):
        return node
    arg = node.this
    distinct = isinstance(arg, exp.Distinct)
    value = arg.expressions[0] if distinct else arg
    wide_t = exp.DataType.build(f"DECIMAL(38, {sqlglot_scale(value_t)})")
    wide = _cast(value.copy(), wide_t)
    total = exp.Sum(this=exp.Distinct(expressions=[wide]) if distinct else wide)
    count = exp.Count(this=exp.Distinct(expressions=[value.copy()]) if distinct
                      else value.copy())
    return _decimal_quotient(total, count, result, wide_t,
                             exp.DataType.build("BIGINT")) or node


def average_sql(total: str, count: str, agg: exp.Avg) -> str:
    """Spark SQL for an ``avg`` from its kept partials, the columns ``total`` (the sum)
    and ``count``: the same numeric quotient as :func:`pg_semantics` renders."""
    result, value_t = agg.type, _operand(agg, 0)
    plain = f"`{total}` / `{count}`"
    if result is None or not result.is_type(exp.DType.DECIMAL) or not _is(
            value_t, exp.DType.DECIMAL, *exp.DataType.INTEGER_TYPES):
        return plain
    wide = exp.DataType.build(f"DECIMAL(38, {sqlglot_scale(value_t)})")
    quotient = _decimal_quotient(_cast(exp.column(total, quoted=True), wide),
                                 exp.column(count, quoted=True), result, wide,
                                 exp.DataType.build("BIGINT"))
    return quotient.sql(dialect="spark") if quotient is not None else plain


def _windowed(window: exp.Window, quotient: exp.Expr) -> exp.Expr:
    """Put each aggregate of ``quotient`` under its own copy of ``window``."""
    for agg in list(quotient.find_all(exp.Sum, exp.Count)):
        over = window.copy()
        over.set("this", agg.copy())
        agg.replace(over)
    return quotient


def _without_distinct_on(select: exp.Select, on: exp.Tuple) -> exp.Select:
    """``SELECT DISTINCT ON (keys) … ORDER BY … LIMIT …`` → the first row per key by a
    ``ROW_NUMBER`` window, with the ORDER BY, LIMIT and OFFSET applied to the result.

    sqlglot's own rewrite for Spark moves the ORDER BY into the window (the result loses
    its order) and leaves LIMIT/OFFSET inside, where they cut rows before the first of
    each group is picked.
    """
    inner = select.copy()
    inner.set("distinct", None)
    order, limit, offset = (inner.args.get(k) for k in ("order", "limit", "offset"))
    for k in ("order", "limit", "offset"):
        inner.set(k, None)
    projections: list[exp.Expr] = []
    names: list[str] = []
    by_name: dict[str, exp.Expr] = {}
    for i, p in enumerate(inner.selects):
        name = p.alias_or_name if isinstance(p, exp.Alias | exp.Column) else ""
        name = name or f"_mz_c{i}"
        names.append(name)
        by_name.setdefault(name, p.unalias())
        projections.append(exp.alias_(p.unalias().copy(), name, quoted=True))
    window_keys: list[exp.Ordered] = []
    outer_keys: list[exp.Ordered] = []
    for j, ordered in enumerate(order.expressions if order else []):
        key = ordered.this
        if isinstance(key, exp.Column) and not key.table and key.name in by_name:
            expr, ref = by_name[key.name], key.name
        else:
            expr, ref = key, f"_mz_o{j}"
            projections.append(exp.alias_(key.copy(), ref, quoted=True))
        window_keys.append(ordered.__class__(**{**ordered.args, "this": expr.copy()}))
        outer_keys.append(ordered.__class__(
            **{**ordered.args, "this": exp.column(ref, table="_mz_t", quoted=True)}))
    if not window_keys:  # no ORDER BY: any row of each group will do
        window_keys = [exp.Ordered(this=e.copy()) for e in on.expressions]
    window = exp.Window(this=exp.RowNumber(),
                        partition_by=[e.copy() for e in on.expressions],
                        order=exp.Order(expressions=window_keys))
    projections.append(exp.alias_(window, "_mz_rn", quoted=True))
    inner.set("expressions", projections)
    outer = exp.select(*[exp.alias_(exp.column(n, table="_mz_t", quoted=True), n, quoted=True)
                         for n in names]).from_(inner.subquery("_mz_t"))
    outer = outer.where(exp.column("_mz_rn", table="_mz_t", quoted=True).eq(1))
    if outer_keys:
        outer.set("order", exp.Order(expressions=outer_keys))
    outer.set("limit", limit)
    outer.set("offset", offset)
    return outer


def run(query: exp.Query, relations: Mapping[str, Relation],
        types: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """Rows of ``query``; ``types``: the bound columns' catalog types, which the rows
    are cast to (see :func:`typed`)."""
    with registered(relations) as views:
        try:
            rows = dataframe(query, views, types).collect()
        except Exception as e:  # pyspark's errors all derive from Exception
            raise translate_error(e) from None
    if not rows:
        return []
    columns = [[_value(v) for v in col] for col in zip(*rows, strict=True)]
    if types is not None:
        columns = [python_values(col, t) for col, t in zip(columns, types, strict=True)]
    return list(zip(*columns, strict=True))


def dataframe(query: exp.Query, views: Mapping[str, str],
              types: Sequence[str] | None = None) -> Any:
    df = session().sql(to_spark_sql(query, views))
    return typed(df, types) if types is not None else df


def typed(df: Any, types: Sequence[str]) -> Any:
    """Cast each output column to its bound type, so a plain read, an index, SUBSCRIBE
    and a sink all hand back the same types (Spark's own result types differ: a
    ``sum`` of decimal(12,2) is decimal(22,2), ``int4 + int4`` stays int but an
    ``avg`` of a double stays double…). Types Spark cannot store (interval) stay.
    The columns are named by position; callers name them."""
    from pyspark.sql import functions as F

    # Positional names: a query may name two columns alike (``SELECT x1.a, x2.a``), and
    # rows collected through Arrow would keep only one of them.
    positional = df.toDF(*[f"_mz_c{i}" for i in range(len(df.columns))])
    if len(types) != len(df.columns):
        # The binder did not see every column (a star over `VALUES … AS v(a)` binds to
        # none yet): Spark's own types, rather than dropping columns.
        return positional
    cols = []
    for i, t in enumerate(types):
        try:
            cols.append(F.col(f"_mz_c{i}").cast(parse_type(t).spark))
        except Error:
            cols.append(F.col(f"_mz_c{i}"))
    return positional.select(*cols)


def _value(v: Any) -> Any:
    return bytes(v) if isinstance(v, bytearray) else v


def as_utc(v: Any) -> Any:
    """PySpark hands TIMESTAMP (with time zone) back as a naive datetime in the Python
    process's local zone; make it an aware UTC datetime, as PostgreSQL clients expect."""
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        return v.astimezone(dt.UTC)
    return v


_ERRORS = (  # Spark's error class → Materialize's message and PostgreSQL's SQLSTATE
    (r"DIVIDE_BY_ZERO|REMAINDER_BY_ZERO", "Evaluation error: division by zero", "22012"),
    (r"CAST_INVALID_INPUT.*?The value '([^']*)' of the type \"\w+\" cannot be cast to \"(\w+)\"",
     'Evaluation error: invalid input syntax for type {1}: "{0}"', "22P02"),
    # Arrow's words when a kept sum (a GROUP BY state) outgrows 38 digits
    (r"ARITHMETIC_OVERFLOW|NUMERIC_VALUE_OUT_OF_RANGE|CAST_OVERFLOW|"
     r"Decimal value does not fit in precision",
     "Evaluation error: numeric field overflow", "22003"),
    (rf"USER_RAISED_EXCEPTION\] ({series.ZERO_STEP})", "Evaluation error: {0}", "22023"),
)


def evaluation_error(message: str, code: str) -> EvaluationError:
    err = EvaluationError(message)
    err.code = code  # the condition's own SQLSTATE, under the data exception class
    return err


@dataclass(frozen=True)
class Memory:
    """Whose memory a block's Spark work uses, for an out-of-memory error: the cluster,
    the heap it has, and the setting that gives it more."""

    cluster: str
    heap: str
    setting: str


_memory: contextvars.ContextVar[Memory | None] = contextvars.ContextVar(
    "mzflow_spark_memory", default=None)


@contextmanager
def memory_of(memory: Memory) -> Iterator[None]:
    token = _memory.set(memory)
    try:
        yield
    finally:
        _memory.reset(token)


def in_process_memory(cluster: str) -> Memory:
    return Memory(cluster, driver_memory(),
                  "set MZFLOW_SPARK_DRIVER_MEMORY higher (by default a quarter of the "
                  "machine's memory, at most 8g)")


# The JVM's own words, and Spark's exit code for a JVM its uncaught-exception handler
# stopped after an OutOfMemoryError (SparkExitCode.OOM): in local mode a task's OOM
# takes the whole driver down, and the caller sees only a failed py4j call
# ("An error occurred while calling o19543.getResult").
_OOM_TEXT = re.compile(r"OutOfMemoryError|Java heap space|GC overhead limit exceeded")
OOM_EXIT_CODE = 52
# The JVM's own heap ran out (it will exit), unlike Spark's SparkOutOfMemoryError for a
# broadcast or a task's memory grant, after which the JVM goes on.
_HEAP_GONE = re.compile(r"java\.lang\.OutOfMemoryError|Java heap space|GC overhead limit")


def out_of_memory(how: str = "") -> OutOfMemory:
    memory = _memory.get()
    if memory is None:
        memory = in_process_memory("default") if where() == "in-process" else Memory(
            "?", "?", f"give the Spark at {where()} more memory")
    return OutOfMemory(f'cluster "{memory.cluster}" ran out of memory: Spark\'s driver heap '
                       f"({memory.heap}) is full{how}", hint=memory.setting)


def _jvm_exit(e: Exception, oom: bool) -> int | None:
    """The in-process JVM's exit code if ``e`` came from its death, else None. A dead JVM
    is forgotten, so the next session() starts a new one: a long-lived process (the
    shell, a SUBSCRIBE) survives it."""
    if _using.get() is not None or _session is None:
        return None
    proc = getattr(getattr(_session.sparkContext, "_gateway", None), "proc", None)
    if proc is None:
        return None
    # The failed call may return while the JVM is still exiting: wait a little only
    # for the failures a dying JVM gives, not for every SQL error.
    dying = (oom or _DYING.search(str(e)) is not None
             or isinstance(e, ConnectionError) or type(e).__name__ == "Py4JNetworkError")
    try:
        code = proc.wait(5.0 if dying else 0.0)
    except Exception:  # still running (TimeoutExpired)
        if not (oom and _HEAP_GONE.search(str(e))):
            return None
        # Out of memory, the JVM exits (52) after its shutdown hooks, which took longer
        # than the wait on a loaded CI machine: the next statement then found it alive,
        # and its first call was refused. A JVM that ran out is not trusted again.
        proc.kill()
        code = proc.wait(30)
    _forget(_session)
    return int(code)


# A Connect server that died mid-call: gRPC's words for it (a handler cut off by the
# JVM's exit answers "Application error processing RPC").
_LOST = re.compile(r"UNAVAILABLE|Connection refused|Socket closed|failed to connect|"
                   r"Connection reset|Application error processing RPC", re.I)
_STOPPED = re.compile(r"stopped SparkContext|SparkContext was shut down|"
                      r"SparkContext has been shutdown")
_DYING = re.compile(r"SparkContext was shut down|Answer from Java side is empty|"
                    r"Connection refused|Error while (sending|receiving)")


# A class whose static initializer failed stays unusable for the JVM's life: snappy-java
# extracts its native library to a temporary file on first use, so a full disk then
# (the soak's fault) broke every later Parquet read of an in-process JVM for good.
_BROKEN = re.compile(r"Could not initialize class ([\w.$]+)|ExceptionInInitializerError|"
                     r"UnsatisfiedLinkError")


def _stop_broken_jvm() -> bool:
    """Stop the in-process JVM and forget it, so the next session() starts a new one.
    False when there is none to stop (a Connect server's JVM is its supervisor's)."""
    dead = _session
    if _using.get() is not None or dead is None:
        return False
    gateway = getattr(dead.sparkContext, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    try:
        dead.stop()
    except Exception:  # noqa: BLE001 - stopping a broken JVM: the kill below decides
        pass
    if gateway is not None and proc is not None:
        try:
            gateway.shutdown()
        except Exception:  # noqa: BLE001
            pass
        proc.kill()
        proc.wait(30)
    _forget(dead)
    return True


def _forget(dead: Any) -> None:
    global _session
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    with _lock:
        if _session is dead:
            _session = None
        # pyspark keeps the dead context, its gateway and session as class state, and
        # would hand them out again.
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None


def translate_error(e: Exception) -> Error:
    """Spark's exception → an mzflow error that reads like Materialize's."""
    if isinstance(e, Error):  # refused while rendering the query, before Spark saw it
        return e
    text = str(e)
    oom = _OOM_TEXT.search(text) is not None
    exit_code = _jvm_exit(e, oom)
    if exit_code == OOM_EXIT_CODE or (oom and exit_code is not None):
        return out_of_memory(" (the JVM stopped; the next statement starts a new one)")
    if oom:
        return out_of_memory()
    if exit_code is not None:
        return SparkFailure(f"Spark's JVM exited with code {exit_code}; the next statement "
                            "starts a new one")
    broken = _BROKEN.search(text)
    if broken is not None and _stop_broken_jvm():
        return SparkFailure(f"Spark's JVM could not load {broken.group(1) or 'a native library'}"
                            " (a full disk while it first loaded it?) and would fail every "
                            "statement from now on; stopped it, the next statement starts "
                            "a new one")
    endpoint = _using.get()
    if endpoint is not None and _LOST.search(text):
        return SparkFailure(f"lost the connection to the Spark at {endpoint[0]}: {text[:200]}")
    if endpoint is not None and _STOPPED.search(text):
        # The server's Spark stopped under the query (after an OutOfMemoryError Spark
        # stops its context, then the JVM exits with 52): the caller asks how it died.
        return SparkFailure(f"the Spark at {endpoint[0]} stopped: {text[:200]}")
    from mzflow.render.spark_pg import raised

    found = raised(text)
    if found is not None:
        return found
    if re.search(r"year -?\d+ is out of range", text):  # Python's date type, collecting rows
        return Unsupported("dates and timestamps after year 9999 are not supported yet")
    for pattern, message, code in _ERRORS:
        m = re.search(pattern, text, flags=re.S)
        if m:
            return evaluation_error(message.format(*m.groups()), code)
    m = re.search(r"UNRESOLVED_ROUTINE\].*?routine `([^`]+)`", text, flags=re.S)
    if m:
        return UnknownFunction(f"function {m.group(1).lower()} does not exist")
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return Error(f"query failed in Spark: {first}")


def retained() -> dict[str, int]:
    """What the process's Spark holds between statements, counted (a long-lived process
    must not grow these with the number of statements it ran): blocks in the driver's
    memory store (broadcasts: a broadcast join's hash relation, a job's task binary),
    the bytes they take, persisted RDDs, temporary views, and what the status store
    keeps of SQL executions, jobs and stages. In-process Spark only."""
    spark = session()
    sc = spark.sparkContext._jsc.sc()
    jvm = spark._jvm

    # Fields by reflection: py4j lists a class's methods to call one, and SparkEnv's
    # and BlockManager's name protobuf classes that pyspark's jars leave out.
    def field(cls: str, name: str, target: Any) -> Any:
        if target is None:  # not made yet (the memory store is a lazy val): empty
            return None
        f = jvm.java.lang.Class.forName(cls).getDeclaredField(name)
        f.setAccessible(True)
        return f.get(target)

    env = sc.env()
    entries = field("org.apache.spark.storage.memory.MemoryStore", "entries", field(
        "org.apache.spark.storage.BlockManager", "memoryStore",
        field("org.apache.spark.SparkEnv", "blockManager", env)))
    names: list[str] = []
    # Listed again if the store changed meanwhile.
    for _ in range(5 if entries is not None else 0):
        try:
            names = [n for n in str(entries.keySet().toString()).strip("[]").split(", ") if n]
            break
        except Exception:
            continue
    storage = field("org.apache.spark.SparkEnv", "_memoryManager", env).storageMemoryUsed()
    kv = sc.statusStore().store()

    def count(cls: str) -> int:
        return int(kv.count(jvm.java.lang.Class.forName(cls)))

    return {
        "broadcast blocks": sum(n.startswith("broadcast_") for n in names),
        "memory store blocks": len(names),
        "storage bytes": int(storage),
        "persisted RDDs": int(sc.getPersistentRDDs().size()),
        "temp views": int(spark._jsparkSession.sessionState().catalog()
                          .getTempViewNames().size()),
        "SQL executions": count("org.apache.spark.sql.execution.ui.SQLExecutionUIData"),
        "jobs": count("org.apache.spark.status.JobDataWrapper"),
        "stages": count("org.apache.spark.status.StageDataWrapper"),
    }


def heap_after_gc() -> int:
    """The in-process JVM's heap in use after full collections, in bytes: what the
    process's live objects hold. Python's garbage first, once Spark's listeners caught
    up: a DataFrame it no longer uses keeps its JVM plan until its py4j proxy is
    collected *and py4j has told the JVM* (``release_dropped``). Then the JVM's, until
    the memory store stops shrinking: Spark's ContextCleaner drops a broadcast's blocks
    only after a collection found the broadcast unreachable, and those blocks go with a
    later one."""
    import gc
    import time

    spark = session()
    # A finished query's end event holds its plan (its broadcasts) until the listener
    # bus has delivered it.
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    gc.collect()
    release_dropped()
    jvm = spark._jvm
    heap = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
    before: tuple[int, int] | None = None
    for _ in range(10):
        jvm.java.lang.System.gc()
        time.sleep(0.3)
        # The blocks the cleaner dropped since the last collection are freed by this
        # one: settled when neither the blocks nor the heap moved (by 1 MB) since.
        jvm.java.lang.System.gc()
        now = (retained()["memory store blocks"], int(heap.getHeapMemoryUsage().getUsed()))
        if before is not None and now[0] == before[0] and now[1] > before[1] - 2**20:
            return now[1]
        before = now
    assert before is not None
    return before[1]


def release_dropped() -> int:
    """Tell the JVM now about the py4j proxies Python has collected; returns how many.

    py4j's client-server mode (pyspark's) does not release a collected proxy's JVM
    object itself: it queues the release for a worker thread that sends one at a time
    and sleeps a second whenever it finds the queue empty. Until then the JVM object
    (a DataFrame, its plan, the broadcasts in the plan) stays bound in the gateway,
    alive to any collection: a heap measured right after ``gc.collect()`` counted it."""
    client = session().sparkContext._gateway._gateway_client
    pending = getattr(client, "finalizer_deque", None)  # absent: releases are synchronous
    released = 0
    while pending:
        try:
            task = pending.pop()  # the worker's end, like the worker
        except IndexError:
            break
        if not isinstance(task, tuple):  # the worker's shutdown sentinel: leave it
            pending.append(task)
            break
        owner, target_id = task
        owner.garbage_collect_object(target_id, False)
        released += 1
    return released
