"""pg_catalog and information_schema against PostgreSQL 15 itself.

- every relation has PostgreSQL's columns, in its order, with its types (an
  information_schema domain counts as its base type), plus only the columns listed as
  kept for clients of a 9.5 server;
- pg_type describes each type as PostgreSQL does, array types included;
- a table of every column type mzflow stores is described the same way by
  pg_attribute (type OID, typmod, length…), format_type and information_schema.columns.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

import mzflow
from mzflow.catalog import pg_catalog, pg_types, system
from mzflow_dev import pg_server

pytest.importorskip("psycopg2")
pytestmark = [pytest.mark.slow, pytest.mark.postgres]

# Columns a 9.5 server had that PostgreSQL 15 no longer has; psql asks for them.
OLDER = {("pg_catalog", "pg_class"): ["relhasoids"],
         ("pg_catalog", "pg_proc"): ["proisagg", "proiswindow"]}
TYPED = ("CREATE TABLE typed (i int NOT NULL, b bigint, s smallint, n numeric(10,2), "
         "n2 numeric, x text, v varchar(5), c char(3), f boolean, r real, "
         "d double precision, dt date, ts timestamp, tz timestamptz, "
         "by bytea, j jsonb)")


def relations() -> list[system.SystemTable]:
    """The relations (pg_get_keywords() is a function's rows: tested on its own)."""
    return [t for t in system.every() if t.schema in ("pg_catalog", "information_schema")
            and t.name != pg_catalog.KEYWORDS]


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    with pg_server.cursor(pg_server.create_database(pg_url), TYPED) as cur:
        yield cur


@pytest.fixture(scope="module")
def mz() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-pgcat-") as home, \
            mzflow.connect(home) as conn:
        conn.execute(TYPED)
        yield conn


@pytest.mark.parametrize("rel", relations(), ids=lambda t: f"{t.schema}.{t.name}")
def test_a_relation_has_postgresqls_columns_and_types(rel: system.SystemTable, pg: Any,
                                                      mz: mzflow.Connection) -> None:
    pg.execute(
        "SELECT a.attname, format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype "
        "ELSE a.atttypid END, CASE WHEN t.typtype = 'd' THEN t.typtypmod "
        "ELSE a.atttypmod END) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum", (rel.schema, rel.name))
    theirs = [(name, "character varying" if t.startswith("character varying") else t)
              for name, t in pg.fetchall()]
    assert theirs, f"PostgreSQL has no {rel.schema}.{rel.name}"
    extra = OLDER.get((rel.schema, rel.name), [])
    mine = [(c.name, c.type) for c in rel.columns if c.name not in extra]
    assert mine == theirs
    # …and a query of it says so, with its columns' types as declared.
    got = mz.execute(f"SELECT * FROM {rel.schema}.{rel.name} LIMIT 0")
    assert got.columns == [c.name for c in rel.columns]
    assert got.types == [c.type for c in rel.columns]


def test_pg_get_keywords_answers_as_postgresql_does(pg: Any, mz: mzflow.Connection) -> None:
    """Rows, columns and types of ``pg_get_keywords()`` (clients such as pgjdbc's
    getSQLKeywords ask it), on both of mzflow's catalog paths: a plain read, and an
    aggregate, which DuckDB answers. scripts/pg_keywords.py rewrites the list when
    PostgreSQL's version changes."""
    query = "SELECT * FROM pg_catalog.pg_get_keywords() ORDER BY word"
    pg.execute(query)
    theirs, columns = pg.fetchall(), [d[0] for d in pg.description]
    pg.execute("SELECT format_type(t, NULL) FROM pg_proc, unnest(proallargtypes) t "
               "WHERE proname = 'pg_get_keywords'")  # its OUT columns' types, in order
    got = mz.execute(query)
    assert got.columns == columns
    assert got.types == [r[0] for r in pg.fetchall()]
    assert got.rows == theirs
    agg = ("SELECT catcode, count(*), string_agg(k.w, ',' ORDER BY k.w) FROM "
           "pg_get_keywords() AS k(w) WHERE barelabel GROUP BY catcode ORDER BY catcode")
    pg.execute(agg)
    assert mz.execute(agg).rows == pg.fetchall()


def test_int2vector_subscripts_count_from_zero(pg: Any, mz: mzflow.Connection) -> None:
    """``pg_index.indkey[0]`` is the first key column in PostgreSQL (an int2vector's
    lower bound is 0); mzflow's catalog path read it as NULL and ``[1]`` as the first."""
    from mzflow.engine import spark

    ddl = "CREATE INDEX typed_by_b_i ON typed (b, i)"
    pg.execute(ddl)
    started = spark.started()
    mz.execute(ddl)
    assert spark.started() == started  # an empty table's index starts no Spark
    query = ("SELECT i.indkey[0], i.indkey[1], i.indkey[2], a.attname, "
             "(SELECT b.attname FROM pg_attribute b WHERE b.attrelid = i.indrelid "
             "AND b.attnum = i.indkey[0]) FROM pg_index i JOIN pg_class c "
             "ON c.oid = i.indexrelid JOIN pg_attribute a ON a.attrelid = i.indrelid "
             "AND a.attnum = i.indkey[1] WHERE c.relname = 'typed_by_b_i'")
    pg.execute(query)
    want = pg.fetchall()
    assert want == [(2, 1, None, "i", "b")]  # PostgreSQL's own answer, as documented
    assert mz.execute(query).rows == want


def test_sums_have_postgresqls_types(pg: Any, mz: mzflow.Connection) -> None:
    """A catalog query's sum of a smallint or an integer is a bigint, of a bigint a
    numeric, of a real a real (DuckDB's sums are HUGEINT or DOUBLE)."""
    sums = ["sum(a.attnum)", "sum(a.attnum::int4)", "sum(a.attnum::int8)",
            "sum(a.attnum::real)"]
    source = ("FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid WHERE "
              "c.relname = 'typed' AND a.attnum > 0")
    window = f"SELECT a.attname, sum(a.attlen) OVER () {source} ORDER BY 1"
    for query in (f"SELECT {', '.join(sums)} {source}", window):
        pg.execute(query)
        want, oids = pg.fetchall(), [d[1] for d in pg.description]
        pg.execute("SELECT format_type(t, NULL) FROM unnest(%s::oid[]) WITH ORDINALITY "
                   "AS u(t, n) ORDER BY n", (oids,))
        got = mz.execute(query)
        assert got.rows == want
        assert got.types == [r[0] for r in pg.fetchall()]


def test_an_empty_comment_drops_the_comment(pg: Any, mz: mzflow.Connection) -> None:
    query = ("SELECT obj_description('typed'::regclass, 'pg_class'), "
             "col_description('typed'::regclass, 1)")
    seen = []
    for text in ("'on the table'", "''", "'again'", "NULL"):
        for conn in (pg, mz):
            for target in ("TABLE typed", "COLUMN typed.i"):
                conn.execute(f"COMMENT ON {target} IS {text}")
        pg.execute(query)
        seen.append(pg.fetchone())
        assert mz.execute(query).rows == [seen[-1]]
    assert seen[1] == (None, None)  # PostgreSQL's own answer: '' dropped them


@pytest.mark.parametrize("query", [
    "SELECT r FROM (SELECT 'pg_class'::regclass AS r) s",
    "SELECT s.r, s.n FROM (SELECT oid::regclass AS r, relname AS n FROM pg_class "
    "WHERE relname = 'typed') s",
    "WITH w AS (SELECT oid::regclass AS r FROM pg_class WHERE relname = 'typed') "
    "SELECT x.r FROM (SELECT r FROM w) x",
    "SELECT count(*) FROM (SELECT oid::regclass AS r FROM pg_class) s "
    "WHERE r = 'typed'::regclass"])
def test_a_reg_value_through_a_derived_table_prints_as_in_postgresql(
        pg: Any, mz: mzflow.Connection, query: str) -> None:
    pg.execute(query)
    want, oids = pg.fetchall(), [d[1] for d in pg.description]
    pg.execute("SELECT format_type(t, NULL) FROM unnest(%s::oid[]) WITH ORDINALITY "
               "AS u(t, n) ORDER BY n", (oids,))
    got = mz.execute(query)
    assert [tuple(str(v) for v in r) for r in got.rows] == [
        tuple(str(v) for v in r) for r in want]
    assert got.types == [r[0] for r in pg.fetchall()]


def test_pg_type_describes_types_as_postgresql_does(pg: Any, mz: mzflow.Connection) -> None:
    columns = ["oid", "typname", "typlen", "typbyval", "typtype", "typcategory",
               "typispreferred", "typelem", "typarray", "typinput", "typoutput",
               "typreceive", "typsend", "typmodin", "typmodout", "typanalyze", "typsubscript",
               "typalign", "typstorage", "typcollation", "typdelim", "typnamespace"]
    mine = mz.execute(f"SELECT {', '.join(columns)} FROM pg_catalog.pg_type ORDER BY oid").rows
    # regproc columns: their names, as our rows hold them
    theirs = ", ".join(f"{c}::text" if c.startswith(("typin", "typout", "typrec", "typsend",
                                                      "typmod", "typana", "typsub")) else c
                       for c in columns)
    pg.execute(f"SELECT {theirs} FROM pg_type WHERE oid = ANY(%s) ORDER BY oid",
               ([r[0] for r in mine],))
    assert [tuple(r) for r in mine] == [tuple(r) for r in pg.fetchall()]


def test_columns_of_every_stored_type_are_described_as_postgresql_does(
        pg: Any, mz: mzflow.Connection) -> None:
    attributes = ("SELECT a.attname, a.atttypid, a.atttypmod, a.attlen, a.attbyval, "
                  "a.attalign, a.attstorage, a.attcollation, a.attnotnull, a.attnum, "
                  "pg_catalog.format_type(a.atttypid, a.atttypmod) "
                  "FROM pg_catalog.pg_attribute a WHERE a.attrelid = 'typed'::regclass "
                  "AND a.attnum > 0 ORDER BY a.attnum")
    pg.execute(attributes)
    assert mz.execute(attributes).rows == pg.fetchall()
    described = ("SELECT column_name, ordinal_position, is_nullable, data_type, udt_name, "
                 "character_maximum_length, character_octet_length, numeric_precision, "
                 "numeric_precision_radix, numeric_scale, datetime_precision "
                 "FROM information_schema.columns WHERE table_name = 'typed' "
                 "ORDER BY ordinal_position")
    pg.execute(described)
    assert mz.execute(described).rows == pg.fetchall()


@pytest.mark.parametrize(("oid", "typmod"), [
    (23, -1), (1700, 655366), (1700, -1), (1700, None), (1043, 9), (1042, 5), (1114, 3),
    (1184, -1), (1184, 6), (1083, 2), (1186, -1), (1009, -1), (1005, -1), (18, -1),
    (19, -1), (22, -1), (2205, -1), (99999, -1), (None, -1)])
def test_format_type_as_postgresql(oid: int | None, typmod: int | None, pg: Any) -> None:
    pg.execute("SELECT format_type(%s, %s)", (oid, typmod))
    assert pg_types.format_type(oid, typmod) == pg.fetchone()[0]
