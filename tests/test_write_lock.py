"""Writers never wait on Spark under the catalog's write lock (issue 39, item 2).

UPDATE and DELETE compute their changes on Spark before taking the lock; under it they
only check that every table they read is still at the version they read, and commit.
Counted, not timed: the Spark jobs and the Spark reads run while the lock is held (0),
a concurrent INSERT into another table that completes while an UPDATE's computation is
stopped mid-way, and the UPDATE's recomputation when a write to its own table commits
meanwhile, whose result must equal DuckDB running the same statements one after the
other.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mzflow
from mzflow.catalog.store import Store
from mzflow.read import reads

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROWS = 200_000


class _Lock:
    """The catalog's write lock and Spark reads, watched: what runs while it is held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        from mzflow.engine import spark

        self.local = threading.local()
        self.jobs_under_lock: list[int] = []
        self.reads = 0
        self.reads_under_lock = 0
        self.on_read: Callable[[], None] | None = None  # run after each read outside the lock
        original = Store.write
        watch = self

        @contextmanager
        def write(store: Store) -> Iterator[Any]:
            with original(store) as w, spark.counting_jobs() as jobs:
                watch.local.held = True
                try:
                    yield w
                finally:
                    watch.local.held = False
                    watch.jobs_under_lock.append(jobs() or 0)

        real = reads.read_arrow

        def read_arrow(*args: Any, **kwargs: Any) -> pa.Table:
            held = getattr(watch.local, "held", False)
            watch.reads += 1
            watch.reads_under_lock += held
            out = real(*args, **kwargs)
            if not held and watch.on_read is not None:
                watch.on_read()
            return out

        monkeypatch.setattr(Store, "write", write)
        monkeypatch.setattr(reads, "read_arrow", read_arrow)
        # delta-rs calls that write data files (a MERGE, a write), by whether under it.
        self.data_writes: Counter[tuple[str, bool]] = Counter()
        import deltalake

        def counting(name: str, real: Any) -> Any:
            def counted(*args: Any, **kwargs: Any) -> Any:
                watch.data_writes[(name, getattr(watch.local, "held", False))] += 1
                return real(*args, **kwargs)
            return counted

        for owner, name in ((deltalake.DeltaTable, "merge"), (deltalake, "write_deltalake")):
            monkeypatch.setattr(owner, name, counting(name, getattr(owner, name)))


def _rows(conn: mzflow.Connection) -> Counter[tuple[Any, ...]]:
    return Counter(conn.execute("SELECT k, g, x FROM t").rows)


def _oracle(db: duckdb.DuckDBPyConnection) -> Counter[tuple[Any, ...]]:
    return Counter(db.execute("SELECT k, g, x FROM t").fetchall())


@pytest.fixture
def both(tmp_path: Path) -> Iterator[tuple[mzflow.Connection, duckdb.DuckDBPyConnection]]:
    """A table of ROWS rows in mzflow and in DuckDB; a second table ``u``."""
    data = pa.table({"k": pa.array(range(ROWS), pa.int32()),
                     "g": pa.array([i % 7 for i in range(ROWS)], pa.int32()),
                     "x": pa.array([i % 1000 for i in range(ROWS)], pa.int32())})
    pq.write_table(data, tmp_path / "t.parquet")
    conn = mzflow.connect(str(tmp_path / "home"))
    db = duckdb.connect()
    for c in (conn, db):
        c.execute("CREATE TABLE t (k int, g int, x int)")
        c.execute("CREATE TABLE u (a int)")
    conn.execute(f"COPY t FROM '{tmp_path / 't.parquet'}' (FORMAT PARQUET)")
    db.execute(f"INSERT INTO t SELECT * FROM '{tmp_path / 't.parquet'}'")
    yield conn, db
    conn.close()


def test_large_writes_run_no_spark_under_the_lock(both, monkeypatch) -> None:
    conn, db = both
    lock = _Lock(monkeypatch)
    for verb, where, sql in (("UPDATE", "g < 5", "UPDATE t SET x = x + 1 WHERE g < 5"),
                             ("DELETE", "g = 6", "DELETE FROM t WHERE g = 6"),
                             ("INSERT 0", "g = 3", "INSERT INTO u SELECT k FROM t WHERE g = 3")):
        lock.jobs_under_lock.clear()
        (expected,) = db.execute(f"SELECT count(*) FROM t WHERE {where}").fetchone()
        assert conn.execute(sql).status == f"{verb} {expected}"
        db.execute(sql)
        assert lock.jobs_under_lock and sum(lock.jobs_under_lock) == 0, lock.jobs_under_lock
    assert lock.reads == 3 and lock.reads_under_lock == 0
    assert conn.writes.recomputed == 0
    assert _rows(conn) == _oracle(db)
    assert Counter(conn.execute("SELECT a FROM u").rows) == Counter(
        db.execute("SELECT a FROM u").fetchall())


