"""Compaction lets writers in between the objects it compacts (issue 19).

It held the catalog's write lock, which every write commits under, for the whole
compaction: 34 s in a 20-minute soak, past the 30 s a writer waits before CatalogBusy.
Now each table (then each of its projections, each index) is its own transaction.
No Spark: plain INSERTs and compaction run on delta-rs.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

import mzflow
from mzflow.maintain import compaction as maintenance
from mzflow.storage import delta


def test_a_write_commits_between_two_tables_compactions(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    conn = mzflow.connect(str(home))
    for name in ("a", "b", "c"):
        conn.execute(f"CREATE TABLE {name} (k int)")
        conn.execute(f"INSERT INTO {name} VALUES (1), (2)")
    writer = mzflow.connect(str(home))  # another session: its own catalog connection
    wrote = threading.Event()
    failed: list[BaseException] = []
    seen_during: dict[str, bool] = {}

    def insert() -> None:
        try:
            writer.execute("INSERT INTO c VALUES (3)")
            wrote.set()
        except BaseException as e:  # pragma: no cover - reported by the asserts
            failed.append(e)

    real = delta.Shard.compact
    ids = {n: i for n, i in conn.execute(
        "SELECT name, id FROM mz_tables WHERE name IN ('a', 'b')").rows}
    started: list[threading.Thread] = []

    def compact(self: delta.Shard, keep_from: int, ts: int) -> dict:
        if self.path.name == ids["a"]:
            # The write asks for the lock while a's compaction holds it.
            started.append(threading.Thread(target=insert))
            started[0].start()
        elif self.path.name == ids["b"] and started:
            # Old behaviour: the write waits for the whole compaction, so it cannot have
            # committed while b is being compacted.
            seen_during["b"] = wrote.wait(10)
        return real(self, keep_from, ts)

    monkeypatch.setattr(delta.Shard, "compact", compact)
    done = conn.compact()
    started[0].join(60)
    assert not failed, failed
    assert seen_during == {"b": True}
    assert {"materialize.public.a", "materialize.public.b",
            "materialize.public.c"} <= {c.table for c in done}
    (c_id,) = conn.execute("SELECT id FROM mz_tables WHERE name = 'c'").rows[0]
    assert DeltaTable(str(conn.config.warehouse / c_id)).to_pyarrow_table().num_rows == 3
    writer.close()
    conn.close()


def test_a_table_dropped_after_compaction_listed_it_is_skipped(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE a (k int)")
    conn.execute("CREATE TABLE b (k int)")
    conn.execute("INSERT INTO b VALUES (1)")
    other = mzflow.connect(str(tmp_path / "home"))
    real = maintenance._Steps.locked
    calls: list[int] = []

    def locked(self: maintenance._Steps):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:  # between a's step and b's: another session drops b
            other.execute("DROP TABLE b")
        return real(self)

    monkeypatch.setattr(maintenance._Steps, "locked", locked)
    done = conn.compact()
    assert [c.table for c in done if c.kind == "table"] == ["materialize.public.a"]
    assert len(calls) == 3  # a, b (found dropped), the arrangements
    other.close()
    conn.close()
