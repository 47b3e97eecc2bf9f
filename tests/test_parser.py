"""The dialect: every statement round-trips to a stable rendering (golden file),
and malformed SQL fails with the line and column of the problem."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlglot import exp

import mzflow
from mzflow.sql import ast
from mzflow.sql.parse import DIALECT, parse

GOLDEN = Path(__file__).parent / "golden"


def render() -> str:
    trees = parse((GOLDEN / "parse.sql").read_text())
    return "\n".join(f"{type(t).__name__}: {t.sql(dialect=DIALECT)}" for t in trees) + "\n"


def test_golden_round_trip() -> None:
    out = GOLDEN / "parse.out"
    got = render()
    if os.environ.get("MZFLOW_UPDATE_GOLDEN"):
        out.write_text(got)
    assert got == out.read_text(), "rerun with MZFLOW_UPDATE_GOLDEN=1 after checking the diff"


def test_rendered_sql_parses_back_to_the_same_tree() -> None:
    for tree in parse((GOLDEN / "parse.sql").read_text()):
        again = parse(tree.sql(dialect=DIALECT))
        assert len(again) == 1
        assert again[0] == tree, tree.sql(dialect=DIALECT)


def test_no_statement_is_an_opaque_command() -> None:
    from sqlglot import exp

    for tree in parse((GOLDEN / "parse.sql").read_text()):
        assert not isinstance(tree, exp.Command)


def test_cluster_options_are_collected_not_judged() -> None:
    # Duplicates are a semantic error (the catalog reports them), not a syntax error.
    (tree,) = parse("CREATE CLUSTER baz VIRTUAL, VIRTUAL")
    assert isinstance(tree, ast.CreateCluster)
    assert [o.name for o in tree.args["options"]] == ["VIRTUAL", "VIRTUAL"]


@pytest.mark.parametrize(
    ("sql", "line", "column", "reason"),
    [
        ("CREATE CLUSTER", 1, 15, "Expected cluster name"),
        ("CREATE FOO bar", 1, 8, "Expected CLUSTER, INDEX, SCHEMA, SINK, SOURCE, TABLE, VIEW"),
        ("SHOW CLUSTERS;\nCREATE INDEX ON", 2, 16, "Expected table name but got end of input"),
        ("SELECT 1;\nSELECT 'abc", 2, 8, "unterminated quoted string"),
        ("SELECT a\n  FROM t\n  WHERE (", 3, 10, ""),
        ("DROP DATABASE x", 1, 6,
         "Expected TABLE, VIEW, MATERIALIZED VIEW, INDEX, SINK, SOURCE, CLUSTER or SCHEMA"),
        ("CREATE MATERIALIZED TABLE t (a int)", 1, 21, "Expected VIEW after MATERIALIZED"),
        ("VACUUM t", 1, 1, "VACUUM is not supported"),
        ("CREATE VIEW v AS", 1, 17, "Expected a SELECT"),
    ],
)
def test_parse_errors_name_line_and_column(sql: str, line: int, column: int, reason: str) -> None:
    with pytest.raises(mzflow.ParseError) as info:
        parse(sql)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert reason in err.reason
    assert f"line {line}, column {column}" in str(err)
    assert err.code == "42601"


@pytest.mark.parametrize(("sql", "flat"), [
    ("SELECT 1 FROM (a AS x CROSS JOIN b AS y)", "SELECT 1 FROM a AS x CROSS JOIN b AS y"),
    ("SELECT 1 FROM ((a JOIN b ON p) JOIN c ON q) LEFT JOIN d ON r",
     "SELECT 1 FROM a JOIN b ON p JOIN c ON q LEFT JOIN d ON r"),
    ("SELECT 1 FROM x JOIN (a JOIN b ON p) ON q", "SELECT 1 FROM x CROSS JOIN a JOIN b ON p AND q"),
    ("SELECT 1 FROM x, (a CROSS JOIN b)", "SELECT 1 FROM x CROSS JOIN a CROSS JOIN b"),
])
def test_parenthesized_joins_are_flattened(sql: str, flat: str) -> None:
    # A table carrying its own joins lost them when binding renamed it (a wrong answer).
    (tree,) = parse(sql)
    assert tree.sql() == flat


@pytest.mark.parametrize(("sql", "message", "column"), [
    ("SELEC * FROM t", 'syntax error at or near "SELEC"', 1),
    ("SELECT * FROM t WHERE a = = 1", 'syntax error at or near "="', 27),
    ("SELECT * FROM t WHERE", "syntax error at end of input", 22),
])
def test_syntax_errors_read_like_postgres(sql: str, message: str, column: int) -> None:
    with pytest.raises(mzflow.ParseError) as info:
        parse(sql)
    assert info.value.reason == message
    assert info.value.column == column
    assert info.value.detail is not None and info.value.detail.endswith("^")


def test_comment_is_null_parses() -> None:
    (tree,) = parse("COMMENT ON TABLE t IS NULL")
    assert tree.sql() == "COMMENT ON TABLE t IS NULL"


@pytest.mark.parametrize(("sql", "kind", "check"), [
    ("CREATE SCHEMA IF NOT EXISTS materialize.s", ast.CreateSchema,
     lambda t: (t.this.name, t.args["database"].name, t.args["exists"]) == (
         "s", "materialize", True)),
    ("DROP SCHEMA IF EXISTS s, t CASCADE", ast.DropObjects,
     lambda t: (t.args["kind"], [e.name for e in t.expressions], t.args["cascade"]) == (
         "SCHEMA", ["s", "t"], True)),
    ("SET search_path = 'ba r', foo, \"x, y\"", ast.SetVariable,
     lambda t: [e.name for e in t.args["value"].expressions] == ["ba r", "foo", "x, y"]),
    ("SET search_path TO public", ast.SetVariable, lambda t: t.args["value"].name == "public"),
    ("SHOW EXTENDED SCHEMAS FROM materialize", ast.Show,
     lambda t: (t.args["kind"], t.args["schema"].name) == ("EXTENDED SCHEMAS", "materialize")),
    ("SHOW SOURCES FROM s", ast.Show, lambda t: t.args["kind"] == "SOURCES"),
    ("SHOW TABLES FROM materialize.s", ast.Show,
     lambda t: (t.args["schema"].name, t.args["schema"].db) == ("s", "materialize")),
])
def test_schema_statements_parse(sql: str, kind: type, check: object) -> None:
    (tree,) = parse(sql)
    assert isinstance(tree, kind)
    assert check(tree)  # type: ignore[operator]


@pytest.mark.parametrize(("sql", "node"), [
    # what psql and SQLAlchemy send about the catalog (tests/clients/)
    ("SELECT 1 FROM t WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$'", exp.Operator),
    ("SELECT n.nspname !~ '^pg_toast' FROM n", exp.RegexpLike),
    ("SELECT c.oid::pg_catalog.regclass FROM c", exp.Cast),
    ("SELECT 'pg_catalog.pg_class'::regclass", exp.Cast),
    ("SELECT relkind = ANY (ARRAY['r', 'p']) FROM c", exp.Any),
    ("SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM a", exp.Dot),
    ("SELECT array(SELECT 'toast.' || x FROM pg_catalog.unnest(r) x) FROM c", exp.Array),
    ("SELECT c.relname COLLATE pg_catalog.default FROM c", exp.Collate),
    ("SELECT ''::pg_catalog.char AS attidentity", exp.Cast),
    ("SELECT unnest(i.indkey), generate_subscripts(i.indkey, 1) FROM i", exp.Explode),
])
def test_client_catalog_syntax_parses(sql: str, node: type) -> None:
    (tree,) = parse(sql)
    assert isinstance(tree, exp.Select)
    assert tree.find(node) is not None
    assert parse(tree.sql(dialect=DIALECT))[0] == tree


def test_show_transaction_isolation_level_is_the_variable() -> None:
    # PostgreSQL's multi-word spelling, which SQLAlchemy sends on connect.
    (stmt,) = parse("SHOW TRANSACTION ISOLATION LEVEL")
    assert stmt.args["kind"] == "VARIABLE" and stmt.this.name == "transaction_isolation"
