"""``mzflow apply --blue-green``: stage the changed schemas beside the live ones, wait
until they are hydrated and fresh, then swap them in with one catalog transaction
(Materialize's blue/green deployments, as dbt-materialize's deploy macros and mz-deploy
run them).

The unit is a whole schema and the clusters that maintain it, as in Materialize:

1. **stage**: for each schema ``s`` that holds a changed view, materialized view, index
   or sink, a schema ``s_mzflow_deploy``, and for each cluster ``c`` that maintains
   them, a cluster ``c_mzflow_deploy`` of the same size; the file's statements for every
   object of ``s`` run again there (their names and clusters rewritten);
2. **hydrate**: the staged clusters tick until every staged index is hydrated and
   lags by at most ``--lag-threshold``;
3. **swap**: ``BEGIN; ALTER SCHEMA s SWAP WITH …; ALTER CLUSTER c SWAP WITH …; COMMIT``:
   readers see the old objects or the new ones, never a mix, never an empty one;
4. **clean up**: the old objects, now under the staging names, are dropped, after
   ``DRAIN_SECONDS`` for the reads that resolved the old names just before the swap
   (plain reads take no read hold to wait for: a read running longer fails).

Each step is recorded in ``<home>/deploy/state.json`` when it is done. A failure (or a
kill) at any step leaves the live version serving; ``--resume`` continues from the
recorded step (staged objects that exist are kept, ticks are idempotent, a swap is
done once), and ``--abort`` (before the swap) drops what was staged and forgets the
apply (``abort``). Refused, changing nothing: tables in a deployed schema (they hold data a
swap would hide: keep them in a schema of their own), table or cluster changes in the
plan, a deployed cluster that also maintains objects outside the deployed schemas, and
an object outside them that reads one inside (after the swap it would read the old one).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from sqlglot import exp

from mzflow.catalog.model import DATABASE, INDEX, SINK, TABLE, Item, Snapshot
from mzflow.deploy import desired as desired_mod
from mzflow.deploy import diff as diff_mod
from mzflow.errors import Error, InvalidOption

SUFFIX = "_mzflow_deploy"
STEPS = ("staged", "hydrated", "swapped", "done")


class BlueGreenRefused(InvalidOption):
    pass


@dataclass
class State:
    schemas: list[str]
    clusters: list[str]
    step: str  # the last step done: "" (none), or one of STEPS
    # The staged schemas' and clusters' ids, recorded once staged: a swap that happened
    # but was not recorded (killed right after its commit) is seen by them, and is
    # never done twice (a second swap would swap back).
    staged: dict[str, str] = field(default_factory=dict)
    # Set when --abort begins, before it drops anything: an abort killed midway is
    # finished by the next --abort, and nothing else may run on the half-dropped twins.
    aborting: bool = False


def state_path(home: Path) -> Path:
    return home / "deploy" / "state.json"


def load_state(home: Path) -> State | None:
    try:
        return State(**json.loads(state_path(home).read_text()))
    except FileNotFoundError:
        return None


def _save(home: Path, state: State) -> None:
    path = state_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state)))
    tmp.replace(path)  # the step is recorded whole or not at all


def _schema_of(qualified: str) -> str:
    return qualified.split(".")[1]


def scope(live: Snapshot, wanted: Snapshot, d: diff_mod.Diff) -> State:
    """The schemas and clusters to deploy, or BlueGreenRefused saying why not."""
    other = [c for c in d.changes if c.kind in ("table", "cluster", "schema")]
    if other:
        raise BlueGreenRefused(
            f"--blue-green deploys views, materialized views, indexes and sinks; the plan "
            f"also has: {', '.join(f'{c.action} {c.kind} {c.name}' for c in other)}",
            hint="apply those first without --blue-green")
    schemas = sorted({_schema_of(c.name) for c in d.changes})
    if not schemas:
        return State([], [], "")
    for snap in (live, wanted):
        tables = [i.qualified_name for i in snap.items
                  if i.kind == TABLE and i.schema in schemas]
        if tables:
            raise BlueGreenRefused(
                f"schema {tables[0].split('.')[1]} holds table {tables[0]}: a swap would "
                "hide its data", hint="keep tables in a schema of their own")
    clusters: set[str] = set()
    for snap in (live, wanted):
        for i in snap.items:
            if i.kind in (INDEX, SINK) and i.schema in schemas and i.cluster_id is not None:
                found = snap.cluster(i.cluster_id)
                if found is not None:
                    clusters.add(found.name)
    for i in live.items:
        cluster = live.cluster(i.cluster_id) if i.kind in (INDEX, SINK) else None
        if cluster is not None and cluster.name in clusters and i.schema not in schemas:
            raise BlueGreenRefused(
                f"cluster {cluster.name} also maintains {i.qualified_name}, outside the "
                f"deployed schemas ({', '.join(schemas)})",
                hint="give the deployed schemas clusters of their own")
        if i.schema not in schemas and any(
                live.item(dep).schema in schemas for dep in i.depends_on
                if any(x.id == dep for x in live.items)):
            raise BlueGreenRefused(
                f"{i.qualified_name} reads objects of {', '.join(schemas)}: after the swap "
                "it would still read the old ones", hint="deploy its schema too")
    return State(schemas, sorted(clusters), "")


def _rewrite(stmt: exp.Expr, state: State) -> exp.Expr:
    """``stmt`` aimed at the staging schemas and clusters."""
    out = stmt.copy()
    for table in out.find_all(exp.Table):
        if table.db in state.schemas and table.catalog in ("", DATABASE):
            table.set("db", exp.to_identifier(table.db + SUFFIX))
    for node in out.walk():
        cluster = node.args.get("cluster") if isinstance(node, exp.Expression) else None
        if isinstance(cluster, exp.Identifier) and cluster.name in state.clusters:
            node.set("cluster", exp.to_identifier(cluster.name + SUFFIX))
    return out


def _in_scope(keys: list[desired_mod.Key], state: State) -> bool:
    return bool(keys) and all(k[0] not in ("cluster", "schema") and k[1] in state.schemas
                              for k in keys)


def stage(conn: object, wanted: desired_mod.Desired, state: State, out: TextIO) -> None:
    import mzflow

    assert isinstance(conn, mzflow.Connection)
    snap = conn.store.snapshot()
    for s in state.schemas:
        if snap.schema_named(s + SUFFIX) is None:
            _run(conn, f'CREATE SCHEMA "{s}{SUFFIX}"', out)
    for c in state.clusters:
        if snap.find_cluster(c + SUFFIX) is None:
            size = (snap.find_cluster(c) or wanted.snapshot.find_cluster(c))
            assert size is not None
            _run(conn, f'CREATE CLUSTER "{c}{SUFFIX}" SIZE \'{size.size or "small"}\'', out)
    # Unqualified names went to the first schema of the path and the session's cluster.
    path = conn.vars.search_path()
    staged_path = ", ".join(f'"{p}{SUFFIX}"' if p in state.schemas else f'"{p}"'
                            for p in path)
    cluster = conn.variable("cluster")
    conn.execute(f"SET search_path = {staged_path}")
    if cluster in state.clusters:
        conn.execute(f'SET cluster = "{cluster}{SUFFIX}"')
    try:
        have = desired_mod.keys(conn.store.snapshot())
        for stmt, made in wanted.made:
            if not _in_scope(made, state):
                continue
            staged = [(k[0], k[1] + SUFFIX, k[2]) for k in made]
            if all(k in have for k in staged):
                continue  # staged by a run that was stopped (--resume)
            _run(conn, _rewrite(stmt, state), out)
    finally:
        conn.execute("SET search_path = " + ", ".join(f'"{p}"' for p in path))
        conn.execute(f'SET cluster = "{cluster}"')
    snap = conn.store.snapshot()
    state.staged = {**{f"schema:{s}": snap.schema_id(s + SUFFIX) for s in state.schemas},
                    **{f"cluster:{c}": str(snap.cluster_by_name(c + SUFFIX).id)
                       for c in state.clusters}}


def _run(conn: object, stmt: str | exp.Expr, out: TextIO) -> None:
    import mzflow

    assert isinstance(conn, mzflow.Connection)
    result = conn.execute(stmt) if isinstance(stmt, str) else conn.execute_parsed(stmt)
    text = stmt if isinstance(stmt, str) else desired_mod.text(stmt)
    print(f"  {result.status}: {text}", file=out)


def staged_indexes(snap: Snapshot, state: State) -> list[Item]:
    names = {c + SUFFIX for c in state.clusters}
    ids = {c.id for c in snap.clusters if c.name in names}
    return [i for i in snap.items if i.kind == INDEX and i.cluster_id in ids]


def hydrate(conn: object, state: State, lag_ms: int, timeout_s: float, out: TextIO) -> None:
    """Tick the staged clusters until each staged index is hydrated and lags by at most
    ``lag_ms``; Error after ``timeout_s``."""
    import mzflow
    from mzflow.catalog.store import now_ms
    from mzflow.maintain import freshness

    assert isinstance(conn, mzflow.Connection)
    deadline = time.monotonic() + timeout_s
    while True:
        for c in state.clusters:
            for r in conn.tick(cluster=c + SUFFIX):
                if r.error:
                    raise Error(f"staged index {r.index} failed to tick: {r.error}")
        snap = conn.store.snapshot()
        lags = {i.qualified_name: freshness.current_lag(snap, conn.config.warehouse, i,
                                                       now_ms())[1]
                for i in staged_indexes(snap, state)}
        behind = {n: lag for n, lag in lags.items()
                  if lag is None or lag.total_seconds() * 1000 > lag_ms}
        print(f"  hydrated {len(lags) - len(behind)} of {len(lags)} staged indexes", file=out)
        if not behind:
            return
        if time.monotonic() > deadline:
            raise Error(f"staged indexes not fresh after {timeout_s:.0f} s: "
                        f"{', '.join(sorted(behind))}",
                        hint="the live version keeps serving; apply --resume waits again")


def swapped(snap: Snapshot, state: State) -> bool:
    """Do the live names already hold the staged objects?"""
    if not state.staged:
        return False
    return all(snap.schema_id(s) == state.staged[f"schema:{s}"] for s in state.schemas)


def swap(conn: object, state: State, out: TextIO) -> None:
    import mzflow

    assert isinstance(conn, mzflow.Connection)
    if swapped(conn.store.snapshot(), state):
        print("  already swapped", file=out)
        return
    parts = [f'ALTER SCHEMA "{s}" SWAP WITH "{s}{SUFFIX}"' for s in state.schemas]
    parts += [f'ALTER CLUSTER "{c}" SWAP WITH "{c}{SUFFIX}"' for c in state.clusters]
    _run(conn, "BEGIN; " + "; ".join(parts) + "; COMMIT", out)


# Reads that resolved a live name just before the swap still read the old objects: the
# clean-up waits this long before dropping them (plain reads take no hold to wait on).
DRAIN_SECONDS = 5.0


def clean_up(conn: object, state: State, out: TextIO, drain_s: float = DRAIN_SECONDS
             ) -> None:
    if drain_s > 0:
        print(f"  letting reads of the old version finish ({drain_s:.0f} s)", file=out)
        time.sleep(drain_s)
    for s in state.schemas:
        _run(conn, f'DROP SCHEMA IF EXISTS "{s}{SUFFIX}" CASCADE', out)
    for c in state.clusters:
        _run(conn, f'DROP CLUSTER IF EXISTS "{c}{SUFFIX}" CASCADE', out)


def past_swap(snap: Snapshot, state: State) -> bool:
    """Has the apply swapped (recorded, or seen by a live name holding a staged id)?
    Past that, the old version is gone from the live names: only --resume goes on."""
    if state.step in ("swapped", "done"):
        return True
    live = {f"schema:{s.name}": s.id for s in snap.schemas} | {
        f"cluster:{c.name}": str(c.id) for c in snap.clusters}
    return any(live.get(key) == staged_id for key, staged_id in state.staged.items())


def in_progress(snap: Snapshot, recorded: State) -> BlueGreenRefused:
    """The refusal of a new apply while ``recorded`` is unfinished, with the way on."""
    what = f"(schemas {', '.join(recorded.schemas)})"
    if recorded.aborting:
        return BlueGreenRefused(f"a blue/green apply is being aborted {what}",
                                hint="run apply --abort to finish it")
    return BlueGreenRefused(
        f"a blue/green apply stopped after step '{recorded.step or 'start'}' {what}",
        hint="run apply --resume" if past_swap(snap, recorded) else
        "run apply --resume, or apply --abort to abandon it")


def run(conn: object, wanted: desired_mod.Desired | None, d: diff_mod.Diff | None, *,
        resume: bool, lag_ms: int, timeout_s: float, out: TextIO) -> int:
    """Deploy ``wanted`` (``d``: its diff against the live catalog), or with ``resume``
    continue the recorded apply (``wanted`` may then be None past the staging)."""
    import mzflow

    assert isinstance(conn, mzflow.Connection)
    home = conn.config.home
    recorded = load_state(home)
    if recorded is not None and recorded.step != "done" and (
            not resume or recorded.aborting):
        raise in_progress(conn.store.snapshot(), recorded)
    if resume and recorded is not None and recorded.step != "done":
        state = recorded
    else:
        assert wanted is not None and d is not None
        state = scope(conn.store.snapshot(), wanted.snapshot, d)
        if not state.schemas:
            print("nothing to deploy", file=out)
            return 0
        _save(home, state)

    def staging() -> None:
        assert wanted is not None, "staging needs the desired file"
        stage(conn, wanted, state, out)

    steps = (("staged", staging),
             ("hydrated", lambda: hydrate(conn, state, lag_ms, timeout_s, out)),
             ("swapped", lambda: swap(conn, state, out)),
             ("done", lambda: clean_up(conn, state, out)))
    done = STEPS.index(state.step) if state.step else -1
    for n, (name, step) in enumerate(steps):
        if n <= done:
            continue
        print(f"{name}:", file=out)
        step()
        state.step = name
        _save(home, state)
    print(f"deployed: {', '.join(state.schemas)} (clusters {', '.join(state.clusters)})",
          file=out)
    return 0


def abort(conn: object, out: TextIO) -> int:
    """``mzflow apply --abort``: abandon an unfinished apply before its swap. The staged
    twins go (``DROP … CASCADE``), then the record, so that a new apply can start; the
    live version is never touched. Refused past the swap (the new version is live: only
    --resume finishes it) and when dropping the twins would take anything that is not
    part of the apply with them. Crash-safe as the steps are: ``aborting`` is recorded
    before the first drop, the drops are ``IF EXISTS``, the record goes last; a kill
    midway leaves an apply that only another --abort continues."""
    import mzflow

    assert isinstance(conn, mzflow.Connection)
    home = conn.config.home
    state = load_state(home)
    if state is None or state.step == "done":
        print("no blue/green apply in progress: nothing to abort", file=out)
        return 0
    what = f"schemas {', '.join(state.schemas)}"
    snap = conn.store.snapshot()
    if past_swap(snap, state):
        raise BlueGreenRefused(
            f"cannot abort the blue/green apply of {what}: it already swapped, the new "
            "version is live", hint="run apply --resume to finish it")
    _check_twins(snap, state)
    if not state.aborting:
        state.aborting = True
        _save(home, state)
    print(f"aborting the blue/green apply of {what} (stopped after step "
          f"'{state.step or 'start'}'):", file=out)
    for s in state.schemas:
        _run(conn, f'DROP SCHEMA IF EXISTS "{s}{SUFFIX}" CASCADE', out)
    for c in state.clusters:
        _run(conn, f'DROP CLUSTER IF EXISTS "{c}{SUFFIX}" CASCADE', out)
    state_path(home).unlink(missing_ok=True)  # last: a new apply may start now
    print(f"aborted: the live {what} serve on unchanged", file=out)
    return 0


def _check_twins(snap: Snapshot, state: State) -> None:
    """Refuse unless the twins are the ones this apply staged (by the ids it recorded
    once staged; before that, the names are its own) and nothing outside them would go
    with them."""
    schemas = {s + SUFFIX for s in state.schemas}
    for s in state.schemas:
        found, recorded = snap.schema_named(s + SUFFIX), state.staged.get(f"schema:{s}")
        if found is not None and recorded is not None and found.id != recorded:
            raise BlueGreenRefused(f"schema {s}{SUFFIX} is not the one the apply staged",
                                   hint="drop it by hand if it should go")
    clusters = set()
    for c in state.clusters:
        twin, recorded = snap.find_cluster(c + SUFFIX), state.staged.get(f"cluster:{c}")
        if twin is not None and recorded is not None and str(twin.id) != recorded:
            raise BlueGreenRefused(f"cluster {c}{SUFFIX} is not the one the apply staged",
                                   hint="drop it by hand if it should go")
        if twin is not None:
            clusters.add(twin.id)
    inside = [i for i in snap.items if i.schema in schemas
              or (i.kind in (INDEX, SINK) and i.cluster_id in clusters)]
    outside = [i for i in inside + diff_mod.readers(snap, inside) if i.schema not in schemas]
    if outside:
        raise BlueGreenRefused(
            f"cannot abort: {outside[0].kind_word} {outside[0].qualified_name} depends on "
            "what the blue/green apply staged, and is not part of it",
            hint="drop it first: an abort drops only what the apply staged")
