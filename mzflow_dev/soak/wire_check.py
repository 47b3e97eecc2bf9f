"""The invariants of the clients over the wire and of the landing folder (issue 39),
called by checker.py's pass:

* reads through the server: each equals DuckDB's answer at its time (``AS OF`` a time
  read from ``mz_frontiers``, or a plain read between two equal such times), through
  the checker's own replay (``read_probes``); a granted read is never refused with 42501;
* denials: every attempt a role was not granted failed with 42501, and changed nothing:
  no row of a denied INSERT anywhere, no object or column named ``denied_…``, and each
  role holds exactly the privileges setup granted (a denied GRANT added none);
* the wire writer's writes (``tw``, rows keyed by id): a write the client saw finish is
  in the table exactly once, an uncertain one at most once, each all or nothing, and no
  row that no granted write made;
* the landing folder (``check_files``, pure): every file version loaded is a good one,
  loaded once with all its rows, and its rows are in the source's table exactly once; a
  bad version never loads a row and is recorded failed; a good version (a fixed file
  included) placed before a tick of the sources' cluster that finished is loaded by it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any

from mzflow_dev.soak import landing, wire
from mzflow_dev.soak.checker import Checker, bag
from mzflow_dev.soak.journal import records

CLIENT = "pgclient.jsonl"
LANDING = "landing.jsonl"
Probe = tuple[int, str, Any]


def read_probes(c: Checker) -> list[Probe]:
    """The new reads through the server, as probes of the checker's replay."""
    out: list[Probe] = []
    key = f"wire:{CLIENT}"
    for i, rec in enumerate(records(c.journals / CLIENT)):
        if i < c._reads_seen.get(key, 0):
            continue
        c._reads_seen[key] = i + 1
        ev = rec.get("ev")
        if ev == "denial":
            _denial(c, rec)
        elif ev == "wire_read_error":
            c.counts[f"wire read errors ({rec.get('code')})"] += 1
            if rec.get("code") == "42501":
                c.fail(f"a granted read through the server was refused: {rec['sql']}: "
                       f"{rec['msg']}")
        elif ev == "wire_read":
            at = rec["at"]
            if at is None and rec["before"] != rec["after"]:
                c.counts["wire plain reads not checked (time moved)"] += 1
                continue
            out.append((at if at is not None else rec["before"] - 1, "wire read",
                        (rec["oracle"], "SQL", bag(rec["rows"]))))
    return out


def _denial(c: Checker, rec: dict[str, Any]) -> None:
    if rec["outcome"] == "lost":
        c.counts["denials not answered (connection lost)"] += 1
        return
    c.counts["denial checks"] += 1
    if rec["outcome"] == "allowed":
        c.fail(f"role {rec['role']} was allowed what it was not granted: {rec['sql']}")
    elif rec.get("code") != "42501":
        c.fail(f"role {rec['role']}: {rec['sql']} failed with {rec.get('code')}, not 42501 "
               f"insufficient_privilege: {rec.get('msg')}")


def check(c: Checker, conn: Any) -> None:
    """The checks that read the home itself (after the replay's; ``conn`` is the
    checker's session, a superuser)."""
    snap = conn.store.snapshot()
    if snap.find(wire.WIRE_TABLE) is not None:
        _writes(c, conn)
        _nothing_denied_changed(c, conn)
    if all(snap.find(t) is not None for t in landing.SOURCES.values()):
        _files(c, conn)


def _delta_rows(conn: Any, name: str, columns: list[str]
                ) -> tuple[int, list[tuple[Any, ...]]] | None:
    """(version, rows) of a table's newest Delta version; None if vacuumed under us."""
    from deltalake import DeltaTable

    from mzflow.storage import paths

    item = conn.store.snapshot().find(name)
    try:
        dt = DeltaTable(str(paths.table(conn.config.warehouse, item.id)))
        data = dt.to_pyarrow_table(columns=columns)
    except Exception:  # noqa: BLE001 - the next pass reads again
        return None
    return int(dt.version()), list(zip(*(data.column(x).to_pylist() for x in columns),
                                        strict=True))


