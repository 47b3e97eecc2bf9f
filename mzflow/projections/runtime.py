"""Projections at run time: kept by every table write, built by MATERIALIZE, dropped by
CLEAR, and read in place of their table when a query can be answered from them.

Every part (data file) of the table has its projection rows stored or not. A write
stores the rows of the parts it added, after its own commit; a part without them
(written before ADD PROJECTION, cleared, or a writer killed between the two commits)
is projected on the fly, from that file alone, by the read that needs it. So a read
never combines a projection with a table version it disagrees with.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog import frontiers
from mzflow.catalog.bind import pinned
from mzflow.catalog.model import ROWID, Item, Projection, Snapshot
from mzflow.projections import shape as shapes
from mzflow.projections.shape import AGGREGATE, Routed, Shape
from mzflow.projections.store import PART, ProjectionShard, Staged, part_name, read_files, read_keys
from mzflow.storage import paths
from mzflow.storage.delta import Shard
from mzflow.storage.rows import plain_strings
from mzflow.storage.types import spark_ddl

log = logging.getLogger("mzflow.projections")

# Rows this process read to answer routed queries (tests count them): stored projection
# rows, and base-table rows of the parts projected on the fly.
ROWS_READ = {"projection": 0, "base": 0}
ROUTED = [0]  # reads answered from a projection
# How routed reads ran: in process over the relation's Arrow rows, or on Spark.
ENGINE = {"arrow": 0, "spark": 0}
# Projections whose rows of a write were computed while the table's commit ran, and
# those of them stored from a file staged meanwhile (a commit of a log entry alone).
AHEAD = [0]
STAGED = [0]
_COUNTING = threading.Lock()  # projections are kept side by side, in threads


def _count(counter: list[int]) -> None:
    with _COUNTING:
        counter[0] += 1


_seq = itertools.count()
PartitionValue = tuple[str | None, ...]  # IN PARTITION's literal per PARTITION BY column
_SHAPES: dict[tuple[str, str, tuple[Any, ...]], Shape] = {}


def shape_of(snap: Snapshot, table: Item, projection: Projection) -> Shape:
    key = (projection.id, projection.query, table.columns)
    hit = _SHAPES.get(key)
    if hit is None:
        if len(_SHAPES) > 256:
            _SHAPES.clear()
        hit = _SHAPES[key] = shapes.shape(snap, table, projection)
    return hit


def shard_of(warehouse: Path, projection: Projection) -> ProjectionShard:
    return ProjectionShard(paths.projection(warehouse, projection.table_id, projection.id))


# -- computing a projection's rows -----------------------------------------------------


def _source(table: Item, s: Shape, files: list[str]) -> Any:
    """A DataFrame of ``files`` with the projection's table version's columns and each
    row's part."""
    from pyspark.sql import functions as F

    from mzflow.engine.spark import session

    all_cols = [(c.name, c.type) for c in table.columns] + [(ROWID, "bigint")]
    visible = [c.name for c in table.columns_at(s.version)]
    ddl = spark_ddl(all_cols)
    df = (session().read.schema(ddl).parquet(*files) if files
          else session().createDataFrame([], ddl))
    name = F.element_at(F.split(F.input_file_name(), "/"), -1)
    return df.select(*[F.col(f"`{c}`") for c in visible], name.alias(PART))


def compute(table: Item, s: Shape, files: list[str],
            in_memory: dict[str, pa.Table] | None = None) -> pa.Table:
    """The projection's rows of the parts ``files`` (one Spark job; none for a sorted
    projection without WHERE, whose rows are the files' columns, sorted, nor for an
    aggregate one the Arrow evaluator covers). ``in_memory``: files whose rows are at
    hand (just written)."""
    from mzflow.engine import spark

    if s.kind == shapes.SORTED and not s.where and files:
        return _sorted_rows(s, files, in_memory or {})
    if s.kind == AGGREGATE and files:
        rows = _aggregate_rows(table, s, files, in_memory or {})
        if rows is not None:
            return _plain(rows)

    view = f"mz_projsrc_{s.projection.id}_{next(_seq)}"
    _source(table, s, files).createOrReplaceTempView(view)
    try:
        sql = spark.to_spark_sql(shapes.partial_query(s, view), {})
        # A write's new parts are small: one job, not one per adaptive stage.
        with spark.few_jobs():
            out = spark.to_arrow(spark.session().sql(sql))
    finally:
        spark.session().catalog.dropTempView(view)
    if s.kind == shapes.SORTED:
        out = out.sort_by([(c, "ascending") for c in s.order])
    return _plain(out)


