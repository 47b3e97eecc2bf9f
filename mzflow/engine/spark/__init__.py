"""Spark, as mzflow uses it: one ``SparkRuntime`` per process, PostgreSQL's semantics
as Spark SQL, and Spark's failures as mzflow's errors.

Where to start:
- ``runtime.py``: the JVM and session lifecycle, around the one ``SparkRuntime`` object
  that holds all of this package's state (the session, the Spark Connect server in use,
  whose memory a block uses), configured from ``config.SparkSettings``;
- ``queries.py``: running a bound query (relations as temporary views, the rows cast to
  the bound types), and the settings a tick's queries run under;
- ``pg_sql.py``: a bound query as Spark SQL with PostgreSQL's answers; its helpers
  ``pg_functions.py`` (with ``pg_base``, ``pg_numbers``, ``pg_time``), ``aggregates.py``
  (array_agg) and ``series.py`` (generate_series);
- ``arrow.py``: rows between Arrow and Spark;
- ``failures.py``: evaluation errors, out of memory, a dead or broken JVM;
- ``diagnostics.py``: what the JVM holds, for the memory tests and soaks.

This file is the package's API: the names callers use as ``spark.<name>`` (``from
mzflow.engine import spark``), listed on purpose, not every public name of the modules.
A name belongs here when code outside the package needs it; anything else is imported
from its module. The package imports no pyspark at module level: importing it is cheap.
"""

from mzflow.engine.spark.arrow import as_utc, collect_arrow, from_arrow, to_arrow
from mzflow.engine.spark.diagnostics import heap_after_gc, release_dropped, retained
from mzflow.engine.spark.failures import (
    OOM_EXIT_CODE,
    EvaluationError,
    Memory,
    evaluation_error,
    in_process_memory,
    memory_of,
    out_of_memory,
    translate_error,
)
from mzflow.engine.spark.pg_sql import average_sql, pg_semantics, to_spark_sql
from mzflow.engine.spark.queries import (
    Relation,
    counting_jobs,
    dataframe,
    few_jobs,
    registered,
    run,
    typed,
)
from mzflow.engine.spark.runtime import (
    SparkRuntime,
    closed,
    configure,
    driver_memory,
    log_jvm_to,
    opened,
    session,
    set_connect_timeout,
    started,
    starting,
    using,
    where,
)

__all__ = [
    # the runtime: starting Spark, where a block's work runs
    "SparkRuntime", "configure", "session", "started", "starting", "using", "where",
    "driver_memory", "log_jvm_to",
    # a process that exits: Spark Connect clients closed with the last connection
    "opened", "closed", "set_connect_timeout",
    # running queries
    "Relation", "run", "registered", "dataframe", "typed", "few_jobs", "counting_jobs",
    # PostgreSQL's semantics as Spark SQL
    "to_spark_sql", "pg_semantics", "average_sql",
    # Arrow
    "from_arrow", "to_arrow", "collect_arrow", "as_utc",
    # failures
    "EvaluationError", "evaluation_error", "translate_error", "Memory", "memory_of",
    "in_process_memory", "out_of_memory", "OOM_EXIT_CODE",
    # diagnostics
    "retained", "heap_after_gc", "release_dropped",
]