def _writes(c: Checker, conn: Any) -> None:
    # Finished first, then the table, then every write started (its rows): a write seen
    # finished is in the table read after; a row's write started before it committed.
    done = {r["n"] for r in records(c.journals / CLIENT) if r.get("ev") == "wire_write_done"}
    read = _delta_rows(conn, wire.WIRE_TABLE, ["id"])
    if read is None:
        c.counts["table reads skipped"] += 1
        return
    have = Counter(row[0] for row in read[1])
    started = {r["n"]: [row[0] for row in r["rows"]] for r in records(c.journals / CLIENT)
               if r.get("ev") == "wire_write"}
    for msg in writes_violations(done, started, have):
        c.fail(msg)
    c.counts["wire writes checked"] = len(started)
    c.counts["wire writes committed"] = sum(1 for ids in started.values() if have[ids[0]])


def writes_violations(done: set[int], started: dict[int, list[int]], have: Counter
                      ) -> list[str]:
    """Pure: ``started`` maps each write to its rows' ids, ``have`` counts the table's."""
    out = []
    mine = {i for ids in started.values() for i in ids}
    strays = sorted(i for i in have if i not in mine)
    if strays:
        out.append(f"{wire.WIRE_TABLE} holds rows no granted write made: ids {strays[:10]}")
    for n, ids in sorted(started.items()):
        counts = {have[i] for i in ids}
        if len(counts) > 1:
            out.append(f"wire write {n} partly committed: {[have[i] for i in ids]} of ids {ids}")
        elif max(counts) > 1:
            out.append(f"wire write {n} applied {max(counts)} times")
        elif n in done and counts == {0}:
            out.append(f"wire write {n} finished but is not committed (lost)")
    return out


def _nothing_denied_changed(c: Checker, conn: Any) -> None:
    snap = conn.store.snapshot()
    for item in snap.items:
        names = [item.name] + [col.name for col in item.columns]
        if any(name.startswith(wire.DENIED_NAME) for name in names):
            c.fail(f"a denied statement changed the catalog: {item.kind} {item.name} "
                   f"({', '.join(names)})")
    for role, granted in wire.GRANTED.items():
        rows = conn.execute(f"SHOW PRIVILEGES FOR {role}").rows
        held = {(r[4], r[5], r[6]) for r in rows if r[1] == role}
        c.counts["privilege checks"] += 1
        if held != granted:
            c.fail(f"role {role} holds {sorted(held)}, granted {sorted(granted)}")


def _files(c: Checker, conn: Any) -> None:
    # The journal first (its finished ticks), then the tables, then the history, then
    # the journal again for every version placed (a load's file is placed before it).
    feeds = finished_feeds(list(records(c.journals / LANDING)))
    tables = {}
    for fmt, name in landing.SOURCES.items():
        read = _delta_rows(conn, name, ["id"])
        if read is None:
            c.counts["table reads skipped"] += 1
            return
        tables[fmt] = (read[0], Counter(row[0] for row in read[1]))
    snap = conn.store.snapshot()
    fmt_of = {snap.find(name).id: fmt for fmt, name in landing.SOURCES.items()}
    history = [(fmt_of[r[0]], *r[1:]) for r in conn.execute(
        "SELECT table_id, path, identity, status, rows, table_version, error "
        "FROM mz_internal.mz_copy_history").rows if r[0] in fmt_of]
    recs = list(records(c.journals / LANDING))
    violations, counts = check_files(recs, feeds, tables, history)
    for msg in violations:
        c.fail(msg)
    c.counts["landing file checks"] += counts.pop("checks")
    for k, v in counts.items():
        c.counts[k] = v  # the newest pass's totals


def finished_feeds(recs: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) wall-clock times of each tick of the sources' cluster that finished."""
    out, start = [], None
    for r in recs:
        if r.get("ev") == "feed_start":
            start = (r["pid"], r["t"])
        elif r.get("ev") == "feed" and start is not None and start[0] == r["pid"]:
            out.append((start[1], r["t"]))
            start = None
    return out


def identity(path: str, size: int, mtime_ns: int) -> str:
    from mzflow.storage.landing import LandedFile

    return LandedFile(path, size, mtime_ns).identity


