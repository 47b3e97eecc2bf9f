"""dbt-materialize against ``mzflow serve`` (issue 35): the example project
(examples/dbt: a seed, a view, a materialized view with ``cluster`` and ``indexes``, a
sink, data tests and a unit test) builds twice in a row on a fresh home, as a user runs
it, through a password login.

dbt-materialize's view, materialized view and sink materializations drop and recreate
their object on every run (against Materialize too); a seed that exists is emptied and
reloaded. So the second plain run recreates exactly the models, and nothing else; a run
of ``state:modified+`` after an edit replaces exactly the edited model and what depends
on it. The materialized view's rows are checked against DuckDB over the seed's CSV."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

import mzflow
from mzflow_dev import dbt

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dbt"
MV = "customer_totals"


class Served(dbt.Served):
    def items(self) -> dict[tuple[str, str], str]:
        """(name, type) -> item id of every user object."""
        rows = self.sql("SELECT name, type, id FROM mz_objects WHERE id LIKE 'u%'")
        return {(str(name), str(kind)): str(item_id) for name, kind, item_id in rows}

    def build(self, *args: str) -> list[dict[str, object]]:
        """``dbt build``; its run_results, after checking that dbt exited 0."""
        self.dbt_run("build", *args)
        return list(self.artifact("run_results")["results"])

    def artifact(self, name: str) -> dict[str, Any]:
        return dict(json.loads((self.project / "target" / f"{name}.json").read_text()))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("dbt")
    home, project = base / "home", base / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("target", "logs"))
    with mzflow.connect(str(home)) as conn:
        conn.execute(f"CREATE ROLE dbt WITH LOGIN SUPERUSER PASSWORD '{dbt.PASSWORD}'")
    with dbt.serving(home, project, DBT_MZFLOW_EXPORTS=str(base / "exports")) as s:
        warm = threading.Thread(target=start_spark, args=(s.url(),))
        warm.start()  # the server's Spark starts while dbt parses the project
        yield Served(s.port, s.home, s.project, s.env, s.dbt)
        warm.join()


def start_spark(address: str) -> None:
    """The server's Spark starts while dbt parses the project (a query over no table
    that runs on Spark)."""
    with psycopg.connect(address, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM generate_series(1, 3)")


def statuses(results: list[dict[str, object]]) -> dict[str, str]:
    """unique_id (``model.mzflow_example.stg_orders``, ``test.…``) -> status."""
    return {str(r["unique_id"]): str(r["status"]) for r in results}


def built(results: dict[str, str]) -> set[str]:
    """The seeds and models a run built, by name."""
    return {uid.split(".")[2] for uid in results if uid.split(".")[0] in ("seed", "model")}


def checks(results: dict[str, str]) -> int:
    return sum(uid.split(".")[0] in ("test", "unit_test") for uid in results)


def expected_totals(project: Path, extra: str = "") -> list[tuple[object, ...]]:
    """The materialized view's rows, from DuckDB over the seed's CSV."""
    with duckdb.connect() as db:
        db.execute("CREATE TABLE orders AS SELECT * FROM read_csv(?, header = true, "
                   "columns = {'order_id': 'BIGINT', 'customer_id': 'BIGINT', "
                   "'amount': 'DECIMAL(10,2)', 'status': 'VARCHAR', 'ordered_at': 'DATE'})",
                   [str(project / "seeds" / "orders.csv")])
        return db.execute(f"SELECT customer_id, count(*), sum(amount){extra} FROM orders "
                          "WHERE status <> 'returned' GROUP BY customer_id "
                          "ORDER BY customer_id").fetchall()


def mv_rows(served: Served) -> tuple[list[str], list[tuple[object, ...]]]:
    """The materialized view's column names and rows, read in its cluster."""
    with psycopg.connect(served.url(), autocommit=True) as conn:
        conn.execute("SET cluster = analytics")
        cur = conn.execute(f"SELECT * FROM {MV} ORDER BY customer_id")
        return [d.name for d in cur.description or ()], cur.fetchall()


def test_dbt_build_twice_then_a_changed_model(served: Served) -> None:
    first = statuses(served.build())
    assert built(first) == {"orders", "stg_orders", MV, f"{MV}_export"}
    assert set(first.values()) == {"success", "pass"}, first
    assert checks(first) == 7  # 6 data tests, 1 unit test
    before = served.items()
    assert {kind for _, kind in before} == {
        "table", "view", "materialized-view", "index", "sink"}
    with psycopg.connect(served.url(), autocommit=True) as conn:
        definitions = {name: conn.execute(f"SHOW CREATE {kind} {name}").fetchone()
                       for name, kind in (("stg_orders", "VIEW"),
                                          (MV, "MATERIALIZED VIEW"),
                                          (f"{MV}_export", "SINK"))}
        clusters = conn.execute("SELECT id, name FROM mz_clusters").fetchall()

    # The second run: everything passes again. The adapter dropped and recreated each
    # model (a new id, the same definition); the seed's table and the cluster stay.
    second = statuses(served.build())
    assert second == first
    after = served.items()
    assert after.keys() == before.keys()
    recreated = {key for key in before if after[key] != before[key]}
    assert recreated == {key for key in before if key[1] != "table"}
    assert after[("orders", "table")] == before[("orders", "table")]
    with psycopg.connect(served.url(), autocommit=True) as conn:
        assert {name: conn.execute(f"SHOW CREATE {kind} {name}").fetchone()
                for name, kind in (("stg_orders", "VIEW"), (MV, "MATERIALIZED VIEW"),
                                   (f"{MV}_export", "SINK"))} == definitions
        assert conn.execute("SELECT id, name FROM mz_clusters").fetchall() == clusters
    # dbt docs reads the relations, their columns and the descriptions persist_docs wrote
    served.dbt_run("docs", "generate", "--no-compile")
    catalog, manifest = served.artifact("catalog")["nodes"], served.artifact("manifest")["nodes"]
    assert set(catalog) == {uid for uid in manifest if uid.split(".")[0] in ("seed", "model")
                            and manifest[uid]["config"]["materialized"] != "sink"}
    for uid, entry in catalog.items():
        assert entry["metadata"]["comment"] == manifest[uid]["description"], uid
        described = {c: d["description"] for c, d in manifest[uid]["columns"].items()
                     if d["description"]}
        assert {c: d["comment"] for c, d in entry["columns"].items() if c in described} == (
            described), uid
    totals = expected_totals(served.project)
    assert totals and all(isinstance(total, Decimal) for _, _, total in totals)
    names, rows = mv_rows(served)
    assert rows == totals
    assert list(catalog[f"model.mzflow_example.{MV}"]["columns"]) == names

    # An edited model, built with dbt's state selection: exactly it and what depends on
    # it (its indexes, the sink over it, their tests) are replaced.
    state = served.project.parent / "state"
    shutil.copytree(served.project / "target", state)
    model = served.project / "models" / f"{MV}.sql"
    model.write_text(model.read_text().replace(
        "sum(amount) as total", "sum(amount) as total, max(ordered_at) as last_order"))
    third = statuses(served.build("--select", "state:modified+", "--state", str(state)))
    assert built(third) == {MV, f"{MV}_export"}
    assert checks(third) == 3  # its unique, not_null and singular tests
    assert set(third.values()) == {"success", "pass"}, third
    final = served.items()
    assert final.keys() == after.keys()
    replaced = {key for key in after if final[key] != after[key]}
    assert replaced == {key for key in after if key[0].startswith(MV)}
    assert len(replaced) == 4  # the view, its default index, the user's index, the sink
    assert mv_rows(served)[1] == expected_totals(served.project, ", max(ordered_at)")
