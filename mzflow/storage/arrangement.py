"""An arrangement: a table's rows kept sorted by one key column, so that looking up
*k* keys reads O(*k*) small row groups however the keys are spread.

It is a Delta shard of *batches*, as in differential dataflow's traces. A batch is
the table's changes over a range of its versions ``(from, upto]`` (the first batch,
``from = -1``, is the table's rows at a version), as ``(row, diff)`` sorted by the key
and written in row groups of a few hundred rows with statistics on the key only.
Each file carries its batch's range and id as constant columns, so the add actions'
min/max statistics say which batches make up the table at a version (the *chain*)
without reading any history. After each append, batches no newer than the previous
frontier merge like a binary counter (a batch merges with the one before it while
that one is not larger), so a lookup touches O(log n) batches and each row is
rewritten O(log n) times.

A batch is one Delta commit, so a writer killed before it leaves nothing and one
that committed is reused; two writers that both append the same range leave
duplicates the chain picks one of (by batch id). A merge replaces its batches in
one commit (an overwrite whose predicate is the merged range), so a reader sees the
batches or their merge, never a half.
"""

from __future__ import annotations

import bisect
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mzflow import caches
from mzflow.storage.commits import TS_KEY
from mzflow.storage.rows import plain_strings
from mzflow.storage.shard import DIFF, Shard

FROM, UPTO, BATCH = "_mz_from", "_mz_upto", "_mz_batch"
_META = (DIFF, FROM, UPTO, BATCH)
_CONFIG = {  # readers at older versions may still need merged-away files
    "delta.logRetentionDuration": "interval 36500 days",
    "delta.deletedFileRetentionDuration": "interval 36500 days",
}
_CHECKPOINT_EVERY = 50  # commits between log checkpoints: reopening stays cheap


@dataclass(frozen=True)
class Batch:
    start: int  # the table version the batch starts after (-1: the first batch)
    upto: int  # the table version it reaches
    id: str
    rows: int
    files: tuple[str, ...]


@dataclass
class Lookup:
    rows: pa.Table  # the matching rows (table columns, no diff)
    read: int  # rows in the row groups read
    groups: int  # row groups read


# Parquet footers of arrangement files (immutable): path → metadata.
_FOOTER_LIMIT = 2048
_FOOTERS = caches.lru("storage.parquet_footers", _FOOTER_LIMIT)


def _footer(path: str) -> pq.FileMetaData:
    hit = _FOOTERS.get(path)
    if hit is None:
        hit = _FOOTERS[path] = pq.read_metadata(path)
    return hit


