"""Run bound queries on Spark: one session per process, started on first use.

Each relation a query reads is a Delta version handed over as its exact file
list plus the schema the query may see; Spark reads those Parquet files
directly (the delta-spark jars are not available, see DESIGN.md §3), so files
written before an ADD COLUMN read the new column as NULL. sqlglot transpiles
the query to Spark SQL.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlglot import exp

if TYPE_CHECKING:
    import pyarrow as pa

from mzflow.errors import Error, UnknownFunction

_LOG4J = Path(__file__).resolve().parents[1] / "conf" / "log4j2.properties"
_lock = threading.Lock()
_session: Any = None
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


# What every mzflow session needs, whichever way Spark is reached.
_SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.ansi.enabled": "true",
}


def session(master: str | None = None) -> Any:
    """The process's SparkSession; the first call starts the JVM (several seconds)."""
    global _session
    with _lock:
        if _session is None:
            os.environ.setdefault("PYSPARK_PYTHON", _python())
            # One machine by default: skip the hostname lookup and its warning.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            from pyspark.sql import SparkSession

            url = master or os.environ.get("MZFLOW_SPARK_MASTER", "local[*]")
            # pyspark logs every failed query's JVM stack on this logger; the user gets
            # the same failure as an mzflow error instead.
            logging.getLogger("SQLQueryContextLogger").disabled = True
            logging.getLogger("DataFrameQueryContextLogger").disabled = True
            if url.startswith("sc://"):
                # Spark Connect: the server owns the JVM and its configuration; only
                # session settings travel with the client.
                _session = SparkSession.builder.remote(url).getOrCreate()
                for key, value in _SESSION_CONF.items():
                    _session.conf.set(key, value)
                return _session
            builder = (
                SparkSession.builder.appName("mzflow")
                .master(url)
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.extraJavaOptions",
                        f"-Dlog4j2.configurationFile={_LOG4J} -Dderby.system.home=/tmp")
            )
            for key, value in _SESSION_CONF.items():
                builder = builder.config(key, value)
            _session = builder.getOrCreate()
            _session.sparkContext.setLogLevel("OFF")
        return _session


def started() -> bool:
    return _session is not None


def _python() -> str:
    import sys

    return sys.executable


def from_arrow(table: pa.Table) -> Any:
    """A DataFrame of ``table``'s rows, as one contiguous record batch. PySpark 4.3's
    ``createDataFrame(pa.Table)`` sends the table's record batches one per partition
    and loses rows after an empty batch (batches of 0, 0, 1 rows give an empty frame).
    Filtered Delta scans and Arrow joins produce such empty batches."""
    return session().createDataFrame(table.combine_chunks())


@contextmanager
def registered(relations: Mapping[str, Relation]) -> Iterator[dict[str, str]]:
    """Register each relation as a uniquely named temp view; drop them afterwards."""
    spark = session()
    names: dict[str, str] = {}
    try:
        for ref, rel in relations.items():
            view = f"mz_rel_{next(_names)}"
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
    finally:
        for view in names.values():
            spark.catalog.dropTempView(view)


def to_spark_sql(query: exp.Query, views: Mapping[str, str]) -> str:
    query = query.copy()
    for table in query.find_all(exp.Table):
        if table.name in views and not table.db:
            alias = table.alias_or_name
            table.set("this", exp.to_identifier(views[table.name]))
            if not table.args.get("alias"):
                table.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    divided = query.transform(_integer_division, copy=False)
    assert isinstance(divided, exp.Query)
    query = divided
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


def _integer_division(node: exp.Expr) -> exp.Expr:
    """PostgreSQL's ``/`` on integers truncates. sqlglot writes that for Spark as a double
    division cast back to BIGINT, which is wrong past 2**53 (``9223372036854775807 / 2``);
    Spark's ``DIV`` divides integers exactly."""
    if isinstance(node, exp.Div) and node.args.get("typed"):
        left, right = node.left, node.right
        if (left.is_type(*exp.DataType.INTEGER_TYPES)
                and right.is_type(*exp.DataType.INTEGER_TYPES)):
            return exp.IntDiv(this=exp.cast(left, exp.DType.BIGINT),
                              expression=exp.cast(right, exp.DType.BIGINT))
    return node


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


def run(query: exp.Query, relations: Mapping[str, Relation]) -> list[tuple[Any, ...]]:
    with registered(relations) as views:
        sql = to_spark_sql(query, views)
        try:
            rows = session().sql(sql).collect()
        except Exception as e:  # pyspark's errors all derive from Exception
            raise translate_error(e) from None
    return [tuple(_value(v) for v in row) for row in rows]


def dataframe(query: exp.Query, views: Mapping[str, str]) -> Any:
    return session().sql(to_spark_sql(query, views))


def _value(v: Any) -> Any:
    return bytes(v) if isinstance(v, bytearray) else v


def as_utc(v: Any) -> Any:
    """PySpark hands TIMESTAMP (with time zone) back as a naive datetime in the Python
    process's local zone; make it an aware UTC datetime, as PostgreSQL clients expect."""
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        return v.astimezone(dt.UTC)
    return v


_ERRORS = (  # Spark's error class → Materialize's message and PostgreSQL's SQLSTATE
    (r"DIVIDE_BY_ZERO", "Evaluation error: division by zero", "22012"),
    (r"CAST_INVALID_INPUT.*?The value '([^']*)' of the type \"\w+\" cannot be cast to \"(\w+)\"",
     'Evaluation error: invalid input syntax for type {1}: "{0}"', "22P02"),
    (r"ARITHMETIC_OVERFLOW|NUMERIC_VALUE_OUT_OF_RANGE|CAST_OVERFLOW",
     "Evaluation error: numeric field overflow", "22003"),
)


def evaluation_error(message: str, code: str) -> EvaluationError:
    err = EvaluationError(message)
    err.code = code  # the condition's own SQLSTATE, under the data exception class
    return err


def translate_error(e: Exception) -> Error:
    """Spark's exception → an mzflow error that reads like Materialize's."""
    text = str(e)
    for pattern, message, code in _ERRORS:
        m = re.search(pattern, text, flags=re.S)
        if m:
            return evaluation_error(message.format(*m.groups()), code)
    m = re.search(r"UNRESOLVED_ROUTINE\].*?routine `([^`]+)`", text, flags=re.S)
    if m:
        return UnknownFunction(f"function {m.group(1).lower()} does not exist")
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return Error(f"query failed in Spark: {first}")
