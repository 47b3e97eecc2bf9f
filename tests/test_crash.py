"""Crash safety of table writes, proven with real ``kill -9`` of writer processes.

Every write is one Delta commit made inside the catalog's write transaction. These
tests start writers as separate Python processes on a shared home and SIGKILL them
at spread-out moments of a big write (COPY of 1 million Parquet rows, a 10,000-row
INSERT VALUES, a 500,000-row INSERT … SELECT computed on Spark), when the Delta data
file appears, and at the one moment a timer seldom hits: after the Delta commit,
before the catalog commit (the writer kills itself there). After each kill the table
must hold exactly its rows before the write or exactly those plus the new rows (count,
sum, no duplicate values or row ids), the catalog must not be left locked, a new write
must succeed, and a retry with the same idempotency key must land the rows exactly
once. Three processes writing at once must all land, with Delta commit times strictly
increasing with versions.

Spark takes tens of seconds to start on two cores, so the writers that need it start
in the background while the others are killed. Run with ``pytest -s`` to see the
measured figures.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import mzflow

# Writers are child processes; INSERT … SELECT and the checking reads run on Spark.
pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROWID = "_mz_rowid"
N_COPY = 1_000_000  # rows in the Parquet file every COPY loads
N_VALUES = 10_000  # rows in the big INSERT VALUES
N_SELECT = 500_000  # rows an INSERT … SELECT copies from another table
SELECT_KILL_AT = 2.0  # seconds into the INSERT … SELECT (its Spark job) to kill it
PRE = [-1, -2, -3]  # the `a` values a table holds before the killed write
MARKER = -100  # `a` of the row written after a kill to prove the table is writable
APPLIED = "already applied"  # the idempotency notice

# The writer. argv[1] names a JSON file: home, jobs [{name, sql, key}], optional warmup SQL
# (run first, so that a kill hits the write and not the loading of modules or Spark),
# barrier file (its JSON content, if any, replaces jobs), linger seconds, and `inject`:
# "after_delta_commit" makes the process SIGKILL itself right after the first Delta commit
# of its jobs returns, before the catalog transaction commits.
CHILD = r"""
import json, os, signal, sys, time

with open(sys.argv[1]) as f:
    args = json.load(f)


def emit(**kw):
    kw["t"] = time.time()
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


armed = False  # the warm-up writes are not killed
if args.get("inject") == "after_delta_commit":
    from mzflow.storage import delta

    original = delta.Shard.append

    def append(self, *a, **k):
        version = original(self, *a, **k)
        if armed:
            emit(event="delta_committed", version=version)
            os.kill(os.getpid(), signal.SIGKILL)
        return version

    delta.Shard.append = append

import mzflow

conn = mzflow.connect(args["home"])
emit(event="connected")  # past the catalog migrations, which take the write lock
for sql in args.get("warmup", []):
    conn.execute(sql)
if args.get("barrier"):  # wait, warmed up, until the test releases us (maybe with jobs)
    emit(event="ready")
    while not os.path.exists(args["barrier"]):
        time.sleep(0.002)
    with open(args["barrier"]) as f:
        text = f.read()
    if text:
        args["jobs"] = json.loads(text)
armed = True
for job in args["jobs"]:
    key = tuple(job["key"]) if job.get("key") else None
    emit(event="start", name=job["name"])
    t0 = time.perf_counter()
    r = conn.execute(job["sql"], idempotency_key=key)
    emit(event="done", name=job["name"], status=r.status, notices=list(r.notices),
         secs=time.perf_counter() - t0)
