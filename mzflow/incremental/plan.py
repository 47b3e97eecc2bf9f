"""Change plans: how one tick maintains an object, operator by operator.

``derive`` lowers the object's definition to the relational IR and gives each
operator a strategy: *incremental* (its changes are computed from its inputs'
changes) or *recompute* (its contents are recomputed and diffed, so downstream
still receives exact ``(data, time, diff)`` changes). Every recompute carries a
stable reason code, shown by EXPLAIN, written to the task log, and used by
``REFRESH = 'incremental'`` to refuse the definition.

The root decides the tick's *mode*: ``state`` keeps the partial sums of a top
GROUP BY whose aggregates all accumulate (COUNT, SUM, AVG) in a state shard and
merges each batch into it; ``delta`` propagates changes through the tree;
``recompute`` evaluates the whole definition and diffs it against the index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlglot import exp

from mzflow.catalog.determinism import check_deterministic
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, Column, Item, Snapshot
from mzflow.errors import Unsupported
from mzflow.incremental.modes import Mode, StrategyKind
from mzflow.incremental.rules import claim, rule_for
from mzflow.incremental.rules.base import Context, Strategy
from mzflow.plan import ir
from mzflow.plan.ir import Node
from mzflow.plan.lower import lower
from mzflow.plan.query import plan as bound_plan
from mzflow.sql.ast import VersionedTable
from mzflow.sql.parse import parse_query


@dataclass(frozen=True)
class ChangePlan:
    index: Item  # the maintained index (a materialized view's default index, or any index)
    on: Item  # the object it maintains
    definition: exp.Query  # SELECT over the object, as stored
    strategy: Strategy  # the object's: incremental only if every operator is
    columns: tuple[Column, ...]  # what the index holds
    root: Node | None = None  # the IR (None when lowering is not possible: recompute)
    mode: Mode = Mode.RECOMPUTE
    operators: tuple[tuple[Node, Strategy], ...] = ()
    # What the operators' rules were told: in state mode, the kept Reduce and the
    # operators above it
    context: Context = field(default_factory=Context)

    def strategy_of(self, node: Node) -> Strategy:
        return next(s for n, s in self.operators if n is node)


def analyze(root: Node) -> tuple[Mode, Context, tuple[tuple[Node, Strategy], ...]]:
    """The tick's mode, the context the operators' rules saw, and each operator's
    strategy: a variant's mode when one claims the root (``rules.VARIANTS``), else
    delta, unless the root is recomputed."""
    claimed = claim(root)
    ctx = claimed[1] if claimed else Context()
    out: list[tuple[Node, Strategy]] = []

    def visit(node: Node) -> None:
        out.append((node, rule_for(node).strategy(node, ctx)))
        if not isinstance(node, ir.Opaque):
            for child in node.inputs:
                visit(child)
    visit(root)
    if claimed:
        mode = claimed[0]
    elif out[0][1].kind == StrategyKind.RECOMPUTE:
        mode = Mode.RECOMPUTE
    else:
        mode = Mode.DELTA
    return mode, ctx, tuple(out)


def overall(operators: tuple[tuple[Node, Strategy], ...]) -> Strategy:
    for _, s in operators:
        if s.kind != StrategyKind.INCREMENTAL:
            return Strategy(StrategyKind.RECOMPUTE, s.code)
    return Strategy(StrategyKind.INCREMENTAL)


def definition_of(on: Item, index: Item) -> tuple[exp.Query, tuple[Column, ...]]:
    if on.definition is not None:
        return parse_query(on.definition), on.columns
    # An index on a table holds the version of the table it was created on.
    m = re.search(r"VERSION (\d+)\]", index.create_sql)
    version = int(m.group(1)) if m else on.version
    pinned = VersionedTable(this=exp.to_identifier(on.name), item_id=exp.to_identifier(on.id),
                            pinned=exp.Literal.number(version))
    return exp.select("*").from_(pinned), on.columns_at(version)


def plan_query(snap: Snapshot, query: exp.Query) -> tuple[Node, Mode, Context,
                                                          tuple[tuple[Node, Strategy], ...]]:
    root = lower(snap, bound_plan(snap, query).query)
    mode, ctx, operators = analyze(root)
    return root, mode, ctx, operators


def strategy_for(snap: Snapshot, query: exp.Query) -> Strategy:
    return overall(plan_query(snap, query)[3])


def require_incremental(snap: Snapshot, query: exp.Query, name: str) -> None:
    """``WITH (REFRESH = 'incremental')``: refuse what would be recomputed, saying why."""
    strategy = strategy_for(snap, query)
    if strategy.kind != StrategyKind.INCREMENTAL:
        raise Unsupported(
            f"materialized view {name} cannot be maintained incrementally: "
            f"{strategy.code}: {strategy.reason}",
            hint="drop REFRESH = 'incremental' to let mzflow recompute it on every tick")


def derive(snap: Snapshot, index: Item) -> ChangePlan:
    if index.kind != INDEX or index.on_id is None:
        raise Unsupported(f"{index.qualified_name} is not an index")
    on = snap.item(index.on_id)
    query, columns = definition_of(on, index)
    if on.kind == MATERIALIZED_VIEW:
        check_deterministic(query, "materialized views")
    root, mode, ctx, operators = plan_query(snap, query)
    return ChangePlan(index=index, on=on, definition=query, strategy=overall(operators),
                      columns=columns, root=root, mode=mode, operators=operators,
                      context=ctx)


def explain(root: Node, operators: tuple[tuple[Node, Strategy], ...], indent: int = 1
            ) -> list[str]:
    """The IR as an indented tree, each operator with its strategy."""
    strategies = {id(n): s for n, s in operators}
    lines: list[str] = []

    def visit(node: Node, depth: int) -> None:
        s = strategies.get(id(node))
        suffix = f"  // {s.describe()}" if s else ""
        lines.append("  " * depth + rule_for(node).describe(node) + suffix)
        if not isinstance(node, ir.Opaque):
            for child in node.inputs:
                visit(child, depth + 1)
    visit(root, indent)
    return lines