class ArrangementShard(Shard):
    """The arrangement of one table by ``key`` (a stored column name)."""

    def __init__(self, path: Path, key: str):
        super().__init__(path)
        self.key = key

    def forget(self) -> None:
        """Close the open table (its storage was removed and is being recreated)."""
        self._dt = None

    # -- what it holds ------------------------------------------------------------------

    def batches(self) -> list[Batch]:
        if not self.exists():
            return []
        actions = pa.table(self._table().get_add_actions(flatten=True))
        grouped: dict[tuple[int, int, str], list[tuple[str, int]]] = {}
        paths = actions.column("path").to_pylist()
        rows = actions.column("num_records").to_pylist()
        lo = actions.column(f"min.{FROM}").to_pylist()
        hi = actions.column(f"min.{UPTO}").to_pylist()
        ids = actions.column(f"min.{BATCH}").to_pylist()
        for p, n, a, b, i in zip(paths, rows, lo, hi, ids, strict=True):
            grouped.setdefault((int(a), int(b), str(i)), []).append((p, int(n or 0)))
        root = str(self.path)
        return [Batch(a, b, i, sum(n for _, n in fs),
                      tuple(f if f.startswith("/") else f"{root}/{f}" for f, _ in sorted(fs)))
                for (a, b, i), fs in sorted(grouped.items())]

    def chain(self, version: int | None = None,
              batches: list[Batch] | None = None) -> list[Batch] | None:
        """The batches that make the table at ``version`` (its newest reachable one when
        None); None when no chain ends there (not arranged yet, or merged past it)."""
        batches = self.batches() if batches is None else batches
        by_start: dict[int, list[Batch]] = {}
        for b in batches:
            if version is None or b.upto <= version:
                by_start.setdefault(b.start, []).append(b)
        out: list[Batch] = []
        at = -1
        while at in by_start and (version is None or at != version):
            # the longest step, one copy of it (a duplicate append is ignored)
            step = min(by_start[at], key=lambda b: (-b.upto, b.id))
            out.append(step)
            at = step.upto
        if not out or (version is not None and at != version):
            return None
        return out

    def frontier(self) -> int | None:
        """The newest table version the arrangement reaches."""
        found = self.chain()
        return found[-1].upto if found else None

    # -- writes -------------------------------------------------------------------------

    def add_batch(self, rows: pa.Table, start: int, upto: int, ts: int, *, group_rows: int,
               file_size: int) -> None:
        """Add the batch ``(start, upto]``: ``rows`` are table rows with a diff column
        (for the first batch, ``start = -1``, the table's rows with diff 1)."""
        self._write(rows, start, upto, ts, group_rows, file_size, None)
        if int(self._table().version()) % _CHECKPOINT_EVERY == 0:
            self._table().create_checkpoint()

    def merge(self, run: list[Batch], ts: int, *, group_rows: int, file_size: int) -> None:
        """Replace consecutive batches by one, consolidated (diffs that cancel vanish)."""
        tables = [plain_strings(pq.read_table(f)) for b in run for f in b.files]
        whole = pa.concat_tables([t.drop_columns([c for c in (FROM, UPTO, BATCH)
                                                  if c in t.column_names]) for t in tables],
                                 promote_options="default")
        start, upto = run[0].start, run[-1].upto
        predicate = f"{FROM} >= {start} AND {UPTO} <= {upto}"
        self._write(consolidate(whole), start, upto, ts, group_rows, file_size, predicate)

    def _write(self, rows: pa.Table, start: int, upto: int, ts: int, group_rows: int,
               file_size: int, predicate: str | None) -> None:
        from deltalake import CommitProperties, write_deltalake

        # Every column nullable, so that an empty batch can still be written as one
        # row of NULLs with diff 0: a batch must leave a file, or the chain would have a
        # gap where the table did not change. Readers drop diff-0 rows.
        rows = rows.cast(pa.schema([f.with_nullable(True) for f in rows.schema]))
        if rows.num_rows == 0:
            rows = pa.table({f.name: pa.array([0 if f.name == DIFF else None], f.type)
                             for f in rows.schema})
        rows = rows.sort_by([(self.key, "ascending")])  # NULLs last
        n = rows.num_rows
        batch = uuid.uuid4().hex
        rows = (rows.append_column(FROM, pa.array([start] * n, pa.int64()))
                .append_column(UPTO, pa.array([upto] * n, pa.int64()))
                .append_column(BATCH, pa.array([batch] * n, pa.string())))
        props = CommitProperties(custom_metadata={TS_KEY: str(ts), "mzflow.upto": str(upto)})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        target: Any = self._table() if self.exists() else str(self.path)
        options: dict[str, Any] = {
            "schema_mode": "merge", "configuration": None if self.exists() else _CONFIG,
            "target_file_size": file_size, "writer_properties": _writer(self.key, group_rows),
            "commit_properties": props}
        if predicate is None:
            write_deltalake(target, rows, mode="append", **options)
        else:
            write_deltalake(target, rows, mode="overwrite", predicate=predicate, **options)

    # -- maintenance --------------------------------------------------------------------

    def reclaim(self, keep_from_ts: int) -> dict[str, Any]:
        """Checkpoint the log and delete the files of batches merged away before
        ``keep_from_ts``: a tick that opened the arrangement since then may still read
        them. Files are never rewritten (an optimize would mix batches in one file, and
        a file's constant range columns are how the chain is found); merging is the
        batches' own."""
        latest = self.version()
        keep_from = min(self.version_at(keep_from_ts) or 0, latest)
        removed = self._vacuum(keep_from, None)
        return {"removed_files": removed, "keep_from": keep_from, "version": latest}

    # -- reads --------------------------------------------------------------------------

    def lookup(self, chain: list[Batch], values: list[Any], columns: list[str],
               most: int | None = None) -> Lookup | None:
        """The rows whose key is among ``values`` in the table the chain makes; None
        when the values cannot be compared with the stored keys, or when the row
        groups that may hold them have more than ``most`` rows (a lookup that would
        bring most of a table to the driver: a Spark scan does that better)."""
        wanted = [v for v in values if v is not None]
        with_null = len(wanted) < len(values)
        try:
            ordered = sorted(set(wanted))
        except TypeError:
            return None
        plan: list[tuple[str, list[int]]] = []
        read = groups = 0
        for b in chain:
            for f in b.files:
                ranges = _ranges(f, self.key)
                picked = ranges.holding(ordered, with_null)
                if picked:
                    plan.append((f, picked))
                    groups += len(picked)
                    read += sum(ranges.rows[g] for g in picked)
        if most is not None and read > most:
            return None
        pieces: list[pa.Table] = []
        for f, picked in plan:
            meta = _footer(f)
            present = [c for c in [*columns, DIFF] if c in meta.schema.names]
            part = plain_strings(pq.ParquetFile(f, metadata=meta).read_row_groups(
                picked, columns=present))
            try:
                keys = pa.array(ordered, part.schema.field(self.key).type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
                return None
            mask = pc.is_in(part.column(self.key), value_set=keys)
            if with_null:
                mask = pc.or_(mask, pc.is_null(part.column(self.key)))
            pieces.append(part.filter(mask))
        if not pieces:  # typed like the stored rows, for Spark
            schema = _footer(chain[-1].files[0]).schema.to_arrow_schema()
            pieces.append(plain_strings(schema.empty_table().select(
                [c for c in [*columns, DIFF] if c in schema.names])))
        found = pa.concat_tables(pieces, promote_options="default")
        for c in columns:  # a column added after these batches were written: NULL
            if c not in found.column_names:
                found = found.append_column(c, pa.nulls(found.num_rows))
        if len(chain) > 1:
            found = consolidate(found)
        found = found.filter(pc.greater(found.column(DIFF), 0))
        counts = found.column(DIFF).to_numpy(zero_copy_only=False)
        if (counts > 1).any():
            # Rows read without their row id (the in-process executor reads only the
            # columns a plan uses) can be equal: each counts as many times as it is there.
            found = found.take(np.repeat(np.arange(found.num_rows), counts.astype(np.int64)))
        return Lookup(found.select(columns), read, groups)


def consolidate(rows: pa.Table) -> pa.Table:
    """One row per distinct row with its summed diff; rows whose diffs cancel dropped."""
    cols = [c for c in rows.column_names if c not in _META]
    summed = rows.group_by(cols, use_threads=False).aggregate([(DIFF, "sum")])
    summed = summed.rename_columns([DIFF if c == f"{DIFF}_sum" else c
                                    for c in summed.column_names])
    return summed.filter(pc.not_equal(summed.column(DIFF), 0)).select(cols + [DIFF])


@dataclass
class _Ranges:
    """A file's row groups by key range. A batch file is sorted by its key (NULLs
    last), so the ranges are in order and a key's row groups are found by bisection:
    a lookup costs O(keys · log groups), not a pass over every row group."""

    lo: list[Any]  # min per row group with a min/max (a prefix: NULL-only ones last)
    hi: list[Any]
    nulls: list[int]  # NULL keys per row group (all of them)
    rows: list[int]
    ordered: bool  # the ranges are sorted (else every group is tested)
    unknown: list[int]  # groups past the prefix that may hold keys: always read

    def holding(self, keys: list[Any], with_null: bool) -> list[int]:
        picked: set[int] = set()
        n = len(self.lo)
        try:
            if self.ordered:
                for k in keys:
                    g = bisect.bisect_left(self.hi, k)
                    while g < n and self.lo[g] <= k:
                        picked.add(g)
                        g += 1
            else:
                for g in range(n):
                    i = bisect.bisect_left(keys, self.lo[g])
                    if i < len(keys) and keys[i] <= self.hi[g]:
                        picked.add(g)
        except TypeError:  # e.g. an aware and a naive timestamp: read every group
            picked.update(range(n))
        if with_null:
            picked.update(g for g, c in enumerate(self.nulls) if c)
        picked.update(self.unknown)
        return sorted(picked)


# Row groups' key ranges of a sorted file (from its footer): path → ranges.
_RANGES = caches.lru("storage.row_group_ranges", _FOOTER_LIMIT)


def groups_holding(path: str, key: str, keys: list[Any]) -> tuple[list[int], int]:
    """The row groups of ``path`` (sorted by ``key``, with statistics on it) that may
    hold any of ``keys`` (sorted, no NULL), and the rows they have."""
    ranges = _ranges(path, key)
    picked = ranges.holding(keys, False)
    return picked, sum(ranges.rows[g] for g in picked)


def writer_properties(key: str, group_rows: int) -> Any:
    """Row groups of ``group_rows`` rows with statistics on ``key`` alone (a sorted
    projection's files, like an arrangement's)."""
    return _writer(key, group_rows)


def _ranges(path: str, key: str) -> _Ranges:
    hit = _RANGES.get(path)
    if hit is not None:
        return hit
    meta = _footer(path)
    at = meta.schema.names.index(key)
    lo: list[Any] = []
    hi: list[Any] = []
    nulls, rows, unknown = [], [], []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        stats = rg.column(at).statistics
        rows.append(rg.num_rows)
        nulls.append(rg.num_rows if stats is None else int(stats.null_count or 0))
        if stats is not None and stats.has_min_max and len(lo) == g:
            lo.append(stats.min)
            hi.append(stats.max)
        elif stats is None or stats.has_min_max:  # no statistics, or out of order
            unknown.append(g)
    try:
        ordered = all(lo[i] <= lo[i + 1] and hi[i] <= hi[i + 1] for i in range(len(lo) - 1))
    except TypeError:
        ordered = False
    hit = _RANGES[path] = _Ranges(lo, hi, nulls, rows, ordered, unknown)
    return hit


def _writer(key: str, group_rows: int) -> Any:
    from deltalake import ColumnProperties, WriterProperties

    on = ColumnProperties(statistics_enabled="CHUNK")
    return WriterProperties(
        max_row_group_size=group_rows, compression="SNAPPY",
        # statistics only where a reader uses them: the key (row groups), the batch
        # columns (the chain); every other column's would bloat each small row group
        default_column_properties=ColumnProperties(statistics_enabled="NONE"),
        column_properties={key: on, FROM: on, UPTO: on, BATCH: on})
