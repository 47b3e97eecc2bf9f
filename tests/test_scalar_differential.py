"""Differential test (issue 32, item 3): random scalar expressions through PostgreSQL,
mzflow in process and mzflow on Spark must agree on the value, the type name and the
SQLSTATE of an error, or mzflow must refuse the expression by name (0A000).

Hypothesis builds typed expressions over the functions, operators and casts mzflow
accepts, from leaves at the edges (NULL, zero, negatives, rounding ties, the integer
limits, NaN and infinities, empty and non-ASCII text, leap days, daylight-saving
transitions, far zone offsets). Each leaf is a column of the one-row table ``vals``
(so Spark evaluates the expression) and, written as a constant, the same value (so the
in-process evaluator does). PostgreSQL runs both forms. Many expressions share one
Spark query; a failing query is bisected to the expressions that fail.

The seed is random per run unless ``MZFLOW_DIFF_SEED`` gives one (``make test`` gives
a fixed one; ``make fuzz`` runs new ones); a failure prints it
(``MZFLOW_DIFF_EXAMPLES`` sets how many batches run). Comparison rules
(``scalar_oracle.py``): numerics of a ``numeric(*,s)`` type agree at the fewer of the
two scales; doubles from exp/ln/log/power/cbrt within 4 units in the last place (C's
libm and Java's differ there).

Known differences, accepted and counted (``test_zz_coverage_report`` prints them):
- numeric field overflow (22003) where a value needs more than Delta's 38 digits;
- a numeric quotient keeps 16 places, so a tiny one is 0 (its sign 0; it may then
  divide by zero or have no logarithm): a numeric result of an expression with a
  division may differ;
- Spark skips an operator's other operand once one is NULL, where PostgreSQL evaluates
  (and fails on) it; and where two parts fail, Spark may report the other one first:
  both accepted only when the in-process engine fails as PostgreSQL does, or (the
  second) when PostgreSQL fails the same way on that part alone;
- PostgreSQL's planner folds a constant query's immutable parts and so fails on a
  COALESCE or CASE argument no row reaches, unless a stable part (a timestamptz cast)
  stops it: where its constant and column forms disagree, the columns' answer counts;
  and where both forms fail with different errors, either error is PostgreSQL's.
The generator leaves out what differs by design: upper/lower/initcap/ILIKE of
non-ASCII text (the oracle's locale is C; mzflow maps case by Unicode) and casts of
doubles to an unconstrained numeric (kept at 10 places in Delta).
"""

from __future__ import annotations

import os
import random
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from scalar_oracle import Outcome, agree, describe, in_process, on_spark, pg_outcomes

import mzflow
from mzflow_dev import pg_server

psycopg2 = pytest.importorskip("psycopg2")
sa = pytest.importorskip("sqlalchemy")

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.postgres]

SEED = int(os.environ.get("MZFLOW_DIFF_SEED") or random.randrange(2**31))
EXAMPLES = int(os.environ.get("MZFLOW_DIFF_EXAMPLES") or 12)
BATCH = 40  # expressions per example, one Spark query when none fails

