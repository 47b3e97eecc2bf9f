"""State mode in Arrow: ``rules/reduce_state.py``'s tick without Spark.

The batch's partials per group come from Arrow's ``group_by``; they merge with the
kept state exactly as on Spark (``reduce_state.merge``, shared); the output's
changes are the affected groups' rows after minus before, finalized and passed up
the chain here. A global top-k re-ranks its candidates and the changed groups
(``topk_state``'s invariant), sorted in Arrow, or every group of the state held in
memory when the candidates ran out. A rebuild (``rebuild``) runs here when its inputs
fit the process; a top-k per group raises NotLocal: Spark does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.catalog.exprtypes import sqlglot_scale
from mzflow.engine import division, row_keys
from mzflow.engine.arrow_arith import quotient
from mzflow.engine.frames import DIFF
from mzflow.incremental.local import NotLocal
from mzflow.incremental.local.flow import (
    Keys,
    LocalFlow,
    _as_array,
    _evaluate,
    filtered,
    mapped,
)
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.reduce_state import (
    _LEAST_DIFF,
    KeptState,
    StateResult,
    _parts,
    _with_stale,
    merge,
)
from mzflow.incremental.rules.topk_state import KEPT, Candidates, Ranking
from mzflow.plan import ir
from mzflow.storage.delta import KEY, ROWS

Parts = list[tuple[str, exp.Expr | None, str]]


def run(flow: LocalFlow, chain: Sequence[ir.Node], node: ir.Reduce, state: KeptState, *,
        topk_margin: int) -> tuple[StateResult, pa.Table] | None:
    """The tick's StateResult (its frames unused: ``output`` is None) and the output's
    rows in Arrow: changes with DIFF, or, for a top-k, every output row."""
    if state.rebuild:
        return rebuild(flow, chain, node, topk_margin=topk_margin)
    keys = list(node.columns[:len(node.keys)])
    parts = _parts(node)
    d = flow.delta(node.input)
    stale = state.stale()
    if d is None and stale is None:
        return None
    if d is None:
        raise NotLocal("only groups a failed tick left behind changed")
    batch = _partials(node, d, keys, parts, state)
    if keys:
        batch = batch.filter(pc.is_valid(batch.column(ROWS)))
    if stale is not None and keys:
        batch = _with_stale(batch, stale, state, keys, parts)
    if batch.num_rows == 0:
        return None
    retracts = (pc.min(batch.column(_LEAST_DIFF)).as_py() or 0) < 0
    batch = batch.drop_columns([_LEAST_DIFF])
    if retracts and any(role in ("min", "max") for _, _, role in parts):
        batch = _extremes(flow, node, batch, keys, parts)
    ranking = None
    if any(isinstance(n, ir.TopK) for n in chain):
        ranking = Ranking.of(chain, bool(keys), topk_margin)
        if ranking is None:
            raise NotLocal("a top-k without kept candidates ranks every group")
    changed = batch.column(KEY).combine_chunks().cast(pa.string())
    last = state.candidates() if ranking else None
    unchanged = ranking.unchanged(last, changed) if ranking else None
    everything = None
    if ranking is not None and (last is None or unchanged is None):
        # The candidates ran out (a large batch changed most groups): rank every group,
        # from the state held in memory, as the Spark path ranks its scan of the state.
        everything = state.every()
        if everything is None:
            raise NotLocal("a top-k whose candidates ran out ranks every group, and the "
                           "state is not held in memory")
    found = state.rows(changed if unchanged is None else pa.concat_arrays([changed, unchanged]))
    if found is None:
        found = batch.schema.empty_table()
    groups, old = merge(batch, found, keys, parts, changed, retracts)
    live = groups.filter(pc.not_equal(groups.column(ROWS), 0)) if keys else groups
    if ranking is not None and everything is not None:
        rest = everything.filter(pc.invert(pc.is_in(everything.column(KEY).cast(pa.string()),
                                                    value_set=changed)))
        rows = pa.concat_tables([rest.select(groups.column_names).cast(groups.schema), live])
        rows = rows.append_column(KEPT, pa.array(np.zeros(rows.num_rows, np.bool_)))
        # (unchanged 0, complete: the ranked rows are every group, as on Spark)
        output, candidates = _rank(ranking, finalize(node, rows, (KEY, KEPT)), 0, True)
        return StateResult(groups, None, full=True, candidates=candidates), output  # type: ignore[arg-type]
    if ranking is not None:
        assert last is not None and unchanged is not None
        kept = found.filter(pc.is_in(found.column(KEY), value_set=unchanged))
        if kept.num_rows != len(unchanged):
            raise NotLocal("a top-k candidate is missing from the state")
        rows = pa.concat_tables([
            kept.select(groups.column_names).cast(groups.schema).append_column(
                KEPT, pa.repeat(pa.scalar(True), kept.num_rows)),
            live.append_column(KEPT, pa.repeat(pa.scalar(False), live.num_rows))])
        output, candidates = _rank(ranking, finalize(node, rows, (KEY, KEPT)),
                                   kept.num_rows, last.complete)
        return StateResult(groups, None, full=True, candidates=candidates), output  # type: ignore[arg-type]
    after = above(chain, finalize(node, live))
    before = above(chain, finalize(node, old.cast(groups.schema)))
    out = pa.concat_tables([
        after.append_column(DIFF, pa.array(np.ones(after.num_rows, np.int64))),
        before.append_column(DIFF, pa.array(np.full(before.num_rows, -1, np.int64)))])
    return StateResult(groups, None, full=False), out  # type: ignore[arg-type]


def rebuild(flow: LocalFlow, chain: Sequence[ir.Node], node: ir.Reduce, *, topk_margin: int
            ) -> tuple[StateResult, pa.Table]:
    """Every group's partials from the input at the new time, and every output row
    (``_rebuild`` on Spark): an index's first tick, or a rebuild, when its inputs fit
    the process (``decide.executor``). The partials are typed as Spark's rebuild types
    them, so that either executor's later ticks merge into them."""
    keys = list(node.columns[:len(node.keys)])
    if not keys:  # (one group, empty or not: Spark's path keeps its zero counts)
        raise NotLocal("a GROUP BY without keys is rebuilt on Spark")
    parts = _parts(node)
    rows = flow.full(node.input, Side.NEW)
    d = rows.append_column(DIFF, pa.array(np.ones(rows.num_rows, np.int64)))
    groups = _partials(node, d, keys, parts, None).drop_columns([_LEAST_DIFF])
    groups = groups.filter(pc.not_equal(groups.column(ROWS), 0))
    ranking = (Ranking.of(chain, True, topk_margin)
               if any(isinstance(n, ir.TopK) for n in chain) else None)
    if ranking is not None:  # the candidates seeded for the next ticks
        ranked = groups.append_column(KEPT, pa.array(np.zeros(groups.num_rows, np.bool_)))
        output, candidates = _rank(ranking, finalize(node, ranked, (KEY, KEPT)), 0, True)
        return StateResult(groups, None, full=True, candidates=candidates), output  # type: ignore[arg-type]
    return StateResult(groups, None, full=True), above(chain, finalize(node, groups))  # type: ignore[arg-type]


