"""A shard's commit history while another process commits (no Spark).

Found by the soak (scripts/soak.py, issue 19, seed 11): delta-rs's ``history(limit)``
on a table loaded at version v reads the newest entries on disk and labels them v,
v-1, …; with a commit made since by another process, the labels were off by one, the
shard's history cache skipped a version for good, and a tick at that version's time
read the version before it (a maintained view missed a committed INSERT)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from mzflow.storage.delta import IndexShard, Shard


def _rows(i: int) -> pa.Table:
    return pa.table({"a": pa.array([i], pa.int32()), "_mz_rowid": pa.array([i], pa.int64())})


def test_history_is_exact_when_another_writer_commits_meanwhile(tmp_path: Path) -> None:
    mine = Shard(tmp_path / "t")
    mine.create(pa.schema([("a", pa.int32())]), 1)
    mine.append(_rows(1), 10)
    assert mine.history() == [(0, 1), (1, 10)]
    other = Shard(tmp_path / "t")  # another process's view of the same table
    other.append(_rows(2), 20)
    loaded = mine._table()  # version 2 is what this process has seen
    other.append(_rows(3), 30)
    mine._table = lambda: loaded  # type: ignore[method-assign]
    assert mine.history() == [(0, 1), (1, 10), (2, 20)]
    assert mine.version_at(20) == 2
    assert mine.version_at(29) == 2


def test_index_state_is_the_newest_commit_it_has_loaded(tmp_path: Path) -> None:
    mine = IndexShard(tmp_path / "i")
    mine.create_index(pa.schema([("k", pa.int32())]), 5)
    schema = mine.arrow_schema()
    mine.mark(10, "tick-i", None, schema)
    loaded = mine._table()
    IndexShard(tmp_path / "i").mark(20, "tick-i", "boom", schema)
    mine._table = lambda: loaded  # type: ignore[method-assign]
    assert mine.state() == (10, None, None)
