"""A global top-k over a kept GROUP BY re-ranks the groups a tick changed against its
stored candidates (``incremental/rules/topk_state.py``); it re-ranks every group only
when too few candidates are left. Every tick is compared with DuckDB; the state rows a
tick reads are counted (never timed); a tick that fails between the state commit and
the index commit, then runs again, gives DuckDB's answer."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import mzflow
from mzflow.incremental.rules import reduce_state, topk_state
from mzflow.maintain.tick import commit
from mzflow.storage import paths
from mzflow.storage.delta import StateShard

pytestmark = [pytest.mark.slow, pytest.mark.spark]

# DuckDB sorts NULLs last in both directions: the views say where they go.
VIEWS = {
    "top": "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k "
           "ORDER BY s DESC NULLS LAST, k LIMIT 5",
    "shifted": "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k "
           "ORDER BY s DESC NULLS LAST, k LIMIT 4 OFFSET 3",
    # HAVING (a Filter) and a computed column (a Map) below the top-k
    "filtered": "SELECT k, sum(v) + count(*) AS score FROM t GROUP BY k "
              "HAVING count(*) > 1 ORDER BY score ASC NULLS LAST, k LIMIT 3",
    # the sort key is projected away above the top-k (written as a subquery: ORDER BY
    # an aggregate the SELECT list does not name fails to plan, in lower.py)
    "projected": "SELECT k FROM (SELECT k, max(v) AS m FROM t GROUP BY k "
                 "ORDER BY m DESC NULLS LAST, k LIMIT 4) AS x",
}


def normal(rows: list[tuple]) -> Counter:
    return Counter(tuple(float(x) if isinstance(x, int | float) and not isinstance(x, bool)
                         else x for x in r) for r in rows)


def values(rows: list[tuple]) -> str:
    return ", ".join("(" + ", ".join("NULL" if x is None else str(x) for x in r) + ")"
                     for r in rows)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ticks that ranked every group, by their state's version: a scan of the
    state on Spark, or in process every group of the state held in memory."""
    seen: list[int] = []
    for name in ("scan", "every"):
        original = getattr(reduce_state.KeptState, name)

        def counted(self: reduce_state.KeptState, *args: object,
                    original: Any = original) -> object:
            result = original(self, *args)
            if result is not None:
                seen.append(self.version or 0)
            return result

        monkeypatch.setattr(reduce_state.KeptState, name, counted)
    return seen


class Both:
    """mzflow and DuckDB, fed the same statements."""

    def __init__(self, conn: mzflow.Connection, db: duckdb.DuckDBPyConnection):
        self.conn, self.db = conn, db

    def run(self, *statements: str) -> None:
        for s in statements:
            self.conn.execute(s)
            self.db.execute(s)

    def check(self, views: dict[str, str], step: object) -> None:
        self.conn.execute("SET cluster = c")
        for name, sql in views.items():
            got = self.conn.execute(f"SELECT * FROM {name}").rows
            assert normal(got) == normal(self.db.execute(sql).fetchall()), (step, name)


@pytest.fixture
def both(tmp_path: Path) -> Iterator[Both]:
    db = duckdb.connect()
    with mzflow.connect(str(tmp_path / "home")) as conn:
        # Tiny tables make every batch "large": keep the switch from recomputing them.
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        conn.execute("CREATE CLUSTER c")
        b = Both(conn, db)
        b.run("CREATE TABLE t (k int, v int)")
        yield b


def _views(both: Both, views: dict[str, str]) -> None:
    for name, sql in views.items():
        both.conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER c AS {sql}")


