"""Sinks: every envelope and format against the true changes, reruns, catch-up, faults.

The clock is moved with ``pendulum.travel_to`` (time-machine), so writes land in
chosen schedule intervals and those intervals have ended when the sink runs. The
true changes come from an independent engine: the table's rows are replayed in
Python after every write and the view is evaluated by DuckDB at each write time.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pendulum
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import mzflow
from mzflow.catalog import schedules, sinks
from mzflow.sinks import export as sink_runs

VIEW_SQL = "SELECT g, count(*) AS n, sum(x) AS total FROM t GROUP BY g"
DAY = (2026, 3, 1)


@pytest.fixture
def clock() -> Iterator[Any]:
    def at(hour: int, minute: int, second: int = 0) -> None:
        pendulum.travel_to(pendulum.datetime(*DAY, hour, minute, second, tz="UTC"),
                           freeze=False)
    yield at
    pendulum.travel_back()


def _norm(row: dict[str, Any], columns: list[str]) -> tuple[Any, ...]:
    out = []
    for c in columns:
        v = row[c]
        if v is None or v == "":
            out.append(None)
        elif c in ("x", "total"):
            out.append(Decimal(str(v)).normalize())
        elif c in ("k", "n"):
            out.append(int(v))
        else:
            out.append(str(v))
    return tuple(out)


def _contents(rows: list[tuple[int, str, Decimal]], view: bool) -> Counter[tuple[Any, ...]]:
    """The table's or the view's contents, computed by DuckDB."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k INTEGER, g TEXT, x DECIMAL(10,2))")
    if rows:
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    result = con.execute(VIEW_SQL if view else "SELECT k, g, x FROM t").fetchall()
    cols = ["g", "n", "total"] if view else ["k", "g", "x"]
    return Counter(_norm(dict(zip(cols, r, strict=True)), cols) for r in result)


class History:
    """Each write's time and the table's rows after it (the oracle's input)."""

    def __init__(self, conn: mzflow.Connection):
        self.conn = conn
        self.rows: list[tuple[int, str, Decimal]] = []
        self.states: list[tuple[int, list[tuple[int, str, Decimal]]]] = []

    def write(self, sql: str, apply: Any) -> None:
        self.conn.execute(sql)
        self.rows = apply(list(self.rows))
        self.states.append((self.conn.store.snapshot().read_ts, list(self.rows)))

    def at(self, ts: int) -> list[tuple[int, str, Decimal]]:
        found: list[tuple[int, str, Decimal]] = []
        for t, rows in self.states:
            if t <= ts:
                found = rows
        return found

    def updates(self, start_ts: int, snapshot: bool, view: bool
                ) -> Counter[tuple[Any, ...]]:
        """True ``(time, diff, row…)`` after the sink's start, with the snapshot at it."""
        out: Counter[tuple[Any, ...]] = Counter()
        prev = _contents(self.at(start_ts), view)
        if snapshot:
            for row, n in prev.items():
                out[(start_ts, n) + row] += 1
        for t, rows in self.states:
            if t <= start_ts:
                continue
            new = _contents(rows, view)
            for row in set(prev) | set(new):
                d = new[row] - prev[row]
                if d:
                    out[(t, d) + row] += 1
            prev = new
        return out


def _write_workload(h: History, clock: Any) -> History:
    """Writes spread over 10:00–13:00 (four hourly intervals)."""
    rng = random.Random(7)
    next_k = [0]

    def insert(n: int) -> None:
        new = []
        for _ in range(n):
            next_k[0] += 1
            new.append((next_k[0], rng.choice("abc"), Decimal(rng.randint(1, 999)) / 100))
        values = ", ".join(f"({k}, '{g}', {x})" for k, g, x in new)
        h.write(f"INSERT INTO t VALUES {values}", lambda rows: rows + new)

    def update(g: str) -> None:
        h.write(f"UPDATE t SET x = x + 1 WHERE g = '{g}'",
                lambda rows: [(k, gg, x + 1 if gg == g else x) for k, gg, x in rows])

    def delete(g: str) -> None:
        h.write(f"DELETE FROM t WHERE g = '{g}'",
                lambda rows: [r for r in rows if r[1] != g])

    clock(10, 20)
    update("a")
    insert(2)
    clock(10, 50)
    delete("b")
    clock(11, 30)
    insert(3)
    update("c")
    clock(12, 10)
    delete("a")
    insert(1)
    return h