def _partials(node: ir.Reduce, d: pa.Table, keys: list[str], parts: Parts,
              state: KeptState | None) -> pa.Table:
    """Per group of the changes ``d``: the partials they add, typed as the state keeps
    them (Spark's sums: decimal(38, s), bigint, double), with the state's KEY."""
    diff = d.column(DIFF).combine_chunks()
    cols: dict[str, Any] = {}
    for k, name in zip(node.keys, keys, strict=True):
        cols[name] = _as_array(_evaluate(k, d, boolean=False), d.num_rows)
    cols[ROWS] = diff
    cols[_LEAST_DIFF] = diff
    aggs: list[tuple[str, str]] = [(ROWS, "sum"), (_LEAST_DIFF, "min")]
    for name, arg, role in parts:
        assert arg is not None
        v = _as_array(_evaluate(arg, d, boolean=False), d.num_rows)
        if role in ("min", "max"):
            cols[name] = v
            aggs.append((name, role))
        elif role == "s":
            cols[name] = _times(v, diff)
            aggs.append((name, "sum"))
        else:
            cols[name] = pc.if_else(pc.is_valid(v), diff, pa.scalar(0, pa.int64()))
            aggs.append((name, "sum"))
    table = pa.table(cols)
    if keys:
        out = table.group_by(keys, use_threads=False).aggregate(aggs)
    else:
        out = table.group_by([], use_threads=False).aggregate(aggs)
    out = out.rename_columns([_plain_name(c, aggs) for c in out.column_names])
    out = out.select(keys + [ROWS, _LEAST_DIFF] + [p[0] for p in parts])
    out = _typed_like_state(out, state, keys)
    return out.append_column(KEY, group_keys(node, out, keys))


