"""The Reduce rule's kept state: a top GROUP BY whose aggregates accumulate.

COUNT, SUM and AVG are sums over the input rows, so a batch's changes become
per-group partial sums (``Σ diff``, ``Σ x·diff``, ``Σ diff where x is not NULL``)
that add to the partials kept in the state shard. MIN and MAX merge the same way
while a batch only inserts; a batch that retracts recomputes them for its
affected groups (hierarchical MIN/MAX in the small). Only the groups a batch
touches are read from the state; the operators above the GROUP BY (HAVING, the
SELECT list, a top-k: the *chain*) then give the output's changes: the affected
groups' rows after, minus the same groups' rows before. A global top-k re-ranks
the groups the batch changed against its candidates, kept with the state
(``topk_state``); without usable candidates, and for a top-k per group, it ranks
every group's partials (the state, not the input). Either way its rows are diffed
against the index by the tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.engine.diffs import key_column
from mzflow.engine.frames import DIFF, sql
from mzflow.engine.spark import average_sql, collect_arrow, from_arrow
from mzflow.incremental.modes import Mode, Side
from mzflow.incremental.rules.base import Context, Variant, VariantTick
from mzflow.incremental.rules.reduce import accumulable
from mzflow.incremental.rules.topk_state import KEPT, Candidates, Ranking
from mzflow.plan import ir
from mzflow.storage.delta import GONE, KEY, ROWS, SEQ, StateShard

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from mzflow.incremental.dataflow import Dataflow


def state_chain(root: ir.Node) -> tuple[tuple[ir.Node, ...], ir.Reduce] | None:
    """``root`` = Map/Filter/TopK operators over a Reduce whose aggregates accumulate."""
    chain: list[ir.Node] = []
    node = root
    while isinstance(node, ir.Map | ir.Filter | ir.TopK):
        chain.append(node)
        node = node.input
    if (isinstance(node, ir.Reduce) and node.aggs and all(accumulable(a) for a in node.aggs)
            and sum(isinstance(n, ir.TopK) for n in chain) <= 1):
        return tuple(chain), node
    return None


@dataclass
class StateResult:
    groups: pa.Table  # the affected groups' new partials (ROWS = 0: gone), with KEY
    output: DataFrame  # output changes (with DIFF), or the full output if ``full``
    full: bool
    parts: tuple[DataFrame, ...] = ()  # ``output`` as the frames it is the union of, if any
    candidates: Candidates | None = None  # a global top-k's, committed with the groups


# State rows this process's ticks looked up or scanned (tests count them). A lookup
# counts the rows it returned, answered from the state this process holds in memory
# (the rows read from the state's files to load or catch it up: STATE_ROWS_LOADED).
STATE_ROWS_READ = [0]
_RANK = "_mz_rank"


class KeptState:
    """The state shard as one tick sees it: the partials as of the tick's start (none
    for a rebuild, which recomputes every group), then one idempotent commit."""

    def __init__(self, shard: StateShard, since: int, rebuild: bool):
        self.shard = shard
        self.version = (shard.version_at(since) if shard.exists() and not rebuild
                        else None)
        self.files = shard.files(self.version) if self.version is not None else None
        self.rebuild = rebuild

    def stale(self) -> pa.Array | None:
        """Keys of the groups that state commits after the tick's start changed: a tick
        that failed after its state commit (before its index commit) left them, and
        this tick, which starts where the index is, must put them back as they were
        unless its own batch rewrites them anyway (None: no such commit)."""
        if self.version is None:
            return None
        latest = self.shard.version()
        if latest <= self.version:
            return None
        keys = self.shard.diffs(self.version, latest).column(KEY)
        return pc.unique(keys.combine_chunks().cast(pa.string()))

    def key_values(self, keys: pa.Array, columns: list[str]) -> pa.Table:
        """The group columns of ``keys`` from the state, at the tick's start or now."""
        assert self.version is not None
        found = [self.shard.rows_with_keys(v, keys).select([*columns, KEY])
                 for v in (self.version, self.shard.version())]
        both = pa.concat_tables([t.cast(found[0].schema) for t in found])
        firsts = pc.index_in(keys, value_set=both.column(KEY).cast(pa.string()))
        return both.take(firsts)

    def rows(self, keys: pa.Array) -> pa.Table | None:
        if self.version is None:
            return None
        found = self.shard.rows_with_keys(self.version, keys)
        STATE_ROWS_READ[0] += found.num_rows
        return found

    def every(self) -> pa.Table | None:
        """Every live group at the tick's start, when this process holds the state in
        memory (None: it does not, or there is none)."""
        if self.version is None:
            return None
        held = self.shard.newest(self.version)
        if held is None:
            return None
        rows = held.every()
        STATE_ROWS_READ[0] += rows.num_rows
        return rows.drop_columns([c for c in (SEQ, GONE) if c in rows.column_names])

    def scan(self, spark: SparkSession, columns: Sequence[str]) -> DataFrame | None:
        """Every group's partials (a Spark read of the state's files), or None. The
        state is a log: the rows appended since its last overwrite (few, until
        compaction collapses them) are reduced to each key's newest, tombstones
        dropped, and replace the base's rows of those keys."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if not self.files:
            return None
        assert self.version is not None
        actions = self.shard.add_actions(self.version)
        STATE_ROWS_READ[0] += int(pc.sum(actions.column("num_records")).as_py() or 0)
        wanted = [F.col(f"`{c}`") for c in columns]
        base, later = self.shard.layout(self.version)
        if not later:
            return spark.read.parquet(*base).select(*wanted)
        appended = spark.read.option("mergeSchema", "true").parquet(*later)
        seq = F.col(SEQ) if SEQ in appended.columns else F.lit(-1)
        gone = F.col(GONE) if GONE in appended.columns else F.lit(False)
        newest = (appended.withColumn(_RANK, F.row_number().over(
            Window.partitionBy(KEY).orderBy(F.coalesce(seq, F.lit(-1)).desc())))
                  .where(F.col(_RANK) == 1))
        live = newest.where(~F.coalesce(gone, F.lit(False))).select(*wanted)
        if not base:
            return live
        kept = spark.read.parquet(*base).join(newest.select(KEY), KEY, "left_anti")
        return kept.select(*wanted).unionByName(live)

    def candidates(self) -> Candidates | None:
        """The top-k candidates the state's version at the tick's start was committed
        with (None: none, or a rebuild)."""
        if self.version is None:
            return None
        return Candidates.of(self.shard.commit_metadata(self.version))

    def commit(self, node: ir.Reduce, result: StateResult, at: int, app_id: str) -> None:
        """Append the tick's groups (or replace every group on a rebuild), with the
        top-k's candidates in the same commit, before the index commit; a retried tick
        finds its time applied and skips the write (the commit's candidates are the
        first attempt's, as valid for that state as the retry's)."""
        if self.shard.exists() and (self.shard.applied(app_id) or -1) >= at:
            return
        extra = result.candidates.metadata() if result.candidates is not None else None
        if self.rebuild:
            groups = result.groups
            if node.keys:
                groups = groups.filter(pc.not_equal(groups.column(ROWS), 0))
            self.shard.replace_groups(groups, at, app_id, extra)
        elif result.groups.num_rows:
            self.shard.append_groups(result.groups, at, app_id, keep_empty=not node.keys,
                                     extra=extra)


def _parts(node: ir.Reduce) -> list[tuple[str, exp.Expr | None, str]]:
    """(state column, argument, role) for each aggregate's partials."""
    out: list[tuple[str, exp.Expr | None, str]] = []
    for i, agg in enumerate(node.aggs):
        arg = agg.this if not isinstance(agg.this, exp.Star) else None
        if isinstance(agg, exp.Count):
            if arg is not None:
                out.append((f"_n{i}", arg, "n"))
        elif isinstance(agg, exp.Min | exp.Max):
            out.append((f"_m{i}", arg, "min" if isinstance(agg, exp.Min) else "max"))
        else:
            out.append((f"_s{i}", arg, "s"))
            out.append((f"_n{i}", arg, "n"))
    return out


