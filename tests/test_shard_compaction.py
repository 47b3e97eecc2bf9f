"""Compaction of a shard's change-feed files, on real Delta tables (delta-rs, no Spark).

delta-rs's vacuum deletes data files but leaves ``_change_data/`` alone, so a shard
that merges (every index, every table with UPDATE or DELETE) grew by a change
file per commit forever. ``Shard._vacuum`` deletes the ones only compacted versions
reference.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from mzflow.storage.delta import KEY, ROWS, TABLE_CONFIG, Shard


def _merge(shard: Shard, rows: pa.Table, ts: int) -> None:
    """A keyed MERGE (an index's apply is one), each commit at time ``ts``."""
    from mzflow.storage.commits import commit_props

    if not shard.exists():
        DeltaTable.create(str(shard.path), rows.schema, configuration=TABLE_CONFIG,
                          commit_properties=commit_props(0, None))
    (shard._table().merge(rows, f"t.{KEY} = s.{KEY}", source_alias="s", target_alias="t",
                          commit_properties=commit_props(ts, None))
     .when_matched_update_all().when_not_matched_insert_all().execute())


def _groups(keys: list[str], n: int) -> pa.Table:
    return pa.table({KEY: pa.array(keys), ROWS: pa.array([n] * len(keys), pa.int64()),
                     "total": pa.array([n * 10] * len(keys), pa.int64())})


def _change_files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in (path / "_change_data").rglob("*.parquet")}


def test_compaction_deletes_change_files_only_compacted_versions_read(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "state")
    _merge(shard, _groups(["a", "b", "c"], 1), 1)
    for ts in range(2, 8):  # each merge updates a group: a change file per commit
        _merge(shard, _groups(["a", "b"], ts), ts)
    before = _change_files(shard.path)
    assert len(before) >= 5, before
    latest = shard.version()
    keep_from = latest - 1
    # a change file no commit names yet (a write in flight) must survive
    stray = shard.path / "_change_data" / "cdc-in-flight.parquet"
    stray.write_bytes(b"not committed yet")
    time.sleep(0.01)
    os.utime(stray)  # newer than commit keep_from

    stats = shard.compact(keep_from, 7)

    after = _change_files(shard.path)
    assert stray.exists()
    assert len(after) < len(before) and after - before == {"_change_data/" + stray.name}
    assert stats["removed_files"] >= len(before) - len(after) + 1
    stray.unlink()
    # the kept versions' change feed still reads, and the contents are intact
    feed = DeltaTable(str(shard.path)).load_cdf(starting_version=latest,
                                                ending_version=latest).read_all()
    assert set(feed.column("_change_type").to_pylist()) == {"update_preimage",
                                                            "update_postimage"}
    rows = DeltaTable(str(shard.path)).to_pyarrow_table().sort_by(KEY)
    assert rows.column("total").to_pylist() == [70, 70, 10]


def test_without_the_kept_commits_log_nothing_is_deleted(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "state")
    for ts in range(1, 5):
        _merge(shard, _groups(["a"], ts), ts)
    before = _change_files(shard.path)
    # a kept version whose commit file is missing (here: one past the newest)
    assert shard._drop_change_files(shard.version() - 1, shard.version() + 1) == 0
    assert _change_files(shard.path) == before


def test_compaction_deletes_data_files_no_commit_named_an_hour_old(tmp_path: Path) -> None:
    """A writer killed between writing its files and committing them (a staged rewrite's
    files are moved into the shard first) leaves data files no commit names: Delta's
    vacuum never deletes those. Compaction does, once they are an hour old; a newer one
    may be a write in flight. A staged rewrite's exact changes, which Delta's full
    vacuum would list too (no ``cdc`` action names them), stay while their version does."""
    from mzflow.storage import rewrite

    shard = Shard(tmp_path / "t")
    shard.create(pa.schema([("k", pa.int64())]), 1)
    for ts in (2, 3):
        ids = pa.array(range(ts * 100, ts * 100 + 100), pa.int64())
        shard.append(pa.table({"k": ids, "_mz_rowid": ids}), ts)
    v = shard.version()
    rewrite.commit(shard, rewrite.stage(shard, v, shard.arrow_schema(v), file_size=1 << 24,
                                        min_rows=1, delete=pa.array(range(300, 350),
                                                                    pa.int64())), 4, None)
    shard.history()
    (changes,) = (shard.path / name for name in shard._history().exact.values())
    live = sorted(p.name for p in shard.path.glob("*.parquet"))
    old, fresh = (shard.path / f"part-00000-orphan-{age}.parquet" for age in ("old", "new"))
    for path in (old, fresh):
        path.write_bytes((shard.path / live[0]).read_bytes())
    hours_ago = time.time() - 2 * 3600
    for path in (old, changes):
        os.utime(path, (hours_ago, hours_ago))

    stats = shard.compact(shard.version(), 5)

    assert not old.exists() and fresh.exists() and changes.exists()
    assert stats["removed_files"] >= 1
    assert sorted(shard.read(shard.version()).column("k").to_pylist()) == [
        *range(200, 300), *range(350, 400)]