emit(event="exit")
time.sleep(args.get("linger", 0))  # alive, its write done: a late kill still kills it
"""


class Child:
    """One writer process; its JSON events arrive on a queue."""

    def __init__(self, args: dict[str, Any], log_dir: Path, label: str):
        self.label = label
        self.args = args
        self.stderr_path = log_dir / f"{label}.stderr"
        args_path = log_dir / f"{label}.json"
        args_path.write_text(json.dumps(args))
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(args_path)],
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def _fail(self, why: str) -> NoReturn:
        tail = self.stderr_path.read_text()[-3000:]
        pytest.fail(f"writer {self.label}: {why}; events {self.seen}; stderr:\n{tail}")

    def wait_for(self, event: str, name: str | None = None, timeout: float = 120) -> dict:
        for old in self.seen:
            if old["event"] == event and (name is None or old.get("name") == name):
                return old
        deadline = time.monotonic() + timeout
        while True:
            try:
                e = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self._fail(f"no {event!r} within {timeout}s")
            if e is None:
                self.events.put(None)
                self.proc.wait()
                self._fail(f"exited with {self.proc.returncode} before {event!r}")
            self.seen.append(e)
            if e["event"] == event and (name is None or e.get("name") == name):
                return e

    def release(self, jobs: list[dict[str, Any]] | None = None) -> None:
        """Let a writer waiting at its barrier go on (with ``jobs`` instead of its own)."""
        barrier = Path(self.args["barrier"])
        tmp = barrier.with_suffix(".tmp")
        tmp.write_text(json.dumps(jobs) if jobs is not None else "")
        os.replace(tmp, barrier)

    def drain(self, timeout: float = 60) -> list[dict[str, Any]]:
        """Every event up to the end of the process's output."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                e = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return self.seen  # a grandchild still holds the pipe open
            if e is None:
                self.events.put(None)
                return self.seen
            self.seen.append(e)

    def finish(self, timeout: float = 300) -> list[dict[str, Any]]:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self._fail(f"still running after {timeout}s")
        self.drain()
        if self.proc.returncode != 0:
            self._fail(f"exit code {self.proc.returncode}")
        return self.seen

    def kill9(self) -> float:
        """SIGKILL the writer (only this pid, as `kill -9 <pid>` would); when it was sent."""
        sent = time.time()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.drain()
        return sent

    def done(self) -> list[dict[str, Any]]:
        return [e for e in self.seen if e["event"] == "done"]


# -- reading the tables without Spark ----------------------------------------------------


@dataclass(frozen=True)
class State:
    rows: int
    total: int  # sum(a)
    distinct_a: int
    distinct_rowid: int
    max_rowid: int
    version: int
    last_ts: int
    times: tuple[int, ...]  # mzflow.ts of every version, by version


def table_path(conn: mzflow.Connection, name: str) -> Path:
    (item_id,), = conn.execute(f"SELECT id FROM mz_tables WHERE name = '{name}'").rows
    return Path(conn.config.warehouse) / item_id


def delta_state(path: Path) -> State:
    from deltalake import DeltaTable

    dt = DeltaTable(str(path))
    t = dt.to_pyarrow_table(columns=["a", ROWID])
    history = sorted(dt.history(), key=lambda h: int(h["version"]))
    assert [int(h["version"]) for h in history] == list(range(len(history)))
    missing = [h["version"] for h in history if "mzflow.ts" not in h]
    assert not missing, f"Delta commits without mzflow.ts at versions {missing}"
    times = tuple(int(h["mzflow.ts"]) for h in history)
    return State(rows=t.num_rows, total=pc.sum(t["a"]).as_py() or 0,
                 distinct_a=pc.count_distinct(t["a"]).as_py(),
                 distinct_rowid=pc.count_distinct(t[ROWID]).as_py(),
                 max_rowid=pc.max(t[ROWID]).as_py() or 0,
                 version=int(dt.version()), last_ts=times[-1], times=times)


def expect(state: State, rows: int, total: int, what: str) -> None:
    assert (state.rows, state.total) == (rows, total), (
        f"{what}: table holds {state.rows} rows summing to {state.total}, "
        f"expected {rows} rows summing to {total}")
    assert state.distinct_a == state.rows, f"{what}: duplicated rows ({state})"
    assert state.distinct_rowid == state.rows, (
        f"{what}: {state.rows - state.distinct_rowid} rows share a {ROWID} with another row; "
        "a DELETE or UPDATE of one would also hit the other")
    assert all(a < b for a, b in zip(state.times, state.times[1:], strict=False)), (
        f"{what}: mzflow.ts not strictly increasing with the Delta version: {state.times}")


def catalog_meta(home: Path, key: str) -> int:
    with sqlite3.connect(home / "catalog.db") as db:
        (value,), = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
    return int(value)


