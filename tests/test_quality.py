"""Data-quality expectations (issue 17), validated by real Great Expectations: grammar,
definitions and their errors, the four actions on INSERT, COPY and UPDATE (the rows each
commits checked against DuckDB evaluating the same condition), results, the quarantine
and its replay, and writers killed between the table's commit and the quarantine's.

Tables are read back straight from their Delta shards with delta-rs (no Spark) except
where a statement itself needs Spark (the replay's INSERT … SELECT)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import mzflow
from mzflow.errors import DuplicateObject, Error, InvalidDefinition, TypeMismatch, UnknownColumn
from mzflow.sql.parse import parse


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        yield c


def rows_of(conn: mzflow.Connection, table: str) -> list[dict[str, Any]]:
    """A table's current rows, read with delta-rs (the shard mzflow wrote), no row ids."""
    from deltalake import DeltaTable

    from mzflow.storage import paths

    item = conn.store.snapshot().resolve(table)
    data = DeltaTable(str(paths.table(conn.config.warehouse, item.id))).to_pyarrow_table()
    data = data.drop_columns([c for c in data.column_names if c == "_mz_rowid"])
    return sorted(data.to_pylist(), key=lambda r: json.dumps(r, default=str, sort_keys=True))


@pytest.mark.parametrize("sql", [
    "CREATE TABLE t (k INT, CONSTRAINT pos EXPECT (k > 0) ON VIOLATION DROP ROW)",
    "ALTER TABLE t ADD CONSTRAINT u EXPECT expect_column_values_to_be_unique (column => 'k') "
    "ON VIOLATION FAIL",
    "ALTER TABLE t ADD CONSTRAINT b EXPECT expect_column_values_to_be_in_set "
    "(column => 'k', value_set => ARRAY[1, 2]) ON VIOLATION QUARANTINE",
    "ALTER TABLE t ADD CONSTRAINT w EXPECT (NOT k IS NULL)",
    "ALTER TABLE t DROP CONSTRAINT IF EXISTS w",
    "ALTER TABLE t SET (EXPECTATION SUITE = 'conf/expectations/orders.json')",
    "CREATE MATERIALIZED VIEW m WITH (EXPECT pos (k > 0) ON VIOLATION FAIL) AS SELECT 1 AS k",
])
def test_expectation_statements_round_trip(sql: str) -> None:
    from mzflow.sql.dialect import Mz

    assert parse(sql)[0].sql(dialect=Mz) == sql


def test_a_malformed_expectation_names_line_and_column() -> None:
    with pytest.raises(Error, match="line 2, column 44") as err:
        parse("CREATE TABLE t (k int,\n  CONSTRAINT c EXPECT (k > 0) ON VIOLATION IGNORE)")
    assert "Expected WARN, DROP ROW, QUARANTINE or FAIL" in str(err.value)


def test_definitions_are_checked_with_clear_errors(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, s text, n numeric(8,2))")
    bad = [
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT (nope > 0)", UnknownColumn, "nope"),
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT (k + 1)", TypeMismatch,
         "argument of EXPECT must be type boolean, not type integer"),
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT (k > random())", Error,
         "calls to rand are not allowed in expectation"),
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT (k > (SELECT 1))", InvalidDefinition,
         "condition on one row"),
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT expect_it_to_be_nice (column => 'k')",
         InvalidDefinition, 'unknown expectation type "expect_it_to_be_nice"'),
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT expect_column_values_to_be_unique "
         "(column => 'zz')", UnknownColumn, 'column "zz"'),
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT expect_column_values_to_be_unique "
         "(column => 'k', colour => 'red')", InvalidDefinition, 'no argument "colour"'),
        ("ALTER TABLE t ADD CONSTRAINT c EXPECT expect_table_row_count_to_be_between "
         "(min_value => 1) ON VIOLATION QUARANTINE", InvalidDefinition,
         "judges the batch as a whole"),
    ]
    for sql, kind, words in bad:
        with pytest.raises(kind, match=words.replace("(", r"\(")):
            conn.execute(sql)
    conn.execute("ALTER TABLE t ADD CONSTRAINT c EXPECT (k > 0)")
    with pytest.raises(DuplicateObject, match='constraint "c" for relation "t" already'):
        conn.execute("ALTER TABLE t ADD CONSTRAINT c EXPECT (k < 9)")
    with pytest.raises(Error, match='constraint "zz" of relation "t" does not exist'):
        conn.execute("ALTER TABLE t DROP CONSTRAINT zz")
    assert "skipping" in conn.execute("ALTER TABLE t DROP CONSTRAINT IF EXISTS zz").notices[0]
    # A table constraint mzflow does not enforce is refused, never silently ignored.
    with pytest.raises(Error, match="CHECK constraints are not supported"):
        conn.execute("CREATE TABLE u (k int, CONSTRAINT c CHECK (k > 0))")