def _read(path: Path, fmt: str, schema: pa.Schema | None = None) -> list[dict[str, Any]]:
    if fmt == "PARQUET":
        return pq.read_table(path).to_pylist()
    if fmt == "CSV":
        return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
            column_types={f.name: pa.string() for f in schema} if schema else None,
            strings_can_be_null=True)).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines()]


def _files(spec: sinks.SinkSpec) -> list[Path]:
    return sorted(Path(spec.path).glob(f"{spec.name}-*"))


def _file_span(path: Path) -> tuple[int, int]:
    _, start, end = path.name.split(".")[0].rsplit("-", 2)
    parse = pendulum.from_format
    return (schedules.to_ms(parse(start, "YYYYMMDDTHHmmss[Z]", tz="UTC")),
            schedules.to_ms(parse(end, "YYYYMMDDTHHmmss[Z]", tz="UTC")))


@pytest.mark.slow
@pytest.mark.spark
def test_every_envelope_and_format_equals_the_true_changes(tmp_path: Path, clock: Any) -> None:
    clock(9, 50)
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (k int, g text, x numeric(10,2))")
    h = History(conn)
    h.write("INSERT INTO t VALUES (100, 'a', 1.50), (101, 'b', 2.25), (102, 'c', 3.00)",
            lambda rows: rows + [(100, "a", Decimal("1.50")), (101, "b", Decimal("2.25")),
                                 (102, "c", Decimal("3.00"))])
    conn.execute(f"CREATE VIEW v AS {VIEW_SQL}")
    out = tmp_path / "out"
    clock(9, 55)
    defs = {
        "app_t": ("t", "PARQUET", "ENVELOPE = APPEND"),
        "app_v": ("v", "CSV", "ENVELOPE = APPEND"),
        "ups_v": ("v", "JSON", "ENVELOPE = UPSERT, KEY = (g)"),
        "dbz_t": ("t", "PARQUET", "ENVELOPE = DEBEZIUM, KEY = (k)"),
        "dbz_v": ("v", "JSON", "ENVELOPE = DEBEZIUM"),
        "nosnap_t": ("t", "CSV", "ENVELOPE = APPEND, SNAPSHOT = false"),
        "delta_ups_v": ("v", "DELTA", "ENVELOPE = UPSERT, KEY = (g)"),
        "delta_app_t": ("t", "DELTA", "ENVELOPE = APPEND"),
    }
    for name, (src, fmt, opts) in defs.items():
        conn.execute(f"CREATE SINK {name} FROM {src} INTO {fmt} '{out / name}' "
                     f"WITH ({opts}, SCHEDULE = '@hourly')")
    _write_workload(h, clock)
    clock(13, 30)
    snap = conn.store.snapshot()
    specs = {name: sinks.spec(snap.resolve(name)) for name in defs}
    for name in defs:
        done = conn.run_sink(name)
        # The sink started at 09:55: intervals 09–10, 10–11, 11–12, 12–13, in order.
        assert [schedules.label(e.start) for e in done] == [
            "20260301T090000Z", "20260301T100000Z", "20260301T110000Z", "20260301T120000Z"]
        assert not any(e.skipped for e in done)

    def truth(name: str) -> Counter[tuple[Any, ...]]:
        spec = specs[name]
        return h.updates(spec.start_ts, spec.snapshot, view=defs[name][0] == "v")

    def appended(name: str, cols: list[str]) -> Counter[tuple[Any, ...]]:
        spec = specs[name]
        got: Counter[tuple[Any, ...]] = Counter()
        for path in _files(spec):
            lo, hi = _file_span(path)
            for r in _read(path, spec.format, pa.schema([(c, pa.string()) for c in
                                                          ["mz_timestamp", "mz_diff", *cols]])):
                ts = int(r["mz_timestamp"])
                assert lo <= ts < hi, f"{path.name}: a change at {ts} outside its interval"
                got[(ts, int(r["mz_diff"])) + _norm(r, cols)] += 1
        return got

    # APPEND: exactly the true (time, diff, row) updates, each in its interval's file.
    assert appended("app_t", ["k", "g", "x"]) == truth("app_t")
    assert appended("app_v", ["g", "n", "total"]) == truth("app_v")
    nosnap = appended("nosnap_t", ["k", "g", "x"])
    assert nosnap == truth("nosnap_t") and all(u[0] > specs["nosnap_t"].start_ts
                                               for u in nosnap)

    # UPSERT: each file holds the latest row of every key that changed in its interval,
    # or a tombstone; replaying the files gives the view at each interval's end.
    state: dict[Any, tuple[Any, ...]] = {}
    for path in _files(specs["ups_v"]):
        lo, hi = _file_span(path)
        before = dict(state)
        records = _read(path, "JSON")
        for r in records:
            key = _norm(r, ["g"])[0]
            if r["mz_state"] == "delete":
                assert r["n"] is None and r["total"] is None
                state.pop(key, None)
            else:
                state[key] = _norm(r, ["g", "n", "total"])
        expected = _contents(h.at(hi - 1), view=True)
        assert Counter(state.values()) == expected, path.name
        changed = {k for k in set(before) | set(state) if before.get(k) != state.get(k)}
        assert {_norm(r, ["g"])[0] for r in records} == changed, path.name

    # DEBEZIUM: every record's before is the row it replaces; replay = truth per interval.
    for name, cols, key in (("dbz_t", ["k", "g", "x"], ["k"]),
                            ("dbz_v", ["g", "n", "total"], [])):
        rows: Counter[tuple[Any, ...]] = Counter()
        shown = [c for c in cols if c not in key]
        for path in _files(specs[name]):
            lo, hi = _file_span(path)
            for r in _read(path, specs[name].format):
                b = {c: r[f"before_{c}"] for c in shown} | {c: r[c] for c in key}
                a = {c: r[f"after_{c}"] for c in shown} | {c: r[c] for c in key}
                assert r["mz_state"] in ("insert", "update", "delete")
                if r["mz_state"] in ("update", "delete"):
                    assert rows[_norm(b, cols)] > 0, f"{path.name}: before not present: {r}"
                    rows[_norm(b, cols)] -= 1
                if r["mz_state"] in ("update", "insert"):
                    rows[_norm(a, cols)] += 1
            assert +rows == _contents(h.at(hi - 1), view=name.endswith("_v")), path.name
        if key:  # an UPDATE of t pairs into update records
            assert any(r["mz_state"] == "update" for p in _files(specs[name])
                       for r in _read(p, "PARQUET"))

    # DELTA: the upsert table is the view now; the append table holds every update.
    from deltalake import DeltaTable

    ups = DeltaTable(str(out / "delta_ups_v")).to_pyarrow_table().to_pylist()
    assert Counter(_norm(r, ["g", "n", "total"]) for r in ups) == _contents(h.rows, view=True)
    app = DeltaTable(str(out / "delta_app_t")).to_pyarrow_table().to_pylist()
    assert Counter((int(r["mz_timestamp"]), int(r["mz_diff"])) + _norm(r, ["k", "g", "x"])
                   for r in app) == truth("delta_app_t")
    conn.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.spark
