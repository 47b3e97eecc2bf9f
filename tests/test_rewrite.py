"""Large UPDATEs and DELETEs staged before the write lock (storage/rewrite.py).

Storage level, no Spark: a staged rewrite commits exactly the rows a MERGE would, its
change feed holds exactly the changed rows (storage/exact_changes.py), and nothing is
left behind when it is abandoned, its shard moved on, or its commit failed. Through the session and
Spark: tests/test_write_lock.py.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mzflow.catalog.model import ROWID
from mzflow.storage import rewrite
from mzflow.storage.delta import Shard
from mzflow.storage.shard import DIFF

N = 4_000


MIN = 100  # staged_write_min_rows for these small shards


def _shard(tmp_path: Path, files: int = 4) -> Shard:
    """N rows (k, x) in ``files`` files of consecutive row ids."""
    shard = Shard(tmp_path / "t")
    shard.create(pa.schema([("k", pa.int64()), ("x", pa.int64())]), 1)
    per = N // files
    for f in range(files):
        ids = range(f * per, (f + 1) * per)
        shard.append(pa.table({"k": pa.array(ids, pa.int64()),
                               "x": pa.array([i % 10 for i in ids], pa.int64()),
                               ROWID: pa.array(ids, pa.int64())}), 2 + f)
    return shard


def _rows(shard: Shard) -> Counter[tuple[Any, ...]]:
    data = shard.read(shard.version())
    return Counter(zip(*(data.column(c).to_pylist() for c in data.column_names),
                       strict=True))


def _replace(shard: Shard, where: pa.Array, x: int) -> pa.Table:
    """The rows of ``shard`` whose row ids are ``where``, x set to ``x``."""
    data = shard.read(shard.version())
    rows = data.filter(pc.is_in(data.column(ROWID), where))
    return rows.set_column(rows.schema.get_field_index("x"), "x",
                           pa.array([x] * rows.num_rows, pa.int64()))


def _staging_left(shard: Shard) -> list[str]:
    root = shard.path / rewrite.STAGING
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_a_staged_update_commits_what_a_merge_would(tmp_path: Path) -> None:
    staged_shard, merged_shard = _shard(tmp_path / "a"), _shard(tmp_path / "b")
    ids = pa.array(range(500, 2500), pa.int64())  # all of file 1, parts of 0 and 2
    new = _replace(staged_shard, ids, -1)
    before = staged_shard.version()
    staged = rewrite.stage(staged_shard, before, staged_shard.arrow_schema(before),
                           file_size=1 << 24, min_rows=MIN, replace=new)
    assert staged is not None
    assert len(staged.removes) == 3  # file 3 holds none of the ids: kept as it is
    assert staged_shard.version() == before  # nothing committed yet
    version = rewrite.commit(staged_shard, staged, 10, None)
    merged_shard.update_rows(new, 10)
    assert version == before + 1 == staged_shard.version()
    assert _rows(staged_shard) == _rows(merged_shard)
    # The change feed reads the rewrite's exact changes, not its whole files.
    assert staged_shard.change_feed(before, version).num_rows == 2 * len(ids)
    diffs = staged_shard.diffs(before, version)
    assert diffs.num_rows == 2 * len(ids)
    assert Counter(diffs.column(DIFF).to_pylist()) == {1: len(ids), -1: len(ids)}
    changed = Counter(zip(diffs.column("k").to_pylist(), diffs.column("x").to_pylist(),
                          diffs.column(DIFF).to_pylist(), strict=True))
    assert changed == Counter(zip(merged_shard.diffs(before, version).column("k").to_pylist(),
                                  merged_shard.diffs(before, version).column("x").to_pylist(),
                                  merged_shard.diffs(before, version).column(DIFF).to_pylist(),
                                  strict=True))
    # Delta's own feed of the commit holds whole files (3 out, their rows back in); the
    # estimate counts the rows that changed, as the MERGE's metrics do.
    feed = pa.table(staged_shard._table().load_cdf(starting_version=version,
                                                   ending_version=version))
    assert feed.num_rows == 2 * 3000
    assert staged_shard.estimated_change_count(before, version) == 2 * len(ids) == (
        merged_shard.estimated_change_count(before, version))
    assert not (staged_shard.path / rewrite.STAGING).exists()


def test_a_staged_delete_keeps_the_other_rows_and_an_added_column(tmp_path: Path) -> None:
    shard = _shard(tmp_path)
    shard.add_column("y", pa.int32(), 6)  # files older than the column: y is null
    shard.append(pa.table({"k": pa.array([N], pa.int64()), "x": pa.array([3], pa.int64()),
                           "y": pa.array([7], pa.int32()),
                           ROWID: pa.array([N], pa.int64())}), 7)
    expected = _rows(shard)
    gone = pa.array(range(0, 3000, 2), pa.int64())
    for k in gone.to_pylist():
        expected[(k, k % 10, k, None)] -= 1  # k, x, row id, y
    v = shard.version()
    staged = rewrite.stage(shard, v, shard.arrow_schema(v), file_size=1 << 24, min_rows=MIN,
                           delete=gone)
    assert staged is not None and staged.changed == len(gone)
    rewrite.commit(shard, staged, 8, ("app", 1))
    assert _rows(shard) == +expected
    assert shard.applied("app") == 1  # the idempotency key is in the commit


def _diffs(shard: Shard, after: int, through: int) -> Counter[tuple[Any, ...]]:
    d = shard.diffs(after, through)
    return Counter(zip(*(d.column(c).to_pylist() for c in sorted(d.column_names)),
                       strict=True))


def test_small_changes_merge_and_a_small_share_of_a_file_feeds_only_its_rows(
        tmp_path: Path) -> None:
    shard, twin = _shard(tmp_path / "a", files=1), _shard(tmp_path / "b", files=1)
    v = shard.version()
    schema = shard.arrow_schema(v)
    assert rewrite.stage(shard, v, schema, file_size=1 << 24, min_rows=MIN,
                         delete=pa.array(range(50), pa.int64())) is None  # < min_rows
    # 200 rows of a 4,000-row file: staged, and the feed holds the 200, not 8,000.
    gone = pa.array(range(200), pa.int64())
    staged = rewrite.stage(shard, v, schema, file_size=1 << 24, min_rows=MIN, delete=gone)
    assert staged is not None and staged.changed == 200
    rewrite.commit(shard, staged, 10, None)
    twin.delete_rows(gone, 10)
    # Versions around it read as Delta gives them: one feed of the three.
    for s in (shard, twin):
        s.append(pa.table({"k": pa.array([-1], pa.int64()), "x": pa.array([0], pa.int64()),
                           ROWID: pa.array([N], pa.int64())}), 11)
    assert shard.change_feed(v - 1, v + 2).num_rows == N + 200 + 1
    assert _diffs(shard, v - 1, v + 2) == _diffs(twin, v - 1, v + 2)
    assert _staging_left(shard) == []


def test_an_exact_change_file_gone_reads_the_commits_files_and_compaction_keeps_it(
        tmp_path: Path) -> None:
    """The file is an optimisation: without it the feed reads the rewrite's files (the
    same diffs). An ADD COLUMN after it reads as null in the feed. Compaction deletes
    it only with the versions that name it."""
    from mzflow.storage import exact_changes

    def rewritten(path: Path) -> tuple[Shard, int, str]:
        s = _shard(path)
        v = s.version()
        rewrite.commit(s, rewrite.stage(s, v, s.arrow_schema(v), file_size=1 << 24,
                                        min_rows=MIN, delete=gone), 10, None)
        s.history()
        (name,) = s._history().exact.values()
        assert (s.path / name).is_file()
        return s, v, name

    gone = pa.array(range(500, 1500), pa.int64())
    shard, v, name = rewritten(tmp_path / "a")
    twin = _shard(tmp_path / "b")
    twin.delete_rows(gone, 10)
    for s in (shard, twin):
        s.add_column("y", pa.int32(), 11)
    assert "y" in shard.change_feed(v, v + 2).column_names
    assert _diffs(shard, v, v + 2) == _diffs(twin, v, v + 2)
    (shard.path / name).unlink()
    assert exact_changes.read(shard.path, name) is None
    assert shard.change_feed(v, v + 1).num_rows == 2 * 1000 + 1000  # whole files
    assert _diffs(shard, v, v + 2) == _diffs(twin, v, v + 2)

    shard, v, name = rewritten(tmp_path / "c")
    shard.append(pa.table({"k": pa.array([-1], pa.int64()), "x": pa.array([0], pa.int64()),
                           ROWID: pa.array([N], pa.int64())}), 11)
    time.sleep(0.01)
    shard.compact(v + 1, 12)  # the rewrite's version is kept: so is its file
    assert (shard.path / name).is_file()
    shard.compact(shard.version(), 13)
    assert not (shard.path / name).exists()

def test_a_shard_that_moved_on_gets_nothing_and_keeps_no_staged_file(
        tmp_path: Path) -> None:
    shard = _shard(tmp_path)
    before = _rows(shard)
    v = shard.version()
    staged = rewrite.stage(shard, v, shard.arrow_schema(v), file_size=1 << 24, min_rows=MIN,
                           delete=pa.array(range(1000, 2000), pa.int64()))
    assert staged is not None and _staging_left(shard)
    shard.append(pa.table({"k": pa.array([-1], pa.int64()), "x": pa.array([0], pa.int64()),
                           ROWID: pa.array([N + 1], pa.int64())}), 9)
    with pytest.raises(rewrite.Moved):
        rewrite.commit(shard, staged, 10, None)
    assert _staging_left(shard) == []
    assert _rows(shard) == before + Counter({(-1, 0, N + 1): 1})


def test_a_failed_commit_leaves_no_file_in_the_shard(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from deltalake import DeltaTable

    shard = _shard(tmp_path)
    files_before = sorted(p.name for p in shard.path.glob("*.parquet"))
    v = shard.version()
    staged = rewrite.stage(shard, v, shard.arrow_schema(v), file_size=1 << 24, min_rows=MIN,
                           delete=pa.array(range(1000, 2000), pa.int64()))
    assert staged is not None

    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", full_disk)
    from mzflow.storage.errors import StorageError

    with pytest.raises(StorageError, match="No space left"):
        rewrite.commit(shard, staged, 10, None)
    assert sorted(p.name for p in shard.path.glob("*.parquet")) == files_before
    assert _staging_left(shard) == [] and shard.version() == v


def test_staging_folders_a_killed_writer_left_are_swept(tmp_path: Path) -> None:
    shard = _shard(tmp_path)
    old, fresh = (shard.path / rewrite.STAGING / name for name in ("old", "fresh"))
    for folder in (old, fresh):
        folder.mkdir(parents=True)
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    rewrite.sweep(shard.path)
    assert _staging_left(shard) == ["fresh"]  # a writer may be staging there now


def test_text_columns_are_rewritten_too(tmp_path: Path) -> None:
    """delta-rs's data files ask for string views, which Arrow's filter cannot take
    (the soak's UPDATEs of a text column failed on them)."""
    shard = Shard(tmp_path / "s")
    shard.create(pa.schema([("k", pa.int64()), ("name", pa.string())]), 1)
    shard.append(pa.table({"k": pa.array(range(400), pa.int64()),
                           "name": pa.array([f"n{i}" for i in range(400)]),
                           ROWID: pa.array(range(400), pa.int64())}), 2)
    data = shard.read(shard.version())
    shard.update_rows(data.filter(pc.less(data.column(ROWID), 10)), 3)  # a MERGE's files
    data = shard.read(shard.version())
    new = data.filter(pc.less(data.column(ROWID), 200))
    new = new.set_column(1, "name", pa.array(["upd"] * 200))
    v = shard.version()
    staged = rewrite.stage(shard, v, shard.arrow_schema(v), file_size=1 << 24, min_rows=MIN,
                           replace=new)
    assert staged is not None
    rewrite.commit(shard, staged, 4, None)
    names = Counter(shard.read(shard.version()).column("name").to_pylist())
    assert names["upd"] == 200 and names["n300"] == 1 and sum(names.values()) == 400