def _file_columns(f: str, in_memory: dict[str, pa.Table], columns: list[str]
                  ) -> pa.Table | None:
    """``columns`` of a file's rows at hand, those it has (None: read it)."""
    rows = in_memory.get(f)
    if rows is None:
        return None
    return plain_strings(rows.select([c for c in columns if c in rows.column_names]))


def _sorted_rows(s: Shape, files: list[str], in_memory: dict[str, pa.Table]) -> pa.Table:
    """A sorted projection's rows of ``files``, read in Arrow: a write's new parts cost
    no Spark job (a 1 % INSERT into lineitem: 0.08 s, and a Spark job ~0.2 s more)."""
    columns = list(s.columns)
    pieces = []
    for f in files:
        rows = _file_columns(f, in_memory, columns)
        if rows is None:
            rows, _ = read_keys([f], s.order[0], None, columns, base=True)
        pieces.append(rows.add_column(0, PART, pa.array([part_name(f)] * rows.num_rows,
                                                        pa.string())))
    rows = pa.concat_tables(pieces, promote_options="permissive")
    return _plain(rows.sort_by([(c, "ascending") for c in s.order]))


def _aggregate_rows(table: Item, s: Shape, files: list[str],
                    in_memory: dict[str, pa.Table]) -> pa.Table | None:
    """An aggregate projection's partials of ``files``, computed in Arrow per file (no
    Spark job: a 1 % INSERT into lineitem paid ~0.2-0.35 s per projection for one).
    None when an expression is beyond the Arrow evaluator: Spark computes those."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mzflow.engine import arrow_expr
    from mzflow.storage.types import parse_type

    planned = _arrow_plan(table, s)
    if planned is None:  # beyond the evaluator (or an expression it types otherwise): Spark
        return None
    types, where, key_exprs, args, needed = planned
    keys = list(s.key_columns)
    pieces = []
    for f in files:
        data = _file_columns(f, in_memory, needed)
        if data is None:
            path = f.removeprefix("file://")
            present = set(pq.read_schema(path).names)
            data = plain_strings(pq.read_table(path, columns=[c for c in needed
                                                              if c in present]))
        present = set(data.column_names)
        for c in needed:  # a column added after this file was written: NULL here
            if c not in present:
                data = data.append_column(c, pa.nulls(data.num_rows,
                                                      parse_type(types[c]).arrow))
        for cond in where:  # WHERE keeps the rows whose condition is true
            data = data.filter(pc.fill_null(arrow_expr.evaluate(cond, data), False))
        columns: dict[str, Any] = {k: arrow_expr.evaluate(e, data, boolean=False)
                                   for k, e in zip(keys, key_exprs, strict=True)}
        if any(pa.types.is_decimal256(v.type) for v in columns.values()):
            return None  # a key wider than Delta's decimals: Spark computes it
        aggs: list[tuple[Any, ...]] = []
        names = []
        for i, (p, arg) in enumerate(zip(s.partials, args, strict=True)):
            names.append(p.column)
            if arg is None:
                aggs.append(([], "count_all"))
                continue
            value = arrow_expr.evaluate(arg, data, boolean=False)
            if pa.types.is_decimal(value.type) and (
                    p.func == "avg_sum" or value.type.precision > 38):
                # As Spark's (and what Delta can store): at most decimal(38, s). The
                # evaluator sizes products by their values, up to decimal256(76, s).
                try:
                    value = pc.cast(value, pa.decimal128(38, min(value.type.scale, 38)))
                except pa.ArrowInvalid:  # a value beyond 38 digits: Spark says how
                    return None
            columns[f"_v{i}"] = value
            aggs.append((f"_v{i}", {"avg_sum": "sum", "count": "count"}.get(p.func, p.func)))
        frame = pa.table({k: _whole(v, data.num_rows) for k, v in columns.items()}
                         ) if columns else pa.table({"_n": pa.nulls(data.num_rows)})
        grouped = frame.group_by(keys, use_threads=False).aggregate(aggs)
        if data.num_rows == 0:  # Spark's GROUP BY part gives such a part no row either
            grouped = grouped.slice(0, 0)  # (a global aggregate's one row): its types
        out = grouped.select([f"{a[0]}_{a[1]}" if a[0] else "count_all" for a in aggs]
                             + keys).rename_columns(names + keys)
        pieces.append(out.add_column(0, PART, pa.array([part_name(f)] * out.num_rows,
                                                       pa.string())))
    if not pieces:
        return None  # no files: let Spark give the empty result its types
    return pa.concat_tables(pieces, promote_options="permissive").select(
        [PART, *keys, *names])


_ArrowPlan = tuple[dict[str, str], list[exp.Expr], list[exp.Expr], list[exp.Expr | None],
                   list[str]]
_ARROW_PLANS: dict[tuple[str, str, tuple[Any, ...]], _ArrowPlan | None] = {}


def _arrow_plan(table: Item, s: Shape) -> _ArrowPlan | None:
    """What ``_aggregate_rows`` evaluates, checked once per projection and table shape
    (the copies and checks were a third of a 1 % INSERT's partials, in Python)."""
    from mzflow.engine import arrow_expr
    from mzflow.errors import Error

    key = (s.projection.id, s.projection.query, table.columns)
    if key in _ARROW_PLANS:
        return _ARROW_PLANS[key]
    types = {c.name: c.type for c in table.columns_at(s.version)}
    # The bound expressions name the table; the Arrow evaluator reads one table's
    # columns by their own names.
    where, key_exprs = [_bare(e) for e in s.where], [_bare(e) for e in s.keys]
    args = [_bare(p.arg) if p.arg is not None else None for p in s.partials]
    plan: _ArrowPlan | None
    try:
        for e in where:
            arrow_expr.check(e, types)
        for e in (*key_exprs, *[a for a in args if a is not None]):
            arrow_expr.check(e, types, boolean=False)
        needed = sorted({c.name for e in (*where, *key_exprs, *[a for a in args if a is not None])
                         for c in e.find_all(exp.Column)})
        plan = (types, where, key_exprs, args, needed)
    except Error:
        plan = None
    if len(_ARROW_PLANS) > 256:
        _ARROW_PLANS.clear()
    _ARROW_PLANS[key] = plan
    return plan


def _bare(e: exp.Expr) -> exp.Expr:
    out = e.copy()
    for col in out.find_all(exp.Column):
        col.set("table", None)
    return out


def _whole(v: Any, n: int) -> Any:
    """An evaluated expression as a column of ``n`` values (a constant is a scalar)."""
    if isinstance(v, pa.Scalar):
        return pa.array([v.as_py()] * n, v.type)
    return v


def _plain(table: pa.Table) -> pa.Table:
    """Types delta-rs writes and reads back alike (no views, no large strings)."""
    fields = []
    for f in table.schema:
        t = f.type
        if t in (pa.string_view(), pa.large_string()):
            t = pa.string()
        fields.append(pa.field(f.name, t, nullable=True))
    return table.cast(pa.schema(fields))


def _store(shard: ProjectionShard, rows: pa.Table, txn: tuple[str, int],
           stats: dict[str, Any], sort_key: str | None = None, current: bool = False
           ) -> bool:
    """``current``: the caller listed ``shard``'s parts just now, under the catalog's
    write lock (ProjectionShard.add)."""
    if rows.num_rows == 0:
        return False
    if not shard.exists():
        shard.create(rows.schema)
        current = False
    return shard.add(rows, txn, stats, sort_key, current=current)


@dataclass
class Outcome:
    projection: str
    parts: int = 0
    rows: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


# A write's rows before they have a file: their part name until the commit names it.
_UNWRITTEN = "<unwritten>"
_PREPARING = ThreadPoolExecutor(4, thread_name_prefix="projection-prepare")


@dataclass
class Ahead:
    """A projection's rows of an append computed before the table's commit, and (when
    its shard exists) already written to a staged file: the store after the commit is
    then a log entry (issue 16's 1 % INSERT target)."""
    rows: pa.Table
    seconds: float
    staged: Staged | None


@dataclass
class Prepared:
    """An append's projection rows, computed from its rows in memory and staged while the
    table's own Delta write runs. Per projection: its ``Ahead`` (rows with the part
    ``_UNWRITTEN``), or None when Spark must compute them (after the commit, as before).
    The work touches only the rows in memory and files no version holds, so a write
    that fails ``discard``s it."""
    rows: pa.Table
    ready: dict[tuple[str, str, tuple[Any, ...]], Future[Ahead | None]]

    def take(self, table: Item, projection: Projection, part: str) -> Ahead | None:
        """``projection``'s rows of the one file the append wrote, named ``part``; None
        when the projection changed since (or was made since), or was not computed."""
        future = self.ready.pop((projection.id, projection.query, table.columns), None)
        try:
            done = future.result() if future is not None else None
        except Exception as e:  # computed again after the commit, by the usual path
            log.warning("projection %s: computing ahead failed: %s", projection.name, e)
            return None
        if done is None:
            return None
        _count(AHEAD)
        named = pa.array([part] * done.rows.num_rows, pa.string())
        return Ahead(done.rows.set_column(done.rows.schema.get_field_index(PART), PART,
                                          named), done.seconds, done.staged)

    def discard(self) -> None:
        """Delete the staged files nobody took (the write failed, or went to more than
        one file, or a projection was dropped meanwhile)."""
        for future in self.ready.values():
            try:
                done = future.result()
            except Exception:
                continue
            if done is not None and done.staged is not None:
                done.staged.discard()
        self.ready.clear()


def prepare(snap: Snapshot, warehouse: Path, table: Item, rows: pa.Table
            ) -> Prepared | None:
    """Start computing and staging every projection's rows of an append's ``rows`` (see
    Prepared); None when the table has no projection."""
    projections = snap.projections_on(table.id)
    if not projections or rows.num_rows == 0:
        return None
    ready = {(p.id, p.query, table.columns): _PREPARING.submit(
        _ahead, table, shape_of(snap, table, p), rows, shard_of(warehouse, p))
        for p in projections}
    return Prepared(rows, ready)


def _ahead(table: Item, s: Shape, rows: pa.Table, pshard: ProjectionShard
           ) -> Ahead | None:
    started = time.monotonic()
    in_memory = {_UNWRITTEN: rows}
    if s.kind == shapes.SORTED and not s.where:
        out: pa.Table | None = _sorted_rows(s, [_UNWRITTEN], in_memory)
    elif s.kind == AGGREGATE:
        out = _aggregate_rows(table, s, [_UNWRITTEN], in_memory)
        out = _plain(out) if out is not None else None
    else:  # a Spark job, which reads the file: after the commit
        return None
    if out is None:
        return None
    staged = None
    if out.num_rows:
        try:
            staged = pshard.stage(out, _sort_key(s))
        except Exception as e:  # stored after the commit instead, by the usual write
            log.warning("projection %s: staging failed: %s", s.projection.name, e)
    # mz_projection_history's seconds: computing and writing, as for a store after
    return Ahead(out, time.monotonic() - started, staged)


def _sort_key(s: Shape) -> str | None:
    return s.order[0] if s.kind == shapes.SORTED else None


def keep_new_parts(snap: Snapshot, warehouse: Path, table: Item, version: int,
                   operation: str, prepared: Prepared | None = None) -> list[Outcome]:
    """After a table commit at ``version``: store every projection's rows of the parts
    that version added. Idempotent (txn ``(proj-<id>, version)``); a failure leaves the
    parts to be projected on the fly, and is logged, never raised: the write has
    committed. ``prepared``: the append that made ``version`` and its projection rows
    computed ahead; used when the append went to one file."""
    projections = snap.projections_on(table.id)
    try:  # whatever happens, no staged file outlives this (see Prepared.discard)
        if not projections or version == 0:
            return []
        shard = Shard.shared(paths.table(warehouse, table.id))
        new = shard.added_in(version)
        if new is None:
            before = {part_name(f) for f in shard.files(version - 1)}
            new = [f for f in shard.files(version) if part_name(f) not in before]
        one_file = prepared is not None and len(new) == 1
        in_memory = {new[0]: prepared.rows} if one_file and prepared is not None else {}

        def keep(projection: Projection) -> Outcome | None:
            ahead = (prepared.take(table, projection, part_name(new[0]))
                     if one_file and prepared is not None else None)
            try:
                return _add_parts(snap, warehouse, table, projection, new,
                                  (f"proj-{projection.id}", version), operation, in_memory,
                                  ahead)
            except Exception as e:  # the parts stay unmaterialized: reads project them
                log.warning("projection %s of %s not kept for version %d: %s",
                            projection.name, table.qualified_name, version, e)
                return None

        if len(projections) == 1:
            found = [keep(projections[0])]
        else:
            # Each projection is its own shard, and its work (Arrow compute, a delta-rs
            # write) runs outside the GIL: side by side, a write pays for its slowest
            # projection, not their sum (issue 16's 1 % INSERT target).
            with ThreadPoolExecutor(len(projections),
                                    thread_name_prefix="projection") as pool:
                found = list(pool.map(keep, projections))
        return [o for o in found if o is not None]
    finally:
        if prepared is not None:
            prepared.discard()


def _add_parts(snap: Snapshot, warehouse: Path, table: Item, projection: Projection,
               files: list[str], txn: tuple[str, int], operation: str,
               in_memory: dict[str, pa.Table] | None = None,
               ahead: Ahead | None = None) -> Outcome:
    """``ahead``: the rows of ``files`` (one), computed (and maybe staged) while the
    table's commit ran."""
    s = shape_of(snap, table, projection)
    started = time.monotonic()
    result = Outcome(projection.name)
    # Writers of a projection hold the catalog's write lock: a part kept by now is
    # kept for good, and storing it again would count its rows twice.
    pshard = shard_of(warehouse, projection)
    kept = pshard.parts()
    files = [f for f in files if part_name(f) not in kept]
    if not files:
        if ahead is not None and ahead.staged is not None:
            ahead.staged.discard()
        return result
    if ahead is not None and len(files) == 1:
        rows, seconds = ahead.rows, ahead.seconds
    else:
        rows = compute(table, s, files, in_memory)
        seconds = time.monotonic() - started
    stats = {"operation": operation, "parts": len(files), "rows": rows.num_rows,
             "bytes": rows.nbytes, "seconds": round(seconds, 4), "table_version": txn[1]}
    if ahead is not None and ahead.staged is not None:
        # the shard existed when the file was staged, and no projection shard is ever
        # dropped while its projection is in the catalog
        if pshard.add_staged(ahead.staged, part_name(files[0]), txn, stats, current=True):
            _count(STAGED)
    else:
        _store(pshard, rows, txn, stats, _sort_key(s), current=pshard.exists())
    result.parts, result.rows, result.seconds = len(files), rows.num_rows, seconds
    return result


def materialize(snap: Snapshot, warehouse: Path, table: Item, projection: Projection,
                partition: PartitionValue | None = None, operation: str = "materialize"
                ) -> Outcome:
    """Store the rows of every part of the table's newest version that has none (in
    ``partition`` only, if given). Resumable: parts already stored are skipped, so a
    run killed half way is finished by the next."""
    shard = Shard.shared(paths.table(warehouse, table.id))
    version = shard.version()
    kept = shard_of(warehouse, projection).parts()
    files = [f for f in _in_partition(shard, version, table, partition)
             if part_name(f) not in kept]
    return _add_parts(snap, warehouse, table, projection, files,
                      (f"proj-{projection.id}-m", _materialize_seq(warehouse, projection)),
                      operation)


def _materialize_seq(warehouse: Path, projection: Projection) -> int:
    # Each MATERIALIZE's commit id is new (the parts it writes are the ones missing).
    history = shard_of(warehouse, projection).history()
    return len(history) + 1


def clear(snap: Snapshot, warehouse: Path, table: Item, projection: Projection,
          partition: PartitionValue | None = None) -> Outcome:
    """Drop the stored rows of every part (in ``partition`` only, if given)."""
    pshard = shard_of(warehouse, projection)
    kept = pshard.parts()
    result = Outcome(projection.name)
    if partition is None:
        parts = None
        result.parts = len(kept)
    else:
        shard = Shard.shared(paths.table(warehouse, table.id))
        wanted = {part_name(f) for f in _in_partition(shard, shard.version(), table,
                                                       partition)}
        parts = sorted(p for p in kept if p in wanted)
        result.parts = len(parts)
        if not parts:
            return result
    pshard.clear(parts, {"operation": "clear", "parts": result.parts, "rows": 0,
                         "bytes": 0, "seconds": 0.0})
    return result


def _in_partition(shard: Shard, version: int, table: Item, partition: PartitionValue | None
                  ) -> list[str]:
    """The files of ``version`` in ``partition`` (all of them when None): those whose
    Delta partition values (the hidden keys, storage/partitions.py) are the keys of the
    literal cast to each column's type."""
    files = shard.files(version)
    if partition is None:
        return files
    from mzflow.errors import InvalidOption
    from mzflow.storage import partitions
    from mzflow.storage.types import parse_type

    if not table.partition_by:
        raise InvalidOption(f'table "{table.name}" has no partitions',
                            hint="CREATE TABLE … PARTITION BY (column) makes them")
    if len(partition) != len(table.partition_by):
        raise InvalidOption(f"IN PARTITION needs {len(table.partition_by)} values, one per "
                            f"PARTITION BY column of \"{table.name}\"",
                            hint=f"IN PARTITION ({', '.join(table.partition_by)})")
    types = {c.name: c.type for c in table.columns}
    wanted = []
    for column, text in zip(table.partition_by, partition, strict=True):
        try:
            wanted.append(partitions.key_of_literal(text, parse_type(types[column]).arrow))
        except (pa.ArrowInvalid, ValueError):
            raise InvalidOption(f'invalid partition value "{text}" for column "{column}" '
                                f"of type {types[column]}") from None
    actions = shard.add_actions(version)
    if actions.num_rows == 0:
        return []
    values = zip(*(actions.column(f"partition.{partitions.key_column(c)}").to_pylist()
                   for c in table.partition_by), strict=True)
    chosen = {part_name(path) for path, value in zip(actions.column("path").to_pylist(),
                                                      values, strict=True)
              if list(value) == wanted}
    return [f for f in files if part_name(f) in chosen]


def partition_value(expr: exp.Expr) -> PartitionValue:
    """``IN PARTITION <literal>`` or ``IN PARTITION (<literal>, …)`` as text per column
    (None for NULL); the column types read the text (storage/partitions.py)."""
    from mzflow.errors import InvalidOption

    items = expr.expressions if isinstance(expr, exp.Tuple) else [expr]
    out: list[str | None] = []
    for item in items:
        while isinstance(item, exp.Paren | exp.Cast):  # (5), DATE '2024-01-01'
            item = item.this
        if isinstance(item, exp.Null):
            out.append(None)
        elif isinstance(item, exp.Boolean):
            out.append("true" if item.this else "false")
        elif isinstance(item, exp.Neg) and isinstance(item.this, exp.Literal):
            out.append(f"-{item.this.this}")
        elif isinstance(item, exp.Literal | exp.Identifier):
            out.append(str(item.this))
        else:
            raise InvalidOption(f"IN PARTITION takes literals, not {item.sql()}")
    return tuple(out)


def after_compaction(snap: Snapshot, warehouse: Path, table: Item, projection: Projection
                     ) -> tuple[int, int]:
    """After the table's files were merged and vacuumed: store the rows of the parts the
    merge wrote (else every read would project them on the fly) and drop the rows of
    parts whose files are gone. (parts built, parts dropped); under the write lock."""
    shard = Shard(paths.table(warehouse, table.id))
    on_disk = {f.name for f in shard.path.rglob("*.parquet")}
    pshard = shard_of(warehouse, projection)
    dead = sorted(p for p in pshard.parts() if p not in on_disk)
    if dead:
        pshard.clear(dead, {"operation": "compaction", "parts": len(dead), "rows": 0,
                            "bytes": 0, "seconds": 0.0})
    built = 0
    try:
        built = materialize(snap, warehouse, table, projection, operation="compaction").parts
    except Exception as e:  # reads project the merged parts on the fly meanwhile
        log.warning("projection %s of %s not built after compaction: %s",
                    projection.name, table.qualified_name, e)
    # A projection shard gains a file and a log entry per write, like its table: without
    # this its folder and its log would grow for as long as the table lives. Its removed
    # files are kept for the table's history (in whole hours: delta-rs's unit), a plain
    # read's grace as for the table's own files.
    pshard.vacuum(frontiers.retain_ms(table, snap) // 3_600_000)
    return built, len(dead)


# -- reading through a projection ---------------------------------------------------


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
        return _plain(rows.cast(_sorted_schema(s)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _plain(rows)


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


def answer(routing: Routing, types: list[str]) -> list[tuple[Any, ...]] | None:
    """The routed query's rows computed in process (``engine/arrow_query.py``), or None:
    the query's shape or types are beyond it, or a row failed to evaluate; the caller
    runs it on Spark, which answers or reports the error."""
    from mzflow.engine import arrow_query
    from mzflow.errors import Error

    name = routing.single()
    if name is None:
        ENGINE["spark"] += 1
        return None
    try:
        out = arrow_query.run(routing.query, routing.tables[name], types)
    except Error as e:
        log.debug("routed read on Spark: %s", e)
        ENGINE["spark"] += 1
        return None
    except Exception as e:  # a defect of the evaluator must not cost an answer
        log.warning("routed read on Spark after an in-process failure: %r", e)
        ENGINE["spark"] += 1
        return None
    ENGINE["arrow"] += 1
    return out


def _engine_line(snap: Snapshot, warehouse: Path, routing: Routing, types: list[str]
                 ) -> str:
    """How a routed read will run (EXPLAIN): decided from the relation's types, as the
    read decides it again from its rows."""
    from mzflow.engine import arrow_query

    name = routing.single()
    if name is None:
        return "Read: on Spark (the query is more than one SELECT over a projection's rows)"
    schema = _relation_schema(warehouse, routing.choices[0].routed.shape)
    if schema is None:
        return "Read: in process (Arrow) if its types allow, else on Spark"
    why = arrow_query.check(routing.query, schema, types)
    if why is None:
        return "Read: in process (Arrow), no Spark job"
    return f"Read: on Spark ({why})"


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


def explain_read(snap: Snapshot, warehouse: Path, query: exp.Query, enabled: bool
                 ) -> list[str]:
    """EXPLAIN's projection lines for a read of ``query`` now."""
    from mzflow.read import reads

    p = reads.plan(snap, query)
    if not any(snap.projections_on(item.id) for _, item, _ in p.tables):
        return []
    if not enabled:
        return ["Projections: not used (optimize_use_projections is off)"]
    routing = route_query(snap, warehouse, p.query, snap.read_ts, build=False)
    if routing is None:
        if len(p.tables) == 1:
            return explain(None, candidates(snap, p.query, p.tables)[1])
        return explain(None, [(pr.name, "no SELECT in the query reads its table alone")
                              for _, item, _ in p.tables
                              for pr in snap.projections_on(item.id)])
    lines: list[str] = []
    for choice in routing.choices:
        lines += explain(choice, [])
    lines.append(_engine_line(snap, warehouse, routing, [c.type for c in p.bound.columns]))
    return lines + explain(None, routing.rejected)


# -- statements ---------------------------------------------------------------------


def check(snap: Snapshot, table: Item, projection: Projection) -> None:
    """A projection's definition is valid (raises its error otherwise)."""
    shapes.shape(snap, table, projection)


def alter(store: Any, warehouse: Path, stmt: Any) -> list[str]:
    """ALTER TABLE t {ADD|DROP|MATERIALIZE|CLEAR} PROJECTION …"""
    import shutil

    from mzflow.catalog.ddl import projections as ddl

    def drop_storage(projection: Projection) -> None:
        shutil.rmtree(paths.projection(warehouse, projection.table_id, projection.id),
                      ignore_errors=True)

    notices, table, projection = ddl.alter(store, stmt, check, drop_storage)
    action = stmt.args["action"]
    if projection is None or table is None or action in ("ADD", "DROP"):
        return notices
    partition = stmt.args.get("partition")
    value = partition_value(partition) if partition is not None else None
    with store.write() as w:  # one writer of a projection at a time (see _add_parts)
        if action == "MATERIALIZE":
            done = materialize(w.snapshot, warehouse, table, projection, value)
            return notices + [f'projection "{projection.name}": {done.parts} parts '
                              f"materialized, {done.rows} rows in {done.seconds:.2f} s"]
        done = clear(w.snapshot, warehouse, table, projection, value)
    return notices + [f'projection "{projection.name}": {done.parts} parts cleared']


# -- mz_projections, mz_projection_history, SHOW PROJECTIONS ------------------------------


def system_rows(name: str, snap: Snapshot, warehouse: Path) -> list[tuple[Any, ...]]:
    from mzflow.catalog.system import projection_kind

    out: list[tuple[Any, ...]] = []
    for p in snap.projections:
        shard = shard_of(warehouse, p)
        history = shard.history()
        if name == "mz_projection_history":
            out += [(p.id, h.get("operation"), h.get("parts", 0), h.get("rows", 0),
                     h.get("bytes", 0), float(h.get("seconds", 0.0)),
                     h.get("table_version"), h.get("at_ms")) for h in history]
            continue
        rows, size, _ = shard.size()
        out.append((p.id, p.table_id, p.name, projection_kind(p.query), p.query,
                    len(shard.parts()), rows, size,
                    sum(int(h.get("rows", 0)) for h in history),
                    round(sum(float(h.get("seconds", 0.0)) for h in history), 4)))
    return out