def test_expectations_are_listed(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, s text, CONSTRAINT pos EXPECT (k > 0) ON VIOLATION "
                 "QUARANTINE, CONSTRAINT u EXPECT expect_column_values_to_be_unique "
                 "(column => 'k') ON VIOLATION FAIL)")
    shown = conn.execute("SHOW CONSTRAINTS FROM t").rows
    assert shown == [("t", "pos", "sql", "(k > 0)", "QUARANTINE"),
                     ("t", "u", "ge", "expect_column_values_to_be_unique (column => 'k')",
                      "FAIL")]
    create = conn.execute("SHOW CREATE TABLE t").rows[0][1]
    assert "CONSTRAINT pos EXPECT (k > 0) ON VIOLATION QUARANTINE" in create, create
    assert "EXPECT expect_column_values_to_be_unique (column => 'k') ON VIOLATION FAIL" in create
    listed = conn.execute("SELECT name, kind, action FROM mz_expectations ORDER BY name").rows
    assert listed == [("pos", "sql", "QUARANTINE"), ("u", "ge", "FAIL")]
    # The QUARANTINE expectation made the quarantine table, with three more columns.
    columns = [r[0] for r in conn.execute("SHOW COLUMNS FROM t_quarantine").rows]
    assert columns == ["k", "s", "_mz_expectations", "_mz_quarantined_at", "_mz_statement"]
    conn.execute("ALTER TABLE t DROP CONSTRAINT pos")
    assert [r[1] for r in conn.execute("SHOW CONSTRAINTS").rows] == ["u"]


ROWS = [(1, "apple", 2.5), (-2, "avocado", 1.0), (3, None, -1.0), (None, "berry", 4.0),
        (5, "banana", None), (-6, "cherry", -3.0), (7, "apricot", 0.0), (8, "banana", 0.5)]
CONDITION = "k > 0 AND (s LIKE 'a%' OR n >= 1)"


def _values(rows: list[tuple[Any, ...]]) -> str:
    def lit(v: Any) -> str:
        return "NULL" if v is None else repr(v) if isinstance(v, str) else str(v)
    return ", ".join(f"({', '.join(lit(v) for v in r)})" for r in rows)


