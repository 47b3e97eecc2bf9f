"""Rows between Arrow (delta-rs, the in-process engines) and Spark, both ways, and the
Python values Spark hands back made what PostgreSQL's clients expect."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from mzflow.engine.spark.runtime import process

if TYPE_CHECKING:
    import pyarrow as pa


def from_arrow(table: pa.Table) -> Any:
    """A DataFrame of ``table``'s rows, as one contiguous record batch. PySpark 4.3's
    ``createDataFrame(pa.Table)`` sends the table's record batches one per partition
    and loses rows after an empty batch (batches of 0, 0, 1 rows give an empty frame).
    Filtered Delta scans and Arrow joins produce such empty batches. An empty table
    goes with its schema: Spark Connect's createDataFrame refuses one without
    ("CANNOT_INFER_EMPTY_SCHEMA"; a lookup that matched nothing, on a cluster's
    server, in TPC-H Q18 at SF 1 with tick_executor = 'spark')."""
    spark = process().session()
    if table.num_rows == 0:
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], from_arrow_schema(table.schema))
    return spark.createDataFrame(table.combine_chunks())


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


def plain(v: Any) -> Any:
    """A collected row's value as a Python value of its own: binary comes as bytearray."""
    return bytes(v) if isinstance(v, bytearray) else v


def as_utc(v: Any) -> Any:
    """PySpark hands TIMESTAMP (with time zone) back as a naive datetime in the Python
    process's local zone; make it an aware UTC datetime, as PostgreSQL clients expect."""
    if isinstance(v, dt.datetime) and v.tzinfo is None:
        return v.astimezone(dt.UTC)
    return v