# (type, values as PostgreSQL reads them; None is NULL)
LEAVES: dict[str, list[str | None]] = {
    "integer": ["0", "1", "-1", "7", "-7", "2", "3", "100", "2147483647", "-2147483648", None],
    "bigint": ["0", "5", "-5", "9223372036854775807", "-9223372036854775808", None],
    "numeric(10,2)": ["0.00", "1.50", "-2.50", "2.45", "0.05", "-0.05", "99999999.99",
                      "3.00", None],
    "numeric(38,0)": ["99999999999999999999999999999999999999", "-12345678901234567890", None],
    "double precision": ["0", "-0", "1.5", "-2.5", "0.1", "2.5", "3.5", "1e308", "-1e308",
                         "5e-324", "1e15", "123456.789", "NaN", "Infinity", "-Infinity", None],
    "text": ["", "abc", "ABC", " x ", "a%b_c", "é", "日本語", "ß", "12", "-7", "7.5", " 42 ",
             "true", "of", "2020-01-01", "2020-01-01 1:2:3.789", "hello", "\\x6869", None],
    "boolean": ["true", "false", None],
    "date": ["2000-01-01", "2000-02-29", "1999-12-31", "2024-03-10", "2021-11-07",
             "9999-12-31", None],
    "timestamp": ["2000-01-01 00:00:00", "2021-03-14 02:30:00", "2021-11-07 01:30:00",
                  "2024-02-29 23:59:59.999999", "1970-01-01 00:00:00",
                  "1969-12-31 23:59:59.5", None],
    "timestamptz": ["2021-03-14 02:30:00-05", "2021-11-07 01:30:00+00",
                    "2024-12-31 23:59:59.999999+14", "2000-01-01 00:00:00+05:30",
                    "2000-02-29 12:00:00-12", None],
}
INTERVALS = ["1 day", "1 month", "-1 month", "1 year", "36 hours", "1 day 02:03:04.5",
             "1.5 days", "-2 hours", "2 weeks", "11 months"]
TEMPLATES = ["YYYY-MM-DD HH24:MI:SS.MS TZ", "FMMonth FMDD, YYYY", "Dy DD Mon YY HH12:MI am",
             "DDD D ID Q CC", "HH:MI:SS.US", "YYYY \"Q\"Q", "DAY MONTH month dy",
             "SSSS FMHH12 PM OF"]
TRUNC_UNITS = ["microseconds", "milliseconds", "second", "minute", "hour", "day", "week",
               "month", "quarter", "year", "decade", "century", "millennium"]
EXTRACT_FIELDS = ["year", "month", "day", "hour", "minute", "second", "dow", "doy",
                  "quarter", "epoch", "isodow", "week", "millisecond", "microsecond",
                  "century", "decade", "millennium", "isoyear"]

COLUMNS: list[tuple[str, str, str | None]] = [
    (f"c{i}", t, v) for i, (t, v) in enumerate((t, v) for t, vs in LEAVES.items()
                                                for v in vs)]


def _literal(t: str, v: str | None) -> str:
    if v is None:
        return f"CAST(NULL AS {t})"
    return f"CAST('{v.replace(chr(39), chr(39) * 2)}' AS {t})"


class E:
    """One expression, written over constants and over vals' columns. Not a dataclass:
    Hypothesis prints a failing batch, and would print a dataclass field by field."""

    def __init__(self, const: str, cols: str, ops: frozenset[str] = frozenset(),
                 parts: tuple[E, ...] = ()):
        self.const, self.cols, self.ops, self.parts = const, cols, ops, parts

    def descendants(self) -> Iterator[E]:
        for part in self.parts:
            yield part
            yield from part.descendants()

    def __repr__(self) -> str:
        return repr(self.cols)


def _leaf(t: str) -> st.SearchStrategy[E]:
    options = [(name, v) for name, ct, v in COLUMNS if ct == t]
    return st.sampled_from(options).map(lambda nv: E(_literal(t, nv[1]), nv[0]))


def _combine(op: str, template: str, *args: E) -> E:
    """``template`` with {0}, {1}… replaced by the arguments."""
    return E(template.format(*[a.const for a in args]), template.format(*[a.cols for a in args]),
             frozenset({op}).union(*[a.ops for a in args]), args)


def _lit(op: str, template: str, *args: E, extra: str) -> E:
    """A template with a fixed constant (a unit, an interval, a template) in it."""
    return _combine(op, template.replace("{x}", extra.replace("'", "''")), *args)


INTS, NUMS = ("integer", "bigint"), ("numeric(10,2)", "numeric(38,0)")
NUMBER = ("integer", "numeric", "double precision")


