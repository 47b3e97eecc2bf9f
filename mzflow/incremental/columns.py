"""Which columns of each node a plan reads: what an in-memory arrangement keeps, and
what the in-process executor computes.

A Get's output is every stored column of its table, and Spark prunes the unused ones
from its plans; rows held in memory or computed in Arrow are pruned here instead, from
the root down: a node needs the columns its parent reads, plus those its own
expressions read. The root needs all of its columns.
"""

from __future__ import annotations

from mzflow.engine.frames import columns_of
from mzflow.plan import ir
from mzflow.plan.ir import Node


def needed(root: Node) -> dict[int, frozenset[str]]:
    """id(node) → the columns of that node the plan reads (a node reached twice: the
    union)."""
    out: dict[int, set[str]] = {}

    def visit(node: Node, wanted: set[str]) -> None:
        have = out.setdefault(id(node), set())
        have |= wanted & set(node.columns)
        if not have and node.columns:
            # A table of no columns has no rows either (Arrow): COUNT(*) over a join
            # still needs one column to count the join's rows by.
            have.add(node.columns[0])
        for child, cols in _below(node, have):
            visit(child, cols)

    visit(root, set(root.columns))
    return {k: frozenset(v) for k, v in out.items()}


def stored(root: Node) -> dict[str, frozenset[str]]:
    """item id → the stored columns of that table the plan reads."""
    wanted = needed(root)
    out: dict[str, set[str]] = {}
    for get in root.gets():
        cols = wanted.get(id(get), frozenset())
        out.setdefault(get.item_id, set()).update(
            s for s, c in zip(get.stored, get.columns, strict=True) if c in cols)
    return {k: frozenset(v) for k, v in out.items()}


def _below(node: Node, wanted: set[str]) -> list[tuple[Node, set[str]]]:
    if isinstance(node, ir.Get):
        return []
    if isinstance(node, ir.Filter):
        return [(node.input, wanted | columns_of(node.predicates))]
    if isinstance(node, ir.Map):
        used = [e for c, e in zip(node.columns, node.exprs, strict=True) if c in wanted]
        return [(node.input, columns_of(used))]
    if isinstance(node, ir.Join):
        reads = wanted | columns_of(node.predicates) | {
            c for eq in node.equalities for _, c in eq}
        return [(p, reads & set(p.columns)) for p in node.parts]
    if isinstance(node, ir.Reduce):
        return [(node.input, columns_of(node.keys + node.aggs))]
    if isinstance(node, ir.TopK):
        return [(node.input, wanted | set(node.group)
                 | columns_of([o.this for o in node.order]))]
    # Anything else (outer joins, windows, set operations, Opaque): every column, as
    # its rule may compare whole rows.
    return [(child, set(child.columns)) for child in node.inputs]
