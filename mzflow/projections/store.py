"""A projection's shard: its rows per part of the table, one Delta partition per part.

A part is one data file of the table, named by its file name (Delta names data files
with a UUID, so a name is unique within a table). The table's files never change:
a projection row computed from a part stays right for as long as any version of the
table holds that part. So a reader of the table at version *v* takes the stored rows
of *v*'s parts and computes the rest on the fly, and the two shards never need one
commit. Partitioning by part makes "which parts are kept" a look at the add actions,
and CLEAR a metadata-only delete.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow import caches
from mzflow.catalog.model import Projection
from mzflow.storage import paths
from mzflow.storage.delta import TABLE_CONFIG, _log, writes
from mzflow.storage.rows import plain_strings

PART = "_mz_part"
STATS_KEY = "mzflow.projection"  # commit metadata: what a write cost (mz_projection_history)
# Files written before the commit that names their part (ProjectionShard.stage). A folder
# whose name starts with "_" is not the table's: delta-rs's vacuum leaves it alone, so a
# vacuum cannot take a file between its writing and its commit.
STAGING = "_mz_staging"
STAGED_MAX_AGE_S = 3600.0  # an older staged file's writer died: compaction deletes it


_OPEN = caches.lru("projections.open_tables", 1024)  # path → delta-rs DeltaTable
_PARTS = caches.lru("projections.parts", 256)  # (path, version) → part → its files


def part_name(uri: str) -> str:
    """A data file's part name: its file name (a table's file names are unique)."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Staged:
    """One write's projection rows in a Parquet file that no version of the shard holds
    yet: the slow half of a store, done while the table's own commit runs."""
    path: Path
    stats: str  # the add action's statistics (Delta's JSON)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