@st.composite
def expr(draw: st.DrawFn, kind: str, depth: int = 2) -> E:
    """An expression whose type is of ``kind``: integer, numeric, double precision,
    text, boolean, date, timestamp, timestamptz."""
    if depth <= 0 or kind not in BUILDERS or draw(st.integers(0, 2)) == 0:
        if kind == "ascii":
            return draw(_leaf("text").filter(lambda e: e.const.isascii()))
        leaf_types = {"integer": INTS, "numeric": NUMS, "int4": ("integer",)}.get(kind, (kind,))
        return draw(_leaf(draw(st.sampled_from(leaf_types))))
    sub = lambda k: draw(expr(k, depth - 1))  # noqa: E731
    builders = BUILDERS[kind]
    op, build = draw(st.sampled_from(builders))
    return build(sub, draw, op)


def _binary(symbol: str, kinds: tuple[str, str]) -> Any:
    return lambda sub, draw, op: _combine(op, f"({{0}} {symbol} {{1}})", sub(kinds[0]),
                                          sub(kinds[1]))


def _func(template: str, *kinds: str) -> Any:
    return lambda sub, draw, op: _combine(op, template, *[sub(k) for k in kinds])


def _cast_from(target: str, *sources: str) -> Any:
    def build(sub: Any, draw: st.DrawFn, op: str) -> E:
        source = draw(st.sampled_from(sources))
        return _combine(f"{source}::{target}", f"CAST({{0}} AS {target})", sub(source))
    return build


def _generic(kind: str) -> list[tuple[str, Any]]:
    """CASE, COALESCE, NULLIF, GREATEST, LEAST: for every kind."""
    return [
        ("case", lambda sub, draw, op: _combine(
            op, "CASE WHEN {0} THEN {1} ELSE {2} END", sub("boolean"), sub(kind), sub(kind))),
        ("coalesce", _func("coalesce({0}, {1})", kind, kind)),
        ("nullif", _func("nullif({0}, {1})", kind, kind)),
        ("greatest", _func("greatest({0}, {1}, {2})", kind, kind, kind)),
        ("least", _func("least({0}, {1})", kind, kind)),
    ]


def _interval(template: str) -> Any:
    def build(sub: Any, draw: st.DrawFn, op: str) -> E:
        kind = {"date": "date", "timestamp": "timestamp", "tz": "timestamptz"}[
            template.split(":")[0]]
        body = template.split(":", 1)[1]
        return _lit(op, body, sub(kind), extra=draw(st.sampled_from(INTERVALS)))
    return build


def _unit(template: str, kind: str, units: list[str]) -> Any:
    return lambda sub, draw, op: _lit(op, template, sub(kind),
                                      extra=draw(st.sampled_from(units)))


