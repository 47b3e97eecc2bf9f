"""Reading through a projection: a single-table SELECT that a table's projection can
answer reads the projection's stored rows of the parts at the read's time, and projects
the parts without them on the fly (compute.py), in place of the table. The projections
wing's read source (read/sources.py): session/wiring.py registers ``ROUTER``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog.bind import pinned
from mzflow.catalog.model import Item, Snapshot
from mzflow.plan.query import plan
from mzflow.projections import shape as shapes
from mzflow.projections.compute import compute, in_arrow, plain
from mzflow.projections.shape import AGGREGATE, Routed, Shape, shape_of
from mzflow.projections.store import part_name, read_files, read_keys, shard_of
from mzflow.read.sources import Refusal
from mzflow.storage import paths
from mzflow.storage.delta import Shard

log = logging.getLogger("mzflow.projections")

# Rows this process read to answer routed queries (tests count them): stored projection
# rows, and base-table rows of the parts projected on the fly.
ROWS_READ = {"projection": 0, "base": 0}
ROUTED = [0]  # reads answered from a projection
# How routed reads ran: in process over the projection's Arrow rows, or declined: left to
# the read's own path (in process from the tables when small, else Spark over the
# projection's rows: read/local_reads.py's ENGINE counts which).
ENGINE = {"arrow": 0, "declined": 0}


@dataclass(frozen=True)
class Choice:
    routed: Routed
    stored: int  # parts whose rows were stored
    projected: int  # parts projected on the fly
    rejected: tuple[tuple[str, str], ...]  # (projection, why) of the others


def candidates(snap: Snapshot, query: exp.Query, tables: Iterable[tuple[str, Item, int]]
               ) -> tuple[list[Routed], list[tuple[str, str]]]:
    routed: list[Routed] = []
    rejected: list[tuple[str, str]] = []
    tables = list(tables)
    if len(tables) != 1:
        return routed, rejected
    _, table, _ = tables[0]
    for projection in snap.projections_on(table.id):
        s = shape_of(snap, table, projection)
        found = shapes.route(query, s)
        if isinstance(found, str):
            rejected.append((projection.name, found))
        else:
            routed.append(found)
    return routed, rejected


def choose(snap: Snapshot, warehouse: Path, query: exp.Query,
           tables: Iterable[tuple[str, Item, int]], at: int) -> Choice | None:
    """The feasible projection with the least to read at ``at``, or None."""
    routed, rejected = candidates(snap, query, tables)
    if not routed:
        return None
    table = routed[0].shape.table
    shard = Shard.shared(paths.table(warehouse, table.id))
    version = shard.version_at(at)
    if version is None:
        return None
    parts = {part_name(f) for f in shard.files(version)}
    best: tuple[int, Routed, int, int] | None = None
    for r in routed:
        kept = shard_of(warehouse, r.shape.projection).parts()
        stored = sum(1 for p in parts if p in kept)
        # A part projected on the fly costs a read of its file; an aggregate
        # projection's stored rows are fewer than a sorted one's at equal parts.
        cost = ((len(parts) - stored) * 1000 + stored) * 2 + (r.shape.kind != AGGREGATE)
        if best is None or cost < best[0]:
            best = (cost, r, stored, len(parts) - stored)
    assert best is not None
    others = [(r.shape.projection.name, "another projection reads less")
              for r in routed if r is not best[1]]
    return Choice(best[1], best[2], best[3], tuple(rejected + others))


def rows(snap: Snapshot, warehouse: Path, choice: Choice, at: int) -> pa.Table:
    """The routed query's relation: stored rows of the parts at ``at`` ∪ the rest
    projected on the fly."""
    s = choice.routed.shape
    table = s.table
    ROUTED[0] += 1
    shard = Shard.shared(paths.table(warehouse, table.id))
    version = shard.version_at(at)
    assert version is not None
    files = shard.files(version)
    pshard = shard_of(warehouse, s.projection)
    kept = pshard.parts()
    stored_files = [f for file in files for f in kept.get(part_name(file), [])]
    missing = [f for f in files if part_name(f) not in kept]
    columns = list(s.stored_columns())
    if s.kind != AGGREGATE:
        return _sorted_lookup(choice, stored_files, missing)
    parts = []
    if stored_files:
        stored = read_files(stored_files, pshard.schema())
        ROWS_READ["projection"] += stored.num_rows
        parts.append(stored.select(columns))
    if missing:
        actions = shard.add_actions(version)
        names = set(part_name(f) for f in missing)
        ROWS_READ["base"] += sum(n for p, n in zip(
            actions.column("path").to_pylist(), actions.column("num_records").to_pylist(),
            strict=True) if part_name(p) in names)
        parts.append(compute(table, s, missing).select(columns))
    if not parts and pshard.exists():  # an empty table version: no rows, the kept types
        parts.append(read_files([], pshard.schema()).select(columns))
    if not parts:  # nothing kept either: Spark types the projection of no rows
        parts.append(compute(table, s, []).select(columns))
    if len(parts) == 2:
        parts[1] = parts[1].cast(parts[0].schema)
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def _sorted_lookup(choice: Choice, stored_files: list[str], missing: list[str]
                   ) -> pa.Table:
    """A sorted projection's rows with the routed sort key values: the row groups of the
    stored parts that may hold them, and the matching rows of the parts without."""
    s = choice.routed.shape
    values = list(choice.routed.key_values or ())
    columns = list(s.columns)
    lead = s.order[0]
    stored, n = read_keys(stored_files, lead, values, columns)
    ROWS_READ["projection"] += n
    pieces = [stored]
    if missing:
        found, n = read_keys(missing, lead, values, columns, base=True)
        ROWS_READ["base"] += n
        pieces.append(found)
    pieces = [p for p in pieces if p.num_rows] or [pieces[0]]
    rows = pa.concat_tables(pieces, promote_options="permissive")
    try:  # the table's types (a column no file holds yet reads as Arrow's null type)
        return plain(rows.cast(_sorted_schema(s)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return plain(rows)


def _sorted_schema(s: Shape) -> pa.Schema:
    from mzflow.storage.types import arrow_schema

    types = {c.name: c for c in s.table.columns}
    return arrow_schema([(c, types[c].type, True) for c in s.columns])


@dataclass
class Routing:
    """A query with every single-table SELECT in it that a projection can answer (the
    query itself, an inlined view's, a subquery's) read from that projection."""

    query: exp.Query
    tables: dict[str, pa.Table]  # relation name → its rows (when built)
    choices: list[Choice]
    rejected: list[tuple[str, str]]
    names: list[str] = field(default_factory=list)  # each choice's relation name

    def single(self) -> str | None:
        """The relation's name when the whole query is one SELECT reading it alone: the
        shape an in-process answer may take."""
        tables = list(self.query.find_all(exp.Table))
        if (isinstance(self.query, exp.Select) and len(self.choices) == 1
                and len(tables) == 1 and tables[0].name == self.names[0]):
            return self.names[0]
        return None

    @property
    def relations(self) -> dict[str, Any]:
        """The rows as Spark relations (this starts Spark; each use builds them anew)."""
        from mzflow.engine.spark import Relation, from_arrow

        return {name: Relation(files=(), schema_ddl="", columns=tuple(rows.column_names),
                               frame=from_arrow(rows)) for name, rows in self.tables.items()}


def enabled(snap: Snapshot) -> bool:
    """Routing by default (``ALTER SYSTEM SET optimize_use_projections``): what ticks use;
    a session's SET overrides it for its reads."""
    return snap.settings.get("optimize_use_projections", "true").lower() in (
        "true", "on", "1", "yes")


