"""A GROUP BY's state shard as an append-only log of changed groups (issue 34, item 2):
storage and the process's memory of it, on real Delta tables (delta-rs, no Spark).

Every answer is compared with a plain dict model of the groups; rows read from the
shard's files are counted (``STATE_ROWS_LOADED``), never timed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mzflow import caches
from mzflow.storage import state_memory
from mzflow.storage.delta import KEY, ROWS, StateShard


def _groups(model: dict[str, int], keys: list[str]) -> pa.Table:
    """The groups ``keys`` as the model has them now (0 rows: gone)."""
    return pa.table({"g": pa.array(keys, pa.string()),
                     ROWS: pa.array([model.get(k, 0) for k in keys], pa.int64()),
                     "_s0": pa.array([model.get(k, 0) * 10 for k in keys], pa.int64()),
                     KEY: pa.array(keys, pa.string())})


def _as_dict(rows: pa.Table) -> dict[str, int]:
    return dict(zip(rows.column(KEY).to_pylist(), rows.column(ROWS).to_pylist(), strict=True))


def _loaded() -> int:
    return state_memory.STATE_ROWS_LOADED[0]


def _commit(shard: StateShard, version: int) -> dict:
    text = (shard.path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if '"commitInfo"' in line][0][
        "commitInfo"]


@pytest.fixture(autouse=True)
def cold() -> None:
    caches.reset()


def _seeded(path: Path, n: int) -> tuple[StateShard, dict[str, int]]:
    model = {str(k): 1 + k % 5 for k in range(n)}
    shard = StateShard(path)
    shard.replace_groups(_groups(model, list(model)), 1, "tick")
    return shard, model


def test_a_tick_appends_its_change_and_readers_see_the_newest_row(tmp_path: Path) -> None:
    shard, model = _seeded(tmp_path / "s", 5_000)
    rng = random.Random(3)
    everything = [str(k) for k in range(5_400)]
    for ts in range(2, 12):
        keys = rng.sample(everything, 20)
        for k in keys:  # some change, some go, some are new (and some new ones go at once)
            model[k] = rng.choice([0, 0, 1, 7, model.get(k, 0) + 2])
            if model[k] == 0:
                del model[k]
        before = shard.version()
        version = shard.append_groups(_groups(model, keys), ts, "tick", keep_empty=False)
        assert version == before + 1
        info = _commit(shard, version)
        # one append of the 20 groups: no file of the state rewritten
        assert info["operation"] == "WRITE", info
        assert info["operationMetrics"]["num_added_rows"] == 20, info
        assert info["operationMetrics"]["num_removed_files"] == 0, info
        assert shard.applied("tick") == ts
        probe = rng.sample(everything, 50) + keys
        got = _as_dict(shard.rows_with_keys(version, pa.array(probe)))
        assert got == {k: model[k] for k in probe if k in model}
    # A process with nothing in memory reads the same at every version, and a read at an
    # older version than the one held goes to the files (and answers for that version).
    newest = shard.version()
    caches.reset()
    cold = _as_dict(shard.rows_with_keys(newest, pa.array(everything)))
    assert cold == model
    old = _as_dict(shard.rows_with_keys(newest - 3, pa.array(everything)))
    assert old != model
    caches.reset()
    assert _as_dict(shard.rows_with_keys(newest - 3, pa.array(everything))) == old


def test_memory_catches_up_by_reading_only_the_appended_rows(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """Another process appends (here: this one, its memory left alone): the next read
    at the newer version applies just those commits; an overwrite since (a rebuild, a
    compaction) makes it read the whole state again."""
    shard, model = _seeded(tmp_path / "s", 3_000)
    all_keys = pa.array(list(model) + ["x1", "x2"])
    start = _loaded()
    assert _as_dict(shard.rows_with_keys(shard.version(), pa.array(["1"]))) == {"1": model["1"]}
    assert _loaded() == start  # the rebuild put what it wrote in memory
    with monkeypatch.context() as m:  # "another process": this one's memory not told
        m.setattr(state_memory, "keep", lambda *a: None)
        other = StateShard(shard.path)
        for ts, keys in ((2, ["1", "2", "x1"]), (3, ["2", "3"])):
            for k in keys:
                model[k] = model.get(k, 0) + 1
            other.append_groups(_groups(model, keys), ts, "tick", keep_empty=False)
    held = state_memory.cached(shard.path, shard._identity() or (0, 0))
    assert held is not None and held.version == shard.version() - 2
    start = _loaded()
    assert _as_dict(shard.rows_with_keys(shard.version(), all_keys)) == model
    assert _loaded() - start == 5  # the two appends' rows, not the state's 3,000
    # a rebuild elsewhere: everything again
    with monkeypatch.context() as m:
        m.setattr(state_memory, "keep", lambda *a: None)
        model = {k: 2 for k in list(model)[:100]}
        StateShard(shard.path).replace_groups(_groups(model, list(model)), 4, "tick")
    start = _loaded()
    assert _as_dict(shard.rows_with_keys(shard.version(), all_keys)) == model
    assert _loaded() - start == 100


def test_a_global_group_is_kept_empty_not_dropped(tmp_path: Path) -> None:
    shard = StateShard(tmp_path / "s")
    one = pa.table({ROWS: pa.array([3], pa.int64()), KEY: pa.array(["global"])})
    shard.append_groups(one, 1, "tick", keep_empty=True)
    empty = pa.table({ROWS: pa.array([0], pa.int64()), KEY: pa.array(["global"])})
    version = shard.append_groups(empty, 2, "tick", keep_empty=True)
    assert shard.rows_with_keys(version, pa.array(["global"])).column(ROWS).to_pylist() == [0]
    caches.reset()
    assert shard.rows_with_keys(version, pa.array(["global"])).column(ROWS).to_pylist() == [0]
    gone = shard.append_groups(empty, 3, "tick", keep_empty=False)
    assert shard.rows_with_keys(gone, pa.array(["global"])).num_rows == 0


def test_compaction_collapses_the_log_keeping_time_metadata_and_txn(tmp_path: Path) -> None:
    shard, model = _seeded(tmp_path / "s", 2_000)
    for ts in range(2, 9):
        keys = [str(ts), str(ts * 100), f"n{ts}"]
        for k in keys:
            model[k] = 0 if k == str(ts * 100) else model.get(k, 0) + ts
            if model[k] == 0:
                del model[k]
        shard.append_groups(_groups(model, keys), ts, "tick", keep_empty=False,
                            extra={"mzflow.topk_candidates": json.dumps([str(ts)])})
    files_before = len(shard.files(shard.version()))
    assert len(shard.layout(shard.version())[1]) == 7  # seven appended files
    stats = shard.compact(shard.version() - 2, 8)
    version = shard.version()
    base, later = shard.layout(version)
    assert later == [] and len(base) == 1 < files_before
    assert stats["removed_files"] == files_before
    assert shard.applied("tick") == 8  # a retry of the last tick still skips its write
    meta = shard.commit_metadata(version)
    assert meta["mzflow.ts"] == "8" and json.loads(meta["mzflow.topk_candidates"]) == ["8"]
    assert shard.version_at(8) == version
    rows = shard.read(version)
    assert rows.num_rows == len(model) and pc.all(pc.invert(rows.column("_mz_gone"))).as_py()
    for fresh in (False, True):
        if fresh:
            caches.reset()
        got = _as_dict(shard.rows_with_keys(version, pa.array([*model, "200", "n9"])))
        assert got == model


def test_a_state_written_by_merges_before_the_log_format_reads_and_appends(
        tmp_path: Path) -> None:
    """A home from before: one row per group, no ``_mz_seq`` or ``_mz_gone``. The first
    append adds the two columns; the old rows read as the oldest."""
    from deltalake import write_deltalake

    from mzflow.storage.commits import TABLE_CONFIG, tick_props

    model = {str(k): k + 1 for k in range(50)}
    shard = StateShard(tmp_path / "s")
    write_deltalake(str(shard.path), _groups(model, list(model)), configuration=TABLE_CONFIG,
                    commit_properties=tick_props(1, None, ("tick", 1)))
    for k in ("3", "x"):
        model[k] = 9
    del model["4"]
    model.pop("5")
    shard.append_groups(_groups(model, ["3", "4", "x"]), 2, "tick", keep_empty=False)
    shard.append_groups(_groups(model, ["5"]), 3, "tick", keep_empty=False)
    probe = pa.array([*model, "4", "5"])
    assert _as_dict(shard.rows_with_keys(shard.version(), probe)) == model
    caches.reset()
    assert _as_dict(shard.rows_with_keys(shard.version(), probe)) == model
    base, later = shard.layout(shard.version())
    assert len(base) == 1 and len(later) == 2
    shard.compact(0, 3)
    caches.reset()
    assert _as_dict(shard.rows_with_keys(shard.version(), probe)) == model