def assert_catalog_unlocked(home: Path, what: str) -> None:
    """Take the catalog's write lock with no wait at all: a lock left behind by the
    killed writer would make this fail at once with 'database is locked'."""
    db = sqlite3.connect(home / "catalog.db", timeout=0, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
    except sqlite3.OperationalError as e:
        pytest.fail(f"{what}: catalog write lock still held: {e}")
    finally:
        db.close()


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc; Spark's JVM for a writer)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- one kill ----------------------------------------------------------------------------


@dataclass
class Write:
    table: str
    sql: str
    key: tuple[str, int]
    new_rows: int
    new_total: int


@dataclass
class Kill:
    write: Write
    label: str  # "t+0.123s" or "after Delta commit"
    outcome: str = ""  # before-commit | orphan-delta-commit | committed
    child_finished: bool = False  # the write had returned before SIGKILL arrived
    write_secs: float | None = None  # how long it took, then
    markers: int = 0


def prepare(conn: mzflow.Connection, table: str) -> None:
    conn.execute(f"CREATE TABLE {table} (a bigint NOT NULL, b text)")
    conn.execute(f"INSERT INTO {table} VALUES " + ", ".join(f"({a}, 'pre')" for a in PRE))


def spawn(home: Path, log_dir: Path, w: Write, when: float | str,
          warmup: list[str]) -> Child:
    """A writer for ``w``, warming up now and waiting at its barrier for :func:`kill_once`."""
    args: dict[str, Any] = {"home": str(home), "warmup": warmup, "linger": 10,
                            "barrier": str(log_dir / f"go-{w.table}"),
                            "jobs": [{"name": w.table, "sql": w.sql, "key": list(w.key)}]}
    if when == "after Delta commit":
        args["inject"] = "after_delta_commit"
    return Child(args, log_dir, f"kill-{w.table}")


def kill_once(conn: mzflow.Connection, home: Path, child: Child, w: Write,
              when: float | str, next_child: Child | None = None) -> Kill:
    """Release ``child`` (from :func:`spawn`) into its write, SIGKILL it, then check the
    table and the catalog.

    ``when``: seconds after the writer starts the write; ``"data file"``: as soon as a
    new Parquet file appears in the table's directory; ``"after Delta commit"``: the
    writer kills itself when its Delta commit returns, before its catalog transaction
    commits (the one window a timer seldom hits). ``next_child``, the writer warming up
    for the next kill, is let finish its warm-up before the catalog's lock is checked."""
    path = table_path(conn, w.table)
    before = delta_state(path)
    files_before = set(path.glob("*.parquet"))
    k = Kill(w, str(when))
    child.wait_for("ready", timeout=300)
    jvms = descendants(child.proc.pid)  # Spark's JVM, if the writer started one
    child.release()
    if when == "after Delta commit":
        child.proc.wait(timeout=300)
        child.drain()
        assert child.proc.returncode == -signal.SIGKILL, child.seen
        assert [e["event"] for e in child.seen][-1] == "delta_committed", child.seen
    else:
        start = child.wait_for("start", w.table)
        if when == "data file":
            deadline = time.monotonic() + 60
            while not set(path.glob("*.parquet")) - files_before:
                assert time.monotonic() < deadline, "no data file appeared"
                time.sleep(0.001)
        else:
            assert isinstance(when, float)
            time.sleep(max(0.0, start["t"] + when - time.time()))
        sent = child.kill9()
        k.label = f"t+{sent - start['t']:.3f}s" + (" (data file)" if when == "data file" else "")
        assert child.proc.returncode == -signal.SIGKILL, (child.proc.returncode, child.seen)
        finished = [e for e in child.done() if e.get("name") == w.table]
        k.child_finished = bool(finished)
        k.write_secs = finished[0]["secs"] if finished else None
    # The writer's own child processes (Spark's JVM) must not outlive it.
    deadline = time.monotonic() + 20
    while any(alive(p) for p in jvms) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in jvms if alive(p)]
    for p in left:  # started by our writer: end them so the suite does not leak
        os.kill(p, signal.SIGKILL)
    assert not left, f"{k.label}: writer's child processes {left} outlived it"

    if next_child is not None:
        next_child.wait_for("ready", timeout=300)
    assert_catalog_unlocked(home, k.label)
    after = delta_state(path)
    if after.version == before.version:
        k.outcome = "before-commit"
        expect(after, before.rows, before.total, f"{w.table} killed {k.label}")
    else:
        assert after.version == before.version + 1, (before, after)
        # Did the catalog transaction commit too? Then it recorded the row ids as used.
        # (Not read_ts: the next writer's warm-up write may have advanced it since.)
        k.outcome = ("committed" if catalog_meta(home, "next_rowid_id") > after.max_rowid
                     else "orphan-delta-commit")
        if when == "after Delta commit":
            assert k.outcome == "orphan-delta-commit", k
        expect(after, before.rows + w.new_rows, before.total + w.new_total,
               f"{w.table} killed {k.label}")

    # The catalog is usable: DDL gets the write lock promptly, and the table takes a write.
    t0 = time.perf_counter()
    conn.execute(f"CREATE TABLE probe_{w.table} (x bigint)")
    ddl_secs = time.perf_counter() - t0
    # SQLite's busy timeout is 30 s: a lock nobody releases would fail this; other writers
    # (the next one warming up) may hold it briefly, and a loaded machine is slow.
    assert ddl_secs < 20, f"DDL after the kill took {ddl_secs:.1f}s"
    conn.execute(f"INSERT INTO {w.table} VALUES ({MARKER}, 'marker')")
    k.markers = 1
    expect(delta_state(path), after.rows + 1, after.total + MARKER,
           f"{w.table}: first write after the kill {k.label}")
    print(f"  kill {w.table:<9} {k.label:>24}: {k.outcome:<19} write returned before "
          f"kill: {k.child_finished!s:<5}; DDL after kill {ddl_secs * 1000:.0f} ms"
          + (f"; {len(jvms)} JVM process(es) of the writer gone" if jvms else ""))
    return k


