"""The relational IR: an immutable tree of operators over base tables.

Every node names its output columns (unique within the node). Scalar
expressions are sqlglot trees whose column references are bare, quoted names
of the input's columns, so one operator can be rendered, explained or
rewritten without looking at its parents. ``lower.py`` builds the tree from a
bound, view-inlined query; ``incremental/`` decides how each operator is
maintained; ``render/dataflow.py`` runs it on Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlglot import exp


@dataclass(frozen=True)
class Node:
    columns: tuple[str, ...]

    @property
    def inputs(self) -> tuple[Node, ...]:
        return ()

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.inputs:
            yield from child.walk()

    def gets(self) -> list[Get]:
        return [n for n in self.walk() if isinstance(n, Get)]


@dataclass(frozen=True)
class Get(Node):
    """One version (schema) of a base table, by its pin key; columns as stored."""

    ref: str  # pin key, ``mz_<id>_v<version>``
    item_id: str
    name: str  # qualified, for EXPLAIN
    stored: tuple[str, ...] = ()  # the stored column each output column reads


@dataclass(frozen=True)
class Filter(Node):
    input: Node
    predicates: tuple[exp.Expr, ...]

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Map(Node):
    """Projection with computed columns: ``columns[i]`` = ``exprs[i]`` over the input."""

    input: Node
    exprs: tuple[exp.Expr, ...]

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Join(Node):
    """Inner join of several inputs; output columns are the inputs' in order."""

    parts: tuple[Node, ...]
    predicates: tuple[exp.Expr, ...]
    # column = column predicates between different inputs: (input, column) pairs
    equalities: tuple[tuple[tuple[int, str], tuple[int, str]], ...] = ()

    @property
    def inputs(self) -> tuple[Node, ...]:
        return self.parts


@dataclass(frozen=True)
class OuterJoin(Node):
    """LEFT or FULL join (a RIGHT join is lowered as a LEFT join with swapped inputs)."""

    kind: str  # "left" | "full"
    left: Node
    right: Node
    on: exp.Expr
    keys: tuple[tuple[str, str], ...]  # equi-join keys (left column, right column)

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Reduce(Node):
    """GROUP BY: ``columns`` = key names, then aggregate names."""

    input: Node
    keys: tuple[exp.Expr, ...]
    aggs: tuple[exp.Expr, ...]  # aggregate calls over input columns

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class TopK(Node):
    """``ORDER BY … LIMIT`` (no group) or the first rows of each group."""

    input: Node
    order: tuple[exp.Ordered, ...]
    limit: int | None
    offset: int = 0
    group: tuple[str, ...] = ()

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Window(Node):
    """Adds window-function columns; incremental per common PARTITION BY key."""

    input: Node
    exprs: tuple[exp.Expr, ...]  # the added columns, after the input's
    partition: tuple[str, ...]  # input columns every window partitions by

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Union(Node):
    """UNION ALL; inputs' columns line up by position."""

    parts: tuple[Node, ...]

    @property
    def inputs(self) -> tuple[Node, ...]:
        return self.parts


@dataclass(frozen=True)
class SetOp(Node):
    """EXCEPT / INTERSECT [ALL]: a row's output multiplicity depends on that row only."""

    kind: str  # "except" | "intersect"
    all: bool
    left: Node
    right: Node

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Opaque(Node):
    """A subquery the IR does not model: recomputed whole, with the reason."""

    query: exp.Query  # over pin keys, like a bound query
    reason: str  # a reason code from incremental/plan.py
    reads: tuple[Get, ...] = field(default=())

    @property
    def inputs(self) -> tuple[Node, ...]:
        return self.reads


def col(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def sql(e: exp.Expr) -> str:
    """An expression as EXPLAIN prints it."""
    return e.sql(dialect="postgres")
