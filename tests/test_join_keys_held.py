"""The Spark executor's delta join takes the keys that restrict the next input from the
rows this process already holds (the change feed, an arrangement lookup) instead of
collecting them back from Spark, which re-sends the rows with every such plan (issue
34: the Spark path's round trips). Counted, and the view checked against DuckDB after
every tick of inserts, deletes and updates, NULL keys and text keys among them, with
filters on the inputs (evaluated in process on the held rows too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

import mzflow
from mzflow.incremental.dataflow import Dataflow

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TABLES = {
    "c": "ck int, seg text",
    "o": "ok int, ck int, status text",
    "l": "ok int, price int",
    "s": "seg text, label text",
}
VIEW = ("SELECT s.label, o.status, sum(l.p2) AS rev, count(*) AS n "
        # a derived table: a Filter and a Map below the join, evaluated in process on
        # the held rows too
        "FROM c JOIN o ON c.ck = o.ck "
        "JOIN (SELECT ok, price * 2 AS p2 FROM l WHERE price > 1) AS l "
        "ON l.ok = o.ok JOIN s ON s.seg = c.seg "
        "WHERE o.status IN ('F', 'O') AND c.seg <> 'none' "
        "GROUP BY s.label, o.status")
ROUNDS = [
    ["INSERT INTO c VALUES (1, 'auto'), (2, 'home'), (3, NULL), (4, 'auto')",
     "INSERT INTO o VALUES (10, 1, 'F'), (11, 2, 'O'), (12, 3, 'F'), (13, NULL, 'O'), "
     "(14, 4, 'O')",
     "INSERT INTO l VALUES (10, 5), (10, 7), (11, 3), (12, 9), (13, 1), (14, 2), (NULL, 4)",
     "INSERT INTO s VALUES ('auto', 'A'), ('home', 'H'), (NULL, 'N')"],
    ["INSERT INTO l VALUES (11, 6), (14, 8), (99, 1)"],
    ["INSERT INTO o VALUES (15, 2, 'F')", "INSERT INTO l VALUES (15, 10)",
     "DELETE FROM l WHERE price = 7"],
    ["UPDATE c SET seg = 'home' WHERE ck = 4", "UPDATE s SET label = 'HH' WHERE seg = 'home'"],
    ["DELETE FROM o WHERE ok = 10", "INSERT INTO c VALUES (5, 'auto')",
     "INSERT INTO o VALUES (16, 5, 'O')", "INSERT INTO l VALUES (16, 1)"],
]


def test_join_keys_come_from_held_rows_and_the_view_equals_duckdb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flows: list[Dataflow] = []
    calls: list[int] = []
    original = Dataflow.key_restriction

    def counted(self: Dataflow, *args: Any, **kwargs: Any) -> Any:
        if not any(f is self for f in flows):
            flows.append(self)
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Dataflow, "key_restriction", counted)
    db = duckdb.connect()
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute("ALTER SYSTEM SET tick_executor = 'spark'")
        conn.execute("ALTER SYSTEM SET recompute_share = 1000000")  # never a recompute
        conn.execute("CREATE CLUSTER c1 SIZE 'small'")
        for name, cols in TABLES.items():
            conn.execute(f"CREATE TABLE {name} ({cols})")
            db.execute(f"CREATE TABLE {name} ({cols})")
        conn.execute(f"CREATE MATERIALIZED VIEW v IN CLUSTER c1 AS {VIEW}")
        conn.execute("SET cluster = c1")
        for statements in ROUNDS:
            for sql in statements:
                conn.execute(sql)
                db.execute(sql)
            (report,) = conn.tick(cluster="c1")
            assert report.error is None and "recompute" not in report.strategy, report.line()
            got = sorted(conn.execute("SELECT * FROM v").rows, key=repr)
            assert got == sorted(db.execute(VIEW).fetchall(), key=repr), statements
    # Every tick after the first ran the delta join on Spark, and every restriction it
    # took its keys for came from rows held here: no key collected back from Spark.
    assert len(flows) == len(ROUNDS) - 1 and calls
    assert sum(f.keys_held for f in flows) == len(calls), (len(calls), [
        f.keys_held for f in flows])
