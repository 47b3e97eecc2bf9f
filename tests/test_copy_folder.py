"""COPY t FROM '<folder or glob>' (issue 37, items 1 and 4): each new file loads exactly
once, a changed file is a new file, a bad file fails alone and is recorded, and
mz_internal.mz_copy_history shows every file attempted. The table's rows are compared
with DuckDB reading the same files; writers killed mid-file, after a file's commit and
between files load each file exactly once when the COPY is run again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mzflow
from mzflow.errors import Error

COLUMNS = {"a": "INTEGER", "b": "VARCHAR"}


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[mzflow.Connection]:
    with mzflow.connect(str(tmp_path / "home")) as c:
        c.execute("CREATE TABLE t (a int, b text)")
        yield c


def write(path: Path, fmt: str, rows: list[tuple[int, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(pa.table({"a": pa.array([r[0] for r in rows], pa.int32()),
                                 "b": [r[1] for r in rows]}), path)
    elif fmt == "csv":
        path.write_text("".join(f"{a},{b}\n" for a, b in rows))
    else:
        path.write_text("".join(json.dumps({"a": a, "b": b}) + "\n" for a, b in rows))
    return path


def oracle(files: list[Path], fmt: str) -> list[tuple[int, str]]:
    """DuckDB's reading of ``files``: every row, sorted."""
    names = [str(f) for f in files]
    if fmt == "parquet":
        rel = duckdb.read_parquet(names)
    elif fmt == "csv":
        rel = duckdb.read_csv(names, header=False, columns=COLUMNS)
    else:
        rel = duckdb.read_json(names, format="newline_delimited", columns=COLUMNS)
    return sorted(rel.fetchall())


def table_rows(conn: mzflow.Connection) -> list[tuple[int, str]]:
    return sorted(conn.execute("SELECT a, b FROM t").rows)


def history(conn: mzflow.Connection) -> list[tuple[object, ...]]:
    return conn.execute("SELECT path, rows, bytes, status, error, table_version "
                        "FROM mz_internal.mz_copy_history ORDER BY loaded_at").rows


def landing(tmp_path: Path, fmt: str, n: int = 3) -> list[Path]:
    return [write(tmp_path / "land" / f"part{i}.{fmt}", fmt,
                  [(i * 100 + j, f"f{i}r{j}") for j in range(i + 2)]) for i in range(n)]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_folder_loads_each_file_once(conn: mzflow.Connection, tmp_path: Path, fmt: str) -> None:
    files = landing(tmp_path, fmt)
    (tmp_path / "land" / "notes.txt").write_text("not data: PATTERN leaves it out\n")
    copy = f"COPY t FROM '{tmp_path / 'land'}' WITH (FORMAT {fmt}, PATTERN '*.{fmt}')"
    want = oracle(files, fmt)
    r = conn.execute(copy)
    assert r.status == f"COPY {len(want)}" and r.notices == []
    assert table_rows(conn) == want
    # One history row per file: its rows as DuckDB counts them, its size, its commit.
    per_file = {str(f): len(oracle([f], fmt)) for f in files}
    got = history(conn)
    assert [(p, n, b, s, e) for p, n, b, s, e, _ in got] == [
        (str(f), per_file[str(f)], f.stat().st_size, "loaded", None) for f in files]
    assert [v for *_, v in got] == [1, 1, 1]  # one batch: one commit, one table version
    again = conn.execute(copy)
    assert again.status == "COPY 0"
    assert table_rows(conn) == want and len(history(conn)) == len(files)


def test_batches_are_bounded_by_files_and_bytes(conn: mzflow.Connection,
                                               tmp_path: Path) -> None:
    files = landing(tmp_path, "csv", 5)
    conn.execute("ALTER SYSTEM SET copy_batch_files = 2")
    assert conn.execute(f"COPY t FROM '{tmp_path / 'land'}'").status == (
        f"COPY {len(oracle(files, 'csv'))}")
    assert [v for *_, v in history(conn)] == [1, 1, 2, 2, 3]
    more = [write(tmp_path / "land" / f"z{i}.csv", "csv", [(1000 + i, "z" * 40)])
            for i in range(3)]
    conn.execute("ALTER SYSTEM SET copy_batch_files = 1000")
    # Two files' bytes in a batch at most: a file past the bound starts the next one.
    conn.execute(f"ALTER SYSTEM SET copy_batch_bytes = {2 * more[0].stat().st_size}")
    conn.execute(f"COPY t FROM '{tmp_path / 'land'}'")
    assert [v for *_, v in history(conn)][5:] == [4, 4, 5]
    assert table_rows(conn) == oracle(files + more, "csv")