def test_rerun_is_byte_identical_and_missed_intervals_catch_up_in_order(
        tmp_path: Path, clock: Any) -> None:
    clock(9, 50)
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (k int, g text, x numeric(10,2))")
    conn.execute("INSERT INTO t VALUES (1, 'a', 1.00)")
    out = tmp_path / "out"
    conn.execute(f"CREATE SINK s FROM t INTO PARQUET '{out}/s' WITH (SCHEDULE = '@hourly')")
    conn.execute(f"CREATE SINK d FROM t INTO DELTA '{out}/d' WITH (SCHEDULE = '@hourly')")
    _write_workload(History(conn), clock)
    clock(13, 30)
    spec = sinks.spec(conn.store.snapshot().resolve("s"))
    third = (pendulum.datetime(*DAY, 11, tz="UTC"), pendulum.datetime(*DAY, 12, tz="UTC"))
    # Asking for the third interval first exports the two missed before it, in order.
    done = conn.run_sink("s", third)
    assert [schedules.label(e.start) for e in done] == [
        "20260301T090000Z", "20260301T100000Z", "20260301T110000Z"]
    assert sink_runs.intervals_due(conn.store.snapshot(), "s") == [
        (pendulum.datetime(*DAY, 12, tz="UTC"), pendulum.datetime(*DAY, 13, tz="UTC"))]
    files = _files(spec)
    digests = {p.name: _sha(p) for p in files}
    mtimes = {p.name: p.stat().st_mtime_ns for p in files}
    # A rerun of an exported interval rewrites it byte for byte, and adds no file.
    again = conn.run_sink("s", third)
    assert [e.skipped for e in again] == [True, True, False]
    assert {p.name: _sha(p) for p in _files(spec)} == digests
    assert _files(spec)[2].stat().st_mtime_ns != mtimes[files[2].name]  # really rewritten
    # Catch-up with no interval: only the one still due.
    rest = conn.run_sink("s")
    assert [(e.skipped, schedules.label(e.start)) for e in rest][-1] == (
        False, "20260301T120000Z")
    assert len(_files(spec)) == 4
    # A non-schedule interval is refused, with the schedule named.
    with pytest.raises(mzflow.Error, match="is not an interval of sink s's schedule"):
        conn.run_sink("s", (pendulum.datetime(*DAY, 11, 30, tz="UTC"),
                            pendulum.datetime(*DAY, 12, 30, tz="UTC")))
    # Delta: one commit per interval; a rerun is skipped by its idempotency key.
    from deltalake import DeltaTable

    conn.run_sink("d")
    version = DeltaTable(str(out / "d")).version()
    assert all(e.skipped for e in conn.run_sink("d", third))
    assert all(e.skipped for e in conn.run_sink("d"))
    assert DeltaTable(str(out / "d")).version() == version
    conn.close()


