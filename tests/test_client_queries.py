"""The catalog queries real clients send, answered by mzflow as PostgreSQL answers them.

``tests/clients/`` holds what psql 15's describe commands and SQLAlchemy 2's inspector
send to a server reporting version 9.5 (Materialize's, and mzflow's), captured from a
real PostgreSQL (``tests/clients/capture.py``). Each query runs through
``Connection.execute`` over a small catalog (a table, a view, a materialized view, an
index, a commented table, two schemas) and through PostgreSQL over the same catalog:
the column names must be PostgreSQL's, and where the two catalogs hold the same facts
the rows must be too (OIDs compared as the relations they name, owners left out: the
owner here is Materialize's ``materialize``).
"""

from __future__ import annotations

import importlib.util
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow.catalog import names
from mzflow_dev import pg_server

pytest.importorskip("psycopg2")
pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CLIENTS = Path(__file__).parent / "clients"
_spec = importlib.util.spec_from_file_location("capture", CLIENTS / "capture.py")
assert _spec is not None and _spec.loader is not None
capture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(capture)
CATALOG: list[str] = capture.CATALOG


def load(name: str) -> list[tuple[str, str]]:
    text = (CLIENTS / name).read_text()
    out = []
    for block in re.split(r"^-- query: ", text, flags=re.M)[1:]:
        label, _, sql = block.partition("\n")
        out.append((label.strip(), sql.strip().rstrip(";")))
    return out


QUERIES = load("psql15.sql") + load("sqlalchemy.sql")

# Where the two catalogs hold different facts, rows are not compared (the names are):
DIFFERENT = {
    # a materialized view has a default index in mzflow (the cluster design)
    r"psql \d m (2/6)",
    # a view's columns keep their relation's NOT NULL (Materialize's pg_attribute too)
    r"psql \d v (3/3)", r"psql \d+ v (3/5)", r"psql \d m (3/6)",
    "sqlalchemy get_columns('v')",
    # definitions are mzflow's stored SQL, not PostgreSQL's deparsed form
    r"psql \d+ v (4/5)", r"psql \d t (4/7)", "sqlalchemy get_view_definition('v')",
    # psycopg2 hands PostgreSQL's int2vector (indoption) over as text, ours as a list
    "sqlalchemy get_indexes('t')",
    "sqlalchemy connect: the server's version",
    # sizes of storage PostgreSQL's way are not known here (NULL)
    r"psql \dt+ (1/1)", r"psql \dv+ (1/1)", r"psql \dm+ (1/1)", r"psql \di+ (1/1)",
    # roles, databases, privileges and extensions are the server's own
    r"psql \du (1/1)", r"psql \l (1/1)", r"psql \dn+ (1/1)", r"psql \dx (1/1)",
}
# Rows mzflow has beyond PostgreSQL's: the system schemas (not pg_*), the materialized
# view's default index.
EXTRA = {r"psql \dn (1/1)", r"psql \di (1/1)", "sqlalchemy get_schema_names()"}
# What a 9.5 server had that PostgreSQL 15 has not, as PostgreSQL 15 says it.
OLDER = {"c.relhasoids": "false AS relhasoids", "p.proisagg": "p.prokind = 'a'",
         "p.proiswindow": "p.prokind = 'w'"}


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    url = pg_server.create_database(pg_url)
    with pg_server.cursor(url, *CATALOG) as cur:
        yield cur


@pytest.fixture(scope="module")
def mz() -> Iterator[mzflow.Connection]:
    with tempfile.TemporaryDirectory(prefix="mzflow-clients-") as home, \
            mzflow.connect(home) as conn:
        for sql in CATALOG:
            conn.execute(sql)
        yield conn


def mz_oids(conn: mzflow.Connection) -> dict[str, int]:
    snap = conn.store.snapshot()
    return {(i.name if i.schema == "public" else f"{i.schema}.{i.name}"): i.oid
            for i in snap.items}


def pg_oids(cur: Any) -> dict[str, int]:
    cur.execute("SELECT CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' END "
                "|| c.relname, c.oid FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname IN ('public', 's2')")
    return dict(cur.fetchall())


