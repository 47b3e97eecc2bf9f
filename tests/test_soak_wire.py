"""The soak's clients over the wire and its landing folder (issue 39; mzflow_dev/soak/
wire.py, landing.py, wire_check.py): the seeded operations, the files' contents, and
the checks, each shown to pass on what mzflow did and to fail on a tampered record.
Only the last test starts a server (in this process; no Spark)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pc
import pyarrow.parquet as pq
import pytest

import mzflow
from mzflow_dev.soak import landing, wire, wire_check
from mzflow_dev.soak.checker import Checker
from mzflow_dev.soak.journal import Journal, records


def test_client_ops_are_seeded_and_cover_every_kind() -> None:
    ops = [wire.op(7, n) for n in range(1, 400)]
    assert [wire.op(7, n) for n in range(1, 400)] == ops  # a pure function of (seed, n)
    assert {o.kind for o in ops} == {"read_as_of", "read_plain", "write", "deny"}
    assert {o.how for o in ops if o.kind == "write"} == {"insert", "txn", "copy"}
    assert {o.role for o in ops if o.kind == "deny"} == set(wire.LOGINS)
    ids = [i for o in ops for i, _, _ in o.rows]
    assert len(ids) == len(set(ids))  # each row names its write
    assert all(i // 10 == n for n, o in enumerate(ops, 1) for i, _, _ in o.rows)
    assert all("{" not in o.sql for o in ops)
    # A read and its oracle ask the same question (the same key).
    reads = [o for o in ops if o.kind.startswith("read")]
    assert all(o.sql.split(" WHERE ")[1:] == o.oracle.split(" WHERE ")[1:] for o in reads)


def _parse(d: landing.Drop, path: Path) -> pa.Table:
    path.write_bytes(landing.content(d))
    if d.fmt == "csv":
        return pc.read_csv(path, convert_options=pc.ConvertOptions(
            column_types={"id": pa.int64(), "g": pa.int32(), "s": pa.string()}))
    return pq.read_table(path)


@pytest.mark.parametrize("bad", [None, *landing.BAD["csv"], *landing.BAD["parquet"]])
def test_landing_files_are_good_or_fail_whole(tmp_path: Path, bad: str | None) -> None:
    fmt = "parquet" if bad and bad.startswith("parquet") else "csv"
    d = landing.Drop(3, f"f00003.{fmt}", fmt, bad, [(300, 1, "it's, \"q\""), (301, 2, "p"),
                                                     (302, 3, "q")])
    assert landing.content(d) == landing.content(d)  # a resumed drop compares bytes
    if bad is None:
        got = _parse(d, tmp_path / d.name)
        assert list(zip(*(got.column(c).to_pylist() for c in ("id", "g", "s")),
                        strict=True)) == d.rows
        return
    with pytest.raises((pa.ArrowInvalid, OSError)):
        got = _parse(d, tmp_path / d.name)
        if bad == "parquet_type":  # readable: its g column is text, which mzflow refuses
            assert got.schema.field("g").type == pa.string()
            raise pa.ArrowInvalid("wrong type")


def test_drops_fix_bad_files_under_their_name() -> None:
    open_bad = ["f00002.csv"]
    drops = [landing.drop(7, n, open_bad) for n in range(3, 60)]
    fixes = [d for d in drops if d.fixes]
    assert fixes and all(d.name == "f00002.csv" and d.bad is None for d in fixes)
    assert any(d.bad for d in drops) and any(d.bad is None and not d.fixes for d in drops)
    recs: list[dict[str, Any]] = [
        {"ev": "place", "n": 1, "name": "a.csv", "bad": "csv_type"}, {"ev": "placed", "n": 1},
        {"ev": "place", "n": 2, "name": "b.csv", "bad": "csv_type"}, {"ev": "placed", "n": 2},
        {"ev": "place", "n": 3, "name": "a.csv", "bad": None}, {"ev": "placed", "n": 3},
        {"ev": "place", "n": 4, "name": "c.csv", "bad": "csv_short"}]  # not placed
    assert landing.open_bad(recs) == ["b.csv"]


def _landed(home: Path) -> tuple[Any, Journal, Path]:
    conn = mzflow.connect(str(home / "home"))
    for sql in landing.setup_sql(landing.folder(home / "home")):
        conn.execute(sql)
    return conn, Journal(home / "journals" / "landing.jsonl"), landing.folder(home / "home")


def _check(c: Checker, conn: Any) -> tuple[list[str], Counter]:
    """What wire_check._files gathers, returned instead of recorded."""
    recs = list(records(c.journals / wire_check.LANDING))
    tables = {}
    for fmt, name in landing.SOURCES.items():
        read = wire_check._delta_rows(conn, name, ["id"])
        assert read is not None
        tables[fmt] = (read[0], Counter(row[0] for row in read[1]))
    snap = conn.store.snapshot()
    fmt_of = {snap.find(name).id: fmt for fmt, name in landing.SOURCES.items()}
    history = [(fmt_of[r[0]], *r[1:]) for r in conn.execute(
        "SELECT table_id, path, identity, status, rows, table_version, error "
        "FROM mz_internal.mz_copy_history").rows if r[0] in fmt_of]
    return wire_check.check_files(recs, wire_check.finished_feeds(recs), tables, history)


def test_landing_folder_loads_good_files_once_and_records_bad_ones(tmp_path: Path) -> None:
    conn, j, where = _landed(tmp_path)
    rows = [[(n * 100 + i, i, "p") for i in range(3)] for n in range(6)]
    drops = [landing.Drop(1, "f1.csv", "csv", None, rows[1]),
             landing.Drop(2, "f2.csv", "csv", "csv_fields", rows[2]),
             landing.Drop(3, "f3.parquet", "parquet", "parquet_truncated", rows[3]),
             landing.Drop(4, "f4.parquet", "parquet", None, rows[4])]
    for d in drops:
        landing.place(j, where, d)
    landing.feed(conn, j)
    landing.place(j, where, landing.Drop(5, "f2.csv", "csv", None, rows[5], fixes=True))
    landing.feed(conn, j)
    landing.feed(conn, j)  # nothing new: nothing loads twice
    c = Checker(tmp_path / "home", tmp_path / "journals")
    violations, counts = _check(c, conn)
    assert violations == []
    assert counts["landing files loaded"] == 3 and counts["landing files failed"] == 2
    assert counts["landing fixed files loaded"] == 1
    assert sorted(conn.execute("SELECT id FROM src_csv").rows) == [
        (i,) for i, _, _ in rows[1] + rows[5]]
    # A resumed drop whose file is already in place is only journaled placed again.
    landing.place(j, where, landing.Drop(4, "f4.parquet", "parquet", None, rows[4]),
                  resumed=True)
    assert conn.execute("SELECT count(*) FROM src_pq").rows == [(3,)]
    # Tampered: a file placed before a finished feed that never loaded it.
    j.write(ev="place", n=7, name="f7.csv", fmt="csv", bad=None, rows=[[700, 1, "x"]])
    j.write(ev="placed", n=7, name="f7.csv", path=str(where / "f7.csv"), size=9, mtime_ns=1)
    j.write(ev="feed_start")
    j.write(ev="feed")
    violations, _ = _check(c, conn)
    assert violations == ["good file f7.csv (drop 7) placed before a finished tick of its "
                          "source's cluster but not loaded"]
    conn.close()


def test_check_files_finds_partial_double_and_bad_loads() -> None:
    recs = [{"ev": "place", "n": 1, "name": "a.csv", "fmt": "csv", "bad": None,
             "rows": [[100, 1, "x"], [101, 2, "y"]]},
            {"ev": "placed", "n": 1, "name": "a.csv", "path": "/l/a.csv", "size": 5,
             "mtime_ns": 9, "t": 1.0},
            {"ev": "place", "n": 2, "name": "b.csv", "fmt": "csv", "bad": "csv_short",
             "rows": [[200, 1, "x"], [201, 2, "y"]]},
            {"ev": "placed", "n": 2, "name": "b.csv", "path": "/l/b.csv", "size": 5,
             "mtime_ns": 9, "t": 1.0}]
    a, b = (wire_check.identity(f"/l/{x}.csv", 5, 9) for x in "ab")
    good = [("csv", "/l/a.csv", a, "loaded", 2, 1, None),
            ("csv", "/l/b.csv", b, "failed", None, None, "bad")]
    tables = {"csv": (1, Counter({100: 1, 101: 1})), "parquet": (0, Counter())}
    assert wire_check.check_files(recs, [(2.0, 3.0)], tables, good)[0] == []
    partial = {"csv": (1, Counter({100: 1, 200: 1})), "parquet": (0, Counter())}
    found = wire_check.check_files(recs, [], partial, good)[0]
    assert any("rows are in the table [1, 0] times" in v for v in found)
    assert any("rows of bad file b.csv" in v for v in found)
    twice = good + [("csv", "/l/a.csv", a, "loaded", 2, 1, None)]
    assert "file a.csv (drop 1) loaded 2 times" in wire_check.check_files(
        recs, [], tables, twice)[0]
    bad_loaded = [("csv", "/l/b.csv", b, "loaded", 2, 1, None)]
    assert any("bad file b.csv" in v and "loaded 2 rows" in v for v in
               wire_check.check_files(recs, [], tables, bad_loaded)[0])
    unknown = [("csv", "/l/z.csv", "copy:zz", "loaded", 1, 1, None)]
    assert wire_check.check_files(recs, [], tables, unknown)[0] == [
        "loaded a file the landing worker never placed: /l/z.csv"]


def test_wire_writes_are_exactly_once_all_or_nothing() -> None:
    started = {1: [10, 11], 2: [20], 3: [30, 31]}
    assert wire_check.writes_violations({1, 2}, started, Counter({10: 1, 11: 1, 20: 1})) == []
    found = wire_check.writes_violations({1, 2}, started, Counter(
        {10: 1, 11: 1, 30: 1, 900_000_005: 1}))
    assert found == ["tw holds rows no granted write made: ids [900000005]",
                     "wire write 2 finished but is not committed (lost)",
                     "wire write 3 partly committed: [1, 0] of ids [30, 31]"]
    assert wire_check.writes_violations(set(), started, Counter({20: 2})) == [
        "wire write 2 applied 2 times"]


def test_reads_and_denials_become_probes_and_violations(tmp_path: Path) -> None:
    j = Journal(tmp_path / wire_check.CLIENT)
    j.write(ev="wire_read", n=1, sql="s", oracle="SELECT 1", at=50, before=60, after=60,
            rows=[[1]])
    j.write(ev="wire_read", n=2, sql="s", oracle="SELECT 2", at=None, before=70, after=70,
            rows=[[2]])
    j.write(ev="wire_read", n=3, sql="s", oracle="SELECT 3", at=None, before=70, after=71,
            rows=[[3]])
    j.write(ev="denial", n=4, role="soak_nobody", sql="DROP TABLE t2", code="42501",
            outcome="refused")
    j.write(ev="denial", n=5, role="soak_nobody", sql="SELECT * FROM t1", code=None,
            outcome="lost")
    c = Checker(tmp_path / "home", tmp_path)
    probes = wire_check.read_probes(c)
    assert [(p[0], p[2][0]) for p in probes] == [(50, "SELECT 1"), (69, "SELECT 2")]
    assert c.violations == [] and c.counts["denial checks"] == 1
    assert c.counts["wire plain reads not checked (time moved)"] == 1
    assert wire_check.read_probes(c) == []  # each record once
    j.write(ev="denial", n=6, role="soak_writer", sql="SELECT * FROM tw", outcome="allowed")
    j.write(ev="denial", n=7, role="soak_reader", sql="SELECT * FROM t1", code="XX000",
            msg="boom", outcome="refused")
    j.write(ev="wire_read_error", n=8, sql="SELECT k FROM v_wire", code="42501", msg="no")
    wire_check.read_probes(c)
    assert len(c.violations) == 3
    assert c.violations[0].startswith("role soak_writer was allowed")


@pytest.mark.slow
def test_every_denial_is_refused_with_42501_over_the_wire(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each attempt DENIALS lists, as its role through a server, fails with 42501; each
    of READS is answered in process (with Spark made to fail), routed to t1's projection
    where it can be, with DuckDB's rows."""
    import duckdb

    from mzflow import config
    from mzflow.engine.spark import runtime
    from mzflow.projections import route
    from mzflow.read import local_reads
    from mzflow.server import make_server
    from mzflow_dev.soak import ops
    from mzflow_dev.soak.worker import _norm

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a read started Spark in the server")

    monkeypatch.setattr(runtime.SparkRuntime, "session", refuse)
    home = tmp_path / "home"
    duck = duckdb.connect()
    t1 = "(1, 1, 10, 'x'), (2, 1, NULL, 'y'), (3, 1, 4, NULL), (4, 2, 7, 'x'), (5, 3, 1, 'z')"
    t2 = "(1, 'ann', 10), (2, NULL, 20), (1, 'bob', NULL)"
    with mzflow.connect(str(home)) as conn:
        for db in (conn, duck):
            db.execute(f"CREATE TABLE t1 ({ops.TABLES['t1']})")
            db.execute(f"CREATE TABLE t2 ({ops.TABLES['t2']})")
        conn.execute(f"ALTER TABLE t1 ADD PROJECTION p0 ({ops.PROJECTIONS[0][1]})")
        for db in (conn, duck):
            db.execute(f"INSERT INTO t1 VALUES {t1}")
            db.execute(f"INSERT INTO t2 VALUES {t2}")
        for sql in wire.setup_sql():
            conn.execute(sql)
    srv = make_server(config.load(str(home)), port=0)
    srv.start()
    try:
        clients = wire.Clients(srv.port)
        j = Journal(tmp_path / "pgclient.jsonl")
        for n, (role, sql) in enumerate(wire.DENIALS, 1):
            wire.run(clients, j, n, wire.Op("deny", role, sql.format(id=n, n=n, k=1)))
        write = wire.Op("write", "soak_writer", how="copy", rows=[(5, 0, "it's")])
        wire.run(clients, j, 99, write)
        got = [r for r in records(j.path) if r["ev"] == "denial"]
        assert [(r["role"], r["code"]) for r in got] == [
            (role, "42501") for role, _ in wire.DENIALS]
        assert [r["ev"] for r in records(j.path)][-1] == "wire_write_done"
        # The reader's sessions route reads to projections (the default), in process.
        assert clients.get("soak_reader").execute(
            "SHOW optimize_use_projections").fetchone() == ("true",)
        routed, local = dict(route.ENGINE), dict(local_reads.ENGINE)
        for n, (sql, oracle) in enumerate(wire.READS, 100):
            wire.run(clients, j, n, wire.Op("read_plain", "soak_reader", sql.format(k=1),
                                            oracle.format(k=1)))
            got = [r for r in records(j.path) if r.get("n") == n]
            assert [r["ev"] for r in got] == ["wire_read"], got
            want = [[_norm(v) for v in row] for row in duck.execute(got[0]["oracle"]).fetchall()]
            assert sorted(map(repr, got[0]["rows"])) == sorted(map(repr, want)), got[0]
        view_reads = sum(1 for sql, _ in wire.READS if wire.VIEW in sql)
        assert route.ENGINE["arrow"] - routed["arrow"] == view_reads
        assert local_reads.ENGINE["arrow"] - local["arrow"] == len(wire.READS) - view_reads
        assert local_reads.ENGINE["spark"] == local["spark"]
        for c in clients.conns.values():
            c.close()
    finally:
        srv.stop()
    with mzflow.connect(str(home)) as conn:
        assert conn.execute("SELECT id, note FROM tw").rows == [(5, "it's")]
        for role, granted in wire.GRANTED.items():
            rows = conn.execute(f"SHOW PRIVILEGES FOR {role}").rows
            assert {(r[4], r[5], r[6]) for r in rows if r[1] == role} == granted