def group_keys(node: ir.Reduce, out: pa.Table, keys: list[str]) -> pa.Array:
    """The state's KEY of each group: Spark's row key of the group columns."""
    if not keys:
        return pa.array(["global"] * out.num_rows)
    # A computed decimal key's scale is Spark's on the other path: plain ones only.
    types = [_pg(out.schema.field(k).type, isinstance(e, exp.Column))
             for k, e in zip(keys, node.keys, strict=True)]
    found = None if any(t is None for t in types) else row_keys.row_keys(
        out.select(keys), [t for t in types if t is not None])
    if found is None:
        raise NotLocal("a group key's type has no in-process row key", lasting=True)
    return found


def _extremes(flow: LocalFlow, node: ir.Reduce, batch: pa.Table, keys: list[str],
              parts: Parts) -> pa.Table:
    """MIN/MAX after a retraction: the affected groups' rows at the new time (looked
    up by their keys), their extremes taken afresh (``_recompute_extremes`` on Spark)."""
    r = None
    if keys:
        values = list(zip(*[batch.column(k).to_pylist() for k in keys], strict=True))
        r = Keys(tuple(node.keys), values)
    rows = flow.full(node.input, Side.NEW, r)
    extremes = [(name, arg, role) for name, arg, role in parts if role in ("min", "max")]
    cols: dict[str, Any] = {n: _as_array(_evaluate(k, rows, boolean=False), rows.num_rows)
                            for k, n in zip(node.keys, keys, strict=True)}
    for name, arg, _ in extremes:
        assert arg is not None
        cols[name] = _as_array(_evaluate(arg, rows, boolean=False), rows.num_rows)
    table = pa.table(cols) if cols else pa.table({"_": pa.nulls(rows.num_rows)})
    fresh = table.group_by(keys, use_threads=False).aggregate(
        [(name, role) for name, _, role in extremes])
    fresh = fresh.rename_columns([_plain_name(c, [(n, r) for n, _, r in extremes])
                                  for c in fresh.column_names])
    fresh = fresh.append_column(KEY, group_keys(node, fresh, keys))
    names = [name for name, _, _ in extremes]
    out = batch.drop_columns(names).join(fresh.select([KEY, *names]), keys=KEY,
                                         join_type="left outer", use_threads=False)
    return out.select(batch.column_names).cast(batch.schema)


def _plain_name(c: str, aggs: list[tuple[str, str]]) -> str:
    for name, fn in aggs:
        if c == f"{name}_{fn}":
            return name
    return c


def _times(v: pa.Array, diff: pa.Array) -> pa.Array:
    """``v · diff`` (diff is ±1 but for rows a batch inserted or deleted twice)."""
    if pa.types.is_decimal(v.type):
        v = v.cast(pa.decimal128(38, v.type.scale))
        if pc.min(diff).as_py() == 1 and pc.max(diff).as_py() == 1:
            return v  # every row once (a rebuild): decimal arithmetic costs seconds here
        if pc.all(pc.equal(pc.abs(diff), 1)).as_py() is not False:
            return pc.if_else(pc.less(diff, 0), pc.negate_checked(v), v)
        return pc.multiply_checked(v, diff.cast(pa.decimal128(19, 0))).cast(
            pa.decimal128(38, v.type.scale))
    if pa.types.is_integer(v.type):
        return pc.multiply_checked(v.cast(pa.int64()), diff)
    if pa.types.is_floating(v.type):
        return pc.multiply(v.cast(pa.float64()), diff.cast(pa.float64()))
    raise NotLocal(f"a sum of {v.type} in process")


def _typed_like_state(out: pa.Table, state: KeptState | None, keys: list[str]) -> pa.Table:
    """The partials cast to the state's stored types, so that merging and the state's
    commit see the same schema as a Spark tick's (a fresh state: Spark's own types)."""
    schema = (state.shard.arrow_schema(state.version)
              if state is not None and state.version is not None else None)
    fields = []
    for f in out.schema:
        t = schema.field(f.name).type if schema is not None and f.name in schema.names else (
            pa.int64() if f.name in (ROWS, _LEAST_DIFF) or f.name.startswith("_n") else
            pa.decimal128(38, f.type.scale) if pa.types.is_decimal(f.type) else f.type)
        if t == pa.string_view() or t == pa.large_string():
            t = pa.string()
        fields.append(pa.field(f.name, t, True))
    try:
        return out.cast(pa.schema(fields))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise NotLocal(f"the state's partials do not take this batch's ({e})") from None


