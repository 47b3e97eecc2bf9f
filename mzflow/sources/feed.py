"""Committing a generator's step to its tables, once each (a retried tick is a no-op)."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa
from sqlglot import exp

from mzflow.sources.loadgen import Generator


class Appends(Protocol):
    """What ``session/writes.py``'s ``TableWrites`` offers: an idempotent append through
    the write hooks (expectations, projections), keyed ``(app id, version)``."""

    def append(self, name: exp.Table, rows: pa.Table, key: tuple[str, int]) -> object: ...

    def delete(self, stmt: exp.Delete, key: tuple[str, int] | None = None) -> object: ...


def create_tables_sql(gen: Generator, names: dict[str, str]) -> list[str]:
    """``CREATE TABLE`` for each output, ``names`` mapping an output to its table."""
    return [f"CREATE TABLE {names[t]} ({', '.join(f'{c} {ty}' for c, ty in cols)})"
            for t, cols in gen.tables.items()]


def advance(writes: Appends, source_id: str, gen: Generator,
            names: dict[str, str] | dict[str, exp.Table], step: int) -> int:
    """Commit step ``step``'s rows; each table's commit carries the txn id
    ``(source-<id>, step)``, so a retried step inserts nothing twice. Returns the rows
    the step generated (committed now or before)."""
    rows = 0
    for output, data in gen.step(step).items():
        name = names[output]
        table = exp.table_(name, quoted=True) if isinstance(name, str) else name
        writes.append(table, data, (f"source-{source_id}", step))
        rows += data.num_rows
    for output, (column, keys) in gen.removals(step).items():
        name = names[output]
        table = exp.to_table(name) if isinstance(name, str) else name
        # (its own app id: the table's append of this step holds the other)
        where = exp.column(column).isin(*[exp.Literal.number(k) for k in keys])
        writes.delete(exp.delete(table, where=where), (f"source-{source_id}-delete", step))
    return rows
