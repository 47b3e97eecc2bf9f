"""What ``\\d`` and its relatives print: listings of the catalog and one object's details.

Everything comes from one catalog snapshot, plus each maintained index's Delta
shard for its frontier and its last tick (read with delta-rs, never Spark), so
these commands answer at once.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Sequence
from pathlib import Path

from mzflow.catalog import frontiers, names, normalize, sizes, system
from mzflow.catalog.model import (
    INDEX,
    MATERIALIZED_VIEW,
    SINK,
    TABLE,
    VIEW,
    Cluster,
    Item,
    Snapshot,
)
from mzflow.errors import Error, UnknownObject
from mzflow.shell.output import format_table

Rows = list[tuple[object, ...]]

# \d lists what SHOW OBJECTS lists; the letters after \d narrow it, as in psql.
LISTINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "": ("List of relations", (TABLE, VIEW, MATERIALIZED_VIEW, SINK)),
    "t": ("List of tables", (TABLE,)),
    "v": ("List of views", (VIEW,)),
    "m": ("List of materialized views", (MATERIALIZED_VIEW,)),
    "i": ("List of indexes", (INDEX,)),
    "s": ("List of sinks", (SINK,)),
}


def listing(snap: Snapshot, letters: str, pattern: str | None) -> str:
    """``\\d``, ``\\dt``, ``\\dv``, ``\\dm``, ``\\di``, ``\\ds``: name, type, cluster
    (and for indexes and sinks, the relation they are on)."""
    title, kinds = LISTINGS[letters]
    with_on = all(k in (INDEX, SINK) for k in kinds)
    rows: Rows = []
    for item in sorted(snap.items, key=lambda i: (i.schema, i.name)):
        if item.kind not in kinds or not _matches(item.name, pattern):
            continue
        cluster = _cluster(snap, item)
        row: tuple[object, ...] = (item.schema, item.name, item.kind_word)
        if with_on:
            row += (snap.item(item.on_id).name if item.on_id else None,)
        rows.append(row + (cluster.name if cluster else None,))
    columns = ["Schema", "Name", "Type"] + (["On"] if with_on else []) + ["Cluster"]
    return _titled(title, columns, rows, pattern)


def clusters(snap: Snapshot, pattern: str | None) -> str:
    """``\\dc``: clusters with their size, Airflow pool slots and what runs in them."""
    rows: Rows = []
    for c in snap.clusters:
        if not _matches(c.name, pattern):
            continue
        size = "virtual" if c.virtual else c.size or sizes.DEFAULT_SIZE
        slots = sizes.of_cluster(c.virtual, c.size).pool_slots
        indexes = sum(1 for i in snap.in_cluster(c.id) if i.kind == INDEX)
        sinks = sum(1 for i in snap.in_cluster(c.id) if i.kind == SINK)
        rows.append((c.name, size, slots, indexes, sinks))
    return _titled("List of clusters", ["Name", "Size", "Pool slots", "Indexes", "Sinks"],
                   rows, pattern)


def describe(snap: Snapshot, warehouse: Path, name: str) -> str:
    """``\\d name``: columns, indexes, cluster, and for a maintained object its frontier
    and how its last tick ran."""
    try:
        item = names.find(snap, name)
    except UnknownObject:  # an unknown schema or database
        item = None
    if item is None:
        raise UnknownObject(f'Did not find any relation named "{name}".')
    title = f'{item.kind_word.capitalize()} "{item.schema}.{item.name}"'
    lines = [title]
    if item.columns:
        table = format_table(
            ["Column", "Type", "Nullable", "Comment"],
            [(c.name, c.type, "" if c.nullable else "not null", snap.comment(item.id, pos))
             for pos, c in enumerate(item.columns, start=1)])
        lines += table.splitlines()[:-1]  # psql's \d has no "(n rows)"
    if item.on_id is not None:
        lines.append(f"On: {snap.item(item.on_id).qualified_name}")
    cluster = _cluster(snap, item)
    if cluster is not None:
        lines.append(f"Cluster: {cluster.name}")
    if item.kind == INDEX:
        lines.append(f"Keys: {_keys(item)}")
        lines += _maintained(snap, warehouse, item)
    elif item.kind == TABLE:
        lines.append(f"Frontiers: since {_ts(frontiers.since(item, snap))}, "
                     f"upper {_ts(frontiers.upper(snap))}")
    if item.kind in (TABLE, VIEW, MATERIALIZED_VIEW):
        indexes = snap.indexes_on(item.id)
        if indexes:
            lines.append("Indexes:")
            for index in indexes:
                where = snap.cluster(index.cluster_id)
                lines.append(f'    "{index.name}" IN CLUSTER {where.name if where else "?"} '
                             f"({_keys(index)})")
        for index in indexes:
            lines += _maintained(snap, warehouse, index, by=True)
        if item.kind != TABLE and not indexes:
            lines.append("Not maintained: no index, so reads recompute it.")
    if item.definition is not None:
        lines += ["Definition:", "    " + normalize.humanize(item.definition.strip())]
    elif item.kind == SINK:
        lines += ["Definition:", "    " + normalize.humanize(item.create_sql)]
    return "\n".join(lines)


def _maintained(snap: Snapshot, warehouse: Path, index: Item, by: bool = False) -> list[str]:
    """The index's frontier (how far its contents are complete), lag and last tick."""
    from mzflow.incremental import decide
    from mzflow.incremental.plan import derive
    from mzflow.maintain import ticks
    from mzflow.storage.delta import IndexState

    head = f'Maintained by "{index.name}": ' if by else "Maintained: "
    shard = ticks.index_shard(warehouse, index)
    done, error, _ = shard.state() if shard.exists() else IndexState(-1)
    if done < 0:
        lines = [head + "never ticked (upper 0); the next tick or read fills it"]
    else:
        lines = [head + f"upper {_ts(done + 1)}, lag {snap.read_ts - done} ms"]
    if error:
        lines.append(f"  Error: {error}")
    try:
        lines.append(f"  Strategy: {derive(snap, index).strategy.describe()}")
    except Error as e:  # the plan is refused: EXPLAIN says why in full
        lines.append(f"  Strategy: not derived ({e})")
    history = shard.ticks(1) if done >= 0 else []
    if history:
        last = history[0]
        how = [last.get(decide.MODE_KEY, "?")]
        if last.get(decide.DETAIL_KEY):  # the run time overrode the plan, and why
            how.append(last[decide.DETAIL_KEY])
        if last.get(decide.SECONDS_KEY):
            how.append(f"{float(last[decide.SECONDS_KEY]):.2f} s")
        lines.append(f"  Last tick: {', '.join(how)}")
    return lines


def _cluster(snap: Snapshot, item: Item) -> Cluster | None:
    if item.kind == MATERIALIZED_VIEW:  # it lives where its default index lives
        return snap.cluster(system.materialized_view_cluster(snap, item))
    return snap.cluster(item.cluster_id)


def _keys(index: Item) -> str:
    return ", ".join(k.column or k.expression or "" for k in index.keys)


def _ts(ms: int) -> str:
    when = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return f"{ms} ({when:%Y-%m-%d %H:%M:%S} UTC)"


def _matches(name: str, pattern: str | None) -> bool:
    """psql's patterns: ``*`` and ``?`` wildcards, otherwise the exact name."""
    return pattern is None or fnmatch.fnmatchcase(name, pattern)


def _titled(title: str, columns: Sequence[str], rows: Rows, pattern: str | None) -> str:
    if not rows:
        what = title.removeprefix("List of ")
        return (f"Did not find any {what} named \"{pattern}\"." if pattern
                else f"Did not find any {what}.")
    return "\n".join([title.center(max(len(title), 40)).rstrip(), format_table(columns, rows)])
