"""A SELECT bound against the catalog, views inlined, tables pinned to versions.

Shared by reads (which run it) and the change planner (which lowers it to the IR).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from mzflow.catalog.bind import Bound, bind, pinned, viewed
from mzflow.catalog.ddl.expectations import read_filters
from mzflow.catalog.model import MATERIALIZED_VIEW, VIEW, Item, Snapshot
from mzflow.plan.inline import checked, inline_views
from mzflow.plan.subqueries import three_valued_in
from mzflow.sql.ast import RowsFrom
from mzflow.sql.joins import replace_relation


@dataclass(frozen=True)
class Plan:
    bound: Bound
    query: exp.Query  # views inlined, tables renamed to their pin keys
    tables: tuple[tuple[str, Item, int], ...]  # (pin key, table, version) read
    indexes: tuple[tuple[str, Item], ...] = ()  # (name in query, index) read instead

    @property
    def needs_spark(self) -> bool:
        # The in-process executor is for catalog queries; it cannot evaluate VALUES
        # or generate_series.
        return bool(self.tables or self.indexes) or (
            not self.bound.system_tables and self.query.find(exp.Values, RowsFrom) is not None)


def plan(snap: Snapshot, query: exp.Query,
         serve: Callable[[Item], Item | None] | None = None) -> Plan:
    """Bind and inline ``query``. ``serve`` may name an index that holds a view's
    maintained contents: that view is then read from the index, not recomputed."""
    bound = bind(snap, query)
    served: dict[str, tuple[str, Item]] = {}
    if serve is not None:
        for table in list(bound.query.find_all(exp.Table)):
            item = viewed(snap, table.name)
            index = serve(item) if item is not None and item.kind in (VIEW, MATERIALIZED_VIEW
                                                                       ) else None
            if index is not None:
                assert item is not None
                key = f"mz_idx_{index.id}"
                served[key] = (key, index)
                if not read_filters(snap, item):
                    table.set("this", exp.to_identifier(key))
                    continue
                # The index keeps the rows the view's expectations leave out of reads.
                rows = exp.select(*[exp.column(c.name, table="_mz_idx", quoted=True)
                                    for c in item.columns]).from_(
                    exp.to_table(key).as_("_mz_idx"))
                replace_relation(table, exp.Subquery(
                    this=checked(snap, item, rows),
                    alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))
    inlined = three_valued_in(inline_views(snap, bound.query))
    tables: dict[str, tuple[str, Item, int]] = {}
    for table in inlined.find_all(exp.Table):
        pin = pinned(table.name)
        if pin is not None and table.name not in tables:
            tables[table.name] = (table.name, snap.item(pin[0]), pin[1])
    return Plan(bound, inlined, tuple(tables.values()), tuple(served.values()))


