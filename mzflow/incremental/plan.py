"""Change plans: what one tick of a maintained object computes, and by which strategy.

A plan is data: the tick executes it and EXPLAIN prints it. Today every object
is maintained by the *recompute* strategy: the tick evaluates the definition at
the new time and diffs it against the stored contents, so downstream still
receives exact ``(data, time, diff)`` changes. The reason code says why, so the
fallback is never silent; incremental operators will replace it operator by
operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from mzflow.catalog.determinism import check_deterministic
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, Column, Item, Snapshot
from mzflow.errors import Unsupported
from mzflow.sql.ast import VersionedTable
from mzflow.sql.parse import parse_query

INCREMENTAL = "incremental"
RECOMPUTE = "recompute"

# Reason codes, stable: they appear in EXPLAIN, task logs and the strict-mode error.
R_NO_OPERATORS = "R001"  # incremental operators are not implemented for this plan yet

REASONS = {
    R_NO_OPERATORS: "incremental operators are not implemented yet: each tick recomputes the "
                    "definition and diffs it against the stored contents",
}

@dataclass(frozen=True)
class Strategy:
    kind: str
    code: str | None = None

    @property
    def reason(self) -> str | None:
        return REASONS.get(self.code) if self.code else None

    def describe(self) -> str:
        return self.kind if self.code is None else f"{self.kind} ({self.code}: {self.reason})"


@dataclass(frozen=True)
class ChangePlan:
    index: Item  # the maintained index (a materialized view's default index, or any index)
    on: Item  # the object it maintains
    definition: exp.Query  # SELECT over the object, as stored
    strategy: Strategy
    columns: tuple[Column, ...]  # what the index holds


def definition_of(on: Item, index: Item) -> tuple[exp.Query, tuple[Column, ...]]:
    if on.definition is not None:
        return parse_query(on.definition), on.columns
    # An index on a table holds the version of the table it was created on.
    m = re.search(r"VERSION (\d+)\]", index.create_sql)
    version = int(m.group(1)) if m else on.version
    pinned = VersionedTable(this=exp.to_identifier(on.name), item_id=exp.to_identifier(on.id),
                            version=exp.Literal.number(version))
    return exp.select("*").from_(pinned), on.columns_at(version)


def strategy_for(query: exp.Query) -> Strategy:
    """How a tick maintains ``query``. Every plan is recomputed until the incremental
    operators land; they will return INCREMENTAL for the plans they cover."""
    return Strategy(RECOMPUTE, R_NO_OPERATORS)


def require_incremental(query: exp.Query, name: str) -> None:
    """``WITH (REFRESH = 'incremental')``: refuse what would be recomputed, saying why."""
    strategy = strategy_for(query)
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
    return ChangePlan(index=index, on=on, definition=query, strategy=strategy_for(query),
                      columns=columns)
