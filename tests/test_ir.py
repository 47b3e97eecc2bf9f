"""IR nodes check their invariants when built: a malformed tree is refused where it is
made, naming the node and what is wrong."""

from __future__ import annotations

import pytest

from mzflow.plan import ir
from mzflow.plan.ir import InvalidPlan, col


def get(*cols: str) -> ir.Get:
    return ir.Get(columns=cols, ref="mz_u1_v0", item_id="u1", name="t", stored=cols)


def test_valid_nodes_build() -> None:
    t, u = get("a", "b"), get("c", "d")
    j = ir.Join(columns=("a", "b", "c", "d"), parts=(t, u), predicates=(),
                equalities=(((0, "a"), (1, "c")),))
    ir.Map(columns=("x",), input=j, exprs=(col("a"),))
    ir.OuterJoin(columns=("a", "b", "c", "d"), kind="left", left=t, right=u,
                 on=col("a").eq(col("c")), keys=(("a", "c"),))


@pytest.mark.parametrize(("build", "message"), [
    (lambda: get("a", "a"), "duplicate output columns"),
    (lambda: ir.Map(columns=("x", "y"), input=get("a"), exprs=(col("a"),)),
     "1 expressions for 2 columns"),
    (lambda: ir.Map(columns=("x",), input=get("a"), exprs=(col("zz"),)),
     "expressions read unknown columns"),
    (lambda: ir.Filter(columns=("a",), input=get("a"), predicates=(col("b"),)),
     "predicates read unknown columns"),
    (lambda: ir.Join(columns=("a", "c"), parts=(get("a"), get("c")),
                     predicates=(col("q").eq(col("a")),)), "predicates read unknown"),
    (lambda: ir.Join(columns=("a", "c"), parts=(get("a"), get("c")), predicates=(),
                     equalities=(((1, "a"), (0, "c")),)), "equality names input 1"),
    (lambda: ir.OuterJoin(columns=("a", "c"), kind="right", left=get("a"),  # type: ignore
                          right=get("c"), on=col("a"), keys=()), "kind 'right'"),
    (lambda: ir.SetOp(columns=("a",), kind="minus", all=True, left=get("a"),  # type: ignore
                      right=get("c")), "kind 'minus'"),
    (lambda: ir.Union(columns=("a",), parts=(get("a"), get("b", "c"))), "different arity"),
    (lambda: ir.TopK(columns=("a",), input=get("a"), order=(), limit=-1), "negative LIMIT"),
    (lambda: ir.Reduce(columns=("k",), input=get("a"), keys=(col("a"),),
                       aggs=(col("a"),)), "one column per key and aggregate"),
])
def test_invalid_nodes_are_refused(build, message: str) -> None:
    with pytest.raises(InvalidPlan, match=message):
        build()