@pytest.mark.slow
def test_unwritable_path_fails_clearly_and_keeps_progress(tmp_path: Path, clock: Any) -> None:
    clock(9, 50)
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (k int)")
    conn.execute("INSERT INTO t VALUES (1), (2)")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the sink's folder should be")
    conn.execute(f"CREATE SINK s FROM t INTO CSV '{blocker}/out'")
    clock(10, 10)
    conn.execute("INSERT INTO t VALUES (3)")
    clock(11, 5)
    with pytest.raises(mzflow.Error, match=r'cannot write ".*not-a-dir/out/s-20260301T090000Z'
                                           r'-20260301T100000Z.csv": Not a directory'):
        conn.run_sink("s")
    assert len(sink_runs.intervals_due(conn.store.snapshot(), "s")) == 2  # nothing recorded
    blocker.unlink()  # the path becomes writable: the same run now succeeds, in order
    done = conn.run_sink("s")
    assert [schedules.label(e.start) for e in done] == ["20260301T090000Z", "20260301T100000Z"]
    rows = [r for p in sorted((tmp_path / "not-a-dir" / "out").glob("s-*"))
            for r in pcsv.read_csv(p).to_pylist()]
    assert sorted((r["k"], r["mz_diff"]) for r in rows) == [(1, 1), (2, 1), (3, 1)]
    conn.close()