def test_glob_new_and_changed_files(conn: mzflow.Connection, tmp_path: Path) -> None:
    files = landing(tmp_path, "csv")
    glob = tmp_path / "land" / "part*.csv"
    conn.execute(f"COPY t FROM '{glob}'")
    before = oracle(files, "csv")
    saved = tmp_path / "saved.csv"
    saved.write_bytes(files[1].read_bytes())
    new = write(tmp_path / "land" / "part9.csv", "csv", [(900, "new")])
    write(files[1], "csv", [(555, "changed"), (556, "changed")])
    st = files[1].stat()  # a changed file is a new file, even written within one tick
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    r = conn.execute(f"COPY t FROM '{glob}'")
    assert r.status == "COPY 3"
    # The changed file's first version stays loaded: its rows were committed.
    assert table_rows(conn) == sorted(before + oracle([new, files[1]], "csv"))
    assert oracle([saved], "csv") == [r for r in before if 100 <= r[0] < 200]
    paths = [p for p, *_ in history(conn)]
    assert paths.count(str(files[1])) == 2 and paths.count(str(new)) == 1
    assert conn.execute(f"COPY t FROM '{glob}'").status == "COPY 0"


def test_bad_files_fail_alone(conn: mzflow.Connection, tmp_path: Path) -> None:
    land = tmp_path / "land"
    good = [write(land / "a.csv", "csv", [(1, "x"), (2, "y")]),
            write(land / "e.csv", "csv", [(5, "z")])]
    fields = land / "b.csv"
    fields.write_text("3,p\n4,q,extra\n")
    typed = land / "c.csv"
    typed.write_text("6,ok\nseven,bad\n")
    parquet = land / "d.csv"
    parquet.write_bytes(b"PAR1 not really")  # binary junk: a CSV row of one field
    r = conn.execute(f"COPY t FROM '{land}' WITH (FORMAT csv)")
    assert r.status == "COPY 3"
    assert table_rows(conn) == oracle(good, "csv")
    notices = "\n".join(r.notices)
    assert '"' + str(fields) + '"' in notices and "Expected 2 columns, got 3" in notices
    assert (f'could not load file "{typed}": invalid input syntax for type integer: '
            '"seven" (in row 2, column "a")') in notices
    assert str(parquet) in notices
    assert r.notices[-1].startswith("3 of 5 new files failed to load; ")
    rows = {p: (n, s, e, v) for p, n, _, s, e, v in history(conn)}
    for bad in (fields, typed, parquet):
        n, status, error, version = rows[str(bad)]
        assert (n, status, version) == (None, "failed", None) and error
    assert rows[str(typed)][2] in notices
    # DuckDB refuses the same files.
    for bad in (fields, typed):
        with pytest.raises(duckdb.Error):
            duckdb.read_csv(str(bad), header=False, columns=COLUMNS).fetchall()
    # A bad file is tried again and reported again, but recorded once; fixed, it loads.
    again = conn.execute(f"COPY t FROM '{land}'")
    assert again.status == "COPY 0" and again.notices[:-1] == r.notices[:-1]
    assert again.notices[-1].startswith("3 of 3 new files failed to load; ")
    assert len(history(conn)) == 5
    write(typed, "csv", [(6, "ok"), (7, "fixed")])
    os.utime(typed, ns=(0, typed.stat().st_mtime_ns + 1_000_000_000))
    assert conn.execute(f"COPY t FROM '{land}'").status == "COPY 2"
    assert table_rows(conn) == oracle([*good, typed], "csv")