def test_random_batches_equal_duckdb(both: Both, scans: list[int]) -> None:
    """Inserts, deletes and updates over 40 groups, a small margin: the ticks re-rank
    candidates most of the time, and fall back to every group when a batch changed
    or deleted too many of them (the top groups are deleted every fourth batch)."""
    both.conn.execute("ALTER SYSTEM SET topk_margin = 3")
    _views(both, VIEWS)
    rng = random.Random(15)

    def rows(n: int) -> list[tuple]:
        return [(rng.randrange(40), None if rng.random() < 0.05 else rng.randint(-20, 100))
                for _ in range(n)]

    both.run(f"INSERT INTO t VALUES {values(rows(200))}")
    both.conn.tick(cluster="c")
    both.check(VIEWS, "seed")
    for step in range(14):
        statements = [f"INSERT INTO t VALUES {values(rows(rng.randint(1, 8)))}"]
        if step % 4 == 3:  # the current leaders go: the candidates run out
            leaders = [k for (k,) in both.db.execute(
                "SELECT k FROM t GROUP BY k ORDER BY sum(v) DESC NULLS LAST, k "
                "LIMIT 6").fetchall()]
            statements.append(f"DELETE FROM t WHERE k IN ({', '.join(map(str, leaders))})")
        elif step % 3 == 1:
            statements.append(f"DELETE FROM t WHERE k = {rng.randrange(40)} AND "
                              f"v < {rng.randint(0, 60)}")
        else:
            statements.append(f"UPDATE t SET v = v + {rng.randint(1, 30)} "
                              f"WHERE k = {rng.randrange(40)}")
        both.run(*statements)
        reports = both.conn.tick(cluster="c")
        assert all("mode state" in r.strategy and r.error is None for r in reports), reports
        both.check(VIEWS, step)
    # The first tick builds the state from the input; later ones fell back now and
    # then, but most ranked the candidates and the changed groups only.
    fallbacks = len(scans)
    print(f"{fallbacks} of {len(VIEWS) * 14} ticks ranked every group")
    assert 3 <= fallbacks <= len(VIEWS) * 14 - 14, scans


def test_a_candidate_that_falls_behind_an_unchanged_group_is_dropped(
        both: Both, scans: list[int]) -> None:
    """LIMIT 1 and a margin of 1 keep two candidates. The leader falls to last: it ranks
    behind group 3, which is no candidate, so it must leave the candidates (else, once
    the other candidate goes, it would be taken for the top row)."""
    both.conn.execute("ALTER SYSTEM SET topk_margin = 1")
    view = {"one": "SELECT k, sum(v) AS s FROM t GROUP BY k ORDER BY s DESC, k LIMIT 1"}
    _views(both, view)
    both.run("INSERT INTO t VALUES (1, 100), (2, 90), (3, 80), (4, 70)")
    both.conn.tick(cluster="c")  # candidates: 1 and 2
    both.run("UPDATE t SET v = 10 WHERE k = 1")
    both.conn.tick(cluster="c")  # 2 is unchanged and ranks first: no scan
    both.check(view, "leader fell")
    assert not scans
    both.run("DELETE FROM t WHERE k = 2")
    both.conn.tick(cluster="c")  # no candidate left unchanged: every group ranked
    both.check(view, "second went")
    assert len(scans) == 1


def test_a_few_changed_groups_read_the_candidates_not_every_group(
        both: Both, scans: list[int]) -> None:
    """2,000 groups, a batch touching 3: the tick reads the candidates (LIMIT 5 plus the
    margin) and the changed groups from the state, not the 2,000. With no margin,
    deleting one leader leaves too few candidates: every group is read, once."""
    view = {"top": VIEWS["top"]}
    _views(both, view)
    for start in range(0, 2_000, 500):
        both.run("INSERT INTO t VALUES " + values(
            [(k, (k * 37) % 1_000) for k in range(start, start + 500)]))
    both.conn.tick(cluster="c")  # builds the state from the input, seeds the candidates
    margin = both.conn.execute("SHOW topk_margin").rows[0][0]
    assert int(margin) == 100

    before = reduce_state.STATE_ROWS_READ[0]
    both.run("INSERT INTO t VALUES (3, 1), (1500, 2), (2500, 4000)")
    both.conn.tick(cluster="c")
    both.check(view, "fast")
    read = reduce_state.STATE_ROWS_READ[0] - before
    assert not scans
    # the two existing changed groups, and the 5 + 100 candidates (2500 is new)
    assert read == 2 + 5 + 100, read

    both.conn.execute("ALTER SYSTEM SET topk_margin = 0")

    def delete_leaders(n: int) -> None:
        leaders = [str(k) for (k,) in both.db.execute(
            f"SELECT k FROM t GROUP BY k ORDER BY sum(v) DESC, k LIMIT {n}").fetchall()]
        both.run(f"DELETE FROM t WHERE k IN ({', '.join(leaders)})")

    delete_leaders(1)
    both.conn.tick(cluster="c")  # 104 candidates left: enough, and 5 kept from now on
    both.check(view, "margin 0")
    assert not scans
    before = reduce_state.STATE_ROWS_READ[0]
    delete_leaders(1)  # 4 candidates left, for 5 rows: every group is read
    both.conn.tick(cluster="c")
    both.check(view, "margin 0, fallback")
    assert len(scans) == 1
    assert reduce_state.STATE_ROWS_READ[0] - before >= 1_990


