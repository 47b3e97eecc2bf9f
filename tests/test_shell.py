"""The interactive shell (`mzflow sql`), driven in a pseudo-terminal as a user types.

Tests that drive a shell in a child process are slow; those marked spark also start
Spark in it (a read of a table). The rest run the shell's parts in this process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

import mzflow
from mzflow.shell import complete, describe
from mzflow.shell.output import format_expanded
from mzflow.shell.repl import Shell
from mzflow.shell.split import Splitter

PROMPT = "mzflow=> "
MORE = "mzflow-> "
UP = "\x1b[A"
JVM_NOISE = ("WARNING: Using incubator modules", "Setting default log level",
             "sc.setLogLevel", "NativeCodeLoader", "WARN ")


class Term:
    """``mzflow sql`` in a pseudo-terminal; everything it showed is kept in ``screen``."""

    def __init__(self, home: Path, timeout: float = 60):
        env = {**os.environ, "MZFLOW_HOME": str(home), "TERM": "xterm",
               "INPUTRC": "/dev/null", "COLUMNS": "120", "LINES": "40"}
        # SIGINT at its default, as in a user's terminal, even when this test process
        # inherited it ignored (a make test started with `&` does: Ctrl-C then did
        # nothing in the child, and the Ctrl-C tests failed).
        self.child = pexpect.spawn(sys.executable, ["-m", "mzflow.cli", "sql"], env=env,
                                   encoding="utf-8", timeout=timeout, dimensions=(40, 120),
                                   preexec_fn=_default_sigint)
        self.screen = ""
        self.expect(PROMPT)

    def expect(self, pattern: str, timeout: float | None = -1) -> str:
        """Wait for ``pattern`` (literal text); return what came before it."""
        self.child.expect_exact(pattern, timeout=timeout)
        before = _plain(self.child.before)
        self.screen += before + _plain(self.child.after)
        return before

    def run(self, line: str, until: str = PROMPT, timeout: float | None = -1) -> str:
        """Type ``line`` and Enter; return the output up to the next prompt."""
        self.child.sendline(line)
        return self.expect(until, timeout)

    def quit(self) -> None:
        self.child.sendline("\\q")
        self.child.expect(pexpect.EOF)
        self.screen += _plain(self.child.before)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _plain(text: object) -> str:
    """The text a user reads: terminal control sequences removed."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", text) if isinstance(text, str) else ""


def sql(home: Path, text: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MZFLOW_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "mzflow.cli", "sql", "-c", text],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Term]:
    t = Term(tmp_path)
    yield t
    t.child.terminate(force=True)


# -- in a terminal, without Spark ---------------------------------------------------------

@pytest.mark.slow  # a shell in a child process
def test_meta_command_runs_at_once_and_the_next_statement_is_not_lost(tmp_path: Path) -> None:
    sql(tmp_path, "CREATE TABLE t (a int, b text)")
    term = Term(tmp_path)
    listing = term.run("\\d")  # answered at once: the next prompt is a fresh one
    assert "List of relations" in listing and "| t    | table" in listing
    out = term.run("INSERT INTO t VALUES (1, 'x');")
    assert "INSERT 0 1" in out and "ERROR" not in out
    assert "\\d" not in out
    term.quit()
    # The row is in the table's Delta log: read it without Spark.
    from deltalake import DeltaTable

    from mzflow.session.writes import shard_of

    with mzflow.connect(str(tmp_path)) as conn:
        path = shard_of(conn.config.warehouse, conn.store.snapshot().resolve("t")).path
    assert DeltaTable(str(path)).to_pyarrow_table(columns=["a", "b"]).to_pylist() == [
        {"a": 1, "b": "x"}]


@pytest.mark.slow  # a shell in a child process
def test_unknown_meta_command_is_answered_and_never_merged(term: Term) -> None:
    out = term.run("\\foo")
    assert "invalid command \\foo; try \\? for help" in out
    # Typed in the middle of a statement, it is still a command of its own, and the
    # statement goes on.
    term.run("SHOW", until=MORE)
    assert "invalid command \\bar" in term.run("\\bar", until=MORE)
    out = term.run("CLUSTERS;")
    assert " default" in out and "ERROR" not in out


@pytest.mark.slow  # a shell in a child process
def test_ctrl_c_discards_pending_input_visibly(term: Term) -> None:
    term.run("SHOW", until=MORE)
    term.child.sendcontrol("c")
    assert "Query buffer reset" in term.expect(PROMPT)
    out = term.run("SHOW CLUSTERS;")
    assert " default" in out and "ERROR" not in out


@pytest.mark.slow  # a shell in a child process
def test_set_variables_survive_errors(term: Term) -> None:
    term.run("CREATE CLUSTER c1;")
    term.run("SET cluster = c1;")
    assert "ERROR: unknown cluster 'nope'" in term.run("DROP CLUSTER nope;")
    assert "ERROR" in term.run("SELEC 1;")
    assert " c1" in term.run("SHOW cluster;")


