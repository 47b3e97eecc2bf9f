"""Managing a projection's storage: ALTER TABLE … {ADD|DROP|MATERIALIZE|CLEAR}
PROJECTION [IN PARTITION …], its upkeep after a compaction (merged parts built, dead
ones dropped, the shard vacuumed), and the rows mz_projections and mz_projection_history
take from storage.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog import frontiers
from mzflow.catalog.model import Item, Projection, Snapshot
from mzflow.projections import shape as shapes
from mzflow.projections.store import part_name, shard_of
from mzflow.projections.write import Outcome, add_parts
from mzflow.storage import paths
from mzflow.storage.delta import Shard

log = logging.getLogger("mzflow.projections")

PartitionValue = tuple[str | None, ...]  # IN PARTITION's literal per PARTITION BY column


def materialize(snap: Snapshot, warehouse: Path, table: Item, projection: Projection,
                partition: PartitionValue | None = None, operation: str = "materialize"
                ) -> Outcome:
    """Store the rows of every part of the table's newest version that has none (in
    ``partition`` only, if given). Resumable: parts already stored are skipped, so a
    run killed half way is finished by the next."""
    shard = Shard.shared(paths.table(warehouse, table.id))
    version = shard.version()
    kept = shard_of(warehouse, projection).parts()
    files = [f for f in _in_partition(shard, version, table, partition)
             if part_name(f) not in kept]
    return add_parts(snap, warehouse, table, projection, files,
                      (f"proj-{projection.id}-m", _materialize_seq(warehouse, projection)),
                      operation)


def _materialize_seq(warehouse: Path, projection: Projection) -> int:
    # Each MATERIALIZE's commit id is new (the parts it writes are the ones missing).
    history = shard_of(warehouse, projection).history()
    return len(history) + 1


def clear(snap: Snapshot, warehouse: Path, table: Item, projection: Projection,
          partition: PartitionValue | None = None) -> Outcome:
    """Drop the stored rows of every part (in ``partition`` only, if given)."""
    pshard = shard_of(warehouse, projection)
    kept = pshard.parts()
    result = Outcome(projection.name)
    if partition is None:
        parts = None
        result.parts = len(kept)
    else:
        shard = Shard.shared(paths.table(warehouse, table.id))
        wanted = {part_name(f) for f in _in_partition(shard, shard.version(), table,
                                                       partition)}
        parts = sorted(p for p in kept if p in wanted)
        result.parts = len(parts)
        if not parts:
            return result
    pshard.clear(parts, {"operation": "clear", "parts": result.parts, "rows": 0,
                         "bytes": 0, "seconds": 0.0})
    return result


def _in_partition(shard: Shard, version: int, table: Item, partition: PartitionValue | None
                  ) -> list[str]:
    """The files of ``version`` in ``partition`` (all of them when None): those whose
    Delta partition values (the hidden keys, storage/partitions.py) are the keys of the
    literal cast to each column's type."""
    files = shard.files(version)
    if partition is None:
        return files
    from mzflow.errors import InvalidOption
    from mzflow.storage import partitions
    from mzflow.storage.types import parse_type

    if not table.partition_by:
        raise InvalidOption(f'table "{table.name}" has no partitions',
                            hint="CREATE TABLE … PARTITION BY (column) makes them")
    if len(partition) != len(table.partition_by):
        raise InvalidOption(f"IN PARTITION needs {len(table.partition_by)} values, one per "
                            f"PARTITION BY column of \"{table.name}\"",
                            hint=f"IN PARTITION ({', '.join(table.partition_by)})")
    types = {c.name: c.type for c in table.columns}
    wanted = []
    for column, text in zip(table.partition_by, partition, strict=True):
        try:
            wanted.append(partitions.key_of_literal(text, parse_type(types[column]).arrow))
        except (pa.ArrowInvalid, ValueError):
            raise InvalidOption(f'invalid partition value "{text}" for column "{column}" '
                                f"of type {types[column]}") from None
    actions = shard.add_actions(version)
    if actions.num_rows == 0:
        return []
    values = zip(*(actions.column(f"partition.{partitions.key_column(c)}").to_pylist()
                   for c in table.partition_by), strict=True)
    chosen = {part_name(path) for path, value in zip(actions.column("path").to_pylist(),
                                                      values, strict=True)
              if list(value) == wanted}
    return [f for f in files if part_name(f) in chosen]