def retry_all(conn: mzflow.Connection, child: Child, kills: list[Kill]) -> None:
    """Re-run every killed write with its key in ``child`` (a writer waiting at its
    barrier), twice: the first pass lands exactly the writes that had not committed, the
    second skips them all."""
    jobs = [{"name": f"{p}:{k.write.table}", "sql": k.write.sql, "key": list(k.write.key)}
            for p in ("retry", "again") for k in kills]
    child.wait_for("ready", timeout=300)
    t0 = time.perf_counter()
    child.release(jobs)
    done = {e["name"]: e for e in child.finish() if e["event"] == "done"}
    landed = [f"{e['name'][6:]} {e['secs']:.2f}s" for n, e in done.items()
              if n.startswith("retry:") and not e["notices"]]
    print(f"  retry writer: {len(jobs)} writes (2 passes) in {time.perf_counter() - t0:.1f}s; "
          f"retries that wrote (unkilled durations): {', '.join(landed) or 'none'}")
    for k in kills:
        w = k.write
        first, second = done[f"retry:{w.table}"], done[f"again:{w.table}"]
        if k.outcome == "before-commit":
            assert not first["notices"], (k.label, first)
            assert first["status"].endswith(str(w.new_rows)), (k.label, first)
        else:
            assert any(APPLIED in n for n in first["notices"]), (k.label, first)
        assert any(APPLIED in n for n in second["notices"]), (k.label, second)
        expect(delta_state(table_path(conn, w.table)),
               len(PRE) + k.markers + w.new_rows,
               sum(PRE) + k.markers * MARKER + w.new_total,
               f"{w.table} after the retries")


def check_sql(conn: mzflow.Connection, kills: list[Kill], when: str) -> None:
    """The real read path (Spark over each table's files at the catalog's read time)
    agrees with the Delta log for every table."""
    union = " UNION ALL ".join(f"SELECT '{k.write.table}' AS t, a FROM {k.write.table}"
                               for k in kills)
    sql = f"SELECT t, count(*), sum(a) FROM ({union}) AS u GROUP BY t"
    t0 = time.perf_counter()
    got = {t: (n, s) for t, n, s in conn.execute(sql).rows}
    for k in kills:
        st = delta_state(table_path(conn, k.write.table))
        assert got[k.write.table] == (st.rows, st.total), (when, k.write.table, st)
    print(f"  SQL SELECT count(*), sum(a) of {len(kills)} tables {when} matches the Delta log "
          f"({time.perf_counter() - t0:.1f}s)")


def summary(kills: list[Kill]) -> None:
    counts: dict[str, int] = {}
    for k in kills:
        counts[k.outcome] = counts.get(k.outcome, 0) + 1
    late = sum(k.child_finished for k in kills)
    print(f"  outcomes: {counts}; kills after the write had returned: {late}")


