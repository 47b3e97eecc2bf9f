"""Spark side of a tick's commit: new contents or changes → new counts per stored row.

Contents are consolidated (one row per distinct row, with its count), keyed by a
hash of the row. The output has one row per key whose count changed, carrying
the new count (0 means: delete), which is exactly what the index shard merges.

Values are cast to the index's column types before hashing, so that every
strategy (recompute, changes, state) names the same row by the same key.

Spark always computes the keys. Comparing them with the index is done in Arrow
when the index is small (the ``arrow_diff_rows`` tuning, default 1,000,000 rows): a
Spark join would add a scan of the index and a shuffle to the tick's job, which
costs a recompute of a small view ~0.3-0.6 s (bench/README.md). Above it, the
join stays in Spark so that the driver never holds a large index.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.engine.frames import picked, quoted
from mzflow.engine.spark import collect_arrow, session, to_arrow
from mzflow.errors import Error
from mzflow.storage.delta import COUNT, DIFF, KEY


def canonical(df: Any, columns: Sequence[str], spark_types: Sequence[str],
              rest: Sequence[str] = ()) -> Any:
    """``df`` (whose columns are ``columns`` then ``rest``: a tick names its frames so)
    with ``columns`` cast to the stored types. Not asking ``df`` for its columns saves a
    Spark Connect analyze request per call (issue 18)."""
    return df.selectExpr(*[f"CAST({quoted(c)} AS {t}) AS {quoted(c)}"
                           for c, t in zip(columns, spark_types, strict=True)],
                         *[quoted(r) for r in rest])


def key_column(df: Any, columns: Sequence[str]) -> Any:
    from pyspark.sql import functions as F

    # to_json of the whole row: NULLs and values of every type hash distinctly. (One
    # SQL string: a Column per field would cost a call into the JVM each.)
    fields = ", ".join(f"'c{i}', {quoted(c)}" for i, c in enumerate(columns))
    return F.expr(f"sha2(to_json(named_struct({fields}), map('ignoreNullFields', 'false')), "
                  "256)")


def _old(old_files: Sequence[str], old_schema_ddl: str) -> Any:
    spark = session()
    if old_files:
        return spark.read.schema(old_schema_ddl).parquet(*old_files)
    return spark.createDataFrame([], old_schema_ddl)


def _small(old_files: Sequence[str], limit: int) -> bool:
    import pyarrow.parquet as pq

    rows = 0
    for uri in old_files:
        rows += pq.ParquetFile(_path(uri)).metadata.num_rows
        if rows > limit:
            return False
    return True


def _path(uri: str) -> str:
    return uri.removeprefix("file://")


def _keyed(df: Any, columns: Sequence[str], spark_types: Sequence[str],
           extra: Sequence[str] = ()) -> pa.Table:
    """Spark: canonical values, ``extra`` columns and the key, collected to Arrow."""

    df = canonical(df, columns, spark_types, extra)
    return to_arrow(picked(df, [*columns, *extra]).withColumn(KEY, key_column(df, columns)))


def _read_old(old_files: Sequence[str], columns: Sequence[str] | None,
              keys: pa.Array | None = None) -> pa.Table:
    """The index's rows (``columns`` + key + count), only those among ``keys`` if given."""
    import pyarrow.dataset as ds

    wanted = [*(columns or []), KEY, COUNT]
    dataset = ds.dataset([_path(u) for u in old_files], format="parquet")
    table = dataset.to_table(columns=wanted)
    # delta-rs writes strings as string_view, which some kernels (filter, is_in with
    # Spark's plain strings) do not take, in a column or in an array's elements
    table = table.cast(pa.schema([f.with_type(_plain(f.type)) for f in table.schema]))
    if keys is not None:
        table = table.filter(pc.is_in(table.column(KEY), value_set=keys.cast(pa.string())))
    return table


def _plain(t: pa.DataType) -> pa.DataType:
    if t == pa.string_view():
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_plain(t.value_type))
    return t


def _runs(table: pa.Table) -> tuple[pa.Table, pa.Array, pa.Array]:
    """``table`` sorted by key, and where each key's run of rows starts and ends."""
    table = table.sort_by(KEY)
    keys = table.column(KEY).combine_chunks()
    n = len(keys)
    starts = pc.indices_nonzero(pa.concat_arrays([
        pa.array([True]), pc.not_equal(keys.slice(1), keys.slice(0, n - 1))]))
    ends = pa.concat_arrays([starts.slice(1), pa.array([n], pa.uint64())])
    return table, starts, ends


def _aligned_counts(keys: pa.Array, old: pa.Table | None) -> pa.Array:
    """The index's count for each of ``keys`` (0 where the index lacks the key)."""
    if old is None:
        return pa.array([0] * len(keys), pa.int64())
    at = pc.index_in(keys, value_set=old.column(KEY).combine_chunks())
    counts = old.column(COUNT).combine_chunks().take(at)
    return pc.coalesce(counts, pa.scalar(0, pa.int64()))


