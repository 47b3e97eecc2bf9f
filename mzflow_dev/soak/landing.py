"""A landing folder with corrupt files among the good (issue 39): two sources FROM FILES
(CSV and Parquet) in the cluster ``csrc``, and the ``landing`` worker that drops files
into their folder and ticks that cluster, which loads them.

Each drop is one file version: a new file (good, or bad: a CSV row with a field too
many or too few, a CSV value of the wrong type, a truncated Parquet file, a Parquet
column of the wrong type), or the fix of an earlier bad file under the same name. A bad
file's bad row comes after a good one, so a partial load would show. Row ids are
``n * 100 + j`` (drop n), so the checker (wire_check.py) can tell each version's rows.

A drop is journaled (``place``, with its content) before its file is written to a
hidden temporary name and renamed into place, then ``placed`` with its size and
mtime (its identity, as mzflow knows it); a worker killed in between finds the file
holding this version's bytes (then only journals ``placed``) or writes it again.
"""

from __future__ import annotations

import csv
import io
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mzflow_dev.soak.journal import Journal, records
from mzflow_dev.soak.worker import _error, _stopping

CLUSTER = "csrc"
SOURCES = {"csv": "src_csv", "parquet": "src_pq"}  # format -> source (its table)
COLUMNS = "id bigint, g int, s text"
BAD = {"csv": ("csv_fields", "csv_short", "csv_type"),
       "parquet": ("parquet_truncated", "parquet_type")}


def folder(home: str | Path) -> Path:
    path = Path(home).parent / "landing"
    path.mkdir(parents=True, exist_ok=True)
    return path


def setup_sql(landing: Path) -> list[str]:
    # VIRTUAL: a tick that only loads files needs no Spark, so no warm server either.
    out = [f"CREATE CLUSTER {CLUSTER} VIRTUAL"]
    out += [f"CREATE SOURCE {name} IN CLUSTER {CLUSTER} FROM FILES '{landing}' "
            f"(FORMAT {fmt}, PATTERN '*.{fmt}') ({COLUMNS})" for fmt, name in SOURCES.items()]
    return out


@dataclass
class Drop:
    n: int
    name: str  # the file's name in the folder
    fmt: str
    bad: str | None  # one of BAD[fmt], or None: a good file
    rows: list[tuple[int, int, str]] = field(default_factory=list)
    fixes: bool = False  # a good version replacing a bad one of the same name


def drop(seed: int, n: int, open_bad: list[str]) -> Drop:
    """The ``n``-th drop: a pure function of ``(seed, n)`` and the bad files not yet
    fixed (``open_bad``: their names)."""
    r = random.Random(f"{seed}/landing/{n}")
    rows = [(n * 100 + j, r.randint(0, 9), r.choice(("p", "q", "it's, \"quoted\"")))
            for j in range(r.randint(2, 5))]
    if open_bad and r.random() < 0.35:
        name = r.choice(sorted(open_bad))
        return Drop(n, name, name.rsplit(".", 1)[1], None, rows, fixes=True)
    fmt = r.choice(("csv", "parquet"))
    bad = r.choice(BAD[fmt]) if r.random() < 0.3 else None
    return Drop(n, f"f{n:05d}.{fmt}", fmt, bad, rows)


def content(d: Drop) -> bytes:
    """The file's bytes (deterministic: a resumed drop compares them)."""
    if d.fmt == "csv":
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["id", "g", "s"])
        body: list[list[Any]] = [list(row) for row in d.rows]
        if d.bad == "csv_fields":
            body[1] = [*body[1], "extra"]
        elif d.bad == "csv_short":
            body[1] = body[1][:2]
        elif d.bad == "csv_type":
            body[1][1] = f"g{d.n}"
        w.writerows(body)
        return out.getvalue().encode()
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, gs, ss = (list(c) for c in zip(*d.rows, strict=True))
    g = pa.array([f"g{v}" for v in gs]) if d.bad == "parquet_type" else pa.array(gs, pa.int32())
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "g": g, "s": pa.array(ss)}),
                   buf)
    data = buf.getvalue()
    return data[: len(data) // 2] if d.bad == "parquet_truncated" else data


def newest_bad(recs: list[dict[str, Any]]) -> dict[str, bool]:
    """Each name's newest placed version: bad or not."""
    newest: dict[str, bool] = {}
    placed = {r["n"] for r in recs if r.get("ev") == "placed"}
    for r in recs:
        if r.get("ev") == "place" and r["n"] in placed:
            newest[r["name"]] = r["bad"] is not None
    return newest


def open_bad(recs: list[dict[str, Any]]) -> list[str]:
    """Names whose newest placed version is bad."""
    return sorted(name for name, bad in newest_bad(recs).items() if bad)


def place(j: Journal, where: Path, d: Drop, resumed: bool = False) -> None:
    """Put the version in place (atomically: a rename), journaled before and after."""
    data = content(d)
    target = where / d.name
    if not resumed:
        j.write(ev="place", **{k: v for k, v in asdict(d).items()})
    elif target.exists() and target.read_bytes() == data:
        _placed(j, d, target)  # killed after the rename, before the journal said so
        return
    tmp = where / f".{d.name}.{d.n}.tmp"  # hidden: never loaded
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, target)
    _placed(j, d, target)


def _placed(j: Journal, d: Drop, target: Path) -> None:
    st = target.stat()
    j.write(ev="placed", n=d.n, name=d.name, path=str(target.resolve()), size=st.st_size,
            mtime_ns=st.st_mtime_ns)


def feed(conn: Any, j: Journal) -> None:
    """A tick of the sources' cluster: it loads the new files (no index: no Spark)."""
    j.write(ev="feed_start")
    try:
        conn.tick(cluster=CLUSTER)
    except Exception as exc:  # noqa: BLE001 - journaled; the next feed tries again
        _error(j, "feed", exc)
        return
    j.write(ev="feed")


def landing(args: dict[str, Any], conn: Any, j: Journal) -> None:
    where = folder(args["home"])
    recs = list(records(j.path))
    placed = {r["n"] for r in recs if r.get("ev") == "placed"}
    started = [r for r in recs if r.get("ev") == "place"]
    pending: Drop | None = None
    if started and started[-1]["n"] not in placed:
        last = started[-1]
        pending = Drop(last["n"], last["name"], last["fmt"], last["bad"],
                       [tuple(row) for row in last["rows"]], last.get("fixes", False))
    n = started[-1]["n"] + 1 if started else 1
    state = newest_bad(recs)  # kept up to date here: the journal is read once
    r = random.Random(f"{args['seed']}/landing/pace/{os.getpid()}")
    while not _stopping(args):
        if pending is None:
            pending = drop(args["seed"], n, sorted(k for k, bad in state.items() if bad))
            n += 1
            resumed = False
        else:
            resumed = True
        try:
            place(j, where, pending, resumed=resumed)
            state[pending.name] = pending.bad is not None
            pending = None
        except OSError as exc:  # the disk-full fault: write it again
            _error(j, "place", exc, n=pending.n)
            time.sleep(0.5)
            continue
        if r.random() < 0.5:
            feed(conn, j)
        time.sleep(r.uniform(0.0, float(args.get("landing_pause", 2.0))))
    feed(conn, j)  # the last: every file placed is then loaded or recorded failed


ROLES = {"landing": landing}