def route_query(snap: Snapshot, warehouse: Path, query: exp.Query, at: int, *,
                build: bool = True) -> Routing | None:
    """``query`` with its answerable SELECTs routed (None: none is). ``build`` False
    chooses without reading anything (EXPLAIN)."""
    out = query.copy()
    routing = Routing(out, {}, [], [])
    for select in list(out.find_all(exp.Select)):
        if any(inner is not select for inner in select.find_all(exp.Select)):
            continue  # only innermost SELECTs read a table directly
        tables = list(select.find_all(exp.Table))
        pin = pinned(tables[0].name) if len(tables) == 1 else None
        if pin is None:
            continue
        table = snap.item(pin[0])
        if not snap.projections_on(table.id):
            continue
        if _no_parts(warehouse, table, at):
            # Nothing to read: the read's own path answers it (in process), where a
            # projection of no parts would need Spark to type its empty relation.
            routing.rejected += [(pr.name, "the table has no data files at the read's time")
                                 for pr in snap.projections_on(table.id)]
            continue
        choice = choose(snap, warehouse, select, [(tables[0].name, table, pin[1])], at)
        if choice is None:
            routing.rejected += candidates(snap, select,
                                           [(tables[0].name, table, pin[1])])[1]
            continue
        name = f"{choice.routed.relation}_{len(routing.choices)}"
        routed = choice.routed.query.copy()
        for t in routed.find_all(exp.Table):
            t.set("this", exp.to_identifier(name))
        routing.choices.append(choice)
        routing.names.append(name)
        if build:
            routing.tables[name] = rows(snap, warehouse, choice, at)
        if select is routing.query:
            routing.query = routed
        else:
            select.replace(routed)
    return routing if routing.choices else None


def _no_parts(warehouse: Path, table: Item, at: int) -> bool:
    shard = Shard.shared(paths.table(warehouse, table.id))
    version = shard.version_at(at)
    return version is not None and not shard.files(version)


def answer(routing: Routing, types: list[str]) -> list[tuple[Any, ...]] | None:
    """The routed query's rows computed in process (``engine/arrow_query.py``), or None:
    the query's shape or types are beyond it, or a row failed to evaluate; the caller
    answers it from the tables in process when they are small, else on Spark, which
    answers or reports the error."""
    from mzflow.engine import arrow_query
    from mzflow.errors import Error

    name = routing.single()
    if name is None:
        ENGINE["declined"] += 1
        return None
    try:
        out = arrow_query.run(routing.query, routing.tables[name], types)
    except Error as e:
        log.debug("routed read declined: %s", e)
        ENGINE["declined"] += 1
        return None
    except Exception as e:  # a defect of the evaluator must not cost an answer
        log.warning("routed read declined after an in-process failure: %r", e)
        ENGINE["declined"] += 1
        return None
    ENGINE["arrow"] += 1
    return out


