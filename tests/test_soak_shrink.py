"""Shrinking a failing soak history (mzflow_dev/soak/shrink.py, replay.py, history.py).

A deliberate bug makes a known history fail: the oracle ignores one statement (the
checker's ``MZFLOW_SOAK_ORACLE_BUG`` hook, or the fake replay's own oracle). Shrinking
must come back with a short history that holds the culprit, what it depends on, and
still fails. The fast tests run the shrinker over a fake replay (SQLite as both the
system and the oracle, no mzflow); the slow one replays through mzflow itself."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mzflow_dev.soak import history, ops, replay
from mzflow_dev.soak.shrink import Stats, ddmin, plausible

# -- ddmin over plain items ----------------------------------------------------------


def test_ddmin_keeps_the_culprit_and_what_it_needs() -> None:
    # Fails when 150 comes after 3 (a write after the DDL it needs) and 90 is there.
    def fails(c: list[int]) -> bool:
        return 3 in c and 150 in c and 90 in c and c.index(3) < c.index(150)

    stats = Stats()
    assert ddmin(list(range(200)), fails, deadline=float("inf"), stats=stats) == [3, 90, 150]
    assert stats.reproduced >= 1 and not stats.timed_out


def test_ddmin_stops_at_its_deadline_with_a_failing_history() -> None:
    def fails(c: list[int]) -> bool:
        return 7 in c and 180 in c

    clock = iter(range(10_000))  # every look at the clock is one tick later
    stats = Stats()
    got = ddmin(list(range(200)), fails, deadline=12, clock=lambda: next(clock), stats=stats)
    assert stats.timed_out
    assert fails(got) and 2 < len(got) < 200  # shorter, not minimal: time ran out
    assert got == sorted(got)  # a sub-history keeps the order


def test_plausible_refuses_what_would_fail_on_an_unknown_name() -> None:
    t1 = {"op": "sql", "sql": "CREATE TABLE t1 (id int, k int, v int, s text)"}
    pv = {"op": "sql", "sql": "CREATE VIEW pv5 AS SELECT DISTINCT name FROM t2"}
    t2 = {"op": "sql", "sql": "CREATE TABLE t2 (k int, name text, w int)"}
    c1 = {"op": "sql", "sql": "CREATE CLUSTER c1 SIZE 'small'"}
    mv = {"op": "sql", "sql": "CREATE MATERIALIZED VIEW dv6 IN CLUSTER c1 AS SELECT * FROM pv5"}
    drop = {"op": "sql", "sql": "DROP VIEW IF EXISTS pv5 CASCADE"}
    write = {"op": "write", "table": "t1", "sql": "INSERT INTO t1 VALUES (1, 2, 3, 't2')"}
    tick = {"op": "tick", "view": "dv6"}
    assert plausible([t1, write])  # 't2' is a string, not the table
    assert not plausible([write])
    assert plausible([t2, pv, c1, mv, tick])
    assert not plausible([t2, c1, mv, tick])  # pv5 missing
    assert not plausible([t2, pv, mv, tick])  # cluster c1 missing
    assert not plausible([t2, pv, c1, mv, drop, tick])  # CASCADE took dv6
    assert plausible([drop])  # IF EXISTS


def test_signature_and_target_of_a_violation() -> None:
    v = "index dv12 at 1700000000123 differs from the oracle: extra [((3, 1), 1)], missing []"
    assert history.target(v) == ("index", "dv12", 1700000000123)
    assert history.signature(v) == "index dv12 differs from the oracle"
    assert history.signature(v.replace("123", "999")) == history.signature(v)
    w = "write ('w1', 17) applied 2 times: ['t1 v3', 't1 v9']: INSERT INTO t1 VALUES (1)"
    assert history.signature(w) == "write ('w1', #) applied # times"


# -- the whole shrinker over a fake replay -------------------------------------------


def _soak_like_history(seed: int) -> list[dict[str, Any]]:
    """Setup, then writers' seeded writes (ops.write_op) interleaved, with ticks and
    compactions between: the shape history.build gives."""
    out: list[dict[str, Any]] = []
    for sql in ops.setup_sql("90s", f"{history.WORKDIR}/sinks"):
        out.append({"op": "sql", "sql": sql})
    for n in range(1, 61):
        for widx, worker in ((1, "w1"), (2, "w2")):
            op = ops.write_op(seed, worker, widx, n, widx == 1, Path("/nowhere"))
            out.append({"op": "write", "worker": worker, "n": n, "table": op.table,
                        "sql": op.sql, "oracle": op.oracle or op.sql})
        if n % 7 == 0:
            out.append({"op": "tick", "view": "mv_agg"})
        if n % 13 == 0:
            out.append({"op": "compact"})
    for i, op in enumerate(out):
        op["key"] = i
    return out


def _fake_replay(culprit: int | None):
    """A replay without mzflow: SQLite runs every write as the system would and as the
    oracle would, except the oracle ignores the operation with key ``culprit``; a
    table that ends up different is the violation the checker would report."""
    import sqlite3

    def run(cand: list[dict[str, Any]], workdir: Path, deadline: float | None = None
            ) -> replay.Outcome:
        system, oracle = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
        made = []
        for op in cand:
            try:
                if op["op"] == "sql" and op["sql"].startswith("CREATE TABLE"):
                    system.execute(op["sql"])
                    oracle.execute(op["sql"])
                    made.append(op["sql"].split()[2])
                elif op["op"] == "write":
                    system.execute(op["oracle"])
                    if op["key"] != culprit:
                        oracle.execute(op["oracle"])
            except sqlite3.Error as exc:
                return replay.Outcome(error=str(exc))
        out = replay.Outcome()
        for t in made:
            got = Counter(system.execute(f"SELECT * FROM {t}").fetchall())
            want = Counter(oracle.execute(f"SELECT * FROM {t}").fetchall())
            if got != want:
                out.violations.append(f"table {t} at 5 differs from the oracle: {got - want}")
        return out

    return run


def _culprit(h: list[dict[str, Any]]) -> dict[str, Any]:
    """The first DELETE FROM t1 whose omission leaves the final t1 different."""
    for op in h:
        if op["op"] == "write" and op["sql"].startswith("DELETE FROM t1"):
            if _fake_replay(op["key"])(h, Path("/nowhere")).violations:
                return op
    raise AssertionError("no DELETE of the seeded history matters")


@pytest.mark.parametrize("seed", [1, 2])
def test_shrink_finds_the_ignored_delete(seed: int, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    h = _soak_like_history(seed)
    culprit = _culprit(h)
    fake = _fake_replay(culprit["key"])
    violation = fake(h, tmp_path).violations[0]
    monkeypatch.setattr(replay, "replay", fake)
    report = replay.shrink(h, violation, tmp_path, seconds=600, say=lambda _: None)
    assert report.reproduced and report.confirmed
    got = report.history
    assert culprit in got
    # The table, a write that put a row the DELETE removes, the DELETE; perhaps one
    # more write the row needs (an UPDATE moving it into the DELETE's range).
    assert got[0]["sql"].startswith("CREATE TABLE t1")
    assert 3 <= len(got) <= 4, history.as_sql(got)
    assert all(op["op"] == "write" and op["table"] == "t1" for op in got[1:])
    assert [h.index(op) for op in got] == sorted(h.index(op) for op in got)
    assert fake(got, tmp_path).violations  # and it still fails
    assert len(h) > 130 and report.stats.replays < report.stats.tested


def test_shrink_says_when_a_serial_replay_does_not_reproduce(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = _soak_like_history(1)
    monkeypatch.setattr(replay, "replay", _fake_replay(None))  # nothing is wrong in replay
    report = replay.shrink(h, "write ('w1', 5) applied 2 times: [...]", tmp_path, seconds=600,
                           say=lambda _: None)
    assert not report.reproduced and report.history == h
    assert report.note == "not reproduced by a serial replay"
    monkeypatch.setattr(replay, "replay", _fake_replay(_culprit(h)["key"]))
    late = replay.shrink(h, "table t1 at 5 differs from the oracle: …", tmp_path, seconds=0,
                         say=lambda _: None)
    assert not late.reproduced and late.note.startswith("time ran out")


# -- building the history from a soak's journals -------------------------------------


def test_build_orders_committed_operations(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    j = tmp_path / "journals"
    j.mkdir()

    def journal(name: str, *recs: dict[str, Any]) -> None:
        (j / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    journal("setup", {"ev": "done", "sql": "CREATE TABLE t1 (id int)", "t": 1.0},
            {"ev": "done", "sql": f"CREATE SINK s_t2 INTO PARQUET '{tmp_path}/sinks/s'",
             "t": 1.001},
            {"ev": "done", "sql": "CREATE MATERIALIZED VIEW mv_agg AS SELECT 3", "t": 1.002})
    journal("ddl",
            {"ev": "start", "n": 1, "sql": "CREATE MATERIALIZED VIEW dv1 IN CLUSTER c1 AS "
             "SELECT 1", "view": "dv1", "t": 5.0},
            {"ev": "done", "n": 1, "sql": "…", "t": 5.2},
            {"ev": "start", "n": 2, "sql": "CREATE VIEW pv2 AS SELECT 2", "t": 6.0},  # killed
            {"ev": "start", "n": 3, "sql": "ALTER TABLE t3 ADD COLUMN x3 int", "t": 7.0})
    journal("ticker", {"ev": "tick", "view": "dv1", "upper": 4001, "t": 9.0},  # time < CREATE
            # mv_agg's ticks come from its index's log (one killed before this record).
            {"ev": "tick", "view": "mv_agg", "upper": 3401, "t": 9.5},
            {"ev": "read", "view": "mv_agg", "at": 3000, "rows": [], "t": 9.6})
    log = tmp_path / "warehouse" / "u9" / "_delta_log"
    log.mkdir(parents=True)
    for v, actions in enumerate([
            [{"commitInfo": {"operation": "CREATE TABLE", "mzflow.ts": "1"}}],
            [{"commitInfo": {"operation": "MERGE", "mzflow.ts": "3000"}},
             {"txn": {"appId": "tick-u9", "version": 3000}}],
            [{"commitInfo": {"operation": "OPTIMIZE", "mzflow.ts": "3000"}}],
            [{"commitInfo": {"operation": "WRITE", "mzflow.ts": "3600"}},
             {"txn": {"appId": "tick-u9", "version": 3600}}]]):
        (log / f"{v:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))
    journal("compactor", {"ev": "compact", "t": 8.0}, {"ev": "sink", "sink": "s_t2", "t": 8.5})
    (tmp_path / "copy").mkdir()
    pq.write_table(pa.table({"id": [7, None]}), tmp_path / "copy" / "w1-2.parquet")
    writes = {("w1", 1): SimpleNamespace(worker="w1", n=1, sql="INSERT INTO t1 VALUES (1)",
                                         oracle="INSERT INTO t1 VALUES (1)"),
              ("w1", 2): SimpleNamespace(worker="w1", n=2, oracle="INSERT …",
                                         sql=f"COPY t1 FROM '{tmp_path}/copy/w1-2.parquet'")}
    checker: Any = SimpleNamespace(writes=lambda: writes,
                                   committed=[(3000, "t1", 1, ("w1", 1)),
                                              (3500, "t1", 2, ("w1", 2))])
    t3 = SimpleNamespace(columns=[SimpleNamespace(name=c) for c in ("id", "a", "x3")])
    items = {i.id: i for i in [
        SimpleNamespace(id="u7", name="dv1", kind="materialized-view", is_default_index=False),
        SimpleNamespace(id="u5", name="mv_agg", kind="materialized-view", is_default_index=False),
        SimpleNamespace(id="u9", name="mv_agg_primary_idx", kind="index", is_default_index=True,
                        on_id="u5")]}
    snap: Any = SimpleNamespace(items=list(items.values()), item=items.__getitem__,
                                find=lambda n: t3 if n == "t3" else None,
                                projections=[], expectations=[])
    got = history.build(tmp_path, checker, snap, tmp_path / "warehouse")
    assert [(o["op"], o.get("sql") or o.get("view") or o.get("sink") or "") for o in got] == [
        ("sql", "CREATE TABLE t1 (id int)"),
        ("sql", "CREATE SINK s_t2 INTO PARQUET '$WORKDIR/sinks/s'"),
        ("sql", "CREATE MATERIALIZED VIEW mv_agg AS SELECT 3"),
        ("write", "INSERT INTO t1 VALUES (1)"),  # at 3000
        ("tick", "mv_agg"),  # through 3000: after the write it covered
        ("read", "mv_agg"),
        ("write", "COPY t1 FROM '$WORKDIR/copy/w1-2.parquet'"),  # at 3500
        ("tick", "mv_agg"),  # through 3600 (the OPTIMIZE between is no tick)
        ("sql", "CREATE MATERIALIZED VIEW dv1 IN CLUSTER c1 AS SELECT 1"),  # done at 5200
        ("tick", "dv1"),  # through 4000, moved after its view's CREATE
        ("sql", "ALTER TABLE t3 ADD COLUMN x3 int"),  # killed, but t3 has x3
        ("compact", ""), ("sink", "s_t2")]
    assert got[6]["rows"] == [[7], [None]]
    assert not any("pv2" in o.get("sql", "") for o in got)  # killed before it committed


# -- the real replay -------------------------------------------------------------------


@pytest.mark.slow
def test_shrink_through_mzflow_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker's oracle ignores one INSERT into t3 that names a column added by
    ALTER TABLE; mzflow replays candidates (no Spark: no tick, UPDATE or DELETE). The
    shrunk history is the table, the ALTER and the INSERT."""
    monkeypatch.setenv("MZFLOW_SOAK_ORACLE_BUG", "INSERT INTO t3 (id, a, x9)")
    h: list[dict[str, Any]] = [{"op": "sql", "sql": s}
                               for s in ops.setup_sql("90s", f"{history.WORKDIR}/sinks")]

    def write(worker: str, n: int, table: str, sql: str, **kw: Any) -> None:
        h.append({"op": "write", "worker": worker, "n": n, "table": table, "sql": sql,
                  "oracle": sql, **kw})  # a COPY's oracle: the INSERT of its rows

    write("w1", 1, "t1", "INSERT INTO t1 VALUES (10, 3, 5, 'x'), (11, 4, NULL, NULL)")
    write("w2", 1, "t3", "INSERT INTO t3 (id, a) VALUES (20, 1)")
    h.append({"op": "sql", "sql": "ALTER TABLE t3 ADD COLUMN x9 int"})
    write("w2", 2, "t2", "INSERT INTO t2 VALUES (3, 'ann', 7)")
    write("w1", 2, "t1", f"COPY t1 FROM '{history.WORKDIR}/copy/w1-2.parquet' WITH "
          "(FORMAT parquet)", rows=[[12, 5, 6, "y"]],
          oracle="INSERT INTO t1 VALUES (12, 5, 6, 'y')")
    culprit = "INSERT INTO t3 (id, a, x9) VALUES (21, 2, 8)"
    write("w2", 3, "t3", culprit)
    write("w1", 3, "t1", "INSERT INTO t1 VALUES (13, 3, 9, 'z')")
    for i, op in enumerate(h):
        op["key"] = i
    out = replay.replay(h, tmp_path / "full")
    assert out.error is None and out.violations, out
    violation = next(v for v in out.violations if v.startswith("table t3"))
    report = replay.shrink(h, violation, tmp_path / "shrink", seconds=600, say=lambda _: None)
    assert report.reproduced and report.confirmed, report.stats.log
    assert [op["sql"] for op in report.history] == [
        "CREATE TABLE t3 (id int, a int)", "ALTER TABLE t3 ADD COLUMN x9 int", culprit]
    again = replay.replay(report.history, tmp_path / "again")
    assert any(history.signature(v) == history.signature(violation) for v in again.violations)