@pytest.mark.slow  # a shell in a child process
def test_history_survives_a_restart_and_keeps_statements_whole(tmp_path: Path) -> None:
    term = Term(tmp_path)
    term.run("CREATE CLUSTER hist;")
    term.run("SHOW CLUSTERS", until=MORE)
    term.run("LIKE 'h%';")
    term.quit()
    assert (tmp_path / "sql_history").read_text().splitlines() == [
        "CREATE CLUSTER hist;", "SHOW CLUSTERS\x01LIKE 'h%';", "\\q"]
    again = Term(tmp_path)
    again.child.send(UP + UP)  # past \q, the two-line statement comes back as one entry
    again.child.send("\r")
    out = again.expect(PROMPT)
    assert " hist" in out and "(1 row)" in out
    again.quit()


@pytest.mark.slow  # a shell in a child process
def test_tab_completes_a_table_name_and_a_cluster(tmp_path: Path) -> None:
    sql(tmp_path, "CREATE TABLE orders_2026 (amount int); CREATE CLUSTER analytics")
    term = Term(tmp_path)
    term.child.send("SHOW COLUMNS FROM ord\t")
    term.child.sendline(";")
    out = term.expect(PROMPT)
    assert "orders_2026" in out and "amount" in out and "ERROR" not in out
    term.child.send("SHOW INDEXES IN CLUSTER ana\t")
    term.child.sendline(";")
    out = term.expect(PROMPT)
    assert "IN CLUSTER analytics" in out and "ERROR" not in out
    term.quit()


@pytest.mark.slow  # a shell in a child process
def test_sql_c_runs_a_meta_command(tmp_path: Path) -> None:
    sql(tmp_path, "CREATE TABLE t (a int NOT NULL); CREATE MATERIALIZED VIEW mv AS "
                  "SELECT a, count(*) AS n FROM t GROUP BY a")
    out = sql(tmp_path, "\\d mv")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == 'Materialized view "public.mv"'
    assert "Cluster: default" in lines
    assert any(line.startswith('Maintained by "mv_primary_idx": never ticked') for line in lines)
    assert "  Strategy: incremental" in lines
    assert " a      | integer | not null |" in lines
    missing = sql(tmp_path, "\\d nope")
    assert missing.returncode == 1
    assert 'ERROR: Did not find any relation named "nope".' in missing.stderr


# -- the shell's parts, in-process ----------------------------------------------------------

def test_splitter_ends_statements_only_outside_quotes_and_comments() -> None:
    s = Splitter()
    assert s.feed("SELECT 'a;b', \"c;\" -- d;") == []
    assert s.feed("/* e; /* nested; */ f; */ ; SELECT 2; SELECT") == [
        "SELECT 'a;b', \"c;\" -- d;\n/* e; /* nested; */ f; */ ;", "SELECT 2;"]
    assert s.pending == " SELECT\n"
    assert s.feed("'it''s'") == [] and s.in_literal is False
    assert s.feed("'open") == [] and s.in_literal and s.quote_char == "'"
    assert s.feed("';") == [" SELECT\n'it''s'\n'open\n';".strip()]
    assert s.pending == ""


def test_completion_candidates() -> None:
    names = complete.Names(relations=["orders", "other"], objects=["orders", "orders_idx"],
                           clusters=["analytics", "default"],
                           columns={"orders": ["amount", "id"], "other": ["x"]})
    c = complete.Completer(lambda: names, lambda: "")
    assert c.candidates("", "SELECT * FROM ", "or") == ["orders"]
    assert c.candidates("SELECT\n", "FROM orders WHERE ", "am") == ["amount"]
    assert c.candidates("", "SELECT ", "orders.i") == ["orders.id"]
    assert c.candidates("", "CREATE INDEX i IN CLUSTER ", "") == ["analytics", "default"]
    assert c.candidates("", "sel", "sel") == ["select"]
    assert c.candidates("", "\\d ", "orders_") == ["orders_idx"]