def with_oids(sql: str, oids: dict[str, int]) -> str:
    return re.sub(r"\{oid:([\w.]+)\}", lambda m: str(oids.get(m.group(1), 0)), sql)


def normalized(columns: list[str], rows: list[tuple[Any, ...]], oids: dict[str, int]
               ) -> list[tuple[Any, ...]]:
    """Rows with OIDs as the relation names they stand for, owners left out."""
    by_oid = {oid: name for name, oid in oids.items()}
    keep = [i for i, c in enumerate(columns) if c.lower() != "owner"]
    return [tuple(by_oid.get(r[i], r[i]) if isinstance(r[i], int) else r[i] for i in keep)
            for r in rows]


@pytest.mark.parametrize(("label", "sql"), QUERIES, ids=[q[0] for q in QUERIES])
def test_a_client_query_is_answered_as_postgresql_answers_it(
        label: str, sql: str, mz: mzflow.Connection, pg: Any) -> None:
    mine = mz.execute(with_oids(sql, mz_oids(mz)))
    cur = pg
    theirs_sql = with_oids(sql, pg_oids(cur))
    for old, new in OLDER.items():
        theirs_sql = theirs_sql.replace(old, new)
    cur.execute(theirs_sql)
    theirs = [d.name for d in cur.description]
    assert mine.columns == theirs
    if label in DIFFERENT:
        return
    got = normalized(mine.columns, mine.rows, mz_oids(mz))
    want = normalized(theirs, cur.fetchall(), pg_oids(cur))
    if label in EXTRA:
        snap = mz.store.snapshot()
        extras = {n for n in names.SYSTEM_SCHEMAS if not n.startswith("pg_")
                  and n != "information_schema"}
        extras |= {i.name for i in snap.items if i.is_default_index}
        got = [r for r in got if not extras & set(map(str, r))]
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert len(mine.types) == len(mine.columns)


DBT = dict(load("dbt_materialize.sql"))


def test_dbt_lists_relations_as_show_lists_them(mz: mzflow.Connection) -> None:
    got = set(mz.execute(DBT["dbt list_relations_without_caching(public)"]).rows)
    want = set()
    for listing, kind in (("TABLES", "table"), ("VIEWS", "view"),
                          ("MATERIALIZED VIEWS", "materializedview")):
        want |= {("materialize", "public", r[0], kind)
                 for r in mz.execute(f"SHOW {listing} FROM public").rows}
    want |= {("materialize", "public", r[2], "index") for r in mz.execute("SHOW INDEXES").rows}
    assert got == want


@pytest.mark.parametrize("label", ["dbt get_catalog(public, s2)",
                                   "dbt get_catalog_relations(public.t, s2.u)"])
def test_dbt_catalog_has_postgresqls_columns_and_comments(label: str, mz: mzflow.Connection,
                                                          pg: Any) -> None:
    got = mz.execute(DBT[label])
    by_name = [dict(zip(got.columns, r, strict=True)) for r in got.rows]
    mine = {(r["table_schema"], r["table_name"], r["column_name"], r["column_index"],
             r["column_type"], r["table_comment"]) for r in by_name}
    wanted = {(r["table_schema"], r["table_name"]) for r in by_name}
    pg.execute("SELECT n.nspname, c.relname, a.attname, a.attnum, "
               "format_type(a.atttypid, a.atttypmod), obj_description(c.oid, 'pg_class') "
               "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
               "JOIN pg_namespace n ON n.oid = c.relnamespace "
               "WHERE n.nspname IN ('public', 's2') AND c.relkind IN ('r', 'v', 'm') "
               "AND a.attnum > 0")
    theirs = {r for r in pg.fetchall() if (r[0], r[1]) in wanted}
    assert mine == theirs
    assert {r["table_owner"] for r in by_name} == {"materialize"}


def test_dbt_columns_in_relation_as_postgresql(mz: mzflow.Connection, pg: Any) -> None:
    sql = DBT["dbt get_columns_in_relation(public.t)"]
    got = mz.execute(sql)
    pg.execute("SELECT current_database()")
    pg.execute(sql.replace('"materialize"', f'"{pg.fetchone()[0]}"'))
    assert got.columns == [d.name for d in pg.description]
    assert got.rows == pg.fetchall()


