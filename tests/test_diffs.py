"""A tick's result is compared with its index in Arrow (small indexes) or in Spark
(large ones, the arrow_diff_rows tuning): both must give exactly the same changed rows,
keys and counts, over values that hash and compare awkwardly (NULLs, decimals,
strings, timestamps, duplicate rows, rows that cancel out)."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from mzflow.engine import diffs
from mzflow.engine.spark import session
from mzflow.storage.delta import COUNT, DIFF, KEY, IndexShard
from mzflow.storage.types import arrow_schema, parse_type, spark_ddl

pytestmark = [pytest.mark.slow, pytest.mark.spark]

COLUMNS = [("a", "int"), ("s", "text"), ("d", "numeric(12,2)"), ("t", "timestamp")]
NAMES = [c for c, _ in COLUMNS]
SPARK_TYPES = [parse_type(t).spark for _, t in COLUMNS]
INDEX_DDL = spark_ddl(COLUMNS + [(KEY, "text"), (COUNT, "bigint")])


def _row(rng: random.Random) -> tuple:
    def maybe(v: object) -> object:
        return None if rng.random() < 0.2 else v
    return (maybe(rng.randint(-2, 2)), maybe(rng.choice(["x", "y", "", "é"])),
            maybe(Decimal(rng.randint(-300, 300)) / 100),
            maybe(datetime(2026, 1, 1 + rng.randint(0, 2), rng.randint(0, 1))))


def _frame(rows: list[tuple], diff: list[int] | None = None):
    schema = arrow_schema([(c, t, True) for c, t in COLUMNS])
    table = pa.Table.from_pylist([dict(zip(NAMES, r, strict=True)) for r in rows],
                                 schema=schema)
    if diff is not None:
        table = table.append_column(DIFF, pa.array(diff, pa.int64()))
    return session().createDataFrame(table) if table.num_rows else session().createDataFrame(
        [], spark_ddl(COLUMNS + ([(DIFF, "bigint")] if diff is not None else [])))


def _both(monkeypatch: pytest.MonkeyPatch, fn, *args) -> tuple[Counter, Counter]:
    got = {}
    for path, limit in (("arrow", 1_000_000), ("spark", 0)):
        table = fn(*args, arrow_rows=limit)
        got[path] = Counter(tuple(r.values()) for r in table.select(
            NAMES + [KEY, COUNT]).to_pylist())
    return got["arrow"], got["spark"]


def _index(path: Path, contents: pa.Table) -> list[str]:
    """Written as ticks write it: a Delta merge into an index shard."""
    shard = IndexShard(path)
    schema = arrow_schema([(c, t, True) for c, t in COLUMNS])
    shard.create_index(schema, -1)
    values = contents.select(NAMES).cast(schema)
    shard.apply(pa.table(list(values.columns) + [contents.column(KEY), contents.column(COUNT)],
                         names=NAMES + [KEY, COUNT]), 1, "test")
    return shard.files(shard.version())


@pytest.mark.parametrize("seed", range(4))
def test_arrow_and_spark_comparisons_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           seed: int) -> None:
    rng = random.Random(seed)
    pool = [_row(rng) for _ in range(12)]
    before = [rng.choice(pool) for _ in range(rng.randint(0, 25))]
    # The index as a recompute from nothing writes it (both paths, no old files).
    arrow, spark = _both(monkeypatch, diffs.changes, _frame(before), [], INDEX_DDL, NAMES,
                         SPARK_TYPES)
    assert arrow == spark
    assert sum(n for *_, n in arrow) == len(before)
    first = diffs.changes(_frame(before), [], INDEX_DDL, NAMES, SPARK_TYPES,
                          arrow_rows=1_000_000)
    files = _index(tmp_path / "index", first) if first.num_rows else []

    # A recompute: new contents against the index.
    after = [rng.choice(pool) for _ in range(rng.randint(0, 25))]
    arrow, spark = _both(monkeypatch, diffs.changes, _frame(after), files, INDEX_DDL, NAMES,
                         SPARK_TYPES)
    assert arrow == spark
    want = Counter(after)
    old = Counter(before)
    assert {k[:4]: k[5] for k in arrow} == {
        r: want[r] for r in set(want) | set(old) if want[r] != old[r]}

    # Changes: +/- rows (some cancelling within the batch) against the index.
    changed = [rng.choice(pool) for _ in range(rng.randint(0, 20))]
    signs = [rng.choice([-1, 1]) for _ in changed]
    # never retract more copies than the index holds, as a real tick never does
    have = Counter(before)
    for i, (r, d) in enumerate(zip(changed, signs, strict=True)):
        if d < 0 and have[r] == 0:
            signs[i] = 1
        have[r] += signs[i]
    arrow, spark = _both(monkeypatch, diffs.apply_diff, _frame(changed, signs), files,
                         INDEX_DDL, NAMES, SPARK_TYPES)
    assert arrow == spark
    net = Counter()
    for r, d in zip(changed, signs, strict=True):
        net[r] += d
    assert {k[:4]: k[5] for k in arrow} == {r: old[r] + d for r, d in net.items() if d}


def test_arrow_tables_with_empty_batches_reach_spark_whole() -> None:
    """PySpark 4.3 drops rows after empty record batches (a filtered Delta scan of a
    state shard gives them: a group's retraction went missing). ``from_arrow`` sends
    one batch."""
    from mzflow.engine.spark import from_arrow

    one = pa.table({"a": [1]})
    table = pa.concat_tables([one.slice(0, 0), one.slice(0, 0), one, one])
    assert [b.num_rows for b in table.to_batches()] == [0, 0, 1, 1]
    assert from_arrow(table).count() == 2
