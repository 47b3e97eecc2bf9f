"""A state shard's newest row per group, held in this process's memory.

A state shard is an append-only log (``state_shard.py``): each tick appends the groups
it changed, each row stamped with the version of the commit that wrote it (``SEQ``),
a group gone as a tombstone (``GONE``). A group's partials are its newest row. This
process keeps, per shard, that newest row per group at one version: a *base* of live
rows (each key once) and the rows appended since it was made (*recent*, newest per key,
tombstones kept), folded into the base once they reach 1/``FOLD_SHARE`` of it, so that
a tick copies O(its change), not the state, until a fold.

Everything here is a cache of immutable data (a version never changes): an entry at
version *v* answers reads at *v* only; a read at a newer version first applies the
commits in between (appends: their added files; anything else, a reload), a read at an
older one goes to storage. An evicted entry costs a reload, never an answer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from mzflow import caches
from mzflow.storage.index_shard import KEY
from mzflow.storage.rows import plain_strings

SEQ = "_mz_seq"  # the version of the commit that wrote the row: a key's newest row wins
GONE = "_mz_gone"  # a tombstone: the group is gone as of its SEQ
INTERNAL = (SEQ, GONE)

# Rows read from state shards' files in this process (tests count them: a tick with a
# warm state reads only the rows commits appended since its last one).
STATE_ROWS_LOADED = [0]

# The states held, however many indexes a process ticks: at most this many, and this
# many bytes in all (the least recently used go first; a state larger than this alone
# is read from storage each time).
MOST_STATES = 64
MEMORY_BYTES = 1 << 30
FOLD_SHARE = 8
FOLD_MIN = 4_096  # recent rows below this never fold (a small base would fold each tick)

_NEWEST = caches.lru("storage.state_newest", MOST_STATES)
_LOCK = threading.Lock()  # a tick service ticks several indexes at once, in threads


def normalized(rows: pa.Table) -> pa.Table:
    """Rows as read from any version of a state shard: plain strings, and ``SEQ`` and
    ``GONE`` present (rows written before the log format: -1, live)."""
    rows = plain_strings(rows)
    for name, fill in ((SEQ, pa.scalar(-1, pa.int64())), (GONE, pa.scalar(False))):
        if name in rows.column_names:
            i = rows.column_names.index(name)
            rows = rows.set_column(i, name, pc.fill_null(rows.column(name), fill))
        else:
            rows = rows.append_column(name, pa.repeat(fill, rows.num_rows))
    return rows


def live(rows: pa.Table) -> pa.Table:
    return rows.filter(pc.invert(rows.column(GONE))) if rows.num_rows else rows


def newest(rows: pa.Table) -> pa.Table:
    """Each key's row with the highest ``SEQ`` (tombstones kept)."""
    if rows.num_rows == 0:
        return rows
    rows = rows.take(pc.sort_indices(rows, [(SEQ, "descending")]))
    keys = rows.column(KEY)
    return rows.take(pc.index_in(pc.unique(keys), value_set=keys))


def without(rows: pa.Table, keys: pa.Array | pa.ChunkedArray) -> pa.Table:
    if rows.num_rows == 0 or len(keys) == 0:
        return rows
    return rows.filter(pc.invert(pc.is_in(rows.column(KEY), value_set=keys)))


def collapsed(rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(base, recent) of a version's rows (``normalized``). The rows of the oldest SEQ
    are one commit's, each key once: only the later ones need sorting out."""
    if rows.num_rows == 0:
        return rows, rows
    first = pc.equal(rows.column(SEQ), pc.min(rows.column(SEQ)))
    later = newest(rows.filter(pc.invert(first)))
    return without(live(rows.filter(first)), later.column(KEY)), later


def _concat(tables: list[pa.Table]) -> pa.Table:
    return pa.concat_tables([plain_strings(t) for t in tables], promote_options="permissive")


@dataclass(frozen=True)
class Newest:
    """A state shard's newest row per group at ``version`` (never changed: a newer
    version is a new ``Newest``)."""

    identity: tuple[int, int]  # the shard's first log entry (inode, mtime): a recreated one differs
    version: int
    base: pa.Table  # live rows, each key once
    recent: pa.Table  # rows appended since the base, newest per key, tombstones kept

    @classmethod
    def of(cls, identity: tuple[int, int], version: int, rows: pa.Table) -> Newest:
        base, recent = collapsed(normalized(rows))
        return cls(identity, version, base, recent.cast(base.schema))._folded()

    @property
    def nbytes(self) -> int:
        return int(self.base.nbytes + self.recent.nbytes)

    def lookup(self, keys: pa.Array) -> pa.Table:
        """The live groups among ``keys``, with ``SEQ`` and ``GONE``."""
        keys = keys.cast(pa.string())
        hit = self.recent.filter(pc.is_in(self.recent.column(KEY), value_set=keys))
        if hit.num_rows:
            keys = keys.filter(pc.invert(pc.is_in(keys, value_set=hit.column(KEY))))
        found = self.base.filter(pc.is_in(self.base.column(KEY), value_set=keys))
        return _concat([found, live(hit)])

    def every(self) -> pa.Table:
        return _concat([without(self.base, self.recent.column(KEY)), live(self.recent)])

    def applied(self, appended: list[pa.Table], version: int) -> Newest:
        """This state with ``appended`` (rows of the commits through ``version``)."""
        if not appended:
            return Newest(self.identity, version, self.base, self.recent)
        added = _concat([normalized(t) for t in appended])
        recent = newest(_concat([self.recent, added.select(self.recent.column_names)
                                 .cast(self.recent.schema)]))
        return Newest(self.identity, version, self.base, recent)._folded()

    def _folded(self) -> Newest:
        if self.recent.num_rows * FOLD_SHARE <= max(self.base.num_rows, FOLD_MIN):
            return self
        base = _concat([without(self.base, self.recent.column(KEY)), live(self.recent)])
        return Newest(self.identity, self.version, base.combine_chunks(),
                      self.recent.slice(0, 0))


def cached(path: Path, identity: tuple[int, int]) -> Newest | None:
    with _LOCK:
        found = _NEWEST.get(str(path))
    return found if found is not None and found.identity == identity else None


def keep(path: Path, state: Newest) -> None:
    """Hold ``state`` as ``path``'s, the least recently used others going while all
    would pass ``MEMORY_BYTES`` (a state too large alone is not held)."""
    key = str(path)
    with _LOCK:
        _NEWEST.pop(key, None)
        if state.nbytes > MEMORY_BYTES:
            return
        while _NEWEST and (sum(s.nbytes for s in _NEWEST.values()) + state.nbytes
                           > MEMORY_BYTES):
            _NEWEST.popitem()
        _NEWEST[key] = state