def test_a_tick_failing_between_state_and_index_commits_then_retried(
        both: Both, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state commit (groups and candidates, one Delta commit) lands, the index
    commit does not. The retry for the same time reads the state as of the index's
    time, finds its state commit applied, and commits the index; later ticks build on
    the candidates that commit recorded. A failure at one time retried at a later one
    ends the same."""
    both.conn.execute("ALTER SYSTEM SET topk_margin = 2")
    views = {n: VIEWS[n] for n in ("top", "shifted")}
    _views(both, views)
    rng = random.Random(4)
    both.run("INSERT INTO t VALUES " + values(
        [(rng.randrange(30), rng.randint(0, 100)) for _ in range(120)]))
    both.conn.tick(cluster="c")
    (index_id,) = both.conn.execute(
        "SELECT id FROM mz_indexes WHERE name = 'top_primary_idx'").rows[0]
    state = StateShard(paths.state(both.conn.config.warehouse, index_id))

    def fail(*args: object, **kwargs: object) -> int:
        raise RuntimeError("killed before the index commit")

    for retry_later in (False, True, False):
        (leader,) = both.db.execute("SELECT k FROM t GROUP BY k ORDER BY sum(v) DESC, k "
                                    "LIMIT 1").fetchone() or ()
        both.run(f"DELETE FROM t WHERE k = {leader}",
                 f"INSERT INTO t VALUES ({rng.randrange(30)}, {rng.randint(0, 300)})")
        at = both.conn.store.snapshot().read_ts
        version = state.version()
        with monkeypatch.context() as m:
            m.setattr(commit, "commit", fail)
            with pytest.raises(RuntimeError, match="killed"):
                both.conn.tick(object="top", at=at)
        assert state.version() == version + 1  # the state commit landed
        assert topk_state.KEYS_META in state.commit_metadata(version + 1)
        if retry_later:  # more changes, and the retry at a later time
            both.run(f"UPDATE t SET v = v + 50 WHERE k = {rng.randrange(30)}")
            both.conn.tick(cluster="c")
            assert state.version() == version + 2
        else:
            both.conn.tick(cluster="c", at=at)
            assert state.version() == version + 1  # applied once
        both.check(views, ("retried", retry_later))
        both.run(f"INSERT INTO t VALUES ({rng.randrange(30)}, {rng.randint(0, 300)})")
        both.conn.tick(cluster="c")
        both.check(views, ("after", retry_later))


@pytest.mark.parametrize("view", [
    {"top": VIEWS["top"]},
    # a plain GROUP BY: the failed tick's partials used to drive a count negative
    {"grouped": "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k"}])
def test_a_failed_ticks_state_commit_then_a_batch_that_cancels_it(
        both: Both, monkeypatch: pytest.MonkeyPatch, view: dict[str, str]) -> None:
    _views(both, view)
    both.run("INSERT INTO t VALUES (2, 5)")
    both.conn.tick(cluster="c")
    both.run("INSERT INTO t VALUES (1, 7)")
    with monkeypatch.context() as m:
        m.setattr(commit, "commit", lambda *a, **k: (_ for _ in ()).throw(
            RuntimeError("killed before the index commit")))
        with pytest.raises(RuntimeError, match="killed"):
            both.conn.tick(cluster="c")
    both.run("DELETE FROM t WHERE k = 1")  # the batch since the index's time: empty
    both.conn.tick(cluster="c")
    both.check(view, "cancelled")
    both.run("INSERT INTO t VALUES (1, 7)")
    both.conn.tick(cluster="c")
    both.check(view, "inserted again")  # the state still held the failed tick's row
