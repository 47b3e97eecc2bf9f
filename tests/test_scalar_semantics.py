"""Scalar expressions give PostgreSQL's answer on both engines (issue 32).

Each query of the issue's table runs three ways: on PostgreSQL itself (the oracle,
the ``pg_url`` fixture), in process (a constant SELECT: ``engine/arrow_constants.py``
and ``arrow_expr``, never sqlglot's Python executor), and on Spark (the same
expression over the columns of a one-row table). Values, type names and SQLSTATEs
must agree; nothing here is a hard-coded answer. Where an engine cannot agree, it
must refuse by name (``REFUSED``), never answer differently.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from scalar_oracle import Outcome, agree, describe, in_process, on_spark, pg_outcomes

import mzflow
from mzflow_dev import pg_server

psycopg2 = pytest.importorskip("psycopg2")
sa = pytest.importorskip("sqlalchemy")

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.postgres]

TABLE = ("CREATE TABLE one (n numeric(10,1), a numeric(10,1), b numeric(10,1), h text, "
         "bt boolean, bf boolean, s text, ni integer, x text, i30 integer, im2 integer, "
         "hello text, d date, tz timestamptz, tstext text)")
ROW = ("INSERT INTO one VALUES (7.5, -16.3, 4.1, '.5', true, false, 'bar', NULL, 'x', 30, "
       "-2, 'hello', '2000-01-01', '1997-02-03 11:12:59.9+00', '2020-01-01 1:2:3.789')")

# (id, the constant query's expression, the same over one's columns, the function Spark
# refuses by name instead of answering)
CASES: list[tuple[str, str, str, str | None]] = [
    ("numeric_to_bigint_rounds", "7.5::int8", "n::int8", None),
    ("negative_numeric_to_int_rounds", "(-7.5)::int4", "(-n)::int4", None),
    ("numeric_remainder_sign", "-16.3 % 4.1", "a % b", None),
    ("exp_of_numeric", "exp('.5'::numeric)", "exp(h::numeric)", "exp"),
    ("concat_of_booleans", "concat(true, false, 'function')", "concat(bt, bf, 'function')",
     None),
    ("boolean_concatenation_operator", "true || 'x'", "bt || 'x'", None),
    ("substr_of_nulls", "substr('bar', NULL, NULL)", "substr(s, ni, ni)", None),
    ("substr_negative_length", "substr('x', 30, -2)", "substr(x, i30, im2)", None),
    ("substr_before_the_start", "substr('bar', -1, 3)", "substr(s, -1, 3)", None),
    # Found by the differential test: right() past the text's length kept only part of it.
    ("right_past_the_length", "right('bar', 5) || left('bar', 5)", "right(s, 5) || left(s, 5)",
     None),
    # Found by the differential test: a NULL text was refused for the length asked.
    ("pad_of_null_past_the_limit", "lpad(NULL::text, 300000000, 'x')",
     "lpad(ni::text, 300000000, s)", None),
    # Found by the differential test (seed 0): Spark's bround lost the sign of -0.
    ("round_of_a_negative_fraction_is_negative_zero", "round((-0.375)::float8)",
     "round((-n / 20)::float8)", None),
    ("bytea_to_text", "'hello'::bytea::text", "hello::bytea::text", None),
    ("date_plus_interval", "DATE '2000-01-01' + INTERVAL '1' YEAR", "d + INTERVAL '1' YEAR",
     None),
    ("to_char_milliseconds",
     "to_char(TIMESTAMPTZ '1997-02-03 11:12:59.9', 'YYYY-MM-DD HH24:MI:SS.MS TZ')",
     "to_char(tz, 'YYYY-MM-DD HH24:MI:SS.MS TZ')", None),
    ("to_char_names", "to_char(DATE '2000-01-01', 'FMMonth Day DD Dy mon TZ HH12 am')",
     "to_char(d, 'FMMonth Day DD Dy mon TZ HH12 am')", None),
    ("timestamp_one_digit_fields", "TIMESTAMP '2020-01-01 1:2:3.789'", "tstext::timestamp",
     None),
    # pgjdbc's getSQLKeywords: ALL of an array was read as a function named all, and an
    # array literal's text reached Spark, which cannot cast it.
    ("all_of_an_array_literal", "'bar' <> ALL ('{x, \"b a\",NULL}'::text[])",
     "s <> ALL ('{x, \"b a\",NULL}'::text[])", None),
    ("all_of_an_array_is_false", "30 > ALL (ARRAY[1, 30, NULL])",
     "i30 > ALL (ARRAY[1, i30, ni])", None),
    ("any_of_an_array_literal", "'x' = ANY ('{y,x}'::text[])", "x = ANY ('{y,x}'::text[])",
     None),
]


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    with pg_server.cursor(pg_url, "SET TIME ZONE 'UTC'", "DROP TABLE IF EXISTS one", TABLE,
                          ROW) as cur:
        yield cur


@pytest.fixture(scope="module")
def mz() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-scalar-") as home, \
            mzflow.connect(home) as conn:
        conn.execute(TABLE)
        conn.execute(ROW)
        yield conn


@pytest.mark.parametrize(("constant", "over_columns", "refused"),
                         [pytest.param(c, t, r, id=i) for i, c, t, r in CASES])
def test_postgresql_answer_in_process_and_on_spark(pg: Any, mz: mzflow.Connection,
                                                   constant: str, over_columns: str,
                                                   refused: str | None) -> None:
    [want] = pg_outcomes(pg, f"SELECT {constant}")
    [want_rows] = pg_outcomes(pg, f"SELECT {over_columns} FROM one")
    assert agree(want_rows, want), "the two forms differ on PostgreSQL itself"
    [here] = in_process(mz, f"SELECT {constant}")
    [session] = on_spark(mz, f"SELECT {constant}")  # the user's path: in process too
    [spark] = on_spark(mz, f"SELECT {over_columns} FROM one")
    report = describe(constant, [("postgres", want), ("in process", here),
                                 ("session", session), ("spark", spark)])
    assert agree(here, want), report
    assert agree(session, want), report
    if refused is not None:
        assert spark.code == "0A000" and refused in spark.message, report
    else:
        assert agree(spark, want), report


@pytest.mark.parametrize("values", ["(99999999999, 1, 1)", "(1, 40000, 1)",
                                    "('99999999999', 1, 1)", "(1, 1, 99999999999999999999)",
                                    "(1, 1, 1), (2, 2, 2), (3000000000, 3, 3)"])
def test_an_integer_out_of_range_fails_as_in_postgresql(pg: Any, mz: mzflow.Connection,
                                                        values: str) -> None:
    """Arrow's own words reached the user (``Value … too large to fit in C integer
    type``); PostgreSQL's message and SQLSTATE now."""
    ddl = "CREATE TABLE narrow (i integer, s smallint, b bigint)"
    pg.execute("DROP TABLE IF EXISTS narrow")
    pg.execute(ddl)
    mz.execute("DROP TABLE IF EXISTS narrow")
    mz.execute(ddl)
    with pytest.raises(psycopg2.Error) as theirs:
        pg.execute(f"INSERT INTO narrow VALUES {values}")
    with pytest.raises(mzflow.Error) as mine:
        mz.execute(f"INSERT INTO narrow VALUES {values}")
    assert (mine.value.code, mine.value.message) == (
        theirs.value.pgcode, theirs.value.diag.message_primary)