def run(flow: Dataflow, chain: Sequence[ir.Node], node: ir.Reduce, state: KeptState, *,
        topk_margin: int) -> StateResult | None:
    """None when no input changed (nothing to merge, no output change).

    One Spark job sums the batch per group; the affected groups' partials are then
    looked up and merged in Arrow (they are few), so the output's changes are
    computed from local data and the state is never scanned, unless a top-k has no
    usable candidates (``topk_state``) and ranks every group."""
    from pyspark.sql import functions as F

    spark = flow.spark
    nkeys = len(node.keys)
    keys = list(node.columns[:nkeys])
    parts = _parts(node)
    if state.rebuild:
        return _rebuild(flow, chain, node, keys, parts, topk_margin)
    d = flow.delta(node.input)
    stale = state.stale()
    if d is None and stale is None:
        return None
    if d is None:  # nothing new, but groups a failed tick left to put back
        d = flow.full(node.input, Side.NEW).limit(0).withColumn(DIFF, F.lit(1).cast("bigint"))
    batch_df = _partials(node, d, keys, parts)
    batch = collect_arrow(batch_df)
    if keys:
        batch = batch.filter(pc.is_valid(batch.column(ROWS)))
    if stale is not None and keys:
        batch = _with_stale(batch, stale, state, keys, parts)
    if batch.num_rows == 0:
        return None
    retracts = (pc.min(batch.column(_LEAST_DIFF)).as_py() or 0) < 0
    batch = batch.drop_columns([_LEAST_DIFF])
    extremes = [p for p in parts if p[2] in ("min", "max")]
    if extremes and retracts:
        batch = _recompute_extremes(flow, node, batch, keys, extremes)
    partials = [ROWS] + [p[0] for p in parts]
    ranking = (Ranking.of(chain, bool(keys), topk_margin)
               if any(isinstance(n, ir.TopK) for n in chain) else None)
    changed = batch.column(KEY).combine_chunks().cast(pa.string())
    last = state.candidates() if ranking else None
    unchanged = ranking.unchanged(last, changed) if ranking else None
    # One lookup: the changed groups' partials, and the unchanged candidates'.
    found = state.rows(changed if unchanged is None else pa.concat_arrays(
        [changed, unchanged]))
    if found is None:
        found = batch.schema.empty_table()
    groups, old = merge(batch, found, keys, parts, changed, retracts)
    new = from_arrow(groups)
    live = new if not keys else new.where(F.col(ROWS) != 0)
    before_df = from_arrow(old) if old.num_rows else new.limit(0)
    if ranking is not None:
        kept = (found.filter(pc.is_in(found.column(KEY), value_set=unchanged))
                if unchanged is not None else None)
        if last is not None and kept is not None and kept.num_rows == len(unchanged or ()):
            # Few rows (candidates and changed groups): ranked from the driver's copy.
            live_rows = groups.filter(pc.not_equal(groups.column(ROWS), 0))
            rows = pa.concat_tables([
                kept.cast(groups.schema).append_column(
                    KEPT, pa.repeat(pa.scalar(True), kept.num_rows)),
                live_rows.append_column(KEPT, pa.repeat(pa.scalar(False), live_rows.num_rows))])
            df = (from_arrow(rows) if rows.num_rows
                  else new.limit(0).withColumn(KEPT, F.lit(False)))
            output, candidates = ranking.rank(_finalize(node, df, (KEY, KEPT)),
                                              kept.num_rows, last.complete)
        else:  # every group ranked once; the candidates seeded again
            everything = _everything(spark, state, keys + partials + [KEY], new, live)
            output, candidates = ranking.rank(
                _finalize(node, everything.withColumn(KEPT, F.lit(False)), (KEY, KEPT)),
                None, False)
        return StateResult(groups, output, full=True, candidates=candidates)
    if any(isinstance(n, ir.TopK) for n in chain):  # per group, or keeping no candidates
        everything = _everything(spark, state, keys + partials + [KEY], new, live)
        return StateResult(groups, _above(chain, _finalize(node, everything)), full=True)
    after = _above(chain, _finalize(node, live)).withColumn(DIFF, F.lit(1).cast("bigint"))
    before = _above(chain, _finalize(node, before_df)).withColumn(
        DIFF, F.lit(-1).cast("bigint"))
    return StateResult(groups, after.unionAll(before), full=False, parts=(after, before))