def test_sink_options_are_checked(tmp_path: Path) -> None:
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (k int, v text)")
    bad = {
        "WITH (ENVELOPE = UPSERT)": "ENVELOPE UPSERT requires a KEY",
        "WITH (ENVELOPE = SIDEWAYS)": "invalid ENVELOPE SIDEWAYS",
        "WITH (KEY = (nope))": 'column "nope" does not exist',
        "WITH (SCHEDULE = 'every hour')": "invalid SCHEDULE 'every hour'",
        "WITH (TIMEZONE = 'Mars/Olympus')": "invalid TIMEZONE 'Mars/Olympus'",
        "WITH (SNAPSHOT = maybe)": "SNAPSHOT takes true or false",
        "WITH (COLOR = 'red')": 'unexpected sink option "COLOR"',
    }
    for opts, message in bad.items():
        with pytest.raises(mzflow.Error, match=message):
            conn.execute(f"CREATE SINK s FROM t INTO PARQUET '/tmp/x' {opts}")
    with pytest.raises(mzflow.Error, match="unknown sink format AVRO"):
        conn.execute("CREATE SINK s FROM t INTO AVRO '/tmp/x'")
    conn.execute("CREATE SINK s FROM t INTO PARQUET '/tmp/x' WITH (ENVELOPE = UPSERT, "
                 "KEY = (k), SCHEDULE = '0 6 * * *', TIMEZONE = 'Europe/Berlin')")
    spec = sinks.spec(conn.store.snapshot().resolve("s"))
    assert (spec.envelope, spec.key, spec.schedule, spec.timezone, spec.snapshot) == (
        "UPSERT", ("k",), "0 6 * * *", "Europe/Berlin", True)
    # The stored statement names the cluster the session chose.
    assert 'IN CLUSTER "default"' in conn.execute("SHOW CREATE SINK s").rows[0][1]
    with pytest.raises(mzflow.Error, match="not a sink"):
        conn.run_sink("t")
    conn.close()


def test_schedule_intervals_follow_the_time_zone() -> None:
    # Europe/Berlin leaves summer time on 2026-10-25: that local day has 25 hours.
    start, _ = schedules.containing("@daily", "Europe/Berlin",
                                    schedules.to_ms(pendulum.datetime(2026, 10, 25, 12)))
    s, e = next(schedules.following("@daily", "Europe/Berlin", start))
    assert (schedules.label(s), schedules.label(e)) == ("20261024T220000Z", "20261025T230000Z")
    hourly = list(zip(range(4), schedules.following(
        "@hourly", "Europe/Berlin", pendulum.datetime(2026, 10, 25, 0, tz="UTC")),
        strict=False))
    assert [schedules.label(i[1][0]) for i in hourly] == [
        "20261025T000000Z", "20261025T010000Z", "20261025T020000Z", "20261025T030000Z"]


# -- a real kill in the middle of an export -----------------------------------------------

CHILD = textwrap.dedent("""
    import os, signal, sys
    import pendulum
    pendulum.travel_to(pendulum.parse(sys.argv[2]), freeze=False)
    import mzflow
    from mzflow.sinks import files as exports
    mode = sys.argv[3]
    if mode == "before-rename":
        real = exports._encode
        def encode(table, out, fmt):
            real(table, out, fmt)
            out.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # the data is written, not yet renamed
        exports._encode = encode
    conn = mzflow.connect(sys.argv[1])
    print("ready", flush=True)
    first = (pendulum.datetime(2026, 3, 1, 9, tz="UTC"),
             pendulum.datetime(2026, 3, 1, 10, tz="UTC"))
    while True:  # the parent kills this process; until then, rewrite the interval
        for e in conn.run_sink("s", first if mode == "loop" else None):
            print(e.line(), flush=True)
        if mode != "loop":
            break
""")


