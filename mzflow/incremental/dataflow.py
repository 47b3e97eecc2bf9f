"""One tick's dataflow: the inputs as the tick sees them, and dispatch to the rules.

``full(node, side, restriction)`` is a node's contents at the tick's old or new
time, optionally only the rows whose restriction expressions take one of a set
of key values; ``delta(node)`` is its changes between the two times, as rows with
a ``_mz_diff`` column. Both dispatch to the node's rule (``rules/``): this module
only holds what every rule shares (inputs, key restrictions, counters) and never
decides how an operator is maintained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from mzflow.engine.frames import DIFF, sql
from mzflow.incremental.modes import Side
from mzflow.incremental.rules import rule_for
from mzflow.plan.ir import Node

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Input:
    """One base table as the tick sees it."""

    files: dict[Side, tuple[str, ...] | None]  # side → Parquet files (None: did not exist)
    # side → a loader of its Delta add actions (file statistics; None: no version)
    stats: dict[Side, Callable[[], pa.Table | None]]
    schema_ddl: str
    # → (change rows with DIFF as Arrow or a DataFrame, rows read); None: unchanged
    changes: Callable[[], tuple[pa.Table | DataFrame, int]] | None
    num_rows: dict[Side, Callable[[Sequence[str]], int]] = field(default_factory=dict)
    versions: dict[Side, int | None] = field(default_factory=dict)  # side → table version
    # stored column → its arrangement (maintain/tick/arrange.py: Arranged): key lookups
    arranged: dict[str, Any] = field(default_factory=dict)
    # the table's Arrow schema at the new time (the in-process executor's empty reads)
    arrow_schema: Callable[[], pa.Schema] | None = None


@dataclass
class Restriction:
    """Rows whose ``exprs`` (over the node's columns) equal one of ``keys``' rows."""

    exprs: tuple[exp.Expr, ...]
    # DataFrame with columns k0..kn, or a maker of it: most restrictions end in a
    # lookup or a pruned scan by ``values`` and never need the frame (~50 ms to build)
    source: DataFrame | Callable[[], DataFrame]
    values: list[tuple[Any, ...]] | None  # the same, collected (None: too many)

    @property
    def keys(self) -> DataFrame:
        if callable(self.source):
            self.source = self.source()
        return self.source

    def over(self, exprs: tuple[exp.Expr, ...]) -> Restriction:
        """The same keys, matched by other expressions (the restriction moved to an
        input whose columns compute them)."""
        return Restriction(exprs, lambda: self.keys, self.values)


class Dataflow:
    def __init__(self, spark: SparkSession, inputs: dict[str, Input], collect_limit: int = 100_000,
                 isin_limit: int = 2_000):
        self.spark = spark
        self.inputs = inputs  # by Get.ref
        self.collect_limit = collect_limit  # affected keys collected to prune files
        self.isin_limit = isin_limit  # key values also pushed into the scan as IN
        self.rows_read = 0
        self.files_read = 0
        self.lookups: list[tuple[str, Side, int, int]] = []  # (arrangement, side, keys, rows)
        self._deltas: dict[int, DataFrame] = {}
        # Frames whose rows this process holds as Arrow (change feeds, arrangement
        # lookups), by id (the frame kept with them, so the id is not reused): keys
        # taken from them need no round trip to Spark, which re-sends the rows with the
        # plan (a q03 tick on a cluster's server spent 0.38 s of 1.45 s in four).
        self._held: dict[int, tuple[DataFrame, pa.Table]] = {}
        self.keys_held = 0  # restrictions whose keys came from rows held here

    def changed(self, node: Node) -> bool:
        return any(self.inputs[g.ref].changes is not None for g in node.gets())

    def full(self, node: Node, side: Side, r: Restriction | None = None) -> DataFrame:
        return rule_for(node).full(self, node, side, r)

    def delta(self, node: Node) -> DataFrame | None:
        """Changes between the two times (None: statically none)."""
        if not self.changed(node):
            return None
        if id(node) not in self._deltas:
            self._deltas[id(node)] = rule_for(node).delta(self, node)
        return self._deltas[id(node)]

    def changes(self, node: Node) -> DataFrame:
        """``delta`` of an input its parent only asks for when that input changed."""
        d = self.delta(node)
        assert d is not None
        return d

    # -- what rules share ----------------------------------------------------------------

    def restrict(self, df: DataFrame, r: Restriction | None) -> DataFrame:
        """Apply a restriction at a node's output, when it could not be pushed down."""
        if r is None:
            return df
        from pyspark.sql import functions as F

        keys = r.keys.toDF(*[f"_mz_k{i}" for i in range(len(r.exprs))])
        cond = None
        for i, e in enumerate(r.exprs):
            c = F.expr(sql(e)).eqNullSafe(F.col(f"_mz_k{i}"))
            cond = c if cond is None else cond & c
        return df.join(keys, cond, "left_semi")

    def restriction(self, exprs: tuple[exp.Expr, ...], keys: DataFrame) -> Restriction:
        """The keys collected (when at most ``collect_limit``) so that reads can prune
        by them. Keys computed from local rows (change feeds, arrangement lookups)
        collect without a Spark job; a DISTINCT here would add one, so duplicates are
        dropped on the driver."""
        keys = keys.toDF(*[f"k{i}" for i in range(len(exprs))])
        rows = keys.limit(self.collect_limit + 1).collect()
        if len(rows) > self.collect_limit:
            return Restriction(exprs, keys.distinct(), None)
        values = list(dict.fromkeys(tuple(row) for row in rows))
        return Restriction(exprs, lambda: (self.spark.createDataFrame(values, keys.schema)
                                           if values else keys.limit(0)), values)

    def held(self, df: DataFrame, rows: pa.Table) -> DataFrame:
        """``df``, noted as having ``rows`` (the same columns, in order, and values)."""
        self._held[id(df)] = (df, rows)
        return df

    def rows_held(self, df: DataFrame) -> pa.Table | None:
        held = self._held.get(id(df))
        return held[1] if held is not None and held[0] is df else None

    def held_from(self, out: DataFrame, below: DataFrame,
                  rows_of: Callable[[pa.Table], pa.Table]) -> DataFrame:
        """``out``, a frame computed from ``below``, noted with its rows too when this
        process holds ``below``'s and ``rows_of`` computes them from those (a row-by-row
        operator evaluated in process). Any failure there leaves ``out`` alone: the rows
        only save round trips, Spark has them."""
        rows = self.rows_held(below)
        if rows is None:
            return out
        try:
            return self.held(out, rows_of(rows))
        except Exception:  # noqa: BLE001 - see above
            return out

    def key_restriction(self, exprs: tuple[exp.Expr, ...], df: DataFrame,
                        columns: Sequence[str]) -> Restriction:
        """``restriction(exprs, picked(df, columns))``, its keys taken from the rows
        this process holds when it holds ``df``'s and they compare in Python as Spark's
        collect would give them (integers, strings, dates, decimals, booleans)."""
        from mzflow.engine.frames import picked

        rows = self.rows_held(df)
        if rows is None or not all(_exact(rows.schema.field(c).type) for c in columns):
            return self.restriction(exprs, picked(df, columns))
        values = list(dict.fromkeys(zip(*(rows.column(c).to_pylist() for c in columns),
                                          strict=True)))

        def keys() -> DataFrame:
            return picked(df, columns).toDF(*[f"k{i}" for i in range(len(exprs))])

        self.keys_held += 1
        if len(values) > self.collect_limit:
            return Restriction(exprs, lambda: keys().distinct(), None)
        return Restriction(exprs, lambda: (self.spark.createDataFrame(values, keys().schema)
                                           if values else keys().limit(0)), values)

    def recompute_diff(self, node: Node, r: Restriction | None = None) -> DataFrame:
        """The node's contents at the new time (+1) and the old (-1): its changes, for
        every row or only the restricted ones."""
        from pyspark.sql import functions as F

        new = self.full(node, Side.NEW, r).withColumn(DIFF, F.lit(1).cast("bigint"))
        old = self.full(node, Side.OLD, r).withColumn(DIFF, F.lit(-1).cast("bigint"))
        return new.unionAll(old)

    def keyed(self, node: Node, key_exprs: tuple[exp.Expr, ...], keys: DataFrame
              ) -> DataFrame:
        """Recompute the output rows whose key is among ``keys`` at both times."""
        return self.recompute_diff(node, self.restriction(key_exprs, keys))


def _exact(t: pa.DataType) -> bool:
    import pyarrow as pa

    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or t == pa.string_view() or pa.types.is_date32(t) or pa.types.is_decimal(t)
            or pa.types.is_boolean(t))