def _oracle(rows: list[tuple[Any, ...]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows the condition does not reject, rows it rejects), by DuckDB: as in a CHECK
    constraint, NULL passes."""
    data = pa.table({"k": pa.array([r[0] for r in rows], pa.int32()),
                     "s": pa.array([r[1] for r in rows], pa.string()),
                     "n": pa.array([r[2] for r in rows], pa.float64())})
    db = duckdb.connect()
    db.register("b", data)
    keep = db.execute(f"SELECT k, s, n FROM b WHERE ({CONDITION}) IS NOT FALSE").fetchall()
    drop = db.execute(f"SELECT k, s, n FROM b WHERE ({CONDITION}) IS FALSE").fetchall()

    def norm(rs: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        out = [{"k": k, "s": s, "n": None if n is None else round(float(n), 2)}
               for k, s, n in rs]
        return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))
    return norm(keep), norm(drop)


def _norm(rows: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    out = [{"k": r["k"], "s": r["s"], "n": None if r["n"] is None else float(r["n"]),
            **{e: r[e] for e in extra}} for r in rows]
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


@pytest.mark.parametrize("action", ["WARN", "DROP ROW", "QUARANTINE"])
def test_each_action_commits_what_duckdb_says(conn: mzflow.Connection, action: str) -> None:
    conn.execute(f"CREATE TABLE t (k int, s text, n numeric(8,2), CONSTRAINT good EXPECT "
                 f"({CONDITION}) ON VIOLATION {action})")
    result = conn.execute(f"INSERT INTO t VALUES {_values(ROWS)}")
    keep, reject = _oracle(ROWS)
    assert len(reject) == 3  # the test's rows do exercise the action
    everything = sorted(keep + reject, key=lambda r: json.dumps(r, sort_keys=True))
    assert _norm(rows_of(conn, "t")) == (everything if action == "WARN" else keep)
    assert result.status == f"INSERT 0 {len(everything) if action == 'WARN' else len(keep)}"
    assert f"3 of 8 rows failed ({action})" in result.notices[0]
    if action == "QUARANTINE":
        bad = rows_of(conn, "t_quarantine")
        assert _norm(bad) == reject
        assert {r["_mz_expectations"] for r in bad} == {"good"}
        assert {r["_mz_statement"] for r in bad} == {"INSERT"}
        assert all(r["_mz_quarantined_at"] > 0 for r in bad)
    results = conn.execute("SELECT expectation, statement, rows_evaluated, unexpected, "
                           "action, outcome FROM mz_expectation_results").rows
    assert results == [("good", "INSERT", 8, 3, action, action)]


def test_fail_rejects_the_statement_and_names_a_row(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, s text, n numeric(8,2), CONSTRAINT good EXPECT "
                 f"({CONDITION}) ON VIOLATION FAIL)")
    conn.execute("INSERT INTO t VALUES (1, 'apple', 2.5)")
    before = rows_of(conn, "t")
    with pytest.raises(Error) as err:
        conn.execute(f"INSERT INTO t VALUES {_values(ROWS)}")
    assert err.value.code == "23514"
    assert str(err.value).startswith('new row for relation "t" violates expectation "good"')
    assert "Failing row contains (k=-2, s='avocado', n=Decimal('1.00'))" in err.value.detail
    assert "3 of 8 rows fail it" in err.value.detail
    assert rows_of(conn, "t") == before  # nothing written
    outcomes = conn.execute("SELECT unexpected, outcome FROM mz_expectation_results "
                            "ORDER BY occurred_at_ms").rows
    assert outcomes == [(0, "passed"), (3, "FAIL")]


def test_great_expectations_types_judge_the_batch(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, n numeric(8,2), "
                 "CONSTRAINT u EXPECT expect_column_values_to_be_unique (column => 'k') "
                 "ON VIOLATION QUARANTINE, "
                 "CONSTRAINT r EXPECT expect_column_values_to_be_between "
                 "(column => 'n', min_value => 0, max_value => 100) ON VIOLATION DROP ROW)")
    conn.execute("INSERT INTO t VALUES (1, 5), (2, 500), (2, 7), (3, -1), (4, NULL)")
    # k=2 twice: both quarantined (a bad row must not vanish, QUARANTINE wins over DROP
    # ROW for (2, 500)); n out of range: dropped; NULL n passes, as GE skips nulls.
    assert [(r["k"], r["n"]) for r in rows_of(conn, "t")] == [(1, 5), (4, None)]
    bad = rows_of(conn, "t_quarantine")
    assert sorted((r["k"], float(r["n"]), r["_mz_expectations"]) for r in bad) == [
        (2, 7.0, "u"), (2, 500.0, "u, r")]


def test_copy_and_update_are_validated(conn: mzflow.Connection, tmp_path: Path) -> None:
    conn.execute("CREATE TABLE t (k int, s text, n numeric(8,2), CONSTRAINT good EXPECT "
                 f"({CONDITION}) ON VIOLATION QUARANTINE)")
    csv = tmp_path / "rows.csv"
    csv.write_text("".join(",".join("" if v is None else str(v) for v in r) + "\n"
                           for r in ROWS))
    assert conn.execute(f"COPY t FROM '{csv}'").status == "COPY 5"
    keep, reject = _oracle(ROWS)
    assert _norm(rows_of(conn, "t")) == keep
    assert _norm(rows_of(conn, "t_quarantine")) == reject
    assert {r["_mz_statement"] for r in rows_of(conn, "t_quarantine")} == {"COPY"}


@pytest.mark.slow
@pytest.mark.spark
def test_update_failing_rows_keep_their_values_and_replay(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, s text, n numeric(8,2), CONSTRAINT good EXPECT "
                 f"({CONDITION}) ON VIOLATION QUARANTINE)")
    conn.execute(f"INSERT INTO t VALUES {_values(ROWS)}")
    # An UPDATE whose new values fail keeps the old row; the new values are quarantined.
    assert conn.execute("UPDATE t SET k = -k WHERE s = 'apple' OR s = 'banana'"
                        ).status == "UPDATE 0"
    keep, _ = _oracle(ROWS)
    assert _norm(rows_of(conn, "t")) == keep
    assert conn.execute("SELECT count(*) FROM t_quarantine WHERE _mz_statement = 'UPDATE'"
                        ).rows == [(2,)]
    # The quarantine round trip: fix the rows, replay them (validated again), remove them.
    first = conn.execute("SELECT max(_mz_quarantined_at) FROM t_quarantine WHERE "
                         "_mz_statement = 'INSERT'").rows[0][0]
    replay = ("INSERT INTO t SELECT abs(k), coalesce(s, 'a?'), abs(n) FROM t_quarantine "
              f"WHERE _mz_quarantined_at <= {first} AND _mz_statement = 'INSERT'")
    # (8, 'banana', 0.5) still fails after the fix: back to the quarantine it goes.
    assert conn.execute(replay).status == "INSERT 0 2"
    conn.execute(f"DELETE FROM t_quarantine WHERE _mz_quarantined_at <= {first} "
                 "AND _mz_statement = 'INSERT'")
    assert conn.execute("SELECT k, s FROM t WHERE k IN (2, 3, 6, 8) ORDER BY k").rows == [
        (2, "avocado"), (3, None), (6, "cherry")]
    assert conn.execute("SELECT k, s, _mz_statement FROM t_quarantine ORDER BY k").rows == [
        (-5, "banana", "UPDATE"), (-1, "apple", "UPDATE"), (8, "banana", "INSERT")]
    # What DuckDB says of the table as it stands: no row the condition rejects.
    left = [(r["k"], r["s"], None if r["n"] is None else float(r["n"]))
            for r in rows_of(conn, "t")]
    assert _oracle(left)[1] == []
    assert len(left) == 7


def test_a_retried_write_does_not_quarantine_twice(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, CONSTRAINT pos EXPECT (k > 0) ON VIOLATION "
                 "QUARANTINE)")
    for _ in range(2):
        conn.execute("INSERT INTO t VALUES (1), (-1), (2)", idempotency_key=("job-7", 1))
    assert [r["k"] for r in rows_of(conn, "t")] == [1, 2]
    assert [r["k"] for r in rows_of(conn, "t_quarantine")] == [-1]
    # All rows failing: only the quarantine commits.
    assert conn.execute("INSERT INTO t VALUES (-5)").status == "INSERT 0 0"
    assert sorted(r["k"] for r in rows_of(conn, "t_quarantine")) == [-5, -1]
    # All rows dropped: nothing commits, and the validation is still recorded.
    conn.execute("ALTER TABLE t ADD CONSTRAINT small EXPECT (k < 100) ON VIOLATION DROP ROW")
    assert conn.execute("INSERT INTO t VALUES (500)").status == "INSERT 0 0"
    assert conn.execute("SELECT expectation, unexpected, outcome FROM mz_expectation_results "
                        "WHERE expectation = 'small'").rows == [("small", 1, "DROP ROW")]


CHILD = r"""
import os, signal, sys
import mzflow
from mzflow.quality import quarantine as quality

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

real_stage = quality.stage
def stage_then_die(*args, **kwargs):
    real_stage(*args, **kwargs)
    die()

if sys.argv[2] == "before-table":
    quality.stage = stage_then_die  # staged, the table not committed
else:
    quality.commit = die  # the table committed, the quarantine not
with mzflow.connect(sys.argv[1]) as conn:
    conn.execute("INSERT INTO t VALUES (10), (-10), (11)")
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["before-table", "after-table"])
def test_a_writer_killed_mid_statement_leaves_both_or_neither(tmp_path: Path,
                                                              where: str) -> None:
    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE t (k int, CONSTRAINT pos EXPECT (k > 0) ON VIOLATION "
                     "QUARANTINE)")
        conn.execute("INSERT INTO t VALUES (1), (-1)")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(home), where],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    pending = list((home / "warehouse" / "_pending").glob("*.arrow"))
    assert len(pending) == 1  # the staged rows survived the kill
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE other (x int)")  # any write lock recovers first
        assert not list((home / "warehouse" / "_pending").glob("*.arrow"))
        table = sorted(r["k"] for r in rows_of(conn, "t"))
        quarantine = sorted(r["k"] for r in rows_of(conn, "t_quarantine"))
        if where == "before-table":
            assert (table, quarantine) == ([1], [-1])
        else:
            assert (table, quarantine) == ([1, 10, 11], [-10, -1])
        # The table's next write adopts what the killed writer committed, once.
        conn.execute("INSERT INTO t VALUES (2), (-2)")
        assert len(rows_of(conn, "t_quarantine")) == len(quarantine) + 1
    assert os.path.exists(home)


