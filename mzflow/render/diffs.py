"""Spark side of a recompute tick: new contents → the changes to the stored contents.

Contents are consolidated (one row per distinct row, with its count), keyed by a
hash of the row. The output has one row per key whose count changed, carrying
the new count (0 means: delete), which is exactly what the index shard merges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from mzflow.render.spark import session
from mzflow.storage.delta import COUNT, KEY


def key_column(df: Any, columns: Sequence[str]) -> Any:
    from pyspark.sql import functions as F

    # to_json of the whole row: NULLs and values of every type hash distinctly.
    struct = F.struct(*[F.col(f"`{c}`").alias(f"c{i}") for i, c in enumerate(columns)])
    return F.sha2(F.to_json(struct, {"ignoreNullFields": "false"}), 256)


def changes(new: Any, old_files: Sequence[str], old_schema_ddl: str,
            columns: Sequence[str]) -> pa.Table:
    """Changed rows with their new counts (0: the row is gone)."""
    from pyspark.sql import functions as F

    spark = session()
    cols = [f"`{c}`" for c in columns]
    counted = (new.groupBy(*cols).agg(F.count(F.lit(1)).alias(COUNT))
               .withColumn(KEY, key_column(new, columns)))
    if old_files:
        old = spark.read.schema(old_schema_ddl).parquet(*old_files)
    else:
        old = spark.createDataFrame([], old_schema_ddl)
    n, o = counted.alias("n"), old.alias("o")
    joined = n.join(o, F.col(f"n.{KEY}") == F.col(f"o.{KEY}"), "full_outer")
    new_count = F.coalesce(F.col(f"n.{COUNT}"), F.lit(0))
    out = joined.where(new_count != F.coalesce(F.col(f"o.{COUNT}"), F.lit(0))).select(
        *[F.coalesce(F.col(f"n.`{c}`"), F.col(f"o.`{c}`")).alias(c) for c in columns],
        F.coalesce(F.col(f"n.{KEY}"), F.col(f"o.{KEY}")).alias(KEY),
        new_count.alias(COUNT),
    )
    return pa.table(out.toArrow())
