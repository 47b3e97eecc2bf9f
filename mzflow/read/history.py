"""The history of a relation: its contents at a time, and its changes between times.

SUBSCRIBE and sinks both need ``(time, diff, row)`` for every time a relation
changed. A relation changes only when one of the tables it reads commits, so
its change times are those tables' commit times (each Delta commit records
its time). Changes are computed per such time:

- a table reads its own Delta change data feed, version by version;
- anything else (a view, a materialized view, a SELECT) is evaluated at
  each change time and diffed against the previous contents, in Arrow.

The second is exact but costs a full evaluation per change time; that is fine
for scheduled exports and interactive streams of moderate size, and is where a
maintained dataflow per subscription would go (see ARCHITECTURE.md).

Rows are consolidated: one row per distinct row and time, ``_mz_diff`` = the
net change of its count. A relation's contents are the same with its count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.catalog.model import ROWID, TABLE, Column, Item, Snapshot
from mzflow.errors import Error
from mzflow.plan.query import Plan
from mzflow.read import reads
from mzflow.storage import paths
from mzflow.storage.delta import DIFF, Shard
from mzflow.storage.rows import Target, conform
from mzflow.storage.types import arrow_schema


@dataclass(frozen=True)
class Source:
    """What a history is of: a table read directly, or any query."""

    plan: Plan
    columns: tuple[Column, ...]
    table: Item | None = None  # set when the source is exactly one table, all its columns
    table_version: int = 0

    @property
    def inputs(self) -> list[Item]:
        return [item for _, item, _ in self.plan.tables]

    @property
    def schema(self) -> pa.Schema:
        return arrow_schema([(c.name, c.type, True) for c in self.columns])


def source(snap: Snapshot, query: exp.Query, item: Item | None = None) -> Source:
    """``query`` bound now. ``item``: the object it selects all of, if any."""
    p = reads.plan(snap, query)
    if p.bound.system_tables:
        raise Error("SUBSCRIBE and sinks read user objects, not system tables")
    columns = p.bound.columns
    if item is not None and item.kind == TABLE and len(p.tables) == 1:
        return Source(p, columns, item, p.tables[0][2])
    return Source(p, columns)


def change_times(src: Source, warehouse: Path, after: int, through: int) -> list[int]:
    """The times in ``(after, through]`` at which some input committed."""
    times: set[int] = set()
    for item in src.inputs:
        for _, ts in Shard(paths.table(warehouse, item.id)).history():
            if after < ts <= through:
                times.add(ts)
    return sorted(times)


def check_available(snap: Snapshot, src: Source, at: int) -> None:
    """History at ``at`` must not have been compacted away (``mzflow compact``)."""
    for item in src.inputs:
        since = item.since_ts or 0
        if at < since:
            raise reads.InvalidTimestamp(
                f"Timestamp ({at}) is not valid for all inputs: {item.qualified_name} has "
                f"since {since}", hint="its history before that was compacted away")


def contents(snap: Snapshot, src: Source, warehouse: Path, at: int) -> pa.Table:
    """The relation at ``at``: distinct rows with their counts in ``_mz_diff``."""
    if src.table is not None:
        shard = Shard(paths.table(warehouse, src.table.id))
        version = shard.version_at(at)
        if version is None:
            return _empty(src)
        return consolidate(_project(src, shard.read(version)), src)
    from mzflow.engine import spark

    relations = reads.relations(src.plan, warehouse, at, snap)
    with spark.registered(relations) as views:
        try:
            raw = spark.collect_arrow(spark.dataframe(src.plan.query, views,
                                                   [c.type for c in src.columns]))
        except Error:
            raise
        except Exception as e:
            raise spark.translate_error(e) from None
    raw = raw.rename_columns([c.name for c in src.columns])
    return consolidate(raw, src)


def changes(snap: Snapshot, src: Source, warehouse: Path, after: int, through: int,
            previous: pa.Table | None = None) -> Iterator[tuple[int, pa.Table]]:
    """``(time, changes)`` for each time in ``(after, through]`` at which the relation
    changed, oldest first. ``previous``: its contents at ``after``, if known."""
    times = change_times(src, warehouse, after, through)
    if not times:
        return
    if src.table is not None:
        shard = Shard(paths.table(warehouse, src.table.id))
        old_v = shard.version_at(after)
        for ts in times:
            new_v = shard.version_at(ts)
            assert new_v is not None
            if old_v is None:
                rows = consolidate(_project(src, shard.read(new_v)), src)
            else:
                rows = consolidate(_project(src, shard.diffs(old_v, new_v)), src)
            old_v = new_v
            if rows.num_rows:
                yield ts, rows
        return
    old = previous if previous is not None else contents(snap, src, warehouse, after)
    for ts in times:
        new = contents(snap, src, warehouse, ts)
        diff = difference(old, new, src)
        old = new
        if diff.num_rows:
            yield ts, diff


def consolidate(rows: pa.Table, src: Source) -> pa.Table:
    """Rows (with or without ``_mz_diff``) → one row per distinct row, diffs summed."""
    cols = [c.name for c in src.columns]
    if DIFF not in rows.column_names:
        rows = rows.append_column(DIFF, pa.array([1] * rows.num_rows, pa.int64()))
    rows = conform_columns(rows.select(cols), src).append_column(
        DIFF, rows.column(DIFF).cast(pa.int64()))
    if rows.num_rows == 0:
        return rows
    summed = rows.group_by(cols, use_threads=False).aggregate([(DIFF, "sum")])
    summed = summed.rename_columns(cols + [DIFF]).select(cols + [DIFF])
    return summed.filter(pc.not_equal(summed.column(DIFF), 0))


def difference(old: pa.Table, new: pa.Table, src: Source) -> pa.Table:
    negated = old.set_column(old.num_columns - 1, DIFF, pc.negate(old.column(DIFF)))
    return consolidate(pa.concat_tables([negated, new]), src)


def conform_columns(rows: pa.Table, src: Source) -> pa.Table:
    # delta-rs hands strings over as string_view; Spark's decimals may be wider.
    rows = rows.cast(pa.schema([f.with_type(pa.string()) if f.type == pa.string_view()
                                else f for f in rows.schema]))
    return conform(rows, [Target(c.name, c.type, True) for c in src.columns])


def _project(src: Source, rows: pa.Table) -> pa.Table:
    """A table's rows → the columns of the version the source reads (no row ids)."""
    keep = [c.name for c in src.columns]
    extra = [DIFF] if DIFF in rows.column_names else []
    for name in keep:  # a version older than an ADD COLUMN: the column reads as NULL
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows))
    return rows.drop_columns([c for c in rows.column_names if c == ROWID]).select(
        keep + extra)


def _empty(src: Source) -> pa.Table:
    return src.schema.append(pa.field(DIFF, pa.int64())).empty_table()