# -- maintained views: a tick's changed rows ------------------------------------------------


def test_a_view_expectation_is_checked(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, v int)")
    with pytest.raises(Error, match="ON VIOLATION DROP ROW on a materialized view needs a "
                                    "SQL condition"):
        conn.execute("CREATE MATERIALIZED VIEW m WITH (EXPECT u "
                     "expect_column_values_to_be_unique (column => 'k') ON VIOLATION "
                     "DROP ROW) AS SELECT k, sum(v) AS total FROM t GROUP BY k")
    with pytest.raises(UnknownColumn):
        conn.execute("CREATE MATERIALIZED VIEW m WITH (EXPECT pos (v > 0)) AS "
                     "SELECT k, sum(v) AS total FROM t GROUP BY k")
    assert conn.store.snapshot().find("m") is None  # nothing of it was kept
    conn.execute("CREATE MATERIALIZED VIEW m WITH (EXPECT pos (total > 0) ON VIOLATION FAIL, "
                 "RETAIN HISTORY FOR '1h') AS SELECT k, sum(v) AS total FROM t GROUP BY k")
    assert conn.execute("SHOW CONSTRAINTS FROM m").rows == [
        ("m", "pos", "sql", "(total > 0)", "FAIL")]
    assert "EXPECT pos (total > 0) ON VIOLATION FAIL" in conn.execute(
        "SHOW CREATE MATERIALIZED VIEW m").rows[0][1]
    conn.execute("CREATE MATERIALIZED VIEW q WITH (EXPECT pos (total > 0) ON VIOLATION "
                 "QUARANTINE) AS SELECT k, sum(v) AS total FROM t GROUP BY k")
    assert [c[0] for c in conn.execute("SHOW COLUMNS FROM q_quarantine").rows] == [
        "k", "total", "_mz_expectations", "_mz_quarantined_at", "_mz_statement"]


