"""The words a tick is described by, each defined once: its mode, the side of its
interval a read sees, and an operator's strategy kind.

They are ``StrEnum``s: a member is the string it has always been, so the Delta commit
metadata (``mzflow.mode``), EXPLAIN's text and the tick reports read as before, and a
string read back from a commit compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """How a tick maintains an index: the plan's mode (``plan.py``), the one a tick
    runs in (``decide.py``), and the one its commit records."""

    STATE = "state"  # a top GROUP BY's partials kept in a state shard, batches merged in
    DELTA = "delta"  # changes propagated through the operator tree
    RECOMPUTE = "recompute"  # the whole definition evaluated and diffed against the index
    # Recorded only: a state-mode tick that recomputed every group (the first, or after
    # recomputed ticks left the state behind). Its cost is a recompute's.
    REBUILD = "rebuild"


class Side(StrEnum):
    """The end of a tick's interval a read sees: its inputs after the batch or before."""

    NEW = "new"
    OLD = "old"


class StrategyKind(StrEnum):
    """How an operator is maintained (EXPLAIN shows it beside each operator)."""

    INCREMENTAL = "incremental"  # its changes computed from its inputs' changes
    RECOMPUTE = "recompute"  # its contents recomputed and diffed, for a reason code
