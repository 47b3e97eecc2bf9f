"""Running a bound query on Spark: its relations registered as temporary views, the
query rendered with PostgreSQL's semantics (``pg_sql.py``), the rows cast to the bound
types; and the settings a tick's block of queries runs under (few jobs, counted).

Each relation a query reads is a Delta version handed over as its exact file list
plus the schema the query may see; Spark reads those Parquet files directly (the
delta-spark jars are not available, see DESIGN.md §3), so files written before an ADD
COLUMN read the new column as NULL.

Every block here undoes what it set in the session afterwards (``cleaning_up``), even
when the JVM died under it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mzflow.engine.spark.arrow import plain
from mzflow.engine.spark.failures import cleaning_up, translate_error
from mzflow.engine.spark.pg_sql import to_spark_sql
from mzflow.engine.spark.runtime import process
from mzflow.errors import Error
from mzflow.storage.types import parse_type, python_values


@dataclass(frozen=True)
class Relation:
    """What Spark reads for one table reference."""

    files: tuple[str, ...]
    schema_ddl: str  # every column in the files' current schema
    columns: tuple[str, ...]  # what the query may see, in order (a version's columns)
    count_column: str | None = None  # consolidated contents: repeat each row this often
    frame: Any = None  # a ready DataFrame (a projection's rows): files and schema unused


def run(query: exp.Query, relations: Mapping[str, Relation],
        types: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """Rows of ``query``; ``types``: the bound columns' catalog types, which the rows
    are cast to (see :func:`typed`)."""
    with registered(relations) as views:
        try:
            df = dataframe(query, views, types)
            if _loops_per_row(query, relations, df):
                rows = _interruptibly(query, relations, types)
            else:
                rows = df.collect()
        except Exception as e:  # pyspark's errors all derive from Exception
            raise translate_error(e) from None
    if not rows:
        return []
    columns = [[plain(v) for v in col] for col in zip(*rows, strict=True)]
    if types is not None:
        columns = [python_values(col, t) for col, t in zip(columns, types, strict=True)]
    return list(zip(*columns, strict=True))


# -- a cancel that stops a nested loop ------------------------------------------------------
# A cancelled job's tasks stop only where they check for the interrupt: a scan's
# iterator, once per input element. Spark's vectorized Parquet reader hands over 4,096
# rows per element, and a nested-loop join's generated code loops over a batch's rows
# times the other side within one element: a cancelled 3,000-row cross join of three
# tables ran on for 90 s, holding a core; two such held both cores of this machine, and
# every later query waited (make test's psql Ctrl-C test, CI). Reading row by row checks
# the interrupt per row: such a query stops within a second. Where nothing loops per row,
# batches are faster, so only plans with a nested loop read row by row, in a sibling
# session of their own (the setting is the session's, and concurrent queries share one).
_NESTED_LOOPS = ("BroadcastNestedLoopJoin", "CartesianProduct")
_sibling: tuple[Any, Any] | None = None  # (the process's session, its row-reading sibling)


def _loops_per_row(query: exp.Query, relations: Mapping[str, Relation], df: Any) -> bool:
    # A join needs two references (a self-join reads one relation twice); most reads
    # have one, and never ask Spark for their plan here.
    tables = query.find_all(exp.Table)
    if next(tables, None) is None or next(tables, None) is None or any(
            r.frame is not None for r in relations.values()):
        return False
    jdf = getattr(df, "_jdf", None)  # None on Spark Connect: its server plans
    if jdf is None or process().in_process() is None:
        return False
    plan = jdf.queryExecution().executedPlan().toString()
    return any(op in plan for op in _NESTED_LOOPS)


def _interruptibly(query: exp.Query, relations: Mapping[str, Relation],
                   types: Sequence[str] | None) -> list[Any]:
    global _sibling
    spark = process().session()
    if _sibling is None or _sibling[0] is not spark:
        sibling = spark.newSession()
        sibling.conf.set("spark.sql.parquet.enableVectorizedReader", "false")
        _sibling = (spark, sibling)
    sibling = _sibling[1]
    with registered(relations, sibling) as views:
        return dataframe(query, views, types, sibling).collect()


@contextmanager
def registered(relations: Mapping[str, Relation], spark: Any = None
               ) -> Iterator[dict[str, str]]:
    """Register each relation as a uniquely named temp view (in ``spark``, by default
    the process's session); drop them afterwards."""
    runtime = process()
    spark = spark or runtime.session()
    names: dict[str, str] = {}

    def drop() -> None:
        for view in names.values():
            spark.catalog.dropTempView(view)

    with cleaning_up(spark, drop):
        try:
            for ref, rel in relations.items():
                names[ref] = _register(spark, rel, f"mz_rel_{runtime.next_name()}")
        except Exception as e:  # a JVM that died under the previous statement, say
            raise translate_error(e) from None
        yield names


def _register(spark: Any, rel: Relation, view: str) -> str:
    if rel.frame is not None:
        rel.frame.createOrReplaceTempView(view)
        return view
    if rel.files:
        df = spark.read.schema(rel.schema_ddl).parquet(*rel.files)
    else:
        df = spark.createDataFrame([], rel.schema_ddl)
    if rel.count_column is not None:
        from pyspark.sql import functions as F

        df = df.withColumn("_mz_copy", F.explode(F.sequence(
            F.lit(1), F.col(rel.count_column).cast("int"))))
    df.select(*[f"`{c}`" for c in rel.columns]).createOrReplaceTempView(view)
    return view


def dataframe(query: exp.Query, views: Mapping[str, str],
              types: Sequence[str] | None = None, spark: Any = None) -> Any:
    df = (spark or process().session()).sql(to_spark_sql(query, views))
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


# -- a tick's block of queries ------------------------------------------------------------

# An incremental tick's inputs are mostly local rows (change feeds, arrangement
# lookups), where what costs is Spark's fixed price per job. Adaptive execution runs
# each shuffle stage as a job of its own and a broadcast join adds one more; without
# them an action is one job, whatever the plan (a join + aggregate: 3-4 jobs → 1).
_FEW_JOBS = {"spark.sql.adaptive.enabled": "false",
             "spark.sql.autoBroadcastJoinThreshold": "-1"}


@contextmanager
def few_jobs() -> Iterator[None]:
    """Run the block with one Spark job per action (restored afterwards)."""
    spark = process().session()
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

    with cleaning_up(spark, restore):
        yield


@contextmanager
def counting_jobs() -> Iterator[Callable[[], int | None]]:
    """Count the Spark jobs run inside the block (a tick's), by a job group of its own
    and the status tracker. A Spark Connect session has no tracker here: None."""
    runtime = process()
    spark = runtime.session()
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext in the client
        yield lambda: None
        return
    group = f"mzflow-{runtime.next_name()}"
    sc.setJobGroup(group, "mzflow tick")
    tracker = sc.statusTracker()
    def ungroup() -> None:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)

    with cleaning_up(spark, ungroup):
        yield lambda: len(tracker.getJobIdsForGroup(group))
