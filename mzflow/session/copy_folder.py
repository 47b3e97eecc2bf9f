"""``COPY t FROM '<folder or glob>' WITH (FORMAT …, PATTERN '<glob>')``: every matching
file not loaded before, each its own idempotent commit (storage/landing.py).

Each file goes through the same frame as any write (session/writes.py ``_commit``):
the catalog's write lock, the table's expectations on its rows, one Delta commit whose
app transaction is the file's identity. A file that fails (it cannot be read, a row has
the wrong number of fields, a value does not fit its column, an expectation rejects it)
leaves nothing in the table, is recorded in ``mz_copy_history`` with its error, and the
others still load.

The statement then succeeds, as Snowflake's ``COPY INTO … ON_ERROR = CONTINUE`` does,
with one notice per failed file: an error would tell a PostgreSQL client that nothing
happened, when every other file is committed for good and a retry would load none of
them again. Its tag counts the rows loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow import config
from mzflow.catalog.model import Item
from mzflow.catalog.store import Writer
from mzflow.errors import Error, SerializationFailure
from mzflow.session import writes as w_mod
from mzflow.session.writes import Check, Produced, TableWrites, WriteResult
from mzflow.storage import files, landing, objects
from mzflow.storage.delta import Shard
from mzflow.storage.files import BadFile
from mzflow.storage.rows import Target

log = logging.getLogger("mzflow.copy")

# The SQLSTATEs a file's own contents cause: data exceptions (22…, a bad file 22P04
# among them), integrity violations (23…: NOT NULL, an expectation) and a column of a
# type the table's cannot take (42804: a Parquet double for an integer). Anything else
# (the table dropped, a storage failure) stops the statement.
_FILE_FAULTS = ("22", "23", "42804")


def copy_folder(writes: TableWrites, name: exp.Table, target: str,
                options: dict[str, Any], *, listed: list[landing.LandedFile] | None = None,
                screen: Callable[[landing.LandedFile], Error | None] | None = None
                ) -> WriteResult:
    """``listed``: these files of the folder (None: every matching one); ``screen`` may
    fail a file before it is read (a source's file whose columns do not fit)."""
    pattern = options.pop("pattern", None)
    snap = writes.store.snapshot()
    item = w_mod._table(snap, name)
    tune = config.tuning(snap.settings)
    stats = _Stats()
    # A failed file is tried again by every COPY (it may have been unreadable for a
    # while); its failure is recorded once per identity and error.
    known_bad = landing.failures_seen(writes.warehouse, item.id)
    landing.mark(writes.warehouse, item.id)
    done = landing.loaded(writes.warehouse, item.id)
    shard = Shard.shared(w_mod.shard_of(writes.warehouse, item).path)
    new = [f for f in (landing.matching(target, pattern) if listed is None else listed)
           if f.identity not in done]
    if screen is not None:
        kept = []
        for f in new:
            fault = screen(f)
            if fault is None:
                kept.append(f)
            else:
                _failed(writes, item, f, fault, known_bad, stats)
        new = kept
    # Files commit together in batches: a commit costs tens of milliseconds, a small
    # file's rows far less. An expectation judges a write's rows together, and a FAIL
    # fails the whole write: so that it fails one file alone (and a quarantine holds
    # one file's rows), a table with expectations loads file by file.
    per_file = bool(snap.expectations_on(item.id))
    for batch in _batches(new, 1 if per_file else tune.copy_batch_files,
                          tune.copy_batch_bytes):
        if per_file:
            f = batch[0]
            try:
                result = _load(writes, name, f, options, shard)
            except Error as e:
                _failed(writes, item, f, e, known_bad, stats)
                continue
            if result.version is not None:  # else a concurrent COPY committed it first
                stats.loaded += 1
                stats.rows += result.rows
                stats.notices.extend(f'file "{f.path}": {n}' for n in result.notices)
        else:
            _load_batch(writes, name, item, batch, options, shard, known_bad, stats)
    # Files a writer killed after its Delta commit loaded are in the log, so they were
    # skipped, but not yet visible (the catalog never recorded that commit): make them
    # visible now, as the table's next write would, or COPY would say they are loaded
    # while SELECT does not show them.
    newest = shard.history()
    if newest and newest[-1][1] > writes.store.snapshot().read_ts:
        writes.store.advance_read_ts(newest[-1][1])
    if stats.failed:
        stats.notices.append(f"{stats.failed} of {stats.loaded + stats.failed} new files "
                             "failed to load; SELECT * FROM mz_internal.mz_copy_history "
                             "shows why")
    return WriteResult(f"COPY {stats.rows}", stats.rows, None, None, tuple(stats.notices))


@dataclass
class _Stats:
    loaded: int = 0
    failed: int = 0
    rows: int = 0
    notices: list[str] = field(default_factory=list)


def _batches(files: list[landing.LandedFile], most: int, most_bytes: int
             ) -> Iterator[list[landing.LandedFile]]:
    """Runs of files in path order, each at most ``most`` files and, past its first
    file, ``most_bytes`` bytes of files."""
    batch: list[landing.LandedFile] = []
    size = 0
    for f in files:
        if batch and (len(batch) >= max(1, most) or size + f.size > most_bytes):
            yield batch
            batch, size = [], 0
        batch.append(f)
        size += f.size
    if batch:
        yield batch


def _failed(writes: TableWrites, item: Item, f: landing.LandedFile, e: Error,
            known_bad: set[tuple[str, str]], stats: _Stats) -> None:
    """Record a file's own fault (its contents); anything else stops the statement."""
    if not e.code.startswith(_FILE_FAULTS):
        raise e
    stats.failed += 1
    # The detail names the row and column of a bad value: keep it with the file.
    text = e.message if not e.detail else f"{e.message} ({e.detail})"
    if (f.identity, text) not in known_bad:
        landing.record_failure(writes.warehouse, item.id, f, text)
    stats.notices.append(text if f.path in text else f'could not load file "{f.path}": {text}')
    log.info("COPY %s: %s failed: %s", item.qualified_name, f.path, text)


def _read(f: landing.LandedFile, targets: list[Target], options: dict[str, Any]) -> pa.Table:
    """The file's rows in the table's types; BadFile if it changed or went meanwhile."""
    data = files.read_file(f.path, targets, **options)
    try:
        now = landing.stat(f.path)
    except OSError:
        raise BadFile(f'file "{f.path}" disappeared while it was read') from None
    if now != f:  # rows of another version of the file: load that one next time
        raise BadFile(f'file "{f.path}" changed while it was read')
    return data


# Objects are read this many at a time: each read waits on the network (requests of
# milliseconds), where a local file's read is CPU (Arrow's readers use the cores).
_REMOTE_READERS = 8


def _read_all(batch: list[landing.LandedFile], targets: list[Target],
              options: dict[str, Any]) -> list[pa.Table | Error]:
    """Each file's rows, or its error, in the batch's order."""
    def one(f: landing.LandedFile) -> pa.Table | Error:
        try:
            return _read(f, targets, options)
        except Error as e:
            return e

    if len(batch) == 1 or not objects.is_remote(batch[0].path):
        return [one(f) for f in batch]
    with ThreadPoolExecutor(_REMOTE_READERS, thread_name_prefix="mzflow-copy") as pool:
        return list(pool.map(one, batch))


def _load_batch(writes: TableWrites, name: exp.Table, item: Item,
                batch: list[landing.LandedFile], options: dict[str, Any], opened: Shard,
                known_bad: set[tuple[str, str]], stats: _Stats) -> None:
    """Read each file of ``batch`` (a bad one fails alone), then commit the good ones as
    one Delta commit that records each file's identity. Files are read before the
    catalog's write lock is taken: other writers do not wait on parsing."""
    targets = w_mod.targets_of(item)
    read: list[tuple[landing.LandedFile, pa.Table]] = []
    for f, got in zip(batch, _read_all(batch, targets, options), strict=True):
        if isinstance(got, Error):
            _failed(writes, item, f, got, known_bad, stats)
        else:
            read.append((f, got))
    if not read:
        return
    key = landing.batch_key([f for f, _ in read])
    committed: list[tuple[landing.LandedFile, int]] = []

    def produce(w: Writer, now: Item, shard: Shard, check: Check) -> Produced:
        if w_mod.targets_of(now) != targets:
            raise SerializationFailure(
                f"{now.qualified_name} changed while COPY read its files",
                hint="run the COPY again: the files not yet loaded load then")
        # Under the lock, the files a concurrent COPY committed meanwhile drop out.
        done = landing.loaded(writes.warehouse, now.id)
        fresh = [(f, d) for f, d in read if f.identity not in done]
        committed[:] = [(f, d.num_rows) for f, d in fresh]
        data = (pa.concat_tables([d for _, d in fresh]) if fresh
                else read[0][1].schema.empty_table())
        data = w_mod._with_rowids(w, shard, check(w, now, data))
        meta = landing.batch_metadata(committed)
        txns = [(f.identity, 1) for f, _ in fresh]

        def apply(ts: int, data: pa.Table = data) -> int:
            return shard.append(data, ts, key, file_size=w_mod._file_size(w), extra=meta,
                                more_txns=txns)

        return data.num_rows, apply, data

    result = writes._commit(name, key, "COPY", produce, opened)
    if result.version is None:  # the whole batch was committed by a concurrent COPY
        return
    stats.loaded += len(committed)
    stats.rows += result.rows
    stats.notices.extend(result.notices)


def _load(writes: TableWrites, name: exp.Table, f: landing.LandedFile,
          options: dict[str, Any], opened: Shard) -> WriteResult:
    key = (f.identity, 1)

    def produce(w: Writer, item: Item, shard: Shard, check: Check) -> Produced:
        data = w_mod._with_rowids(w, shard, check(w, item, _read(f, w_mod.targets_of(item),
                                                                  options)))
        meta = f.metadata(data.num_rows)

        def apply(ts: int, data: pa.Table = data) -> int:
            return shard.append(data, ts, key, file_size=w_mod._file_size(w), extra=meta)

        return data.num_rows, apply, data

    return writes._commit(name, key, "COPY", produce, opened)
