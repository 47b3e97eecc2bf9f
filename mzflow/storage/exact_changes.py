"""A staged rewrite's exact changes: the rows it deletes and inserts, in a file of its
own that the change feed reads instead of the commit's whole files.

Delta records a commit's changed rows in change-data (``cdc``) actions, but delta-rs's
write transactions take none (1.6), so a commit made of added and removed files
(``storage/rewrite.py``) would feed a tick every row of every file it rewrote. The
rewrite writes its changed rows with a ``_change_type`` (``delete``, ``insert``) to
``_change_data/mz-<uuid>.parquet`` and names that file in the commit's metadata
(``mzflow.changes``). Delta readers ignore both; ``Shard.change_feed`` reads the file
for that version, and the commit's files when the file is gone (the same rows, only
more of them). Compaction deletes the file with the versions that name it
(``Shard._drop_change_files``).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa

KEY = "mzflow.changes"  # commit metadata: the file, relative to the shard
FOLDER = "_change_data"  # where Delta's own change files go: compaction sweeps it
CHANGE_TYPE = "_change_type"
_STAGED_NAME = "_mz_changes.parquet"


def write(folder: Path, deleted: pa.Table, inserted: pa.Table | None) -> Path:
    """Write ``deleted`` and ``inserted`` (the shard's columns) into the staging
    ``folder``; the file."""
    import pyarrow.parquet as pq

    parts = [deleted.append_column(CHANGE_TYPE, pa.repeat("delete", deleted.num_rows))]
    if inserted is not None:
        parts.append(inserted.append_column(CHANGE_TYPE,
                                            pa.repeat("insert", inserted.num_rows)))
    path = folder / _STAGED_NAME
    pq.write_table(pa.concat_tables(parts), path)
    return path


def move_into(staged: Path, shard: Path) -> str:
    """Move the staged file into ``shard``'s change folder; its path there, relative to
    the shard (what the commit's metadata names)."""
    name = f"{FOLDER}/mz-{uuid.uuid4().hex}.parquet"
    (shard / FOLDER).mkdir(exist_ok=True)
    os.replace(staged, shard / name)
    return name


def read(shard: Path, name: str) -> pa.Table | None:
    """The changes a commit's metadata names: the shard's columns and ``_change_type``;
    None when the file is gone (the caller reads the commit's files instead)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(shard / name)
    except FileNotFoundError:
        return None