def merge(batch: pa.Table, found: pa.Table, keys: list[str],
          parts: list[tuple[str, exp.Expr | None, str]], changed: pa.Array, retracts: bool
          ) -> tuple[pa.Table, pa.Table]:
    """The changed groups' partials after the batch (``groups``, with KEY) and before
    it (``old``: those the state held): the batch's partials added to the state's
    (``found``), in Arrow, on either executor."""
    partials = [ROWS] + [p[0] for p in parts]
    found = found.select(keys + partials + [KEY]).cast(batch.schema)
    old = found.filter(pc.is_in(found.column(KEY), value_set=changed))
    joined = batch.join(old.select([KEY] + partials), keys=KEY, join_type="left outer",
                        right_suffix="_old", use_threads=False)
    merged = joined.select(keys + [KEY])
    roles = {p[0]: p[2] for p in parts}
    for c in partials:
        kind = batch.schema.field(c).type
        if roles.get(c) in ("min", "max"):
            merged = merged.append_column(c, _extreme(joined, c, roles[c], retracts))
            continue
        # Arrow widens decimal sums by one digit of precision, past decimal128's 38.
        wide = pa.decimal256(75, kind.scale) if pa.types.is_decimal(kind) else kind
        a = pc.coalesce(joined.column(c), pa.scalar(0, kind)).cast(wide)
        b = pc.coalesce(joined.column(f"{c}_old"), pa.scalar(0, kind)).cast(wide)
        merged = merged.append_column(c, pc.add_checked(a, b).cast(kind))
    groups = merged.select(keys + partials + [KEY])
    return groups, old


