"""Spark side of a tick's commit: new contents or changes → new counts per stored row.

Contents are consolidated (one row per distinct row, with its count), keyed by a
hash of the row. The output has one row per key whose count changed, carrying
the new count (0 means: delete), which is exactly what the index shard merges.

Values are cast to the index's column types before hashing, so that every
strategy (recompute, changes, state) names the same row by the same key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from mzflow.errors import Error
from mzflow.render.spark import session
from mzflow.storage.delta import COUNT, DIFF, KEY


def canonical(df: Any, columns: Sequence[str], spark_types: Sequence[str]) -> Any:
    """``df``'s first len(columns) columns, renamed and cast to the stored types."""
    from pyspark.sql import functions as F

    src = df.columns
    return df.select(*[F.col(f"`{s}`").cast(t).alias(c)
                       for s, c, t in zip(src, columns, spark_types, strict=False)],
                     *[F.col(f"`{s}`") for s in src[len(columns):]])


def key_column(df: Any, columns: Sequence[str]) -> Any:
    from pyspark.sql import functions as F

    # to_json of the whole row: NULLs and values of every type hash distinctly.
    struct = F.struct(*[F.col(f"`{c}`").alias(f"c{i}") for i, c in enumerate(columns)])
    return F.sha2(F.to_json(struct, {"ignoreNullFields": "false"}), 256)


def _old(old_files: Sequence[str], old_schema_ddl: str) -> Any:
    spark = session()
    if old_files:
        return spark.read.schema(old_schema_ddl).parquet(*old_files)
    return spark.createDataFrame([], old_schema_ddl)


def changes(new: Any, old_files: Sequence[str], old_schema_ddl: str,
            columns: Sequence[str], spark_types: Sequence[str]) -> pa.Table:
    """New contents → changed rows with their new counts (0: the row is gone)."""
    from pyspark.sql import functions as F

    new = canonical(new, columns, spark_types)
    cols = [f"`{c}`" for c in columns]
    counted = (new.groupBy(*cols).agg(F.count(F.lit(1)).alias(COUNT))
               .withColumn(KEY, key_column(new, columns)))
    n, o = counted.alias("n"), _old(old_files, old_schema_ddl).alias("o")
    joined = n.join(o, F.col(f"n.{KEY}") == F.col(f"o.{KEY}"), "full_outer")
    new_count = F.coalesce(F.col(f"n.{COUNT}"), F.lit(0))
    out = joined.where(new_count != F.coalesce(F.col(f"o.{COUNT}"), F.lit(0))).select(
        *[F.coalesce(F.col(f"n.`{c}`"), F.col(f"o.`{c}`")).alias(c) for c in columns],
        F.coalesce(F.col(f"n.{KEY}"), F.col(f"o.{KEY}")).alias(KEY),
        new_count.alias(COUNT),
    )
    return pa.table(out.toArrow())


def apply_diff(diff: Any, old_files: Sequence[str], old_schema_ddl: str,
               columns: Sequence[str], spark_types: Sequence[str]) -> pa.Table:
    """Changes (rows with ``_mz_diff``) → changed rows with their new counts."""
    from pyspark.sql import functions as F

    diff = canonical(diff, columns, spark_types)
    cols = [f"`{c}`" for c in columns]
    summed = (diff.groupBy(*cols).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
              .withColumn(KEY, key_column(diff, columns)))
    old = _old(old_files, old_schema_ddl).select(KEY, COUNT)
    joined = summed.join(old, KEY, "left")
    new_count = F.coalesce(F.col(COUNT), F.lit(0)) + F.col(DIFF)
    out = joined.select(*[F.col(c) for c in cols], F.col(KEY), new_count.alias(COUNT))
    table = pa.table(out.toArrow())
    if table.num_rows and pa.compute.min(table.column(COUNT)).as_py() < 0:
        raise Error("internal error: a maintained row's count went negative; the index "
                    "no longer matches its inputs (run a full refresh)")
    return table
