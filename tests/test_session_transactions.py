"""Transactions and cursors as Materialize defines them, through ``Connection.execute``.

No Spark here: the writes are constant INSERTs, a table's contents are read from its
Delta log (SUBSCRIBE's snapshot), and the reads that decide a transaction's kind are
of system tables or refused before they run. Read-only transactions' single read time
is tested with Spark in ``test_session_api_spark.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow.errors import Error
from mzflow.session.writes import shard_of

SCHEMA = "CREATE TABLE t (a int, b text); CREATE TABLE u (x int)"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    with mzflow.connect(str(tmp_path)) as c:
        c.execute(SCHEMA)
    return tmp_path


@pytest.fixture
def conn(home: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(home)) as c:
        yield c


@pytest.fixture
def other(home: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(home)) as c:
        yield c


def contents(conn: mzflow.Connection, table: str) -> list[tuple[Any, ...]]:
    ts = conn.store.snapshot().read_ts
    rows = conn.execute(f"SUBSCRIBE {table} AS OF {ts} UP TO {ts + 1}").rows
    return sorted((r[2:] for r in rows for _ in range(r[1])), key=repr)


def versions(conn: mzflow.Connection, table: str) -> int:
    item = conn.store.snapshot().resolve(table)
    return len(shard_of(conn.config.warehouse, item).history())


def test_a_write_transaction_commits_its_inserts_at_commit(conn, other) -> None:
    assert conn.transaction_status == "I"
    before = versions(conn, "t")
    assert conn.execute("BEGIN").status == "BEGIN"
    assert conn.transaction_status == "T"
    assert conn.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')").status == "INSERT 0 2"
    conn.execute("SELECT 1")  # a constant read does not make it a read transaction
    conn.execute("INSERT INTO t (b, a) VALUES ($1, $2)", ["c", 3])
    conn.execute("INSERT INTO u VALUES (10)")
    # Not visible to anyone before COMMIT.
    assert contents(other, "t") == [] and contents(other, "u") == []
    assert conn.execute("COMMIT").status == "COMMIT"
    assert conn.transaction_status == "I"
    assert contents(other, "t") == [(1, "a"), (2, "b"), (3, "c")]
    assert contents(other, "u") == [(10,)]
    assert versions(conn, "t") == before + 1  # one commit for the table's three INSERTs


def test_rollback_and_close_discard_a_transactions_writes(conn, home) -> None:
    conn.execute("BEGIN; INSERT INTO t VALUES (1, 'a')")
    assert conn.execute("ROLLBACK").status == "ROLLBACK"
    assert conn.transaction_status == "I"
    with mzflow.connect(str(home)) as closing:
        closing.execute("BEGIN; INSERT INTO t VALUES (2, 'b')")
    assert contents(conn, "t") == []
    # A constant read then a write: a write transaction.
    conn.execute("BEGIN; SELECT 1; INSERT INTO t VALUES (3, 'c'); COMMIT")
    assert contents(conn, "t") == [(3, "c")]


def test_ddl_in_a_transaction_runs_alone_at_commit(conn, other) -> None:
    assert conn.execute("BEGIN; CREATE TABLE w (x int)").status == "CREATE TABLE"
    assert ("w",) not in other.execute("SHOW TABLES").rows
    conn.execute("COMMIT")
    assert ("w",) in other.execute("SHOW TABLES").rows
    # Its error comes at COMMIT, which ends the transaction.
    conn.execute("BEGIN; CREATE TABLE w (x int)")
    with pytest.raises(Error, match="already exists"):
        conn.execute("COMMIT")
    assert conn.transaction_status == "I"


# (statements before, the refused statement, SQLSTATE, message): Materialize's errors.
REFUSALS = [
    (["BEGIN", "INSERT INTO t VALUES (1, 'a')"], "SELECT * FROM t", "25000",
     "transaction in write-only mode"),
    (["BEGIN", "INSERT INTO t VALUES (1, 'a')"], "SELECT * FROM t AS OF 1", "25000",
     "transaction in write-only mode"),
    (["BEGIN", "INSERT INTO t VALUES (1, 'a')"], "CREATE TABLE w (x int)", "25000",
     "transaction in write-only mode"),
    (["BEGIN READ ONLY"], "INSERT INTO t VALUES (1, 'a')", "25006",
     "transaction in read-only mode"),
    (["BEGIN", "SELECT * FROM mz_tables"], "INSERT INTO t VALUES (1, 'a')", "25006",
     "transaction in read-only mode"),
    (["BEGIN", "SELECT * FROM mz_tables", "DECLARE c CURSOR FOR SUBSCRIBE t"], "FETCH 0 c",
     "25006", "transaction in read-only mode"),
    (["BEGIN", "CREATE TABLE w (x int)"], "SELECT 1", "25000",
     "this transaction can only execute a single statement"),
    (["BEGIN"], "UPDATE t SET a = 1", "25001",
     "UPDATE t SET a = 1 cannot be run inside a transaction block"),
    (["BEGIN"], "INSERT INTO t SELECT * FROM t", "25001",
     "cannot be run inside a transaction block"),
    (["BEGIN", "DECLARE c CURSOR FOR SUBSCRIBE t", "FETCH 0 c"], "SELECT * FROM t", "25000",
     "SUBSCRIBE in transactions must be the only read statement"),
    (["BEGIN", "DECLARE c CURSOR FOR SUBSCRIBE t", "FETCH 0 c",
      "DECLARE d CURSOR FOR SUBSCRIBE t"], "FETCH 0 d", "25000",
     "SUBSCRIBE in transactions must be the only read statement"),
    (["BEGIN", "SELECT 1", "BEGIN READ ONLY"], "BEGIN READ WRITE", "25000",
     "transaction read-write mode must be set before any query"),
    (["BEGIN", "SELECT 1"], "SET cluster = default", "25001",
     "SET cluster cannot be called in an active transaction"),
    (["BEGIN", "SELECT 1"], "SET transaction_isolation = 'serializable'", "25001",
     "SET TRANSACTION ISOLATION LEVEL must be called before any query"),
    (["BEGIN"], "COMMIT AND CHAIN", "0A000", "CHAIN not yet supported"),
    (["BEGIN"], "FETCH c", "34000", 'cursor "c" does not exist'),
    (["BEGIN", "DECLARE c CURSOR FOR SELECT 1"], "DECLARE c CURSOR FOR SELECT 2", "42P03",
     'cursor "c" already exists'),
    (["BEGIN"], "SELEC 1", "42601", 'syntax error at or near "SELEC"'),
]


@pytest.mark.parametrize(("before", "refused", "code", "message"), REFUSALS)
def test_what_a_transaction_refuses_fails_it(conn, before: list[str], refused: str,
                                             code: str, message: str) -> None:
    for sql in before:
        conn.execute(sql)
    with pytest.raises(Error) as info:
        conn.execute(refused)
    assert (info.value.code, info.value.message) == (code, message) or (
        info.value.code == code and message in info.value.message)
    assert conn.transaction_status == "E"
    with pytest.raises(Error, match="current transaction is aborted, commands ignored until "
                                    "end of transaction block") as aborted:
        conn.execute("SELECT 1")
    assert aborted.value.code == "25P02"
    with pytest.raises(Error, match="current transaction is aborted"):
        conn.describe("SELECT 1")
    assert conn.describe("ROLLBACK").columns == []
    # COMMIT of a failed transaction rolls it back, as in PostgreSQL.
    assert conn.execute("COMMIT").status == "ROLLBACK"
    assert conn.transaction_status == "I"
    assert contents(conn, "t") == []


def test_statements_outside_a_transaction_block(conn) -> None:
    with pytest.raises(Error, match="DECLARE CURSOR can only be used in transaction "
                                    "blocks") as info:
        conn.execute("DECLARE c CURSOR FOR SELECT 1")
    assert info.value.code == "25P01"
    assert conn.execute("COMMIT").notices == ["there is no transaction in progress"]
    assert conn.execute("ROLLBACK").notices == ["there is no transaction in progress"]
    conn.execute("BEGIN")
    assert conn.execute("BEGIN").notices == ["there is already a transaction in progress"]
    assert conn.transaction_status == "T"
    conn.execute("ROLLBACK")
    # Each statement outside one commits on its own, as before.
    conn.execute("INSERT INTO t VALUES (1, 'a'); SELECT * FROM mz_tables")
    assert contents(conn, "t") == [(1, "a")]


def test_a_select_cursor_hands_out_its_rows_in_pieces(conn) -> None:
    conn.execute("CREATE TABLE v1 (x int); CREATE TABLE v2 (x int)")
    conn.execute("BEGIN; DECLARE c CURSOR FOR SELECT name FROM mz_tables ORDER BY name")
    d = conn.describe("FETCH 2 c")
    assert (d.columns, d.types) == (["name"], ["text"])
    first = conn.execute("FETCH 2 c")
    assert (first.status, first.rows, first.types) == ("FETCH 2", [("t",), ("u",)], ["text"])
    assert conn.execute("FETCH ALL FROM c").rows == [("v1",), ("v2",)]
    assert conn.execute("FETCH c").rows == []
    assert conn.execute("CLOSE c").status == "CLOSE CURSOR"
    with pytest.raises(Error, match='cursor "c" does not exist'):
        conn.execute("FETCH c")
    conn.execute("ROLLBACK")
    # A cursor goes with its transaction.
    conn.execute("BEGIN; DECLARE c CURSOR FOR SELECT 1 AS one; COMMIT; BEGIN")
    with pytest.raises(Error, match='cursor "c" does not exist'):
        conn.execute("FETCH c")


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "subscribe-cursor"]


def test_a_subscribe_cursor_streams_changes_and_waits_for_them(conn, other) -> None:
    other.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    conn.execute("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE t")
    d = conn.describe("FETCH ALL c")
    assert d.columns == ["mz_timestamp", "mz_diff", "a", "b"]
    assert d.types == ["numeric", "bigint", "integer", "text"]
    snapshot = conn.execute("FETCH ALL c WITH (timeout = '5s')")
    assert sorted(r[1:] for r in snapshot.rows) == [(1, 1, "a"), (1, 2, "b")]
    assert snapshot.types == d.types
    assert conn.execute("FETCH ALL c WITH (timeout = '0s')").rows == []  # nothing new
    assert conn.execute("FETCH 0 c").rows == []

    def write_later() -> None:
        time.sleep(0.3)
        other.execute("INSERT INTO t VALUES (3, 'c')")

    writer = threading.Thread(target=write_later)
    writer.start()
    waited = conn.execute("FETCH ALL c")  # no timeout: waits for a row
    writer.join()
    assert [r[1:] for r in waited.rows] == [(1, 3, "c")]
    assert waited.rows[0][0] > snapshot.rows[0][0]
    assert _reader_threads()
    assert other.execute("SELECT count(*) FROM mz_read_holds").rows == [(1,)]
    conn.execute("CLOSE c")
    assert not _reader_threads()  # CLOSE stopped its reader and released its hold
    assert other.execute("SELECT count(*) FROM mz_read_holds").rows == [(0,)]
    conn.execute("COMMIT")


def test_a_subscribe_cursor_with_progress_and_one_as_of(conn, other) -> None:
    other.execute("INSERT INTO t VALUES (1, 'a')")
    ts = other.store.snapshot().read_ts
    conn.execute("BEGIN; DECLARE c CURSOR FOR SUBSCRIBE t WITH (PROGRESS)")
    rows = conn.execute("FETCH 2 c WITH (timeout = '5s')")
    assert rows.columns == ["mz_timestamp", "mz_progressed", "mz_diff", "a", "b"]
    assert rows.rows[0][1:] == (False, 1, 1, "a")
    assert rows.rows[1][1:] == (True, None, None, None)  # the time closes
    conn.execute("ROLLBACK")
    assert not _reader_threads()  # the end of the transaction closes its cursors
    # AS OF reads at its own time: another subscription may follow.
    conn.execute(f"BEGIN; DECLARE c CURSOR FOR SUBSCRIBE t AS OF {ts}")
    conn.execute("FETCH 0 c")
    conn.execute("DECLARE d CURSOR FOR SUBSCRIBE t; FETCH 0 d")
    with pytest.raises(Error, match="invalid TIMEOUT"):
        conn.execute("FETCH c WITH (timeout = 'soon')")
    conn.execute("ROLLBACK")


@pytest.mark.slow
@pytest.mark.spark
def test_savepoints_nest_work_and_roll_back_to_them(tmp_path) -> None:
    """SAVEPOINT, RELEASE and ROLLBACK TO as PostgreSQL has them (psycopg's transaction()
    inside an open one sends them: SQLAlchemy's connect does). A ROLLBACK TO drops the
    INSERTs since and ends a failure; a name never set is 3B001."""
    import mzflow

    with mzflow.connect(str(tmp_path)) as conn:
        conn.execute("CREATE TABLE s (a int)")
        with pytest.raises(mzflow.Error, match="SAVEPOINT can only be used in transaction "
                                               "blocks") as e:
            conn.execute("SAVEPOINT p")
        assert e.value.code == "25P01"
        conn.execute("BEGIN")
        conn.execute("INSERT INTO s VALUES (1)")
        assert conn.execute("SAVEPOINT p").status == "SAVEPOINT"
        conn.execute("INSERT INTO s VALUES (2)")
        with pytest.raises(mzflow.Error):
            conn.execute("SELECT * FROM nowhere")
        assert conn.transaction_status == "E"
        assert conn.execute("ROLLBACK TO SAVEPOINT p").status == "ROLLBACK"
        assert conn.transaction_status == "T"
        conn.execute("SAVEPOINT q")
        assert conn.execute("RELEASE q").status == "RELEASE"
        with pytest.raises(mzflow.Error, match='savepoint "q" does not exist') as e:
            conn.execute("ROLLBACK TO q")
        assert e.value.code == "3B001"
        conn.execute("ROLLBACK TO p")
        conn.execute("COMMIT")
        assert conn.execute("SELECT count(*) FROM s").rows == [(1,)]


def test_every_standard_isolation_level_is_accepted_as_materialize_accepts_it(conn) -> None:
    """Materialize takes the standard's four levels and runs them as serializable (JDBC
    and Metabase set read committed); a level it does not know is refused."""
    for level in ("read uncommitted", "read committed", "repeatable read", "serializable"):
        conn.execute(f"SET transaction_isolation = '{level}'")
        assert conn.execute("SHOW transaction_isolation").rows == [(level,)]
    with pytest.raises(mzflow.Error, match='invalid value for parameter "transaction_isolat'):
        conn.execute("SET transaction_isolation = 'snapshot'")
    conn.execute("RESET transaction_isolation")
    assert conn.execute("SHOW transaction_isolation").rows == [("strict serializable",)]
