"""PostgreSQL's array input syntax (``'{a,"b c",NULL}'::text[]``), read as PostgreSQL
reads it: each literal's elements, and each malformed literal's error, against
PostgreSQL itself (``sql/array_literals.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mzflow.errors import Error, Unsupported
from mzflow.sql import parse
from mzflow.sql.array_literals import elements
from mzflow_dev import pg_server

pytest.importorskip("psycopg2")

LITERALS = ["{}", " { } ", "{a}", "{a,b}", "{ a , b }", '{"a b",c}', '{"",x}',
            '{"with \\"quote\\"",back\\\\slash}', "{NULL,null,\"NULL\"}", "{a b,c}",
            '{"{",\\,}', "{ 1 ,-2,NULL }"]
MALFORMED = ["{a", "a}", "{a,}", "{,a}", "{a}x", '{"a}', "{a\"b}", ""]


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    with pg_server.cursor(pg_url) as cur:
        yield cur


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("text", LITERALS)
def test_elements_are_postgresqls(pg: Any, text: str) -> None:
    pg.execute("SELECT %s::text[]", (text,))
    assert elements(text) == pg.fetchone()[0]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("text", MALFORMED)
def test_a_malformed_literal_fails_as_in_postgresql(pg: Any, text: str) -> None:
    import psycopg2

    with pytest.raises(psycopg2.Error) as theirs:  # the cursor commits each statement
        pg.execute("SELECT %s::text[]", (text,))
    with pytest.raises(Error) as mine:
        elements(text)
    assert mine.value.code == theirs.value.pgcode
    assert mine.value.message == theirs.value.diag.message_primary
    assert mine.value.detail == theirs.value.diag.message_detail


def test_what_is_not_supported_yet_is_refused_by_name() -> None:
    for text, what in (("{{1,2},{3,4}}", "multidimensional"), ("[1:2]={1,2}", "bounds")):
        with pytest.raises(Unsupported, match=what):
            elements(text)


def test_a_cast_of_a_literal_becomes_an_array_of_its_elements() -> None:
    tree = parse.parse_one("SELECT '{1, NULL}'::int[], x = ANY ('{a}'::text[]) FROM t")
    assert tree.sql(dialect="postgres") == (
        "SELECT CAST(ARRAY[CAST('1' AS INT), CAST(NULL AS INT)] AS INT[]), "
        "x = ANY(CAST(ARRAY[CAST('a' AS TEXT)] AS TEXT[])) FROM t")
    assert parse.parse_one("SELECT '{1}'::text").sql(dialect="postgres") == (
        "SELECT CAST('{1}' AS TEXT)")  # not an array type: the text stays


def test_all_is_a_quantifier_only_after_a_comparison() -> None:
    from sqlglot import exp

    where = parse.parse_one("SELECT 1 FROM t WHERE x <> ALL (ARRAY[1]) AND y >= ALL "
                            "(SELECT 1)").args["where"].this
    assert isinstance(where.this.expression, exp.All)
    assert isinstance(where.expression.expression, exp.All)
    assert isinstance(where.expression.expression.this, exp.Select)
    assert parse.parse_one("SELECT count(ALL x) FROM t UNION ALL SELECT 1").sql(
        dialect="postgres") == "SELECT COUNT(x) FROM t UNION ALL SELECT 1"
