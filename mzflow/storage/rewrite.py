"""Large UPDATEs and DELETEs, written before the catalog's write lock and only committed
under it (issue 39 item 2: the lock is bounded by the commit, not by the write).

delta-rs's MERGE computes, writes and commits in one call, so a MERGE under the lock
holds it while every touched file is rewritten: 0.5–0.6 s for 500 k rows. Instead a
large change is *staged*: outside the lock, the files of the version the statement
read that hold any changed row are read, their kept rows and the new ones written as
new files (by delta-rs, into a staging table beside the shard, so statistics come from
the same writer as every other file); under the lock, if the shard is still at that
version, the files move into the shard and one commit adds them and removes the files
they replace (``create_write_transaction``): milliseconds.

delta-rs's write transactions take no change-data (``cdc``) actions (1.6), so Delta's
change feed of such a commit reads its removed files as deletions and its added ones as
insertions: whole files, where a MERGE's change files hold only the changed rows (and
the rows a rewrite kept came twice, to be consolidated away). So the rewrite also
writes the rows it deletes and inserts to a file of its own under ``_change_data/``,
named in the commit's metadata, which ``Shard.change_feed`` reads instead of the
commit's files (``storage/exact_changes.py``). Only large changes are staged
(``staged_write_min_rows``); the rest merge under the lock as before. Partitioned
shards always merge (their files' partition values would have to be put back into the
rows).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.catalog.model import ROWID
from mzflow.storage import exact_changes
from mzflow.storage.commits import ROWS_CHANGED_KEY, commit_props
from mzflow.storage.errors import writes
from mzflow.storage.rows import plain_type

STAGING = "_mz_staging"  # under the shard: Delta and Spark skip folders starting "_"
_STALE_AFTER_S = 3600.0  # a staging folder this old was left by a killed writer


class Moved(Exception):
    """The shard committed after the version a rewrite was staged against."""


@dataclass
class Staged:
    """A rewrite ready to commit: files written, nothing committed."""

    shard: Path
    version: int  # the shard's version the rewrite replaces files of
    folder: Path  # the staging table holding the new files
    adds: list[dict[str, Any]]  # the staging table's add actions (Delta's JSON)
    removes: list[tuple[str, int]]  # (path in the shard, size) of the files replaced
    changed: int  # rows it deletes and inserts, an update counting as both
    changes: Path | None = None  # those rows, as the change feed gives them (staged)
    moved: list[Path] = field(default_factory=list)

    def discard(self) -> None:
        """Remove the staged files (after a failed or abandoned commit)."""
        for path in self.moved:
            path.unlink(missing_ok=True)
        shutil.rmtree(self.folder, ignore_errors=True)


@writes  # a full disk while staging: mzflow's StorageError (the soak's raw DeltaError)
def stage(shard: Any, version: int, schema: pa.Schema, *, file_size: int, min_rows: int,
          replace: pa.Table | None = None, delete: pa.Array | None = None
          ) -> Staged | None:
    """Stage replacing the rows of ``replace`` (by row id) or deleting the row ids
    ``delete`` in ``shard`` as of ``version``; None when the change should merge under
    the lock instead (under ``min_rows``, ``staged_write_min_rows``: a MERGE of 50 k
    rows holds the lock 0.23 s; a partitioned shard).
    ``schema``: the shard's full Arrow schema (row ids included), which kept rows of
    files older than an ADD COLUMN are brought to."""
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    ids = (replace.column(ROWID) if replace is not None else delete)
    assert ids is not None
    if len(ids) == 0 or len(ids) < min_rows or shard.partitioned_by():
        return None
    sweep(shard.path)
    ids = pc.unique(ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids)
    actions = shard.add_actions(version)
    touched = _touched(actions, pc.sort_indices(ids), ids)
    if not touched:
        return None
    parts, gone = [], []
    for i in touched:
        # Conformed first: delta-rs's files ask for string views, which Arrow's filter
        # has no kernel for (the soak's UPDATEs of t2, a text column, failed here).
        data = _conform(pq.read_table(shard.path / unquote(actions.column("path")[i].as_py())),
                        schema)
        hit = pc.is_in(data.column(ROWID), ids)
        parts.append(data.filter(pc.invert(hit)))
        gone.append(data.filter(hit))
    if replace is not None:
        parts.append(_conform(replace, schema))
    content = pa.concat_tables(parts)
    # Sorted by row id, as appends write them: each file's min/max stay selective.
    content = content.take(pc.sort_indices(content.column(ROWID)))
    folder = shard.path / STAGING / uuid.uuid4().hex
    try:
        write_deltalake(str(folder), content, mode="error", target_file_size=file_size)
        adds = [json.loads(line)["add"]
                for entry in sorted((folder / "_delta_log").glob("*.json"))
                for line in entry.read_text().splitlines() if line.startswith('{"add"')]
        changes = exact_changes.write(folder, pa.concat_tables(gone), (
            _conform(replace, schema) if replace is not None else None))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    removes = [(actions.column("path")[i].as_py(), int(actions.column("size_bytes")[i].as_py()))
               for i in touched]
    # The rows that change, as a MERGE's metrics count them (Shard.estimated_change_count:
    # the batch a tick's cost switch weighs).
    inserted = replace.num_rows if replace is not None else 0
    return Staged(shard.path, version, folder, adds, removes,
                  sum(g.num_rows for g in gone) + inserted, changes)


@writes
def _commit(self: Any, staged: Staged, ts: int, txn: tuple[str, int] | None) -> int:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    # The table as of the staged version: were another commit to land between the
    # check below and this one, delta-rs's conflict check sees it remove our files.
    dt = DeltaTable(str(staged.shard), version=staged.version)
    now = int(time.time() * 1000)
    actions: list[Any] = []
    for add in staged.adds:
        source = staged.folder / unquote(add["path"])
        target = staged.shard / source.name  # part-<n>-<uuid>-c000…: unique
        os.replace(source, target)
        staged.moved.append(target)
        actions.append(AddAction(target.name, int(add["size"]), {}, now, True,
                                 add["stats"]))
    actions += [RemoveAction(path, True, now, size, {}) for path, size in staged.removes]
    extra = {ROWS_CHANGED_KEY: str(staged.changed)}
    if staged.changes is not None:
        moved = exact_changes.move_into(staged.changes, staged.shard)
        staged.moved.append(staged.shard / moved)
        extra[exact_changes.KEY] = moved
    dt.create_write_transaction(actions, "append", dt.schema(),
                                commit_properties=commit_props(ts, txn, extra=extra))
    return staged.version + 1


def commit(shard: Any, staged: Staged, ts: int, txn: tuple[str, int] | None) -> int:
    """Under the lock: commit ``staged`` at ``ts``; the new version. Raises Moved (the
    staged files removed) if the shard has moved past the staged version."""
    if shard.version() != staged.version:
        staged.discard()
        raise Moved(f"{shard.path.name} is past version {staged.version}")
    try:
        version = int(_commit(shard, staged, ts, txn))
    except BaseException:
        staged.discard()
        raise
    staged.moved.clear()  # the shard's own files now
    shutil.rmtree(staged.folder, ignore_errors=True)
    try:  # the staging folder itself, unless another writer is staging too
        staged.folder.parent.rmdir()
    except OSError:
        pass
    return version


def sweep(shard_path: Path) -> None:
    """Remove staging folders a killed writer left (older than an hour: a writer
    stages and commits within one statement)."""
    root = shard_path / STAGING
    if not root.is_dir():
        return
    for folder in root.iterdir():
        try:
            if time.time() - folder.stat().st_mtime > _STALE_AFTER_S:
                shutil.rmtree(folder, ignore_errors=True)
        except FileNotFoundError:
            continue


def _touched(actions: pa.Table, order: pa.Array, ids: pa.Array) -> list[int]:
    """The files (rows of ``actions``) whose row id range holds one of ``ids``; a file
    without statistics counts as touched."""
    import numpy as np

    low, high = f"min.{ROWID}", f"max.{ROWID}"
    if low not in actions.column_names:
        return list(range(actions.num_rows))
    sorted_ids = ids.take(order).to_numpy(zero_copy_only=False)
    touched = []
    for i, (lo, hi) in enumerate(zip(actions.column(low).to_pylist(),
                                     actions.column(high).to_pylist(), strict=True)):
        if lo is None or hi is None:
            touched.append(i)
            continue
        first = int(np.searchsorted(sorted_ids, lo, side="left"))
        if first < len(sorted_ids) and sorted_ids[first] <= hi:
            touched.append(i)
    return touched


def _conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with ``schema``'s columns in its order: a column added since the file
    was written is null. (Views as plain types: delta-rs reports strings as views.)"""
    schema = pa.schema([f.with_type(plain_type(f.type)) for f in schema])
    columns = [data.column(f.name).cast(f.type) if f.name in data.column_names
               else pa.nulls(data.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)
