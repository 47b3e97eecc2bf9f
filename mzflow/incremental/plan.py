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
from dataclasses import dataclass

from sqlglot import exp

from mzflow.catalog.determinism import check_deterministic
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, Column, Item, Snapshot
from mzflow.errors import Unsupported
from mzflow.plan import ir
from mzflow.plan.ir import Node
from mzflow.plan.lower import R_CONSTRUCT, R_SUBQUERY, lower
from mzflow.plan.query import plan as bound_plan
from mzflow.sql.ast import VersionedTable
from mzflow.sql.parse import parse_query

INCREMENTAL = "incremental"
RECOMPUTE = "recompute"

STATE, DELTA, FULL = "state", "delta", "recompute"

# Reason codes, stable: they appear in EXPLAIN, task logs and the strict-mode error.
R_GLOBAL_AGG = "R004"
R_GLOBAL_TOPK = "R005"
R_WINDOW = "R006"
R_OUTER = "R007"
R_BATCH = "R010"
R_HISTORY = "R011"
R_FIRST = "R012"
R_MEASURED = "R013"
R_MEASURING = "R014"

REASONS = {
    R_SUBQUERY: "a subquery that could not be decorrelated into a join",
    R_CONSTRUCT: "a construct the incremental operators do not model",
    R_GLOBAL_AGG: "an aggregate without GROUP BY whose aggregates do not accumulate, or below "
                  "the top of the plan, is recomputed whole",
    R_GLOBAL_TOPK: "ORDER BY … LIMIT without a partition is recomputed whole",
    R_WINDOW: "window functions without a common PARTITION BY column",
    R_OUTER: "an outer join without an equality between its sides",
    R_BATCH: "the batch is a large share of the inputs, so recomputing is cheaper",
    R_HISTORY: "the inputs' change history since the last tick was compacted away",
    R_FIRST: "the first tick computes the whole contents",
    R_MEASURED: "incremental ticks of this index were measured slower than recomputing it",
    R_MEASURING: "a recompute measures what recomputing this index costs (once per 50 ticks)",
}

ACCUMULABLE = (exp.Count, exp.Sum, exp.Avg)
# MIN and MAX merge into the state too while the batch only inserts (monotonic input);
# a batch that retracts rows recomputes them for its affected groups.
MONOTONE = (exp.Min, exp.Max)


@dataclass(frozen=True)
class Strategy:
    kind: str
    code: str | None = None
    how: str = ""  # for incremental operators: which rule maintains them

    @property
    def reason(self) -> str | None:
        return REASONS.get(self.code) if self.code else None

    def describe(self) -> str:
        if self.code is not None:
            return f"{self.kind} ({self.code}: {self.reason})"
        return f"{self.kind} ({self.how})" if self.how else self.kind


@dataclass(frozen=True)
class ChangePlan:
    index: Item  # the maintained index (a materialized view's default index, or any index)
    on: Item  # the object it maintains
    definition: exp.Query  # SELECT over the object, as stored
    strategy: Strategy  # the object's: incremental only if every operator is
    columns: tuple[Column, ...]  # what the index holds
    root: Node | None = None  # the IR (None when lowering is not possible: recompute)
    mode: str = FULL
    operators: tuple[tuple[Node, Strategy], ...] = ()
    state_chain: tuple[Node, ...] = ()  # in STATE mode: the operators above the Reduce

    def strategy_of(self, node: Node) -> Strategy:
        return next(s for n, s in self.operators if n is node)


def accumulable(agg: exp.Expr) -> bool:
    if not isinstance(agg, ACCUMULABLE + MONOTONE):
        return False
    return not isinstance(agg.this, exp.Distinct)


def state_chain(root: Node) -> tuple[tuple[Node, ...], ir.Reduce] | None:
    """``root`` = Map/Filter/TopK operators over a Reduce whose aggregates accumulate."""
    chain: list[Node] = []
    node = root
    while isinstance(node, ir.Map | ir.Filter | ir.TopK):
        chain.append(node)
        node = node.input
    if (isinstance(node, ir.Reduce) and node.aggs and all(accumulable(a) for a in node.aggs)
            and sum(isinstance(n, ir.TopK) for n in chain) <= 1):
        return tuple(chain), node
    return None


def analyze(root: Node) -> tuple[str, tuple[Node, ...], tuple[tuple[Node, Strategy], ...]]:
    stateful = state_chain(root)
    chain, reduce = stateful if stateful else ((), None)
    out: list[tuple[Node, Strategy]] = []

    def visit(node: Node) -> None:
        out.append((node, _strategy(node, node is reduce, node in chain)))
        if not isinstance(node, ir.Opaque):
            for child in node.inputs:
                visit(child)
    visit(root)
    if stateful:
        mode = STATE
    elif out[0][1].kind == RECOMPUTE:
        mode = FULL
    else:
        mode = DELTA
    return mode, chain, tuple(out)


