"""What it takes to go from the live catalog to a desired one: pure, no I/O.

Objects are matched by kind and name. Two objects are the same when their stored
statements are, once the table versions and ids they pin are set aside (a view over
``t`` pinned at version 0 in the scratch catalog is the view over ``t`` pinned at
version 2 live: a replaced view binds to the newest version). What differs is:

- a table with columns added at its end: ``alter`` (ALTER TABLE … ADD COLUMN, non-breaking);
  a table that loses or retypes a column: refused (a table keeps its columns);
- a view or materialized view whose definition changed: ``replace``, breaking when a
  column of the live one is gone or retyped, with every object that reads it, directly
  or not, listed as touched;
- an index, sink or cluster whose statement changed: ``replace``;
- a live object the file does not name: ``drop``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from mzflow.catalog import normalize
from mzflow.catalog.model import (
    INDEX,
    MATERIALIZED_VIEW,
    TABLE,
    VIEW,
    Cluster,
    Item,
    Snapshot,
)
from mzflow.sql.ast import VersionedTable
from mzflow.sql.parse import parse_one

# Apply's order: what others need first, drops last (dependents before what they read).
ACTIONS = ("create", "alter", "replace", "drop")


@dataclass(frozen=True)
class Change:
    action: str  # create | alter | replace | drop
    kind: str  # cluster, schema, table, view, materialized view, index, sink
    name: str
    detail: str = ""
    breaking: bool = False
    touches: tuple[str, ...] = ()  # live objects that read it, directly or not
    statement: str = ""  # the desired object's statement (create, alter, replace)


@dataclass(frozen=True)
class Refusal:
    name: str
    message: str


@dataclass
class Diff:
    changes: list[Change] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)


def canonical(item: Item) -> str:
    """``item``'s statement without the versions and ids it pins."""
    tree = parse_one(item.create_sql)
    for pinned in list(tree.find_all(VersionedTable)):
        plain = {k: v for k, v in pinned.args.items() if k not in ("item_id", "pinned")}
        pinned.replace(exp.Table(**plain))
    return normalize.sql(tree)


def _differs(old: Item, new: Item) -> bool:
    if old.kind == TABLE:
        # A table's stored CREATE is the one it was made with: ADD COLUMN leaves it be.
        return [(c.name, c.type) for c in old.columns] != [(c.name, c.type) for c in new.columns]
    return canonical(old) != canonical(new)


def _key(item: Item) -> tuple[str, str, str]:
    return item.kind, item.schema, item.name


def _planned(snap: Snapshot) -> dict[tuple[str, str, str], Item]:
    # A materialized view's own index comes and goes with it: not an object of its own.
    # Sources and their tables are not planned yet (a desired file's CREATE SOURCE is
    # listed as ignored): a plan neither creates nor drops them.
    return {_key(i): i for i in snap.items
            if not (i.kind == INDEX and i.is_default_index and _on_mv(snap, i))
            and not i.is_source and snap.source_of(i) is None}


def _on_mv(snap: Snapshot, index: Item) -> bool:
    on = next((i for i in snap.items if i.id == index.on_id), None)
    return on is not None and on.kind == MATERIALIZED_VIEW


def readers(snap: Snapshot, items: list[Item]) -> list[Item]:
    """Every object that reads one of ``items``, directly or through others (indexes
    and sinks included), each once, in the order found."""
    seen: dict[str, Item] = {}
    todo = [i.id for i in items]
    while todo:
        for dep in snap.dependents(todo.pop()):
            if dep.id not in seen:
                seen[dep.id] = dep
                todo.append(dep.id)
    return list(seen.values())


def _touched(snap: Snapshot, item: Item) -> tuple[str, ...]:
    # A materialized view's own index comes and goes with it: not named apart.
    return tuple(d.qualified_name for d in readers(snap, [item])
                 if not (d.kind == INDEX and d.is_default_index))


def _cluster_sql(c: Cluster) -> str:
    return f"size={c.size} virtual={c.virtual} spark={c.spark}"


def diff(live: Snapshot, desired: Snapshot) -> Diff:
    out = Diff()
    _clusters(live, desired, out)
    have = {s.name for s in live.schemas}
    want = {s.name for s in desired.schemas}
    out.changes += [Change("create", "schema", s, statement=f'CREATE SCHEMA "{s}"')
                    for s in sorted(want - have)]
    now, then = _planned(live), _planned(desired)
    for key, item in then.items():
        old = now.get(key)
        if old is None:
            out.changes.append(Change("create", item.kind_word, item.qualified_name,
                                      statement=canonical(item)))
        elif _differs(old, item):
            _changed(live, old, item, out)
    for key, item in now.items():
        if key not in then:
            out.changes.append(Change("drop", item.kind_word, item.qualified_name,
                                      touches=_touched(live, item)))
    out.changes += [Change("drop", "schema", s) for s in sorted(have - want)]
    out.changes.sort(key=lambda c: ACTIONS.index(c.action))
    return out


def _clusters(live: Snapshot, desired: Snapshot, out: Diff) -> None:
    have = {c.name: c for c in live.clusters}
    want = {c.name: c for c in desired.clusters}
    for name, c in want.items():
        if name not in have:
            out.changes.append(Change("create", "cluster", name, detail=_cluster_sql(c)))
        elif _cluster_sql(have[name]) != _cluster_sql(c):
            out.changes.append(Change("alter", "cluster", name,
                                      detail=f"{_cluster_sql(have[name])} → {_cluster_sql(c)}"))
    for name in have:
        if name not in want:
            out.changes.append(Change("drop", "cluster", name))


def _changed(live: Snapshot, old: Item, new: Item, out: Diff) -> None:
    if old.kind == TABLE:
        kept = [(c.name, c.type) for c in old.columns]
        wanted = [(c.name, c.type) for c in new.columns]
        if wanted[:len(kept)] != kept:
            gone = [n for n, t in kept if (n, t) not in wanted]
            out.refusals.append(Refusal(old.qualified_name, (
                f"table {old.qualified_name} would lose or retype column "
                f"{', '.join(gone) or '(order)'}: a table keeps its columns; create a new "
                "table and move the data")))
            return
        added = wanted[len(kept):]
        # Readers stay pinned to the version they were created against: none is touched.
        out.changes.append(Change(
            "alter", "table", old.qualified_name,
            detail="adds column " + ", ".join(f"{n} {t}" for n, t in added),
            statement="; ".join(
                f'ALTER TABLE {old.qualified_name} ADD COLUMN "{n}" {t}' for n, t in added)))
        return
    breaking = False
    detail = "statement changed"
    if old.kind in (VIEW, MATERIALIZED_VIEW):
        before = {c.name: c.type for c in old.columns}
        after = {c.name: c.type for c in new.columns}
        lost = [n for n, t in before.items() if after.get(n) != t]
        breaking = bool(lost)
        detail = ("breaking: " + ", ".join(
            f"{n} {'removed' if n not in after else f'retyped {before[n]} → {after[n]}'}"
            for n in lost)) if lost else "definition changed, columns kept"
    out.changes.append(Change("replace", old.kind_word, old.qualified_name, detail=detail,
                              breaking=breaking, touches=_touched(live, old),
                              statement=canonical(new)))
