"""Write hooks: how a feature wing takes part in table writes, and in the DDL that
defines what it keeps, with neither the core nor session/writes.py importing it.

The session owns the list (session/wiring.py fills it: validation, then projection
upkeep). catalog/ddl asks it for a definition's check, session/writes.py runs every
write's phases through it, and the catalog store runs each hook's ``on_lock`` under
every write lock. The read side's counterpart is read/sources.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow.catalog.model import Item, Snapshot
from mzflow.catalog.store import Store, Writer

# A definition a hook keeps (a Projection, an Expectation) is valid for its table: raises
# the definition's error otherwise.
Check = Callable[[Snapshot, Item, Any], None]
# The table's own commit at a time; returns its new version.
Apply = Callable[[int], int | None]


@dataclass(frozen=True)
class WriteInfo:
    """One table write, as its hooks see it."""

    store: Store
    warehouse: Path
    verb: str  # INSERT, UPDATE, DELETE or COPY
    statement: str  # the verb and the idempotency key: how results name the write
    # Rows as another table (a quarantine) stores them: its types, fresh row ids.
    rows_for: Callable[[Writer, Item, pa.Table], pa.Table]


class HookWrite:
    """One hook's part in one table write. The phases run in the order below (each
    hook's in the list's order) and do nothing unless a hook overrides them."""

    def check(self, w: Writer, table: Item, rows: pa.Table) -> pa.Table:
        """Before the commit: which of the rows the statement produced it commits."""
        return rows

    def holds_rows(self) -> bool:
        """Whether it commits rows of its own even when the table gets none."""
        return False

    def nothing_written(self, w: Writer) -> None:
        """The write ends without a commit: no rows, no idempotency key."""

    def before_commit(self, w: Writer, table: Item, appended: pa.Table | None) -> None:
        """The write's time is taken. ``appended``: the rows an append commits."""

    def commit(self, w: Writer, table: Item, ts: int, count: int, apply: Apply
               ) -> int | None:
        """Around the table's commit, ``apply(ts)``: the table's new version (None when
        the table got nothing)."""
        return apply(ts)

    def committed(self, w: Writer, ts: int) -> None:
        """The table committed at ``ts``, in the catalog's transaction still open."""

    def failed(self, error: BaseException) -> None:
        """The write raised ``error``: nothing was committed, or a table commit the
        catalog never recorded, which the next write adopts."""

    def after(self, snap: Snapshot, table: Item, version: int | None) -> None:
        """The catalog committed the write; ``version``: the table's new one."""

    def notices(self) -> list[str]:
        return []


@dataclass(frozen=True)
class WriteHook:
    """A wing's hook. ``checks``: the kinds of definition it keeps (Projection,
    Expectation) and how each is checked; ``on_lock``: its recovery, run (with the
    warehouse) under every write lock before anything else; ``begin``: its part in one
    table write."""

    name: str
    checks: Mapping[type, Check] = field(default_factory=dict)
    on_lock: Callable[[Path], None] | None = None
    begin: Callable[[WriteInfo], HookWrite] | None = None


def check_of(hooks: Iterable[WriteHook], kind: type) -> Check | None:
    """How the definitions of ``kind`` are checked (None: no hook keeps them, and DDL
    that defines one is refused)."""
    return next((h.checks[kind] for h in hooks if kind in h.checks), None)


def begin(hooks: Iterable[WriteHook], info: WriteInfo) -> list[HookWrite]:
    return [h.begin(info) for h in hooks if h.begin is not None]
