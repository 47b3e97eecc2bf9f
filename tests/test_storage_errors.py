"""A full disk under a shard write (no Spark): a clean StorageError, nothing committed.

Found by the soak's disk-full fault (scripts/soak.py, issue 19): writers got delta-rs's
raw DeltaError. The fault here is the soak's own: RLIMIT_FSIZE, so a write past the
limit fails with EFBIG as it would with ENOSPC."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

import pyarrow as pa
import pytest

from mzflow.storage.delta import Shard, StorageError


def test_a_write_that_finds_no_space_is_a_storage_error(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "t")
    shard.create(pa.schema([("a", pa.string())]), 1)
    big = pa.table({"a": pa.array([f"row {i} " * 20 for i in range(5_000)]),
                    "_mz_rowid": pa.array(range(5_000), pa.int64())})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_384, hard))
    try:
        with pytest.raises(StorageError, match="could not write shard t") as info:
            shard.append(big, 2, ("w", 1))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert info.value.code == "58030"
    assert shard.version() == 0 and shard.applied("w") is None
    shard.append(big.slice(0, 3), 3, ("w", 1))  # space again: the retry lands once
    assert shard.applied("w") == 1 and shard.read(1).num_rows == 3
