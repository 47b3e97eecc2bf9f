"""EXPLAIN: what a query or a maintained object reads, and how it is computed.

The text is mzflow's own, stable and tested with golden files. Each section is
derived from the same structures that execute: the bound and inlined query (the
relations and versions it reads, the indexes that serve it) and the change plan
of a maintained object (its strategy, with the reason code when it is not
incremental).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.planner import Plan as StepPlan
from sqlglot.planner import Step

from mzflow import config
from mzflow.catalog import names, refresh
from mzflow.catalog.bind import pinned
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, VIEW, Item, Snapshot
from mzflow.errors import Unsupported, WrongObjectType
from mzflow.incremental import local
from mzflow.incremental.arrangements import needs
from mzflow.incremental.modes import Mode
from mzflow.incremental.plan import derive, explain, plan_query
from mzflow.read import reads

Serve = Callable[[Item], Item | None]


def explain_query(snap: Snapshot, query: exp.Query, serve: Serve | None,
                  cluster: str) -> list[str]:
    p = reads.plan(snap, query, serve)
    lines = ["Explained Query:"]
    if p.tables or p.indexes:
        root, _, _, operators = plan_query(snap, query)
        lines += explain(root, operators)
    else:  # catalog queries run in-process; sqlglot's planner describes them
        lines += _steps(p.query, snap, indent=1)
    lines += _sources(snap, p)
    lines.append(f"Target cluster: {cluster}")
    return lines


def explain_object(snap: Snapshot, name: names.Ref, kind: str,
                   last_tick: Callable[[Item], str | None] | None = None,
                   freshness: Callable[[Item], str] | None = None,
                   lapsed: Callable[[Item], str | None] | None = None) -> list[str]:
    """``last_tick(index)``: how its last tick ran, when the run time chose recompute;
    ``freshness(index)``: how current its contents are (maintain/freshness.py);
    ``lapsed(index)``: whether its read hold on its inputs lapsed
    (maintain/tick/holds.py)."""
    item = names.resolve(snap, name)
    wanted = {"VIEW": VIEW, "MATERIALIZED VIEW": MATERIALIZED_VIEW, "INDEX": INDEX}[kind]
    if item.kind != wanted:
        raise WrongObjectType(
            f"{item.qualified_name} is not a {kind.lower()}",
            hint=f"Use EXPLAIN [...] {item.kind_word.upper()} to explain a {item.kind_word}.")
    if item.kind == VIEW:
        raise Unsupported("EXPLAIN VIEW: a view is not maintained; EXPLAIN its SELECT")
    indexes = [item] if item.kind == INDEX else [
        i for i in snap.indexes_on(item.id) if i.is_default_index] or snap.indexes_on(item.id)
    lines = []
    for index in indexes:
        plan = derive(snap, index)
        cluster = snap.cluster(index.cluster_id)
        lines += [f"Maintained: {plan.on.qualified_name} by {index.qualified_name} in cluster "
                  f"{cluster.name if cluster else '?'}",
                  f"Strategy: {plan.strategy.describe()}", f"Tick mode: {plan.mode}",
                  f"Executor: {local.describe(plan, config.tuning(snap.settings))}"]
        policy = refresh.of_index(snap, index)
        schedule = policy.schedule()
        if schedule is not None:  # ON COMMIT, the default, goes unsaid
            lines.append(f"Refresh: {policy.describe()} (its cluster's DAG runs "
                         f"{schedule.describe()})")
        switched = last_tick(index) if last_tick is not None else None
        if switched:
            lines.append(f"Last tick: {switched}")
        if freshness is not None:
            lines.append(freshness(index))
        # Only a plan that reads changes of tables holds them.
        gone = lapsed(index) if lapsed is not None and plan.mode != Mode.RECOMPUTE and (
            plan.root is not None and any(True for _ in plan.root.gets())) else None
        if gone:
            lines.append(gone)
        lines.append("Plan:")
        assert plan.root is not None
        lines += explain(plan.root, plan.operators)
        found = needs(plan.root)
        if found:
            # what each delta join looks changed keys up in (maintain/tick/arrange.py)
            lines.append(f"Join lookups in arrangements of cluster "
                         f"{cluster.name if cluster else '?'}:")
            lines += [f"  - {snap.item(n.item_id).qualified_name} ({n.column}): "
                      f"arrangement {n.id}" for n in found]
    if not indexes:
        lines.append(f"{item.qualified_name} has no index: it is not maintained, reads "
                     "recompute it")
    return lines


def _sources(snap: Snapshot, p: reads.Plan) -> list[str]:
    out = []
    for _, table, version in sorted(p.tables, key=lambda t: t[1].name):
        out.append(f"Source {table.qualified_name} (version {version})")
    if p.indexes:
        out.append("Used Indexes:")
        out += [f"  - {index.qualified_name}" for _, index in sorted(p.indexes,
                                                                        key=lambda t: t[0])]
    return out


def _steps(query: exp.Query, snap: Snapshot, indent: int) -> list[str]:
    try:
        root = StepPlan(query.copy()).root
    except Exception:  # sqlglot's planner does not know every construct
        return ["  " * indent + f"Query {query.sql(dialect='spark')}"]
    return _render(root, snap, indent)


def _render(step: Step, snap: Snapshot, indent: int) -> list[str]:
    pad = "  " * indent
    kind = type(step).__name__
    name = _relation(step.name or "", snap)
    detail = ""
    condition = getattr(step, "condition", None)
    if kind in ("Scan", "Join") and condition is not None:
        detail = f" filter={condition.sql()}"
    if kind == "Aggregate":
        group = ", ".join(g.sql() for g in getattr(step, "group", {}).values())
        aggs = ", ".join(a.sql() for a in getattr(step, "aggregations", []))
        detail = f" group=[{group}] aggregates=[{aggs}]"
    if kind == "Join":
        joins = ", ".join(f"{_relation(n, snap)}:{j.get('side') or 'INNER'}"
                          for n, j in getattr(step, "joins", {}).items())
        detail = f" with=[{joins}]{detail}"
    if kind == "Sort":
        detail = f" keys=[{', '.join(k.sql() for k in getattr(step, 'key', []))}]"
    lines = [f"{pad}{kind} {name}{detail}".rstrip()]
    for dep in sorted(step.dependencies, key=lambda d: d.name or ""):
        lines += _render(dep, snap, indent + 1)
    return lines


def _relation(name: str, snap: Snapshot) -> str:
    pin = pinned(name)
    if pin is not None:
        item = snap.item(pin[0])
        return f"{item.name}@v{pin[1]}"
    if name.startswith("mz_idx_"):
        return f"index {snap.item(name.removeprefix('mz_idx_')).name}"
    return name
