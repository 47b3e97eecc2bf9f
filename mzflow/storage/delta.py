"""Shards: mzflow's Delta tables, written with delta-rs, whose commits are times.

The names callers import from here live in smaller modules: ``shard.py`` (the base
table: writes, change feeds, versions and files, compaction), ``commits.py`` (commit
metadata and the log), ``index_shard.py``, ``state_shard.py`` (with ``state_memory.py``),
``sink_table.py`` and ``errors.py`` (a failed write as ``StorageError``). Only storage/
imports deltalake.
"""

from __future__ import annotations

from mzflow.catalog.model import ROWID
from mzflow.storage.commits import (
    ERROR_CODE_KEY,
    ERROR_KEY,
    LOG_ENTRIES_READ,
    TABLE_CONFIG,
    TS_KEY,
)
from mzflow.storage.commits import read_log as _log  # projections/store.py's name for it
from mzflow.storage.errors import StorageError, writes
from mzflow.storage.index_shard import COUNT, KEY, IndexShard, IndexState
from mzflow.storage.shard import DIFF, Shard
from mzflow.storage.sink_table import SinkTable
from mzflow.storage.state_memory import GONE, SEQ
from mzflow.storage.state_shard import ROWS, StateShard

__all__ = [
    "COUNT", "DIFF", "ERROR_CODE_KEY", "ERROR_KEY", "GONE", "KEY", "LOG_ENTRIES_READ", "ROWID",
    "ROWS", "SEQ", "TABLE_CONFIG", "TS_KEY", "IndexShard", "IndexState", "Shard", "SinkTable",
    "StateShard", "StorageError", "_log", "writes",
]
