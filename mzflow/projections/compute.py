"""A projection's rows of a table's parts (data files): in Arrow where it can, without a
Spark job (a sorted projection without WHERE, an aggregate one the Arrow evaluator
covers), else one Spark job over the files. A write's upkeep (write.py), MATERIALIZE
(manage.py) and a read of parts without stored rows (route.py) all compute them here.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow import caches
from mzflow.catalog.model import ROWID, Item
from mzflow.projections import shape as shapes
from mzflow.projections.shape import AGGREGATE, Shape
from mzflow.projections.store import PART, part_name, read_keys
from mzflow.storage.rows import plain_strings
from mzflow.storage.types import spark_ddl

_seq = itertools.count()


def _source(table: Item, s: Shape, files: list[str]) -> Any:
    """A DataFrame of ``files`` with the projection's table version's columns and each
    row's part."""
    from pyspark.sql import functions as F

    from mzflow.engine.spark import session

    all_cols = [(c.name, c.type) for c in table.columns] + [(ROWID, "bigint")]
    visible = [c.name for c in table.columns_at(s.version)]
    ddl = spark_ddl(all_cols)
    df = (session().read.schema(ddl).parquet(*files) if files
          else session().createDataFrame([], ddl))
    name = F.element_at(F.split(F.input_file_name(), "/"), -1)
    return df.select(*[F.col(f"`{c}`") for c in visible], name.alias(PART))


def compute(table: Item, s: Shape, files: list[str],
            in_memory: dict[str, pa.Table] | None = None) -> pa.Table:
    """The projection's rows of the parts ``files`` (one Spark job; none for a sorted
    projection without WHERE, whose rows are the files' columns, sorted, nor for an
    aggregate one the Arrow evaluator covers). ``in_memory``: files whose rows are at
    hand (just written)."""
    from mzflow.engine import spark

    if s.kind == shapes.SORTED and not s.where and files:
        return sorted_rows(s, files, in_memory or {})
    if s.kind == AGGREGATE and files:
        rows = aggregate_rows(table, s, files, in_memory or {})
        if rows is not None:
            return plain(rows)

    view = f"mz_projsrc_{s.projection.id}_{next(_seq)}"
    _source(table, s, files).createOrReplaceTempView(view)
    try:
        sql = spark.to_spark_sql(shapes.partial_query(s, view), {})
        # A write's new parts are small: one job, not one per adaptive stage.
        with spark.few_jobs():
            out = spark.to_arrow(spark.session().sql(sql))
    finally:
        spark.session().catalog.dropTempView(view)
    if s.kind == shapes.SORTED:
        out = out.sort_by([(c, "ascending") for c in s.order])
    return plain(out)


def _file_columns(f: str, in_memory: dict[str, pa.Table], columns: list[str]
                  ) -> pa.Table | None:
    """``columns`` of a file's rows at hand, those it has (None: read it)."""
    rows = in_memory.get(f)
    if rows is None:
        return None
    return plain_strings(rows.select([c for c in columns if c in rows.column_names]))


def sorted_rows(s: Shape, files: list[str], in_memory: dict[str, pa.Table]) -> pa.Table:
    """A sorted projection's rows of ``files``, read in Arrow: a write's new parts cost
    no Spark job (a 1 % INSERT into lineitem: 0.08 s, and a Spark job ~0.2 s more)."""
    columns = list(s.columns)
    pieces = []
    for f in files:
        rows = _file_columns(f, in_memory, columns)
        if rows is None:
            rows, _ = read_keys([f], s.order[0], None, columns, base=True)
        pieces.append(rows.add_column(0, PART, pa.array([part_name(f)] * rows.num_rows,
                                                        pa.string())))
    rows = pa.concat_tables(pieces, promote_options="permissive")
    return plain(rows.sort_by([(c, "ascending") for c in s.order]))