def _totals(rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, v int)")
    if rows:
        db.executemany("INSERT INTO t VALUES (?, ?)", rows)
    return [tuple(r) for r in db.execute(
        "SELECT k, CAST(sum(v) AS BIGINT) FROM t GROUP BY k ORDER BY k").fetchall()]


@pytest.mark.slow
@pytest.mark.spark
def test_view_expectations_judge_only_the_rows_a_tick_changes(
        conn: mzflow.Connection) -> None:
    from mzflow.quality.validate import ExpectationFailed

    conn.execute("CREATE TABLE t (k int, v int)")
    conn.execute("CREATE MATERIALIZED VIEW warned WITH (EXPECT pos (total > 0)) AS "
                 "SELECT k, sum(v) AS total FROM t GROUP BY k")
    conn.execute("CREATE MATERIALIZED VIEW strict WITH (EXPECT pos (total > 0) ON VIOLATION "
                 "FAIL) AS SELECT k, sum(v) AS total FROM t GROUP BY k")
    rows = [(k, 1 + k % 7) for k in range(200)] + [(k, 2) for k in range(0, 200, 3)]
    conn.execute(f"INSERT INTO t VALUES {_values(rows)}")
    conn.tick()
    results = "SELECT object_id, rows_evaluated, unexpected, outcome FROM " \
              "mz_expectation_results ORDER BY occurred_at_ms, object_id"
    assert [r[1:] for r in conn.execute(results).rows] == [(200, 0, "passed")] * 2
    # Three groups change, one of them turns negative: three rows are judged, not 200.
    batch = [(1, 1), (2, -1000), (3, 1)]
    conn.execute(f"INSERT INTO t VALUES {_values(batch)}")
    with pytest.raises(ExpectationFailed) as err:
        conn.tick(object="strict")
    assert 'violates expectation "pos"' in str(err.value)
    assert "Failing row contains (k=2, total=-997)" in err.value.detail
    conn.tick(object="warned")
    latest = conn.execute(results).rows[-2:]
    assert sorted(r[1:] for r in latest) == [(3, 1, "FAIL"), (3, 1, "WARN")]
    conn.execute("SET cluster = default")
    assert conn.execute("SELECT k, total FROM warned ORDER BY k").rows == _totals(rows + batch)
    # The failed tick committed nothing; once the data is fixed, it goes through.
    conn.execute("DELETE FROM t WHERE v = -1000")
    report = conn.tick(object="strict")[0]
    assert report.error is None
    assert conn.execute("SELECT k, total FROM strict ORDER BY k").rows == _totals(
        rows + [(1, 1), (3, 1)])
    assert conn.execute(results).rows[-1][1:] == (2, 0, "passed")