def _engine_line(snap: Snapshot, warehouse: Path, routing: Routing, types: list[str],
                 table_refusal: Refusal | None) -> str:
    """How a routed read will run (EXPLAIN): decided from the relation's types, as the
    read decides it again from its rows; what the projection's rows cannot answer in
    process goes to the tables' own in-process path (read/local_reads.py), then Spark."""
    line = _where_it_runs(warehouse, routing, types, table_refusal)
    on_the_fly = sorted({c.routed.shape.projection.name for c in routing.choices
                         if c.projected and not in_arrow(c.routed.shape.table, c.routed.shape)})
    if on_the_fly:  # a Spark job before the read itself
        line += f" (parts projected on the fly on Spark: {', '.join(on_the_fly)})"
    return line


def _where_it_runs(warehouse: Path, routing: Routing, types: list[str],
                   table_refusal: Refusal | None) -> str:
    from mzflow.engine import arrow_query

    def refused() -> str | None:
        return table_refusal() if table_refusal is not None else "not known here"

    name = routing.single()
    why: str | None = "the query is more than one SELECT over a projection's rows"
    if name is not None:
        schema = _relation_schema(warehouse, routing.choices[0].routed.shape)
        if schema is None:  # no part stored yet: the rows' types decide
            later = ("from the tables' rows, in process if the evaluator can express it, "
                     "else on Spark" if refused() is None else "on Spark")
            return f"Read: in process (Arrow) if its types allow, else {later}"
        why = arrow_query.check(routing.query, schema, types)
        if why is None:
            return "Read: in process (Arrow), no Spark job"
    refusal = refused()
    if refusal is None:
        return (f"Read: not from the projection's rows ({why}): from the tables' rows, "
                "in process if the evaluator can express it, else on Spark")
    return f"Read: on Spark ({why}; not in process from the tables: {refusal})"


def _relation_schema(warehouse: Path, s: Shape) -> pa.Schema | None:
    if s.kind != AGGREGATE:
        return _sorted_schema(s)
    pshard = shard_of(warehouse, s.projection)
    if not pshard.exists():
        return None
    schema = pshard.schema()
    return pa.schema([schema.field(c) for c in s.stored_columns()])


def explain(choice: Choice | None, rejected: list[tuple[str, str]]) -> list[str]:
    lines = []
    if choice is not None:
        s = choice.routed.shape
        lines.append(f"Projection: {s.projection.name} ({s.kind}) on "
                     f"{s.table.qualified_name}: {choice.stored} parts stored, "
                     f"{choice.projected} projected on the fly")
        rejected = list(choice.rejected)
    for name, why in rejected:
        lines.append(f"Projection {name} not used: {why}")
    return lines


def explain_read(snap: Snapshot, warehouse: Path, query: exp.Query, enabled: bool,
                 table_refusal: Refusal | None = None) -> list[str]:
    """EXPLAIN's projection lines for a read of ``query`` now."""
    p = plan(snap, query)
    if not any(snap.projections_on(item.id) for _, item, _ in p.tables):
        return []
    if not enabled:
        return ["Projections: not used (optimize_use_projections is off)"]
    routing = route_query(snap, warehouse, p.query, snap.read_ts, build=False)
    if routing is None:
        if len(p.tables) == 1:
            _, item, _ = p.tables[0]
            if _no_parts(warehouse, item, snap.read_ts):
                return explain(None, [(pr.name, "the table has no data files now")
                                      for pr in snap.projections_on(item.id)])
            return explain(None, candidates(snap, p.query, p.tables)[1])
        return explain(None, [(pr.name, "no SELECT in the query reads its table alone")
                              for _, item, _ in p.tables
                              for pr in snap.projections_on(item.id)])
    lines: list[str] = []
    for choice in routing.choices:
        lines += explain(choice, [])
    lines.append(_engine_line(snap, warehouse, routing, [c.type for c in p.bound.columns],
                              table_refusal))
    return lines + explain(None, routing.rejected)


class _Router:
    """Projection routing as a read's router (read/sources.py)."""

    def route(self, snap: Snapshot, warehouse: Path, query: exp.Query, at: int
              ) -> Routing | None:
        return route_query(snap, warehouse, query, at)

    def answer(self, routed: Routing, types: list[str]) -> list[tuple[Any, ...]] | None:
        return answer(routed, types)

    def explain(self, snap: Snapshot, warehouse: Path, query: exp.Query, enabled: bool,
                table_refusal: Refusal | None = None) -> list[str]:
        return explain_read(snap, warehouse, query, enabled, table_refusal)


ROUTER = _Router()