BUILDERS: dict[str, list[tuple[str, Any]]] = {
    "integer": [
        ("+", _binary("+", ("integer", "integer"))), ("-", _binary("-", ("integer", "integer"))),
        ("*", _binary("*", ("integer", "integer"))), ("/", _binary("/", ("integer", "integer"))),
        ("%", _binary("%", ("integer", "integer"))),
        ("unary -", _func("(- {0})", "integer")), ("abs", _func("abs({0})", "integer")),
        ("int cast", _cast_from("integer", "numeric", "double precision", "text", "bigint",
                                "boolean")),
        ("bigint cast", _cast_from("bigint", "numeric", "double precision", "text", "integer")),
        ("length", _func("length({0})", "text")),
        ("position", _func("position({0} IN {1})", "text", "text")),
        ("strpos", _func("strpos({0}, {1})", "text", "text")),
        ("ascii", _func("ascii({0})", "text")),
        ("date - date", _binary("-", ("date", "date"))),
        *_generic("integer"),
    ],
    "int4": [  # integer-typed arguments of functions that take int4 only
        ("+", _binary("+", ("int4", "int4"))), ("-", _binary("-", ("int4", "int4"))),
        ("length", _func("length({0})", "text")), ("abs", _func("abs({0})", "int4")),
        ("position", _func("position({0} IN {1})", "text", "text")),
        ("int cast", _cast_from("integer", "numeric", "text")),
    ],
    "numeric": [
        ("+", _binary("+", ("numeric", "numeric"))), ("-", _binary("-", ("numeric", "integer"))),
        ("*", _binary("*", ("numeric", "numeric"))), ("/", _binary("/", ("numeric", "integer"))),
        # Not % of a numeric divisor: sqrt(0.05) has 16 places here, PostgreSQL's 17, and
        # a 38-digit dividend turns that last digit into a different remainder.
        ("%", _binary("%", ("numeric", "integer"))),
        ("unary -", _func("(- {0})", "numeric")), ("abs", _func("abs({0})", "numeric")),
        ("round", _func("round({0})", "numeric")),
        ("round(n, s)", lambda sub, draw, op: _lit(op, "round({0}, {x})", sub("numeric"),
                                                   extra=str(draw(st.integers(0, 3))))),
        ("trunc", _func("trunc({0})", "numeric")),
        ("trunc(n, s)", lambda sub, draw, op: _lit(op, "trunc({0}, {x})", sub("numeric"),
                                                   extra=str(draw(st.integers(0, 3))))),
        ("ceil", _func("ceil({0})", "numeric")), ("floor", _func("floor({0})", "numeric")),
        ("sign", _func("sign({0})", "numeric")),
        # Not from double precision: an unconstrained numeric keeps 10 places in Delta,
        # so 5e-324::numeric is 0 (PostgreSQL keeps the double's digits).
        ("numeric cast", _cast_from("numeric", "integer", "text")),
        ("numeric(10,1) cast", _cast_from("numeric(10,1)", "numeric", "integer",
                                          "double precision", "text")),
        ("exp", _func("exp({0})", "numeric")), ("ln", _func("ln({0})", "numeric")),
        ("sqrt", _func("sqrt({0})", "numeric")), ("power", _func("power({0}, {1})", "numeric",
                                                                 "integer")),
        ("extract", lambda sub, draw, op: _lit(
            op, "extract({x} FROM {0})", sub(draw(st.sampled_from(["timestamp", "timestamptz",
                                                                   "date"]))),
            extra=draw(st.sampled_from(EXTRACT_FIELDS)))),
        *_generic("numeric"),
    ],
    "double precision": [
        ("+", _binary("+", ("double precision", "double precision"))),
        ("-", _binary("-", ("double precision", "integer"))),
        ("*", _binary("*", ("double precision", "double precision"))),
        ("/", _binary("/", ("double precision", "double precision"))),
        ("unary -", _func("(- {0})", "double precision")),
        ("abs", _func("abs({0})", "double precision")),
        ("sqrt", _func("sqrt({0})", "double precision")),
        ("cbrt", _func("cbrt({0})", "double precision")),
        ("ln", _func("ln({0})", "double precision")),
        ("log", _func("log({0})", "double precision")),
        ("exp", _func("exp({0})", "double precision")),
        ("power", _func("power({0}, {1})", "double precision", "double precision")),
        ("round", _func("round({0})", "double precision")),
        ("ceil", _func("ceil({0})", "double precision")),
        ("floor", _func("floor({0})", "double precision")),
        ("trunc", _func("trunc({0})", "double precision")),
        ("sign", _func("sign({0})", "double precision")),
        ("double cast", _cast_from("double precision", "integer", "numeric", "text")),
        *_generic("double precision"),
    ],
    "text": [
        ("||", _binary("||", ("text", "text"))),
        ("|| non-text", lambda sub, draw, op: _combine(
            op, "({0} || {1})", sub("text"), sub(draw(st.sampled_from(
                ["integer", "numeric", "boolean", "date", "timestamp", "timestamptz"]))))),
        ("concat", lambda sub, draw, op: _combine(
            op, "concat({0}, {1}, {2})", *[sub(draw(st.sampled_from(
                ["text", "integer", "numeric", "boolean", "date", "timestamptz"])))
                for _ in range(3)])),
        ("substr", _func("substr({0}, {1}, {2})", "text", "int4", "int4")),
        ("substr from", _func("substr({0}, {1})", "text", "int4")),
        # Case mappings follow the database's locale: the oracle's is C (ASCII only),
        # mzflow's Unicode's; they agree on ASCII.
        ("upper", _func("upper({0})", "ascii")), ("lower", _func("lower({0})", "ascii")),
        ("initcap", _func("initcap({0})", "ascii")),
        ("btrim", _func("trim({0})", "text")), ("ltrim", _func("ltrim({0})", "text")),
        ("rtrim", _func("rtrim({0}, {1})", "text", "text")),
        ("replace", _func("replace({0}, {1}, {2})", "text", "text", "text")),
        ("left", _func("left({0}, {1})", "text", "int4")),
        ("right", _func("right({0}, {1})", "text", "int4")),
        ("lpad", _func("lpad({0}, {1}, {2})", "text", "int4", "text")),
        ("rpad", _func("rpad({0}, {1})", "text", "int4")),
        ("reverse", _func("reverse({0})", "text")),
        ("md5", _func("md5({0})", "text")),
        ("split_part", _func("split_part({0}, {1}, {2})", "text", "text", "int4")),
        ("chr", _func("chr({0})", "int4")),
        ("text cast", _cast_from("text", "integer", "numeric", "boolean", "date", "timestamp",
                                 "timestamptz", "double precision")),
        ("varchar(3) cast", _cast_from("varchar(3)", "text", "integer")),
        ("to_char", lambda sub, draw, op: _lit(
            op, "to_char({0}, '{x}')", sub(draw(st.sampled_from(
                ["timestamp", "timestamptz", "date"]))), extra=draw(st.sampled_from(TEMPLATES)))),
        *_generic("text"),
    ],
    "boolean": [
        *[(symbol, lambda sub, draw, op, s=symbol: (lambda k: _combine(
            op, f"({{0}} {s} {{1}})", sub(k), sub(k)))(draw(st.sampled_from(
                ["integer", "numeric", "double precision", "text", "date", "timestamp",
                 "timestamptz", "boolean"]))))
          for symbol in ("=", "<>", "<", "<=", ">", ">=", "IS DISTINCT FROM")],
        ("and", _binary("AND", ("boolean", "boolean"))),
        ("or", _binary("OR", ("boolean", "boolean"))),
        ("not", _func("(NOT {0})", "boolean")),
        ("is null", lambda sub, draw, op: _combine(op, "({0} IS NULL)", sub(draw(
            st.sampled_from(["integer", "text", "double precision"]))))),
        ("like", _binary("LIKE", ("text", "text"))),
        ("ilike", _binary("ILIKE", ("ascii", "ascii"))),
        ("between", _func("({0} BETWEEN {1} AND {2})", "integer", "integer", "integer")),
        ("in", _func("({0} IN ({1}, {2}))", "numeric", "numeric", "integer")),
        ("boolean cast", _cast_from("boolean", "text", "integer")),
        *_generic("boolean"),
    ],
    "date": [
        ("date + int", _binary("+", ("date", "int4"))),
        ("date - int", _binary("-", ("date", "int4"))),
        ("date cast", _cast_from("date", "text", "timestamp", "timestamptz")),
        *_generic("date"),
    ],
    "timestamp": [
        ("timestamp + interval", _interval("timestamp:({0} + INTERVAL '{x}')")),
        ("timestamp - interval", _interval("timestamp:({0} - INTERVAL '{x}')")),
        ("date + interval", _interval("date:({0} + INTERVAL '{x}')")),
        ("date_trunc", _unit("date_trunc('{x}', {0})", "timestamp", TRUNC_UNITS)),
        ("timestamp cast", _cast_from("timestamp", "text", "date", "timestamptz")),
        *_generic("timestamp"),
    ],
    "timestamptz": [
        ("timestamptz + interval", _interval("tz:({0} + INTERVAL '{x}')")),
        ("timestamptz - interval", _interval("tz:({0} - INTERVAL '{x}')")),
        ("date_trunc", _unit("date_trunc('{x}', {0})", "timestamptz", TRUNC_UNITS)),
        ("timestamptz cast", _cast_from("timestamptz", "text", "date", "timestamp")),
        *_generic("timestamptz"),
    ],
}
BUILDERS["ascii"] = [("||", _binary("||", ("ascii", "ascii"))),
                     ("btrim", _func("trim({0})", "ascii"))]
