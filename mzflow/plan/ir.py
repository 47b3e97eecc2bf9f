"""The relational IR: an immutable tree of operators over base tables.

Every node names its output columns (unique within the node). Scalar
expressions are sqlglot trees whose column references are bare, quoted names
of the input's columns, so one operator can be rendered, explained or
rewritten without looking at its parents. ``lower.py`` builds the tree from a
bound, view-inlined query; ``incremental/rules/`` holds, per node type, how it is
maintained and run.

Nodes check their invariants when built (``InvalidPlan``): a malformed tree is a
bug in lowering, caught where it is made rather than as a wrong answer later.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from sqlglot import exp

from mzflow.errors import Error


class InvalidPlan(Error):
    """An IR node that breaks its invariants: an internal error of the planner."""

    code = "XX000"


def _check(ok: bool, node: object, what: str) -> None:
    if not ok:
        raise InvalidPlan(f"internal error: invalid {type(node).__name__} node: {what}")


def _refs(exprs: Iterable[exp.Expr]) -> set[str]:
    return {c.name for e in exprs for c in e.find_all(exp.Column) if not c.table}


def _known(node: object, what: str, exprs: Iterable[exp.Expr], columns: Iterable[str]
           ) -> None:
    unknown = _refs(exprs) - set(columns)
    _check(not unknown, node, f"{what} read unknown columns {sorted(unknown)}")


@dataclass(frozen=True)
class Node:
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        dupes = sorted({c for c in self.columns if self.columns.count(c) > 1})
        _check(not dupes, self, f"duplicate output columns {dupes}")
        self.validate()

    def validate(self) -> None:
        """Node-specific invariants (over the node's own fields and its inputs)."""

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

    def validate(self) -> None:
        _check(len(self.stored) == len(self.columns), self, "one stored column per output")


@dataclass(frozen=True)
class Filter(Node):
    input: Node
    predicates: tuple[exp.Expr, ...]

    def validate(self) -> None:
        _check(self.columns == self.input.columns, self, "columns differ from its input's")
        _known(self, "predicates", self.predicates, self.input.columns)

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Map(Node):
    """Projection with computed columns: ``columns[i]`` = ``exprs[i]`` over the input."""

    input: Node
    exprs: tuple[exp.Expr, ...]

    def validate(self) -> None:
        _check(len(self.exprs) == len(self.columns), self,
               f"{len(self.exprs)} expressions for {len(self.columns)} columns")
        _known(self, "expressions", self.exprs, self.input.columns)

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

    def validate(self) -> None:
        _check(len(self.parts) >= 2, self, "fewer than two inputs")
        _check(self.columns == tuple(c for p in self.parts for c in p.columns), self,
               "columns are not its inputs' in order")
        _known(self, "predicates", self.predicates, self.columns)
        for side in (s for eq in self.equalities for s in eq):
            i, name = side
            _check(0 <= i < len(self.parts) and name in self.parts[i].columns, self,
                   f"equality names input {i} column {name!r}, which it lacks")

    @property
    def inputs(self) -> tuple[Node, ...]:
        return self.parts


@dataclass(frozen=True)
class OuterJoin(Node):
    """LEFT or FULL join (a RIGHT join is lowered as a LEFT join with swapped inputs)."""

    kind: Literal["left", "full"]
    left: Node
    right: Node
    on: exp.Expr
    keys: tuple[tuple[str, str], ...]  # equi-join keys (left column, right column)

    def validate(self) -> None:
        _check(self.kind in ("left", "full"), self, f"kind {self.kind!r}")
        _check(self.columns == self.left.columns + self.right.columns, self,
               "columns are not its inputs' in order")
        _known(self, "ON", [self.on], self.columns)
        _check(all(lk in self.left.columns and rk in self.right.columns
                   for lk, rk in self.keys), self, "a key is not a column of its side")

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class FlatMap(Node):
    """A set-returning FROM item (``generate_series``), called once per input row: the
    row repeated once per element, the calls' elements side by side (zipped to the
    longest, shorter ones padded with NULL). ``columns`` = the input's, then one per
    call. Without an input the calls run once: their arguments are constants, and the
    node is a constant relation."""

    input: Node | None
    calls: tuple[exp.Expr, ...]  # bound ast.GenerateSeries calls over the input's columns

    def validate(self) -> None:
        own = self.input.columns if self.input is not None else ()
        _check(self.columns[:len(own)] == own, self, "does not extend its input")
        _check(len(self.columns) - len(own) == len(self.calls) > 0, self,
               "one column per call")
        _known(self, "calls", self.calls, own)

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,) if self.input is not None else ()


@dataclass(frozen=True)
class Reduce(Node):
    """GROUP BY: ``columns`` = key names, then aggregate names."""

    input: Node
    keys: tuple[exp.Expr, ...]
    aggs: tuple[exp.Expr, ...]  # aggregate calls over input columns

    def validate(self) -> None:
        _check(len(self.columns) == len(self.keys) + len(self.aggs), self,
               "one column per key and aggregate")
        _known(self, "keys and aggregates", self.keys + self.aggs, self.input.columns)

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

    def validate(self) -> None:
        _check(self.columns == self.input.columns, self, "columns differ from its input's")
        _check(set(self.group) <= set(self.columns), self, "groups by unknown columns")
        _check((self.limit is None or self.limit >= 0) and self.offset >= 0, self,
               "negative LIMIT or OFFSET")

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Window(Node):
    """Adds window-function columns; incremental per common PARTITION BY key."""

    input: Node
    exprs: tuple[exp.Expr, ...]  # the added columns, after the input's
    partition: tuple[str, ...]  # input columns every window partitions by

    def validate(self) -> None:
        n = len(self.input.columns)
        _check(self.columns[:n] == self.input.columns, self, "does not extend its input")
        _check(len(self.columns) - n == len(self.exprs), self, "one column per window")
        _check(set(self.partition) <= set(self.input.columns), self,
               "partitions by unknown columns")

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.input,)


@dataclass(frozen=True)
class Union(Node):
    """UNION ALL; inputs' columns line up by position."""

    parts: tuple[Node, ...]

    def validate(self) -> None:
        _check(all(len(p.columns) == len(self.columns) for p in self.parts), self,
               "inputs of different arity")

    @property
    def inputs(self) -> tuple[Node, ...]:
        return self.parts


@dataclass(frozen=True)
class SetOp(Node):
    """EXCEPT / INTERSECT [ALL]: a row's output multiplicity depends on that row only."""

    kind: Literal["except", "intersect"]
    all: bool
    left: Node
    right: Node

    def validate(self) -> None:
        _check(self.kind in ("except", "intersect"), self, f"kind {self.kind!r}")
        _check(len(self.left.columns) == len(self.right.columns) == len(self.columns), self,
               "inputs of different arity")

    @property
    def inputs(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Opaque(Node):
    """A subquery the IR does not model: recomputed whole, with the reason."""

    query: exp.Query  # over pin keys, like a bound query
    reason: str  # a reason code (mzflow/reasons.py)
    reads: tuple[Get, ...] = field(default=())

    @property
    def inputs(self) -> tuple[Node, ...]:
        return self.reads


def col(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def sql(e: exp.Expr) -> str:
    """An expression as EXPLAIN prints it."""
    return e.sql(dialect="postgres")
