"""Ticks of state-mode views over the append-only state log (issue 34, item 2), every
one compared with DuckDB: a tick appends its change (counted in the Delta log, never
timed); a tick killed (SIGKILL) between its state append and its index commit loses
and duplicates nothing; another process ticking the same index makes this process's
memory of the state stale, which the next tick detects and catches up on; compaction
collapses the log and the ticks after it stay exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import mzflow
from mzflow.incremental.rules import reduce_state
from mzflow.storage import paths, state_memory
from mzflow.storage.delta import KEY, ROWS, StateShard

pytestmark = [pytest.mark.slow, pytest.mark.spark]

GROUPED = "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k"
TOP = "SELECT k, sum(v) AS s FROM t GROUP BY k ORDER BY s DESC, k LIMIT 3"


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
            got = Counter(self.conn.execute(f"SELECT * FROM {name}").rows)
            assert got == Counter(self.db.execute(sql).fetchall()), (step, name)

    def state(self, view: str) -> StateShard:
        (index_id,) = self.conn.execute(
            f"SELECT id FROM mz_indexes WHERE name = '{view}_primary_idx'").rows[0]
        return StateShard(paths.state(self.conn.config.warehouse, index_id))

    def groups_equal_duckdb(self, state: StateShard) -> None:
        """The state's newest row per group is DuckDB's groups, each once."""
        held = state.newest(state.version())
        assert held is not None
        rows = held.every()
        assert len(set(rows.column(KEY).to_pylist())) == rows.num_rows
        got = Counter(zip(rows.column("k").to_pylist(), rows.column(ROWS).to_pylist(),
                          strict=True))
        want = Counter(self.db.execute("SELECT k, count(*) FROM t GROUP BY k").fetchall())
        assert got == want

    def other_process(self, body: str) -> subprocess.CompletedProcess[bytes]:
        """``body`` run in another Python process on the same home (``c``: its session)."""
        home = str(self.conn.config.home)
        return subprocess.run(
            [sys.executable, "-c", f"import mzflow; c = mzflow.connect({home!r}); {body}"],
            env={**os.environ}, capture_output=True, timeout=300)


@pytest.fixture
def both(tmp_path: Path) -> Iterator[Both]:
    db = duckdb.connect()
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")  # keep tiny batches incremental
        conn.execute("CREATE CLUSTER c")
        b = Both(conn, db)
        b.run("CREATE TABLE t (k int, v int)")
        yield b


def _rows(keys: range, per: int) -> str:
    return ", ".join(f"({k}, {(k * 37 + i) % 100})" for k in keys for i in range(per))


def _entry(state: StateShard, version: int) -> dict:
    text = (state.path / "_delta_log" / f"{version:020d}.json").read_text()
    return next(json.loads(line)["commitInfo"] for line in text.splitlines()
                if '"commitInfo"' in line)


def test_a_tick_appends_its_change_and_another_process_ticking_is_caught_up(
        both: Both) -> None:
    both.conn.execute(f"CREATE MATERIALIZED VIEW g IN CLUSTER c AS {GROUPED}")
    both.run(f"INSERT INTO t VALUES {_rows(range(5_000), 2)}")
    both.conn.tick(cluster="c")  # builds the state: 5,000 groups
    state = both.state("g")
    # 20 groups changed: 10 updated, 5 gone, 5 new
    both.run("INSERT INTO t VALUES (1, 5), (2, 5), (3, 5), (4, 5), (5, 5), (6, 5), (7, 5), "
             "(8, 5), (9, 5), (10, 5)", "DELETE FROM t WHERE k BETWEEN 100 AND 104",
             "INSERT INTO t VALUES (6000, 1), (6001, 1), (6002, 1), (6003, 1), (6004, 1)")
    before, loaded, read = state.version(), state_memory.STATE_ROWS_LOADED[0], \
        reduce_state.STATE_ROWS_READ[0]
    (report,) = both.conn.tick(cluster="c")
    assert "mode state" in report.strategy and "rebuilt" not in report.strategy, report
    both.check({"g": GROUPED}, "a 20-group batch")
    assert state.version() == before + 1
    entry = _entry(state, before + 1)
    assert entry["operation"] == "WRITE", entry  # an append, no file rewritten
    metrics = entry["operationMetrics"]
    assert metrics["num_added_rows"] == 20 and metrics["num_removed_files"] == 0, metrics
    # the rebuild left the state in memory: no state file read, 15 existing groups looked up
    assert state_memory.STATE_ROWS_LOADED[0] == loaded
    assert reduce_state.STATE_ROWS_READ[0] - read == 15
    both.groups_equal_duckdb(state)

    # Another process ticks the same index: this one's memory is now behind the shard.
    both.run("INSERT INTO t VALUES (11, 1), (12, 1), (13, 1)")
    done = both.other_process("c.tick(object='g')")
    assert done.returncode == 0, done.stderr[-2000:]
    held = state_memory.cached(state.path, state._identity() or (0, 0))
    assert held is not None and held.version == state.version() - 1
    both.run("INSERT INTO t VALUES (13, 2), (14, 2)")
    loaded = state_memory.STATE_ROWS_LOADED[0]
    (report,) = both.conn.tick(cluster="c")
    assert "rebuilt" not in report.strategy, report
    both.check({"g": GROUPED}, "after another process ticked")
    # caught up by reading the other process's append only (its 3 groups)
    assert state_memory.STATE_ROWS_LOADED[0] - loaded == 3
    both.groups_equal_duckdb(state)


def test_killed_between_the_state_append_and_the_index_commit(both: Both) -> None:
    """kill -9 of a ticking process right after its state append: the state is ahead
    of its index; this process's next tick puts those groups back as they were, then
    applies its batch, once."""
    both.conn.execute(f"CREATE MATERIALIZED VIEW g IN CLUSTER c AS {GROUPED}")
    both.conn.execute(f"CREATE MATERIALIZED VIEW top IN CLUSTER c AS {TOP}")
    both.run(f"INSERT INTO t VALUES {_rows(range(300), 2)}")
    both.conn.tick(cluster="c")
    states = [both.state("g"), both.state("top")]
    versions = [s.version() for s in states]
    both.run("INSERT INTO t VALUES (1, 100), (2, 100), (500, 1)", "DELETE FROM t WHERE k = 7")
    killed = both.other_process(
        "import os, signal; from mzflow.maintain.tick import commit; "
        "commit.commit = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL); "
        "c.tick(object='g'); c.tick(object='top')")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert states[0].version() == versions[0] + 1  # its state append landed, alone
    assert states[1].version() == versions[1]
    both.run("INSERT INTO t VALUES (2, 1), (7, 3)")  # more changes, some to the same groups
    for report in both.conn.tick(cluster="c"):
        assert "rebuilt" not in report.strategy, report
    both.check({"g": GROUPED, "top": TOP}, "after the kill")
    both.groups_equal_duckdb(states[0])
    both.run("INSERT INTO t VALUES (500, 1), (9, 9)")
    both.conn.tick(cluster="c")
    both.check({"g": GROUPED, "top": TOP}, "the tick after")
    both.groups_equal_duckdb(states[0])


def test_compaction_collapses_the_log_and_ticks_stay_exact(both: Both) -> None:
    """Ticks append; a top-k without enough candidates ranks every group by scanning the
    log (each key's newest row, tombstones dropped); compaction overwrites the log
    with one row per group; ticks after it build on that and agree with DuckDB."""
    both.conn.execute("ALTER SYSTEM SET topk_margin = 0")
    views = {"g": GROUPED, "top": TOP}
    for name, sql in views.items():
        both.conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER c AS {sql}")
    both.run(f"INSERT INTO t VALUES {_rows(range(200), 1)}")
    both.conn.tick(cluster="c")
    state = both.state("top")
    for step in range(4):
        leader = both.db.execute("SELECT k FROM t GROUP BY k ORDER BY sum(v) DESC, k "
                                 "LIMIT 1").fetchone()
        assert leader is not None
        # the leader goes (a tombstone), another group rises: candidates run out
        both.run(f"DELETE FROM t WHERE k = {leader[0]}",
                 f"INSERT INTO t VALUES ({step}, {30 + step}), ({300 + step}, 50)")
        both.conn.tick(cluster="c")
        both.check(views, step)
    assert state.layout(state.version())[1], "appends since the rebuild"
    files = len(state.files(state.version()))
    done = both.conn.compact()
    kinds = [c for c in done if c.kind == "state"]
    assert len(kinds) == 2 and all(c.files_removed > 0 for c in kinds), done
    base, later = state.layout(state.version())
    assert later == [] and len(base) < files
    both.groups_equal_duckdb(both.state("g"))
    for step in range(3):
        both.run(f"DELETE FROM t WHERE k = {10 + step}",
                 f"INSERT INTO t VALUES ({400 + step}, 99), ({step}, 1)")
        for report in both.conn.tick(cluster="c"):
            assert "rebuilt" not in report.strategy, report
        both.check(views, ("after compaction", step))
    both.groups_equal_duckdb(both.state("g"))
