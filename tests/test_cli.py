"""The `mzflow` command, run as a user would run it (a real subprocess)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mzflow
from mzflow.cli import format_table

# The CLI runs as a child process (format_table's test alone does not need one).
pytestmark = pytest.mark.slow


def run(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MZFLOW_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "mzflow.cli", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=60)


def test_version_and_help(tmp_path: Path) -> None:
    assert run(tmp_path, "--version").stdout.strip() == f"mzflow {mzflow.__version__}"
    helptext = run(tmp_path, "--help").stdout
    for word in ("sql", "MZFLOW_HOME", "MZFLOW_CATALOG_URL", "examples:"):
        assert word in helptext
    assert "-f FILE" in run(tmp_path, "sql", "--help").stdout


def test_sql_command_prints_tables(tmp_path: Path) -> None:
    out = run(tmp_path, "sql", "-c", "CREATE CLUSTER etl SIZE 'small'; SHOW CLUSTERS")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "CREATE CLUSTER", "   name", " -------", " default", " etl", "(2 rows)"]


def test_sql_file_and_durability(tmp_path: Path) -> None:
    script = tmp_path / "catalog.sql"
    script.write_text("CREATE CLUSTER a;\nCREATE VIEW v AS SELECT 1 AS x;\n")
    assert run(tmp_path, "sql", "-f", str(script)).returncode == 0
    out = run(tmp_path, "sql", "-c", "SELECT name FROM mz_views")
    assert " v" in out.stdout.splitlines()


def test_errors_go_to_stderr_with_position_and_exit_1(tmp_path: Path) -> None:
    script = tmp_path / "bad.sql"
    script.write_text("CREATE CLUSTER ok;\nCREATE CLUSTR nope;\n")
    out = run(tmp_path, "sql", "-f", str(script))
    assert out.returncode == 1
    assert ("ERROR: Expected CLUSTER, INDEX, SCHEMA, SINK, SOURCE, TABLE, VIEW or "
            "MATERIALIZED VIEW at line 2, column 8") in out.stderr
    # The whole file is parsed before anything runs: nothing was created.
    assert "ok" not in run(tmp_path, "sql", "-c", "SHOW CLUSTERS").stdout


def test_semantic_error_stops_but_earlier_statements_stand(tmp_path: Path) -> None:
    out = run(tmp_path, "sql", "-c", "CREATE CLUSTER a; DROP CLUSTER zz; CREATE CLUSTER b")
    assert out.returncode == 1
    assert "ERROR: unknown cluster 'zz'" in out.stderr
    shown = run(tmp_path, "sql", "-c", "SHOW CLUSTERS").stdout
    assert " a" in shown.splitlines() and " b" not in shown.splitlines()


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    out = run(tmp_path, "sql", "-f", str(tmp_path / "nope.sql"))
    assert out.returncode == 1
    assert "cannot read" in out.stderr and "No such file" in out.stderr


def test_repl_reads_statements_across_lines(tmp_path: Path) -> None:
    out = run(tmp_path, "sql", stdin="CREATE CLUSTER\n  repl;\nSHOW CLUSTERS LIKE 'r%';\n\\q\n")
    assert out.returncode == 0, out.stderr
    assert "CREATE CLUSTER" in out.stdout and " repl" in out.stdout


def test_format_table_aligns_like_psql() -> None:
    text = format_table(["id", "name"], [(1, "default"), (22, None), (3, True)])
    assert text.splitlines() == [
        " id |   name", " ---+--------", " 1  | default", " 22 |", " 3  | t", "(3 rows)"]


def test_format_table_prints_values_as_postgresql() -> None:
    # The values a read returns, with the types it reports (tests/test_values.py checks
    # pg_text itself against PostgreSQL).
    row = (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.timedelta(minutes=1),
           ["a", "b c", None])
    text = format_table(["ts", "i", "arr"], [row],
                        ["timestamp with time zone", "interval", "text[]"])
    assert text.splitlines()[2] == ' 2000-01-01 00:00:00+00 | 00:01:00 | {a,"b c",NULL}'
