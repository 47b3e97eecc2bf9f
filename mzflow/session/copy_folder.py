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
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog.model import Item
from mzflow.catalog.store import Writer
from mzflow.errors import Error
from mzflow.session import writes as w_mod
from mzflow.session.writes import Check, Produced, TableWrites, WriteResult
from mzflow.storage import files, landing
from mzflow.storage.delta import Shard
from mzflow.storage.files import BadFile

log = logging.getLogger("mzflow.copy")

# The SQLSTATEs a file's own contents cause: data exceptions (22…, a bad file 22P04
# among them), integrity violations (23…: NOT NULL, an expectation) and a column of a
# type the table's cannot take (42804: a Parquet double for an integer). Anything else
# (the table dropped, a storage failure) stops the statement.
_FILE_FAULTS = ("22", "23", "42804")


def copy_folder(writes: TableWrites, name: exp.Table, target: str,
                options: dict[str, Any]) -> WriteResult:
    pattern = options.pop("pattern", None)
    snap = writes.store.snapshot()
    item = w_mod._table(snap, name)
    loaded = failed = rows = 0
    notices: list[str] = []
    # A failed file is tried again by every COPY (it may have been unreadable for a
    # while); its failure is recorded once per identity and error.
    known_bad = landing.failures_seen(writes.warehouse, item.id)
    landing.mark(writes.warehouse, item.id)
    done = landing.loaded(writes.warehouse, item.id)
    shard = Shard.shared(w_mod.shard_of(writes.warehouse, item).path)
    for f in landing.matching(target, pattern):
        if f.identity in done:
            continue  # loaded by an earlier COPY
        try:
            result = _load(writes, name, f, options, shard)
        except Error as e:
            if not e.code.startswith(_FILE_FAULTS):
                raise
            failed += 1
            # The detail names the row and column of a bad value: keep it with the file.
            text = e.message if not e.detail else f"{e.message} ({e.detail})"
            if (f.identity, text) not in known_bad:
                landing.record_failure(writes.warehouse, item.id, f, text)
            notices.append(text if str(f.path) in text
                           else f'could not load file "{f.path}": {text}')
            log.info("COPY %s: %s failed: %s", item.qualified_name, f.path, text)
            continue
        if result.version is None:  # a concurrent COPY committed it first
            continue
        loaded += 1
        rows += result.rows
        notices.extend(f'file "{f.path}": {n}' for n in result.notices)
    if failed:
        notices.append(f"{failed} of {loaded + failed} new files failed to load; "
                       "SELECT * FROM mz_internal.mz_copy_history shows why")
    return WriteResult(f"COPY {rows}", rows, None, None, tuple(notices))


def _load(writes: TableWrites, name: exp.Table, f: landing.LandedFile,
          options: dict[str, Any], opened: Shard) -> WriteResult:
    key = (f.identity, 1)

    def produce(w: Writer, item: Item, shard: Shard, check: Check) -> Produced:
        data = files.read_file(f.path, w_mod.targets_of(item), **options)
        try:
            now = landing.stat(f.path)
        except OSError:
            raise BadFile(f'file "{f.path}" disappeared while it was read') from None
        if now != f:  # rows of another version of the file: load that one next time
            raise BadFile(f'file "{f.path}" changed while it was read')
        data = w_mod._with_rowids(w, shard, check(w, item, data))
        meta = f.metadata(data.num_rows)

        def apply(ts: int, data: pa.Table = data) -> int:
            return shard.append(data, ts, key, file_size=w_mod._file_size(w), extra=meta)

        return data.num_rows, apply, data

    return writes._commit(name, key, "COPY", produce, opened)