def write_parquet(path: Path, n: int, offset: int = 0) -> int:
    a = pa.array(range(offset, offset + n), pa.int64())
    b = pc.binary_join_element_wise("row", pc.cast(a, pa.string()), "")
    pq.write_table(pa.table({"a": a, "b": b}), path)
    return sum(range(offset, offset + n))


# -- the tests ---------------------------------------------------------------------------


@pytest.mark.slow
def test_kill9_mid_write(tmp_path: Path) -> None:
    """COPY, INSERT VALUES and INSERT … SELECT writers killed at spread-out moments."""
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    t_start = time.perf_counter()
    parquet = tmp_path / "rows.parquet"
    copy_total = write_parquet(parquet, N_COPY)
    values = ", ".join(f"({i}, 'v{i}')" for i in range(N_VALUES))
    values_total = sum(range(N_VALUES))
    conn = mzflow.connect(str(home))
    conn.execute("CREATE TABLE src (a bigint NOT NULL, b text)")
    conn.execute(f"COPY src FROM '{parquet}' WITH (FORMAT parquet)")
    conn.execute("CREATE TABLE warm (a bigint NOT NULL, b text)")
    warm = ["INSERT INTO warm VALUES (0, 'warm-up')"]  # loads the write path's modules
    spark_warm = ["SELECT count(*) FROM src"]  # also starts Spark

    def copy_write(table: str) -> Write:
        return Write(table, f"COPY {table} FROM '{parquet}' WITH (FORMAT parquet)",
                     (f"copy-{table}", 1), N_COPY, copy_total)

    def values_write(table: str) -> Write:
        return Write(table, f"INSERT INTO {table} VALUES {values}", (f"ins-{table}", 1),
                     N_VALUES, values_total)

    select_write = Write("sel", f"INSERT INTO sel SELECT a, b FROM src WHERE a < {N_SELECT}",
                         ("sel", 1), N_SELECT, sum(range(N_SELECT)))

    # Starting Spark takes tens of seconds on two cores: the INSERT … SELECT writer, the
    # retry writer and this process start theirs now, while the other writers are killed.
    prepare(conn, "sel")
    select_child = spawn(home, logs, select_write, SELECT_KILL_AT, spark_warm)
    retry_child = Child({"home": str(home), "warmup": spark_warm, "jobs": [],
                         "barrier": str(logs / "go-retry")}, logs, "retry")
    background = mzflow.connect(str(home))
    spark_up = threading.Thread(target=background.execute, args=spark_warm, daemon=True)
    spark_up.start()
    select_child.wait_for("connected")
    retry_child.wait_for("connected")

    # Calibrate: the COPY and the INSERT VALUES, not killed.
    for t in ("cal_copy", "cal_vals"):
        prepare(conn, t)
    cal = [copy_write("cal_copy"), values_write("cal_vals")]
    child = Child({"home": str(home), "warmup": warm, "jobs": [
        {"name": w.table, "sql": w.sql, "key": list(w.key)} for w in cal]}, logs, "calibrate")
    secs = {e["name"]: e["secs"] for e in child.finish() if e["event"] == "done"}
    for w in cal:
        expect(delta_state(table_path(conn, w.table)), len(PRE) + w.new_rows,
               sum(PRE) + w.new_total, f"calibration {w.table}")
    d_copy, d_vals = secs["cal_copy"], secs["cal_vals"]
    print(f"\nunkilled writes: COPY of {N_COPY:,} Parquet rows {d_copy:.3f}s, "
          f"INSERT of {N_VALUES:,} VALUES rows {d_vals:.3f}s")

    copy_points = [0.0, 0.2, 0.35, 0.5, 0.65, 0.8, 1.0]
    vals_points = [0.0, 0.45, 0.9]
    # (write, when: a fraction of the write's duration or a named moment)
    plan: list[tuple[Write, float | str]] = []
    plan += [(copy_write(f"copy_{i}"), f) for i, f in enumerate(copy_points)]
    plan += [(copy_write("copy_file"), "data file"), (copy_write("copy_inj"), "after Delta commit")]
    plan += [(values_write(f"vals_{i}"), f) for i, f in enumerate(vals_points)]
    plan += [(values_write("vals_inj"), "after Delta commit")]
    print(f"COPY killed at {copy_points} x its duration after it started, when its data file "
          f"appears, after its Delta commit; INSERT VALUES at {vals_points} x its duration "
          "and after its Delta commit (duration: the calibration's, or the shortest seen since "
          "in a writer killed after its write returned):")
    for w, _ in plan:
        prepare(conn, w.table)
    duration = {"copy": d_copy, "vals": d_vals}
    kills: list[Kill] = []
    # Each writer starts (and warms up) while the previous one is killed and checked.
    children = [spawn(home, logs, *plan[0], warm)]
    for i, (w, when) in enumerate(plan):
        if i + 1 < len(plan):
            children.append(spawn(home, logs, *plan[i + 1], warm))
        child, waiting = children[i], children[i + 1] if i + 1 < len(plan) else None
        kind = w.table.split("_")[0]
        if isinstance(when, float):
            when = when * duration[kind]
        k = kill_once(conn, home, child, w, when, waiting)
        if k.write_secs is not None:  # calibrated under more load than this: adapt
            duration[kind] = min(duration[kind], k.write_secs)
        kills.append(k)
    print(f"INSERT … SELECT of {N_SELECT:,} rows (computed on Spark), killed {SELECT_KILL_AT}s "
          "after it started (the writer's Spark already up):")
    kills.append(kill_once(conn, home, select_child, select_write, SELECT_KILL_AT))
    summary(kills)

    spark_up.join(timeout=300)
    check_sql(conn, [k for k in kills if k.outcome != "before-commit"], "after the kills")
    # A write that reads a table after a kill (a DELETE, run on Spark): only the marker goes.
    for k in kills:
        if k.outcome != "before-commit":
            conn.execute(f"DELETE FROM {k.write.table} WHERE a = {MARKER}")
            k.markers = 0
            expect(delta_state(table_path(conn, k.write.table)), len(PRE) + k.write.new_rows,
                   sum(PRE) + k.write.new_total, f"{k.write.table} after deleting the marker")
    retry_all(conn, retry_child, kills)
    check_sql(conn, kills, "after the retries")
    assert_catalog_unlocked(home, "end")
    print(f"  test took {time.perf_counter() - t_start:.1f}s")


