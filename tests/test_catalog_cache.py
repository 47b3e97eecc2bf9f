"""Catalog-only SELECTs answered again from the catalog state they were computed at
(session/catalog_cache.py): counted by the binder's calls, never by time. No Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

import mzflow
from mzflow.read import reads


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = reads.plan

    def counting(*args, **kw):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(reads, "plan", counting)
    return calls


def test_a_repeated_catalog_read_is_answered_until_the_catalog_moves(
        tmp_path: Path, planned: list[int]) -> None:
    with mzflow.connect(str(tmp_path)) as conn:
        q = "SELECT name FROM mz_tables ORDER BY name"
        conn.execute("CREATE TABLE a (x int)")
        first = conn.execute(q)
        n = planned[0]
        again = conn.execute(q)
        assert (again.rows, again.columns, again.types) == (first.rows, first.columns,
                                                             first.types)
        assert planned[0] == n  # not bound again
        conn.execute("CREATE TABLE b (x int)")  # DDL: a new catalog version
        assert conn.execute(q).rows == [("a",), ("b",)]
        assert planned[0] == n + 1


def test_what_moves_on_its_own_is_computed_each_time(tmp_path: Path,
                                                     planned: list[int]) -> None:
    with mzflow.connect(str(tmp_path)) as conn:
        conn.execute("CREATE TABLE a (x int)")
        q = "SELECT count(*) FROM mz_read_holds"  # rows kept outside the snapshot
        conn.execute(q)
        n = planned[0]
        conn.execute(q)
        assert planned[0] == n + 1
        # A write moves the read time: frontiers, computed from the snapshot, move too.
        q = "SELECT write_frontier FROM mz_frontiers"
        before = conn.execute(q).rows
        conn.execute("INSERT INTO a VALUES (1)")
        assert conn.execute(q).rows != before


def test_a_statement_calling_a_clock_or_random_has_no_key(tmp_path: Path) -> None:
    from mzflow.session import catalog_cache
    from mzflow.sql.parse import parse

    with mzflow.connect(str(tmp_path)) as conn:
        snap = conn.store.snapshot()
    for q in ("SELECT now() FROM mz_tables", "SELECT random() FROM mz_tables",
              "SELECT mz_now() FROM mz_tables"):
        assert catalog_cache.key(snap, parse(q)[0]) is None, q
    assert catalog_cache.key(snap, parse("SELECT count(*) FROM mz_tables")[0]) is not None


def test_a_statement_of_mzflow_s_own_syntax_has_a_key(tmp_path: Path) -> None:
    """The key holds mzflow's own nodes (a table pinned to a version): sqlglot's
    default rendering raised on them, which failed every such SELECT."""
    from mzflow.session import catalog_cache
    from mzflow.sql.parse import parse

    with mzflow.connect(str(tmp_path)) as conn:
        snap = conn.store.snapshot()
    q = 'SELECT * FROM [u1 AS "materialize"."public"."av" VERSION {}]'
    found = catalog_cache.key(snap, parse(q.format(0))[0])
    assert found is not None
    assert catalog_cache.key(snap, parse(q.format(0))[0]) == found
    assert catalog_cache.key(snap, parse(q.format(1))[0]) != found