def test_an_insert_elsewhere_completes_while_an_update_computes(both, monkeypatch) -> None:
    conn, db = both
    lock = _Lock(monkeypatch)
    other = mzflow.connect(str(conn.config.home))
    computing, inserted = threading.Event(), threading.Event()
    done: dict[str, Any] = {}

    def insert() -> None:
        computing.wait(120)
        other.execute("INSERT INTO u VALUES (1)")
        done["at"] = other.store.snapshot().read_ts
        inserted.set()

    def stop_midway() -> None:  # the UPDATE's Spark read is done; its commit is not
        if not computing.is_set():
            computing.set()
            done["waited"] = inserted.wait(120)

    lock.on_read = stop_midway
    writer = threading.Thread(target=insert)
    writer.start()
    conn.execute("UPDATE t SET x = 0 WHERE k < 10")
    writer.join()
    # (Computed under the lock, the UPDATE never stops outside it: no "waited".)
    assert done.get("waited"), "the INSERT into u waited for the UPDATE of t"
    assert done["at"] < conn.store.snapshot().read_ts  # it committed first
    assert other.execute("SELECT a FROM u").rows == [(1,)]
    db.execute("UPDATE t SET x = 0 WHERE k < 10")
    assert _rows(conn) == _oracle(db)
    assert lock.reads_under_lock == 0 and sum(lock.jobs_under_lock) == 0
    other.close()


def test_a_write_to_the_same_table_meanwhile_makes_the_update_compute_again(
        both, monkeypatch) -> None:
    conn, db = both
    lock = _Lock(monkeypatch)
    other = mzflow.connect(str(conn.config.home))
    conflicts = ["INSERT INTO t VALUES (-1, 1, 5), (-2, 2, 995)",
                 "ALTER TABLE t ADD COLUMN y int"]

    def conflict() -> None:  # commits after the UPDATE read, before it commits
        if conflicts:
            sql = conflicts.pop(0)
            other.execute(sql)
            db.execute(sql)

    lock.on_read = conflict
    conn.execute("UPDATE t SET x = x * 2 WHERE x > 990 OR k < 0")
    db.execute("UPDATE t SET x = x * 2 WHERE x > 990 OR k < 0")
    # Read three times: each of the two commits meanwhile made it compute again.
    assert conn.writes.recomputed == 2 and lock.reads == 3 and lock.reads_under_lock == 0
    assert _rows(conn) == _oracle(db)
    assert Counter(conn.execute("SELECT y FROM t").rows) == Counter({(None,): ROWS + 2})
    other.close()


def test_after_its_retries_an_update_computes_under_the_lock(both, monkeypatch) -> None:
    conn, db = both
    conn.execute("ALTER SYSTEM SET write_retries = 2")
    lock = _Lock(monkeypatch)
    other = mzflow.connect(str(conn.config.home))
    n = iter(range(1, 100))

    def conflict() -> None:  # a write to t after every read outside the lock
        sql = f"INSERT INTO t VALUES ({-next(n)}, 3, 999)"
        other.execute(sql)
        db.execute(sql)

    lock.on_read = conflict
    conn.execute("UPDATE t SET x = -x WHERE x = 999")
    db.execute("UPDATE t SET x = -x WHERE x = 999")
    assert conn.writes.recomputed == 2 and lock.reads == 3 and lock.reads_under_lock == 1
    assert _rows(conn) == _oracle(db)
    conn.execute("ALTER SYSTEM SET write_retries = 0")  # always under the lock
    conn.execute("DELETE FROM t WHERE x < 0")
    db.execute("DELETE FROM t WHERE x < 0")
    assert lock.reads_under_lock == 2 and conn.writes.recomputed == 2
    assert _rows(conn) == _oracle(db)
    other.close()


def test_large_changes_write_their_files_before_the_lock(both, monkeypatch) -> None:
    """A large UPDATE or DELETE writes its files outside the lock and only commits them
    under it (storage/rewrite.py); a small one merges under it. A view over the table,
    ticked after each, equals DuckDB's answer."""
    conn, db = both
    view = "SELECT g, count(*) AS n, sum(x) AS s FROM t GROUP BY g"
    conn.execute(f"CREATE MATERIALIZED VIEW v AS {view}")
    conn.tick()
    lock = _Lock(monkeypatch)
    for sql, staged in (("UPDATE t SET x = x + 1 WHERE g < 5", True),  # 142,857 rows
                        ("DELETE FROM t WHERE k < 120000", True),
                        ("UPDATE t SET x = 0 WHERE k > 199990", False)):
        lock.data_writes.clear()
        conn.execute(sql)
        db.execute(sql)
        under = sum(n for (_, held), n in lock.data_writes.items() if held)
        outside = lock.data_writes[("write_deltalake", False)]
        assert (under, outside) == ((0, 1) if staged else (1, 0)), (sql, lock.data_writes)
        conn.tick()
        got = Counter(tuple(int(v) for v in r) for r in conn.execute("SELECT * FROM v").rows)
        assert got == Counter(db.execute(view).fetchall()), sql
    assert _rows(conn) == _oracle(db)
    assert not list((conn.config.home / "warehouse").rglob("_mz_staging"))
