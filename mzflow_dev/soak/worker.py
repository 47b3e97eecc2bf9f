"""One soak worker process: ``python -m mzflow_dev.soak.worker <args.json>``.

Roles: ``setup`` (the starting catalog, then exit), ``writer`` (seeded INSERT, UPDATE,
DELETE and COPY, each with the idempotency key ``(name, n)``), ``ticker`` (ticks, and
AS OF reads of maintained views at their upper), ``compactor`` (``mzflow compact``) and
``ddl``. Each runs until its stop file appears; the coordinator kill -9s it at random.
On restart a writer resumes from its journal: an operation started but not finished is
retried with the same key, so it lands exactly once.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from mzflow_dev.soak import ops, swaps, warm
from mzflow_dev.soak.journal import Journal, records


def _norm(v: Any) -> Any:
    from decimal import Decimal

    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def _stopping(args: dict[str, Any]) -> bool:
    return os.path.exists(args["stop"])


def _pause(r: random.Random, low: float, high: float) -> None:
    time.sleep(r.uniform(low, high))


def _error(j: Journal, op: str, exc: BaseException, **kw: Any) -> None:
    import mzflow

    # A clean error is one of mzflow's own (a SQLSTATE and a message for the user); a
    # raw one from a library is what the soak reports as a finding.
    frames = traceback.extract_tb(exc.__traceback__)[-6:]
    where = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames]
    j.write(ev="error", op=op, type=type(exc).__name__, msg=str(exc)[:500],
            clean=isinstance(exc, mzflow.Error), where=where, **kw)


def setup(args: dict[str, Any], conn: Any, j: Journal) -> None:
    from mzflow_dev.soak import landing, wire

    for sql in (ops.setup_sql(args["retain"], str(Path(args["home"]).parent / "sinks"))
                + wire.setup_sql() + landing.setup_sql(landing.folder(args["home"]))
                + (swaps.setup_sql() if args.get("swaps") else [])):
        conn.execute(sql)
        j.write(ev="done", op="setup", sql=sql)
    j.write(ev="warm", seconds=round(warm.start_all(conn), 1))  # the clusters' servers


def writer(args: dict[str, Any], conn: Any, j: Journal) -> None:
    name, widx, spark = args["name"], args["index"], args["spark"]
    copy_dir = Path(args["home"]).parent / "copy"
    copy_dir.mkdir(exist_ok=True)
    started = [rec for rec in records(j.path) if rec.get("ev") == "start"]
    n = started[-1]["n"] if started else 0  # resume at the last started (maybe unfinished)
    finished = {rec["n"] for rec in records(j.path)
                if rec.get("ev") in ("done", "gave_up", "rejected")}
    if n in finished or n == 0:
        n += 1
    pace = random.Random(f"{args['seed']}/{name}/pace/{os.getpid()}")
    while not _stopping(args):
        op = ops.write_op(args["seed"], name, widx, n, spark, copy_dir)
        if op.copy_rows:
            _write_parquet(copy_dir / f"{name}-{n}.parquet", op.copy_rows)
        j.write(ev="start", n=n, kind=op.kind, table=op.table, sql=op.sql,
                oracle=op.oracle or op.sql)
        for attempt in range(5):
            try:
                r = conn.execute(op.sql, idempotency_key=(name, n))
                j.write(ev="done", n=n, status=r.status, notices=r.notices, attempt=attempt)
                break
            except Exception as exc:  # an error is uncertain: retried with the same key
                if getattr(exc, "code", None) == "23514":
                    # A FAIL expectation rejected it: finished, with no effect (nothing
                    # of an earlier attempt was committed, or this one would have been
                    # skipped as already applied).
                    j.write(ev="rejected", n=n, msg=str(exc)[:300], attempt=attempt)
                    break
                _error(j, "write", exc, n=n, attempt=attempt)
                time.sleep(0.5 * (attempt + 1))
        else:
            j.write(ev="gave_up", n=n)
        n += 1
        _pause(pace, 0.0, args["write_pause"])


def _write_parquet(path: Path, rows: list[tuple[Any, ...]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = list(zip(*rows, strict=True))
    table = pa.table({"id": pa.array(cols[0], pa.int32()), "k": pa.array(cols[1], pa.int32()),
                      "v": pa.array(cols[2], pa.int32()), "s": pa.array(cols[3], pa.string())})
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)  # a kill never leaves a half file for the retry to load


def _maintained(conn: Any) -> list[tuple[str, str, str]]:
    """(view, its default index id, cluster name) of every materialized view."""
    snap = conn.store.snapshot()
    out = []
    for item in snap.items:
        if item.kind == "index" and item.is_default_index and item.cluster_id is not None:
            on = snap.item(item.on_id)
            # Outside public (swaps.py's schema, and its staged twin) by qualified name.
            name = on.name if on.schema == "public" else f"{on.schema}.{on.name}"
            out.append((name, item.id, snap.cluster(item.cluster_id).name))
    return sorted(out)


def read_at_upper(conn: Any, j: Any, view: str, index_id: str, cluster: str) -> None:
    """``SELECT * FROM view AS OF`` its index's upper, journaled (replay.py too)."""
    from mzflow.storage import paths
    from mzflow.storage.delta import IndexShard

    shard = IndexShard(paths.index(conn.config.warehouse, index_id))
    if not shard.exists():  # dropped since _maintained looked
        return
    at, err, _ = shard.state()
    if at < 0 or err:
        return
    conn.execute(f"SET cluster = {cluster}")
    res = conn.execute(f"SELECT * FROM {view} AS OF {at}")
    j.write(ev="read", view=view, at=at, rows=[[_norm(v) for v in row] for row in res.rows])