def _child(home: Path, now: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(home), now, mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.spark
def test_killed_export_leaves_no_partial_file_and_the_rerun_is_exact(
        tmp_path: Path, clock: Any) -> None:
    """SIGKILL the exporting process: once after the data is written but before the
    rename (it kills itself there), and five times while a 400,000-row file is being
    written.
    No file may ever be visible half written, and the next run must produce exactly
    the bytes of an undisturbed run."""
    clock(9, 50)
    home = tmp_path / "home"
    conn = mzflow.connect(str(home))
    conn.execute("CREATE TABLE t (k bigint, g text)")
    import pyarrow.parquet as pqw

    big = tmp_path / "big.parquet"
    n = 400_000
    pqw.write_table(pa.table({"k": pa.array(range(n), pa.int64()),
                              "g": pa.array([f"group-{i % 1000}" for i in range(n)])}), big)
    conn.execute(f"COPY t FROM '{big}' (FORMAT PARQUET)")
    out = tmp_path / "out"
    conn.execute(f"CREATE SINK s FROM t INTO PARQUET '{out}' WITH (SCHEDULE = '@hourly')")
    clock(10, 20)
    conn.execute("DELETE FROM t WHERE k < 10")
    final = out / "s-20260301T090000Z-20260301T100000Z.parquet"
    now = pendulum.datetime(*DAY, 10, 30, tz="UTC").isoformat()

    # 1. Killed between writing and renaming: only a hidden temp file is left.
    child = _child(home, now, "before-rename")
    _, err = child.communicate(timeout=600)
    assert child.returncode == -9, err
    assert not final.exists()
    assert [p.name.startswith(".s-") for p in out.iterdir()] == [True]

    # 2. Killed by the parent the moment a write is under way (its temp file appears),
    #    while the child rewrites the interval in a loop.
    caught = 0
    for _ in range(5):
        child = _child(home, now, "loop")
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                p.name.endswith(f".tmp-{child.pid}") for p in out.iterdir()):
            time.sleep(0.001)
        child.kill()
        child.wait()
        for p in out.iterdir():
            if p.name.endswith(".parquet"):  # a final name: always whole
                assert pq.read_table(p).num_rows == n
            elif p.name.endswith(f".tmp-{child.pid}"):
                caught += 1
    assert caught >= 1, "no kill landed while a file was being written"
    # 3. The next run cleans up and exports exactly what an undisturbed run writes.
    done = conn.run_sink("s")
    assert [e.skipped for e in done] in ([False], [True])
    assert [p.name for p in sorted(out.iterdir())] == [final.name]
    table = pq.read_table(final)
    assert table.num_rows == n and table.column("mz_diff").to_pylist() == [1] * n
    digest = _sha(final)
    final.unlink()
    first = (pendulum.datetime(*DAY, 9, tz="UTC"), pendulum.datetime(*DAY, 10, tz="UTC"))
    conn.run_sink("s", first)
    assert _sha(final) == digest  # what the killed runs left is what a clean run writes
    print(f"kill test: {caught} of 5 kills landed mid-write")
    conn.close()


@pytest.mark.slow
@pytest.mark.spark
def test_compaction_keeps_what_a_lagging_sink_needs(tmp_path: Path, clock: Any) -> None:
    clock(9, 50)
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (k int)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute(f"CREATE SINK s FROM t INTO PARQUET '{tmp_path}/out' WITH (SNAPSHOT = false)")
    clock(10, 10)
    conn.execute("INSERT INTO t VALUES (2)")
    clock(10, 20)
    conn.execute("DELETE FROM t WHERE k = 1")
    clock(15, 0)  # hours later, well past the one-hour retention
    conn.execute("INSERT INTO t VALUES (3)")
    (compacted,) = conn.compact("t")
    spec = sinks.spec(conn.store.snapshot().resolve("s"))
    assert compacted.since <= spec.start_ts  # held back for the sink's first interval
    done = conn.run_sink("s")
    assert len(done) == 6  # 09–10 … 14–15
    rows = [r for p in sorted((tmp_path / "out").glob("s-*"))
            for r in pq.read_table(p).to_pylist()]
    assert [(r["k"], r["mz_diff"]) for r in rows] == [(2, 1), (1, -1)]
    # Once exported, the hold moves on and compaction may advance.
    (again,) = conn.compact("t")
    assert again.since > schedules.to_ms(pendulum.datetime(*DAY, 13, tz="UTC"))
    conn.close()


