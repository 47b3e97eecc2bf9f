"""``mzflow apply -f catalog.sql``: carry out the plan (plan.py) on the live catalog.

In order: new clusters and resized ones, new schemas; then every object the plan
replaces or drops goes, with everything that reads it (``DROP … CASCADE``, so nothing
is left reading a dropped definition); tables get their added columns; then the file's
own statements run again, in the file's order, for every object to create: the new
ones and the ones dropped above that the file still has (a view over a replaced view
comes back over the new one). Dropped clusters and schemas go last. ``--blue-green``
stages, hydrates and swaps instead (bluegreen.py).

It refuses before changing anything when the plan has refusals, or when the catalog's
version is not the one the plan was made against (``--catalog-version``, from
``mzflow plan --json``). Statements run one by one, each its own catalog transaction:
an apply that fails midway has done the statements before (they are printed), and a
new plan shows what is left.
"""

from __future__ import annotations

import sys
from typing import TextIO

from sqlglot import exp

from mzflow.catalog.model import Snapshot
from mzflow.deploy import desired as desired_mod
from mzflow.deploy import diff as diff_mod
from mzflow.deploy.plan import Plan, render
from mzflow.errors import InvalidOption, SerializationFailure


def _closure(live: Snapshot, names: set[str]) -> set[str]:
    """``names`` (qualified) and every live object that reads them, directly or not."""
    items = [i for i in live.items if i.qualified_name in names]
    return {i.qualified_name for i in items + diff_mod.readers(live, items)}


Step = tuple[str, exp.Expr | None]  # the SQL, and the file's own tree when it is one


def statements(live: Snapshot, wanted: desired_mod.Desired, d: diff_mod.Diff) -> list[Step]:
    """The statements that take ``live`` to ``wanted``, in the order they must run."""
    out: list[Step] = []
    changes = d.changes
    by_name = {i.qualified_name: i for i in live.items}
    for c in changes:
        if c.kind == "cluster" and c.action == "alter":
            cluster = wanted.snapshot.find_cluster(c.name)
            assert cluster is not None
            now = live.find_cluster(c.name) or cluster
            if (now.spark, now.virtual) != (cluster.spark, cluster.virtual) or not cluster.size:
                raise InvalidOption(f"apply can only resize cluster {c.name}",
                                    hint=f"change its SPARK or VIRTUAL with ALTER CLUSTER "
                                         f"{c.name} by hand, then plan again")
            out.append((f"ALTER CLUSTER \"{c.name}\" SET (SIZE = '{cluster.size}')", None))
    going = {c.name for c in changes if c.action in ("replace", "drop") and c.kind not in (
        "cluster", "schema")}
    gone = _closure(live, going)
    for name in sorted(gone):
        item = by_name[name]
        if item.is_default_index and any(
                i.id == item.on_id for i in live.items if i.qualified_name in gone):
            continue  # goes with its materialized view
        kind = item.kind_word.upper()
        out.append((f"DROP {kind} IF EXISTS {_quoted(name)} CASCADE", None))
    out += [(sql, None) for c in changes if c.action == "alter" and c.kind == "table"
            for sql in c.statement.split("; ")]
    wanted_names = {c.name for c in changes if c.action == "create"} | (
        gone - {c.name for c in changes if c.action == "drop"})
    for stmt, made in wanted.made:
        spaces = [k for k in made if k[0] in ("cluster", "schema")]
        if spaces:  # CREATE CLUSTER or SCHEMA: only those the live catalog lacks
            if not all(_exists(live, k) for k in spaces):
                out.append((desired_mod.text(stmt), stmt))
        elif {_qualified(k) for k in made} & wanted_names:
            out.append((desired_mod.text(stmt), stmt))
    out += [(f'DROP CLUSTER "{c.name}" CASCADE', None) for c in changes
            if c.kind == "cluster" and c.action == "drop"]
    out += [(f'DROP SCHEMA "{c.name}" CASCADE', None) for c in changes
            if c.kind == "schema" and c.action == "drop"]
    return out


def _exists(live: Snapshot, key: desired_mod.Key) -> bool:
    kind, _, name = key
    if kind == "cluster":
        return live.find_cluster(name) is not None
    return live.schema_named(name) is not None


def _qualified(key: desired_mod.Key) -> str:
    kind, schema, name = key
    return name if kind in ("cluster", "schema") else f"materialize.{schema}.{name}"


def _quoted(qualified: str) -> str:
    return ".".join(f'"{part}"' for part in qualified.split("."))


def run(conn: object, text: str, expect_version: int | None, source: str,
        out: TextIO | None = None, *, blue_green: bool = False, resume: bool = False,
        lag_ms: int = 1000, timeout_s: float = 1800) -> int:
    """0 when applied, 1 when the plan has refusals (nothing applied)."""
    out = out or sys.stdout
    import mzflow
    from mzflow.deploy import estimate

    assert isinstance(conn, mzflow.Connection)
    live = conn.store.snapshot()
    from mzflow.deploy import bluegreen

    recorded = bluegreen.load_state(conn.config.home) if resume else None
    unfinished = recorded is not None and recorded.step != "done"
    if recorded is not None and unfinished and recorded.aborting:
        raise bluegreen.in_progress(live, recorded)  # only --abort goes on
    if recorded is not None and unfinished and bluegreen.past_swap(live, recorded):
        # Past the swap only the clean-up is left, which needs no file: a file gone stale
        # since (the catalog moved: its plan is refused) must not leave the old version
        # staged forever, when --abort can no longer undo the swap.
        print("resuming past the swap: the file is not planned again\n", file=out)
        return bluegreen.run(conn, None, None, resume=True, lag_ms=lag_ms,
                             timeout_s=timeout_s, out=out)
    if expect_version is not None and live.version != expect_version and not resume:
        raise SerializationFailure(f"the catalog changed since the plan was made (version "
                           f"{expect_version}, now {live.version})", hint="plan again")
    wanted = desired_mod.replay(text)
    d = diff_mod.diff(live, wanted.snapshot)
    plan = Plan(live.version, wanted.statements, d.changes,
                estimate.hydrations(live, wanted.snapshot, d, conn.config.warehouse),
                wanted.refused, d.refusals, wanted.ignored)
    print(render(plan, source), file=out)
    if plan.refused or plan.refusals:
        print("\nnothing applied: the plan has refusals", file=out)
        if unfinished:
            print("the blue/green apply stays stopped: apply --resume once the file "
                  "plans again, or apply --abort to abandon it", file=out)
        return 1
    print("", file=out)
    if blue_green or resume:
        return bluegreen.run(conn, wanted, d, resume=resume, lag_ms=lag_ms,
                             timeout_s=timeout_s, out=out)
    todo = statements(live, wanted, d)
    for n, (sql, tree) in enumerate(todo, start=1):
        result = conn.execute_parsed(tree) if tree is not None else conn.execute(sql)
        print(f"[{n}/{len(todo)}] {result.status}: {sql}", file=out)
    print(f"applied: {len(todo)} statements" if todo else "nothing to apply", file=out)
    return 0
