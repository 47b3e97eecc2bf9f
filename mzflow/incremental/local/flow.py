"""One tick's dataflow in Arrow: Get, Filter, Map and Join, as their rules run them
in Spark (``rules/get.py``, ``filter_map.py``, ``join.py``), over local tables.

Each node's table holds only the columns the plan reads of it (``columns.py``).
``full(node, side, keys)`` is its contents at the tick's old or new time, only the
rows whose ``keys.exprs`` take one of ``keys.values``; ``delta(node)`` its changes,
with DIFF. A read that would bring more than ``read_limit`` rows into the process
raises NotLocal: Spark does large reads better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.engine import arrow_expr
from mzflow.engine.frames import DIFF, columns_of, plain
from mzflow.errors import Unsupported
from mzflow.incremental import columns
from mzflow.incremental.dataflow import Input
from mzflow.incremental.local import NotLocal
from mzflow.incremental.modes import Side
from mzflow.incremental.rules.filter_map import through
from mzflow.incremental.rules.get import prune
from mzflow.incremental.rules.join import equivalent, pushed
from mzflow.plan import ir
from mzflow.plan.ir import Node
from mzflow.storage.rows import plain_strings


class KeyColumn(Sequence[tuple[Any, ...]]):
    """One key column's values as Arrow (a join's keys, from a table in hand), made
    Python tuples only where a path needs them: an arrangement's lookup takes the
    array (a 10 % batch's 300 k order keys cost 0.15 s as tuples and back)."""

    def __init__(self, array: pa.Array):
        self.array = array
        self._tuples: list[tuple[Any, ...]] | None = None

    def _py(self) -> list[tuple[Any, ...]]:
        if self._tuples is None:
            self._tuples = [(v,) for v in self.array.to_pylist()]
        return self._tuples

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i: Any) -> Any:
        return self._py()[i]

    def __iter__(self) -> Any:
        return iter(self._py())


@dataclass(frozen=True)
class Keys:
    """Rows whose ``exprs`` (over the node's columns) equal one of ``values``."""

    exprs: tuple[exp.Expr, ...]
    values: Sequence[tuple[Any, ...]]

    def over(self, exprs: tuple[exp.Expr, ...]) -> Keys:
        return Keys(exprs, self.values)


class LocalFlow:
    def __init__(self, root: Node, inputs: dict[str, Input], read_limit: int):
        self.inputs = inputs
        self.needed = columns.needed(root)
        self.read_limit = read_limit
        self.rows_read = 0
        self.files_read = 0
        self.lookups: list[tuple[str, Side, int, int]] = []
        self._deltas: dict[int, pa.Table | None] = {}

    def cols(self, node: Node) -> list[str]:
        wanted = self.needed.get(id(node), frozenset(node.columns))
        return [c for c in node.columns if c in wanted]

    def changed(self, node: Node) -> bool:
        return any(self.inputs[g.ref].changes is not None for g in node.gets())

    def delta(self, node: Node) -> pa.Table | None:
        if not self.changed(node):
            return None
        if id(node) not in self._deltas:
            self._deltas[id(node)] = _delta(self, node)
        return self._deltas[id(node)]

    def changes(self, node: Node) -> pa.Table:
        d = self.delta(node)
        assert d is not None
        return d

    def full(self, node: Node, side: Side, r: Keys | None = None) -> pa.Table:
        return _full(self, node, side, r)


# -- dispatch --------------------------------------------------------------------------------


def _delta(flow: LocalFlow, node: Node) -> pa.Table:
    from mzflow.incremental.local import reduce as local_reduce

    if isinstance(node, ir.Get):
        return _get_delta(flow, node)
    if isinstance(node, ir.Filter):
        return filtered(node, flow.changes(node.input))
    if isinstance(node, ir.Map):
        return mapped(node, flow.changes(node.input), flow.cols(node), carry=(DIFF,))
    if isinstance(node, ir.Join):
        return _join_delta(flow, node)
    if isinstance(node, ir.Reduce):
        return local_reduce.delta(flow, node)
    if isinstance(node, ir.Union):
        return local_reduce.union_delta(flow, node)
    raise NotLocal(f"{type(node).__name__} has no in-process path yet", lasting=True)


def _full(flow: LocalFlow, node: Node, side: Side, r: Keys | None) -> pa.Table:
    from mzflow.incremental.local import reduce as local_reduce

    if isinstance(node, ir.Get):
        return _get_full(flow, node, side, r)
    if isinstance(node, ir.Filter):
        return filtered(node, flow.full(node.input, side, r))
    if isinstance(node, ir.Map):
        below = through(node, r)
        out = mapped(node, flow.full(node.input, side, below), flow.cols(node))
        return out if below is not None or r is None else restrict(out, r)
    if isinstance(node, ir.Join):
        return _join_full(flow, node, side, r)
    if isinstance(node, ir.Reduce):
        return local_reduce.full(flow, node, side, r)
    if isinstance(node, ir.Union):
        return local_reduce.union_full(flow, node, side, r)
    raise NotLocal(f"{type(node).__name__} has no in-process path yet", lasting=True)