@pytest.mark.slow
def test_concurrent_writers_all_land(tmp_path: Path) -> None:
    """Three processes, released at one moment, each make 20 single-row INSERTs into a
    shared table and 20 into a table of their own, and 2 COPYs into the shared one."""
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    t_start = time.perf_counter()
    procs, inserts, copies, copy_rows = 3, 20, 2, 50_000
    conn = mzflow.connect(str(home))
    conn.execute("CREATE TABLE shared (a bigint NOT NULL, b text)")
    expected_total = 0
    all_jobs: list[list[dict[str, Any]]] = []
    for p in range(procs):
        conn.execute(f"CREATE TABLE own_{p} (a bigint NOT NULL, b text)")
        copy_jobs: list[dict[str, Any]] = []
        for c in range(copies):
            offset = 10_000_000 * (p + 1) + 1_000_000 * c
            f = tmp_path / f"p{p}c{c}.parquet"
            expected_total += write_parquet(f, copy_rows, offset)
            copy_jobs.append({"name": f"copy{c}", "key": [f"p{p}", c + 1],
                              "sql": f"COPY shared FROM '{f}' WITH (FORMAT parquet)"})
        jobs: list[dict[str, Any]] = []
        for i in range(inserts):
            a = 1000 * p + i
            expected_total += a
            jobs.append({"name": f"shared{i}", "key": None,
                         "sql": f"INSERT INTO shared VALUES ({a}, 'p{p}')"})
            jobs.append({"name": f"own{i}", "key": None,
                         "sql": f"INSERT INTO own_{p} VALUES ({i}, 'x')"})
            if copy_jobs and (i + 1) % (inserts // copies) == inserts // copies // 2:
                jobs.append(copy_jobs.pop(0))
        jobs += copy_jobs
        all_jobs.append(jobs)
    barrier = tmp_path / "go"
    children = [Child({"home": str(home), "jobs": jobs, "barrier": str(barrier)}, logs, f"w{p}")
                for p, jobs in enumerate(all_jobs)]
    for child in children:
        child.wait_for("ready")
    released = time.time()
    barrier.touch()
    spans = []
    for child in children:
        events = child.finish()
        starts = [e["t"] for e in events if e["event"] == "start"]
        ends = [e["t"] for e in events if e["event"] == "done"]
        spans.append((min(starts) - released, max(ends) - released))
        assert len(ends) == len(all_jobs[0])
    per_proc = len(all_jobs[0])
    print(f"\n{procs} writers x {per_proc} writes ({inserts} INSERTs into shared, {inserts} into "
          f"their own table, {copies} COPYs of {copy_rows:,} rows into shared), released together: "
          + ", ".join(f"first start +{s:.3f}s, last done +{e:.3f}s" for s, e in spans))
    overlap = min(e for _, e in spans) - max(s for s, _ in spans)
    assert overlap > 0, f"the writers did not overlap in time: {spans}"

    from deltalake import DeltaTable

    shared_rows = procs * (inserts + copies * copy_rows)
    path = table_path(conn, "shared")
    st = delta_state(path)
    expect(st, shared_rows, expected_total, "shared table")
    assert st.version == procs * (inserts + copies), st.version  # one commit per write
    # Whose commit was each version? The writers overlapped in time (asserted above); how
    # finely their commits interleave is up to the scheduler, so only require that the
    # shared table saw more than one writer take turns.
    cdf = pa.table(DeltaTable(str(path)).load_cdf(starting_version=1))
    owner = {}
    for a, v in zip(cdf["a"].to_pylist(), cdf["_commit_version"].to_pylist(), strict=True):
        owner[v] = a // 1000 if a < 10_000_000 else a // 10_000_000 - 1
    order = [owner[v] for v in sorted(owner)]
    switches = sum(x != y for x, y in zip(order, order[1:], strict=False))
    print(f"  shared: {st.rows:,} rows in {st.version} commits, writer changes between "
          f"consecutive commits: {switches}; mzflow.ts strictly increasing with version")
    assert switches >= 1, order
    times = list(st.times)
    for p in range(procs):
        own = delta_state(table_path(conn, f"own_{p}"))
        expect(own, inserts, sum(range(inserts)), f"own_{p}")
        times += own.times
    assert len(set(times)) == len(times), "two commits got the same timestamp"
    got = conn.execute("SELECT count(*), count(DISTINCT a), sum(a) FROM shared").rows
    assert got == [(shared_rows, shared_rows, expected_total)], got
    got = conn.execute(" UNION ALL ".join(f"SELECT count(*) FROM own_{p}"
                                          for p in range(procs))).rows
    assert got == [(inserts,)] * procs, got
    print(f"  SQL agrees: {shared_rows:,} rows, all distinct; test took "
          f"{time.perf_counter() - t_start:.1f}s")


@pytest.mark.slow
def test_write_after_an_orphaned_commit_sees_it(tmp_path: Path) -> None:
    """A writer killed between its Delta commit and its catalog commit leaves a commit the
    catalog never recorded. The next write, here a DELETE that reads the table, must see
    its rows (it commits after them) and must not hand their row ids out again."""
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    conn = mzflow.connect(str(home))
    prepare(conn, "t")
    path = table_path(conn, "t")
    w = Write("t", "INSERT INTO t VALUES (10, 'orphan'), (11, 'orphan'), (12, 'orphan')",
              ("orphan", 1), 3, 33)
    child = spawn(home, logs, w, "after Delta commit", [])
    child.wait_for("ready")
    child.release()
    child.proc.wait(timeout=120)
    child.drain()
    assert child.proc.returncode == -signal.SIGKILL, child.seen
    orphan = delta_state(path)
    expect(orphan, len(PRE) + 3, sum(PRE) + 33, "after the kill")
    assert catalog_meta(home, "read_ts") < orphan.last_ts  # the catalog never recorded it

    result = conn.execute("DELETE FROM t WHERE b = 'orphan'")
    assert result.status == "DELETE 3", result
    expect(delta_state(path), len(PRE), sum(PRE), "after the DELETE")
    conn.execute(f"INSERT INTO t VALUES ({MARKER}, 'marker')")
    expect(delta_state(path), len(PRE) + 1, sum(PRE) + MARKER, "after an INSERT")
    again = conn.execute(w.sql, idempotency_key=w.key)
    assert any(APPLIED in n for n in again.notices), again
    assert conn.execute("SELECT count(*), sum(a) FROM t").rows == [(len(PRE) + 1,
                                                                     sum(PRE) + MARKER)]
    print(f"\norphaned commit of 3 rows: the next DELETE saw and removed them ({result.status})")