def ticker(args: dict[str, Any], conn: Any, j: Journal) -> None:
    r = random.Random(f"{args['seed']}/ticker/{os.getpid()}")
    while not _stopping(args):
        # One index at a time: a failed tick (cleanly: nothing committed) stops no other.
        for view, _, cluster in _maintained(conn):
            if _stopping(args):
                break
            try:  # through the cluster's warm tick service, as users tick (warm.py)
                for rep in warm.tick(conn, view, cluster):
                    j.write(ev="tick", n=1, view=view, mode=rep.strategy, error=rep.error,
                            secs=round(rep.seconds, 2), upper=rep.upper_after,
                            served=rep.served, cluster=cluster)
            except Exception as exc:
                _error(j, "tick", exc, view=view)
        for _ in range(r.randint(0, 3)):
            views = [v for v in _maintained(conn) if "." not in v[0]]  # swaps.py reads its own
            if not views:
                break
            view, index_id, cluster = r.choice(views)
            try:
                read_at_upper(conn, j, view, index_id, cluster)
            except Exception as exc:
                _error(j, "read", exc, view=view)
        if r.random() < 0.5:
            _subscribe(conn, j, r)
        if r.random() < 0.5:  # a read shaped for a projection, on Spark when not routed
            try:
                projection_read(conn, j, r, ops.projection_read(r))
            except Exception as exc:
                _error(j, "query", exc)
        _pause(r, 0.0, args["tick_pause"])


def _subscribe(conn: Any, j: Journal, r: random.Random) -> None:
    """A bounded SUBSCRIBE from a recent past time to now: the checker replays its
    snapshot and changes and compares them with the oracle at every time in it."""
    rel = r.choice(("t1", "t2", "mv_agg"))
    upto = conn.store.snapshot().read_ts + 1
    as_of = upto - 1 - r.randint(0, 60_000)
    try:
        conn.execute("SET cluster = c1")
        res = conn.execute(f"SUBSCRIBE {rel} AS OF {as_of} UP TO {upto}")
        j.write(ev="subscribe", rel=rel, as_of=as_of, up_to=upto, columns=res.columns,
                rows=[[_norm(v) for v in row] for row in res.rows])
    except Exception as exc:
        _error(j, "subscribe", exc, rel=rel)


def compactor(args: dict[str, Any], conn: Any, j: Journal) -> None:
    r = random.Random(f"{args['seed']}/compactor/{os.getpid()}")
    while not _stopping(args):
        _pause(r, 1.0, args["compact_pause"])
        try:
            # Its start and length journaled: a compaction once held the catalog's
            # write lock throughout and stalled every writer (now one object at a time).
            j.write(ev="compact_start")
            started = time.monotonic()
            done = conn.compact()
            j.write(ev="compact", n=len(done), removed=sum(c.files_removed for c in done),
                    seconds=round(time.monotonic() - started, 2))
        except Exception as exc:
            _error(j, "compact", exc)
        for sink in ops.SINKS:  # sinks hold compaction back: the same worker runs both
            try:
                for e in conn.run_sink(sink):
                    if not e.skipped:
                        j.write(ev="sink", sink=sink, rows=e.rows, end=str(e.end))
            except Exception as exc:
                _error(j, "sink", exc, sink=sink)