def test_expanded_timing_output_and_include(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with mzflow.connect(str(tmp_path)) as conn:
        shell = Shell(conn)
        shell.feed("\\x")
        shell.feed("SELECT id, name FROM mz_clusters;")
        out = capsys.readouterr().out
        assert "Expanded display is on." in out
        assert format_expanded(["id", "name"], [(1, "default")]) in out
        assert "-[ RECORD 1 ]" in out and "name | default" in out
        shell.feed("\\x off")
        shell.feed("\\timing on")
        shell.feed("SHOW CLUSTERS;")
        assert re.search(r"Time: \d+\.\d{3} ms", capsys.readouterr().out)
        script = tmp_path / "script.sql"
        script.write_text("CREATE CLUSTER from_file;\n\\dc from*\n")
        result = tmp_path / "out.txt"
        shell.feed(f"\\o {result}")
        shell.feed(f"\\i {script}")
        shell.feed("\\o")
        assert "CREATE CLUSTER" in result.read_text() and " from_file" in result.read_text()
        assert "from_file" not in capsys.readouterr().out


def test_internal_error_keeps_the_session(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with mzflow.connect(str(tmp_path)) as conn:
        shell = Shell(conn)
        shell.feed("SET cluster = 'x';")
        real = conn.execute_parsed

        def broken(*args: object) -> object:
            raise RuntimeError("boom")

        conn.execute_parsed = broken  # type: ignore[method-assign]
        shell.feed("SHOW CLUSTERS; SHOW CLUSTERS; SHOW")
        err = capsys.readouterr().err
        assert "ERROR: internal error: RuntimeError: boom" in err
        assert "Query buffer reset" in err  # the rest of the input is dropped, visibly
        assert "RuntimeError" in (tmp_path / "log" / "shell.log").read_text()
        assert shell.splitter.pending == ""
        conn.execute_parsed = real  # type: ignore[method-assign]
        monkeypatch.setattr(describe, "listing", broken)
        shell.feed("\\dt")
        assert "ERROR: internal error: RuntimeError: boom" in capsys.readouterr().err
        shell.feed("SHOW cluster;")
        assert " x" in capsys.readouterr().out.splitlines()


# -- with Spark ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.spark
def test_insert_after_meta_command_is_read_back_and_no_jvm_output_shows(tmp_path: Path) -> None:
    # The read starts the JVM (a table this small is otherwise read in process).
    sql(tmp_path, "ALTER SYSTEM SET local_read_max_rows = 0")
    sql(tmp_path, "CREATE TABLE t (a int, b text)")
    term = Term(tmp_path, timeout=300)
    term.run("\\d t")
    term.run("INSERT INTO t VALUES (1, 'x');")
    out = term.run("SELECT a, b FROM t;")
    assert " 1 | x" in out.splitlines() and "(1 row)" in out
    term.quit()
    log = (tmp_path / "log" / "spark.log").read_text()
    assert log.strip(), "the JVM's start-up output should be in the log"
    for noise in JVM_NOISE:
        assert noise not in term.screen
    for line in log.splitlines():
        assert line not in term.screen


@pytest.mark.slow
@pytest.mark.spark
def test_ctrl_c_during_a_long_read_returns_the_prompt(tmp_path: Path) -> None:
    values = ", ".join(f"({i})" for i in range(300))
    sql(tmp_path, f"CREATE TABLE big (x int); INSERT INTO big VALUES {values}")
    term = Term(tmp_path, timeout=300)
    term.run("SET transaction_isolation = 'serializable';")
    assert "(1 row)" in term.run("SELECT count(*) FROM big;")  # Spark has started
    # 300^5 rows: minutes of work, interrupted.
    term.child.sendline("SELECT count(*) FROM big a, big b, big c, big d, big e;")
    term.child.expect_exact("big e;")
    # The status line appears once the statement has run for a second: only then is
    # there a Spark job to cancel (a Ctrl-C during planning raced it under load).
    term.child.expect_exact("⋯", timeout=120)
    term.child.sendcontrol("c")
    out = term.expect(PROMPT, timeout=120)
    assert "canceling statement due to user request" in out
    assert " serializable" in term.run("SHOW transaction_isolation;")
    assert " 300" in term.run("SELECT count(*) FROM big;")  # Spark still works
    term.quit()


@pytest.mark.slow
@pytest.mark.spark
def test_tick_shows_progress_on_a_terminal_and_no_jvm_output(tmp_path: Path) -> None:
    sql(tmp_path, "CREATE TABLE t (a int); INSERT INTO t VALUES (1), (2); "
                  "CREATE MATERIALIZED VIEW mv1 AS SELECT count(*) AS n FROM t; "
                  "CREATE MATERIALIZED VIEW mv2 AS SELECT a FROM t WHERE a > 1")
    env = {**os.environ, "MZFLOW_HOME": str(tmp_path), "COLUMNS": "150"}
    child = pexpect.spawn(sys.executable, ["-m", "mzflow.cli", "tick"], env=env,
                          encoding="utf-8", timeout=300, dimensions=(40, 150))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    raw = child.before
    # Spark's start takes seconds: the status line says so while it lasts.
    assert "⋯ starting Spark" in raw
    # Each redraw of the status ends in a clear, so the screen keeps only the reports.
    screen = [line.rsplit("\x1b[K", 1)[-1] for line in raw.replace("\r\n", "\n").split("\n")]
    reports = [line for line in screen if line.strip()]
    assert [r.split(":")[0] for r in reports] == ["materialize.public.mv1_primary_idx",
                                                  "materialize.public.mv2_primary_idx"]
    for noise in JVM_NOISE:
        assert noise not in raw
    assert (tmp_path / "log" / "spark.log").read_text().strip()
