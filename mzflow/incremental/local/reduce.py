"""Reduce (a GROUP BY below the plan's top, or DISTINCT) and UNION ALL in Arrow, as
``rules/reduce.py`` and ``rules/union.py`` maintain them: a Reduce's changes are its
affected groups recomputed at both times, their keys restricting its input."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.engine.frames import DIFF
from mzflow.incremental.local import NotLocal
from mzflow.incremental.local.flow import Keys, _as_array, _evaluate, restrict
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.reduce import accumulable, through
from mzflow.plan import ir

if TYPE_CHECKING:
    from mzflow.incremental.local.flow import LocalFlow


def full(flow: LocalFlow, node: ir.Reduce, side: Side, r: Keys | None) -> pa.Table:
    pushed = through(node, r)
    out = aggregate(node, flow.full(node.input, side, pushed))
    return out if pushed is not None or r is None else restrict(out, r)


def delta(flow: LocalFlow, node: ir.Reduce) -> pa.Table:
    if not node.keys:
        raise NotLocal("a GROUP BY without keys is recomputed whole", lasting=True)
    d = flow.changes(node.input)
    values = [_as_array(_evaluate(k, d, boolean=False), d.num_rows).to_pylist()
              for k in node.keys]
    keys = Keys(tuple(ir.col(c) for c in node.columns[:len(node.keys)]),
                list(dict.fromkeys(zip(*values, strict=True))))
    new, old = full(flow, node, Side.NEW, keys), full(flow, node, Side.OLD, keys)
    return pa.concat_tables([
        new.append_column(DIFF, pa.array(np.ones(new.num_rows, np.int64))),
        old.append_column(DIFF, pa.array(np.full(old.num_rows, -1, np.int64)))])


_FN: dict[type[exp.Expr], str] = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min",
                                  exp.Max: "max"}


def aggregate(node: ir.Reduce, table: pa.Table) -> pa.Table:
    """GROUP BY in Arrow: count, sum, min, max and avg with PostgreSQL's answers."""
    nkeys = len(node.keys)
    names = list(node.columns[:nkeys])
    cols: dict[str, Any] = {n: _as_array(_evaluate(k, table, boolean=False), table.num_rows)
                            for k, n in zip(node.keys, names, strict=True)}
    aggs: list[tuple[str, str, Any]] = []
    avgs: dict[str, exp.Avg] = {}
    for i, agg in enumerate(node.aggs):
        if isinstance(agg, exp.Count) and isinstance(agg.this, exp.Distinct) and len(
                agg.this.expressions) == 1:
            v = _as_array(_evaluate(agg.this.expressions[0], table, boolean=False),
                          table.num_rows)
            cols[f"_a{i}"] = v
            aggs.append((f"_a{i}", "count_distinct", pc.CountOptions("only_valid")))
            continue
        if not accumulable(agg):
            raise NotLocal(f"{agg.sql()} has no in-process path yet", lasting=True)
        if isinstance(agg, exp.Count) and isinstance(agg.this, exp.Star):
            cols[f"_a{i}"] = pa.array(np.ones(table.num_rows, np.int64))
            aggs.append((f"_a{i}", "count", pc.CountOptions("all")))
            continue
        v = _as_array(_evaluate(agg.this, table, boolean=False), table.num_rows)
        if isinstance(agg, exp.Avg):
            cols[f"_a{i}"] = _wide(v)
            aggs.append((f"_a{i}", "sum", None))
            cols[f"_c{i}"] = v
            aggs.append((f"_c{i}", "count", pc.CountOptions("only_valid")))
            avgs[f"_a{i}"] = agg
            continue
        cols[f"_a{i}"] = _wide(v) if isinstance(agg, exp.Sum) else v
        aggs.append((f"_a{i}", _FN[type(agg)], pc.CountOptions("only_valid")
                     if isinstance(agg, exp.Count) else None))
    work = pa.table(cols) if cols else pa.table({"_": pa.nulls(table.num_rows)})
    grouped = work.group_by(names, use_threads=False).aggregate(
        [(c, fn, opts) if opts is not None else (c, fn) for c, fn, opts in aggs])
    out = [grouped.column(n) for n in names]
    for i in range(len(node.aggs)):
        fn = next(fn for c, fn, _ in aggs if c == f"_a{i}")
        v = grouped.column(f"_a{i}_{fn}")
        if f"_a{i}" in avgs:
            from mzflow.incremental.local.state import _average

            v = _average(avgs[f"_a{i}"], v, grouped.column(f"_c{i}_count"),
                         grouped.num_rows)
        out.append(v)
    if not node.aggs:
        return pa.table(out, names=names)
    return pa.table(out, names=list(node.columns))


def _wide(v: Any) -> Any:
    """A sum's values widened so that it cannot overflow where PostgreSQL's does not."""
    if pa.types.is_decimal(v.type):
        return v.cast(pa.decimal128(38, v.type.scale))
    if pa.types.is_integer(v.type):
        return v.cast(pa.int64())
    if pa.types.is_floating(v.type):
        return v.cast(pa.float64())
    raise NotLocal(f"a sum of {v.type} in process", lasting=True)


def union_delta(flow: LocalFlow, node: ir.Union) -> pa.Table:
    parts = []
    for p in node.parts:
        d = flow.delta(p)
        if d is not None:
            parts.append(d.rename_columns([*node.columns, DIFF]).select(
                [*flow.cols(node), DIFF]))
    return pa.concat_tables(parts, promote_options="permissive")


def union_full(flow: LocalFlow, node: ir.Union, side: Side, r: Keys | None) -> pa.Table:
    parts = [flow.full(p, side).rename_columns(list(node.columns)) for p in node.parts]
    out = pa.concat_tables(parts, promote_options="permissive")
    out = restrict(out, r) if r is not None else out
    return out.select(flow.cols(node))
