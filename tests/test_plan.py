"""``mzflow plan -f`` (issue 38, item 1): a golden plan with a breaking change, non-breaking
ones, a drop with dependents and a refused statement; the plan changes nothing, not
even through MZFLOW_CATALOG_URL or an Airflow home; hydration rows are counted from the
tables; a catalog equal to the live one plans no change; a syntax error names its place.

``MZFLOW_UPDATE_GOLDEN=1`` rewrites ``tests/golden/plan.out`` (review the diff).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import mzflow
from mzflow import cli
from mzflow.deploy import plan

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def home(tmp_path: Path) -> str:
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute((GOLDEN / "plan_live.sql").read_text())
    return str(tmp_path / "home")


def test_plan_matches_golden(home: str, capsys: pytest.CaptureFixture[str]) -> None:
    desired = str(GOLDEN / "plan_desired.sql")
    assert cli.main(["--home", home, "plan", "-f", desired]) == 1  # one refused statement
    got = capsys.readouterr().out.replace(desired, "plan_desired.sql")
    path = GOLDEN / "plan.out"
    if os.environ.get("MZFLOW_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()


def test_the_json_plan_names_the_catalog_version_and_every_part(
        home: str, capsys: pytest.CaptureFixture[str]) -> None:
    with mzflow.connect(home) as conn:
        version = conn.store.snapshot().version
    assert cli.main(["--home", home, "plan", "-f", str(GOLDEN / "plan_desired.sql"),
                     "--json"]) == 1
    got = json.loads(capsys.readouterr().out)
    assert got["catalog_version"] == version
    actions = {(c["action"], c["name"]) for c in got["changes"]}
    assert ("drop", "materialize.public.legacy") in actions
    assert ("alter", "materialize.public.orders") in actions
    (big,) = [c for c in got["changes"] if c["name"] == "materialize.public.big"]
    assert big["breaking"] and big["touches"] == ["materialize.public.totals"]
    (per,) = [c for c in got["changes"] if c["name"] == "materialize.public.per_customer"]
    assert not per["breaking"] and per["action"] == "replace"
    assert [(r["number"], r["code"]) for r in got["refused"]] == [(9, "42703")]
    assert [n for n, _ in got["ignored"]] == [10]


def test_planning_changes_nothing(home: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    airflow = tmp_path / "airflow"
    with mzflow.connect(home) as conn:
        before = conn.store.snapshot()
        # The variables that would point a session at the live catalog and Airflow.
        monkeypatch.setenv("MZFLOW_CATALOG_URL", conn.config.catalog_url)
        monkeypatch.setenv("MZFLOW_AIRFLOW_HOME", str(airflow))
        warehouse = sorted(p.name for p in conn.config.warehouse.iterdir())
        p = plan.make(before, conn.config.warehouse, (GOLDEN / "plan_desired.sql").read_text())
        assert p.changes  # it did plan something
        after = conn.store.snapshot()
        assert after.version == before.version and after.items == before.items
        assert after.clusters == before.clusters
        assert sorted(q.name for q in conn.config.warehouse.iterdir()) == warehouse
    assert not airflow.exists()


@pytest.mark.slow
@pytest.mark.spark
def test_hydration_rows_are_the_tables_rows(home: str) -> None:
    with mzflow.connect(home) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a', 150), (2, 'b', 50), (3, 'a', 300);"
                     "INSERT INTO orders VALUES (4, 'c', 120)")
        conn.tick()
        p = plan.make(conn.store.snapshot(), conn.config.warehouse,
                      (GOLDEN / "plan_desired.sql").read_text())
        count = conn.execute("SELECT count(*) FROM orders").rows[0][0]
    got = {h.index: (h.rows, h.seconds) for h in p.hydrations}
    assert set(got) == {"materialize.public.per_customer_primary_idx",
                        "materialize.public.totals_primary_idx",
                        "materialize.public.counts_primary_idx"}
    assert {rows for rows, _ in got.values()} == {count}
    # The ticks above recomputed: their recorded rate gives a time.
    assert all(s is not None and s > 0 for _, s in got.values())


def test_the_live_catalog_as_written_plans_no_change(
        home: str, capsys: pytest.CaptureFixture[str]) -> None:
    live = GOLDEN / "plan_live.sql"
    assert cli.main(["--home", home, "plan", "-f", str(live)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2] == "no changes" and "hydrate" not in out


def test_a_file_that_does_not_parse_plans_nothing(
        home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE TABLE t (a int);\nCREATE VEIW v AS SELECT 1;\n")
    assert cli.main(["--home", home, "plan", "-f", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: ") and "line 2" in err
    assert cli.main(["--home", home, "plan", "-f", str(tmp_path / "none.sql")]) == 2
    assert "cannot read" in capsys.readouterr().err


# -- apply ------------------------------------------------------------------------------

def _desired_without_refusals(tmp_path: Path) -> Path:
    text = (GOLDEN / "plan_desired.sql").read_text()
    kept = "\n".join(line for line in text.splitlines() if "nope" not in line)
    path = tmp_path / "desired.sql"
    path.write_text(kept)
    return path


def test_apply_then_plan_shows_no_change(home: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with mzflow.connect(home) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a', 150), (2, 'b', 50), (3, 'a', 300)")
    desired = str(_desired_without_refusals(tmp_path))
    assert cli.main(["--home", home, "apply", "-f", desired]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("statements") and "[1/" in out
    assert cli.main(["--home", home, "plan", "-f", desired]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "no changes"
    with mzflow.connect(home) as conn:
        snap = conn.store.snapshot()
        assert snap.find("legacy") is None and snap.find("legacy_view") is None
        assert [c.name for c in snap.resolve("orders").columns] == [
            "id", "customer", "amount", "note"]
        # The replaced view reads the new definition; the data stayed.
        assert sorted(conn.execute("SELECT * FROM big").rows) == [(3, "a")]
        assert conn.execute("SELECT count(*) FROM orders").rows == [(3,)]


def test_apply_refuses_a_refused_plan_or_a_moved_catalog(
        home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with mzflow.connect(home) as conn:
        version = conn.store.snapshot().version
    assert cli.main(["--home", home, "apply", "-f", str(GOLDEN / "plan_desired.sql")]) == 1
    assert "nothing applied: the plan has refusals" in capsys.readouterr().out
    desired = str(_desired_without_refusals(tmp_path))
    assert cli.main(["--home", home, "apply", "-f", desired,
                     "--catalog-version", str(version - 1)]) == 1
    assert "the catalog changed since the plan was made" in capsys.readouterr().err
    with mzflow.connect(home) as conn:
        assert conn.store.snapshot().version == version


@pytest.mark.slow
@pytest.mark.spark
def test_applied_views_are_maintained_right(home: str, tmp_path: Path) -> None:
    import duckdb

    with mzflow.connect(home) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a', 150), (2, 'b', 250), (3, 'a', 300)")
        conn.tick()
    assert cli.main(["--home", home, "apply", "-f",
                     str(_desired_without_refusals(tmp_path))]) == 0
    with mzflow.connect(home) as conn:
        conn.execute("INSERT INTO orders VALUES (4, 'b', 900, 'late')")
        conn.tick()
        got = sorted(conn.execute("SELECT customer, orders FROM totals").rows)
        rows = conn.execute("SELECT id, customer, amount FROM orders").rows
    oracle = duckdb.sql("SELECT customer, count(*) FROM (VALUES " + ", ".join(
        f"({i}, '{c}', {a})" for i, c, a in rows) + ") o(id, customer, amount) "
        "WHERE amount > 200 GROUP BY customer").fetchall()
    assert got == sorted(oracle)


def test_apply_resizes_a_cluster_and_refuses_other_cluster_changes(
        home: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    desired = _desired_without_refusals(tmp_path)
    text = desired.read_text()
    desired.write_text(text.replace("CREATE CLUSTER analytics SIZE 'small'",
                                    "CREATE CLUSTER analytics SIZE 'medium'"))
    assert cli.main(["--home", home, "apply", "-f", str(desired)]) == 0
    capsys.readouterr()
    with mzflow.connect(home) as conn:
        assert conn.store.snapshot().find_cluster("analytics").size == "medium"  # type: ignore[union-attr]
        version = conn.store.snapshot().version
    desired.write_text(text.replace("CREATE CLUSTER analytics SIZE 'small'",
                                    "CREATE CLUSTER analytics VIRTUAL"))
    assert cli.main(["--home", home, "apply", "-f", str(desired)]) == 1
    assert "apply can only resize cluster analytics" in capsys.readouterr().err
    with mzflow.connect(home) as conn:
        assert conn.store.snapshot().version == version