# -- Filter and Map ----------------------------------------------------------------------------


def filtered(node: ir.Filter, table: pa.Table) -> pa.Table:
    for p in node.predicates:
        if table.num_rows == 0:
            break
        mask = _evaluate(p, table, boolean=True)
        table = table.filter(pc.fill_null(mask, False))
    return table


def mapped(node: ir.Map, table: pa.Table, wanted: Sequence[str], carry: Sequence[str] = ()
           ) -> pa.Table:
    by_name = dict(zip(node.columns, node.exprs, strict=True))
    out = [_as_array(_evaluate(by_name[c], table, boolean=False), table.num_rows)
           for c in wanted]
    out += [table.column(c) for c in carry]
    return pa.table(out, names=[*wanted, *carry])


def _evaluate(e: exp.Expr, table: pa.Table, *, boolean: bool) -> Any:
    try:
        return arrow_expr.evaluate(e, table, boolean=boolean, clause="WHERE")
    except Unsupported as u:  # refused by the in-process evaluator: Spark evaluates it
        raise NotLocal(str(u).replace("EXPECT cannot", "cannot", 1), lasting=True) from None


def _as_array(v: Any, n: int) -> pa.Array | pa.ChunkedArray:
    if isinstance(v, pa.ChunkedArray | pa.Array):
        return v.cast(pa.string()) if v.type == pa.large_string() else v
    raise NotLocal(f"cannot evaluate a value of type {type(v).__name__} in process")


def restrict(table: pa.Table, r: Keys) -> pa.Table:
    """The rows whose ``r.exprs`` equal one of ``r.values`` (NULL matches NULL, as the
    restriction's IS NOT DISTINCT FROM does in Spark)."""
    if table.num_rows == 0:
        return table
    got = [_as_array(_evaluate(e, table, boolean=False), table.num_rows).to_pylist()
           for e in r.exprs]
    wanted = set(r.values)
    mask = np.fromiter((t in wanted for t in zip(*got, strict=True)), bool, table.num_rows)
    return table.filter(pa.array(mask))


# -- Get ---------------------------------------------------------------------------------------


def _stored(node: ir.Get, names: Sequence[str]) -> list[str]:
    return [node.stored[node.columns.index(c)] for c in names]


def _named(table: pa.Table, node: ir.Get, names: Sequence[str], extra: Sequence[str] = ()
           ) -> pa.Table:
    """A table of stored columns → the node's ``names`` (missing ones: NULL)."""
    table = plain_strings(table)
    out = []
    for stored in _stored(node, names):
        out.append(table.column(stored) if stored in table.column_names
                   else pa.nulls(table.num_rows))
    out += [table.column(c) for c in extra]
    return pa.table(out, names=[*names, *extra])


def _get_delta(flow: LocalFlow, node: ir.Get) -> pa.Table:
    inp = flow.inputs[node.ref]
    assert inp.changes is not None
    changes, rows = inp.changes()
    if not isinstance(changes, pa.Table):
        raise NotLocal("a first tick reads whole tables")
    flow.rows_read += rows
    out = _named(changes, node, flow.cols(node), (DIFF,))
    return out.set_column(out.num_columns - 1, DIFF, out.column(DIFF).cast(pa.int64()))


def _get_full(flow: LocalFlow, node: ir.Get, side: Side, r: Keys | None) -> pa.Table:
    inp = flow.inputs[node.ref]
    names = flow.cols(node)
    if r is not None:  # the restriction's columns, even if only it reads them
        names = [c for c in node.columns if c in set(names) | columns_of(r.exprs)]
    on = plain(r.exprs[0]) if r is not None and len(r.exprs) == 1 else None
    if r is not None and on is not None:
        arranged = inp.arranged.get(node.stored[node.columns.index(on)])
        wanted = (r.values.array if isinstance(r.values, KeyColumn)
                  else [v[0] for v in r.values])
        found = arranged.lookup(side, wanted, _stored(node, names)) if arranged else None
        if found is not None and arranged is not None:
            flow.rows_read += found.read
            flow.lookups.append((arranged.need.id, side, len(wanted), found.read))
            return _named(found.rows, node, names)
    files = list(inp.files[side] or ())
    if r is not None and on is not None:
        files = prune(files, inp.stats[side](), node.stored[node.columns.index(on)],
                      [v[0] for v in r.values])
    rows = inp.num_rows[side](files) if files else 0
    if rows > flow.read_limit:
        raise NotLocal(f"{node.name} would be read whole ({rows} rows) in process")
    flow.rows_read += rows
    flow.files_read += len(files)
    table = _read(files, _stored(node, names), inp)
    out = _named(table, node, names)
    return restrict(out, r) if r is not None else out