KINDS = [k for k in BUILDERS if k not in ("int4", "ascii")]


# -- the engines ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    with pg_server.cursor(pg_url, "SET TIME ZONE 'UTC'", "DROP TABLE IF EXISTS vals",
                          _table(), _row()) as cur:
        yield cur


@pytest.fixture(scope="module")
def mz() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-diff-") as home, \
            mzflow.connect(home) as conn:
        conn.execute(_table())
        conn.execute(_row())
        yield conn


def _table() -> str:
    return "CREATE TABLE vals (" + ", ".join(f"{n} {t}" for n, t, _ in COLUMNS) + ")"


def _row() -> str:
    return "INSERT INTO vals VALUES (" + ", ".join(_literal(t, v) for _, t, v in COLUMNS) + ")"


def spark_batch(conn: mzflow.Connection, exprs: list[str]) -> list[Outcome]:
    """Each expression over vals, on Spark: one query, bisected where it fails."""
    if not exprs:
        return []
    sql = "SELECT " + ", ".join(f"{e} AS e{i}" for i, e in enumerate(exprs)) + " FROM vals"
    found = on_spark(conn, sql)
    if len(found) == len(exprs) and found[0].code is None:
        return found
    if len(exprs) == 1:
        return found
    half = len(exprs) // 2
    return spark_batch(conn, exprs[:half]) + spark_batch(conn, exprs[half:])


