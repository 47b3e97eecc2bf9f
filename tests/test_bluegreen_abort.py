"""``mzflow apply --abort`` (issue 39, item 7: blue/green applies mid-soak): an apply
stopped before its swap is abandoned, its staged twins dropped and its record cleared,
while the live version serves on unchanged (equal to DuckDB); a new apply then starts.
An abort killed midway is finished by the next; one past the swap is refused, and
--resume finishes that one even when its file went stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mzflow
from mzflow import cli
from mzflow.deploy import bluegreen
from mzflow.errors import Error
from tests.test_bluegreen import DESIRED, _home, _oracle

TWIN_SCHEMA, TWIN_CLUSTER = "analytics" + bluegreen.SUFFIX, "serving" + bluegreen.SUFFIX


def _die_after(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """``step`` does its work, then fails before its record is written (as a kill)."""
    original = getattr(bluegreen, step)

    def dying(*a: Any, **k: Any) -> None:
        original(*a, **k)
        raise Error(f"killed after {step}")

    monkeypatch.setattr(bluegreen, step, dying)


def _apply(home: str, desired: Path, *flags: str) -> int:
    return cli.main(["--home", home, "apply", "-f", str(desired), "--lag-threshold",
                     "60000", *flags])


def _abort(home: str) -> int:
    return cli.main(["--home", home, "apply", "--abort"])


def _live(conn: mzflow.Connection) -> tuple[str, int, list[str]]:
    """The live schema's and cluster's ids and the live objects' ids."""
    snap = conn.store.snapshot()
    return (snap.schema_id("analytics"), snap.cluster_by_name("serving").id,
            sorted(i.id for i in snap.items if i.schema == "analytics"))


def _totals(conn: mzflow.Connection) -> list[tuple]:
    conn.tick()
    conn.execute("SET cluster = serving")
    return sorted(conn.execute("SELECT * FROM analytics.totals").rows)


@pytest.mark.slow
@pytest.mark.spark  # ticks, as test_bluegreen.py's
@pytest.mark.parametrize("step", ["stage", "hydrate"])
def test_abort_before_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str], step: str) -> None:
    home = _home(tmp_path, rows=30)
    desired = tmp_path / "desired.sql"
    with mzflow.connect(home) as conn:
        before = _live(conn)
    with monkeypatch.context() as m:
        _die_after(m, step)
        assert _apply(home, desired, "--blue-green") == 1
    state = bluegreen.load_state(Path(home))
    assert state is not None and state.step == ("" if step == "stage" else "staged")
    with mzflow.connect(home) as conn:
        snap = conn.store.snapshot()
        assert snap.schema_named(TWIN_SCHEMA) and snap.find_cluster(TWIN_CLUSTER)
        # The catalog moves on meanwhile (the soak's DDL adds a column): the file's plan
        # is refused now, so --resume cannot go on, and says what can.
        conn.execute("ALTER TABLE raw.orders ADD COLUMN note text")
        conn.execute("INSERT INTO raw.orders VALUES (900, 'c1', 350, 'x'), (901, 'c9', 50, 'y')")
        # Something outside the apply reads a twin: an abort would drop it, so refuses.
        conn.execute(f"CREATE VIEW raw.peek AS SELECT * FROM {TWIN_SCHEMA}.big")
    capsys.readouterr()
    assert _apply(home, desired, "--resume") == 1
    assert "or apply --abort to abandon it" in capsys.readouterr().out
    assert _abort(home) == 1
    assert "cannot abort: view materialize.raw.peek depends on" in capsys.readouterr().err
    with mzflow.connect(home) as conn:
        assert conn.store.snapshot().schema_named(TWIN_SCHEMA) is not None  # nothing went
        conn.execute("DROP VIEW raw.peek")

    # An abort killed between its drops: only another --abort goes on.
    original_run = bluegreen._run

    def dying_run(conn: object, stmt: Any, out: Any) -> None:
        if "DROP CLUSTER" in str(stmt):
            raise Error("killed mid-abort")
        original_run(conn, stmt, out)

    with monkeypatch.context() as m:
        m.setattr(bluegreen, "_run", dying_run)
        assert _abort(home) == 1
    state = bluegreen.load_state(Path(home))
    assert state is not None and state.aborting
    capsys.readouterr()
    assert _apply(home, desired, "--resume") == 1
    assert "is being aborted" in capsys.readouterr().err
    assert _abort(home) == 0
    assert "aborted: the live schemas analytics serve on unchanged" in (
        capsys.readouterr().out)
    assert bluegreen.load_state(Path(home)) is None
    with mzflow.connect(home) as conn:
        snap = conn.store.snapshot()
        assert snap.schema_named(TWIN_SCHEMA) is None and snap.find_cluster(TWIN_CLUSTER) is None
        assert _live(conn) == before  # the live version is the very same objects
        assert _totals(conn) == _oracle(conn, 100, False)  # still the old definition
    # Twice is fine; so is nothing in progress.
    assert _abort(home) == 0
    assert "no blue/green apply in progress" in capsys.readouterr().out
    # A new apply of a fresh file (with the new column) starts and finishes.
    desired.write_text(DESIRED.replace("amount int)", "amount int, note text)"))
    assert _apply(home, desired, "--blue-green") == 0
    with mzflow.connect(home) as conn:
        assert _totals(conn) == _oracle(conn, 200, True)
        assert conn.store.snapshot().schema_named(TWIN_SCHEMA) is None


@pytest.mark.slow
@pytest.mark.spark
def test_abort_is_refused_after_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    home = _home(tmp_path, rows=30)
    desired = tmp_path / "desired.sql"
    with monkeypatch.context() as m:
        _die_after(m, "swap")  # swapped, but not recorded: seen by the staged ids
        assert _apply(home, desired, "--blue-green") == 1
    assert bluegreen.load_state(Path(home)).step == "hydrated"  # type: ignore[union-attr]
    capsys.readouterr()
    assert _abort(home) == 1
    err = capsys.readouterr().err
    assert "cannot abort the blue/green apply of schemas analytics: it already swapped" in err
    assert "run apply --resume" in err
    with mzflow.connect(home) as conn:
        # Nothing dropped: the new version serves, the old one waits in the twins.
        assert conn.store.snapshot().schema_named(TWIN_SCHEMA) is not None
        assert _totals(conn) == _oracle(conn, 200, True)
        # The file goes stale (its plan is refused now): past the swap, --resume needs
        # no plan and finishes.
        conn.execute("ALTER TABLE raw.orders ADD COLUMN note text")
    assert _apply(home, desired, "--resume") == 0
    assert "resuming past the swap" in capsys.readouterr().out
    with mzflow.connect(home) as conn:
        snap = conn.store.snapshot()
        assert snap.schema_named(TWIN_SCHEMA) is None and snap.find_cluster(TWIN_CLUSTER) is None
        assert _totals(conn) == _oracle(conn, 200, True)
    assert _abort(home) == 0  # done: nothing in progress
    assert "no blue/green apply in progress" in capsys.readouterr().out


def test_abort_with_nothing_in_progress(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    home = str(tmp_path / "home")
    assert _abort(home) == 0
    assert capsys.readouterr().out.strip() == (
        "no blue/green apply in progress: nothing to abort")
    assert cli.main(["--home", home, "apply", "--abort", "--resume"]) == 2
    assert "--abort takes no --resume" in capsys.readouterr().err
    assert cli.main(["--home", home, "apply"]) == 2
    assert "apply needs -f FILE (or --abort)" in capsys.readouterr().err