def test_sink_on_a_table_after_add_column(tmp_path: Path, clock: Any) -> None:
    clock(9, 50)
    conn = mzflow.connect(str(tmp_path / "home"))
    conn.execute("CREATE TABLE t (k int)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute(f"CREATE SINK s FROM t INTO PARQUET '{tmp_path}/out'")
    clock(10, 10)
    conn.execute("ALTER TABLE t ADD COLUMN v text")
    conn.execute("INSERT INTO t VALUES (2, 'two')")
    clock(11, 10)
    done = conn.run_sink("s")
    tables = [pq.read_table(p) for p in sorted((tmp_path / "out").glob("s-*"))]
    assert [e.rows for e in done] == [1, 1]
    # Files follow the table's newest columns; rows from before the column read NULL.
    assert [t.column_names for t in tables] == [["mz_timestamp", "mz_diff", "k", "v"]] * 2
    assert [(r["k"], r["v"]) for t in tables for r in t.to_pylist()] == [(1, None),
                                                                         (2, "two")]
    conn.close()


CLI_CHILD = textwrap.dedent("""
    import sys
    import pendulum
    pendulum.travel_to(pendulum.parse(sys.argv[1]), freeze=False)
    from mzflow.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def _cli(now: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI_CHILD, now, *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_cli_sink_run_and_status(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    at = "2026-03-01T09:50:00+00:00"
    setup = ("CREATE TABLE t (k int); INSERT INTO t VALUES (1); "
             "CREATE SINK s FROM t INTO CSV 'exports/s' WITH (SCHEDULE = '0 */2 * * *')")
    assert _cli(at, "--home", home, "sql", "-c", setup).returncode == 0
    # Before the first interval ends there is nothing to do.
    early = _cli("2026-03-01T09:55:00+00:00", "--home", home, "sink", "run", "s")
    assert early.returncode == 0 and "has not ended yet" in early.stderr
    status = _cli("2026-03-01T14:30:00+00:00", "--home", home, "sink", "status", "s")
    assert "(3 rows)" in status.stdout, status.stdout  # 08–10, 10–12, 12–14
    run = _cli("2026-03-01T14:30:00+00:00", "--home", home, "sink", "run", "s",
               "--interval", "2026-03-01T10:00Z/2026-03-01T12:00Z")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 2 and "s-20260301T080000Z-20260301T100000Z.csv" in lines[0]
    # The relative path was stored against the home.
    assert (tmp_path / "home" / "exports" / "s" /
            "s-20260301T100000Z-20260301T120000Z.csv").is_file()
    bad = _cli("2026-03-01T14:30:00+00:00", "--home", home, "sink", "run", "s",
               "--interval", "yesterday")
    assert bad.returncode == 2 and "expected START/END in ISO 8601" in bad.stderr
    wrong = _cli("2026-03-01T14:30:00+00:00", "--home", home, "sink", "run", "t")
    assert wrong.returncode == 1 and "materialize.public.t is not a sink" in wrong.stderr
    wrong = _cli("2026-03-01T14:30:00+00:00", "--home", home, "sink", "status", "t")
    assert wrong.returncode == 1 and "materialize.public.t is not a sink" in wrong.stderr
    shown = _cli(at, "--home", home, "sql", "-c", "SHOW SINKS")
    assert "s" in shown.stdout and "default" in shown.stdout, shown.stdout
