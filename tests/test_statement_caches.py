"""What a repeated statement no longer pays for, counted (never timed): the catalog's
queries while nothing commits (catalog/data_version.py), the parser's calls
(sql/parse_cache.py), the binder's calls to Describe (session/describe.py) and the
catalog cache's keys (session/catalog_cache.py). Each with the change it must still
see: another connection's or another process's commit, a GRANT, a REVOKE, a role made
superuser, a search path. No Spark.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import mzflow
from mzflow.catalog import data_version, names
from mzflow.session import catalog_cache
from mzflow.session import describe as describe_mod
from mzflow.sql import parse as parse_mod
from mzflow.sql import parse_cache

CATALOG_READ = "SELECT name FROM mz_tables ORDER BY name"


@pytest.fixture
def home(tmp_path: Path) -> str:
    return str(tmp_path / "home")


@pytest.fixture
def admin(home: str) -> Iterator[mzflow.Connection]:
    with mzflow.connect(home) as c:
        yield c


def _queries(conn: mzflow.Connection) -> list[str]:
    """Every statement ``conn``'s catalog engine sends from now on."""
    sent: list[str] = []
    sa.event.listen(conn.store.engine, "before_cursor_execute",
                    lambda *args: sent.append(str(args[2])))
    return sent


def _count(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counting(*args, **kw):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(module, name, counting)
    return calls


# -- the snapshot: one pragma while nothing commits --------------------------------------


def test_a_repeated_statement_sends_no_catalog_query_while_nothing_commits(
        admin: mzflow.Connection) -> None:
    admin.execute("CREATE TABLE a (x int)")
    admin.execute(CATALOG_READ)
    sent = _queries(admin)
    for _ in range(5):
        assert admin.execute(CATALOG_READ).rows == [("a",)]
    assert sent == []
    # Any commit, here one of this session's own, sends the next statement to the rows.
    admin.execute("CREATE TABLE b (x int)")
    n = len(sent)
    assert admin.execute(CATALOG_READ).rows == [("a",), ("b",)]
    assert any("catalog_version" in q or "meta" in q for q in sent[n:])


def test_another_connection_s_commits_are_seen_by_the_next_statement(
        home: str, admin: mzflow.Connection) -> None:
    with mzflow.connect(home) as other:
        assert admin.execute(CATALOG_READ).rows == []
        other.execute("CREATE TABLE t (x int)")
        assert admin.execute(CATALOG_READ).rows == [("t",)]
        # A write moves only the read time: the next snapshot has it.
        before = admin.store.snapshot().read_ts
        other.execute("INSERT INTO t VALUES (1)")
        assert admin.store.snapshot().read_ts > before


def test_a_grant_a_revoke_and_superuser_apply_from_the_next_statement(
        home: str, admin: mzflow.Connection) -> None:
    admin.execute("CREATE ROLE joe LOGIN")
    with mzflow.connect(home, role="joe") as joe:
        with pytest.raises(mzflow.InsufficientPrivilege):
            joe.execute("CREATE TABLE j1 (a int)")
        admin.execute("GRANT CREATE ON SCHEMA materialize.public TO joe")
        joe.execute("CREATE TABLE j1 (a int)")
        admin.execute("REVOKE CREATE ON SCHEMA materialize.public FROM joe")
        with pytest.raises(mzflow.InsufficientPrivilege):
            joe.execute("CREATE TABLE j2 (a int)")
        with pytest.raises(mzflow.InsufficientPrivilege):
            joe.execute("CREATE CLUSTER mine")
        admin.execute("ALTER ROLE joe SUPERUSER")
        joe.execute("CREATE CLUSTER mine")
        admin.execute("ALTER ROLE joe NOSUPERUSER")
        with pytest.raises(mzflow.InsufficientPrivilege):
            joe.execute("CREATE CLUSTER yours")


@pytest.mark.slow
def test_another_process_s_commits_are_seen_by_the_next_statement(
        home: str, admin: mzflow.Connection) -> None:
    """The CLI (a process of its own) creates a table and grants on it: the pragma
    moves for a commit of any process."""
    admin.execute("CREATE ROLE joe LOGIN")
    with mzflow.connect(home, role="joe") as joe:
        assert admin.execute(CATALOG_READ).rows == []
        with pytest.raises(mzflow.InsufficientPrivilege):
            joe.execute("CREATE TABLE j (a int)")
        subprocess.run(
            [sys.executable, "-m", "mzflow.cli", "sql", "-c",
             "CREATE TABLE from_cli (x int); "
             "GRANT CREATE ON SCHEMA materialize.public TO joe"],
            env={**os.environ, "MZFLOW_HOME": home}, check=True, capture_output=True,
            timeout=300)
        assert admin.execute(CATALOG_READ).rows == [("from_cli",)]
        joe.execute("CREATE TABLE j (a int)")


def test_only_a_sqlite_file_is_watched(tmp_path: Path) -> None:
    assert data_version.watch(sa.create_engine(f"sqlite:///{tmp_path / 'c.db'}")) is not None
    for url in ("sqlite://", "sqlite:///:memory:", "postgresql://u@localhost/db"):
        assert data_version.watch(sa.create_engine(url)) is None, url


# -- the parser ----------------------------------------------------------------------------


def test_a_text_is_parsed_once_and_each_caller_gets_a_tree_of_its_own(
        admin: mzflow.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _count(monkeypatch, parse_mod, "parse")
    text = "SELECT 1 AS kept_once"
    (first,) = parse_cache.parse(text)
    first.set("expressions", [])  # a caller changes its tree...
    (second,) = parse_cache.parse(text)
    assert second.sql() == "SELECT 1 AS kept_once"  # ...the next caller's is whole
    assert parsed[0] == 1
    # A connection's statements: the same text again is not parsed again.
    admin.execute(CATALOG_READ)
    n = parsed[0]
    admin.execute(CATALOG_READ)
    admin.execute_all(CATALOG_READ)
    assert parsed[0] == n


def test_what_the_parser_refuses_and_role_ddl_are_not_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _count(monkeypatch, parse_mod, "parse")
    for _ in range(2):
        with pytest.raises(mzflow.ParseError):
            parse_cache.parse("SELEC 1")
    assert parsed[0] == 2
    text = "ALTER ROLE joe WITH PASSWORD 'kept nowhere'"
    parse_cache.parse(text)
    parse_cache.parse(text)
    assert parsed[0] == 4
    long = "SELECT " + ", ".join(["1"] * parse_cache.LONGEST)
    parse_cache.parse(long)
    parse_cache.parse(long)
    assert parsed[0] == 6


# -- Describe ------------------------------------------------------------------------------


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return _count(monkeypatch, describe_mod, "bind")


def test_a_query_is_described_once_per_catalog_version(
        home: str, admin: mzflow.Connection, bound: list[int]) -> None:
    admin.execute("CREATE TABLE t (a int)")
    q = "SELECT * FROM t WHERE a = $1"
    first = admin.describe(q)
    assert (first.params, first.columns, first.types) == (["integer"], ["a"], ["integer"])
    n = bound[0]
    assert admin.describe(q) == first
    assert bound[0] == n
    # Declared parameter types are part of the key.
    assert admin.describe(q, ["bigint"]).params == ["bigint"]
    assert bound[0] == n + 1
    # Another connection replaces t: the next Describe binds the new one.
    with mzflow.connect(home) as other:
        other.execute("DROP TABLE t")
        other.execute("CREATE TABLE t (a text, b int)")
    again = admin.describe(q)
    assert (again.params, again.columns, again.types) == (["text"], ["a", "b"],
                                                          ["text", "integer"])
    assert bound[0] == n + 2


def test_a_description_is_kept_per_search_path(admin: mzflow.Connection) -> None:
    admin.execute("CREATE SCHEMA s")
    admin.execute("CREATE TABLE public.t (a int)")
    admin.execute("CREATE TABLE s.t (b text)")
    assert admin.describe("SELECT * FROM t").columns == ["a"]
    admin.execute("SET search_path = s")
    assert admin.describe("SELECT * FROM t").columns == ["b"]


def test_a_failed_transaction_refuses_to_describe_a_kept_query(
        admin: mzflow.Connection) -> None:
    admin.describe(CATALOG_READ)  # kept
    admin.execute("BEGIN")
    with pytest.raises(mzflow.Error):
        admin.execute("SELECT * FROM no_such_table")
    with pytest.raises(mzflow.Error, match="current transaction is aborted"):
        admin.describe(CATALOG_READ)
    admin.execute("ROLLBACK")
    assert admin.describe(CATALOG_READ).columns == ["name"]


# -- the catalog cache's key ---------------------------------------------------------------


def test_the_key_tells_statements_apart_exactly(admin: mzflow.Connection) -> None:
    snap = admin.store.snapshot()

    def key(q: str) -> object:
        return catalog_cache.key(snap, parse_mod.parse(q)[0])

    same = "SELECT name FROM mz_tables WHERE name = 'a' AND id <> 'u1'"
    assert key(same) is not None and key(same) == key(same)
    for other in ("SELECT name FROM mz_tables WHERE name = 'A' AND id <> 'u1'",
                  'SELECT "name" FROM mz_tables WHERE name = \'a\' AND id <> \'u1\'',
                  "SELECT name FROM mz_tables WHERE name = 'a' OR id <> 'u1'",
                  "SELECT name FROM mz_tables WHERE name = 'a' AND id <> 'u2'"):
        assert key(other) != key(same), other
    assert key("SELECT 1 FROM mz_tables") != key("SELECT TRUE FROM mz_tables")
    public = key(same)
    with names.using(("s", "public")):  # as a session sets it around a statement
        assert key(same) != public


def test_a_query_with_two_conditions_is_kept_until_another_connection_moves_the_catalog(
        home: str, admin: mzflow.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.read import reads

    planned = _count(monkeypatch, reads, "plan")
    q = "SELECT name FROM mz_tables WHERE name LIKE 't%' AND name <> 'tx' ORDER BY name"
    admin.execute("CREATE TABLE t1 (x int)")
    assert admin.execute(q).rows == [("t1",)]
    n = planned[0]
    assert admin.execute(q).rows == [("t1",)]
    assert planned[0] == n
    with mzflow.connect(home) as other:
        other.execute("CREATE TABLE t2 (x int)")
    assert admin.execute(q).rows == [("t1",), ("t2",)]
    assert planned[0] == n + 1


# -- snapshots shared between the sessions of a process ------------------------------------


def test_sessions_of_one_process_load_each_catalog_version_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.catalog import store

    loads = _count(monkeypatch, store, "_load")
    home = str(tmp_path / "shared")
    with mzflow.connect(home) as a:
        n = loads[0]
        with mzflow.connect(home) as b, mzflow.connect(home) as c:
            assert loads[0] == n  # b and c found a's
            a.execute("CREATE TABLE t (x int)")
            assert b.execute(CATALOG_READ).rows == [("t",)]
            assert c.execute(CATALOG_READ).rows == [("t",)]
            assert loads[0] == n + 1
    # A catalog made anew at the same place is another catalog (its installation id).
    import shutil

    shutil.rmtree(home)
    with mzflow.connect(home) as fresh:
        fresh.execute("CREATE TABLE u (x int)")  # the version the old one had with t
        assert fresh.execute(CATALOG_READ).rows == [("u",)]


# -- the server's split of a client's text -------------------------------------------------


def test_a_text_sent_again_is_not_tokenized_again(
        admin: mzflow.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.server import statements

    tokenized = _count(monkeypatch, statements.DIALECT, "tokenize")
    session = statements.Session(admin, "materialize")
    text = "SELECT 1 AS one; COPY (SELECT 2 AS two) TO STDOUT"
    first = session.split(text)
    n = tokenized[0]
    again = session.split(text)
    assert tokenized[0] == n
    assert [(s.text, s.offset, s.copy, s.params) for s in again] == [
        (s.text, s.offset, s.copy, s.params) for s in first] == [
        ("SELECT 1 AS one", 0, None, 0), ("SELECT 2 AS two", 23, "out", 0)]
    assert again[0].tree is not first[0].tree
    # A text the parser refuses is refused again, at the same place.
    for _ in range(2):
        with pytest.raises(mzflow.ParseError) as e:
            session.split("SELECT 1; SELEC 2")
        assert e.value.position == 11  # type: ignore[attr-defined]


def test_a_closed_store_and_a_forked_child_read_the_rows(
        admin: mzflow.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pragma's numbers compare only on one connection: a child of a fork opens its
    own, and its first look reads the rows; so does a store after close()."""
    admin.execute(CATALOG_READ)
    sent = _queries(admin)
    admin.store.snapshot()
    assert sent == []
    monkeypatch.setattr(data_version.os, "getpid", lambda: -1)  # as in a forked child
    admin.store.snapshot()
    assert sent != []
    n = len(sent)
    admin.store.snapshot()
    assert len(sent) == n  # the child's own connection, from now on
    admin.store.close()
    admin.store.snapshot()
    assert len(sent) > n


# -- sessions asking the same at once --------------------------------------------------


def _at_once(home: str, sql: str, n: int = 6) -> list[object]:
    """``sql`` on ``n`` sessions at once; each one's rows, or the error it raised."""
    import threading

    sessions = [mzflow.connect(home) for _ in range(n)]
    start = threading.Barrier(n)
    out: list[object] = [None] * n

    def ask(i: int) -> None:
        start.wait()
        try:
            out[i] = sessions[i].execute(sql).rows
        except mzflow.Error as e:
            out[i] = e

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in sessions:
        s.close()
    return out


def test_sessions_asking_the_same_at_once_compute_it_once(
        home: str, admin: mzflow.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from mzflow.read import reads

    admin.execute("CREATE TABLE t (x int)")
    real, planned = reads.plan, [0]

    def slow_plan(*args, **kw):  # type: ignore[no-untyped-def]
        planned[0] += 1
        time.sleep(0.05)  # the others arrive while it computes
        return real(*args, **kw)

    monkeypatch.setattr(reads, "plan", slow_plan)
    assert _at_once(home, "SELECT name FROM mz_tables") == [[("t",)]] * 6
    assert planned[0] == 1
    # What fails fails for each of them, and nobody is left waiting.
    out = _at_once(home, "SELECT no_such_column FROM mz_tables")
    assert all(isinstance(e, mzflow.Error) for e in out)
    assert planned[0] == 7
    assert not catalog_cache._COMPUTING


def test_the_server_settles_before_its_first_client(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mzflow serve` answers a catalog read once, then freezes what it holds out of the
    garbage collector's sight (server/__init__.py settle)."""
    import gc

    from mzflow import caches, config
    from mzflow.server import settle

    frozen = _count(monkeypatch, gc, "freeze")
    monkeypatch.setattr(gc, "collect", lambda *a: 0)
    caches.reset()
    settle(config.load(str(tmp_path / "home")))
    assert frozen[0] == 1
    assert caches.sizes()["session.catalog_answers"][0] == 1


# -- the server's socket, read in chunks ----------------------------------------------------


def test_a_socket_is_read_in_chunks_and_gives_exactly_what_is_asked() -> None:
    import socket
    import ssl
    import threading

    from mzflow.server import listen
    from mzflow.server.backend import Closed

    ours, theirs = socket.socketpair()
    with ours, theirs:
        wire = listen.SocketWire(ours, "peer", True, None)
        big = bytes(range(256)) * (listen._CHUNK // 64)  # four chunks' worth
        sending = threading.Thread(target=theirs.sendall, args=(b"abcdefgh" + big,))
        sending.start()
        assert wire.recv(3) == b"abc"
        assert wire.recv(5) == b"defgh"
        assert wire.recv(len(big)) == big
        sending.join()
        theirs.sendall(b"xy")
        theirs.shutdown(socket.SHUT_WR)
        with pytest.raises(Closed):
            wire.recv(3)  # the client went away mid-message
    # Bytes sent in the clear after SSLRequest are refused, not taken as if from TLS.
    ours, theirs = socket.socketpair()
    with ours, theirs:
        wire = listen.SocketWire(ours, "peer", False, ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
        theirs.sendall(b"\0\0\0\x08\x04\xd2\x16\x2f" + b"Q\0\0\0\x0bSELECT")
        assert wire.recv(8) == b"\0\0\0\x08\x04\xd2\x16\x2f"
        with pytest.raises(Closed):
            wire.start_tls()


def test_a_statement_tags_spark_only_when_it_takes_a_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tagging a statement's Spark work (its cancel) calls into the JVM: a statement
    that never asks runtime.session() for Spark (a catalog read) makes no such call,
    even with Spark started; one that does is tagged before its first job, and
    untagged at its end."""
    from mzflow.engine.spark import runtime, tags

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(tags, "_tagging", lambda s, action, tag: calls.append((action, tag)))
    started = object()  # Spark, started by an earlier statement
    monkeypatch.setattr(runtime.process(), "in_process", lambda: started)
    with tags.tagged("catalog-read"):
        pass
    assert calls == []
    with tags.tagged("spark-read"):
        tags.apply(started)  # what runtime.session() does
        tags.apply(started)  # once per session
        assert tags.interrupt("spark-read")
    assert calls == [("add", "spark-read"), ("interrupt", "spark-read"),
                     ("remove", "spark-read")]


def test_a_select_reads_the_snapshot_its_checks_read(
        home: str, admin: mzflow.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """One look at the pragma for a catalog SELECT: the read takes the snapshot the
    privilege check took (each look lets go of the GIL, which a server's sessions hand
    round); a role's checks on that snapshot still see a REVOKE from the next one."""
    q = "SELECT name FROM mz_clusters"
    admin.execute(q)
    looks = _count(monkeypatch, data_version.DataVersion, "read")
    assert admin.execute(q).rows == [("default",)]
    assert looks[0] == 1
    monkeypatch.undo()
    admin.execute("CREATE ROLE joe LOGIN")
    admin.execute("CREATE VIEW v AS SELECT name FROM mz_clusters")
    admin.execute("GRANT USAGE ON CLUSTER default TO joe")
    admin.execute("GRANT SELECT ON v TO joe")
    with mzflow.connect(home, role="joe") as joe:
        assert joe.execute("SELECT * FROM v").rows == [("default",)]
        admin.execute("REVOKE SELECT ON v FROM joe")
        with pytest.raises(mzflow.InsufficientPrivilege):
            joe.execute("SELECT * FROM v")