@dataclass
class Tally:
    agreed: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    fell_back: Counter[str] = field(default_factory=Counter)  # constants run on Spark
    reasons: Counter[str] = field(default_factory=Counter)
    limits: Counter[str] = field(default_factory=Counter)  # known, documented differences
    expressions: int = 0


TALLY = Tally()


# Functions a C library and Java may round differently in the last bits.
TRANSCENDENTAL = {"exp", "ln", "log", "power", "cbrt"}


def _judge(sql: str, ours: Outcome, want: Outcome, ops: frozenset[str], engine: str,
           in_process_outcome: Outcome, pg_other_form: Outcome) -> str | None:
    if agree(ours, want, ulps=4 if ops & TRANSCENDENTAL else 0):
        TALLY.agreed.update(ops)
        return None
    if ours.code == "22003" and "numeric field overflow" in ours.message:
        # Delta and Spark hold 38 digits, PostgreSQL's numeric about 130,000.
        TALLY.limits["38 digits"] += 1
        return None
    if want.code is None and "/" in ops and (ours.code in ("22012", "2201E", "2201F") or (
            ours.code is None and ours.type == want.type == "numeric")):
        # A numeric quotient keeps 16 decimal places (PostgreSQL's scale varies with the
        # value, tests/test_types_oracle.py: DIV_SCALE): a tiny one is 0, whose sign is
        # 0, which then divides by zero or has no logarithm.
        TALLY.limits["16-place quotients"] += 1
        return None
    if engine == "spark" and want.code is not None and ours.code is not None and (
            agree(in_process_outcome, want)):
        # Two parts fail: Spark evaluates shared parts first (subexpression elimination),
        # PostgreSQL left to right, as the in-process engine does.
        TALLY.limits["which error first on Spark"] += 1
        return None
    if want.code is not None and ours.code is not None and agree(ours, pg_other_form):
        # Two parts fail, and PostgreSQL itself reports one over constants and the
        # other over the same values in columns: no evaluation order is promised.
        TALLY.limits["PostgreSQL's two forms fail differently"] += 1
        return None
    if engine == "spark" and want.code is not None and ours.code is None and (
            in_process_outcome.code is not None):
        # Spark skips an operator's other operand once one is NULL (and a CASE arm its
        # rows do not reach); PostgreSQL evaluates every argument first, and fails on
        # the one that fails, as the in-process engine does.
        TALLY.limits["Spark spares an operand"] += 1
        return None
    if ours.code == "0A000":  # refused by name, never a different answer
        if "NotEvaluable" in ours.message and engine == "in process":
            TALLY.fell_back.update(ops)
        else:
            TALLY.refused.update(ops)
            TALLY.reasons[ours.message.split(":", 1)[-1].strip()[:90]] += 1
        return None
    return describe(sql, [("postgres", want), (engine, ours)])


