"""Hot arrangements: a cluster's arranged tables held in this process's memory.

Materialize keeps a cluster's arrangements in the replica's memory and reads its
durable log only to recover; so does every long-lived process that ticks a cluster
here (its tick service, a long-lived ``Connection``). An arrangement is a *spine*: a
base of the table's rows at one version, sorted by the key, then small batches of
changes ``(start, upto]`` with their diffs, each sorted by the key. A lookup of *k*
keys binary-searches each part (integer and date keys; other keys hash), so the rows
it reads are the rows that match, however large the table grows.

Everything here is a cache of immutable data: a table version never changes, so an
arrangement at version *v* is right for *v* forever, whoever else ticks. Only the
columns the cluster's plans read are kept (``incremental/columns.py``); a lookup
asking for a column nobody reads gets NULLs, which nothing above it reads either.

Memory: before hydrating, the table's Parquet metadata gives the kept columns'
uncompressed size; an arrangement that would take the process past its budget (a
share of the cluster's SIZE, ``hot_memory_share``) is not hydrated, with a notice, and
the tick keeps the Delta-backed lookups (``tick/arrange.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mzflow.storage.arrangement import Lookup
from mzflow.storage.delta import DIFF
from mzflow.storage.rows import plain_strings

log = logging.getLogger("mzflow.arrangements")

KEEP = 4  # the newest batches kept apart: lagging indexes of the cluster still read them
FOLD_SHARE = 8  # batches fold into the base once they hold 1/FOLD_SHARE of its rows
# A merge of at least this many rows waits for the end of the tick that made it due
# (``compact``, in a thread): the tick that pushed a large batch past KEEP was often a
# small one, and paid for it (TPC-H Q3 at SF 1: the first 0.1 % tick after three 10 %
# batches took 0.35 s, 0.24 s of it folding 1.2 M rows into lineitem's base).
LATER_ROWS = 100_000
STATS_FILE = "_mz_hot.json"  # records and bytes, for mz_arrangement_sizes


@dataclass
class Part:
    start: int  # the table version the part starts after (-1: the base)
    upto: int
    rows: pa.Table  # the kept columns and DIFF, sorted by the key, NULL keys last
    valid: int  # rows with a non-NULL key (they come first)
    keys: np.ndarray | None  # the key as numbers, for binary search (None: hashed)

    @classmethod
    def of(cls, rows: pa.Table, key: str, start: int, upto: int) -> Part:
        rows = rows.sort_by([(key, "ascending")]).combine_chunks()
        valid = rows.num_rows - rows.column(key).null_count
        return cls(start, upto, rows, valid, _numeric(rows.column(key).slice(0, valid)))

    def matching(self, key: str, wanted: pa.Array, with_null: bool) -> np.ndarray:
        """Row positions whose key is among ``wanted`` (unique, not NULL)."""
        if self.keys is not None:
            q = _numeric(wanted)
            assert q is not None
            q = np.sort(q)
            lo = np.searchsorted(self.keys, q, "left")
            hi = np.searchsorted(self.keys, q, "right")
            n = hi - lo
            total = int(n.sum())
            if total:
                offsets = np.repeat(lo - (np.cumsum(n) - n), n)
                found = offsets + np.arange(total)
            else:
                found = np.empty(0, np.int64)
        else:
            mask = pc.is_in(self.rows.column(key).slice(0, self.valid), value_set=wanted)
            found = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if with_null and self.valid < self.rows.num_rows:
            found = np.concatenate([found, np.arange(self.valid, self.rows.num_rows)])
        return found


def _numeric(keys: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """The keys as a numpy array that sorts like them (integers, dates), else None."""
    t = keys.type
    if pa.types.is_integer(t):
        return np.asarray(keys.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_date32(t):
        return np.asarray(keys.cast(pa.int32()).to_numpy(zero_copy_only=False), np.int64)
    return None


@dataclass
class Hot:
    """One table's arrangement by ``key`` in memory."""

    item_id: str
    key: str
    columns: tuple[str, ...]  # the kept columns (the key among them)
    schema: pa.Schema  # the table's columns as stored, for NULL fill
    parts: list[Part] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    hydrated_seconds: float = 0.0
    due: bool = False  # a large merge waits for ``compact`` (LATER_ROWS)

    @property
    def frontier(self) -> int:
        return self.parts[-1].upto

    @property
    def records(self) -> int:
        return sum(p.rows.num_rows for p in self.parts)

    @property
    def nbytes(self) -> int:
        return sum(p.rows.nbytes for p in self.parts)

    def chain(self, version: int) -> list[Part] | None:
        """The parts that make the table at ``version`` (None: not a boundary here)."""
        out = []
        for p in self.parts:
            if p.upto > version:
                break
            out.append(p)
        return out if out and out[-1].upto == version else None

    def lookup(self, version: int, values: Sequence[Any] | pa.Array, columns: Sequence[str]
               ) -> Lookup | None:
        """The table's rows at ``version`` whose key is among ``values`` (Python values
        or an Arrow array), with ``columns`` (None: this version is not held, or the
        values do not compare)."""
        chain = self.chain(version)
        if chain is None:
            return None
        key_type = self.parts[0].rows.schema.field(self.key).type
        try:
            if isinstance(values, pa.Array):
                if pa.types.is_string(key_type) != pa.types.is_string(values.type):
                    return None  # as Python values: a number is no text (no cast)
                with_null = values.null_count > 0
                wanted = pc.unique(values.drop_null().cast(key_type))
            else:
                present = [v for v in values if v is not None]
                with_null = len(present) < len(values)
                wanted = pc.unique(pa.array(present, key_type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
                OverflowError):
            return None
        pieces = []
        for p in chain:
            at = p.matching(self.key, wanted, with_null)
            if len(at):
                pieces.append(p.rows.take(at))
        read = sum(t.num_rows for t in pieces)
        found = (pa.concat_tables(pieces, promote_options="default") if pieces
                 else self.parts[0].rows.schema.empty_table())
        if len(pieces) > 1:
            found = consolidate(found, self.columns)
        return Lookup(expand(found, columns, self.schema), read, len(pieces))

    # -- upkeep -----------------------------------------------------------------------------

    def add(self, changes: pa.Table, start: int, upto: int) -> None:
        """Append the table's changes ``(start, upto]`` (rows with DIFF)."""
        assert start == self.frontier, (start, self.frontier)
        rows = _kept(changes, self.columns, self.schema)
        self.parts.append(Part.of(rows, self.key, start, upto))
        old = self.parts[1:][:-KEEP]
        folds = bool(old) and old[0].rows.num_rows * FOLD_SHARE > self.parts[0].rows.num_rows
        if (len(old) >= 2 or folds) and sum(p.rows.num_rows for p in old) >= LATER_ROWS:
            self.due = True  # (lookups read a part or two more until then)
        else:
            self._compact()

    def compact(self) -> None:
        """The merges ``add`` left for later, under the arrangement's lock."""
        with self.lock:
            if self.due:
                self._compact()
                self.due = False

    def _compact(self) -> None:
        batches = self.parts[1:]
        old = batches[:-KEEP]
        if len(old) >= 2:
            merged = consolidate(pa.concat_tables([p.rows for p in old]), self.columns)
            self.parts = [self.parts[0], Part.of(merged, self.key, old[0].start,
                                                 old[-1].upto), *batches[-KEEP:]]
            old = [self.parts[1]]
        if old and old[0].rows.num_rows * FOLD_SHARE > self.parts[0].rows.num_rows:
            self.parts = [self._fold(old[0]), *self.parts[2:]]

    def _fold(self, batch: Part) -> Part:
        """The base with ``batch`` merged in: only the base rows whose key the batch
        touches are consolidated with it; the rest keep their order."""
        base = self.parts[0]
        keys = pc.unique(batch.rows.column(self.key))
        touched = pc.is_in(base.rows.column(self.key), value_set=keys)
        if batch.rows.column(self.key).null_count:
            touched = pc.or_(touched, pc.is_null(base.rows.column(self.key)))
        merged = consolidate(pa.concat_tables([base.rows.filter(touched), batch.rows]),
                             self.columns)
        rest = base.rows.filter(pc.invert(touched))
        return Part.of(pa.concat_tables([rest, merged.cast(rest.schema)]), self.key, -1,
                       batch.upto)


def consolidate(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """One row per distinct row of ``columns`` with its summed diff; cancelled rows gone."""
    cols = list(columns)
    summed = rows.group_by(cols, use_threads=False).aggregate([(DIFF, "sum")])
    summed = summed.rename_columns([DIFF if c == f"{DIFF}_sum" else c
                                    for c in summed.column_names])
    return summed.filter(pc.not_equal(summed.column(DIFF), 0)).select(
        cols + [DIFF]).cast(rows.schema)


def expand(rows: pa.Table, columns: Sequence[str], schema: pa.Schema) -> pa.Table:
    """Rows with a count (DIFF) → each row as many times as it counts, with ``columns``
    (a column not kept: NULL)."""
    diff = rows.column(DIFF).to_numpy(zero_copy_only=False) if rows.num_rows else np.empty(0)
    if rows.num_rows and (diff != 1).any():
        if (diff < 0).any():
            raise AssertionError("an arrangement's row count went negative")
        rows = rows.take(np.repeat(np.arange(rows.num_rows), diff.astype(np.int64)))
    out = []
    for c in columns:
        if c in rows.column_names:
            out.append(rows.column(c))
        else:
            out.append(pa.nulls(rows.num_rows, schema.field(c).type))
    return pa.table(out, names=list(columns))


def _kept(rows: pa.Table, columns: Sequence[str], schema: pa.Schema) -> pa.Table:
    rows = plain_strings(rows)
    out = []
    for c in [*columns, DIFF]:
        if c in rows.column_names:
            t = pa.int64() if c == DIFF else _plain(schema.field(c).type)
            out.append(rows.column(c).cast(t))
        elif c == DIFF:  # a table's rows: each counts once
            out.append(pa.array(np.ones(rows.num_rows, np.int64)))
        else:  # written before an ADD COLUMN
            out.append(pa.nulls(rows.num_rows, _plain(schema.field(c).type)))
    return pa.table(out, names=[*columns, DIFF])


def _plain(t: pa.DataType) -> pa.DataType:
    return pa.string() if t in (pa.string_view(), pa.large_string()) else t


def hydrate(item_id: str, key: str, columns: Sequence[str], schema: pa.Schema,
            files: Sequence[str], version: int) -> Hot:
    """The table's rows at ``version`` (its Parquet ``files``), kept columns only."""
    import pyarrow.parquet as pq

    started = time.perf_counter()
    cols = tuple(dict.fromkeys([key, *columns]))
    parts = []
    for f in files:
        path = f.removeprefix("file://")
        present = [c for c in cols if c in pq.read_schema(path).names]
        parts.append(_kept(pq.read_table(path, columns=present), cols, schema)
                     if present else None)
    tables = [p for p in parts if p is not None]
    rows = pa.concat_tables(tables) if tables else _kept(schema.empty_table(), cols, schema)
    hot = Hot(item_id, key, cols, schema, [Part.of(rows, key, -1, version)])
    hot.hydrated_seconds = time.perf_counter() - started
    return hot


def estimate_bytes(files: Sequence[str], columns: Sequence[str]) -> int:
    """The kept columns' size in memory, from the files' Parquet metadata."""
    import pyarrow.parquet as pq

    wanted = set(columns)
    total = 0
    for f in files:
        meta = pq.read_metadata(f.removeprefix("file://"))
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            for c in range(rg.num_columns):
                chunk = rg.column(c)
                if chunk.path_in_schema in wanted:
                    total += chunk.total_uncompressed_size
    return total


def write_stats(path: Path, hot: Hot) -> None:
    """What mz_arrangement_sizes shows: written after a tick, by the ticking process."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / STATS_FILE).write_text(json.dumps({
            "records": hot.records, "bytes": hot.nbytes, "parts": len(hot.parts),
            "columns": list(hot.columns), "hydration_seconds": hot.hydrated_seconds,
            "upto": hot.frontier}))
    except OSError:  # dropped meanwhile
        pass