def test_dbt_lists_schemas(mz: mzflow.Connection, pg: Any) -> None:
    got = {r[0] for r in mz.execute(DBT["dbt list_schemas(materialize)"]).rows}
    pg.execute("SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
               "AND nspname <> 'information_schema'")
    assert got == {r[0] for r in pg.fetchall()}


# Questions a tool asks of the catalog, answered by both over the same catalog. A second
# item is what mzflow has beyond PostgreSQL, left out of the comparison: the system
# schemas, the materialized view's default index, and a materialized view's listing in
# information_schema.tables (PostgreSQL leaves materialized views out; Materialize not).
BATTERY: list[tuple[str, set[str]]] = [
    ("SELECT schemaname, tablename, hasindexes, hasrules FROM pg_tables "
     "WHERE schemaname IN ('public', 's2')", set()),
    ("SELECT schemaname, viewname, viewowner IS NOT NULL FROM pg_views "
     "WHERE schemaname = 'public'", set()),
    ("SELECT schemaname, matviewname, ispopulated FROM pg_matviews", set()),
    ("SELECT schemaname, tablename, indexname FROM pg_indexes WHERE schemaname = 'public'",
     {"m_primary_idx"}),
    ("SELECT table_catalog = current_database(), table_schema, table_name, table_type "
     "FROM information_schema.tables "
     "WHERE table_schema IN ('public', 's2')", {"MATERIALIZED VIEW"}),
    ("SELECT table_schema, table_name, check_option FROM information_schema.views "
     "WHERE table_schema = 'public'", set()),
    ("SELECT schema_name FROM information_schema.schemata "
     "WHERE schema_name NOT LIKE 'pg\\_%'", {"mz_catalog", "mz_internal"}),
    ("SELECT obj_description('t'::regclass, 'pg_class'), col_description('t'::regclass, 3), "
     "col_description('t'::regclass, 1), obj_description('v'::regclass)", set()),
    ("SELECT pg_get_viewdef('v'::regclass) IS NOT NULL, pg_get_viewdef('v', true) IS NULL",
     set()),
    ("SELECT format_type(1700, 655366), format_type(1043, 14), pg_encoding_to_char(6), "
     "has_table_privilege('t', 'select'), has_schema_privilege('public', 'usage')", set()),
    ("SELECT c.relname, pg_table_is_visible(c.oid), pg_get_userbyid(c.relowner) IS NOT NULL "
     "FROM pg_class c WHERE c.relname IN ('t', 'u', 'v')", set()),
    ("SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid "
     "WHERE c.relname = 'u'", set()),
    ("SELECT 's2.u'::regclass::text, 't'::regclass::text, 'integer'::regtype::text, "
     "'t'::regclass = (SELECT oid FROM pg_class WHERE relname = 't')", set()),
    ("SELECT a.attname, a.attnum, a.attnotnull, t.typname FROM pg_attribute a "
     "JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = 't'::regclass "
     "AND a.attnum > 0", set()),
    ("SELECT i.indisunique, i.indnatts, ic.relname, tc.relname FROM pg_index i "
     "JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class tc ON tc.oid = i.indrelid "
     "WHERE tc.relname IN ('t', 'v', 'm')", {"m_primary_idx"}),
    ("SELECT current_schemas(false), current_schema(), current_user = session_user", set()),
    ("SELECT d.description, c.relname FROM pg_description d "
     "JOIN pg_class c ON c.oid = d.objoid WHERE d.classoid = 'pg_class'::regclass", set()),
]


@pytest.mark.parametrize(("sql", "extra"), BATTERY, ids=[b[0][:60] for b in BATTERY])
def test_a_catalog_question_is_answered_as_postgresql_answers_it(
        sql: str, extra: set[str], mz: mzflow.Connection, pg: Any) -> None:
    mine = mz.execute(sql)
    pg.execute(sql)
    assert mine.columns == [d.name for d in pg.description]
    got = [r for r in mine.rows if not extra & {str(v) for v in r}]
    assert sorted(got, key=repr) == sorted(pg.fetchall(), key=repr)