def _fails_in_part(pg: Any, e: E, ours: Outcome) -> bool:
    if ours.code is None:
        return False
    for part in e.descendants():
        [want] = pg_outcomes(pg, f"SELECT {part.cols} FROM vals")
        if want.code is not None and agree(ours, want):
            return True
    return False


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
          phases=[Phase.generate], suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(KINDS).flatmap(lambda k: expr(k, 3)), min_size=BATCH,
                max_size=BATCH))
def test_random_expressions_agree_with_postgresql(pg: Any, mz: mzflow.Connection,
                                                  batch: list[E]) -> None:
    failures: list[str] = []
    spark = spark_batch(mz, [e.cols for e in batch])
    for e, on_sp in zip(batch, spark, strict=True):
        TALLY.expressions += 1
        [want_const] = pg_outcomes(pg, f"SELECT {e.const}")
        [want_cols] = pg_outcomes(pg, f"SELECT {e.cols} FROM vals")
        pg_const = want_const
        if want_const.code is None and want_cols.code is None:
            # PostgreSQL's planner folds constants (coalesce(1.50::numeric(10,2), x) is
            # its first argument, typmod and all); mzflow types both forms alike.
            want_const = Outcome(want_cols.type, want_const.value)
        [here] = in_process(mz, f"SELECT {e.const}")
        if not agree(want_const, want_cols) and agree(here, want_cols):
            # PostgreSQL's planner folds the immutable parts of a constant query, and
            # stops at a stable one (a timestamptz cast): its two forms disagree on an
            # error in a COALESCE or CASE argument no row reaches; ours is the columns'.
            TALLY.limits["PostgreSQL folds constants"] += 1
            want_const = want_cols
        in_process_problem = _judge(e.const, here, want_const, e.ops, "in process", here,
                                    want_cols)
        spark_problem = _judge(e.cols, on_sp, want_cols, e.ops, "spark", here, pg_const)
        if spark_problem and want_cols.code is not None and _fails_in_part(pg, e, on_sp):
            # Two parts fail; Spark reports another one first (it reorders and shares
            # subexpressions), and PostgreSQL fails on that part alone the same way.
            TALLY.limits["which error first on Spark"] += 1
            spark_problem = None
        failures += [p for p in (in_process_problem, spark_problem) if p]
    assert not failures, (f"{len(failures)} disagreements (reproduce with "
                          f"MZFLOW_DIFF_SEED={SEED}):\n" + "\n".join(failures[:15]))


def test_values_table_reads_back_alike(pg: Any, mz: mzflow.Connection) -> None:
    """The leaves themselves: mzflow stores and reads each as PostgreSQL does."""
    names = [n for n, _, _ in COLUMNS]
    want = pg_outcomes(pg, f"SELECT {', '.join(names)} FROM vals")
    got = on_spark(mz, f"SELECT {', '.join(names)} FROM vals")
    bad = [f"{n} ({t} {v!r}): {g} vs {w}" for (n, t, v), g, w in zip(COLUMNS, got, want,
                                                                      strict=True)
           if not agree(g, w)]
    assert not bad, "\n".join(bad)


def test_zz_coverage_report() -> None:
    """Runs last in the module: what the random test covered (printed with -s)."""
    ops = set(TALLY.agreed) | set(TALLY.refused) | set(TALLY.fell_back)
    print(f"\nseed {SEED}: {TALLY.expressions} expressions, {len(ops)} functions, operators "
          f"and casts; agreed on {len(TALLY.agreed)}")
    print("refused (by name):", dict(TALLY.refused.most_common()))
    print("in process → Spark:", dict(TALLY.fell_back.most_common()))
    print("refusals:", dict(TALLY.reasons.most_common(25)))
    print("known limits:", dict(TALLY.limits))
