"""SUBSCRIBE: snapshot and change stream against DuckDB, progress, limits, the CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from test_sinks import VIEW_SQL, History, _norm

import mzflow
from mzflow.sql.parse import DIALECT, parse


def _setup(home: Path) -> tuple[mzflow.Connection, History, int]:
    conn = mzflow.connect(str(home))
    conn.execute("CREATE TABLE t (k int, g text, x numeric(10,2))")
    conn.execute(f"CREATE VIEW v AS {VIEW_SQL}")
    h = History(conn)
    h.write("INSERT INTO t VALUES (1, 'a', 1.50), (2, 'b', 2.25), (3, 'a', 0.25)",
            lambda rows: rows + [(1, "a", Decimal("1.50")), (2, "b", Decimal("2.25")),
                                 (3, "a", Decimal("0.25"))])
    as_of = conn.store.snapshot().read_ts
    h.write("UPDATE t SET x = x * 2 WHERE g = 'a'",
            lambda rows: [(k, g, x * 2 if g == "a" else x) for k, g, x in rows])
    h.write("INSERT INTO t VALUES (4, 'c', 9.99), (5, 'b', 1.00)",
            lambda rows: rows + [(4, "c", Decimal("9.99")), (5, "b", Decimal("1.00"))])
    h.write("DELETE FROM t WHERE k = 2",
            lambda rows: [r for r in rows if r[0] != 2])
    return conn, h, as_of


@pytest.mark.slow
@pytest.mark.spark
def test_subscribe_streams_the_true_changes(tmp_path: Path) -> None:
    conn, h, as_of = _setup(tmp_path / "home")
    end = conn.store.snapshot().read_ts
    for target, cols, view in (("t", ["k", "g", "x"], False),
                               ("v", ["g", "n", "total"], True),
                               ("(SELECT g, count(*) AS n, sum(x) AS total FROM t GROUP BY g)",
                                ["g", "n", "total"], True)):
        result = conn.execute(f"SUBSCRIBE {target} AS OF {as_of} UP TO {end + 1}")
        assert result.columns == ["mz_timestamp", "mz_diff", *cols]
        got = Counter((r[0], r[1]) + _norm(dict(zip(cols, r[2:], strict=True)), cols)
                      for r in result.rows)
        assert got == h.updates(as_of, True, view), target
        times = [r[0] for r in result.rows]
        assert times == sorted(times) and times[0] == as_of
    # Without the snapshot: only the changes after AS OF.
    rows = conn.execute(f"SUBSCRIBE t WITH (SNAPSHOT = false) AS OF {as_of} "
                        f"UP TO {end + 1}").rows
    assert {r[0] for r in rows} == {t for t, _ in h.states[1:]}
    conn.close()


@pytest.mark.slow
@pytest.mark.spark
def test_progress_rows_close_each_time(tmp_path: Path) -> None:
    conn, h, as_of = _setup(tmp_path / "home")
    up_to = conn.store.snapshot().read_ts + 50
    result = conn.execute(f"SUBSCRIBE v WITH (PROGRESS) AS OF {as_of} UP TO {up_to}")
    assert result.columns[:3] == ["mz_timestamp", "mz_progressed", "mz_diff"]
    closed = as_of - 1
    for ts, progressed, diff, *row in result.rows:
        if progressed:
            assert diff is None and row == [None, None, None] and ts > closed
            closed = ts - 1
        else:
            assert ts > closed, "a change at a time already closed by a progress row"
    assert result.rows[-1][:2] == (up_to, True)  # every time before UP TO is complete
    conn.close()


def test_subscribe_refuses_times_outside_since_and_upper(tmp_path: Path) -> None:
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (k int)")
    now = conn.store.snapshot().read_ts
    with pytest.raises(mzflow.Error, match=r"Timestamp \(5\) is not valid for all inputs: "
                                           r"materialize.public.t has since"):
        conn.execute("SUBSCRIBE t AS OF 5 UP TO 10")
    future = now + 3_600_000
    with pytest.raises(mzflow.Error, match=rf"Timestamp \({future}\) is not valid for all "
                                           r"inputs: it is past their upper"):
        conn.execute(f"SUBSCRIBE t AS OF {future} UP TO {future + 1}")
    with pytest.raises(mzflow.Error, match=r"UP TO \(1\) is before AS OF"):
        conn.execute(f"SUBSCRIBE t AS OF {now} UP TO 1")
    with pytest.raises(mzflow.Error, match="SUBSCRIBE without UP TO never ends"):
        conn.execute("SUBSCRIBE t")
    with pytest.raises(mzflow.Error, match='unexpected SUBSCRIBE option "FAST"'):
        conn.execute("SUBSCRIBE t WITH (FAST) UP TO 5")
    with pytest.raises(mzflow.Error, match="unknown catalog item 'nope'"):
        conn.execute("SUBSCRIBE nope UP TO 5")
    with pytest.raises(mzflow.Error, match="Expected \\) at line 1, column 31"):
        conn.execute("SUBSCRIBE (SELECT k FROM t UP TO 5")
    assert conn.execute(f"SUBSCRIBE t AS OF {now} UP TO {now}").rows == []
    conn.close()


def test_subscribe_statement_round_trips() -> None:
    for text in ("SUBSCRIBE t", "SUBSCRIBE t WITH (SNAPSHOT = FALSE, PROGRESS) AS OF 10 UP TO 20",
                 "SUBSCRIBE (SELECT a FROM t WHERE a > 1) AS OF AT LEAST 5"):
        stmt = parse(text)[0]
        assert parse(stmt.sql(dialect=DIALECT))[0] == stmt, text


@pytest.mark.slow
@pytest.mark.spark
def test_iterator_delivers_writes_as_they_commit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    conn, _, _ = _setup(home)
    sub = conn.subscribe("SUBSCRIBE t WITH (SNAPSHOT = false)", poll_seconds=0.05)
    written: list[float] = []

    def writer() -> None:
        time.sleep(1.0)
        with mzflow.connect(str(home)) as other:
            written.append(time.monotonic())
            other.execute("INSERT INTO t VALUES (42, 'z', 4.20)")

    threading.Thread(target=writer).start()
    row = next(iter(sub))
    arrived = time.monotonic()
    assert row[1:] == (1, 42, "z", Decimal("4.20"))
    print(f"SUBSCRIBE: a write arrived {arrived - written[0]:.2f} s after it was issued")
    conn.close()


@pytest.mark.slow
@pytest.mark.spark
def test_cli_prints_changes_until_interrupted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    conn = mzflow.connect(str(home))
    conn.execute("CREATE TABLE t (k int, v text)")
    conn.execute("INSERT INTO t VALUES (1, 'one')")
    # Ctrl-C as a terminal sends it: SIGINT at its default, even when this test process
    # inherited it ignored (a make test started with `&` does; Python then never installs
    # its KeyboardInterrupt handler in the child).
    proc = subprocess.Popen([sys.executable, "-m", "mzflow.cli", "--home", str(home),
                             "subscribe", "t", "--poll", "0.05"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["mz_timestamp", "mz_diff", "k", "v"]
        assert proc.stdout.readline().split()[1:] == ["1", "1", "one"]  # the snapshot
        conn.execute("INSERT INTO t VALUES (2, 'two')")
        conn.execute("DELETE FROM t WHERE k = 1")
        assert proc.stdout.readline().split()[1:] == ["1", "2", "two"]
        assert proc.stdout.readline().split()[1:] == ["-1", "1", "one"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    # With UP TO it ends by itself, after the last time before it.
    end = conn.store.snapshot().read_ts
    done = subprocess.run([sys.executable, "-m", "mzflow.cli", "--home", str(home), "subscribe",
                           f"SUBSCRIBE t WITH (PROGRESS) UP TO {end + 1}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line.split("\t") for line in done.stdout.splitlines()]
    assert lines[0] == ["mz_timestamp", "mz_progressed", "mz_diff", "k", "v"]
    assert lines[1][1:] == ["f", "1", "2", "two"] and lines[-1][:2] == [str(end + 1), "t"]
    conn.close()
