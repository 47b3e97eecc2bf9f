"""A SELECT of one small user table answered in process, without Spark.

Spark's fixed price per query (planning over py4j, scheduling a job: ~0.3 s on two
cores) is most of the time of a read of a few thousand rows. When a plan reads one
table whose Delta log counts at most ``local_read_max_rows`` rows at the pinned
version, and the query has the shape ``engine/arrow_query.py`` evaluates exactly
(one relation; WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, OFFSET; PostgreSQL's
semantics, NULLs last ascending, NaN keys refused), the rows are read with delta-rs
and the query runs over Arrow. Anything it refuses raises ``Unsupported`` and the
caller runs the query on Spark, which answers or reports the error.

Other shapes over small tables (joins, decorrelated subqueries, UNION, DISTINCT,
GROUP BY) are lowered to the change planner's IR (``plan/lower.py``) and hydrated by
the tick path's in-process executor (``incremental/local``: Get, Filter, Map, inner
Join, Reduce, Union); the query's final ORDER BY / LIMIT / OFFSET is applied after,
with the Spark path's ordering (``arrow_query``'s). What it has no path for (outer
joins, set operations, windows, top-k inside the query) raises NotLocal: Spark.
A read routed to a projection whose rows the evaluator cannot answer comes here too,
before Spark (read/reads.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog.model import Item, Snapshot
from mzflow.errors import Error, Unsupported
from mzflow.plan.query import Plan
from mzflow.storage import paths
from mzflow.storage.rows import plain_strings
from mzflow.storage.shard import Shard
from mzflow.storage.types import arrow_schema

log = logging.getLogger(__name__)

# Which executor answered reads of user tables (tests count them; no timing).
ENGINE = {"arrow": 0, "spark": 0}


def max_rows(snap: Snapshot) -> int:
    from mzflow.config import tuning

    return int(tuning(snap.settings).local_read_max_rows)


def refusal(snap: Snapshot, p: Plan, warehouse: Path, at: int) -> str | None:
    """Why ``p`` at ``at`` is not answered in process, from its shape and the table's
    size in the Delta log (no data read). None: it may be (the evaluator decides)."""
    limit = max_rows(snap)
    if limit <= 0:
        return "local_read_max_rows = 0"
    if p.indexes:
        return "it reads an index"
    if not p.tables or p.bound.system_tables:
        return "it reads no user table, or system tables too"
    total = 0
    for _, item, _ in p.tables:
        shard = Shard.shared(paths.table(warehouse, item.id))
        version = shard.version_at(at)
        if version is None:
            return "the table did not exist then"
        counts = shard.add_actions(version).column("num_records").to_pylist()
        if any(n is None for n in counts):
            return "a data file without a row count"
        total += sum(counts)
        if total > limit:
            return f"its tables have over {limit} rows (local_read_max_rows)"
    return None


def _single(p: Plan) -> bool:
    return isinstance(p.query, exp.Select) and len(p.tables) == 1 and len(
        list(p.query.find_all(exp.Table))) == 1


def _rows(warehouse: Path, item: Item, version: int, at: int) -> pa.Table:
    from mzflow.catalog.model import ROWID

    shard = Shard.shared(paths.table(warehouse, item.id))
    delta_version = shard.version_at(at)
    assert delta_version is not None
    visible = item.columns_at(version)
    schema = arrow_schema([(c.name, c.type, True) for c in visible])
    data = plain_strings(shard.read(delta_version))
    cols = [data.column(c.name) if c.name in data.column_names
            else pa.nulls(data.num_rows, schema.field(c.name).type) for c in visible]
    out = pa.table(cols, schema=schema) if cols else pa.table({})
    if ROWID in data.column_names:
        out = out.append_column(ROWID, data.column(ROWID))
    return out


def answer(snap: Snapshot, p: Plan, warehouse: Path, at: int
           ) -> list[tuple[Any, ...]] | None:
    """``p``'s rows at ``at`` computed in process, or None: Spark computes them."""
    from mzflow.engine import arrow_query

    why = refusal(snap, p, warehouse, at)
    types = [c.type for c in p.bound.columns]
    if why is None:
        try:
            if _single(p):
                _, item, version = p.tables[0]
                try:
                    table = _rows(warehouse, item, version, at)
                    return _counted(arrow_query.run(p.query, table, types))
                except Unsupported:
                    pass  # the IR may express it (DISTINCT, count(DISTINCT) …)
            return _counted(_hydrated(snap, p, warehouse, at, types))
        except Unsupported as e:
            why = str(e)
        except Error as e:
            # An evaluation error: Spark reports it in its own words (as a routed read).
            why = f"an evaluation error ({e})"
        except (pa.ArrowException, ValueError, TypeError) as e:
            # A defect of the in-process path must not cost an answer.
            log.warning("read on Spark after an in-process failure: %r", e)
            why = repr(e)
    log.debug("read on Spark: %s", why)
    ENGINE["spark"] += 1
    return None