def test_insert_values_convert_as_postgresql(pg: Any, mz: mzflow.Connection) -> None:
    """INSERT … VALUES evaluates its constants in process (plan/constants.py): a cast
    in it, and the column's own assignment conversion, as PostgreSQL does them."""
    ddl = "CREATE TABLE ins (b bigint, i integer, ts timestamp, bo boolean)"
    rows = ["(7.5::int8, 2.5, '2020-01-01 1:2:3.789', 'yes')", "(7.5, -2.5::int4, "
            "TIMESTAMP '2020-1-2 3:04:05', 'of')", "(-7.5, 3.5::float8, NULL, NULL)"]
    pg.execute("DROP TABLE IF EXISTS ins")
    pg.execute(ddl)
    mz.execute(ddl)
    for row in rows:
        pg.execute(f"INSERT INTO ins VALUES {row}")
        mz.execute(f"INSERT INTO ins VALUES {row}")
    pg.execute("SELECT * FROM ins ORDER BY b, i")
    want = pg.fetchall()
    assert mz.execute("SELECT * FROM ins ORDER BY b, i").rows == want


@pytest.mark.parametrize("bad", ["'7.5'", "'2020-01-01 25:00'", "'maybe'"])
def test_insert_values_reject_as_postgresql(pg: Any, mz: mzflow.Connection,
                                            bad: str) -> None:
    column = {"'7.5'": "bigint", "'maybe'": "boolean"}.get(bad, "timestamp")
    pg.execute("DROP TABLE IF EXISTS rej")
    pg.execute(f"CREATE TABLE rej (c {column})")
    mz.execute("DROP TABLE IF EXISTS rej")
    mz.execute(f"CREATE TABLE rej (c {column})")
    [want] = pg_outcomes(pg, f"INSERT INTO rej VALUES ({bad}) RETURNING c")
    with pytest.raises(mzflow.Error) as info:
        mz.execute(f"INSERT INTO rej VALUES ({bad})")
    assert want.code is not None and info.value.code == want.code, (want, info.value)


