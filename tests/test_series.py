"""generate_series: binding (names, types, PostgreSQL's errors), lowering to a FlatMap,
reads on Spark and maintained views, each against a real PostgreSQL.

The fast tests bind and lower against a catalog and start nothing. The oracle tests
run every query of a battery through mzflow and PostgreSQL (the ``pg_url`` fixture)
over the same rows and compare column names, type names and rows, or the SQLSTATE of
the error. The maintained-view test keeps several views through batches of inserts,
deletes and updates and compares each index with a full recompute and with PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlglot import exp

import mzflow
from mzflow.catalog.bind import bind
from mzflow.catalog.intervals import parse_interval
from mzflow.catalog.model import Snapshot
from mzflow.catalog.srf import series_type
from mzflow.incremental.plan import analyze
from mzflow.plan import ir
from mzflow.plan.lower import lower
from mzflow.plan.query import plan
from mzflow.sql import ast
from mzflow.sql.parse import parse_query
from mzflow_dev import pg_server

SCHEMA = "CREATE TABLE t (k int NOT NULL, n int, m bigint, x numeric(10,2), ts timestamp, d date)"
ROWS = ("INSERT INTO t VALUES (1, 2, 2, 1.50, '2020-01-31 10:00', '2020-02-28'), "
        "(2, 3, -1, 2.25, '2020-03-01', NULL), (3, NULL, NULL, NULL, NULL, NULL), "
        "(4, 0, 5, 0.10, '2021-12-31 23:59:59', '2024-02-29')")


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snapshot]:
    home: Path = tmp_path_factory.mktemp("series")
    with mzflow.connect(str(home)) as conn:
        conn.execute(SCHEMA)
        yield conn.store.snapshot()


def columns(snap: Snapshot, sql: str) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in bind(snap, parse_query(sql)).columns]


# -- parsing, intervals, resolution -------------------------------------------------------

def test_the_step_is_kept_as_written() -> None:
    # sqlglot's own builder turned a string step into an interval and failed (a raw
    # AssertionError) on one with two units.
    call = parse_query("SELECT generate_series(a, b, '1 day 2 hours')").selects[0]
    assert isinstance(call, ast.GenerateSeries)
    assert call.expressions[2] == exp.Literal.string("1 day 2 hours")


@pytest.mark.parametrize(("text", "unit", "parts"), [
    ("1 day", None, (0, 1, 0)),
    ("2 hours 30 minutes", None, (0, 0, 9_000_000_000)),
    ("1.5 days", None, (0, 1, 43_200_000_000)),
    ("-1 month", None, (-1, 0, 0)),
    ("1 year 2 mons", None, (14, 0, 0)),
    ("01:30:00", None, (0, 0, 5_400_000_000)),
    ("1 day 01:30", None, (0, 1, 5_400_000_000)),
    ("@ 1 hour ago", None, (0, 0, -3_600_000_000)),
    ("2", "DAY", (0, 2, 0)),
    ("1 week", None, (0, 7, 0)),
])
def test_interval_literals_read_as_postgresql_does(text: str, unit: str | None,
                                                   parts: tuple[int, int, int]) -> None:
    assert parse_interval(text, unit) == parts


@pytest.mark.parametrize("text", ["1-2", "1 fortnight", "P1D", "", "1.5 months"])
def test_interval_forms_not_read_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_interval(text)


@pytest.mark.parametrize(("types", "result"), [
    (["integer", "integer"], "integer"),
    (["integer", "unknown", "integer"], "integer"),
    (["smallint", "integer"], "integer"),
    (["integer", "bigint"], "bigint"),
    (["integer", "integer", "numeric(*,1)"], "numeric(*,1)"),
    (["numeric(10,2)", "numeric(*,5)"], "numeric(*,2)"),  # the stop's scale is not a value's
    (["timestamp without time zone", "unknown", "interval"], "timestamp without time zone"),
    (["timestamp without time zone", "date", "interval"], "timestamp without time zone"),
    (["timestamp without time zone", "timestamp with time zone", "interval"],
     "timestamp with time zone"),
    (["date", "date", "interval"], "timestamp with time zone"),
    (["unknown", "unknown", "interval"], "timestamp with time zone"),
])
def test_variants_resolve_as_postgresql_does(types: list[str], result: str) -> None:
    assert series_type(types) == result


# -- binding ------------------------------------------------------------------------------

@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT * FROM generate_series(1, 3)", [("generate_series", "integer")]),
    ("SELECT * FROM generate_series(1, 3) AS g", [("g", "integer")]),
    ("SELECT * FROM generate_series(1, 3) AS g(v)", [("v", "integer")]),
    ("SELECT g.v + 1 FROM generate_series(1, 3::int8) AS g(v)", [("?column?", "bigint")]),
    ("SELECT generate_series(1, 3)", [("generate_series", "integer")]),
    ("SELECT k, generate_series(1, n) FROM t", [("k", "integer"),
                                                 ("generate_series", "integer")]),
    ("SELECT generate_series(1, x, 0.5) FROM t", [("generate_series", "numeric(*,1)")]),
    ("SELECT t.k, g FROM t, generate_series(ts, ts, '1 hour') AS g",
     [("k", "integer"), ("g", "timestamp without time zone")]),
    ("SELECT g FROM t CROSS JOIN LATERAL generate_series(d, d, '1 day') AS g",
     [("g", "timestamp with time zone")]),
    ("SELECT * FROM t, ROWS FROM (generate_series(1, 2), generate_series(m, 3)) AS r(a, b)",
     [("k", "integer"), ("n", "integer"), ("m", "bigint"), ("x", "numeric(10,2)"),
      ("ts", "timestamp without time zone"), ("d", "date"), ("a", "integer"),
      ("b", "bigint")]),
])
def test_names_and_types(snap: Snapshot, sql: str, expected: list[tuple[str, str]]) -> None:
    assert columns(snap, sql) == expected


@pytest.mark.parametrize(("sql", "code", "message"), [
    ("SELECT generate_series(1, 2.5::float8)", "42883",
     "function generate_series(integer, double precision) does not exist"),
    ("SELECT generate_series(1)", "42883", "function generate_series(integer) does not exist"),
    ("SELECT generate_series('1', '3')", "42725",
     "function generate_series(unknown, unknown) is not unique"),
    ("SELECT generate_series(1::int2, 3::int2)", "42725", "is not unique"),
    ("SELECT generate_series(1, 3, interval '1 day')", "42883",
     "function generate_series(integer, integer, interval) does not exist"),
    ("SELECT k FROM t WHERE generate_series(1, 2) > 1", "0A000",
     "set-returning functions are not allowed in WHERE"),
    ("SELECT sum(generate_series(1, 3))", "0A000",
     "aggregate function calls cannot contain set-returning function calls"),
    ("SELECT CASE WHEN true THEN generate_series(1, 3) END", "0A000",
     "set-returning functions are not allowed in CASE"),
    ("SELECT coalesce(generate_series(1, 3), 1)", "0A000",
     "set-returning functions are not allowed in COALESCE"),
    ("SELECT 1 LIMIT generate_series(1, 2)", "0A000",
     "set-returning functions are not allowed in LIMIT"),
    ("SELECT * FROM t JOIN generate_series(1, 2) AS g ON g = generate_series(1, 2)", "0A000",
     "set-returning functions are not allowed in JOIN conditions"),
    ("SELECT * FROM generate_series(1, generate_series(1, 2))", "0A000",
     "set-returning functions must appear at top level of FROM"),
    ("SELECT * FROM generate_series(1, 3) AS g(a, b)", "42P10",
     'table "g" has 1 columns available but 2 columns specified'),
    ("SELECT * FROM generate_series(1, t.n), t", "42P01",
     'invalid reference to FROM-clause entry for table "t"'),
    # What mzflow does not support yet, refused by name:
    ("SELECT count(*), generate_series(1, 3) FROM t", "0A000",
     "generate_series in a SELECT list with GROUP BY, aggregates or window functions"),
    ("SELECT generate_series(1, generate_series(1, 3))", "0A000",
     "generate_series with a set-returning argument is not supported yet"),
    ("SELECT k FROM t ORDER BY generate_series(1, 2)", "0A000",
     "generate_series in ORDER BY is not supported yet"),
    ("SELECT * FROM generate_series(1, 3) WITH ORDINALITY", "0A000",
     "generate_series WITH ORDINALITY is not supported yet"),
    ("SELECT * FROM t RIGHT JOIN generate_series(1, 3) AS g ON true", "0A000",
     "generate_series on the right of a RIGHT JOIN is not supported yet"),
    ("SELECT generate_series(ts, ts, n * interval '1 day') FROM t", "0A000",
     "generate_series over timestamps needs a constant interval step"),
    ("SELECT generate_series(ts, ts, '1 month -1 day') FROM t", "0A000",
     'interval step "1 month -1 day" mixes positive and negative parts with months'),
    ("SELECT generate_series(ts, ts, '1 fortnight') FROM t", "0A000",
     'interval "1 fortnight" is not supported as a generate_series step yet'),
    ("SELECT generate_series(0, 1, 0.000000000000000000001)", "0A000",
     "generate_series over numerics with more than 20 decimal places is not supported yet"),
    ("SELECT * FROM unnest(ARRAY[1, 2])", "0A000",
     "table function unnest in FROM is not supported yet"),
    ("SELECT * FROM generate_subscripts(ARRAY[1], 1)", "0A000",
     "table function generate_subscripts in FROM is not supported yet"),
])
def test_errors(snap: Snapshot, sql: str, code: str, message: str) -> None:
    with pytest.raises(mzflow.Error) as info:
        bind(snap, parse_query(sql))
    assert (info.value.code, message in info.value.message) == (code, True), str(info.value)


# -- lowering -----------------------------------------------------------------------------

def lowered(snap: Snapshot, sql: str) -> ir.Node:
    return lower(snap, plan(snap, parse_query(sql)).query)


def flat_maps(root: ir.Node) -> list[ir.FlatMap]:
    return [n for n in root.walk() if isinstance(n, ir.FlatMap)]


def strategies(root: ir.Node) -> dict[str, str]:
    return {type(n).__name__ + ("" if n.inputs else "0"): s.describe()
            for n, s in analyze(root)[2]}


@pytest.mark.parametrize("sql", [
    "SELECT t.k, g FROM t, generate_series(1, t.n) AS g",
    "SELECT t.k, g FROM t CROSS JOIN LATERAL generate_series(1, t.n) AS g",
    "SELECT t.k, g FROM t JOIN generate_series(1, n) AS g ON true",
    "SELECT k, generate_series(1, n) AS g FROM t",
])
def test_a_series_over_a_column_is_a_flat_map_over_its_left(snap: Snapshot, sql: str) -> None:
    root = lowered(snap, sql)
    (fm,) = flat_maps(root)
    assert isinstance(fm.input, ir.Get) and fm.input.name == "materialize.public.t"
    assert fm.columns[:-1] == fm.input.columns
    assert [ir.sql(c) for c in fm.calls] == ['GENERATE_SERIES(1, "t_n")']
    assert strategies(root)["FlatMap"] == (
        "incremental (row by row: each change row expanded to its series)")
    assert analyze(root)[0] == "delta"


def test_a_series_of_constants_is_a_constant_input_of_the_join(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT t.k, g FROM t JOIN generate_series(1, 3) AS g ON g = t.n")
    (fm,) = flat_maps(root)
    assert fm.input is None and fm.gets() == []
    join = root.inputs[0]
    assert isinstance(join, ir.Join) and join.parts[1] is fm
    assert join.equalities == (((1, fm.columns[0]), (0, "t_n")),)
    assert strategies(root)["FlatMap0"] == (
        "incremental (constant arguments: a constant relation, never changes)")


def test_the_select_list_calls_run_zipped_in_one_flat_map(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT k, generate_series(1, n) AS a, generate_series(m, 3) + 1 AS b "
                         "FROM t WHERE k > 1")
    (fm,) = flat_maps(root)
    assert [ir.sql(c) for c in fm.calls] == ['GENERATE_SERIES(1, "t_n")',
                                             'GENERATE_SERIES("t_m", CAST(3 AS BIGINT))']
    assert isinstance(fm.input, ir.Filter)  # WHERE runs before the SELECT list
    assert isinstance(root, ir.Map) and root.columns == ("k", "a", "b")


def test_a_series_right_of_a_left_join_is_recomputed(snap: Snapshot) -> None:
    root = lowered(snap, "SELECT t.k, g FROM t LEFT JOIN generate_series(1, t.n) AS g ON true")
    assert isinstance(root, ir.Opaque) and root.reason == "R003"


def test_flat_map_checks_its_columns() -> None:
    call = parse_query("SELECT generate_series(1, x)").selects[0]
    with pytest.raises(ir.InvalidPlan, match="read unknown columns"):
        ir.FlatMap(columns=("g",), input=None, calls=(call,))
    with pytest.raises(ir.InvalidPlan, match="one column per call"):
        ir.FlatMap(columns=(), input=None, calls=(call,))


# -- against PostgreSQL -------------------------------------------------------------------

# Each query's rows are compared as a multiset; numerics by value (PostgreSQL gives each
# value its own scale, `1, 1.5, 2.0`; a Delta column has one: 1.0, 1.5, 2.0).
BATTERY = [
    "SELECT * FROM generate_series(1, 3)",
    "SELECT * FROM generate_series(1, 3) AS g",
    "SELECT * FROM generate_series(1, 3) AS g(v)",
    "SELECT * FROM generate_series(3, 1)",
    "SELECT * FROM generate_series(3, 1, -1)",
    "SELECT * FROM generate_series(1, 10, 3)",
    "SELECT * FROM generate_series(1, NULL)",
    "SELECT * FROM generate_series(NULL::int, 3, 0)",
    "SELECT * FROM generate_series(2147483640, 2147483647, 5)",
    "SELECT * FROM generate_series(-2147483645, -2147483647, -2)",
    "SELECT * FROM generate_series(9223372036854775800, 9223372036854775807, 5)",
    "SELECT * FROM generate_series(1, 2, 0.5)",
    "SELECT * FROM generate_series(-1.5, -3, -0.7)",
    "SELECT * FROM generate_series(0, 1, 0.1)",
    "SELECT * FROM generate_series(0.5, 1.05, 0.25)",
    "SELECT * FROM generate_series('2020-01-31'::timestamp, '2020-06-01', '1 month')",
    "SELECT * FROM generate_series('2020-05-31'::timestamp, '2020-01-01', '-1 month')",
    "SELECT * FROM generate_series('2020-01-31 10:00'::timestamp, '2020-06-01', "
    "'1 month 1 day')",
    "SELECT * FROM generate_series('2020-01-01'::timestamp, '2020-01-02', interval '6 hours')",
    "SELECT * FROM generate_series('2020-01-02'::timestamp, '2020-01-01', '-5 hours')",
    "SELECT * FROM generate_series('2020-01-01'::date, '2020-01-03', '1 day')",
    "SELECT * FROM generate_series('2020-01-01'::timestamptz, '2020-01-02', '12 hours')",
    "SELECT * FROM generate_series('2020-01-01'::timestamp, '2020-01-02', NULL::interval)",
    "SELECT * FROM generate_series(NULL::timestamp, '2020-01-02', '0 days')",
    "SELECT generate_series(1, 3)",
    "SELECT generate_series(1, 2), generate_series(1, 3)",
    "SELECT generate_series(1, 3) + 1 AS y",
    "SELECT k, generate_series(1, n) FROM t",
    "SELECT k, generate_series(1, n), generate_series(n, 1, -1) FROM t",
    "SELECT k, generate_series(1, n), generate_series(1, NULL::int) FROM t",
    "SELECT DISTINCT generate_series(1, n) FROM t",
    "SELECT k, generate_series(1, n) AS g FROM t ORDER BY g DESC, k LIMIT 3",
    "SELECT * FROM t, generate_series(1, t.n)",
    "SELECT t.k, g FROM t CROSS JOIN LATERAL generate_series(1, t.n) AS g",
    "SELECT t.k, g FROM t JOIN generate_series(1, 3) AS g ON g = t.n",
    "SELECT t.k, g FROM t LEFT JOIN generate_series(1, t.n) AS g ON g > 1",
    "SELECT t.k, g FROM t, generate_series(t.m, 3) AS g",
    "SELECT k, g FROM t, generate_series(0, x, 0.5) AS g",
    "SELECT k, g FROM t, generate_series(x, 2.2, 0.1) AS g",
    "SELECT k, g FROM t, generate_series(ts, ts + interval '2 days', '1 day') AS g",
    "SELECT k, g FROM t, generate_series(d, d + 60, '1 month') AS g",
    "SELECT a.k, b.k, g FROM t AS a, generate_series(1, a.n) AS g, t AS b WHERE b.n = g",
    "SELECT * FROM ROWS FROM (generate_series(1, 2), generate_series(1, 3)) AS r(a, b)",
    "SELECT k, (SELECT max(g) FROM generate_series(1, t.n) AS g) FROM t",
    "SELECT t.k, sum(g) FROM t, generate_series(1, t.n) AS g GROUP BY t.k",
    "SELECT x FROM (SELECT generate_series(1, 3) AS x) AS s WHERE x > 1",
    "SELECT g FROM generate_series(1, 3) AS g UNION ALL SELECT generate_series(5, 6)",
    "SELECT g FROM generate_series(1, 5) AS g WHERE g IN (SELECT n FROM t)",
    # errors: the SQLSTATE must be PostgreSQL's
    "SELECT * FROM generate_series(1, 3, 0)",
    "SELECT * FROM generate_series(1, 0.0, 0)",
    "SELECT * FROM generate_series('2020-01-01'::timestamp, '2020-01-02', '0 days')",
    "SELECT * FROM generate_series('2020-01-01'::timestamp, '2020-01-02', '1 month -30 days')",
    "SELECT k, generate_series(1, 2, n - n) FROM t",
    "SELECT generate_series(1, 2.5::float8)",
    "SELECT generate_series(NULL, NULL)",
    "SELECT k FROM t WHERE generate_series(1, 2) > 1",
    "SELECT * FROM generate_series(1, 3) AS g(a, b)",
    "UPDATE t SET n = generate_series(1, 2)",  # mzflow's UPDATE reads a SELECT of its SET
]


def _value(v: Any) -> Any:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC)
    return v


def _multiset(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(_value(v) for v in r) for r in rows)


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    pytest.importorskip("psycopg2")
    with pg_server.cursor(pg_url, "SET TimeZone = 'UTC'", "DROP TABLE IF EXISTS t", SCHEMA,
                          ROWS) as cur:
        yield cur


def pg_run(cur: Any, sql: str) -> tuple[Any, ...]:
    """(names, type names, rows), or (SQLSTATE, message) of the error."""
    import psycopg2

    try:
        cur.execute(sql)
    except psycopg2.Error as e:
        return e.pgcode, e.diag.message_primary
    rows = cur.fetchall()
    names, types = [], []
    for column in cur.description:
        cur.execute("SELECT format_type(%s, NULL)", (column.type_code,))
        name = cur.fetchone()[0]
        # psycopg2 reports an unconstrained numeric's typmod as precision 65535.
        if name == "numeric" and column.precision and column.precision < 1000:
            name = f"numeric({column.precision},{column.scale})"
        names.append(column.name)
        types.append(name)
    return names, types, rows


@pytest.fixture(scope="module")
def mz() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-series-") as home, \
            mzflow.connect(home) as conn:
        conn.execute(SCHEMA)
        conn.execute(ROWS)
        yield conn


def mz_run(conn: mzflow.Connection, sql: str) -> tuple[Any, ...]:
    try:
        r = conn.execute(sql)
    except mzflow.Error as e:
        return e.code, e.message
    return r.columns, r.types, r.rows


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.parametrize("sql", BATTERY)
def test_reads_match_postgresql(pg: Any, mz: mzflow.Connection, sql: str) -> None:
    want, got = pg_run(pg, sql), mz_run(mz, sql)
    if len(want) == 2:
        assert len(got) == 2, f"PostgreSQL fails with {want}, mzflow answers {got}"
        assert got[0] == want[0], f"SQLSTATE: PostgreSQL {want}, mzflow {got}"
        assert want[1] in got[1]  # mzflow says "Evaluation error: …" at run time
        return
    assert len(got) == 3, f"mzflow fails with {got}, PostgreSQL answers {want}"
    assert got[0] == want[0], "column names"
    assert got[1] == want[1], "column types"
    assert _multiset(got[2]) == _multiset(want[2]), "rows"


# -- maintained views ---------------------------------------------------------------------

MAINTAINED = {
    "v_lateral": ("SELECT t.k, g FROM t, generate_series(1, t.n) AS g", "incremental"),
    "v_select": ("SELECT k, generate_series(1, n) AS a, generate_series(k, 2) AS b FROM t",
                 "incremental"),
    "v_const": ("SELECT t.k, c FROM t JOIN generate_series(1, 4) AS c ON c <= t.n",
                "incremental"),
    "v_numeric": ("SELECT k, g FROM t, generate_series(0, t.x, 0.5) AS g", "incremental"),
    "v_time": ("SELECT k, g FROM t, generate_series(ts, ts + interval '2 days', '1 day') AS g",
               "incremental"),
    "v_count": ("SELECT g, count(*) AS c FROM t, generate_series(1, t.n) AS g GROUP BY g",
                "incremental"),
    "v_left": ("SELECT t.k, g FROM t LEFT JOIN generate_series(1, t.n) AS g ON g > 1",
               "recompute (R003"),
}
BATCHES = [
    ["INSERT INTO t VALUES (5, 4, 1, 1.25, '2020-02-28 00:00', '2020-01-01'), "
     "(6, 1, 2, NULL, NULL, NULL)",
     "DELETE FROM t WHERE k = 1"],
    ["UPDATE t SET n = 5, x = 0.75 WHERE k = 2",
     "UPDATE t SET n = NULL WHERE k = 5",
     "UPDATE t SET n = 2 WHERE k = 3",
     "INSERT INTO t VALUES (7, 2, 0, 3.00, '2024-02-28 12:00', NULL)"],
]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.postgres
def test_maintained_views_match_a_recompute_and_postgresql(pg: Any, tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")  # tiny batches stay small
        conn.execute("CREATE CLUSTER c")
        conn.execute(SCHEMA)
        conn.execute(ROWS)
        # Its own schema: the battery's table stays as it was.
        pg.execute("DROP SCHEMA IF EXISTS kept CASCADE; CREATE SCHEMA kept; "
                   "SET search_path TO kept")
        pg.execute(SCHEMA)
        pg.execute(ROWS)
        for name, (sql, _) in MAINTAINED.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER c AS {sql}")
        conn.tick(cluster="c")
        conn.execute("SET cluster = c")
        for batch in BATCHES:
            for statement in batch:
                conn.execute(statement)
                pg.execute(statement)
            reports = {r.on.rsplit(".", 1)[-1]: r for r in conn.tick(cluster="c")}
            for name, (sql, strategy) in MAINTAINED.items():
                assert reports[name].error is None
                assert reports[name].strategy.startswith(strategy), reports[name].strategy
                kept = conn.execute(f"SELECT * FROM {name}").rows
                recomputed = conn.execute(sql).rows
                assert _multiset(kept) == _multiset(recomputed), f"{name}: index vs recompute"
                pg.execute(sql)
                assert _multiset(kept) == _multiset(pg.fetchall()), f"{name}: vs PostgreSQL"
    pg.execute("SET search_path TO public")
