"""The quarantine, exactly once: a QUARANTINE expectation's failing rows go to
``<table>_quarantine``, a plain table from which fixed rows can be replayed.

The quarantine and its table are two Delta tables and Delta has no two-table commit.
The failing rows are first staged in a file under ``<warehouse>/_pending``, then the
table commits, then the quarantine (with the write's time and an idempotency key). The
first writer to take the catalog's write lock after a crash finishes the quarantine of
a write whose table commit exists and discards the staged rows of one whose does not,
before any writer can make that time readable (``recover``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from mzflow.catalog.ddl import expectations as ddl
from mzflow.catalog.model import TABLE, Item, Snapshot
from mzflow.errors import Error
from mzflow.quality.validate import Checked
from mzflow.storage import paths
from mzflow.storage.delta import Shard

log = logging.getLogger("mzflow.quality")

PENDING = "_pending"


def quarantine_of(snap: Snapshot, table: Item) -> Item:
    item = snap.find(ddl.quarantine_name(table.name), table.schema)
    if item is None or item.kind != TABLE:
        raise Error(f'quarantine table "{ddl.quarantine_name(table.name)}" is missing',
                    hint="re-add a QUARANTINE expectation to create it")
    return item


def quarantine_rows(rows: pa.Table, quarantine: Item, ts: int) -> pa.Table:
    """The failing rows with the quarantine's columns (a column the table gained after
    the quarantine was made is left out) and the time; the write conforms them to its
    types and gives them row ids (WriteInfo.rows_for)."""
    rows = rows.set_column(rows.column_names.index("_mz_quarantined_at"),
                           "_mz_quarantined_at", pa.array([ts] * rows.num_rows, pa.int64()))
    names = [c.name for c in quarantine.columns]
    return pa.table({n: rows.column(n) if n in rows.column_names else
                     pa.nulls(rows.num_rows) for n in names})


def _pending_dir(warehouse: Path) -> Path:
    return warehouse / PENDING


def stage(warehouse: Path, table: Item, quarantine: Item, rows: pa.Table, ts: int) -> Path:
    """Make the quarantined rows durable before the table's commit."""
    folder = _pending_dir(warehouse)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"quarantine-{ts}-{table.id}.arrow"
    meta = {"table": str(paths.table(warehouse, table.id)),
            "quarantine": str(paths.table(warehouse, quarantine.id)),
            "app": _app(table), "ts": str(ts)}
    _write_durably(path, rows.replace_schema_metadata(meta))
    return path


def _app(table: Item) -> str:
    return f"quarantine-{table.id}"


def commit(path: Path) -> None:
    """Append the staged rows to the quarantine, once (idempotency key: the write's
    time), then drop the staged file."""
    with pa.memory_map(str(path)) as source:
        rows = pa.ipc.open_file(source).read_all()
    meta = {k.decode(): v.decode() for k, v in (rows.schema.metadata or {}).items()}
    ts = int(meta["ts"])
    shard = Shard(Path(meta["quarantine"]))
    done = shard.applied(meta["app"])
    if done is None or done < ts:
        shard.append(rows.replace_schema_metadata(None), ts, (meta["app"], ts))
    path.unlink()


def recover(warehouse: Path) -> None:
    """Under the write lock: finish or discard what a killed writer staged."""
    folder = _pending_dir(warehouse)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("quarantine-*.arrow")):
        with pa.memory_map(str(path)) as source:
            meta = {k.decode(): v.decode() for k, v in
                    (pa.ipc.open_file(source).schema.metadata or {}).items()}
        ts = int(meta["ts"])
        table = Shard(Path(meta["table"]))
        if table.path.exists() and any(t == ts for _, t in table.history()):
            log.warning("finishing the quarantine of a write at %d that was interrupted", ts)
            commit(path)
        else:
            log.warning("discarding the quarantine staged by a write at %d that never "
                        "committed", ts)
            path.unlink()
    for tmp in folder.glob("quarantine-*.tmp"):  # a tick's are its own (finish_tick)
        tmp.unlink()
    for path in folder.glob("tick-quarantine-*.arrow"):
        with pa.memory_map(str(path)) as source:
            meta = pa.ipc.open_file(source).schema.metadata or {}
        if not Path(meta[b"index"].decode()).exists():  # the view was dropped
            path.unlink()


# -- a view's quarantine, exactly once ------------------------------------------------------
# A tick's failing rows go to ``<view>_quarantine`` after the index's commit, as a table
# write with the idempotency key (quarantine-tick-<index>, tick time). They are staged
# first, so that a tick killed between the two commits leaves them for the index's next
# tick, which writes them if the index committed that time and drops them if it did not.


def tick_rows(checked: Checked, at: int, view: Item) -> pa.Table | None:
    """The rows a tick quarantines: the view's columns, the expectations, the time."""
    rows = checked.quarantined
    if rows is None or rows.num_rows == 0:
        return None
    return rows.set_column(rows.column_names.index("_mz_quarantined_at"),
                           "_mz_quarantined_at", pa.array([at] * rows.num_rows, pa.int64()))


def stage_tick(warehouse: Path, index: Item, view: Item, rows: pa.Table, at: int) -> Path:
    folder = _pending_dir(warehouse)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"tick-quarantine-{at}-{index.id}.arrow"
    meta = {"index": str(paths.index(warehouse, index.id)), "view": view.id, "ts": str(at),
            "app": f"tick-{index.id}"}
    _write_durably(path, rows.replace_schema_metadata(meta))
    return path


def staged_ticks(warehouse: Path, index: Item) -> list[Path]:
    folder = _pending_dir(warehouse)
    return sorted(folder.glob(f"tick-quarantine-*-{index.id}.arrow")) if folder.is_dir() else []


# (view id, rows, idempotency key): the session's table write of a tick's quarantine
Quarantine = Callable[[str, pa.Table, tuple[str, int]], None]


def finish_tick(path: Path, write: Quarantine) -> None:
    """Write a staged tick's quarantined rows if its index committed that tick; drop them
    if the index went past it without; leave them while neither is known (a tick still
    running)."""
    with pa.memory_map(str(path)) as source:
        rows = pa.ipc.open_file(source).read_all()
    meta = {k.decode(): v.decode() for k, v in (rows.schema.metadata or {}).items()}
    ts = int(meta["ts"])
    index = Shard(Path(meta["index"]))
    if index.path.exists() and any(t == ts for _, t in index.history()):
        write(meta["view"], rows.replace_schema_metadata(None),
              (f"quarantine-{meta['app']}", ts))
    elif index.path.exists():
        done = index.applied(meta["app"])
        if done is None or done <= ts:
            return  # not committed yet, maybe by a tick still running
    path.unlink()


def _write_durably(path: Path, rows: pa.Table) -> None:
    tmp = path.with_suffix(".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