@pytest.mark.slow
def test_shrink_a_quarantine_violation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle forgets the quarantine's rows: the shrunk history keeps the table, its
    QUARANTINE expectation and the one write whose row fails it; projection DDL, a
    projection-shaped read and the other writes go."""
    monkeypatch.setenv("MZFLOW_SOAK_ORACLE_BUG", f"INSERT INTO {ops.QUARANTINE}")
    h: list[dict[str, Any]] = [{"op": "sql", "sql": s} for s in [
        "CREATE TABLE t1 (id int, k int, v int, s text)",
        "CREATE TABLE t2 (k int, name text, w int)",
        f"ALTER TABLE t1 ADD PROJECTION p0 ({ops.PROJECTIONS[0][1]})"]]

    def write(worker: str, n: int, table: str, sql: str) -> None:
        h.append({"op": "write", "worker": worker, "n": n, "table": table, "sql": sql,
                  "oracle": sql})

    write("w1", 1, "t1", "INSERT INTO t1 VALUES (10, 3, 5, 'x'), (11, 4, NULL, NULL)")
    h.append({"op": "sql", "sql": "ALTER TABLE t2 ADD CONSTRAINT e2 EXPECT (w IS NULL OR "
                                  "w >= 0) ON VIOLATION QUARANTINE"})
    write("w2", 1, "t2", "INSERT INTO t2 VALUES (3, 'ann', 7)")
    h.append({"op": "query", "sql": "SELECT k, sum(v), count(*) FROM t1 GROUP BY k",
              "as_of": None})
    culprit = "INSERT INTO t2 VALUES (4, 'bob', -3), (5, NULL, 1)"
    write("w2", 2, "t2", culprit)
    h.append({"op": "sql", "sql": "ALTER TABLE t1 DROP PROJECTION IF EXISTS p0"})
    write("w1", 2, "t1", "INSERT INTO t1 VALUES (12, 3, 9, 'z')")
    for i, op in enumerate(h):
        op["key"] = i
    out = replay.replay(h, tmp_path / "full")
    assert out.error is None and out.violations, out
    violation = next(v for v in out.violations if v.startswith("quarantine"))
    report = replay.shrink(h, violation, tmp_path / "shrink", seconds=600, say=lambda _: None)
    assert report.reproduced and report.confirmed, report.stats.log
    assert [op["sql"] for op in report.history] == [
        "CREATE TABLE t2 (k int, name text, w int)", h[4]["sql"], culprit]