def test_a_great_expectations_suite_file_is_attached(conn: mzflow.Connection,
                                                     tmp_path: Path) -> None:
    conn.execute("CREATE TABLE t (k int, n numeric(8,2))")
    suite = {"name": "orders", "expectations": [
        {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "k"},
         "meta": {"name": "unique_k", "on_violation": "QUARANTINE"}},
        {"type": "expect_column_values_to_be_between",
         "kwargs": {"column": "n", "min_value": 0, "max_value": 10}},
    ]}
    path = tmp_path / "orders.json"
    path.write_text(json.dumps(suite))
    notice = conn.execute(f"ALTER TABLE t SET (EXPECTATION SUITE = '{path}')").notices[0]
    assert notice == '2 expectations of suite "orders" attached to "t"'
    assert [(r[1], r[4]) for r in conn.execute("SHOW CONSTRAINTS FROM t").rows] == [
        ("orders:unique_k", "QUARANTINE"), ("orders:2", "WARN")]
    result = conn.execute("INSERT INTO t VALUES (1, 5), (1, 6), (2, 50)")
    assert result.status == "INSERT 0 1"
    assert [(r["k"], float(r["n"])) for r in rows_of(conn, "t")] == [(2, 50.0)]
    assert sorted(r["k"] for r in rows_of(conn, "t_quarantine")) == [1, 1]
    # Setting the suite again replaces what it attached.
    suite["expectations"] = suite["expectations"][1:]
    path.write_text(json.dumps(suite))
    conn.execute(f"ALTER TABLE t SET (EXPECTATION SUITE = '{path}')")
    assert [r[1] for r in conn.execute("SHOW CONSTRAINTS FROM t").rows] == ["orders:1"]
    # Bad files: each says what is wrong, and attaches nothing.
    bad = tmp_path / "bad.json"
    cases = [
        (tmp_path / "missing.json", None, "cannot read expectation suite"),
        (bad, '{"name": "x",\n "expectations": [}', "is not JSON: .* at line 2, column 19"),
        (bad, '{"name": "x"}', 'has no "expectations" list'),
        (bad, '{"expectations": [{"type": "expect_nothing", "kwargs": {}}]}',
         'unknown expectation type "expect_nothing"'),
        (bad, '{"expectations": [{"type": "expect_column_values_to_be_unique", '
              '"kwargs": {"column": "zz"}}]}', 'column "zz"'),
    ]
    for file, text, words in cases:
        if text is not None:
            file.write_text(text)
        with pytest.raises(Error, match=words):
            conn.execute(f"ALTER TABLE t SET (EXPECTATION SUITE = '{file}')")
    assert [r[1] for r in conn.execute("SHOW CONSTRAINTS FROM t").rows] == ["orders:1"]


def test_data_docs_show_each_validated_batch(conn: mzflow.Connection) -> None:
    from mzflow.quality import docs as quality

    conn.execute("CREATE TABLE t (k int, CONSTRAINT pos EXPECT (k > 0) ON VIOLATION "
                 "QUARANTINE, CONSTRAINT u EXPECT expect_column_values_to_be_unique "
                 "(column => 'k'))")
    conn.execute("INSERT INTO t VALUES (1), (-1), (2)")
    conn.execute("INSERT INTO t VALUES (3), (3)")
    runs = conn.store.expectation_runs()
    assert [r[2] for r in runs] == ["INSERT", "INSERT"]
    index = quality.build_docs(conn.store.snapshot(), runs, conn.config.home / "quality")
    assert index.is_file()
    site = index.parent
    pages = sorted(p.relative_to(site).as_posix() for p in site.glob("validations/**/*.html"))
    assert len(pages) == 2 and all(p.startswith("validations/t/INSERT/") for p in pages)
    failed = [p for p in site.glob("validations/**/*.html") if "pos: (k &gt; 0)" in p.read_text()
              or "pos: (k > 0)" in p.read_text()]
    assert len(failed) == 2  # the SQL condition is named on both pages
    assert (site / "expectations" / "t.html").is_file()


