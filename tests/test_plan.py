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