def partition_value(expr: exp.Expr) -> PartitionValue:
    """``IN PARTITION <literal>`` or ``IN PARTITION (<literal>, …)`` as text per column
    (None for NULL); the column types read the text (storage/partitions.py)."""
    from mzflow.errors import InvalidOption

    items = expr.expressions if isinstance(expr, exp.Tuple) else [expr]
    out: list[str | None] = []
    for item in items:
        while isinstance(item, exp.Paren | exp.Cast):  # (5), DATE '2024-01-01'
            item = item.this
        if isinstance(item, exp.Null):
            out.append(None)
        elif isinstance(item, exp.Boolean):
            out.append("true" if item.this else "false")
        elif isinstance(item, exp.Neg) and isinstance(item.this, exp.Literal):
            out.append(f"-{item.this.this}")
        elif isinstance(item, exp.Literal | exp.Identifier):
            out.append(str(item.this))
        else:
            raise InvalidOption(f"IN PARTITION takes literals, not {item.sql()}")
    return tuple(out)


def after_compaction(snap: Snapshot, warehouse: Path, table: Item, projection: Projection
                     ) -> tuple[int, int]:
    """After the table's files were merged and vacuumed: store the rows of the parts the
    merge wrote (else every read would project them on the fly) and drop the rows of
    parts whose files are gone. (parts built, parts dropped); under the write lock."""
    shard = Shard(paths.table(warehouse, table.id))
    on_disk = {f.name for f in shard.path.rglob("*.parquet")}
    pshard = shard_of(warehouse, projection)
    dead = sorted(p for p in pshard.parts() if p not in on_disk)
    if dead:
        pshard.clear(dead, {"operation": "compaction", "parts": len(dead), "rows": 0,
                            "bytes": 0, "seconds": 0.0})
    built = 0
    try:
        built = materialize(snap, warehouse, table, projection, operation="compaction").parts
    except Exception as e:  # reads project the merged parts on the fly meanwhile
        log.warning("projection %s of %s not built after compaction: %s",
                    projection.name, table.qualified_name, e)
    # A projection shard gains a file and a log entry per write, like its table: without
    # this its folder and its log would grow for as long as the table lives. Its removed
    # files are kept for the table's history (in whole hours: delta-rs's unit), a plain
    # read's grace as for the table's own files.
    pshard.vacuum(frontiers.retain_ms(table, snap) // 3_600_000)
    return built, len(dead)


# -- statements ---------------------------------------------------------------------


def alter(store: Any, warehouse: Path, stmt: Any) -> list[str]:
    """ALTER TABLE t {ADD|DROP|MATERIALIZE|CLEAR} PROJECTION …"""
    import shutil

    from mzflow.catalog.ddl import projections as ddl

    def drop_storage(projection: Projection) -> None:
        shutil.rmtree(paths.projection(warehouse, projection.table_id, projection.id),
                      ignore_errors=True)

    notices, table, projection = ddl.alter(store, stmt, shapes.check, drop_storage)
    action = stmt.args["action"]
    if projection is None or table is None or action in ("ADD", "DROP"):
        return notices
    partition = stmt.args.get("partition")
    value = partition_value(partition) if partition is not None else None
    with store.write() as w:  # one writer of a projection at a time (see write.add_parts)
        if action == "MATERIALIZE":
            done = materialize(w.snapshot, warehouse, table, projection, value)
            return notices + [f'projection "{projection.name}": {done.parts} parts '
                              f"materialized, {done.rows} rows in {done.seconds:.2f} s"]
        done = clear(w.snapshot, warehouse, table, projection, value)
    return notices + [f'projection "{projection.name}": {done.parts} parts cleared']


# -- mz_projections, mz_projection_history, SHOW PROJECTIONS ------------------------------


SYSTEM_TABLES = ("mz_projections", "mz_projection_history")  # their storage's part


def system_rows(name: str, snap: Snapshot, warehouse: Path) -> list[tuple[Any, ...]]:
    from mzflow.catalog.system import projection_kind

    out: list[tuple[Any, ...]] = []
    for p in snap.projections:
        shard = shard_of(warehouse, p)
        history = shard.history()
        if name == "mz_projection_history":
            out += [(p.id, h.get("operation"), h.get("parts", 0), h.get("rows", 0),
                     h.get("bytes", 0), float(h.get("seconds", 0.0)),
                     h.get("table_version"), h.get("at_ms")) for h in history]
            continue
        rows, size, _ = shard.size()
        out.append((p.id, p.table_id, p.name, projection_kind(p.query), p.query,
                    len(shard.parts()), rows, size,
                    sum(int(h.get("rows", 0)) for h in history),
                    round(sum(float(h.get("seconds", 0.0)) for h in history), 4)))
    return out