def _hydrated(snap: Snapshot, p: Plan, warehouse: Path, at: int, types: list[str]
              ) -> list[tuple[Any, ...]]:
    """``p`` lowered to the IR and computed whole by the in-process tick executor, then
    ordered and cut as the query's last ORDER BY / LIMIT / OFFSET say."""
    from mzflow.engine.arrow_query import _count, _sort_indices, _typed
    from mzflow.incremental.local.flow import LocalFlow
    from mzflow.incremental.modes import Side
    from mzflow.plan.lower import lower

    query = p.query.copy()
    if isinstance(query, exp.Select) and isinstance(query.args.get("distinct"), exp.Distinct
                                                    ) and query.args["distinct"].args.get("on"):
        raise Unsupported("DISTINCT ON")  # its ORDER BY decides which rows are kept
    order, limit, offset = (query.args.get(k) for k in ("order", "limit", "offset"))
    for k in ("order", "limit", "offset"):
        query.set(k, None)
    names = [c.name for c in p.bound.columns]
    positions = []
    for o in (order.expressions if order is not None else []):
        key = o.this
        if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit() and (
                1 <= int(key.this) <= len(names)):
            positions.append((int(key.this) - 1, o))
        elif isinstance(key, exp.Column) and not key.table and names.count(key.name) == 1:
            positions.append((names.index(key.name), o))
        else:
            raise Unsupported(f"ORDER BY {key.sql()}: not an output column")
    root = lower(snap, query)
    if len(root.columns) != len(types):
        raise Unsupported("the lowered query's columns are not the bound ones")
    inputs = {get.ref: _input(warehouse, snap.item(get.item_id), at) for get in root.gets()}
    flow = LocalFlow(root, inputs, read_limit=max_rows(snap))
    table = flow.full(root, Side.NEW)
    if table.num_columns != len(types):
        raise Unsupported("the executor's columns are not the bound ones")
    values = [c.combine_chunks() for c in table.columns]
    if positions:
        indices = _sort_indices([(values[i], o) for i, o in positions], table.num_rows)
        values = [v.take(indices) for v in values]
    n = table.num_rows
    start = _count(offset, "OFFSET")
    stop = n if limit is None else start + _count(limit, "LIMIT")
    values = [v.slice(start, max(0, min(stop, n) - start)) if start < n else v.slice(0, 0)
              for v in values]
    columns = [_typed(v, t) for v, t in zip(values, types, strict=True)]
    return list(zip(*columns, strict=True)) if columns and columns[0] else []


def _input(warehouse: Path, item: Item, at: int) -> Any:
    """One table at ``at`` as the tick path's Input with nothing changed: both sides are
    the same version, so only full reads happen."""
    from mzflow.catalog.model import ROWID
    from mzflow.incremental.dataflow import Input
    from mzflow.incremental.modes import Side
    from mzflow.storage.types import spark_ddl

    shard = Shard.shared(paths.table(warehouse, item.id))
    version = shard.version_at(at)
    assert version is not None
    files = tuple(shard.files(version))
    actions = shard.add_actions(version)

    def rows(uris: Any) -> int:
        by_name = dict(zip([x.rsplit("/", 1)[-1] for x in actions.column("path").to_pylist()],
                           actions.column("num_records").to_pylist(), strict=True))
        return sum(int(by_name.get(u.rsplit("/", 1)[-1]) or 0) for u in uris)

    return Input(files={Side.NEW: files, Side.OLD: files},
                 stats={Side.NEW: lambda: actions, Side.OLD: lambda: actions},
                 schema_ddl=spark_ddl([(c.name, c.type) for c in item.columns]
                                      + [(ROWID, "bigint")]),
                 changes=None, num_rows={Side.NEW: rows, Side.OLD: rows},
                 versions={Side.NEW: version, Side.OLD: version},
                 arrow_schema=lambda: shard.arrow_schema(version))


def _counted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    ENGINE["arrow"] += 1
    return rows
