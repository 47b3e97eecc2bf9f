"""Partitioned tables (CREATE TABLE … PARTITION BY): the keys that name Delta
partitions (no Spark); the DDL and the shard's layout; then, on Spark, a table
partitioned by an int, a text and a date column, with NULLs, '' and characters a path
must escape, through INSERT, UPDATE (rows changing partition), DELETE, COPY, ADD
COLUMN and compaction, against DuckDB at every time (AS OF too); a maintained view over
it ticked incrementally (== recompute == DuckDB); SUBSCRIBE over it. Projections'
IN PARTITION is tested in test_projections.py."""

from __future__ import annotations

import datetime as dt
import string
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import mzflow
from mzflow.errors import DuplicateObject, InvalidDefinition, UnknownColumn
from mzflow.storage import partitions

SAFE = set(string.ascii_letters + string.digits + "._-")


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        yield c


# -- keys and DDL (no Spark) -------------------------------------------------------------


def test_keys_are_path_safe_and_tell_values_apart() -> None:
    texts = ["", None, "a", "a b", "a/b=c%", "_", "_5f", "~", "é", "x" * 400, "x" * 401,
             "__HIVE_DEFAULT_PARTITION__"]
    keys = partitions.keys(pa.array(texts, pa.string())).to_pylist()
    assert keys[1] is None  # NULL is Delta's null partition
    named = [k for k in keys if k is not None]
    assert len(set(named)) == len(named), keys  # '' is not NULL, '_' is not '_5f'
    assert all(set(k) <= SAFE and 0 < len(k) < 200 for k in named), keys
    # A literal (IN PARTITION's text) gets the key of the typed value it denotes.
    cases: list[tuple[pa.Array, str]] = [
        (pa.array([5], pa.int32()), "5"), (pa.array([-5], pa.int64()), "-5"),
        (pa.array([dt.date(2024, 1, 2)]), "2024-01-02"),
        (pa.array([Decimal("1.50")], pa.decimal128(8, 2)), "1.5"),
        (pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("us", tz="UTC")),
         "2024-01-02 03:04:05"),
        (pa.array([True]), "true"), (pa.array(["a b"]), "a b"),
        (pa.array([b"\xff\x00"]), "\\xff00"),
    ]
    for typed, text in cases:
        assert partitions.key_of_literal(text, typed.type) == partitions.keys(typed)[0].as_py()
    assert partitions.key_of_literal(None, pa.int32()) is None
    with pytest.raises(pa.ArrowInvalid):
        partitions.key_of_literal("abc", pa.int32())


def test_partition_by_ddl_and_layout(conn: mzflow.Connection) -> None:
    from deltalake import DeltaTable

    conn.execute("CREATE TABLE t (k int, g text, d date) PARTITION BY (g, d)")
    shown = conn.execute("SHOW CREATE TABLE t").rows[0][1]
    assert 'PARTITION BY ("g", "d")' in shown, shown
    (table_id,) = conn.execute("SELECT id FROM mz_tables WHERE name = 't'").rows[0]
    delta = DeltaTable(str(conn.config.warehouse / table_id))
    # Delta partitions by the hidden keys; the columns themselves stay data columns.
    assert delta.metadata().partition_columns == ["_mz_partition_g", "_mz_partition_d"]
    assert {"k", "g", "d"} <= set(pa.schema(delta.schema().to_arrow()).names)
    assert [r[0] for r in conn.execute("SHOW COLUMNS FROM t").rows] == ["k", "g", "d"]
    cases: list[tuple[str, type[Exception], str]] = [
        ("CREATE TABLE u (k int) PARTITION BY (nope)", UnknownColumn,
         'column "nope" named in PARTITION BY does not exist in table "u"'),
        ("CREATE TABLE u (k int) PARTITION BY (k, k)", DuplicateObject, "more than once"),
        ("CREATE TABLE u (k int, _mz_partition_k int)", InvalidDefinition, "is reserved"),
        ("ALTER TABLE t ADD COLUMN _mz_partition_x text", InvalidDefinition, "is reserved"),
    ]
    for sql, error, text in cases:
        with pytest.raises(error, match=text):
            conn.execute(sql)


# -- reads and writes on Spark -------------------------------------------------------------