def test_a_full_disk_recording_a_bad_file_stops_the_copy_cleanly(
        conn: mzflow.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak's full disk while a bad file's failure was recorded: a raw OSError. Now
    mzflow's storage error; the next COPY (space back) records the file and loads the
    good ones, each once."""
    import errno

    from mzflow.storage import landing as landing_mod
    from mzflow.storage.errors import StorageError

    land = tmp_path / "land"
    good = [write(land / "a.csv", "csv", [(1, "x")])]
    (land / "b.csv").write_text("2,p,extra\n")
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(landing_mod.os, "fsync", full)
    with pytest.raises(StorageError, match='could not record the failure of file ".*b.csv": '
                                           "File too large"):
        conn.execute(f"COPY t FROM '{land}' WITH (FORMAT csv)")
    monkeypatch.setattr(landing_mod.os, "fsync", real_fsync)
    r = conn.execute(f"COPY t FROM '{land}' WITH (FORMAT csv)")
    assert table_rows(conn) == oracle(good, "csv")
    assert r.notices[-1].startswith("1 of ")
    assert [s for p, _, _, s, _, _ in history(conn) if p.endswith("b.csv")] == ["failed"]


def test_corrupt_parquet_fails_alone(conn: mzflow.Connection, tmp_path: Path) -> None:
    files = landing(tmp_path, "parquet", 2)
    whole = (tmp_path / "land" / "part1.parquet").read_bytes()
    corrupt = tmp_path / "land" / "part5.parquet"
    corrupt.write_bytes(whole[: len(whole) // 2] + whole[-8:])  # footer without its body
    with pytest.raises(duckdb.Error):
        duckdb.read_parquet(str(corrupt)).fetchall()
    doubles = tmp_path / "land" / "part6.parquet"  # a column of the wrong type
    pq.write_table(pa.table({"a": [1.5], "b": ["x"]}), doubles)
    r = conn.execute(f"COPY t FROM '{tmp_path / 'land'}' WITH (FORMAT parquet)")
    assert r.status == f"COPY {len(oracle(files, 'parquet'))}"
    assert table_rows(conn) == oracle(files, "parquet")
    assert any(str(corrupt) in n and "could not read PARQUET file" in n for n in r.notices)
    assert f'could not load file "{doubles}": cannot convert double to integer' in "".join(
        r.notices)
    failed = {p for p, _, _, s, _, _ in history(conn) if s == "failed"}
    assert failed == {str(corrupt), str(doubles)}


def test_expectations_apply_to_every_file(conn: mzflow.Connection, tmp_path: Path) -> None:
    conn.execute("ALTER TABLE t ADD CONSTRAINT small EXPECT (a < 100) ON VIOLATION FAIL")
    conn.execute("ALTER TABLE t ADD CONSTRAINT pos EXPECT (a >= 0) ON VIOLATION DROP ROW")
    land = tmp_path / "land"
    ok = write(land / "1.csv", "csv", [(1, "x"), (-1, "dropped")])
    big = write(land / "2.csv", "csv", [(2, "y"), (500, "too big")])
    r = conn.execute(f"COPY t FROM '{land}'")
    assert r.status == "COPY 1"
    assert table_rows(conn) == [row for row in oracle([ok], "csv") if row[0] >= 0]
    assert any(str(big) in n and "small" in n for n in r.notices), r.notices
    assert any(n.startswith(f'file "{ok}": expectation "pos"') for n in r.notices), r.notices
    assert [(p, s) for p, _, _, s, _, _ in history(conn)] == [
        (str(ok), "loaded"), (str(big), "failed")]


def test_one_file_form_and_errors(conn: mzflow.Connection, tmp_path: Path) -> None:
    one = write(tmp_path / "one.csv", "csv", [(1, "x")])
    assert conn.execute(f"COPY t FROM '{one}'").status == "COPY 1"
    odd = write(tmp_path / "odd[1].csv", "csv", [(2, "y")])  # a file, not a glob
    write(tmp_path / "odd1.csv", "csv", [(3, "not me")])
    assert conn.execute(f"COPY t FROM '{odd}'").status == "COPY 1"
    # (DuckDB would read odd1.csv here: its paths are globs.)
    assert table_rows(conn) == [(1, "x"), (2, "y")]
    assert history(conn) == []  # the one-file form keeps no file history
    with pytest.raises(Error, match="no such folder"):
        conn.execute(f"COPY t FROM '{tmp_path / 'nowhere'}' WITH (PATTERN '*.csv')")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert conn.execute(f"COPY t FROM '{empty}'").status == "COPY 0"
    with pytest.raises(Error, match='unexpected COPY option "FILES"'):
        conn.execute(f"COPY t FROM '{empty}' WITH (FILES 'x')")


def test_folder_copy_needs_the_file_privilege(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    landing(tmp_path, "csv", 1)
    with mzflow.connect(home) as admin:
        admin.execute("CREATE TABLE t (a int, b text)")
        admin.execute("CREATE ROLE loader LOGIN")
        admin.execute("GRANT INSERT ON t TO loader")
    with mzflow.connect(home, role="loader") as c, pytest.raises(Error) as e:
        c.execute(f"COPY t FROM '{tmp_path / 'land'}'")
    assert e.value.code == "42501"


# -- killed writers ---------------------------------------------------------------------

CHILD = r"""
import os, sys
point, home, land, after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
from mzflow.session import copy_folder
from mzflow.storage import files, shard
count = [0]

def hit():
    count[0] += 1
    if count[0] > after:
        os._exit(9)  # no cleanup, no catalog commit: as a kill -9

def exit_after(owner, name):  # owner.name runs, then the process dies after `after` calls
    original = getattr(owner, name)
    def wrapped(*a, **k):
        out = original(*a, **k)
        hit()
        return out
    setattr(owner, name, wrapped)

exit_after(*{
    "after_commit": (shard.Shard, "append"),  # the file's Delta commit made, not the catalog's
    "between_files": (copy_folder, "_load_batch"),  # a batch committed, the next not begun
    "mid_file": (files, "read_file"),  # the file read, nothing committed
}[point])

import mzflow
mzflow.connect(home).execute(f"COPY t FROM '{land}' WITH (FORMAT parquet)")
"""


# part0..3 hold 2, 3, 4 and 5 rows; the child dies at the second call of the point.
# Batches of one file: mid-file, the second file is read and nothing of it committed;
# after its Delta commit, its rows are there but not yet visible (the catalog never
# recorded the commit; the next write adopts it) and the rerun must not load them
# again; between batches, both first files are in. Batches of four: killed reading the
# second file, nothing is in; batches of two: the second batch's Delta commit is made,
# not the catalog's, and the rerun adopts it and loads nothing again.
KILLS = [("mid_file", 1, 2, 12), ("after_commit", 1, 2, 9), ("between_files", 1, 5, 9),
         ("mid_file", 4, 0, 14), ("after_commit", 2, 5, 0)]


@pytest.mark.slow
@pytest.mark.parametrize(("point", "batch", "visible", "reloaded"), KILLS)
def test_killed_copy_loads_each_file_once(tmp_path: Path, point: str, batch: int,
                                          visible: int, reloaded: int) -> None:
    home = str(tmp_path / "home")
    files = landing(tmp_path, "parquet", 4)
    with mzflow.connect(home) as c:
        c.execute(f"CREATE TABLE t (a int, b text); ALTER SYSTEM SET copy_batch_files = {batch}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", CHILD, point, home, str(tmp_path / "land"),
                           "1"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stderr
    with mzflow.connect(home) as c:
        assert len(table_rows(c)) == visible
        r = c.execute(f"COPY t FROM '{tmp_path / 'land'}' WITH (FORMAT parquet)")
        assert table_rows(c) == oracle(files, "parquet")
        assert r.status == f"COPY {reloaded}"
        got = history(c)
        assert sorted(p for p, *_ in got) == sorted(str(f) for f in files)
        assert {s for _, _, _, s, _, _ in got} == {"loaded"}
        ids = c.execute("SELECT count(DISTINCT a), count(*) FROM t").rows
        assert ids[0][0] == ids[0][1]


def test_a_file_changed_or_gone_while_read_fails_alone(
        conn: mzflow.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.storage import files as file_reading

    land = tmp_path / "land"
    keep = write(land / "a.csv", "csv", [(1, "x")])
    gone = write(land / "b.csv", "csv", [(2, "y")])
    changed = write(land / "c.csv", "csv", [(3, "z")])
    original = file_reading.read_file

    def read(path: str, *a: object, **k: object) -> pa.Table:
        out = original(path, *a, **k)  # type: ignore[arg-type]
        if Path(path) == gone:
            gone.unlink()
        elif Path(path) == changed:  # another writer appends a row after the read
            with open(changed, "a") as f:
                f.write("4,late\n")
        return out

    monkeypatch.setattr(file_reading, "read_file", read)
    r = conn.execute(f"COPY t FROM '{land}'")
    assert r.status == "COPY 1" and table_rows(conn) == oracle([keep], "csv")
    assert f'file "{gone}" disappeared while it was read' in r.notices
    assert f'file "{changed}" changed while it was read' in r.notices
    monkeypatch.setattr(file_reading, "read_file", original)
    # The changed file is a new file: its whole new version loads once.
    assert conn.execute(f"COPY t FROM '{land}'").status == "COPY 2"
    assert table_rows(conn) == oracle([keep, changed], "csv")
    statuses = sorted((p, s) for p, _, _, s, _, _ in history(conn))
    assert statuses == sorted([(str(keep), "loaded"), (str(gone), "failed"),
                               (str(changed), "failed"), (str(changed), "loaded")])


def test_an_unreadable_file_fails_alone(conn: mzflow.Connection, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.csv

    land = tmp_path / "land"
    keep = write(land / "a.csv", "csv", [(1, "x")])
    locked = write(land / "b.csv", "csv", [(2, "y")])
    unreadable = {locked}
    if os.geteuid() == 0:
        # Root reads a file whatever its mode (CI runs as root): Arrow's own error for a
        # file it may not open, raised where Arrow would raise it.
        real = pyarrow.csv.read_csv

        def read_csv(source: Any, *args: Any, **kwargs: Any) -> Any:
            if Path(str(source)) in unreadable:
                raise PermissionError(13, "Failed to open local file: Permission denied",
                                      str(source))
            return real(source, *args, **kwargs)

        monkeypatch.setattr(pyarrow.csv, "read_csv", read_csv)
    locked.chmod(0)
    r = conn.execute(f"COPY t FROM '{land}'")
    assert r.status == "COPY 1" and table_rows(conn) == oracle([keep], "csv")
    assert any(str(locked) in n for n in r.notices[:-1])
    locked.chmod(0o644)  # readable again, unchanged: the next COPY tries it again
    unreadable.clear()
    assert conn.execute(f"COPY t FROM '{land}'").status == "COPY 1"
    assert table_rows(conn) == oracle([keep, locked], "csv")