def _strategy(node: Node, state_reduce: bool, in_chain: bool) -> Strategy:
    inc = INCREMENTAL
    if isinstance(node, ir.Get):
        return Strategy(inc, how="changes from the Delta change feed")
    if isinstance(node, ir.Filter | ir.Map | ir.Union):
        return Strategy(inc, how="row by row")
    if isinstance(node, ir.Join):
        return Strategy(inc, how="delta join, other inputs pruned by the changed keys")
    if isinstance(node, ir.Reduce):
        if state_reduce and any(isinstance(a, MONOTONE) for a in node.aggs):
            return Strategy(inc, how="accumulable: changes merged into the state by key; "
                                     "MIN/MAX merged for append-only batches, else their "
                                     "affected groups recomputed")
        if state_reduce:
            return Strategy(inc, how="accumulable: changes merged into the state by key")
        if node.keys:
            return Strategy(inc, how="affected groups recomputed")
        return Strategy(RECOMPUTE, R_GLOBAL_AGG)
    if isinstance(node, ir.TopK):
        if node.group:
            return Strategy(inc, how="affected groups recomputed")
        if in_chain:
            return Strategy(inc, how="top-k over the maintained groups")
        return Strategy(RECOMPUTE, R_GLOBAL_TOPK)
    if isinstance(node, ir.Window):
        return (Strategy(inc, how="affected partitions recomputed") if node.partition
                else Strategy(RECOMPUTE, R_WINDOW))
    if isinstance(node, ir.OuterJoin):
        return (Strategy(inc, how="affected join keys recomputed") if node.keys
                else Strategy(RECOMPUTE, R_OUTER))
    if isinstance(node, ir.SetOp):
        return Strategy(inc, how="affected rows recomputed")
    if isinstance(node, ir.Opaque):
        return Strategy(RECOMPUTE, node.reason)
    raise AssertionError(type(node).__name__)


def overall(operators: tuple[tuple[Node, Strategy], ...]) -> Strategy:
    for _, s in operators:
        if s.kind != INCREMENTAL:
            return Strategy(RECOMPUTE, s.code)
    return Strategy(INCREMENTAL)


def definition_of(on: Item, index: Item) -> tuple[exp.Query, tuple[Column, ...]]:
    if on.definition is not None:
        return parse_query(on.definition), on.columns
    # An index on a table holds the version of the table it was created on.
    m = re.search(r"VERSION (\d+)\]", index.create_sql)
    version = int(m.group(1)) if m else on.version
    pinned = VersionedTable(this=exp.to_identifier(on.name), item_id=exp.to_identifier(on.id),
                            version=exp.Literal.number(version))
    return exp.select("*").from_(pinned), on.columns_at(version)


def plan_query(snap: Snapshot, query: exp.Query) -> tuple[Node, str, tuple[Node, ...],
                                                          tuple[tuple[Node, Strategy], ...]]:
    root = lower(snap, bound_plan(snap, query).query)
    mode, chain, operators = analyze(root)
    return root, mode, chain, operators


def strategy_for(snap: Snapshot, query: exp.Query) -> Strategy:
    return overall(plan_query(snap, query)[3])


def require_incremental(snap: Snapshot, query: exp.Query, name: str) -> None:
    """``WITH (REFRESH = 'incremental')``: refuse what would be recomputed, saying why."""
    strategy = strategy_for(snap, query)
    if strategy.kind != INCREMENTAL:
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
    root, mode, chain, operators = plan_query(snap, query)
    return ChangePlan(index=index, on=on, definition=query, strategy=overall(operators),
                      columns=columns, root=root, mode=mode, operators=operators,
                      state_chain=chain)


def explain(root: Node, operators: tuple[tuple[Node, Strategy], ...], indent: int = 1
            ) -> list[str]:
    """The IR as an indented tree, each operator with its strategy."""
    strategies = {id(n): s for n, s in operators}
    lines: list[str] = []

    def visit(node: Node, depth: int) -> None:
        s = strategies.get(id(node))
        suffix = f"  // {s.describe()}" if s else ""
        lines.append("  " * depth + _describe(node) + suffix)
        if not isinstance(node, ir.Opaque):
            for child in node.inputs:
                visit(child, depth + 1)
    visit(root, indent)
    return lines


def _describe(node: Node) -> str:
    cols = ", ".join(node.columns)
    if isinstance(node, ir.Get):
        return f"Get {node.name}"
    if isinstance(node, ir.Filter):
        return f"Filter {' AND '.join(ir.sql(p) for p in node.predicates)}"
    if isinstance(node, ir.Map):
        shown = [n if ir.sql(e) == f'"{n}"' else f"{n} := {ir.sql(e)}"
                 for n, e in zip(node.columns, node.exprs, strict=True)]
        return f"Map ({', '.join(shown)})"
    if isinstance(node, ir.Join):
        on = " AND ".join(ir.sql(p) for p in node.predicates) or "true"
        return f"Join on=({on})"
    if isinstance(node, ir.OuterJoin):
        return f"{node.kind.capitalize()}Join on=({ir.sql(node.on)})"
    if isinstance(node, ir.Reduce):
        keys = ", ".join(ir.sql(k) for k in node.keys)
        aggs = ", ".join(ir.sql(a) for a in node.aggs)
        return (f"Reduce group_by=[{keys}] aggregates=[{aggs}]" if aggs
                else f"Distinct [{keys}]")
    if isinstance(node, ir.TopK):
        order = ", ".join(ir.sql(o) for o in node.order)
        group = f" group_by=[{', '.join(node.group)}]" if node.group else ""
        offset = f" offset={node.offset}" if node.offset else ""
        return f"TopK{group} order_by=[{order}] limit={node.limit}{offset}"
    if isinstance(node, ir.Window):
        return (f"Window partition_by=[{', '.join(node.partition)}] "
                f"({', '.join(ir.sql(e) for e in node.exprs)})")
    if isinstance(node, ir.Union):
        return "Union"
    if isinstance(node, ir.SetOp):
        return f"{node.kind.capitalize()}{' All' if node.all else ''}"
    if isinstance(node, ir.Opaque):
        return f"Opaque ({cols}) := {node.query.sql(dialect='postgres')}"
    raise AssertionError(type(node).__name__)