def _read(files: Sequence[str], stored: Sequence[str], inp: Input) -> pa.Table:
    import pyarrow.parquet as pq

    pieces = []
    for f in files:
        path = f.removeprefix("file://")
        present = [c for c in dict.fromkeys(stored) if c in pq.read_schema(path).names]
        pieces.append(plain_strings(pq.read_table(path, columns=present)))
    if not pieces:
        if inp.arrow_schema is None:  # (a table with no files)
            raise NotLocal("an empty table's columns are not known in process")
        schema = inp.arrow_schema()
        pieces.append(plain_strings(schema.empty_table().select(
            [c for c in dict.fromkeys(stored) if c in schema.names])))
    return pa.concat_tables(pieces, promote_options="permissive")


# -- Join --------------------------------------------------------------------------------------


def _join_full(flow: LocalFlow, node: ir.Join, side: Side, r: Keys | None) -> pa.Table:
    per_part, top = pushed(node, r)
    tables = [flow.full(p, side, per_part.get(i)) for i, p in enumerate(node.parts)]
    out = join(tables, node, flow.cols(node))
    return restrict(out, top) if top is not None else out


def _join_delta(flow: LocalFlow, node: ir.Join) -> pa.Table:
    terms = []
    for i, part in enumerate(node.parts):
        d = flow.delta(part)
        if d is None:
            continue
        tables = {i: d}
        sources, pending = [i], [j for j in range(len(node.parts)) if j != i]
        while pending:
            j, r = _next(node, tables, sources, pending)
            tables[j] = flow.full(node.parts[j], Side.NEW if j < i else Side.OLD, r)
            sources.append(j)
            pending.remove(j)
        terms.append(join([tables[k] for k in range(len(node.parts))], node,
                          flow.cols(node), carry=(DIFF,)))
    return pa.concat_tables(terms, promote_options="permissive")


def _next(node: ir.Join, tables: dict[int, pa.Table], sources: list[int], pending: list[int]
          ) -> tuple[int, Keys | None]:
    """As ``rules/join.py``: the next input, restricted to the keys of one read."""
    for y in sources:
        for cy in node.parts[y].columns:
            if cy not in tables[y].column_names:
                continue
            for j, cj in equivalent(node, (y, cy)):
                if j in pending:
                    keys = pc.unique(tables[y].column(cy))
                    return j, Keys((ir.col(cj),), KeyColumn(keys))
    return pending[0], None


def join(tables: list[pa.Table], node: ir.Join, wanted: Sequence[str],
         carry: Sequence[str] = ()) -> pa.Table:
    """The inner join of ``tables`` (one per part) on the node's predicates: hash joins
    on its equalities, then every predicate with PostgreSQL's semantics."""
    acc, done = tables[0], {0}
    rest = list(range(1, len(tables)))
    while rest:
        j = next((j for j in rest if _links(node, done, j)), rest[0])
        acc = _hash_join(acc, tables[j], _links(node, done, j))
        done.add(j)
        rest.remove(j)
    for p in node.predicates:
        if acc.num_rows == 0:
            break
        acc = acc.filter(pc.fill_null(_evaluate(p, acc, boolean=True), False))
    return acc.select([*wanted, *[c for c in carry if c in acc.column_names]])


def _links(node: ir.Join, done: set[int], j: int) -> list[tuple[str, str]]:
    out = []
    for a, b in node.equalities:
        for x, y in ((a, b), (b, a)):
            if x[0] in done and y[0] == j:
                out.append((x[1], y[1]))
    return out


_CROSS_LIMIT = 10_000_000


def _hash_join(left: pa.Table, right: pa.Table, on: list[tuple[str, str]]) -> pa.Table:
    if not on:
        if left.num_rows * right.num_rows > _CROSS_LIMIT:
            raise NotLocal("a cross join too large for the process")
        li = np.repeat(np.arange(left.num_rows), right.num_rows)
        ri = np.tile(np.arange(right.num_rows), left.num_rows)
        both = left.take(li)
        for name in right.column_names:
            both = both.append_column(name, right.column(name).take(ri))
        return both
    lk, rk = [], []
    for a, b in on:
        ta, tb = left.schema.field(a).type, right.schema.field(b).type
        if ta != tb:
            common = _common(ta, tb)
            left = left.set_column(left.schema.get_field_index(a), a,
                                   left.column(a).cast(common))
            right = right.set_column(right.schema.get_field_index(b), b,
                                     right.column(b).cast(common))
        lk.append(a)
        rk.append(b)
    return left.join(right, keys=lk, right_keys=rk, join_type="inner", coalesce_keys=False,
                     use_threads=False)


def _common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.int64()
    if pa.types.is_decimal(a) and pa.types.is_decimal(b):
        scale = max(a.scale, b.scale)
        return pa.decimal128(min(38, max(a.precision - a.scale, b.precision - b.scale)
                                 + scale), scale)
    if pa.types.is_string(a) or pa.types.is_large_string(a):
        if pa.types.is_string(b) or pa.types.is_large_string(b):
            return pa.large_string()
    raise NotLocal(f"a join of {a} with {b} in process")