_PG = {pa.int64(): "bigint", pa.int32(): "integer", pa.int16(): "smallint",
       pa.date32(): "date", pa.string(): "text", pa.bool_(): "boolean"}


def _pg(t: pa.DataType, plain: bool) -> str | None:
    if pa.types.is_decimal(t) and plain:
        return f"numeric({t.precision},{t.scale})"
    return _PG.get(t)


def finalize(node: ir.Reduce, state: pa.Table, carry: Sequence[str] = ()) -> pa.Table:
    """Partials → the GROUP BY's output columns (and ``carry`` as they are)."""
    nkeys = len(node.keys)
    out = [state.column(k) for k in node.columns[:nkeys]]
    n = state.num_rows
    for i, agg in enumerate(node.aggs):
        if isinstance(agg, exp.Count):
            out.append(state.column(ROWS if isinstance(agg.this, exp.Star) else f"_n{i}"))
        elif isinstance(agg, exp.Min | exp.Max):
            out.append(state.column(f"_m{i}"))
        else:
            total, count = state.column(f"_s{i}"), state.column(f"_n{i}")
            total = pc.if_else(pc.equal(count, 0), pa.scalar(None, total.type), total)
            if isinstance(agg, exp.Sum):
                out.append(total)
            else:
                assert isinstance(agg, exp.Avg)
                out.append(_average(agg, total, count, n))
    out += [state.column(c) for c in carry]
    return pa.table(out, names=[*node.columns, *carry])


def _average(agg: exp.Avg, total: Any, count: Any, n: int) -> Any:
    """avg = sum / count: a numeric quotient at the result's scale (PostgreSQL's, as
    ``average_sql`` renders it for Spark), or a double's."""
    result = agg.type
    if pa.types.is_floating(total.type):
        return pc.divide(total, count.cast(pa.float64()))
    if result is None or not result.is_type(exp.DType.DECIMAL):
        raise NotLocal(f"avg of {total.type} in process")
    q = division.exact(sqlglot_scale(result), 0)
    if q is None:
        raise NotLocal("an average at that scale in process")
    count = pc.if_else(pc.equal(count, 0), pa.scalar(None, count.type), count)
    return quotient(total, count, q.scale, q.numerator_digits, n)


def above(chain: Sequence[ir.Node], table: pa.Table, carry: Sequence[str] = ()) -> pa.Table:
    """The chain's Map and Filter operators (outermost first) applied to the output."""
    for op in reversed(chain):
        if isinstance(op, ir.Filter):
            table = filtered(op, table)
        elif isinstance(op, ir.Map):
            table = mapped(op, table, op.columns, carry)
        else:
            raise NotLocal(f"{type(op).__name__} above a kept state in process")
    return table


def _rank(ranking: Ranking, finalized: pa.Table, unchanged: int, complete: bool
          ) -> tuple[pa.Table, Candidates]:
    """``Ranking.rank`` in Arrow: the top-k's rows and the new candidates."""
    ranked = above(ranking.below, finalized, (KEY, KEPT))
    head = ranked.take(order(ranked, ranking.topk.order)[:ranking.keep])
    end = head.num_rows
    if not complete:
        kept = head.column(KEPT).to_pylist()
        if sum(kept) == unchanged:
            end = max(i for i, k in enumerate(kept) if k) + 1
    candidates = Candidates(tuple(head.column(KEY).slice(0, end).to_pylist()),
                            complete and head.num_rows < ranking.keep)
    columns = [c for c in head.column_names if c not in (KEY, KEPT)]
    top = head.slice(ranking.topk.offset, ranking.topk.limit).select(columns)
    return above(ranking.above, top), candidates


def order(table: pa.Table, by: Sequence[exp.Ordered]) -> np.ndarray:
    """Row positions in ORDER BY order, NULLs placed as PostgreSQL places them."""
    if not by:
        return np.arange(table.num_rows)
    work, keys = {}, []
    for i, o in enumerate(by):
        v = _as_array(_evaluate(o.this, table, boolean=False), table.num_rows)
        desc = bool(o.args.get("desc"))
        nulls_first = o.args.get("nulls_first")
        if nulls_first is None:
            nulls_first = desc
        work[f"n{i}"] = pc.is_valid(v)  # False sorts first
        keys.append((f"n{i}", "ascending" if nulls_first else "descending"))
        work[f"v{i}"] = v
        keys.append((f"v{i}", "descending" if desc else "ascending"))
    return pc.sort_indices(pa.table(work), sort_keys=keys).to_numpy()
