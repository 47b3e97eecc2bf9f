"""An arrangement shard on its own (no Spark): lookups equal a brute-force filter at
every version its chain reaches, read O(keys) row groups however the keys spread,
survive duplicate appends (a task run twice), and merges keep the batch count
logarithmic."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa

from mzflow.maintain.tick import arrange
from mzflow.storage.arrangement import ArrangementShard
from mzflow.storage.delta import DIFF

COLUMNS = ["k", "v", "_mz_rowid"]
GROUP = 16


def _batch(rows: list[tuple[int, str, int]], diff: int) -> pa.Table:
    return pa.table({"k": pa.array([r[0] for r in rows], pa.int64()),
                     "v": pa.array([r[1] for r in rows], pa.string()),
                     "_mz_rowid": pa.array([r[2] for r in rows], pa.int64()),
                     DIFF: pa.array([diff] * len(rows), pa.int64())})


def _changes(deleted: list[tuple[int, str, int]], inserted: list[tuple[int, str, int]]
             ) -> pa.Table:
    return pa.concat_tables([_batch(deleted, -1), _batch(inserted, 1)])


def _expected(live: dict[int, tuple[int, str, int]], keys: list[int | None]) -> Counter:
    wanted = set(keys)
    return Counter(r for r in live.values() if r[0] in wanted)


def _got(shard: ArrangementShard, version: int, keys: list[int | None]) -> Counter:
    chain = shard.chain(version)
    assert chain is not None, version
    found = shard.lookup(chain, keys, COLUMNS)
    assert found is not None
    return Counter(tuple(r.values()) for r in found.rows.to_pylist())


def test_lookups_equal_a_filter_at_every_version(tmp_path: Path) -> None:
    rng = random.Random(7)
    shard = ArrangementShard(tmp_path / "arr", "k")
    live = {i: (rng.randrange(500), f"v{i}", i) for i in range(2000)}
    shard.add_batch(_batch(list(live.values()), 1), -1, 0, 1, group_rows=GROUP,
                    file_size=1 << 20)
    history = {0: dict(live)}
    next_id = 2000
    for version in range(1, 8):
        gone = rng.sample(sorted(live), 30)
        deleted = [live.pop(i) for i in gone]
        inserted = []
        for _ in range(30):
            row = (rng.choice([rng.randrange(500), None, 10_000 + version]), f"n{next_id}",
                   next_id)
            live[next_id] = row
            inserted.append(row)
            next_id += 1
        last = _changes(deleted, inserted)
        shard.add_batch(last, version - 1, version, version + 1, group_rows=GROUP,
                        file_size=1 << 20)
        history[version] = dict(live)
    # A task run twice: the same batch appended again is counted once by every reader.
    shard.add_batch(last, 6, 7, 9, group_rows=GROUP, file_size=1 << 20)
    # A version range where the table did not change still continues the chain.
    shard.add_batch(_changes([], []), 7, 8, 10, group_rows=GROUP, file_size=1 << 20)
    history[8] = dict(live)
    for version, rows in history.items():
        keys = [rng.randrange(500) for _ in range(25)] + [10_000 + version, None]
        assert _got(shard, version, keys) == _expected(rows, keys), version
    assert shard.frontier() == 8


def test_scattered_keys_read_a_row_group_each(tmp_path: Path) -> None:
    shard = ArrangementShard(tmp_path / "arr", "k")
    rows = [(i, f"v{i}", i) for i in range(20_000)]
    shard.add_batch(_batch(rows, 1), -1, 0, 1, group_rows=GROUP, file_size=1 << 30)
    chain = shard.chain(0)
    assert chain is not None
    for keys in ([5, 9_000, 19_999], list(range(0, 20_000, 997)), [100, 101, 102, 103]):
        found = shard.lookup(chain, keys, COLUMNS)
        assert found is not None
        assert sorted(found.rows.column("k").to_pylist()) == sorted(keys)
        # a key in each of len(keys) row groups at most, never the whole table
        assert found.groups <= len(keys)
        assert found.read <= GROUP * len(keys)


def test_merges_keep_the_batches_few_and_the_contents_exact(tmp_path: Path) -> None:
    rng = random.Random(3)
    shard = ArrangementShard(tmp_path / "arr", "k")
    live = {i: (rng.randrange(100), f"v{i}", i) for i in range(300)}
    shard.add_batch(_batch(list(live.values()), 1), -1, 0, 1, group_rows=GROUP,
                    file_size=1 << 20)
    write = {"group_rows": GROUP, "file_size": 1 << 20}
    counts = []
    for version in range(1, 41):
        gone = rng.sample(sorted(live), 3)
        deleted = [live.pop(i) for i in gone]
        inserted = [(rng.randrange(100), f"n{version}-{j}", 1000 * version + j) for j in range(3)]
        live.update({r[2]: r for r in inserted})
        shard.add_batch(_changes(deleted, inserted), version - 1, version, version + 1,
                        **write)
        arrange._merge(shard, version - 1, version + 1, write)
        chain = shard.chain(version)
        assert chain is not None
        counts.append(len(chain))
    keys = list(range(100))
    assert _got(shard, 40, keys) == _expected(live, keys)
    # the previous tick's version stays readable after the merge (the cluster's next
    # ticks read from there)
    assert shard.chain(39) is not None
    # a binary counter: about log2(ticks) batches, not one per tick
    assert max(counts) <= 8, counts
    print(f"batches in the chain over 40 appends: {counts}")



def test_files_with_string_views_combine_with_plain_strings(tmp_path: Path) -> None:
    """Files hold whatever string type their writer was handed (delta-rs keeps it):
    a table's base files and later batches can mix ``string`` and ``string_view``, which
    pyarrow 26 will not concatenate. A bench run's arrangement rebuild failed so."""
    import glob

    import pyarrow as pa
    from deltalake import write_deltalake

    from mzflow.maintain.tick.arrange import _rows_of
    from mzflow.storage.delta import Shard

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"k": [1], "s": pa.array(["a"], pa.string())}))
    write_deltalake(str(path), pa.table({"k": [2], "s": pa.array(["b"], pa.string_view())}),
                    mode="append")
    files = sorted(glob.glob(str(path / "*.parquet")))
    rows = _rows_of(files, Shard(path), 1)
    assert rows.schema.field("s").type == pa.string()
    assert sorted(rows.column("s").to_pylist()) == ["a", "b"]