_LEAST_DIFF = "_mz_least_diff"


def _partials(node: ir.Reduce, d: DataFrame, keys: list[str],
              parts: list[tuple[str, exp.Expr | None, str]]) -> DataFrame:
    """Per group of the changes ``d`` (rows with a DIFF): the partials they add."""
    from pyspark.sql import functions as F

    sums = [F.sum(F.col(DIFF)).alias(ROWS), F.min(F.col(DIFF)).alias(_LEAST_DIFF)]
    for name, arg, role in parts:
        assert arg is not None
        if role in ("min", "max"):
            sums.append((F.min if role == "min" else F.max)(F.expr(sql(arg))).alias(name))
        elif role == "s":
            sums.append(F.sum(F.expr(f"({sql(arg)}) * `{DIFF}`")).alias(name))
        else:
            sums.append(F.sum(F.when(F.expr(sql(arg)).isNotNull(), F.col(DIFF))
                              .otherwise(F.lit(0))).alias(name))
    key_cols = [F.expr(sql(k)).alias(n) for k, n in zip(node.keys, keys, strict=True)]
    out = d.groupBy(*key_cols).agg(*sums) if keys else d.agg(*sums)
    return out.withColumn(KEY, key_column(out, keys) if keys else F.lit("global"))


def _rebuild(flow: Dataflow, chain: Sequence[ir.Node], node: ir.Reduce, keys: list[str],
             parts: list[tuple[str, exp.Expr | None, str]], topk_margin: int) -> StateResult:
    """Every group's partials from the input at the new time, and the output from
    them: a recompute's work once, plus writing the state. The input is read as a
    query (never as a delta join from an empty past, which restricts each input by
    the keys of everything). The partials are computed once (a local checkpoint,
    freed with the frame): the state's rows and the output both read them."""
    from pyspark.sql import functions as F

    rows = flow.full(node.input, Side.NEW).withColumn(DIFF, F.lit(1).cast("bigint"))
    computed = _partials(node, rows, keys, parts).drop(_LEAST_DIFF)
    if keys:
        computed = computed.where(F.col(ROWS) != 0)
    else:  # the one group of a global aggregate, even over no rows: counts are 0
        for c in [ROWS] + [name for name, _, role in parts if role == "n"]:
            computed = computed.withColumn(c, F.coalesce(F.col(c), F.lit(0).cast("bigint")))
    live = computed.localCheckpoint(eager=True)
    groups = collect_arrow(live)  # nullable like the merges' rows, which later ticks write
    groups = groups.cast(pa.schema([f.with_nullable(True) for f in groups.schema]))
    ranking = (Ranking.of(chain, bool(keys), topk_margin)
               if any(isinstance(n, ir.TopK) for n in chain) else None)
    if ranking is not None:  # the candidates seeded for the next ticks
        output, candidates = ranking.rank(
            _finalize(node, live.withColumn(KEPT, F.lit(False)), (KEY, KEPT)), None, False)
        return StateResult(groups, output, full=True, candidates=candidates)
    return StateResult(groups, _above(chain, _finalize(node, live)), full=True)


def _with_stale(batch: pa.Table, stale: pa.Array, state: KeptState, keys: list[str],
                parts: list[tuple[str, exp.Expr | None, str]]) -> pa.Table:
    """``batch`` plus an empty change for each stale group it lacks: merged with the
    group's partials at the tick's start, it writes them back (or removes a group the
    failed tick added), and its output change is nothing."""
    missing = stale.filter(pc.invert(pc.is_in(stale, value_set=batch.column(KEY).cast(
        pa.string()))))
    if len(missing) == 0:
        return batch
    rows = state.key_values(missing, keys)
    n = rows.num_rows
    roles = {name: role for name, _, role in parts}
    columns = []
    for f in batch.schema:
        if f.name in keys or f.name == KEY:
            columns.append(rows.column(f.name).cast(f.type))
        elif roles.get(f.name) in ("min", "max"):
            columns.append(pa.nulls(n, f.type))
        else:  # ROWS, the least diff, sums and counts: nothing changed
            columns.append(pa.array([0] * n).cast(f.type))
    return pa.concat_tables([batch, pa.table(columns, schema=batch.schema)])


