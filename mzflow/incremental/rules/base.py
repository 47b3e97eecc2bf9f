"""What an incremental rule is: one operator's whole maintenance.

A rule answers, for its IR node type:
- ``strategy``: incremental (and how) or recompute (and why, as a reason code);
- ``describe``: its EXPLAIN line;
- ``full``: its contents at the tick's old or new time, optionally restricted to keys;
- ``delta``: its changes between the two times;
- ``apply``: for operators that sit above a kept state (Map, Filter, TopK), their
  contents computed from their input's contents.
Rules get the tick's :class:`~mzflow.incremental.dataflow.Dataflow` to ask for their
inputs' contents and changes; they never dispatch on other node types themselves.

A :class:`Variant` maintains a whole plan from its root in a mode of its own (state
mode: ``reduce_state``); it is registered beside the rules (``rules/__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from mzflow.errors import Unsupported
from mzflow.incremental.modes import Mode, Side, StrategyKind
from mzflow.plan import ir
from mzflow.plan.ir import Node
from mzflow.reasons import REASONS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from mzflow.incremental.dataflow import Dataflow, Restriction


@dataclass(frozen=True)
class Strategy:
    kind: StrategyKind
    code: str | None = None
    how: str = ""  # for incremental operators: which rule maintains them

    @property
    def reason(self) -> str | None:
        return REASONS.get(self.code) if self.code else None

    def describe(self) -> str:
        if self.code is not None:
            return f"{self.kind} ({self.code}: {self.reason})"
        return f"{self.kind} ({self.how})" if self.how else self.kind


def incremental(how: str) -> Strategy:
    return Strategy(StrategyKind.INCREMENTAL, how=how)


def recompute(code: str) -> Strategy:
    return Strategy(StrategyKind.RECOMPUTE, code)


@dataclass(frozen=True)
class Context:
    """What a rule needs to know of the plan around its node: in state mode, the
    Reduce that keeps partials and the operators above it."""

    state_reduce: ir.Reduce | None = None
    chain: tuple[Node, ...] = ()


class Rule:
    """Base of every rule; a rule that lacks a part says so by name."""

    node: ClassVar[type[Node]]

    def strategy(self, node: Any, ctx: Context) -> Strategy:
        raise NotImplementedError

    def describe(self, node: Any) -> str:
        raise NotImplementedError

    def full(self, flow: Dataflow, node: Any, side: Side, r: Restriction | None
             ) -> DataFrame:
        raise NotImplementedError

    def delta(self, flow: Dataflow, node: Any) -> DataFrame:
        raise NotImplementedError

    def apply(self, node: Any, df: DataFrame) -> DataFrame:
        raise Unsupported(f"{type(node).__name__} cannot be applied above a kept state")


@dataclass(frozen=True)
class VariantTick:
    """What a variant's tick computed: the index's rows (``full``) or their changes
    (with DIFF, the union of ``parts`` when given), and the commit of what the variant
    keeps, ``commit(time, app id)``, made before the index commit."""

    output: DataFrame
    full: bool
    parts: tuple[DataFrame, ...]
    commit: Callable[[int, str], None]


class Variant:
    """A mode that maintains a whole plan from its root rather than operator by
    operator: it claims a root before the operators' rules give their strategies, and
    tells them, in the Context, what it covers."""

    mode: ClassVar[Mode]

    def claim(self, root: Node) -> Context | None:
        """The context for the operators' rules, if this variant maintains ``root``."""
        raise NotImplementedError

    def tick(self, flow: Dataflow, ctx: Context, store: Path, since: int, rebuild: bool,
             topk_margin: int) -> VariantTick | None:
        """One tick over the index's inputs (None: nothing changed). ``store``: where the
        variant keeps what it keeps; ``since``: the index's last good time; ``rebuild``:
        start over from the inputs."""
        raise NotImplementedError
