"""A table write's projection upkeep: the write hook of the projections wing.

Every part (data file) of a table has its projection rows stored or not. A write stores
the rows of the parts it added, after its own commit; a part without them (written
before ADD PROJECTION, cleared, or a writer killed between the two commits) is projected
on the fly, from that file alone, by the read that needs it (route.py). So a read never
combines a projection with a table version it disagrees with.

An append's rows are at hand before its commit: their projection rows are computed, and
staged in a file, while the table's own commit runs; the store after it is then a log
entry.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow.catalog.hooks import HookWrite, WriteHook, WriteInfo
from mzflow.catalog.model import Item, Projection, Snapshot
from mzflow.catalog.store import Writer
from mzflow.projections import shape as shapes
from mzflow.projections.compute import aggregate_rows, compute, plain, sort_key, sorted_rows
from mzflow.projections.shape import AGGREGATE, Shape, shape_of
from mzflow.projections.store import PART, ProjectionShard, Staged, part_name, shard_of
from mzflow.storage import paths
from mzflow.storage.delta import Shard

log = logging.getLogger("mzflow.projections")

# Projections whose rows of a write were computed while the table's commit ran, and
# those of them stored from a file staged meanwhile (a commit of a log entry alone).
AHEAD = [0]
STAGED = [0]
_COUNTING = threading.Lock()  # projections are kept side by side, in threads


def _count(counter: list[int]) -> None:
    with _COUNTING:
        counter[0] += 1


def _store(shard: ProjectionShard, rows: pa.Table, txn: tuple[str, int],
           stats: dict[str, Any], sort_key: str | None = None, current: bool = False
           ) -> bool:
    """``current``: the caller listed ``shard``'s parts just now, under the catalog's
    write lock (ProjectionShard.add)."""
    if rows.num_rows == 0:
        return False
    if not shard.exists():
        shard.create(rows.schema)
        current = False
    return shard.add(rows, txn, stats, sort_key, current=current)


@dataclass
class Outcome:
    projection: str
    parts: int = 0
    rows: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


# A write's rows before they have a file: their part name until the commit names it.
_UNWRITTEN = "<unwritten>"
_PREPARING = ThreadPoolExecutor(4, thread_name_prefix="projection-prepare")


@dataclass
class Ahead:
    """A projection's rows of an append computed before the table's commit, and (when
    its shard exists) already written to a staged file: the store after the commit is
    then a log entry (issue 16's 1 % INSERT target)."""
    rows: pa.Table
    seconds: float
    staged: Staged | None


@dataclass
class Prepared:
    """An append's projection rows, computed from its rows in memory and staged while the
    table's own Delta write runs. Per projection: its ``Ahead`` (rows with the part
    ``_UNWRITTEN``), or None when Spark must compute them (after the commit, as before).
    The work touches only the rows in memory and files no version holds, so a write
    that fails ``discard``s it."""
    rows: pa.Table
    ready: dict[tuple[str, str, tuple[Any, ...]], Future[Ahead | None]]

    def take(self, table: Item, projection: Projection, part: str) -> Ahead | None:
        """``projection``'s rows of the one file the append wrote, named ``part``; None
        when the projection changed since (or was made since), or was not computed."""
        future = self.ready.pop((projection.id, projection.query, table.columns), None)
        try:
            done = future.result() if future is not None else None
        except Exception as e:  # computed again after the commit, by the usual path
            log.warning("projection %s: computing ahead failed: %s", projection.name, e)
            return None
        if done is None:
            return None
        _count(AHEAD)
        named = pa.array([part] * done.rows.num_rows, pa.string())
        return Ahead(done.rows.set_column(done.rows.schema.get_field_index(PART), PART,
                                          named), done.seconds, done.staged)

    def discard(self) -> None:
        """Delete the staged files nobody took (the write failed, or went to more than
        one file, or a projection was dropped meanwhile)."""
        for future in self.ready.values():
            try:
                done = future.result()
            except Exception:
                continue
            if done is not None and done.staged is not None:
                done.staged.discard()
        self.ready.clear()


def prepare(snap: Snapshot, warehouse: Path, table: Item, rows: pa.Table
            ) -> Prepared | None:
    """Start computing and staging every projection's rows of an append's ``rows`` (see
    Prepared); None when the table has no projection."""
    projections = snap.projections_on(table.id)
    if not projections or rows.num_rows == 0:
        return None
    ready = {(p.id, p.query, table.columns): _PREPARING.submit(
        _ahead, table, shape_of(snap, table, p), rows, shard_of(warehouse, p))
        for p in projections}
    return Prepared(rows, ready)


def _ahead(table: Item, s: Shape, rows: pa.Table, pshard: ProjectionShard
           ) -> Ahead | None:
    started = time.monotonic()
    in_memory = {_UNWRITTEN: rows}
    if s.kind == shapes.SORTED and not s.where:
        out: pa.Table | None = sorted_rows(s, [_UNWRITTEN], in_memory)
    elif s.kind == AGGREGATE:
        out = aggregate_rows(table, s, [_UNWRITTEN], in_memory)
        out = plain(out) if out is not None else None
    else:  # a Spark job, which reads the file: after the commit
        return None
    if out is None:
        return None
    staged = None
    if out.num_rows:
        try:
            staged = pshard.stage(out, sort_key(s))
        except Exception as e:  # stored after the commit instead, by the usual write
            log.warning("projection %s: staging failed: %s", s.projection.name, e)
    # mz_projection_history's seconds: computing and writing, as for a store after
    return Ahead(out, time.monotonic() - started, staged)


def keep_new_parts(snap: Snapshot, warehouse: Path, table: Item, version: int,
                   operation: str, prepared: Prepared | None = None) -> list[Outcome]:
    """After a table commit at ``version``: store every projection's rows of the parts
    that version added. Idempotent (txn ``(proj-<id>, version)``); a failure leaves the
    parts to be projected on the fly, and is logged, never raised: the write has
    committed. ``prepared``: the append that made ``version`` and its projection rows
    computed ahead; used when the append went to one file."""
    projections = snap.projections_on(table.id)
    try:  # whatever happens, no staged file outlives this (see Prepared.discard)
        if not projections or version == 0:
            return []
        shard = Shard.shared(paths.table(warehouse, table.id))
        new = shard.added_in(version)
        if new is None:
            before = {part_name(f) for f in shard.files(version - 1)}
            new = [f for f in shard.files(version) if part_name(f) not in before]
        one_file = prepared is not None and len(new) == 1
        in_memory = {new[0]: prepared.rows} if one_file and prepared is not None else {}

        def keep(projection: Projection) -> Outcome | None:
            ahead = (prepared.take(table, projection, part_name(new[0]))
                     if one_file and prepared is not None else None)
            try:
                return add_parts(snap, warehouse, table, projection, new,
                                  (f"proj-{projection.id}", version), operation, in_memory,
                                  ahead)
            except Exception as e:  # the parts stay unmaterialized: reads project them
                log.warning("projection %s of %s not kept for version %d: %s",
                            projection.name, table.qualified_name, version, e)
                return None

        if len(projections) == 1:
            found = [keep(projections[0])]
        else:
            # Each projection is its own shard, and its work (Arrow compute, a delta-rs
            # write) runs outside the GIL: side by side, a write pays for its slowest
            # projection, not their sum (issue 16's 1 % INSERT target).
            with ThreadPoolExecutor(len(projections),
                                    thread_name_prefix="projection") as pool:
                found = list(pool.map(keep, projections))
        return [o for o in found if o is not None]
    finally:
        if prepared is not None:
            prepared.discard()


def add_parts(snap: Snapshot, warehouse: Path, table: Item, projection: Projection,
               files: list[str], txn: tuple[str, int], operation: str,
               in_memory: dict[str, pa.Table] | None = None,
               ahead: Ahead | None = None) -> Outcome:
    """``ahead``: the rows of ``files`` (one), computed (and maybe staged) while the
    table's commit ran."""
    s = shape_of(snap, table, projection)
    started = time.monotonic()
    result = Outcome(projection.name)
    # Writers of a projection hold the catalog's write lock: a part kept by now is
    # kept for good, and storing it again would count its rows twice.
    pshard = shard_of(warehouse, projection)
    kept = pshard.parts()
    files = [f for f in files if part_name(f) not in kept]
    if not files:
        if ahead is not None and ahead.staged is not None:
            ahead.staged.discard()
        return result
    if ahead is not None and len(files) == 1:
        rows, seconds = ahead.rows, ahead.seconds
    else:
        rows = compute(table, s, files, in_memory)
        seconds = time.monotonic() - started
    stats = {"operation": operation, "parts": len(files), "rows": rows.num_rows,
             "bytes": rows.nbytes, "seconds": round(seconds, 4), "table_version": txn[1]}
    if ahead is not None and ahead.staged is not None:
        # the shard existed when the file was staged, and no projection shard is ever
        # dropped while its projection is in the catalog
        if pshard.add_staged(ahead.staged, part_name(files[0]), txn, stats, current=True):
            _count(STAGED)
    else:
        _store(pshard, rows, txn, stats, sort_key(s), current=pshard.exists())
    result.parts, result.rows, result.seconds = len(files), rows.num_rows, seconds
    return result


class _Upkeep(HookWrite):
    """One write's part: compute and stage an append's rows while the table commits,
    store every projection's rows of the new parts once the write has committed."""

    def __init__(self, info: WriteInfo):
        self.info = info
        self.prepared: Prepared | None = None

    def before_commit(self, w: Writer, table: Item, appended: pa.Table | None) -> None:
        if appended is not None:
            self.prepared = prepare(w.snapshot, self.info.warehouse, table, appended)

    def failed(self, error: BaseException) -> None:
        # The table's commit, or the catalog's after it, failed: the staged files are
        # nobody's now (a table commit without its catalog commit is adopted by the
        # next write, and its parts projected on the fly).
        if self.prepared is not None:
            self.prepared.discard()

    def after(self, snap: Snapshot, table: Item, version: int | None) -> None:
        if version is not None and snap.projections_on(table.id):
            # Projections follow their table's commit (Delta has no two-table commit),
            # once the write is committed and visible, under the write lock again, so
            # that no other writer of the projection (MATERIALIZE) stores a part twice.
            # A part whose rows are not stored (a crash in between) is projected on the
            # fly by its readers.
            with self.info.store.write() as again:
                keep_new_parts(again.snapshot, self.info.warehouse, table, version,
                               self.info.verb, self.prepared)


HOOK = WriteHook("projections", checks={Projection: shapes.check}, begin=_Upkeep)