def _everything(spark: SparkSession, state: KeptState, columns: list[str], new: DataFrame,
                live: DataFrame) -> DataFrame:
    """Every group's partials after the batch: the state's, the changed ones replaced."""
    rest = state.scan(spark, columns)
    if rest is None:
        return live
    return rest.join(new.select(KEY), KEY, "left_anti").unionByName(live)


def _extreme(joined: pa.Table, c: str, role: str, recomputed: bool) -> pa.Array:
    """A group's new MIN/MAX: the batch's (recomputed over the group's rows) when the
    batch retracted rows, else the extreme of the kept value and the batch's."""
    batch = joined.column(c)
    if recomputed:
        return batch.combine_chunks() if isinstance(batch, pa.ChunkedArray) else batch
    both = (pc.min_element_wise if role == "min" else pc.max_element_wise)(
        batch, joined.column(f"{c}_old"), skip_nulls=True)
    return both.cast(batch.type)


def _recompute_extremes(flow: Dataflow, node: ir.Reduce, batch: pa.Table, keys: list[str],
                        extremes: list[tuple[str, exp.Expr | None, str]]) -> pa.Table:
    """MIN/MAX after a retraction: read the affected groups' rows at the new time (the
    restriction prunes files by key) and take the extremes afresh."""
    from pyspark.sql import functions as F

    r = None
    if keys:
        wanted = from_arrow(batch.select(keys))
        r = flow.restriction(tuple(node.keys), wanted)
    rows = flow.full(node.input, Side.NEW, r)
    aggs = [(F.min if role == "min" else F.max)(F.expr(sql(arg))).alias(name)
            for name, arg, role in extremes if arg is not None]
    key_cols = [F.expr(sql(k)).alias(n) for k, n in zip(node.keys, keys, strict=True)]
    fresh = rows.groupBy(*key_cols).agg(*aggs) if keys else rows.agg(*aggs)
    fresh = fresh.withColumn(KEY, key_column(fresh, keys) if keys else F.lit("global"))
    values = collect_arrow(fresh.select(KEY, *[name for name, _, _ in extremes]))
    names = [name for name, _, _ in extremes]
    out = batch.drop_columns(names).join(values, keys=KEY, join_type="left outer",
                                         use_threads=False)
    return out.select(batch.column_names).cast(batch.schema)


def _finalize(node: ir.Reduce, state: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
    """Partials → the GROUP BY's output columns (and the ``carry`` columns as they are)."""
    nkeys = len(node.keys)
    exprs = [f"`{k}`" for k in node.columns[:nkeys]]
    for i, agg in enumerate(node.aggs):
        if isinstance(agg, exp.Count):
            exprs.append(f"`{ROWS}`" if isinstance(agg.this, exp.Star) else f"`_n{i}`")
        elif isinstance(agg, exp.Min | exp.Max):
            exprs.append(f"`_m{i}`")
        elif isinstance(agg, exp.Sum):
            exprs.append(f"CASE WHEN `_n{i}` = 0 THEN NULL ELSE `_s{i}` END")
        else:  # AVG
            assert isinstance(agg, exp.Avg)
            exprs.append(f"CASE WHEN `_n{i}` = 0 THEN NULL ELSE "
                         f"{average_sql(f'_s{i}', f'_n{i}', agg)} END")
    return state.selectExpr(*[f"{e} AS `{n}`" for e, n in zip(exprs, node.columns,
                                                               strict=True)],
                            *[f"`{c}`" for c in carry])


def _above(chain: Sequence[ir.Node], df: DataFrame) -> DataFrame:
    """The chain's operators (outermost first) applied to the groups' output."""
    from mzflow.incremental.rules import rule_for

    for op in reversed(chain):
        df = rule_for(op).apply(op, df)
    return df


class StateVariant(Variant):
    """State mode, registered in ``rules/__init__.py``: a top GROUP BY whose aggregates
    accumulate, under Map/Filter/at most one TopK, keeps its partials in a state shard."""

    mode = Mode.STATE

    def claim(self, root: ir.Node) -> Context | None:
        found = state_chain(root)
        return None if found is None else Context(state_reduce=found[1], chain=found[0])

    def tick(self, flow: Dataflow, ctx: Context, store: Path, since: int, rebuild: bool,
             topk_margin: int) -> VariantTick | None:
        reduce = ctx.state_reduce
        assert reduce is not None
        state = KeptState(StateShard(store), since, rebuild)
        result = run(flow, ctx.chain, reduce, state, topk_margin=topk_margin)
        if result is None:
            return None
        return VariantTick(result.output, result.full, result.parts,
                           lambda at, app_id: state.commit(reduce, result, at, app_id))


VARIANT = StateVariant()