TABLE = "CREATE TABLE t (k int, i int, s text, d date, v numeric(8,2)) PARTITION BY (i, s, d)"
DUCK = "CREATE TABLE t (k int, i int, s text, d date, v decimal(8,2))"
SEED = ("INSERT INTO t VALUES (1, 1, 'a', DATE '2024-01-01', 1.50), "
        "(2, NULL, '', DATE '2024-01-02', 2.25), (3, 2, NULL, NULL, NULL), "
        "(4, 2, 'a b/c=%', DATE '2024-01-01', -1.00), (5, NULL, NULL, NULL, 0.10), "
        "(6, 1, 'é', DATE '2024-01-03', 9.99)")
QUERIES = [
    "SELECT k, i, s, d, v FROM t",
    "SELECT k, v FROM t WHERE s = ''",
    "SELECT k FROM t WHERE s IS NULL",
    "SELECT k, s FROM t WHERE i = 2",
    "SELECT k FROM t WHERE i IS NULL",
    "SELECT k, d FROM t WHERE d >= DATE '2024-01-02'",
    "SELECT k FROM t WHERE s = 'a b/c=%' AND d = DATE '2024-01-01'",
    "SELECT s, count(*), sum(v) FROM t GROUP BY s",
    "SELECT i, d, min(k), max(v) FROM t GROUP BY i, d",
]