class ProjectionShard:
    def __init__(self, path: Path):
        self.path = Path(path)

    def exists(self) -> bool:
        return (self.path / "_delta_log").is_dir()

    @writes
    def create(self, schema: pa.Schema) -> None:
        from deltalake import DeltaTable

        if self.exists():
            return
        _OPEN.pop(str(self.path), None)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        config = {k: v for k, v in TABLE_CONFIG.items() if "ChangeDataFeed" not in k}
        DeltaTable.create(str(self.path), schema, mode="ignore", partition_by=[PART],
                          configuration=config)

    def _table(self, current: bool = False) -> Any:
        """The shard at its newest version, opened once per process: an open table reads
        only the commits since it was last read (a routed read looks at it 2-3 times).
        ``current``: the caller read it just now and nobody else can have written since
        (a writer under the catalog's write lock): no log listing."""
        from deltalake import DeltaTable

        key = str(self.path)
        dt = _OPEN.get(key)
        if dt is None:
            dt = _OPEN[key] = DeltaTable(key)
        elif not current:
            dt.update_incremental()
        return dt

    def parts(self) -> dict[str, list[str]]:
        """Part name → the shard's files that hold its rows (at the newest version)."""
        if not self.exists():
            _OPEN.pop(str(self.path), None)  # dropped (and maybe re-created) since
            return {}
        dt = self._table()
        key = (str(self.path), int(dt.version()))
        hit = _PARTS.get(key)
        if hit is not None:
            return {p: list(f) for p, f in hit.items()}
        actions = pa.table(dt.get_add_actions(flatten=True))
        out: dict[str, list[str]] = {}
        if actions.num_rows:
            for path, part in zip(actions.column("path").to_pylist(),
                                  actions.column(f"partition.{PART}").to_pylist(),
                                  strict=True):
                out.setdefault(part, []).append(str(self.path / _unquote(path)))
        _PARTS[key] = out
        return {p: list(f) for p, f in out.items()}

    @writes
    def add(self, rows: pa.Table, txn: tuple[str, int], stats: dict[str, Any],
            sort_key: str | None = None, group_rows: int = 8192, current: bool = False
            ) -> bool:
        """Append ``rows`` (with ``PART``; cast to the shard's types) in one commit, once
        per ``txn`` (False: a commit with that id was already made). ``sort_key``: the
        rows are sorted by it; their files get small row groups with statistics on it (a
        sorted projection). ``current``: as for ``_table``."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        from mzflow.storage.arrangement import writer_properties

        dt = self._table(current)  # once: each open re-lists the log (a write's fixed cost)
        done = dt.transaction_version(txn[0])
        if done is not None and done >= txn[1]:
            return False
        rows = rows.cast(pa.schema(dt.schema().to_arrow()))
        props = CommitProperties(custom_metadata={STATS_KEY: json.dumps(stats)},
                                 app_transactions=[Transaction(txn[0], txn[1])])
        extra = ({"writer_properties": writer_properties(sort_key, group_rows)}
                 if sort_key is not None else {})
        write_deltalake(dt, rows, mode="append", partition_by=[PART],
                        commit_properties=props, **extra)
        return True

    @writes
    def stage(self, rows: pa.Table, sort_key: str | None = None, group_rows: int = 8192
              ) -> Staged | None:
        """Write ``rows`` (``PART`` is dropped: its value is not known yet) to a file of
        their own, cast to the shard's types, as ``add`` would write them; None when the
        shard does not exist yet (its first store creates it, with ``add``)."""
        import pyarrow.parquet as pq

        if not self.exists():
            return None
        # The shard's schema never changes (a projection's columns are fixed when it
        # is made): the table as opened last is good enough, with no log listing.
        schema = pa.schema([f for f in plain_strings(
            pa.schema(self._table(current=str(self.path) in _OPEN).schema().to_arrow())
            .empty_table()).schema if f.name != PART])
        data = plain_strings(rows.drop_columns([PART]) if PART in rows.column_names
                             else rows).select(schema.names).cast(schema)
        folder = self.path / STAGING
        folder.mkdir(exist_ok=True)
        path = folder / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        # As delta-rs writes a sorted projection's files (storage/arrangement.py):
        # small row groups with statistics on the key alone.
        pq.write_table(data, path, compression="snappy",
                       row_group_size=group_rows if sort_key is not None else None,
                       write_statistics=[sort_key] if sort_key is not None else True)
        return Staged(path, json.dumps(_file_stats(data, sort_key)))

    @writes
    def add_staged(self, staged: Staged, part: str, txn: tuple[str, int],
                   stats: dict[str, Any], current: bool = False) -> bool:
        """Commit ``staged`` as the rows of ``part``, once per ``txn`` like ``add`` (False:
        already made; the staged file is deleted). Only a log entry is written here. A
        crash between the file's move and the commit leaves a file no version holds,
        which the next vacuum deletes."""
        from urllib.parse import quote

        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction

        dt = self._table(current)
        done = dt.transaction_version(txn[0])
        if done is not None and done >= txn[1]:
            staged.discard()
            return False
        relative = f"{PART}={part}/{staged.path.name}"
        target = self.path / relative
        target.parent.mkdir(exist_ok=True)
        os.replace(staged.path, target)
        action = AddAction(quote(relative, safe="/="), target.stat().st_size, {PART: part},
                           int(time.time() * 1000), True, staged.stats)
        props = CommitProperties(custom_metadata={STATS_KEY: json.dumps(stats)},
                                 app_transactions=[Transaction(txn[0], txn[1])])
        dt.create_write_transaction([action], "append", dt.schema(), partition_by=[PART],
                                    commit_properties=props)
        return True

    @writes
    def vacuum(self, grace_hours: int) -> int:
        """Checkpoint the log, then delete the files that the log removed (CLEAR, a
        compaction's dead parts) over ``grace_hours`` ago, or never held (a writer killed
        between a file's move and its commit); how many went. Readers list the newest
        version's parts and then read them: the grace is theirs. The staging folder is
        not vacuum's (see STAGING): its stale files go by age, here too."""
        if not self.exists():
            return 0
        dt = self._table()
        dt.create_checkpoint()
        removed = dt.vacuum(retention_hours=grace_hours, dry_run=False,
                            enforce_retention_duration=False, full=True)
        # Vacuum leaves each gone part's folder behind, empty: one per write, forever.
        # (Writers of the shard hold the catalog's write lock, as its caller does: no
        # file is being put into one now.)
        for folder in self.path.glob(f"{PART}=*"):
            try:
                folder.rmdir()
            except OSError:  # not empty: a part still held
                pass
        return len(removed) + self.drop_stale_staged()

    def drop_stale_staged(self, now: float | None = None) -> int:
        """Delete staged files older than ``STAGED_MAX_AGE_S`` (their writer was killed
        before its commit); how many went."""
        folder = self.path / STAGING
        if not folder.is_dir():
            return 0
        limit = (time.time() if now is None else now) - STAGED_MAX_AGE_S
        removed = 0
        for f in folder.glob("*.parquet"):
            try:
                if f.stat().st_mtime < limit:
                    f.unlink()
                    removed += 1
            except FileNotFoundError:  # committed (moved) meanwhile
                pass
        return removed

    @writes
    def clear(self, parts: list[str] | None, stats: dict[str, Any]) -> None:
        """Drop the rows of ``parts`` (all when None): a partition delete, no rewrite."""
        from deltalake import CommitProperties

        if not self.exists():
            return
        props = CommitProperties(custom_metadata={STATS_KEY: json.dumps(stats)})
        dt = self._table()
        if parts is None:
            dt.delete(commit_properties=props)
            return
        for i in range(0, len(parts), 500):
            chunk = ", ".join("'" + p.replace("'", "''") + "'" for p in parts[i:i + 500])
            dt.delete(f"{PART} IN ({chunk})", commit_properties=props)

    def schema(self) -> pa.Schema:
        return pa.schema(self._table().schema().to_arrow())

    def history(self) -> list[dict[str, Any]]:
        """What each commit cost, oldest first: the ``STATS_KEY`` records."""
        if not self.exists():
            return []
        out = []
        for entry in reversed(_log(self._table())):
            raw = entry.get(STATS_KEY)
            if raw:
                record = json.loads(raw)
                record.setdefault("at_ms", entry.get("timestamp"))
                out.append(record)
        return out

    def size(self) -> tuple[int, int, int]:
        """(rows, bytes, files) at the newest version."""
        if not self.exists():
            return 0, 0, 0
        actions = pa.table(self._table().get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return 0, 0, 0
        import pyarrow.compute as pc

        return (int(pc.sum(actions.column("num_records")).as_py() or 0),
                int(pc.sum(actions.column("size_bytes")).as_py() or 0), actions.num_rows)


def shard_of(warehouse: Path, projection: Projection) -> ProjectionShard:
    return ProjectionShard(paths.projection(warehouse, projection.table_id, projection.id))


def _file_stats(data: pa.Table, sort_key: str | None) -> dict[str, Any]:
    """Delta's statistics of a file: its rows, nulls per column, and the bounds of the
    sort key when its type has a plain JSON form (Delta's stats are optional per column;
    mzflow's readers use the Parquet row groups' own)."""
    import pyarrow.compute as pc

    stats: dict[str, Any] = {"numRecords": data.num_rows,
                             "nullCount": {c: data.column(c).null_count
                                           for c in data.column_names}}
    if sort_key is not None and data.num_rows > data.column(sort_key).null_count:
        t = data.schema.field(sort_key).type
        if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_date32(t):
            bounds = pc.min_max(data.column(sort_key))
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
            if pa.types.is_date32(t):
                lo, hi = lo.isoformat(), hi.isoformat()
            stats["minValues"], stats["maxValues"] = {sort_key: lo}, {sort_key: hi}
    return stats


def read_files(files: list[str], schema: pa.Schema) -> pa.Table:
    """The rows of a projection's files (its partition column is in no file)."""
    import pyarrow.parquet as pq

    fields = [f for f in schema if f.name != PART]
    if not files:
        return pa.schema(fields).empty_table()
    tables = [plain_strings(pq.read_table(f)).select([f.name for f in fields])
              .cast(pa.schema(fields))
              for f in files]
    return pa.concat_tables(tables)


def read_keys(files: list[str], key: str, values: list[Any] | None, columns: list[str],
              base: bool = False) -> tuple[pa.Table, int]:
    """Rows of ``files`` whose ``key`` is among ``values`` (all rows when None), and the
    rows read for them. Sorted projection files (``base`` False) are read by the row
    groups whose key range may hold a value; a table's own files (a part without
    projection rows) by Parquet's row-group statistics too, as far as they help."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mzflow.storage.arrangement import groups_holding

    pieces = []
    read = 0
    wanted = sorted({v for v in values if v is not None}) if values is not None else None
    for f in files:
        path = f.removeprefix("file://")
        present = pq.read_schema(path).names
        missing = [c for c in columns if c not in present]  # added after the file
        columns_here = [c for c in columns if c in present]
        if wanted is None:
            piece = pq.read_table(path, columns=columns_here)
            read += piece.num_rows
        elif base:
            try:
                piece = pq.read_table(path, columns=columns_here,
                                      filters=pc.field(key).isin(wanted))
            except (pa.ArrowException, TypeError):  # values that do not compare: all rows
                piece = pq.read_table(path, columns=columns_here)
            read += piece.num_rows
        else:
            picked, rows = groups_holding(path, key, wanted)
            if not picked:
                continue
            piece = pq.ParquetFile(path).read_row_groups(picked, columns=columns_here)
            read += rows
        for c in missing:
            piece = piece.append_column(c, pa.nulls(piece.num_rows))
        piece = piece.select(columns)
        if wanted is not None:
            try:  # fewer rows for Spark; the query applies its WHERE again regardless
                piece = piece.filter(pc.is_in(piece.column(key), value_set=pa.array(
                    wanted, piece.schema.field(key).type)))
            except (pa.ArrowException, TypeError):
                pass
        pieces.append(plain_strings(piece))
    if not pieces:
        return pa.table({c: pa.array([], pa.null()) for c in columns}), read
    return pa.concat_tables(pieces, promote_options="permissive"), read


def _unquote(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)
