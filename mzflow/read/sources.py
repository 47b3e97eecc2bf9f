"""Read sources: what a read gets from the features above the core, which register here
so that read/ imports none of them (issue 33).

- Row sources: a system table whose rows live outside the catalog snapshot (in storage,
  in the catalog store's side tables, in the cluster servers' folders) has them from the
  feature that keeps them. A table nobody registered has the catalog's rows
  (catalog/system.py), as a catalog-only reader sees it.
- A router: a read answered from something smaller than its tables (a projection).

The session owns one registry; session/wiring.py registers who gives what. The write
side's counterpart is catalog/hooks.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlglot import exp

from mzflow.catalog.model import Snapshot

Rows = list[tuple[Any, ...]]
RowSource = Callable[[Snapshot], Rows]
# EXPLAIN's: why the tables' own in-process path would not answer a read (None: it may).
Refusal = Callable[[], str | None]


class Routed(Protocol):
    """A read's query, rewritten to read what the router chose."""

    @property
    def query(self) -> exp.Query: ...

    @property
    def relations(self) -> dict[str, Any]:
        """What the rewritten query reads beyond the tables, as Spark relations."""
        ...


class Router(Protocol):
    def route(self, snap: Snapshot, warehouse: Path, query: exp.Query, at: int
              ) -> Routed | None:
        """``query`` at ``at`` rewritten to read less (None: it cannot be)."""
        ...

    def answer(self, routed: Any, types: list[str]) -> Rows | None:
        """The routed query's rows computed in process (None: the read's own path
        computes them, in process from small tables, else Spark the routed query)."""
        ...

    def explain(self, snap: Snapshot, warehouse: Path, query: exp.Query, enabled: bool,
                table_refusal: Refusal | None = None) -> list[str]:
        """EXPLAIN's lines on how a read of ``query`` now is routed. ``table_refusal``
        says why the tables' own in-process path would not answer it (None: it may),
        where a routed read goes when the projection's rows cannot answer it."""
        ...


@dataclass
class ReadSources:
    rows: dict[str, RowSource] = field(default_factory=dict)
    router: Router | None = None

    def add_rows(self, names: Iterable[str], source: RowSource) -> None:
        for name in names:
            if name in self.rows:
                raise ValueError(f"two row sources for {name}")
            self.rows[name] = source

    def set_router(self, router: Router) -> None:
        if self.router is not None:
            raise ValueError("a read has one router")
        self.router = router