def aggregate_rows(table: Item, s: Shape, files: list[str],
                    in_memory: dict[str, pa.Table]) -> pa.Table | None:
    """An aggregate projection's partials of ``files``, computed in Arrow per file (no
    Spark job: a 1 % INSERT into lineitem paid ~0.2-0.35 s per projection for one).
    None when an expression is beyond the Arrow evaluator: Spark computes those."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mzflow.engine import arrow_expr
    from mzflow.storage.types import parse_type

    planned = _arrow_plan(table, s)
    if planned is None:  # beyond the evaluator (or an expression it types otherwise): Spark
        return None
    types, where, key_exprs, args, needed = planned
    keys = list(s.key_columns)
    pieces = []
    for f in files:
        data = _file_columns(f, in_memory, needed)
        if data is None:
            path = f.removeprefix("file://")
            present = set(pq.read_schema(path).names)
            data = plain_strings(pq.read_table(path, columns=[c for c in needed
                                                              if c in present]))
        present = set(data.column_names)
        for c in needed:  # a column added after this file was written: NULL here
            if c not in present:
                data = data.append_column(c, pa.nulls(data.num_rows,
                                                      parse_type(types[c]).arrow))
        for cond in where:  # WHERE keeps the rows whose condition is true
            data = data.filter(pc.fill_null(arrow_expr.evaluate(cond, data), False))
        columns: dict[str, Any] = {k: arrow_expr.evaluate(e, data, boolean=False)
                                   for k, e in zip(keys, key_exprs, strict=True)}
        if any(pa.types.is_decimal256(v.type) for v in columns.values()):
            return None  # a key wider than Delta's decimals: Spark computes it
        aggs: list[tuple[Any, ...]] = []
        names = []
        for i, (p, arg) in enumerate(zip(s.partials, args, strict=True)):
            names.append(p.column)
            if arg is None:
                aggs.append(([], "count_all"))
                continue
            value = arrow_expr.evaluate(arg, data, boolean=False)
            if pa.types.is_decimal(value.type) and (
                    p.func == "avg_sum" or value.type.precision > 38):
                # As Spark's (and what Delta can store): at most decimal(38, s). The
                # evaluator sizes products by their values, up to decimal256(76, s).
                try:
                    value = pc.cast(value, pa.decimal128(38, min(value.type.scale, 38)))
                except pa.ArrowInvalid:  # a value beyond 38 digits: Spark says how
                    return None
            columns[f"_v{i}"] = value
            aggs.append((f"_v{i}", {"avg_sum": "sum", "count": "count"}.get(p.func, p.func)))
        frame = pa.table({k: _whole(v, data.num_rows) for k, v in columns.items()}
                         ) if columns else pa.table({"_n": pa.nulls(data.num_rows)})
        grouped = frame.group_by(keys, use_threads=False).aggregate(aggs)
        if data.num_rows == 0:  # Spark's GROUP BY part gives such a part no row either
            grouped = grouped.slice(0, 0)  # (a global aggregate's one row): its types
        out = grouped.select([f"{a[0]}_{a[1]}" if a[0] else "count_all" for a in aggs]
                             + keys).rename_columns(names + keys)
        pieces.append(out.add_column(0, PART, pa.array([part_name(f)] * out.num_rows,
                                                       pa.string())))
    if not pieces:
        return None  # no files: let Spark give the empty result its types
    return pa.concat_tables(pieces, promote_options="permissive").select(
        [PART, *keys, *names])


_ArrowPlan = tuple[dict[str, str], list[exp.Expr], list[exp.Expr], list[exp.Expr | None],
                   list[str]]
# None: the Arrow path cannot evaluate this projection (Spark does): also remembered.
_ARROW_PLANS = caches.lru("projections.arrow_plans", 256)


def _arrow_plan(table: Item, s: Shape) -> _ArrowPlan | None:
    """What ``aggregate_rows`` evaluates, checked once per projection and table shape
    (the copies and checks were a third of a 1 % INSERT's partials, in Python)."""
    from mzflow.engine import arrow_expr
    from mzflow.errors import Error

    key = (s.projection.id, s.projection.query, table.columns)
    if key in _ARROW_PLANS:
        return _ARROW_PLANS[key]
    types = {c.name: c.type for c in table.columns_at(s.version)}
    # The bound expressions name the table; the Arrow evaluator reads one table's
    # columns by their own names.
    where, key_exprs = [shapes.bare(e) for e in s.where], [shapes.bare(e) for e in s.keys]
    args = [shapes.bare(p.arg) if p.arg is not None else None for p in s.partials]
    plan: _ArrowPlan | None
    try:
        for e in where:
            arrow_expr.check(e, types)
        for e in (*key_exprs, *[a for a in args if a is not None]):
            arrow_expr.check(e, types, boolean=False)
        needed = sorted({c.name for e in (*where, *key_exprs, *[a for a in args if a is not None])
                         for c in e.find_all(exp.Column)})
        plan = (types, where, key_exprs, args, needed)
    except Error:
        plan = None
    _ARROW_PLANS[key] = plan
    return plan


def in_arrow(table: Item, s: Shape) -> bool:
    """Whether a read's parts of aggregate ``s`` projected on the fly are computed in
    Arrow (EXPLAIN; values beyond 38 digits may still need Spark)."""
    return s.kind != AGGREGATE or _arrow_plan(table, s) is not None


def _whole(v: Any, n: int) -> Any:
    """An evaluated expression as a column of ``n`` values (a constant is a scalar)."""
    if isinstance(v, pa.Scalar):
        return pa.array([v.as_py()] * n, v.type)
    return v


def plain(table: pa.Table) -> pa.Table:
    """Types delta-rs writes and reads back alike (no views, no large strings)."""
    fields = []
    for f in table.schema:
        t = f.type
        if t in (pa.string_view(), pa.large_string()):
            t = pa.string()
        fields.append(pa.field(f.name, t, nullable=True))
    return table.cast(pa.schema(fields))


def sort_key(s: Shape) -> str | None:
    return s.order[0] if s.kind == shapes.SORTED else None