def _cast_like(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.table([table.column(f.name).cast(f.type) for f in schema], schema=schema)


def _changes_arrow(new: Any, old_files: Sequence[str], columns: Sequence[str],
                   spark_types: Sequence[str]) -> pa.Table:
    return changes_keyed(_keyed(new, columns, spark_types), old_files, columns)


def changes_keyed(rows: pa.Table, old_files: Sequence[str], columns: Sequence[str]
                  ) -> pa.Table:
    """New contents as keyed rows (``columns`` and KEY) → changed rows, new counts."""
    old = _read_old(old_files, columns) if old_files else None
    if rows.num_rows:
        rows, starts, ends = _runs(rows)
        firsts = rows.take(starts)
        count = pc.subtract(ends, starts).cast(pa.int64())
    else:
        firsts, count = rows, pa.array([], pa.int64())
    keys = firsts.column(KEY).combine_chunks()
    out = firsts.append_column(COUNT, count).filter(
        pc.not_equal(count, _aligned_counts(keys, old)))
    if old is None or old.num_rows == 0:
        return out
    gone = old.filter(pc.invert(pc.is_in(old.column(KEY), value_set=keys)))
    gone = gone.set_column(gone.schema.get_field_index(COUNT), COUNT,
                           pa.array([0] * gone.num_rows, pa.int64()))
    return pa.concat_tables([out, _cast_like(gone, out.schema)])


def _apply_diff_arrow(diff: Any, old_files: Sequence[str], columns: Sequence[str],
                      spark_types: Sequence[str]) -> pa.Table:
    # Parts are keyed one by one and joined in Arrow: a part computed from local rows
    # collects without a Spark job, which a union of the parts would need.
    parts = diff if isinstance(diff, list) else [diff]
    rows = pa.concat_tables([_keyed(d, columns, spark_types, extra=[DIFF]) for d in parts],
                           promote_options="permissive")
    return apply_keyed(rows, old_files, columns)


def apply_keyed(rows: pa.Table, old_files: Sequence[str], columns: Sequence[str]
                ) -> pa.Table:
    """Changes as keyed rows (``columns``, DIFF and KEY) → changed rows, new counts."""
    if rows.num_rows == 0:
        return rows.select([*columns, KEY]).append_column(COUNT, pa.array([], pa.int64()))
    rows, starts, ends = _runs(rows)
    # Σ diff per key: the running sum at the end of each key's run minus at its start.
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(
        rows.column(DIFF).combine_chunks().cast(pa.int64()))])
    summed = pc.subtract(running.take(ends), running.take(starts))
    firsts = rows.take(starts).select([*columns, KEY]).filter(pc.not_equal(summed, 0))
    summed = summed.filter(pc.not_equal(summed, 0))
    keys = firsts.column(KEY).combine_chunks()
    old = _read_old(old_files, None, keys) if old_files and len(keys) else None
    return firsts.append_column(COUNT, pc.add(_aligned_counts(keys, old), summed))


def changes(new: Any, old_files: Sequence[str], old_schema_ddl: str,
            columns: Sequence[str], spark_types: Sequence[str], *, arrow_rows: int
            ) -> pa.Table:
    """New contents → changed rows with their new counts (0: the row is gone)."""
    from pyspark.sql import functions as F

    if _small(old_files, arrow_rows):
        return _changes_arrow(new, old_files, columns, spark_types)
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
    return collect_arrow(out)


def apply_diff(diff: Any, old_files: Sequence[str], old_schema_ddl: str,
               columns: Sequence[str], spark_types: Sequence[str], *, arrow_rows: int
               ) -> pa.Table:
    """Changes (rows with ``_mz_diff``; a frame or a list of frames with the same
    columns) → changed rows with their new counts."""
    from pyspark.sql import functions as F

    if _small(old_files, arrow_rows):
        table = _apply_diff_arrow(diff, old_files, columns, spark_types)
    else:
        if isinstance(diff, list):
            diff = functools.reduce(lambda a, b: a.unionAll(b), diff)
        diff = canonical(diff, columns, spark_types, [DIFF])
        cols = [f"`{c}`" for c in columns]
        summed = (diff.groupBy(*cols).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
                  .withColumn(KEY, key_column(diff, columns)))
        old = _old(old_files, old_schema_ddl).select(KEY, COUNT)
        joined = summed.join(old, KEY, "left")
        new_count = F.coalesce(F.col(COUNT), F.lit(0)) + F.col(DIFF)
        out = joined.select(*[F.col(c) for c in cols], F.col(KEY), new_count.alias(COUNT))
        table = collect_arrow(out)
    return checked(table)


def checked(table: pa.Table) -> pa.Table:
    if table.num_rows and pa.compute.min(table.column(COUNT)).as_py() < 0:
        raise Error("internal error: a maintained row's count went negative; the index "
                    "no longer matches its inputs (run a full refresh)")
    return table
