"""Inner join: the delta-join rule.

d(A ⋈ B ⋈ …) = Σᵢ new(<i) ⋈ dᵢ ⋈ old(>i). In each term the other inputs are read
restricted to the join keys that the change rows of input i carry (through the
join's equalities, transitively), so a term reads the rows the change can match
rather than whole inputs. Contents push a key restriction on one input's columns
to that input and to every input equal to it on that column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from sqlglot import exp

from mzflow.engine.frames import DIFF, columns_of, picked, plain, sql
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.base import Context, Rule, Strategy, incremental
from mzflow.plan import ir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction
    from mzflow.incremental.local.flow import Keys


class Join(Rule):
    node = ir.Join

    def strategy(self, node: ir.Join, ctx: Context) -> Strategy:
        return incremental("delta join, other inputs looked up by the changed keys")

    def describe(self, node: ir.Join) -> str:
        on = " AND ".join(ir.sql(p) for p in node.predicates) or "true"
        return f"Join on=({on})"

    def full(self, flow: Dataflow, node: ir.Join, side: Side, r: Restriction | None) -> DataFrame:
        per_part, top = pushed(node, r)
        dfs = [flow.full(p, side, per_part.get(i)) for i, p in enumerate(node.parts)]
        return flow.restrict(join(dfs, node.predicates), top)

    def delta(self, flow: Dataflow, node: ir.Join) -> DataFrame:
        out = None
        for i, part in enumerate(node.parts):
            d = flow.delta(part)
            if d is None:
                continue
            dfs = {i: d}
            # Inputs are read outward from the changed one, each restricted to the keys
            # of an input already read that it joins with: a chain of lookups (line
            # items → their orders → those orders' customers) reads only rows that can
            # join. An input read by an arrangement lookup is local rows, so taking its
            # keys runs no Spark job; one read from files only passes on the change's.
            sources = [i]
            pending = [j for j in range(len(node.parts)) if j != i]
            while pending:
                j, r = _next(flow, node, dfs, sources, pending)
                before = len(flow.lookups)
                dfs[j] = flow.full(node.parts[j], Side.NEW if j < i else Side.OLD, r)
                if r is not None and len(flow.lookups) > before:
                    sources.append(j)
                pending.remove(j)
            term = picked(join([dfs[k] for k in range(len(node.parts))], node.predicates),
                          node.columns + (DIFF,))
            out = term if out is None else out.unionAll(term)
        assert out is not None  # asked only when a part changed
        return out


R = TypeVar("R", bound="Restriction | Keys")


def pushed(node: ir.Join, r: R | None) -> tuple[dict[int, R], R | None]:
    """A restriction on the join's output moved to its inputs (either engine's kind):
    to the one input that owns its columns and to every input equal to it on that
    column; what stays above the join (the restriction, when it spans inputs)."""
    if r is None:
        return {}, None
    owner = {c: i for i, p in enumerate(node.parts) for c in p.columns}
    parts = {owner[c] for c in columns_of(r.exprs) if c in owner}
    if len(parts) != 1:
        return {}, r
    (i,) = parts
    per_part: dict[int, R] = {i: r}
    single = plain(r.exprs[0]) if len(r.exprs) == 1 else None
    for y, cy in equivalent(node, (i, single or "")):
        per_part.setdefault(y, r.over((ir.col(cy),)))  # type: ignore[arg-type]
    return per_part, None


def _next(flow: Dataflow, node: ir.Join, dfs: dict[int, DataFrame], sources: list[int],
          pending: list[int]) -> tuple[int, Restriction | None]:
    """The next input to read and the keys that restrict it: the first one that a
    source input (the change first) is equal to on some column; else the first one,
    unrestricted."""
    for y in sources:
        for cy in node.parts[y].columns:
            for j, cj in equivalent(node, (y, cy)):
                if j in pending:
                    return j, flow.key_restriction((ir.col(cj),), dfs[y], [cy])
    return pending[0], None


def join(dfs: list[DataFrame], predicates: Sequence[exp.Expr]) -> DataFrame:
    df = dfs[0]
    for other in dfs[1:]:
        df = df.crossJoin(other)
    for p in predicates:
        df = df.where(sql(p))  # Spark turns cross join + equality into a hash join
    return df


def equivalent(node: ir.Join, start: tuple[int, str]) -> list[tuple[int, str]]:
    """The (input, column) pairs that the join's equalities make equal to ``start``,
    transitively, in other inputs."""
    seen = {start}
    frontier = [start]
    while frontier:
        at = frontier.pop()
        for a, b in node.equalities:
            for x, y in ((a, b), (b, a)):
                if x == at and y not in seen:
                    seen.add(y)
                    frontier.append(y)
    return sorted(p for p in seen if p[0] != start[0])


RULE = Join()
