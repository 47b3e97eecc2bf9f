"""Which arrangements a maintained object's joins use.

A delta join looks up, in each other input, the rows whose join column holds a key
the change carries. When that column is a base table's column (read through
Filters and Maps that pass it on unchanged), the lookup can be served by the
table's arrangement on that column, which the cluster keeps for every view that
needs it. This module finds those (table, column) pairs in a plan; it decides
nothing about storage.
"""

from __future__ import annotations

from dataclasses import dataclass

from mzflow.engine.frames import plain
from mzflow.plan import ir
from mzflow.plan.ir import Node


@dataclass(frozen=True, order=True)
class Need:
    item_id: str  # the base table
    column: str  # its stored column, the arrangement's key

    @property
    def id(self) -> str:
        """The arrangement's name within its cluster."""
        return f"{self.item_id}.{self.column}"


def trace(node: Node, column: str) -> tuple[ir.Get, str] | None:
    """The base table column ``node``'s ``column`` is, unchanged (None: computed)."""
    while True:
        if isinstance(node, ir.Get):
            return node, node.stored[node.columns.index(column)]
        if isinstance(node, ir.Filter):
            node = node.input
        elif isinstance(node, ir.Map):
            name = plain(node.exprs[node.columns.index(column)])
            if name is None:
                return None
            node, column = node.input, name
        else:
            return None


def needs(root: Node) -> list[Need]:
    """Every (table, column) a join of ``root`` can look keys up in, sorted."""
    found: set[Need] = set()

    def visit(node: Node) -> None:
        if isinstance(node, ir.Join):
            for side in (s for eq in node.equalities for s in eq):
                hit = trace(node.parts[side[0]], side[1])
                if hit is not None:
                    found.add(Need(hit[0].item_id, hit[1]))
        if not isinstance(node, ir.Opaque):
            for child in node.inputs:
                visit(child)
    visit(root)
    return sorted(found)