def test_two_quarantine_expectations_share_one_quarantine(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, s text, CONSTRAINT pos EXPECT (k > 0) ON VIOLATION "
                 "QUARANTINE, CONSTRAINT named EXPECT (s IS NOT NULL) ON VIOLATION QUARANTINE)")
    conn.execute("INSERT INTO t VALUES (1, 'a'), (-1, 'b'), (2, NULL), (-3, NULL)")
    bad = sorted((r["k"], r["_mz_expectations"]) for r in rows_of(conn, "t_quarantine"))
    assert bad == [(-3, "pos, named"), (-1, "pos"), (2, "named")]


def test_a_quarantine_gains_the_columns_its_table_gains(conn: mzflow.Connection) -> None:
    conn.execute("CREATE TABLE t (k int, CONSTRAINT pos EXPECT (k > 0) ON VIOLATION "
                 "QUARANTINE)")
    conn.execute("INSERT INTO t VALUES (-1)")
    conn.execute("ALTER TABLE t ADD COLUMN note text")
    columns = [r[0] for r in conn.execute("SHOW COLUMNS FROM t_quarantine").rows]
    assert columns == ["k", "_mz_expectations", "_mz_quarantined_at", "_mz_statement", "note"]
    conn.execute("INSERT INTO t VALUES (-2, 'late'), (3, 'ok')")
    bad = sorted((r["k"], r["note"]) for r in rows_of(conn, "t_quarantine"))
    assert bad == [(-2, "late"), (-1, None)]
    # Adding another QUARANTINE expectation reuses it.
    conn.execute("ALTER TABLE t ADD CONSTRAINT noted EXPECT (note <> '') ON VIOLATION "
                 "QUARANTINE")
    assert conn.execute("SELECT count(*) FROM mz_tables WHERE name = 't_quarantine'"
                        ).rows == [(1,)]


# -- DROP ROW and QUARANTINE on a maintained view ---------------------------------------------

VIEW = "SELECT k, sum(v) AS total FROM t GROUP BY k"


def _view_oracle(rows: list[tuple[int, int | None]]) -> list[tuple[Any, ...]]:
    """The view's rows by DuckDB: those its two expectations let through (NULL passes)."""
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, v int)")
    if rows:
        db.executemany("INSERT INTO t VALUES (?, ?)", rows)
    return [tuple(r) for r in db.execute(
        f"SELECT k, CAST(total AS BIGINT) FROM ({VIEW}) WHERE coalesce(total > 0, true) "
        "AND coalesce(total < 100, true) ORDER BY k").fetchall()]


def _all_groups(rows: list[tuple[int, int | None]]) -> set[tuple[Any, ...]]:
    db = duckdb.connect()
    db.execute("CREATE TABLE t (k int, v int)")
    if rows:
        db.executemany("INSERT INTO t VALUES (?, ?)", rows)
    return {tuple(r) for r in db.execute(
        f"SELECT k, CAST(total AS BIGINT) FROM ({VIEW})").fetchall()}