def test_numeric_sum_past_38_digits_is_an_error_never_null(pg: Any,
                                                           mz: mzflow.Connection) -> None:
    """PostgreSQL's numeric has no such limit; Delta and Spark keep 38 digits. A sum
    that needs more must fail with 22003 on every path (plain read, maintained view,
    projection), never come back as NULL or a wrong number."""
    big = "9" * 38
    ddl = "CREATE TABLE big (g integer, n numeric(38,0))"
    pg.execute("DROP TABLE IF EXISTS big")
    pg.execute(ddl)
    pg.execute(f"INSERT INTO big VALUES (1, {big}), (1, {big})")
    [want] = pg_outcomes(pg, "SELECT sum(n) FROM big")
    assert want.code is None and len(str(want.value)) > 38  # PostgreSQL's exact answer
    mz.execute(ddl)
    mz.execute("CREATE CLUSTER sums SIZE 'xsmall'")
    mz.execute("CREATE MATERIALIZED VIEW kept IN CLUSTER sums AS "
               "SELECT g, sum(n) AS total FROM big GROUP BY g")
    mz.execute(f"INSERT INTO big VALUES (1, {big})")
    mz.tick()
    mz.execute(f"INSERT INTO big VALUES (1, {big})")  # the kept state's merge overflows
    reports = mz.tick()
    assert any("numeric field overflow" in (r.error or "") for r in reports)
    outcomes: list[Outcome] = [
        on_spark(mz, "SELECT sum(n) FROM big")[0],
        on_spark(mz, f"SELECT {big} + {big}")[0],
    ]
    mz.execute("SET cluster = sums")
    try:
        outcomes.append(on_spark(mz, "SELECT total FROM kept")[0])
    finally:
        mz.execute("RESET cluster")
    mz.execute("ALTER TABLE big ADD PROJECTION per_g AS SELECT g, sum(n) FROM big GROUP BY g")
    outcomes.append(on_spark(mz, "SELECT g, sum(n) FROM big GROUP BY g")[0])
    for got in outcomes:
        assert got.code is not None and "numeric field overflow" in got.message, got


@pytest.mark.parametrize("value", ["'NaN'", "'Infinity'", "'-Infinity'", "1.25"])
@pytest.mark.parametrize("target", ["numeric", "numeric(10,1)"])
def test_a_double_cast_to_numeric_is_postgresqls_or_refused(
        pg: Any, mz: mzflow.Connection, value: str, target: str) -> None:
    """PostgreSQL's numeric holds NaN and ±Infinity (unconstrained); a Delta decimal
    cannot, and Spark's cast made them NULL (found by the differential test). Each is
    PostgreSQL's answer, its error, or refused by name (0A000), never NULL."""
    ddl = "CREATE TABLE dbl (d double precision)"
    for conn in (pg, mz):
        conn.execute("DROP TABLE IF EXISTS dbl")
        conn.execute(ddl)
        conn.execute(f"INSERT INTO dbl VALUES ({value})")
    [want] = pg_outcomes(pg, f"SELECT d::{target} FROM dbl")
    [spark] = on_spark(mz, f"SELECT d::{target} FROM dbl")
    report = describe(f"{value}::{target}", [("postgres", want), ("spark", spark)])
    if want.code is None and not want.value.is_finite():
        assert spark.code == "0A000", report
    else:
        assert agree(spark, want), report
