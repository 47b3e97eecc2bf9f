"""Costs of a tick's parts, each measured alone with delta-rs, pyarrow and numpy (issue 34).

    python bench/probe_costs.py [--reps 5] [--json] [--data ~/.cache/mzflow-tpch/sf1]

Issue 34, item 6 ("fewer commits per tick: measure first"). On TPC-H SF 1 lineitem,
written as a Delta table through mzflow's own storage classes (change data feed on,
``_mz_rowid``, txn ids, 16 MiB files, ``--history`` earlier small appends), then one
0.1 % batch shaped like RF1/RF2 (an append of new orders' line items, then a delete of
the oldest orders' line items by row id, a MERGE, as a DELETE statement commits), it
times:

  a. the batch's change feed: delta-rs ``load_cdf``, mzflow's ``Shard.diffs`` (the
     feed cast and consolidated, what a tick reads), and the commits' add/cdc files
     read directly with pyarrow from their log entries;
  b. an append of 3 k rows with a txn (``Shard.append``) into a new table and into
     lineitem, and an arrangement batch of 3 k rows (``ArrangementShard.add_batch``:
     sorted, 256-row row groups), alone and with the batch merge a tick does after it;
  c. an index MERGE of 20 changed rows into a few-thousand-row index
     (``IndexShard.apply``; a state MERGE is the same delta-rs merge on ``_mz_key``),
     and the same into a 1.5 M-row one (c2: a state as large as Q18's inner GROUP BY);
  c3. the same 20 changes appended to a 1.5 M-group state log (``StateShard.append_groups``,
     what a tick does since issue 34's item 2), and c4 the lookup of those groups in the
     state held in memory;
  d. 12 k lookups into a sorted 6 M-row int64 column (numpy searchsorted, pyarrow is_in);
  e. hydrating the lineitem columns TPC-H Q3/Q5 join on, sorted by l_orderkey, in a
     fresh process: the time and the process's RSS after.

The last line sums what a tick spends in change feeds and commits today, against
issue 34's 250 ms. Each figure is the median of ``--reps`` runs; building the tables
is not timed. The batch is made from lineitem itself (its last rows under new order keys), not by
``mzflow_dev.tpch.data.make_batch``, which needs the DuckDB oracle loaded. Nothing
here starts Spark; everything is written under a temporary directory, removed after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HYDRATE_COLUMNS = ["l_orderkey", "l_suppkey", "l_extendedprice", "l_discount", "l_returnflag",
                   "l_shipdate"]


class Probe:
    def __init__(self, reps: int, quiet: bool):
        self.reps = reps
        self.quiet = quiet
        self.figures: list[dict[str, Any]] = []

    def say(self, text: str) -> None:
        print(text, file=sys.stderr if self.quiet else sys.stdout, flush=True)

    def time(self, name: str, run: Callable[[int], Any], note: str = "",
             setup: Callable[[int], Any] | None = None) -> dict[str, Any]:
        """``run(i)`` timed ``reps`` times; ``setup(i)`` before each, untimed."""
        runs = []
        for i in range(self.reps):
            if setup is not None:
                setup(i)
            start = time.perf_counter()
            run(i)
            runs.append((time.perf_counter() - start) * 1000)
        return self.add(name, runs, note)

    def add(self, name: str, runs_ms: list[float], note: str = "",
            **extra: Any) -> dict[str, Any]:
        fig = {"name": name, "median_ms": round(statistics.median(runs_ms), 2),
               "runs_ms": [round(r, 2) for r in runs_ms], "note": note, **extra}
        self.figures.append(fig)
        self.say(f"  {name}: {fig['median_ms']:.1f} ms {note}")
        return fig


# -- the lineitem Delta table and its batch ------------------------------------------

def lineitem_rows(data: Path) -> pa.Table:
    """lineitem as mzflow's COPY stores it: the catalog's Arrow types, plus row ids."""
    from mzflow.catalog.model import ROWID
    from mzflow.storage.types import arrow_schema
    from mzflow_dev.tpch.data import TABLES

    # the catalog stores char(n) under PostgreSQL's name for it
    schema = arrow_schema([(n, t.replace("char(", "character(") if t.startswith("char(")
                            else t, True) for n, t in TABLES["lineitem"]])
    table = pq.read_table(data / "lineitem.parquet").cast(schema)
    return table.append_column(pa.field(ROWID, pa.int64(), nullable=False),
                               pa.array(np.arange(table.num_rows, dtype=np.int64)))


def build(root: Path, rows: pa.Table, batch_rows: int, history: int
          ) -> tuple[Any, int, int, int]:
    """The lineitem shard: created, COPYed, ``history`` small appends, then the batch's
    append and delete (its last two versions). Returns the shard, the version before
    the batch, and the batch's inserted and deleted row counts."""
    from mzflow.catalog.model import ROWID
    from mzflow.storage.delta import Shard

    shard = Shard(root / "lineitem")
    shard.create(rows.schema.remove(rows.schema.get_field_index(ROWID)), 0)
    shard.append(rows, 1, ("copy-lineitem", 1))
    n = rows.num_rows
    for i in range(history):  # earlier writes: a log of some length, as a live table has
        few = rows.slice(n // 2 + 10 * i, 10)
        few = few.set_column(few.schema.get_field_index(ROWID), ROWID,
                             pc.add(few.column(ROWID), 1 << 40))
        shard.append(few, 2 + i, ("insert-lineitem", 2 + i))
    base = shard.version()
    keys = rows.column("l_orderkey").to_numpy()
    top = int(keys.max())
    new = rows.slice(n - batch_rows)
    new = new.set_column(new.schema.get_field_index("l_orderkey"), "l_orderkey",
                         pc.add(new.column("l_orderkey"), top))
    new = new.set_column(new.schema.get_field_index(ROWID), ROWID,
                         pa.array(np.arange(n, n + batch_rows, dtype=np.int64)))
    shard.append(new, base + 1, ("insert-lineitem", base + 1))
    # RF2: the oldest orders, with all their line items, about batch_rows of them
    upto = int(np.sort(keys)[batch_rows - 1])
    doomed = rows.filter(pc.less_equal(rows.column("l_orderkey"), upto)).column(ROWID)
    shard.delete_rows(doomed.combine_chunks(), base + 2, ("delete-lineitem", base + 2))
    return shard, base, batch_rows, len(doomed)


def read_commits_directly(table_path: Path, first: int, last: int) -> pa.Table:
    """The change feed of versions ``first … last`` from the log entries' actions: a
    commit with cdc files changed by them, otherwise its added files are inserts."""
    from urllib.parse import unquote

    from mzflow.storage.rows import plain_strings

    pieces = []
    for version in range(first, last + 1):
        text = (table_path / "_delta_log" / f"{version:020d}.json").read_text()
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        cdc = [unquote(a["cdc"]["path"]) for a in actions if "cdc" in a]
        files = cdc or [unquote(a["add"]["path"]) for a in actions if "add" in a]
        for f in files:
            part = plain_strings(pq.read_table(table_path / f))
            if not cdc:
                part = part.append_column("_change_type", pa.array(["insert"] * len(part)))
            pieces.append(part.append_column(
                "_commit_version", pa.array([version] * len(part), pa.int64())))
    return pa.concat_tables(pieces, promote_options="default")


# -- the figures ---------------------------------------------------------------------

def change_feed(p: Probe, shard: Any, base: int, inserted: int, deleted: int) -> None:
    from deltalake import DeltaTable

    dt_ = DeltaTable(str(shard.path))
    note = f"(+{inserted:,} / -{deleted:,} rows, 2 commits)"
    counts: dict[str, int] = {}

    def cdf(_: int) -> None:
        counts["load_cdf"] = pa.table(dt_.load_cdf(starting_version=base + 1,
                                                   ending_version=base + 2)).num_rows

    def diffs(_: int) -> None:
        counts["diffs"] = shard.diffs(base, base + 2).num_rows

    def direct(_: int) -> None:
        counts["direct"] = read_commits_directly(shard.path, base + 1, base + 2).num_rows

    p.time("a1 change feed: delta-rs load_cdf", cdf, note)
    p.time("a2 change feed: mzflow Shard.diffs (load_cdf + cast + consolidate)", diffs, note)
    p.time("a3 change feed: add/cdc files read directly (pyarrow)", direct, note)
    p.say(f"  rows each change feed read gave: {counts}")


def appends(p: Probe, root: Path, shard: Any, rows: pa.Table, history: int) -> None:
    from mzflow.maintain.tick.arrange import _merge
    from mzflow.storage.arrangement import ArrangementShard
    from mzflow.storage.delta import DIFF, Shard

    chunk = rows.slice(0, 3000)
    fresh = Shard(root / "fresh")
    fresh.create(rows.schema.remove(rows.schema.get_field_index("_mz_rowid")), 0)
    p.time("b1 append 3k rows with a txn (Shard.append), new table",
           lambda i: fresh.append(chunk, i + 1, ("probe-tick", i + 1)),
           "(a table of one version)")
    files = len(shard.files(shard.version()))
    at = shard.version() + 1  # mzflow times: any increasing numbers
    p.time("b1' the same into the lineitem table",
           lambda i: shard.append(chunk, at + i, ("probe-tick", at + i)),
           f"({rows.num_rows:,} rows in {files} files, {at} versions)")
    # An arrangement as a tick leaves it: a large first batch, then one batch per tick,
    # merged like a binary counter (maintain/tick/arrange.py).
    arr = ArrangementShard(root / "arrangement", "l_orderkey")
    write: dict[str, Any] = {"group_rows": 256, "file_size": 16 << 20}  # the defaults
    base = rows.slice(0, 1_000_000)
    arr.add_batch(base.append_column(DIFF, pa.array(np.ones(len(base), np.int64))),
                  -1, 0, 0, **write)
    diffs = chunk.append_column(DIFF, pa.array(np.ones(len(chunk), np.int64)))
    small = diffs.slice(0, 10)
    for v in range(history):
        arr.add_batch(small, v, v + 1, v + 1, **write)
        _merge(arr, v, v + 1, write)
    frontier = [history]

    def add(_: int) -> None:
        v = frontier[0]
        arr.add_batch(diffs, v, v + 1, v + 1, **write)
        frontier[0] += 1

    def merge(i: int) -> None:  # after the batch the last run added
        if frontier[0] > history:
            _merge(arr, frontier[0] - 1, frontier[0], write)

    def add_and_merge(i: int) -> None:
        add(i)
        merge(i)

    note = f"(sorted, 256-row row groups; after {history} ticks)"
    p.time("b2 arrangement batch of 3k rows (ArrangementShard.add_batch)", add, note,
           setup=merge)
    merge(0)
    p.time("b3 the same plus the batches' merge, as a tick does it", add_and_merge, note)


def index_merge(p: Probe, root: Path, index_rows: int, history: int, name: str) -> None:
    """``index_rows`` rows merged into by ``history`` ticks, then the timed MERGEs of 20
    changes each (the same delta-rs MERGE on ``_mz_key`` as a state's)."""
    from mzflow.storage.delta import COUNT, KEY, IndexShard

    def rows(keys: np.ndarray, counts: np.ndarray) -> pa.Table:
        """Q3-shaped index rows (l_orderkey, revenue, o_orderdate, o_shippriority)."""
        revenue = pa.array((keys * 37 % 500000).astype(np.int64)).cast(pa.decimal128(38, 4))
        days = pa.array(8000 + keys % 2000, pa.int32()).cast(pa.date32())
        key = pa.array([hashlib.sha256(str(int(k)).encode()).hexdigest() for k in keys])
        return pa.table({"l_orderkey": pa.array(keys, pa.int64()), "revenue": revenue,
                         "o_orderdate": days,
                         "o_shippriority": pa.array(np.zeros(len(keys), np.int32)),
                         KEY: key, COUNT: pa.array(counts, pa.int64())})

    index = IndexShard(root / f"index{index_rows}")
    first = rows(np.arange(index_rows, dtype=np.int64), np.ones(index_rows, np.int64))
    index.create_index(pa.schema([f for f in first.schema if f.name not in (KEY, COUNT)]), -1)
    index.apply(first, 0, "tick-probe")
    rng = np.random.default_rng(34)
    live: set[int] = set(range(index_rows))
    fresh = [index_rows]  # the next new key
    batch: dict[str, pa.Table] = {}

    def setup(_: int) -> None:
        # 20 changes: 8 counts changed, 6 rows gone, 6 new rows
        picked = rng.choice(np.fromiter(live, np.int64, len(live)), 14, replace=False)
        new = np.arange(fresh[0], fresh[0] + 6, dtype=np.int64)
        fresh[0] += 6
        live.difference_update(int(k) for k in picked[8:])
        live.update(int(k) for k in new)
        keys = np.concatenate([picked, new]).astype(np.int64)
        counts = np.array([2] * 8 + [0] * 6 + [1] * 6, np.int64)
        batch["t"] = rows(keys, counts)

    for i in range(history):
        setup(i)
        index.apply(batch["t"], i + 1, "tick-probe")
    p.time(name, lambda i: index.apply(batch["t"], history + i + 1, "tick-probe"),
           f"(into {index_rows:,} rows in {len(index.files(index.version()))} files, "
           f"after {history} merges)", setup=setup)


def state_append(p: Probe, root: Path, state_rows: int) -> None:
    """c3, c4: the state as an append-only log (``StateShard``): the same 20 changes
    appended to a ``state_rows``-group state, then looked up in the state this process
    holds in memory, caught up with the appends (what a tick's ``rows`` reads)."""
    from mzflow.storage.delta import KEY, ROWS, StateShard

    def rows(keys: np.ndarray, counts: np.ndarray) -> pa.Table:
        """Q18-shaped partials: l_orderkey, its line items, sum(l_quantity)."""
        return pa.table({"l_orderkey": pa.array(keys, pa.int64()), ROWS: pa.array(counts),
                         "_s0": pa.array(counts * 25).cast(pa.decimal128(38, 2)),
                         KEY: pa.array([hashlib.sha256(str(int(k)).encode()).hexdigest()
                                        for k in keys])})

    state = StateShard(root / f"state{state_rows}")
    keys = np.arange(state_rows, dtype=np.int64)
    state.replace_groups(rows(keys, np.full(state_rows, 4, np.int64)), 0, "tick-probe")
    rng = np.random.default_rng(18)
    fresh = [state_rows]
    batch: dict[str, pa.Table] = {}

    def setup(_: int) -> None:  # 8 groups changed, 6 gone, 6 new
        picked = rng.choice(state_rows, 14, replace=False).astype(np.int64)
        new = np.arange(fresh[0], fresh[0] + 6, dtype=np.int64)
        fresh[0] += 6
        batch["t"] = rows(np.concatenate([picked, new]),
                          np.array([5] * 8 + [0] * 6 + [1] * 6, np.int64))

    p.time("c3 append of the same 20 changes into the large state (StateShard.append_groups)",
           lambda i: state.append_groups(batch["t"], i + 1, "tick-probe", keep_empty=False),
           f"(a {state_rows:,}-group state held in memory, kept up by each append)",
           setup=setup)
    found = {}

    def lookup(_: int) -> None:
        found["n"] = state.rows_with_keys(state.version(), batch["t"].column(KEY)).num_rows

    p.time("c4 those 20 groups looked up in the state held in memory (rows_with_keys)",
           lookup, f"(one is_in pass over {state_rows:,} keys)")


def lookups(p: Probe, rows: pa.Table, n_keys: int) -> None:
    column = np.sort(rows.column("l_orderkey").to_numpy())
    arrow_column = pa.array(column)
    rng = np.random.default_rng(6)
    wanted = rng.choice(column, n_keys, replace=False)
    found = {}

    def searchsorted(_: int) -> None:
        keys = np.unique(wanted)
        lo = np.searchsorted(column, keys, "left")
        hi = np.searchsorted(column, keys, "right")
        found["n"] = int((hi - lo).sum())

    def is_in(_: int) -> None:
        found["is_in"] = pc.sum(pc.is_in(arrow_column, value_set=pa.array(wanted))).as_py()

    note = f"({n_keys:,} keys into {len(column):,} rows)"
    p.time("d1 lookups: numpy searchsorted (sorted column)", searchsorted, note)
    p.time("d2 lookups: pyarrow is_in (a pass over the column)", is_in, note)
    if found["n"] != found["is_in"]:
        p.say(f"  note: the lookups found different row counts: {found}")


def vm(field: str) -> int:
    """A /proc/self/status figure (VmRSS, VmHWM) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def hydrate_child(files: list[str]) -> None:
    """Run in a fresh process: read, sort, report the time and memory as JSON."""
    from mzflow.storage.rows import plain_strings

    before = vm("VmRSS")
    start = time.perf_counter()
    table = pa.concat_tables([plain_strings(pq.read_table(f, columns=HYDRATE_COLUMNS))
                              for f in files])
    table = table.sort_by("l_orderkey").combine_chunks()
    seconds = time.perf_counter() - start
    after = vm("VmRSS")
    # what the reading and sorting left in Arrow's pool, unused, versus what holding
    # the sorted columns needs
    pa.default_memory_pool().release_unused()
    print(json.dumps({"ms": seconds * 1000, "rows": table.num_rows, "nbytes": table.nbytes,
                      "rss_before": before, "rss_after": after, "hwm": vm("VmHWM"),
                      "rss_released": vm("VmRSS"), "pool": pa.default_memory_pool().backend_name}))


def hydrate(p: Probe, shard: Any) -> None:
    files = [f.removeprefix("file://") for f in shard.files(shard.version())]
    runs = []
    for _ in range(p.reps):
        out = subprocess.run([sys.executable, __file__, "--hydrate-child", *files],
                             capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        if out.returncode:
            raise RuntimeError(f"the hydrating process failed: {out.stderr}")
        runs.append(json.loads(out.stdout))
    mib = 1 << 20
    last = runs[-1]
    p.add("e  hydrate Q3/Q5 lineitem columns sorted by l_orderkey",
          [r["ms"] for r in runs],
          f"({last['rows']:,} rows, {last['nbytes'] / mib:.0f} MiB of Arrow; RSS "
          f"{last['rss_before'] / mib:.0f} → {last['rss_after'] / mib:.0f} MiB, "
          f"peak {last['hwm'] / mib:.0f} MiB, {last['rss_released'] / mib:.0f} MiB once "
          f"{last['pool']}'s unused memory is released)",
          rows=last["rows"], arrow_mib=round(last["nbytes"] / mib, 1),
          rss_before_mib=round(last["rss_before"] / mib, 1),
          rss_after_mib=round(statistics.median(r["rss_after"] for r in runs) / mib, 1),
          rss_peak_mib=round(statistics.median(r["hwm"] for r in runs) / mib, 1),
          rss_released_mib=round(statistics.median(r["rss_released"] for r in runs) / mib, 1))


def tick_sum(figures: list[dict[str, Any]], inputs: int) -> dict[str, float]:
    """What one tick spends in change feeds and commits today: a change feed per input
    table (each as large as this batch: an upper bound for the small tables), three
    arrangement appends with their merges, a state MERGE and an index MERGE (the state
    as small as the index, or as large as figure c2's)."""
    by = {f["name"][:2].strip(): f["median_ms"] for f in figures}
    feeds = inputs * by["a2"]
    commits = 3 * by["b3"] + 2 * by["c"]
    return {"change_feeds_ms": round(feeds, 1), "commits_ms": round(commits, 1),
            "total_ms": round(feeds + commits, 1),
            "total_large_state_ms": round(feeds + commits - by["c"] + by["c2"], 1),
            "total_state_log_ms": round(feeds + commits - by["c"] + by["c3"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path,
                        default=Path.home() / ".cache" / "mzflow-tpch" / "sf1",
                        help="TPC-H Parquet folder with lineitem.parquet (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--batch-share", type=float, default=0.001,
                        help="the batch's inserts (and deletes) as a share of lineitem")
    parser.add_argument("--index-rows", type=int, default=5000,
                        help="rows in the index the MERGE changes")
    parser.add_argument("--state-rows", type=int, default=1_500_000,
                        help="rows in the large state of figure c2 (default: SF 1 orders)")
    parser.add_argument("--history", type=int, default=100,
                        help="commits each table has before the timed ones (a live "
                             "table's log; default %(default)s)")
    parser.add_argument("--lookups", type=int, default=12_000, help="keys to look up")
    parser.add_argument("--inputs", type=int, default=3,
                        help="input tables whose change feeds a tick reads (for the sum)")
    parser.add_argument("--json", action="store_true",
                        help="write the figures as JSON to stdout (progress and the "
                             "table to stderr)")
    parser.add_argument("--hydrate-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hydrate_child:
        hydrate_child(args.hydrate_child)
        return
    p = Probe(args.reps, args.json)
    root = Path(tempfile.mkdtemp(prefix="mzflow-probe-"))
    began = time.perf_counter()
    try:
        p.say(f"setup: lineitem from {args.data} as a Delta table in {root}")
        rows = lineitem_rows(args.data)
        shard, base, inserted, deleted = build(root, rows,
                                               round(rows.num_rows * args.batch_share),
                                               args.history)
        p.say(f"setup done in {time.perf_counter() - began:.0f} s; measuring")
        change_feed(p, shard, base, inserted, deleted)
        hydrate(p, shard)  # before (b) appends to the table
        appends(p, root, shard, rows, args.history)
        index_merge(p, root, args.index_rows, args.history,
                    "c  index MERGE of 20 changes (IndexShard.apply)")
        index_merge(p, root, args.state_rows, 0,
                    "c2 the same into a large state (Q18's GROUP BY l_orderkey)")
        state_append(p, root, args.state_rows)
        lookups(p, rows, args.lookups)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    import deltalake

    total = tick_sum(p.figures, args.inputs)
    report = {
        "date": dt.date.today().isoformat(), "reps": args.reps,
        "machine": {"cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(), "deltalake": deltalake.__version__,
                    "pyarrow": pa.__version__, "numpy": np.__version__},
        "figures": p.figures, "tick_sum": total,
        "seconds": round(time.perf_counter() - began, 1)}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    width = max(len(f["name"]) for f in p.figures)
    p.say(f"\n{'figure':<{width}}  median ms  runs ms")
    for f in p.figures:
        p.say(f"{f['name']:<{width}}  {f['median_ms']:>9.1f}  "
              f"{', '.join(f'{r:.0f}' for r in f['runs_ms'])}")
    p.say(f"\na tick's change feeds ({args.inputs} × a2) {total['change_feeds_ms']:.0f} ms + "
          f"commits (3 × b3 + 2 × c) {total['commits_ms']:.0f} ms = "
          f"{total['total_ms']:.0f} ms; with the state MERGE as c2: "
          f"{total['total_large_state_ms']:.0f} ms; with the state appended as c3: "
          f"{total['total_state_log_ms']:.0f} ms (issue 34's bar: 250 ms)")
    p.say(f"{report['machine']}; {report['seconds']:.0f} s in all")


if __name__ == "__main__":
    main()