def ddl(args: dict[str, Any], conn: Any, j: Journal) -> None:
    live: set[str] = set()
    n = 0
    for rec in records(j.path):
        if rec.get("ev") == "start":
            n = max(n, rec["n"])
        if rec.get("ev") == "done" and rec.get("view"):
            (live.add if rec["sql"].startswith("CREATE") else live.discard)(rec["view"])
    n += 1
    r = random.Random(f"{args['seed']}/ddl/pace/{os.getpid()}")
    while not _stopping(args):
        _pause(r, 1.0, args["ddl_pause"])
        snap = conn.store.snapshot()
        op = ops.ddl_op(args["seed"], n, sorted(live), *_live_extras(snap))
        j.write(ev="start", n=n, sql=op.sql, view=op.view, select=op.select, kind=op.ddl)
        try:
            res = conn.execute(op.sql)
            j.write(ev="done", n=n, sql=op.sql, view=op.view, kind=op.ddl,
                    notices=res.notices, **created(conn, op.sql))
            if op.view:
                (live.add if op.sql.startswith("CREATE") else live.discard)(op.view)
                if op.sql.startswith("DROP"):  # CASCADE took what was built on it
                    existing = {i.name for i in conn.store.snapshot().items}
                    live &= existing
        except Exception as exc:
            _error(j, "ddl", exc, n=n, sql=op.sql)
        n += 1
        for _ in range(r.randint(1, 3)):  # reads a live projection answers in process
            try:
                projection_read(conn, j, r, ops.projection_read(r), spark=False)
            except Exception as exc:
                _error(j, "query", exc)


def _live_extras(snap: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """(table, name) of every projection, and the names of t2's expectations."""
    names = {i.id: i.name for i in snap.items}
    table = snap.find(ops.EXPECT_TABLE)
    return ([(names.get(p.table_id, "?"), p.name) for p in snap.projections],
            [e.name for e in snap.expectations_on(table.id)] if table is not None else [])


def created(conn: Any, sql: str) -> dict[str, Any]:
    """An ADD CONSTRAINT's time (``created_ts``): the checker's oracle applies the
    expectation to the writes after it (replay.py journals it too)."""
    found = ops.expectation_of(sql)
    if found is None:
        return {}
    snap = conn.store.snapshot()
    table = snap.find(found[0])
    for e in snap.expectations_on(table.id) if table is not None else ():
        if e.name == found[1]:
            return {"created_ts": e.created_ts}
    return {}


def projection_read(conn: Any, j: Any, r: random.Random, sql: str, spark: bool = True
                    ) -> None:
    """A read shaped for a projection, at the current time or ``AS OF`` a recent one,
    journaled with its time and whether mzflow answered it from a projection. Without
    ``spark`` (the DDL worker, whose process has no JVM and is killed often) only a
    read that EXPLAIN says is answered in process runs."""
    from mzflow.projections import route as projections

    before = conn.store.snapshot().read_ts
    at = None
    if r.random() < 0.5:
        at = max(0, before - r.randint(0, 20_000))
        sql = f"{sql} AS OF {at}"
    if not spark:
        plan = "\n".join(str(row[0]) for row in conn.execute(f"EXPLAIN {sql}").rows)
        if "Read: in process" not in plan:
            j.write(ev="query_skipped", sql=sql)
            return
    routed = projections.ROUTED[0]
    res = conn.execute(sql)
    routed = projections.ROUTED[0] - routed
    after = conn.store.snapshot().read_ts
    j.write(ev="query", sql=sql, at=at, before=before, after=after, routed=routed,
            rows=[[_norm(v) for v in row] for row in res.rows])


ROLES = {"setup": setup, "writer": writer, "ticker": ticker, "compactor": compactor,
         "ddl": ddl, "swaps": swaps.worker}


def main() -> None:
    import signal

    # The disk-full fault lowers RLIMIT_FSIZE: a write past it then fails with EFBIG (as
    # ENOSPC would) instead of SIGXFSZ killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    args = json.loads(Path(sys.argv[1]).read_text())
    j = Journal(Path(args["journal"]))
    import mzflow
    from mzflow_dev.soak import landing, wire  # their roles: the server, its client, files

    conn = mzflow.connect(args["home"])
    j.write(ev="up", role=args["role"])
    {**ROLES, **wire.ROLES, **landing.ROLES}[args["role"]](args, conn, j)
    j.write(ev="exit")


if __name__ == "__main__":
    main()
