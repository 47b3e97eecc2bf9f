"""A full disk under a shard write (no Spark): a clean StorageError, nothing committed;
and under Spark's first load of a native library: the broken JVM is replaced.

Found by the soak's disk-full fault (scripts/soak.py, issue 19): writers got delta-rs's
raw DeltaError. The fault here is the soak's own: RLIMIT_FSIZE, so a write past the
limit fails with EFBIG as it would with ENOSPC."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

import pyarrow as pa
import pytest
from scenario import in_process_spark

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


# A full disk while Spark first loads snappy-java (it extracts its native library to a
# temporary file): in the soak's final 10-minute run a compactor's JVM failed every
# later Parquet read ("Could not initialize class org.xerial.snappy.Snappy") after the
# fault had ended. The child runs its own JVM, so snappy is not loaded yet.
_SNAPPY_CHILD = """
import resource
import mzflow
from mzflow.engine import spark

c = mzflow.connect()
c.execute("ALTER SYSTEM SET local_read_max_rows = 0")  # the read under test: on Spark
c.execute("CREATE TABLE t (a int, b text)")
c.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y'), (2, 'z')")
query = "SELECT a, count(*) FROM t GROUP BY a HAVING count(*) > 0 ORDER BY a"
pid = spark.session().sparkContext._gateway.proc.pid
_, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
resource.prlimit(pid, resource.RLIMIT_FSIZE, (4096, hard))  # the JVM's disk is full
out = {"during": OUTCOME(lambda: c.execute(query).rows)}
try:  # the fault is over (a JVM it broke is gone: a new one has no limit)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
except ProcessLookupError:
    pass
out["after"] = {"ok": c.execute(query).rows}
RESULT(out)
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_jvm_broken_by_a_full_disk_is_replaced(tmp_path: Path) -> None:
    out = in_process_spark(_SNAPPY_CHILD, tmp_path)
    assert out["during"]["type"] == "SparkFailure", out
    assert "the next statement starts a new one" in out["during"]["message"]
    assert out["after"] == {"ok": [[1, 1], [2, 2]]}, out


def test_only_a_class_that_cannot_load_replaces_the_jvm() -> None:
    from mzflow.engine.spark import failures

    assert failures._BROKEN.search("java.lang.NoClassDefFoundError: Could not initialize "
                                   "class org.xerial.snappy.Snappy")
    assert not failures._BROKEN.search("[DIVIDE_BY_ZERO] Division by zero")
    assert not failures._BROKEN.search("java.lang.OutOfMemoryError: Java heap space")


def test_a_full_disk_under_a_projection_shards_writes_is_a_storage_error(
        tmp_path: Path) -> None:
    """The 60-minute soak of session 16: a disk-full fault during compaction's vacuum of
    a projection shard (its checkpoint) reached the compactor as delta-rs's raw
    DeltaError; the table shards' writes were already StorageErrors."""
    from mzflow.projections.store import PART, ProjectionShard

    shard = ProjectionShard(tmp_path / "p")
    schema = pa.schema([("k", pa.int64()), ("s", pa.string()), (PART, pa.string())])
    shard.create(schema)
    for i in range(30):  # a log long enough that its checkpoint passes the limit
        rows = pa.table({"k": pa.array(range(i * 10, i * 10 + 10), pa.int64()),
                         "s": pa.array([f"value {j} " * 5 for j in range(10)]),
                         PART: pa.array([f"part-{i}.parquet"] * 10)})
        assert shard.add(rows, ("w", i + 1), {"operation": "test"})
    big = pa.table({"k": pa.array(range(5_000), pa.int64()),
                    "s": pa.array([f"row {j} " * 20 for j in range(5_000)]),
                    PART: pa.array(["part-big.parquet"] * 5_000)})
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4_096, hard))
    try:
        with pytest.raises(StorageError, match="could not write shard p"):
            shard.vacuum(0)
        with pytest.raises(StorageError, match="could not write shard p"):
            shard.add(big, ("w", 99), {"operation": "test"})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert len(shard.parts()) == 30  # nothing committed
    shard.vacuum(0)  # space again
    assert shard.add(big, ("w", 99), {"operation": "test"})
    assert len(shard.parts()) == 31


def test_a_full_disk_while_a_large_write_stages_is_a_storage_error(tmp_path: Path) -> None:
    """A large UPDATE or DELETE writes its files before the lock (storage/rewrite.py):
    a full disk there was delta-rs's raw DeltaError in the 15-minute soak."""
    from mzflow.storage import rewrite

    shard = Shard(tmp_path / "t")
    shard.create(pa.schema([("a", pa.string())]), 1)
    rows = pa.table({"a": pa.array([f"row {i} " * 20 for i in range(5_000)]),
                     "_mz_rowid": pa.array(range(5_000), pa.int64())})
    shard.append(rows, 2)
    v = shard.version()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_384, hard))
    try:
        with pytest.raises(StorageError, match="could not write shard t"):
            rewrite.stage(shard, v, shard.arrow_schema(v), file_size=1 << 24, min_rows=1,
                          delete=pa.array(range(0, 5_000, 2), pa.int64()))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert not any((shard.path / rewrite.STAGING).glob("*"))  # nothing left staged
    assert shard.version() == v


# The in-process JVM could not start (in the soak: a full disk as it started):
# pyspark's JAVA_GATEWAY_EXITED reached a tick raw. Here a heap Java refuses does it.
_NO_START_CHILD = """
import mzflow

c = mzflow.connect()
c.execute("ALTER SYSTEM SET local_read_max_rows = 0")  # reads run on Spark
c.execute("CREATE TABLE t (a int)")
c.execute("INSERT INTO t VALUES (1), (2)")
RESULT(OUTCOME(lambda: c.execute("SELECT sum(a) FROM t").rows))
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_jvm_that_cannot_start_is_a_spark_failure(tmp_path: Path) -> None:
    out = in_process_spark(_NO_START_CHILD, tmp_path, MZFLOW_SPARK_DRIVER_MEMORY="1k")
    assert out["type"] == "SparkFailure", out
    assert out["message"].startswith("could not start Spark: its JVM exited"), out
