"""Writes to tables: INSERT, UPDATE, DELETE and COPY, each one atomic Delta commit.

Every write commits inside the catalog's write transaction: it takes the next
timestamp from the oracle, commits its rows to the table's shard with that timestamp
in the commit metadata, and only then marks the timestamp readable. A crash before
the Delta commit leaves the table untouched; a crash after it leaves a commit that
readers adopt with the next write (never a partial one, never twice with an
idempotency key).

Rows are computed in process for literal VALUES and files, under the lock; UPDATE,
DELETE and INSERT … SELECT compute theirs *before* taking it (``_read_then_write``), noting
the version of every table they read, and under the lock only check that those are
still the versions a write there would read: else they compute again (a write to a
table they read committed meanwhile), ``write_retries`` times, then once under the
lock. So no writer waits on another's Spark job.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from sqlglot import exp

from mzflow import config
from mzflow.catalog import names, normalize, srf
from mzflow.catalog.hooks import Apply, HookWrite, WriteHook, WriteInfo, begin
from mzflow.catalog.model import TABLE, Item, Snapshot
from mzflow.catalog.store import Store, Writer
from mzflow.errors import Error, InvalidOption, UnknownColumn, Unsupported, WrongObjectType
from mzflow.plan.constants import NotConstant, evaluate_rows
from mzflow.storage import paths, rewrite
from mzflow.storage import rows as rowconv
from mzflow.storage.delta import ROWID, Shard
from mzflow.storage.types import parse_type

log = logging.getLogger("mzflow.write")

IdempotencyKey = tuple[str, int]
# The rows a write's hooks let through (expectations: quality/validate.py).
Check = Callable[[Writer, Item, pa.Table], pa.Table]
# What a write will commit: its row count, the commit (given the time, returns the new
# version), and the rows when it is an append of them (its projections are computed from
# those while the table's own commit runs).
Produced = tuple[int, Callable[[int], int], pa.Table | None]
Produce = Callable[[Writer, Item, Shard, Check], Produced]


@dataclass(frozen=True)
class WriteResult:
    status: str
    rows: int
    version: int | None  # the new Delta version, None when nothing was written
    ts: int | None
    notices: tuple[str, ...] = ()


def _constant(node: exp.Expr) -> Any:
    """A constant expression's value, in process with PostgreSQL's semantics."""
    from mzflow.engine import arrow_constants

    return arrow_constants.value(node).to_pylist()[0]


def shard_of(warehouse: Path, item: Item) -> Shard:
    return Shard(paths.table(warehouse, item.id))


def _file_size(w: Writer) -> int:
    return config.tuning(w.snapshot.settings).file_size


def targets_of(item: Item) -> list[rowconv.Target]:
    return [rowconv.Target(c.name, c.type, c.nullable) for c in item.columns]


class Read(Protocol):
    """Run a bound query at a time on Spark, into Arrow; ``versions`` is filled with the
    version read of each shard, by path (reads.read_arrow)."""

    def __call__(self, snap: Snapshot, query: exp.Query, at: int,
                 versions: dict[str, int] | None = None) -> pa.Table: ...


class _Stale(Exception):
    """A write to a table the statement read committed after it read it."""


@dataclass
class _Rewrite:
    """An UPDATE's new rows or a DELETE's row ids, and their rewrite staged before the
    lock when large (storage/rewrite.py)."""

    rows: Any
    staged: rewrite.Staged | None

    def applied(self, shard: Shard, key: IdempotencyKey | None,
                merge: Callable[[int], int]) -> Callable[[int], int]:
        """The commit: the staged files', or ``merge`` under the lock when nothing was
        staged or the shard moved past the version staged against."""
        staged = self.staged
        if staged is None:
            return merge

        def apply(ts: int) -> int:
            try:
                return rewrite.commit(shard, staged, ts, key)
            except rewrite.Moved:
                return merge(ts)
        return apply

    def discard(self) -> None:
        if self.staged is not None:
            self.staged.discard()
            self.staged = None


class TableWrites:
    """The write paths. ``read`` runs a bound query on Spark and returns Arrow; ``hooks``
    take part in every write (catalog/hooks.py)."""

    def __init__(self, store: Store, warehouse: Path, read: Read,
                 hooks: Sequence[WriteHook] = ()):
        self.store = store
        self.warehouse = warehouse
        self.read = read
        self.hooks = hooks  # the session's, in order: validation, projection upkeep
        self.recomputed = 0  # UPDATEs and DELETEs computed again (a table they read moved)

    def _commit(self, name: exp.Table, key: IdempotencyKey | None, status: str,
                produce: Produce, opened: Shard | None = None) -> WriteResult:
        """Shared frame: lock, resolve, idempotency check, produce rows, let the hooks
        check them (expectations), commit, then the hooks' upkeep (projections).
        ``opened``: the table's shard, open already (a folder COPY's commits reuse it:
        opening replays the log, once per file made its commits quadratic)."""
        verb = status.split()[0]
        statement = verb if key is None else f"{verb} {key[0]}:{key[1]}"
        hooks = begin(self.hooks, WriteInfo(self.store, self.warehouse, verb, statement,
                                            self._rows_for))

        def check(w: Writer, item: Item, data: pa.Table) -> pa.Table:
            for hook in hooks:
                data = hook.check(w, item, data)
            return data

        try:
            with self.store.write() as w:
                item = _table(w.snapshot, name)
                shard = shard_of(self.warehouse, item)
                if opened is not None and opened.path == shard.path:
                    shard = opened
                if key is not None:
                    done = shard.applied(key[0])
                    if done is not None and done >= key[1]:
                        notice = (f"write {key[0]}:{key[1]} was already applied to "
                                  f"{item.qualified_name}, skipping")
                        return WriteResult(f"{status} 0", 0, None, None, (notice,))
                _adopt_orphan(w, shard)
                count, apply, appended = produce(w, item, shard, check)
                if count == 0 and key is None and not any(h.holds_rows() for h in hooks):
                    for hook in hooks:
                        hook.nothing_written(w)
                    return WriteResult(f"{status} 0", 0, None, None, _notices(hooks))
                ts = w.allocate_ts()
                for hook in hooks:
                    hook.before_commit(w, item, appended)
                version = _apply(w, item, ts, count if key is None else 1, apply, hooks)
                for hook in hooks:
                    hook.committed(w, ts)
                w.committed(ts)
        except BaseException as e:
            for hook in hooks:
                hook.failed(e)
            raise
        for hook in hooks:
            hook.after(w.snapshot, item, version)
        log.info("%s %s: %d rows, version %s at %d", status, item.qualified_name, count,
                 version, ts)
        return WriteResult(f"{status} {count}", count, version, ts, _notices(hooks))

    def _rows_for(self, w: Writer, item: Item, rows: pa.Table) -> pa.Table:
        """``rows`` as ``item`` stores them: its types, fresh row ids (a quarantine's)."""
        return _with_rowids(w, shard_of(self.warehouse, item),
                            rowconv.conform(rows, targets_of(item)))

    def append(self, name: exp.Table, rows: pa.Table, key: IdempotencyKey) -> WriteResult:
        """Append ``rows`` (the table's columns, its types) once: what a tick quarantines."""
        def produce(w: Writer, item: Item, shard: Shard, check: Check
                    ) -> Produced:
            data = _with_rowids(w, shard, check(w, item, rowconv.conform(
                rows, targets_of(item))))
            return _appending(w, shard, data, key)

        return self._commit(name, key, "INSERT 0", produce)

    def insert(self, stmt: exp.Insert, key: IdempotencyKey | None = None) -> WriteResult:
        target, names = _insert_target(stmt)
        source = stmt.expression

        def compute(snap: Snapshot, item: Item, versions: dict[str, int] | None
                    ) -> pa.Table:
            return self._rows_for_insert(snap, source, targets_of(item),
                                         _column_order(item, names), versions)

        def finish(w: Writer, item: Item, shard: Shard, check: Check, rows: pa.Table
                   ) -> Produced:
            return _appending(w, shard, _with_rowids(w, shard, check(w, item, rows)), key)

        # INSERT … SELECT reads tables: before the lock. VALUES are evaluated in process
        # (those that read a table, rare, still run under the lock).
        if not isinstance(source, exp.Values):
            return self._read_then_write(target, key, "INSERT 0", compute, finish,
                                         own=False)

        def produce(w: Writer, item: Item, shard: Shard, check: Check) -> Produced:
            return finish(w, item, shard, check, compute(w.snapshot, item, None))

        return self._commit(target, key, "INSERT 0", produce)

    def constant_rows(self, stmt: exp.Insert) -> int | None:
        """How many rows a constant ``INSERT … VALUES`` writes, its rows checked against
        the table as its commit checks them (nothing written); None when it is not
        constant (it reads tables)."""
        target, names = _insert_target(stmt)
        if not isinstance(stmt.expression, exp.Values):
            return None
        try:
            evaluate_rows(stmt.expression, _constant)
        except NotConstant:
            return None
        snap = self.store.snapshot()
        item = _table(snap, target)
        return self._rows_for_insert(snap, stmt.expression, targets_of(item),
                                     _column_order(item, names)).num_rows

    def insert_all(self, stmts: Sequence[exp.Insert]) -> list[WriteResult]:
        """Constant INSERTs a write transaction buffered, at its COMMIT: all of one
        table's rows in one commit (each table's commit is atomic; Delta has no commit
        across tables, so two tables' commits are two)."""
        snap = self.store.snapshot()
        groups: dict[str, list[exp.Insert]] = {}
        for stmt in stmts:
            groups.setdefault(_table(snap, _insert_target(stmt)[0]).id, []).append(stmt)
        results = []
        for group in groups.values():
            def produce(w: Writer, item: Item, shard: Shard, check: Check,
                        group: list[exp.Insert] = group) -> Produced:
                parts = [self._rows_for_insert(
                    w.snapshot, s.expression, targets_of(item),
                    _column_order(item, _insert_target(s)[1])) for s in group]
                data = _with_rowids(w, shard, check(w, item, pa.concat_tables(parts)))
                return _appending(w, shard, data, None)

            results.append(self._commit(_insert_target(group[0])[0], None, "INSERT 0",
                                        produce))
        return results

    def _rows_for_insert(self, snap: Snapshot, source: exp.Expr, targets: list[rowconv.Target],
                         order: list[int | None], versions: dict[str, int] | None = None
                         ) -> pa.Table:
        chosen = [targets[i] for i in order if i is not None]
        if isinstance(source, exp.Values):
            try:
                values = evaluate_rows(source, _constant)
            except NotConstant:
                values = None
            if values is not None:
                for n, row in enumerate(values, start=1):
                    if len(row) != len(chosen):
                        raise Error("INSERT has more expressions than target columns"
                                    if len(row) > len(chosen) else
                                    "INSERT has more target columns than expressions",
                                    detail=f"in row {n}")
                full = [[row[order.index(i)] if i in order else None
                         for i in range(len(targets))] for row in values]
                return rowconv.from_values(full, targets)
            query: exp.Query = exp.select("*").from_(exp.Subquery(this=source, alias="v"))
        elif isinstance(source, exp.Query):
            query = source
        else:
            raise Unsupported(f"INSERT from {type(source).__name__} is not supported")
        computed = self.read(snap, query, snap.read_ts, versions)
        if computed.num_columns != len(chosen):
            raise Error(f"INSERT has {computed.num_columns} expressions but {len(chosen)} "
                        "target columns")
        computed = rowconv.conform(computed, chosen)
        columns = []
        for i, t in enumerate(targets):
            if i in order:
                columns.append(computed.column(order.index(i)))
            else:
                if not t.nullable:
                    raise rowconv.NotNullViolation(
                        f'null value in column "{t.name}" violates not-null constraint')
                columns.append(pa.nulls(computed.num_rows, parse_type(t.type).arrow))
        return rowconv.conform(pa.Table.from_arrays(columns, names=[t.name for t in targets]),
                               targets)

    def delete(self, stmt: exp.Delete, key: IdempotencyKey | None = None) -> WriteResult:
        def compute(snap: Snapshot, item: Item, versions: dict[str, int]) -> pa.Array:
            query = exp.select(exp.column(ROWID)).from_(_ref(item))
            if stmt.args.get("where") is not None:
                query = query.where(stmt.args["where"].this)
            ids = self.read(snap, query, snap.read_ts, versions).column(0).combine_chunks()
            return _Rewrite(ids, self._stage(snap, item, versions, delete=ids))

        def finish(w: Writer, item: Item, shard: Shard, check: Check, rw: _Rewrite
                   ) -> Produced:
            ids = rw.rows
            return len(ids), rw.applied(shard, key,
                                        lambda ts: shard.delete_rows(ids, ts, key)), None

        _warm_spark()
        return self._read_then_write(stmt.this, key, "DELETE", compute, finish)

    def update(self, stmt: exp.Update, key: IdempotencyKey | None = None) -> WriteResult:
        def compute(snap: Snapshot, item: Item, versions: dict[str, int]) -> pa.Table:
            sets: dict[str, exp.Expr] = {}
            known = {c.name for c in item.columns}
            srf.check_not_in([a.expression for a in stmt.expressions], "UPDATE")
            for assignment in stmt.expressions:
                col = assignment.this.name
                if col not in known:
                    raise UnknownColumn(f'column "{col}" of relation "{item.name}" '
                                        "does not exist")
                sets[col] = assignment.expression
            projections = [exp.alias_(sets.get(c.name, exp.column(c.name)), c.name, quoted=True)
                           for c in item.columns]
            query = exp.select(*projections, exp.column(ROWID)).from_(_ref(item))
            if stmt.args.get("where") is not None:
                query = query.where(stmt.args["where"].this)
            computed = self.read(snap, query, snap.read_ts, versions)
            targets = targets_of(item)
            new = rowconv.conform(computed.select(list(range(len(targets)))), targets)
            new = new.append_column(pa.field(ROWID, pa.int64(), nullable=False),
                                    computed.column(len(targets)))
            return _Rewrite(new, self._stage(snap, item, versions, replace=new))

        def finish(w: Writer, item: Item, shard: Shard, check: Check, rw: _Rewrite
                   ) -> Produced:
            # A row that fails DROP ROW or QUARANTINE keeps its old values.
            new = check(w, item, rw.rows)
            if new.num_rows != rw.rows.num_rows:  # the staged rewrite has them changed
                rw.discard()
            return new.num_rows, rw.applied(shard, key,
                                            lambda ts: shard.update_rows(new, ts, key)), None

        _warm_spark()
        return self._read_then_write(stmt.this, key, "UPDATE", compute, finish)

    def _read_then_write(self, name: exp.Table, key: IdempotencyKey | None, status: str,
                         compute: Callable[[Snapshot, Item, dict[str, int]], Any],
                         finish: Callable[[Writer, Item, Shard, Check, Any], Produced],
                         own: bool = True) -> WriteResult:
        """``compute`` the statement's rows from the tables as they are, without the
        lock; then, under it, ``finish`` (the hooks' checks, the commit) if every shard
        it read is still at the version a write there would read. UPDATE's SET and
        WHERE may read other tables, so all of them are checked, not only its own;
        ``own``: its own table is checked even if the query came to read none of it
        (an INSERT … SELECT does not depend on the table it appends to)."""
        for _ in range(config.tuning(self.store.snapshot().settings).write_retries):
            snap = self.store.snapshot()
            item = _table(snap, name)
            # The newest commit, an orphan's too (as _adopt_orphan reads under the lock).
            shard = Shard.shared(shard_of(self.warehouse, item).path)
            history = shard.history()
            at = max(snap.read_ts, history[-1][1] if history else snap.read_ts)
            versions: dict[str, int] = {str(shard.path): shard.version_at(at) or 0} if (
                own) else {}
            rows = compute(dataclasses.replace(snap, read_ts=at), item, versions)

            def produce(w: Writer, current: Item, shard: Shard, check: Check,
                        read: Item = item, versions: dict[str, int] = versions,
                        rows: Any = rows) -> Produced:
                if not _unchanged(w, read, current, versions):
                    raise _Stale
                return finish(w, current, shard, check, rows)

            try:
                return self._commit(name, key, status, produce)
            except _Stale:
                self.recomputed += 1
                log.info("%s %s: a table it read changed meanwhile; computing again",
                         status, item.qualified_name)
            finally:  # committed or not, no staged file outlives the statement
                if isinstance(rows, _Rewrite):
                    rows.discard()

        def locked(w: Writer, item: Item, shard: Shard, check: Check) -> Produced:
            return finish(w, item, shard, check, compute(w.snapshot, item, {}))

        return self._commit(name, key, status, locked)

    def _stage(self, snap: Snapshot, item: Item, versions: dict[str, int],
               **change: Any) -> rewrite.Staged | None:
        """A large UPDATE's or DELETE's new files, written now, before the lock
        (storage/rewrite.py); None to merge under it (also when computed under it)."""
        shard = Shard.shared(shard_of(self.warehouse, item).path)
        version = versions.get(str(shard.path))
        if version is None:
            return None
        tuning = config.tuning(snap.settings)
        return rewrite.stage(shard, version, shard.arrow_schema(version),
                             file_size=tuning.file_size,
                             min_rows=tuning.staged_write_min_rows, **change)

    def copy(self, stmt: exp.Copy, key: IdempotencyKey | None = None) -> WriteResult:
        if not stmt.args.get("kind"):
            raise Unsupported("COPY … TO is not supported; use a sink")
        files = stmt.args.get("files") or []
        if len(files) != 1 or not isinstance(files[0], exp.Literal):
            raise Unsupported("COPY FROM takes one file path as a string")
        options = _copy_options(stmt)
        from mzflow.storage import landing

        if landing.is_folder_form(files[0].this, options.get("pattern")):
            from mzflow.session.copy_folder import copy_folder

            # Each file is keyed by its own identity: the statement's key adds nothing.
            return copy_folder(self, stmt.this, files[0].this, options)
        del options["pattern"]
        path = files[0].this  # a local path or an s3:// URL (storage/objects.py)

        def produce(w: Writer, item: Item, shard: Shard, check: Check
                    ) -> Produced:
            from mzflow.storage.files import read_file

            data = check(w, item, read_file(path, targets_of(item), **options))
            data = _with_rowids(w, shard, data)
            return _appending(w, shard, data, key)

        return self._commit(stmt.this, key, "COPY", produce)


def _apply(w: Writer, item: Item, ts: int, count: int, apply: Apply,
           hooks: list[HookWrite]) -> int | None:
    """The table's commit, each hook's around it (the first hook outermost). Returns
    the table's new version."""
    def through(i: int, at: int) -> int | None:
        if i == len(hooks):
            return apply(at)
        return hooks[i].commit(w, item, at, count, partial(through, i + 1))

    return through(0, ts)


def _notices(hooks: list[HookWrite]) -> tuple[str, ...]:
    return tuple(n for hook in hooks for n in hook.notices())


def _appending(w: Writer, shard: Shard, data: pa.Table, key: IdempotencyKey | None
               ) -> Produced:
    return (data.num_rows, lambda ts: shard.append(data, ts, key, file_size=_file_size(w)),
            data)


def _warm_spark() -> None:
    """Start Spark before taking the catalog's write lock, not under it: UPDATE and
    DELETE read the table on Spark, and a JVM start (tens of seconds on a busy machine)
    held every other writer past its busy timeout (found by the soak, issue 19)."""
    from mzflow.engine import spark

    spark.session()


def _table(snap: Snapshot, name: exp.Table) -> Item:
    item = names.resolve(snap, name)
    if item.kind != TABLE:
        raise WrongObjectType(f"cannot write to {item.qualified_name}: it is a {item.kind_word}")
    return item


def _insert_target(stmt: exp.Insert) -> tuple[exp.Table, list[str] | None]:
    """An INSERT's table, and its column list if it names one."""
    target = stmt.this
    if isinstance(target, exp.Schema):
        return target.this, [c.name for c in target.expressions]
    return target, None


def _ref(item: Item) -> exp.Table:
    """A reference that binds to the table's newest version, rowids included."""
    return normalize.of_item(item)


def _column_order(item: Item, names: list[str] | None) -> list[int | None]:
    """For each value position, the index of the table column it fills."""
    cols = [c.name for c in item.columns]
    if names is None:
        return list(range(len(cols)))
    order: list[int | None] = []
    for n in names:
        if n not in cols:
            raise UnknownColumn(f'column "{n}" of relation "{item.name}" does not exist')
        if cols.index(n) in order:
            raise InvalidOption(f'column "{n}" specified more than once')
        order.append(cols.index(n))
    return order


def _unchanged(w: Writer, read: Item, current: Item, versions: dict[str, int]) -> bool:
    """Under the lock: the table is the one computed against (not dropped and made
    again, no column added) and every shard read is at the version a write now reads."""
    if current.id != read.id or current.columns != read.columns:
        return False
    at = w.snapshot.read_ts  # an orphaned commit of the table adopted already
    return all(Shard(Path(path)).version_at(at) == version
               for path, version in versions.items())


def _adopt_orphan(w: Writer, shard: Shard) -> None:
    """A writer killed after its Delta commit but before its catalog commit leaves a
    commit the catalog never recorded: its time is above ``read_ts`` and its row ids
    were never marked used. Writing on top of it, read at its time (so that a DELETE or
    UPDATE sees its rows) and never hand its row ids out again."""
    history = shard.history()
    if history and history[-1][1] > w.snapshot.read_ts:
        w.snapshot = dataclasses.replace(w.snapshot, read_ts=history[-1][1])


def _fresh_rowids(w: Writer, shard: Shard, n: int) -> int:
    """The first of ``n`` row ids no commit of ``shard`` has used."""
    top = shard.max_rowid()
    unused = w.allocate_rowids(0)
    if top is not None and top >= unused:  # ids an orphaned commit already wrote
        w.allocate_rowids(top + 1 - unused)
    return w.allocate_rowids(n)


def _with_rowids(w: Writer, shard: Shard, data: pa.Table) -> pa.Table:
    first = _fresh_rowids(w, shard, data.num_rows)
    ids = pa.array(range(first, first + data.num_rows), type=pa.int64())
    return data.append_column(pa.field(ROWID, pa.int64(), nullable=False), ids)


def _copy_options(stmt: exp.Copy) -> dict[str, Any]:
    out: dict[str, Any] = {"format": "csv", "header": False, "delimiter": ",",
                           "pattern": None}
    for param in stmt.args.get("params") or []:
        name = param.this.name.lower()
        value = param.args.get("expression")
        if value is None:
            text = "true"
        elif isinstance(value, exp.Boolean):
            text = "true" if value.this else "false"
        else:
            text = value.name
        if name == "format":
            out["format"] = text.lower()
        elif name == "header":
            out["header"] = text.lower() in ("true", "1", "on", "yes")
        elif name == "delimiter":
            out["delimiter"] = text
        elif name == "pattern":  # a landing folder's files to load (session/copy_folder.py)
            out["pattern"] = text
        else:
            raise InvalidOption(f'unexpected COPY option "{name.upper()}"',
                                hint="valid options are FORMAT, HEADER, DELIMITER and PATTERN")
    if out["format"] not in ("csv", "parquet", "json"):
        raise InvalidOption(f"unknown COPY format {out['format'].upper()}",
                            hint="valid formats are CSV, PARQUET and JSON")
    return out