def check_files(recs: list[dict[str, Any]], feeds: list[tuple[float, float]],
                tables: dict[str, tuple[int, Counter]], history: list[tuple[Any, ...]]
                ) -> tuple[list[str], Counter]:
    """Pure. ``recs``: the landing journal; ``feeds``: finished ticks (from an earlier
    read of it); ``tables``: format -> (Delta version, ids counted); ``history``: rows
    (format, path, identity, status, rows, table_version, error) of mz_copy_history."""
    out: list[str] = []
    counts: Counter = Counter(checks=0)
    places = {r["n"]: r for r in recs if r.get("ev") == "place"}
    placed = {r["n"]: r for r in recs if r.get("ev") == "placed"}
    by_identity = {identity(r["path"], r["size"], r["mtime_ns"]): n for n, r in placed.items()}
    unplaced = {places[n]["name"] for n in places if n not in placed}
    loaded: Counter = Counter()
    failed: set[str] = set()
    for fmt, path, ident, status, rows, version, error in history:
        n = by_identity.get(ident)
        name = path.rsplit("/", 1)[-1]
        if n is None:
            if name not in unplaced:
                out.append(f"{status} a file the landing worker never placed: {path}")
            continue  # placed, but killed before the journal said so: the next pass
        p = places[n]
        counts["checks"] += 1
        if status == "failed":
            failed.add(ident)
            if p["bad"] is None:
                out.append(f"good file {name} (drop {n}) recorded failed: {error}")
            continue
        loaded[ident] += 1
        if p["bad"] is not None:
            out.append(f"bad file {name} (drop {n}, {p['bad']}) loaded {rows} rows")
        elif rows != len(p["rows"]):
            out.append(f"file {name} (drop {n}) loaded {rows} rows, it has {len(p['rows'])}")
        elif version is not None and version <= tables[fmt][0]:
            got = [tables[fmt][1][row[0]] for row in p["rows"]]
            if got != [1] * len(got):
                out.append(f"file {name} (drop {n}) loaded at version {version} but its "
                           f"rows are in the table {got} times")
    for ident, times in loaded.items():
        if times > 1:
            n = by_identity[ident]
            out.append(f"file {places[n]['name']} (drop {n}) loaded {times} times")
    for fmt, (_, ids) in tables.items():
        by_drop: dict[int, Counter] = {}
        for i, k in ids.items():
            by_drop.setdefault(i // 100, Counter())[i] = k
        for n, got in sorted(by_drop.items()):
            p = places.get(n)
            counts["checks"] += 1
            if p is None or p["fmt"] != fmt:
                out.append(f"source {landing.SOURCES[fmt]} holds rows of no {fmt} drop: "
                           f"ids {sorted(got)[:5]}")
            elif p["bad"] is not None:
                out.append(f"rows of bad file {p['name']} (drop {n}, {p['bad']}) in "
                           f"{landing.SOURCES[fmt]}: ids {sorted(got)}")
            elif dict(got) != {row[0]: 1 for row in p["rows"]}:
                out.append(f"file {p['name']} (drop {n}) in {landing.SOURCES[fmt]} not "
                           f"exactly once and whole: {dict(got)}")
    # Completeness: a version in place for a whole finished tick was loaded or failed.
    # Ticks run one after another, so the first to start after a version was placed is
    # the first to end: if it ended before the next version came, it had to see it.
    feeds = sorted(feeds)
    starts = [start for start, _ in feeds]
    next_place: dict[int, float] = {}
    last_of: dict[str, int] = {}
    for n in sorted(places):
        if places[n]["name"] in last_of:
            next_place[last_of[places[n]["name"]]] = places[n]["t"]
        last_of[places[n]["name"]] = n
    for n, r in placed.items():
        p = places[n]
        i = bisect.bisect_right(starts, r["t"])
        if i == len(feeds) or feeds[i][1] >= next_place.get(n, float("inf")):
            continue
        counts["checks"] += 1
        ident = identity(r["path"], r["size"], r["mtime_ns"])
        if p["bad"] is None and not loaded[ident]:
            out.append(f"good file {p['name']} (drop {n}) placed before a finished tick "
                       "of its source's cluster but not loaded")
        elif p["bad"] is not None and ident not in failed:
            out.append(f"bad file {p['name']} (drop {n}) placed before a finished tick "
                       "of its source's cluster but not recorded failed")
    counts["landing files loaded"] = len(loaded)
    counts["landing files failed"] = len(failed)
    counts["landing fixed files loaded"] = sum(
        1 for ident in loaded if places[by_identity[ident]].get("fixes"))
    return out, counts
