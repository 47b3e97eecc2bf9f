"""JDBC-style sessions replayed against ``mzflow serve`` (issue 35): pgjdbc's own
connect-time statements and ``java.sql.DatabaseMetaData`` queries, DBeaver's PostgreSQL
plugin (server type Materialize) and Metabase (the Materialize driver, then the plain
PostgreSQL driver's own two) opening a connection and reading schema ``sales``.

The statements come from the clients' sources, each with its file and commit
(``tests/clients/jdbc/*.sql``); ``tests/clients/jdbc/replay.py`` puts them on the wire
as pgjdbc does: the startup packet's parameters, a simple Query for the driver's setup,
then unnamed Parse/Bind/Execute with parameters typed varchar, int4 or int8 and results
in text. One server for the module, in this process, over a fresh home with a small
catalog (a schema; a table, a view, a materialized view in a cluster, an index); each
session is replayed once on one connection, and once on a PostgreSQL holding the same
objects. Every statement succeeds, or fails with the SQLSTATE its client catches
(``-- tolerate:``), or is a known gap (``-- gap:``, strict xfail); each answer has
PostgreSQL's column names and type OIDs, and where the two catalogs hold the same facts
PostgreSQL's rows (OIDs compared as the objects they name).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import mzflow
from mzflow import config
from mzflow.server import make_server
from mzflow.server.listen import Server
from mzflow_dev import pg_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

_spec = importlib.util.spec_from_file_location(
    "jdbc_replay", Path(__file__).parent / "clients" / "jdbc" / "replay.py")
assert _spec is not None and _spec.loader is not None
replay = importlib.util.module_from_spec(_spec)
sys.modules["jdbc_replay"] = replay  # its dataclasses look their module up
_spec.loader.exec_module(replay)

SESSIONS = {name: replay.load(name) for name in ("pgjdbc", "dbeaver", "metabase")}
CATALOG = [
    "CREATE SCHEMA sales",
    "CREATE CLUSTER analytics",
    "CREATE TABLE sales.orders (id bigint NOT NULL, customer text, amount numeric(10,2), "
    "placed_at timestamptz)",
    "CREATE VIEW sales.big_orders AS SELECT id, amount FROM sales.orders WHERE amount > 100",
    "CREATE MATERIALIZED VIEW sales.totals IN CLUSTER analytics AS "
    "SELECT customer, sum(amount) AS total FROM sales.orders GROUP BY customer",
    "CREATE INDEX orders_customer IN CLUSTER analytics ON sales.orders (customer)",
    "COMMENT ON TABLE sales.orders IS 'one row per order'",
]
# The same objects in PostgreSQL, which has no clusters.
PG_CATALOG = [s.replace(" IN CLUSTER analytics", "") for s in CATALOG
              if not s.startswith("CREATE CLUSTER")]
# pgjdbc asks a server below 9.6 (mzflow reports 9.5.0) for pg_am.amcanorder, which
# PostgreSQL 15 no longer has: btree is the one ordered access method there.
PG_SPELLING = {"am.amcanorder": "(am.amname = 'btree')"}

Row = dict[str, Any]
# Where the two catalogs hold different facts: why, and the columns left out of the
# comparison (None: the rows are not compared, the names and types still are).
DIFFERENT: dict[tuple[str, str], tuple[str, tuple[str, ...] | None]] = {
    **{(s, "getTransactionIsolation()" if s == "pgjdbc" else
        "connection pool: getTransactionIsolation()"): (
        "Materialize's isolation level, strict serializable (pgjdbc reads an unknown level "
        "as READ COMMITTED)", None) for s in ("pgjdbc", "metabase")},
    ("pgjdbc", "getCatalogs()"): ("the server's own databases", None),
    ("pgjdbc", "getIndexInfo(null, 'sales', 'orders', false, true)"): (
        "sizes of storage PostgreSQL's way are not known here (relpages 0)", ("PAGES",)),
    **{(s, label): ("the types each server has", None) for s, label in (
        ("pgjdbc", "getTypeInfo()"), ("pgjdbc", "getTypeInfo(): TypeInfoCache.cacheSQLTypes()"),
        ("dbeaver", "data types"))},
    ("dbeaver", "context defaults: current schema and user"): (
        "the login role: Materialize's materialize, PostgreSQL's postgres", ("session_user",)),
    ("dbeaver", "server version"): ("each server's own version()", None),
    ("dbeaver", "tables of sales"): (
        "owners are each server's own; PostgreSQL's storage (file nodes, TOAST tables, "
        "transaction ids) and row types are not mzflow's; a materialized view has a default "
        "index (the cluster design); relhasoids is 9.5's",
        ("relowner", "reltype", "relfilenode", "reltoastrelid", "relfrozenxid", "relminmxid",
         "relhasindex", "relhasoids")),
    ("dbeaver", "schemas"): ("owners, privileges and comments are each server's own", None),
    ("dbeaver", "context defaults: search path"): (
        "Materialize's default search_path is public", None),
    ("dbeaver", "database info"): ("owners and transaction ids are each server's own", None),
    ("dbeaver", "setting standard_conforming_strings"): (
        "mzflow's descriptions of its settings", ("category", "short_desc", "vartype")),
    ("dbeaver", "columns of sales' tables"): (
        "PostgreSQL's system columns (ctid…), and a view's column keeps its table's NOT NULL "
        "(as in Materialize)", None),
    ("dbeaver", "columns of orders"): ("PostgreSQL's system columns (ctid…)", None),
    ("dbeaver", "indexes of orders"): (
        "mzflow has no operator classes or collations to name", ("indcollation", "indclass")),
    ("dbeaver", "access methods (an index's)"): ("the access methods each server has", None),
    **{("dbeaver", label): ("definitions are mzflow's stored SQL, not PostgreSQL's deparsed "
                            "form", None)
       for label in ("an index's DDL", "a view's definition",
                     "a materialized view's definition")},
    ("metabase", "describe-fields (schema sales)"): (
        "a view's column keeps its table's NOT NULL (as in Materialize); and a materialized "
        "view's columns are in information_schema.columns too (as in Materialize; "
        "PostgreSQL leaves them out), so this query lists them twice: compared as sets",
        ("database-required",)),
    ("metabase", "postgres driver: describe-database's get-tables-sql"): (
        "the statistics collector's counters are not known here (NULL)",
        ("estimated_row_count",)),
}
# Rows mzflow has beyond PostgreSQL's: its system schemas.
EXTRA: dict[tuple[str, str], Callable[[Row], bool]] = {
    (s, label): (lambda r: str(r.get("TABLE_SCHEM", "")).startswith("mz_"))
    for s, label in (("pgjdbc", "getSchemas()"), ("metabase", "syncable schemas: getSchemas()"))
}
# Answers compared as sets of rows (a row mzflow repeats, and why, in DIFFERENT).
SETWISE = {("metabase", "describe-fields (schema sales)")}
# Columns whose names differ, and why.
RENAMED: dict[tuple[str, str], str] = {
    ("dbeaver", "tables of sales"): "pg_class keeps 9.5's relhasoids, for 9.5's clients",
    ("metabase", "db-default-timezone"): "SHOW names its column as the statement spells it",
}


def _params(check: Callable[[str, replay.Step], bool]) -> list[Any]:
    out = []
    for name, session in SESSIONS.items():
        for i, step in enumerate(session.steps):
            if not check(name, step):
                continue
            marks = [pytest.mark.xfail(strict=True, reason=step.gap)] if step.gap else []
            out.append(pytest.param(name, i, id=f"{name}: {step.label}", marks=marks))
    return out


def _answered(name: str, step: replay.Step) -> bool:
    """A statement both servers answer with rows (not a SET, not one refused)."""
    return not step.tolerate and not step.sql.lstrip().upper().startswith("SET")


def _same_facts(name: str, step: replay.Step) -> bool:
    """An answer whose rows the two catalogs agree on (some columns left out)."""
    return _answered(name, step) and DIFFERENT.get((name, step.label), ("", ()))[1] is not None


# -- the servers ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("jdbc-home")
    with mzflow.connect(str(home)) as conn:
        for sql in CATALOG:
            conn.execute(sql)
    srv = make_server(config.load(str(home)), port=0, trust=True)
    srv.start()
    yield srv
    srv.stop()


Replayed = tuple[list[Any], dict[int, str], str]  # answers, objects by OID, the database


def _replay(url: str, name: str, options: str, spelling: dict[str, str]) -> Replayed:
    session = SESSIONS[name]
    with psycopg.connect(url, autocommit=True, options=options) as conn:
        oids = replay.object_oids(conn.pgconn, "sales")
        database = conn.info.dbname
        answers = []
        for step in session.steps:
            sql = step.sql
            for old, new in spelling.items():
                sql = sql.replace(old, new)
            answers.append(replay.run(conn.pgconn, replay.Step(
                step.label, sql, step.protocol, step.params), oids))
    return answers, {oid: key for key, oid in oids.items()}, database


@pytest.fixture(scope="module")
def mz(server: Server) -> dict[str, Replayed]:
    """Each session's answers from mzflow. libpq sends the startup packet's DateStyle
    and TimeZone as options (test_the_startup_packet sends them as pgjdbc does)."""
    url = f"postgresql://materialize@127.0.0.1:{server.port}/materialize"
    return {name: _replay(url, name, " ".join(
        filter(None, ["-c DateStyle=ISO -c TimeZone=UTC", s.startup.get("options")])), {})
        for name, s in SESSIONS.items()}


@pytest.fixture(scope="module")
def pg(pg_url: str) -> dict[str, Replayed]:
    url = pg_server.create_database(pg_url).replace("postgresql+psycopg2://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in PG_CATALOG:
            conn.execute(sql)  # type: ignore[arg-type]
    return {name: _replay(url, name, "-c DateStyle=ISO -c TimeZone=UTC", PG_SPELLING)
            for name in SESSIONS}


# -- the tests --------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SESSIONS))
def test_the_startup_packet_as_pgjdbc_sends_it(name: str, server: Server) -> None:
    """pgjdbc's parameters (client_encoding, DateStyle, TimeZone; Metabase's driver adds
    options naming a cluster) log in without an error or a notice, and the server's
    version is the one the replayed statements were built for (9.0 to 9.5: pgjdbc sets
    extra_float_digits = 3 and sends 9.5's metadata queries)."""
    messages = replay.startup("127.0.0.1", server.port, SESSIONS[name].startup)
    kinds = [kind for kind, _ in messages]
    assert kinds[-1] == b"Z" and b"E" not in kinds and b"N" not in kinds, messages
    status = dict(tuple(body.split(b"\0")[:2]) for kind, body in messages if kind == b"S")
    major, minor = (int(x) for x in status[b"server_version"].split(b".")[:2])
    assert (9, 0) <= (major, minor) < (9, 6)
    assert status[b"DateStyle"].startswith(b"ISO") and status[b"TimeZone"] == b"UTC"


def test_a_jvm_in_another_time_zone_connects_with_a_notice(server: Server) -> None:
    """pgjdbc sends the JVM's zone; mzflow, as Materialize, keeps UTC and says so."""
    params = dict(SESSIONS["pgjdbc"].startup, TimeZone="Europe/Berlin")
    messages = replay.startup("127.0.0.1", server.port, params)
    kinds = [kind for kind, _ in messages]
    assert kinds[-1] == b"Z" and b"E" not in kinds
    notices = [body for kind, body in messages if kind == b"N"]
    assert len(notices) == 1 and b"TimeZone" in notices[0]
    assert (b"S", b"TimeZone\0UTC\0") in messages


@pytest.mark.parametrize(("name", "i"), _params(lambda name, step: True))
def test_a_statement_succeeds_or_fails_as_its_client_tolerates(
        name: str, i: int, mz: dict[str, Any]) -> None:
    step = SESSIONS[name].steps[i]
    answer = mz[name][0][i]
    if step.tolerate:
        assert answer.sqlstate == step.tolerate.split()[0], answer.message
    else:
        assert answer.sqlstate is None, f"{answer.sqlstate} {answer.message}"


@pytest.mark.parametrize(("name", "i"), _params(_answered))
def test_an_answer_has_postgresqls_columns_and_types(
        name: str, i: int, mz: dict[str, Any], pg: dict[str, Any]) -> None:
    mine, theirs = mz[name][0][i], pg[name][0][i]
    assert mine.sqlstate is None and theirs.sqlstate is None, (mine.message, theirs.message)
    label = SESSIONS[name].steps[i].label
    if (name, label) in RENAMED:
        assert mine.columns != theirs.columns  # still different: the entry is needed
        shared = [c for c in mine.columns if c in theirs.columns]
    else:
        assert mine.columns == theirs.columns
        shared = mine.columns
    types = dict(zip(theirs.columns, theirs.types, strict=True))
    assert {c: t for c, t in zip(mine.columns, mine.types, strict=True) if c in shared} == {
        c: types[c] for c in shared}


@pytest.mark.parametrize(("name", "i"), _params(_same_facts))
def test_an_answer_lists_the_catalog_as_postgresql_does(
        name: str, i: int, mz: dict[str, Replayed], pg: dict[str, Replayed]) -> None:
    label = SESSIONS[name].steps[i].label
    left_out = DIFFERENT.get((name, label), ("", ()))[1] or ()
    extra = EXTRA.get((name, label), lambda r: False)

    def rows(replayed: Replayed, keep: Callable[[Row], bool]) -> list[tuple[Any, ...]]:
        answers, oids, database = replayed
        answer = answers[i]
        out = []
        for r in answer.rows:
            row = dict(zip(answer.columns, r, strict=True))
            if keep(row):
                out.append(tuple(_object(v, oids, database) for c, v in row.items()
                                 if c not in left_out))
        return sorted(out, key=repr)

    got = rows(mz[name], lambda r: not extra(r))
    want = rows(pg[name], lambda r: True)
    if (name, label) in SETWISE:
        assert len(got) > len(set(got))  # still repeated: the entry is needed
        got = sorted(set(got), key=repr)
    assert got == want


def _object(value: str | None, oids: dict[int, str], database: str) -> str | None:
    """A value with an OID of the catalog's objects as the object's name, and the
    server's database as ``materialize``."""
    if value is not None and value.isdigit() and int(value) in oids:
        return oids[int(value)]
    return "materialize" if value == database else value


# The functions the sessions call in catalog queries, at their edges, on both servers
# (a system relation in FROM: mzflow answers these in process).
EDGES = [
    "format('%s|%s', c.relname, NULL::text), format('%I.%I', 'a b', c.relname), "
    "format('100%% %s', c.relkind), format('\"%s\".\"%s\"', 'sales', 'Orders')",
    "substring(c.relname, 1), substring(c.relname, 3), substring(c.relname, 2, 3), "
    "\"substring\"(c.relname, 9), substring(c.relname, 2, 0)",
    "array_upper(ARRAY[c.relname, c.relname], 1), array_upper(ARRAY[]::text[], 1), "
    "array_upper(NULL::text[], 1)",
    "(SELECT count(*) FROM generate_series(1, 3) g(n)), "
    "(SELECT count(*) FROM generate_series(3, 1) g(n)), "
    "(SELECT max(n) FROM generate_series(1, NULL::int) g(n)), "
    "(SELECT max(s.i) FROM generate_series(1, 32) s(i))",
    "c.relname AS select, 5 & 3 AS \"and\", 'pg_catalog.array_in'::regproc = 'array_in'::regproc",
]
REFUSED = [
    ("substring(c.relname, -1)", "0A000"),  # DuckDB counts from the end, PostgreSQL not
    ("format('%L', c.relname)", "0A000"),
    ("format('%I', NULL::text)", "22004"),
    ("format('%s %s', c.relname)", "22023"),
]


@pytest.fixture(scope="module")
def both(server: Server, pg_url: str) -> Iterator[tuple[psycopg.Connection, psycopg.Connection]]:
    url = pg_server.create_database(pg_url).replace("postgresql+psycopg2://", "postgresql://")
    with psycopg.connect(f"postgresql://materialize@127.0.0.1:{server.port}/materialize",
                         autocommit=True) as mine, psycopg.connect(url, autocommit=True) as pg:
        for sql in PG_CATALOG:
            pg.execute(sql)  # type: ignore[arg-type]
        yield mine, pg


def _ask(conn: psycopg.Connection, select: str) -> tuple[list[str], list[int], list[Any]]:
    cur = conn.execute(  # type: ignore[call-overload]
        f"SELECT {select} FROM pg_catalog.pg_class c WHERE c.relname = 'orders'")
    assert cur.description is not None
    return ([d.name for d in cur.description], [d.type_code for d in cur.description],
            cur.fetchall())


@pytest.mark.parametrize("select", EDGES, ids=[e[:40] for e in EDGES])
def test_a_function_clients_call_answers_as_postgresql(
        select: str, both: tuple[psycopg.Connection, psycopg.Connection]) -> None:
    mine, pg = both
    assert _ask(mine, select) == _ask(pg, select)


@pytest.mark.parametrize(("select", "sqlstate"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_would_not_agree_is_refused_by_name(
        select: str, sqlstate: str, both: tuple[psycopg.Connection, psycopg.Connection]
        ) -> None:
    mine, pg = both
    with pytest.raises(psycopg.Error) as e:
        _ask(mine, select)
    assert e.value.sqlstate == sqlstate, str(e.value)
    if sqlstate != "0A000":  # an error PostgreSQL makes too, with the same SQLSTATE
        with pytest.raises(psycopg.Error) as theirs:
            _ask(pg, select)
        assert theirs.value.sqlstate == sqlstate
        assert str(e.value).split("\n")[0] == str(theirs.value).split("\n")[0]