@pytest.mark.slow
@pytest.mark.spark
def test_view_drop_row_and_quarantine_agree_with_duckdb(conn: mzflow.Connection) -> None:
    """Random writes and ticks. Each read path (the index, a recompute from another
    cluster, a view over the view) leaves out exactly the failing rows, and each tick
    quarantines exactly the rows it adds that fail the QUARANTINE expectation."""
    import random

    rng = random.Random(17)
    conn.execute("CREATE TABLE t (k int, v int)")
    conn.execute("CREATE MATERIALIZED VIEW m WITH (EXPECT pos (total > 0) ON VIOLATION "
                 f"QUARANTINE, EXPECT small (total < 100) ON VIOLATION DROP ROW) AS {VIEW}")
    conn.execute("CREATE VIEW above AS SELECT count(*) AS n, sum(total) AS s FROM m")
    conn.execute("CREATE CLUSTER elsewhere (SIZE = 'xsmall')")
    data: list[tuple[int, int | None]] = []
    expected_quarantine: list[tuple[Any, ...]] = []
    for round_ in range(6):
        before = _all_groups(data)
        batch = [(rng.randrange(8), rng.choice([None, -40, -3, 5, 30, 70]))
                 for _ in range(rng.randrange(1, 6))]
        conn.execute(f"INSERT INTO t VALUES {_values(batch)}")
        data += batch
        if round_ % 2:
            k = rng.randrange(8)
            conn.execute(f"DELETE FROM t WHERE k = {k}")
            data = [r for r in data if r[0] != k]
        conn.tick(object="m")
        want = _view_oracle(data)
        conn.execute("SET cluster = default")  # served by m's index
        assert conn.execute("SELECT k, total FROM m ORDER BY k").rows == want, round_
        conn.execute("SET cluster = elsewhere")  # the definition, recomputed
        assert conn.execute("SELECT k, total FROM m ORDER BY k").rows == want, round_
        n, total = conn.execute("SELECT n, s FROM above").rows[0]
        assert (n, total) == (len(want), sum(r[1] for r in want if r[1] is not None)
                              if any(r[1] is not None for r in want) else None), round_
        expected_quarantine += sorted(g for g in _all_groups(data) - before
                                      if g[1] is not None and g[1] <= 0)
        got = conn.execute("SELECT k, total, _mz_expectations FROM m_quarantine").rows
        assert sorted(r[:2] for r in got) == sorted(expected_quarantine), round_
        assert {r[2] for r in got} <= {"pos"}
    assert expected_quarantine  # the seed made some rows fail
    results = conn.execute("SELECT expectation, action, sum(unexpected) FROM "
                           "mz_expectation_results GROUP BY 1, 2 ORDER BY 1").rows
    assert [r[:2] for r in results] == [("pos", "QUARANTINE"), ("small", "DROP ROW")]
    # The quarantine is a table: fixed rows can be deleted from it like any other.
    conn.execute("DELETE FROM m_quarantine WHERE total < -10")
    assert all(r[0] >= -10 for r in conn.execute("SELECT total FROM m_quarantine").rows)


VIEW_CHILD = r"""
import os, signal, sys
import mzflow
from mzflow.quality import quarantine as quality

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

real_stage = quality.stage_tick
def stage_then_die(*args, **kwargs):
    real_stage(*args, **kwargs)
    die()

if sys.argv[2] == "before-index":
    quality.stage_tick = stage_then_die  # staged, the index not committed
else:
    quality.finish_tick = die  # the index committed, the quarantine not
with mzflow.connect(sys.argv[1]) as conn:
    conn.execute("INSERT INTO t VALUES (2, -5), (3, 4)")
    conn.tick(object="m")
"""


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("where", ["before-index", "after-index"])
def test_a_tick_killed_between_index_and_quarantine_quarantines_once(
        tmp_path: Path, where: str) -> None:
    home = tmp_path / "home"
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE t (k int, v int)")
        conn.execute("CREATE MATERIALIZED VIEW m WITH (EXPECT pos (total > 0) ON VIOLATION "
                     f"QUARANTINE) AS {VIEW}")
        conn.execute("INSERT INTO t VALUES (1, -1), (2, 1)")
        conn.tick(object="m")
        assert conn.execute("SELECT k, total FROM m_quarantine").rows == [(1, -1)]
    proc = subprocess.run([sys.executable, "-c", VIEW_CHILD, str(home), where],
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    pending = home / "warehouse" / "_pending"
    assert len(list(pending.glob("tick-quarantine-*.arrow"))) == 1
    with mzflow.connect(str(home)) as conn:
        conn.execute("CREATE TABLE other (x int)")  # a table write's recovery leaves it
        assert len(list(pending.glob("tick-quarantine-*.arrow"))) == 1
        conn.tick(object="m")
        conn.tick(object="m")
        assert not list(pending.glob("tick-quarantine-*.arrow"))
        assert sorted(conn.execute("SELECT k, total FROM m_quarantine").rows) == [
            (1, -1), (2, -4)]
        conn.execute("SET cluster = default")
        assert conn.execute("SELECT k, total FROM m ORDER BY k").rows == [(3, 4)]