def normal(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    def fix(v: object) -> object:
        return round(float(v), 6) if isinstance(v, float | Decimal) else v
    return Counter(tuple(fix(v) for v in r) for r in rows)


def _writes(tmp_path: Path) -> list[str]:
    csv = tmp_path / "more.csv"
    csv.write_text("k,i,s,d,v\n7,3,c,2024-01-05,7.00\n8,,,,\n9,1,a,2024-01-01,0.01\n")
    return [
        SEED,
        # Rows change partition (every partition column), and stay in theirs.
        "UPDATE t SET s = 'moved', i = 3, d = DATE '2024-02-01' WHERE k = 1",
        "UPDATE t SET v = v * 2 WHERE i IS NULL OR s = ''",
        "DELETE FROM t WHERE s = 'a b/c=%' OR k = 5",
        f"COPY t FROM '{csv}' WITH (FORMAT csv, HEADER true)",
        "INSERT INTO t VALUES (10, 3, '', NULL, 3.00), (11, NULL, 'moved', "
        "DATE '2024-02-01', NULL)",
    ]


@pytest.mark.slow
@pytest.mark.spark
def test_a_partitioned_table_reads_like_duckdb_through_writes(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    db = duckdb.connect()
    db.execute(DUCK)
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute(TABLE)
        times: list[tuple[int, dict[str, Counter[tuple[Any, ...]]]]] = []

        def check(step: str) -> None:
            answers = {}
            for q in QUERIES:
                got, want = normal(conn.execute(q).rows), normal(db.execute(q).fetchall())
                assert got == want, (step, q, got, want)
                answers[q] = want
            times.append((conn.store.snapshot().read_ts, answers))

        for sql in _writes(tmp_path):
            conn.execute(sql)
            db.execute(sql)
            check(sql)
        conn.execute("ALTER TABLE t ADD COLUMN w text")
        db.execute("ALTER TABLE t ADD COLUMN w text")
        conn.execute("INSERT INTO t VALUES (12, 2, 'a', NULL, 1.00, 'new')")
        db.execute("INSERT INTO t VALUES (12, 2, 'a', NULL, 1.00, 'new')")
        check("add column")
        assert normal(conn.execute("SELECT k, w, s FROM t").rows) == normal(
            db.execute("SELECT k, w, s FROM t").fetchall())
        compacted = conn.compact("t")
        assert compacted, "nothing compacted"
        check("compact")
        # The layout: one directory per partition key, and the data files hold the
        # partition columns themselves (every reader of files sees them).
        (table_id,) = conn.execute("SELECT id FROM mz_tables WHERE name = 't'").rows[0]
        root = conn.config.warehouse / table_id
        files = [f for f in root.rglob("*.parquet")
                 if not {"_change_data", "_delta_log"} & set(f.parts)]
        assert any("_mz_partition_s=_" in f.parts[-3] for f in files)
        assert any("__HIVE_DEFAULT_PARTITION__" in str(f) for f in files)
        assert all({"i", "s", "d"} <= set(pq.read_schema(f).names) for f in files)
        # … with their statistics, which name the file's partition: min/max pruning
        # (the get rule's) sees the partition columns like any other.
        from mzflow.storage.delta import Shard

        actions = Shard(root).add_actions(Shard(root).version()).to_pylist()
        for action in actions:
            for col in ("i", "s", "d"):
                low, high = action[f"min.{col}"], action[f"max.{col}"]
                key = action[f"partition._mz_partition_{col}"]
                assert low == high, action
                assert (key is None) == (low is None), action
                if key is not None:
                    assert partitions.key_of(str(low)) == key, action
        # Every earlier time reads as it did.
        for at, answers in times:
            for q in QUERIES:
                got = normal(conn.execute(f"{q} AS OF {at}").rows)
                assert got == answers[q], (at, q, got, answers[q])


VIEWS = {
    "agg": "SELECT s, i, count(*) AS n, sum(v) AS total FROM t GROUP BY s, i",
    "recent": "SELECT k, s, d FROM t WHERE d >= DATE '2024-01-02' OR d IS NULL",
    "named": "SELECT t.k, t.s, u.label FROM t JOIN u ON t.s = u.s",
    "latest": "SELECT i, max(d) AS d FROM t GROUP BY i",
}


@pytest.mark.slow
@pytest.mark.spark
def test_views_over_a_partitioned_table_tick_incrementally(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.setenv("MZFLOW_RECOMPUTE_SHARE", "1e9")  # every later tick incremental
    db = duckdb.connect()
    db.execute(DUCK)
    db.execute("CREATE TABLE u (s text, label text)")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("CREATE CLUSTER work")
        conn.execute(TABLE)
        conn.execute("CREATE TABLE u (s text, label text) PARTITION BY (s)")
        lookup = "INSERT INTO u VALUES ('a', 'A'), ('', 'empty'), ('moved', 'M'), ('é', 'E')"
        conn.execute(lookup)
        db.execute(lookup)
        for name, sql in VIEWS.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER work AS {sql}")
            conn.execute(f"CREATE VIEW {name}_plain AS {sql}")
        for i, sql in enumerate(_writes(tmp_path)):
            conn.execute(sql)
            db.execute(sql)
            reports = conn.tick(cluster="work")
            assert all(r.error is None for r in reports), reports
            if i > 0:
                modes = {r.on.split(".")[-1]: r.strategy for r in reports}
                assert all("mode delta" in m or "mode state" in m
                           for m in modes.values()), modes
            conn.execute("SET cluster = work; SET transaction_isolation = 'serializable'")
            maintained = {n: normal(conn.execute(f"SELECT * FROM {n}").rows) for n in VIEWS}
            conn.execute("RESET transaction_isolation; SET cluster = default")
            for name, view in VIEWS.items():
                recomputed = normal(conn.execute(f"SELECT * FROM {name}_plain").rows)
                oracle = normal(db.execute(view).fetchall())
                assert maintained[name] == recomputed == oracle, (sql, name)


@pytest.mark.slow
@pytest.mark.spark
def test_subscribe_to_a_partitioned_table(tmp_path: Path) -> None:
    db = duckdb.connect()
    db.execute(DUCK)
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute(TABLE)
        states: list[tuple[int, Counter[tuple[Any, ...]]]] = []
        for sql in _writes(tmp_path):
            conn.execute(sql)
            db.execute(sql)
            states.append((conn.store.snapshot().read_ts,
                           Counter(db.execute("SELECT k, i, s, d, v FROM t").fetchall())))
        start, end = states[0][0], states[-1][0]
        expected: Counter[tuple[Any, ...]] = Counter(
            {(start, n) + row: 1 for row, n in states[0][1].items()})
        for (_, before), (at, after) in zip(states, states[1:], strict=False):
            for row in set(before) | set(after):
                if after[row] != before[row]:
                    expected[(at, after[row] - before[row]) + row] += 1
        got = conn.execute(f"SUBSCRIBE t AS OF {start} UP TO {end + 1}")
        assert got.columns == ["mz_timestamp", "mz_diff", "k", "i", "s", "d", "v"]
        assert Counter(got.rows) == expected
