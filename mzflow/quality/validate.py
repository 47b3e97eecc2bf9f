"""Data-quality expectations: every batch a table write commits is validated by Great
Expectations before the commit, and each failing row meets its expectation's action.

How a batch is validated. Great Expectations runs on pandas, in process: a batch is
already Arrow on the driver when a write commits it (literal rows, a file, or the
result of a Spark read), so a Spark job per write would cost more than the validation.
- A SQL expectation, ``EXPECT (<condition>)``, is evaluated over the batch's Arrow
  columns with PostgreSQL's semantics (engine/arrow_expr.py), and GE checks the result
  column with ``expect_column_values_to_not_be_in_set([False])``: as in a SQL CHECK
  constraint, a condition that is NULL passes.
- A Great Expectations expectation attached by name (``EXPECT
  expect_column_values_to_be_unique (column => 'k')``) runs on the batch's columns
  (numeric columns as float64). It judges the batch: uniqueness is within the rows one
  statement writes, not against the rows already in the table.

Actions: WARN commits everything; DROP ROW commits the passing rows; QUARANTINE commits
the passing rows and writes the failing ones to ``<table>_quarantine``; FAIL rejects
the statement, naming one failing row. A row failing several expectations meets the
strongest action: FAIL, then QUARANTINE (a bad row must not vanish), then DROP ROW.

The quarantine and its table are two Delta tables and Delta has no two-table commit.
The failing rows are first staged in a file under ``<warehouse>/_pending``, then the
table commits, then the quarantine (with the write's time and an idempotency key). The
first writer to take the catalog's write lock after a crash finishes the quarantine of
a write whose table commit exists and discards the staged rows of one whose does not,
before any writer can make that time readable (``recover``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.catalog.bind import bind
from mzflow.catalog.ddl import expectations as ddl
from mzflow.catalog.determinism import check_deterministic
from mzflow.catalog.model import ROWID, TABLE, Expectation, Item, Snapshot
from mzflow.engine import arrow_expr
from mzflow.errors import Error, InvalidDefinition, TypeMismatch, UnknownColumn, Unsupported
from mzflow.sql.parse import parse
from mzflow.storage import paths
from mzflow.storage.delta import Shard

log = logging.getLogger("mzflow.quality")

ROW_ACTIONS = (ddl.DROP_ROW, ddl.QUARANTINE)
PENDING = "_pending"


class ExpectationFailed(Error):
    code = "23514"  # check_violation

    def __init__(self, message: str, checked: Checked, **kw: Any):
        super().__init__(message, **kw)
        self.checked = checked


# -- definitions ----------------------------------------------------------------------


def condition(e: Expectation) -> exp.Expr:
    select = parse(f"SELECT {e.definition}")[0]
    assert isinstance(select, exp.Select)
    return select.expressions[0]


def check(snap: Snapshot, table: Item, e: Expectation) -> None:
    """An expectation's definition is valid for ``table`` (raises its error otherwise)."""
    what = f'expectation "{e.name}"'
    if table.kind != TABLE and e.action in ROW_ACTIONS and e.kind != "sql":
        # A view's failing rows are left out by its readers, who need the condition as
        # SQL (catalog/ddl/expectations.py: read_filters).
        raise Unsupported(f"ON VIOLATION {e.action} on a materialized view needs a SQL "
                          f"condition, not {e.definition}",
                          hint="write it as EXPECT (<condition>), or make it WARN or FAIL")
    if e.kind == "sql":
        cond = condition(e)
        check_deterministic(cond, what)
        if cond.find(exp.AggFunc, exp.Subquery, exp.Window) is not None:
            raise InvalidDefinition(f"{what} must be a condition on one row",
                                    hint="aggregates, subqueries and windows judge more "
                                         "than a row")
        bound = bind(snap, exp.select(exp.alias_(cond.copy(), "ok")).from_(table.name))
        got = bound.columns[0].type
        if got != "boolean":
            raise TypeMismatch(f"argument of EXPECT must be type boolean, not type {got}")
        arrow_expr.check(cond, {c.name: c.type for c in table.columns})
        return
    cls = _ge_class(e.definition)
    args = json.loads(e.args)
    known = {c.name for c in table.columns}
    for key in ("column", "column_A", "column_B"):
        if key in args and args[key] not in known:
            raise UnknownColumn(f'column "{args[key]}" named by {what} does not exist in '
                                f'table "{table.name}"')
    for col in args.get("column_list") or []:
        if col not in known:
            raise UnknownColumn(f'column "{col}" named by {what} does not exist in table '
                                f'"{table.name}"')
    _ge_expectation(cls, args, what)
    from great_expectations.expectations.expectation import ColumnMapExpectation

    if e.action in ROW_ACTIONS and not issubclass(cls, ColumnMapExpectation):
        raise InvalidDefinition(
            f"{what} ({e.definition}) judges the batch as a whole, not row by row",
            hint="it can WARN or FAIL; DROP ROW and QUARANTINE need an expectation that "
                 "names failing rows")


def _ge_class(name: str) -> type:
    import great_expectations.expectations as gxe

    camel = "".join(part.capitalize() for part in name.split("_"))
    cls = getattr(gxe, camel, None)
    if not name.startswith("expect_") or not isinstance(cls, type):
        raise InvalidDefinition(f'unknown expectation type "{name}"',
                                hint="a Great Expectations expectation, such as "
                                     "expect_column_values_to_be_unique, or ( <condition> )")
    return cls


def _ge_expectation(cls: type, args: dict[str, Any], what: str) -> Any:
    fields = getattr(cls, "__fields__", None) or getattr(cls, "model_fields", {})
    for key in args:
        if key not in fields or key in ("meta", "notes", "id", "result_format"):
            raise InvalidDefinition(f'{what}: {cls.__name__} has no argument "{key}"')
    try:
        return cls(**args)
    except Exception as err:  # pydantic's ValidationError: say which argument is wrong
        first = str(err).splitlines()
        detail = "; ".join(line.strip() for line in first[1:3])
        raise InvalidDefinition(f"{what}: invalid arguments for {cls.__name__}",
                                detail=detail or str(err)) from None


# -- validation -------------------------------------------------------------------------


@dataclass
class Checked:
    """A validated batch: what to commit, what to quarantine, what to record."""

    kept: pa.Table
    quarantined: pa.Table | None  # the table's columns + the quarantine's own
    results: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    report: str = ""  # GE's result, JSON, unexpected lists trimmed (for Data Docs)

    def records(self, ts: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(mz_expectation_results rows, the run's row) stamped with ``ts``."""
        return ([{**r, "ts": ts} for r in self.results],
                [{"ts": ts, "object_id": self.results[0]["object_id"],
                  "statement": self.results[0]["statement"], "report": self.report}]
                if self.results else [])


@cache
def _context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = ctx.data_sources.add_pandas("mzflow").add_dataframe_asset("batch")
    return asset.add_batch_definition_whole_dataframe("batch")


def _pandas(batch: pa.Table, names: set[str]) -> Any:
    columns = {}
    for name in names:
        col = batch.column(name)
        if pa.types.is_decimal(col.type):
            col = pc.cast(col, pa.float64())
        columns[name] = col
    return pa.table(columns if columns else {"_": pa.nulls(batch.num_rows)}).to_pandas()


def validate(snap: Snapshot, table: Item, batch: pa.Table, statement: str) -> Checked | None:
    """Validate ``batch`` (the table's columns, maybe its row ids) against the table's
    expectations. Raises ExpectationFailed for a FAIL expectation that fails."""
    found = snap.expectations_on(table.id)
    if not found or batch.num_rows == 0:
        return None
    import great_expectations as gx

    started = time.perf_counter()
    definition = _context()  # first: a suite needs the active context
    suite = gx.ExpectationSuite(name=f"mzflow-{table.id}")
    frame_columns: dict[str, pa.ChunkedArray | pa.Array] = {}
    needed: set[str] = set()
    for i, e in enumerate(found):
        expectation = _ge_of(e, i)
        if e.kind == "sql":
            frame_columns[expectation.column] = arrow_expr.evaluate(condition(e), batch)
        else:
            args = json.loads(e.args)
            needed |= {args[k] for k in ("column", "column_A", "column_B") if k in args}
            needed |= set(args.get("column_list") or [])
        suite.add_expectation(expectation)
    frame = _pandas(batch, needed)
    for name, values in frame_columns.items():
        frame[name] = pa.chunked_array([values] if isinstance(values, pa.Array) else
                                       values.chunks, type=pa.bool_()).to_pandas()
    outcome = definition.get_batch(batch_parameters={"dataframe": frame}).validate(
        suite, result_format="COMPLETE")
    failing: dict[int, pa.Array] = {}  # expectation → mask of its failing rows
    results: list[dict[str, Any]] = []
    for r in outcome.results:
        i = int(r.expectation_config.meta["mzflow"])
        e = found[i]
        if r.exception_info and r.exception_info.get("raised_exception"):
            raise Error(f'expectation "{e.name}" could not be evaluated by Great '
                        f"Expectations: {r.exception_info.get('exception_message')}")
        unexpected = int(r.result.get("unexpected_count") or 0) if r.result else 0
        if not r.success and unexpected == 0:
            unexpected = batch.num_rows  # a batch-level expectation: the whole batch
        rows = r.result.get("unexpected_index_list") or [] if r.result else []
        if rows:
            mask = pc.is_in(pa.array(range(batch.num_rows)), pa.array(rows, pa.int64()))
            failing[i] = mask
        results.append({"object_id": table.id, "expectation": e.name, "statement": statement,
                        "rows_evaluated": batch.num_rows, "unexpected": unexpected,
                        "action": e.action, "outcome": "passed" if r.success else e.action,
                        "sample": _sample(batch, failing.get(i), r)})
    report = _report(outcome)
    checked = _apply(table, found, batch, failing, results, statement, report)
    log.info("validated %d rows of %s against %d expectations in %.3f s", batch.num_rows,
             table.qualified_name, len(found), time.perf_counter() - started)
    return checked


def _ge_of(e: Expectation, i: int) -> Any:
    """The GE expectation that checks ``e`` (the ``i``-th of its object). A SQL condition
    is a column of the batch, named by the expectation and its text (Data Docs show it),
    whose values must not be false."""
    if e.kind == "sql":
        expectation = _ge_expectation(
            _ge_class("expect_column_values_to_not_be_in_set"),
            {"column": f"{e.name}: ({e.definition})", "value_set": [False]}, e.name)
    else:
        expectation = _ge_expectation(_ge_class(e.definition), json.loads(e.args), e.name)
    expectation.meta = {"mzflow": i, "name": e.name, "action": e.action}
    return expectation


def validate_changes(snap: Snapshot, view: Item, changes: pa.Table, statement: str
                     ) -> Checked | None:
    """A tick's output changes: only the rows it adds or whose count changed (a row it
    removes is not judged), never the whole view."""
    from mzflow.storage.delta import COUNT

    present = changes.filter(pc.greater(changes.column(COUNT), 0))
    return validate(snap, view, present.select([c.name for c in view.columns]), statement)


def _sample(batch: pa.Table, mask: pa.Array | None, r: Any) -> str:
    """Up to three failing rows (their values by column), else GE's own sample."""
    if mask is not None:
        rows = batch.filter(mask).slice(0, 3).drop_columns(
            [c for c in batch.column_names if c == ROWID]).to_pylist()
        return json.dumps(rows, default=str)
    partial = (r.result or {}).get("partial_unexpected_list") or []
    return json.dumps(partial[:3], default=str) if partial or not r.success else ""


def _report(outcome: Any) -> str:
    """GE's result as JSON, without the full unexpected lists (a batch of a million
    failing rows would store a million indexes)."""
    doc = outcome.to_json_dict()
    for r in doc.get("results", []):
        result = r.get("result") or {}
        for key in ("unexpected_list", "unexpected_index_list", "unexpected_index_query"):
            result.pop(key, None)
    return json.dumps(doc, default=str)


def _apply(table: Item, found: list[Expectation], batch: pa.Table,
           failing: dict[int, pa.Array], results: list[dict[str, Any]],
           statement: str, report: str) -> Checked:
    notices = [f'expectation "{r["expectation"]}" on "{table.name}": {r["unexpected"]} of '
               f'{r["rows_evaluated"]} rows failed ({r["action"]})'
               for r in results if r["unexpected"]]
    for i, e in enumerate(found):
        failed = next(r for r in results if r["expectation"] == e.name)
        if e.action == ddl.FAIL and failed["unexpected"]:
            rejected = Checked(kept=batch.slice(0, 0), quarantined=None, results=results,
                               report=report)
            raise _failure(table, e, batch, failing.get(i), failed, rejected)

    def union(action: str) -> pa.Array | None:
        masks = [m for i, m in failing.items() if found[i].action == action]
        if not masks:
            return None
        out = masks[0]
        for m in masks[1:]:
            out = pc.or_(out, m)
        return out

    quarantine, drop = union(ddl.QUARANTINE), union(ddl.DROP_ROW)
    removed = quarantine if drop is None else drop if quarantine is None else pc.or_(
        quarantine, drop)
    kept = batch if removed is None else batch.filter(pc.invert(removed))
    quarantined = None
    if quarantine is not None:
        bad = batch.filter(quarantine)
        names = [", ".join(found[i].name for i, m in sorted(failing.items())
                           if m[row].as_py()) for row in _indices(quarantine)]
        bad = bad.drop_columns([c for c in bad.column_names if c == ROWID])
        quarantined = (bad.append_column("_mz_expectations", pa.array(names, pa.string()))
                       .append_column("_mz_quarantined_at",
                                      pa.nulls(bad.num_rows, pa.int64()))
                       .append_column("_mz_statement",
                                      pa.array([statement] * bad.num_rows, pa.string())))
    return Checked(kept=kept, quarantined=quarantined, results=results, notices=notices,
                   report=report)


def _indices(mask: pa.Array) -> list[int]:
    return list(pc.indices_nonzero(mask).to_pylist())


def _failure(table: Item, e: Expectation, batch: pa.Table, mask: pa.Array | None,
             failed: dict[str, Any], checked: Checked) -> ExpectationFailed:
    detail = f"{failed['unexpected']} of {failed['rows_evaluated']} rows fail it."
    if mask is not None:
        row = batch.filter(mask).slice(0, 1).to_pylist()[0]
        values = ", ".join(f"{k}={v!r}" for k, v in row.items() if k != ROWID)
        detail = f"Failing row contains ({values}). " + detail
    elif failed["sample"]:
        detail = f"Unexpected values: {failed['sample']}. " + detail
    return ExpectationFailed(
        f'new row for relation "{table.name}" violates expectation "{e.name}"', checked,
        detail=detail, hint="nothing was written; fix the rows or change the action with "
                            "ALTER TABLE … DROP CONSTRAINT and ADD CONSTRAINT")


# -- the quarantine, exactly once -----------------------------------------------------------


def quarantine_of(snap: Snapshot, table: Item) -> Item:
    item = snap.find(ddl.quarantine_name(table.name))
    if item is None or item.kind != TABLE:
        raise Error(f'quarantine table "{ddl.quarantine_name(table.name)}" is missing',
                    hint="re-add a QUARANTINE expectation to create it")
    return item


def quarantine_rows(rows: pa.Table, quarantine: Item, ts: int, first_rowid: int) -> pa.Table:
    """The staged rows as the quarantine stores them: its columns (a column the table
    gained after the quarantine was made is left out), the time, row ids."""
    rows = rows.set_column(rows.column_names.index("_mz_quarantined_at"),
                           "_mz_quarantined_at", pa.array([ts] * rows.num_rows, pa.int64()))
    from mzflow.session.writes import targets_of
    from mzflow.storage import rows as rowconv

    names = [c.name for c in quarantine.columns]
    picked = pa.table({n: rows.column(n) if n in rows.column_names else
                       pa.nulls(rows.num_rows) for n in names})
    out = rowconv.conform(picked, targets_of(quarantine))
    ids = pa.array(range(first_rowid, first_rowid + rows.num_rows), pa.int64())
    return out.append_column(pa.field(ROWID, pa.int64(), nullable=False), ids)


def _pending_dir(warehouse: Path) -> Path:
    return warehouse / PENDING


def stage(warehouse: Path, table: Item, quarantine: Item, rows: pa.Table, ts: int) -> Path:
    """Make the quarantined rows durable before the table's commit."""
    folder = _pending_dir(warehouse)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"quarantine-{ts}-{table.id}.arrow"
    meta = {"table": str(paths.table(warehouse, table.id)),
            "quarantine": str(paths.table(warehouse, quarantine.id)),
            "app": _app(table), "ts": str(ts)}
    _write_durably(path, rows.replace_schema_metadata(meta))
    return path


def _app(table: Item) -> str:
    return f"quarantine-{table.id}"


def commit(path: Path) -> None:
    """Append the staged rows to the quarantine, once (idempotency key: the write's
    time), then drop the staged file."""
    with pa.memory_map(str(path)) as source:
        rows = pa.ipc.open_file(source).read_all()
    meta = {k.decode(): v.decode() for k, v in (rows.schema.metadata or {}).items()}
    ts = int(meta["ts"])
    shard = Shard(Path(meta["quarantine"]))
    done = shard.applied(meta["app"])
    if done is None or done < ts:
        shard.append(rows.replace_schema_metadata(None), ts, (meta["app"], ts))
    path.unlink()


def recover(warehouse: Path) -> None:
    """Under the write lock: finish or discard what a killed writer staged."""
    folder = _pending_dir(warehouse)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("quarantine-*.arrow")):
        with pa.memory_map(str(path)) as source:
            meta = {k.decode(): v.decode() for k, v in
                    (pa.ipc.open_file(source).schema.metadata or {}).items()}
        ts = int(meta["ts"])
        table = Shard(Path(meta["table"]))
        if table.path.exists() and any(t == ts for _, t in table.history()):
            log.warning("finishing the quarantine of a write at %d that was interrupted", ts)
            commit(path)
        else:
            log.warning("discarding the quarantine staged by a write at %d that never "
                        "committed", ts)
            path.unlink()
    for tmp in folder.glob("quarantine-*.tmp"):  # a tick's are its own (finish_tick)
        tmp.unlink()
    for path in folder.glob("tick-quarantine-*.arrow"):
        with pa.memory_map(str(path)) as source:
            meta = pa.ipc.open_file(source).schema.metadata or {}
        if not Path(meta[b"index"].decode()).exists():  # the view was dropped
            path.unlink()


# -- a view's quarantine, exactly once ------------------------------------------------------
# A tick's failing rows go to ``<view>_quarantine`` after the index's commit, as a table
# write with the idempotency key (quarantine-tick-<index>, tick time). They are staged
# first, so that a tick killed between the two commits leaves them for the index's next
# tick, which writes them if the index committed that time and drops them if it did not.


def tick_rows(checked: Checked, at: int, view: Item) -> pa.Table | None:
    """The rows a tick quarantines: the view's columns, the expectations, the time."""
    rows = checked.quarantined
    if rows is None or rows.num_rows == 0:
        return None
    return rows.set_column(rows.column_names.index("_mz_quarantined_at"),
                           "_mz_quarantined_at", pa.array([at] * rows.num_rows, pa.int64()))


def stage_tick(warehouse: Path, index: Item, view: Item, rows: pa.Table, at: int) -> Path:
    folder = _pending_dir(warehouse)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"tick-quarantine-{at}-{index.id}.arrow"
    meta = {"index": str(paths.index(warehouse, index.id)), "view": view.id, "ts": str(at),
            "app": f"tick-{index.id}"}
    _write_durably(path, rows.replace_schema_metadata(meta))
    return path


def staged_ticks(warehouse: Path, index: Item) -> list[Path]:
    folder = _pending_dir(warehouse)
    return sorted(folder.glob(f"tick-quarantine-*-{index.id}.arrow")) if folder.is_dir() else []


# (view id, rows, idempotency key): the session's table write of a tick's quarantine
Quarantine = Callable[[str, pa.Table, tuple[str, int]], None]


def finish_tick(path: Path, write: Quarantine) -> None:
    """Write a staged tick's quarantined rows if its index committed that tick; drop them
    if the index went past it without; leave them while neither is known (a tick still
    running)."""
    with pa.memory_map(str(path)) as source:
        rows = pa.ipc.open_file(source).read_all()
    meta = {k.decode(): v.decode() for k, v in (rows.schema.metadata or {}).items()}
    ts = int(meta["ts"])
    index = Shard(Path(meta["index"]))
    if index.path.exists() and any(t == ts for _, t in index.history()):
        write(meta["view"], rows.replace_schema_metadata(None),
              (f"quarantine-{meta['app']}", ts))
    elif index.path.exists():
        done = index.applied(meta["app"])
        if done is None or done <= ts:
            return  # not committed yet, maybe by a tick still running
    path.unlink()


def _write_durably(path: Path, rows: pa.Table) -> None:
    tmp = path.with_suffix(".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- Great Expectations' Data Docs -------------------------------------------------------


def build_docs(snap: Snapshot, runs: list[tuple[int, str, str, str]], folder: Path) -> Path:
    """GE's Data Docs site under ``folder``: one suite per object with expectations (as
    they stand) and every recorded validation of a batch. Returns the site's index."""
    import datetime as dt

    import great_expectations as gx
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    folder.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="file", project_root_dir=str(folder))
    names = {i.id: i.name for i in snap.items}
    for item in snap.items:
        found = snap.expectations_on(item.id)
        if found:
            ctx.suites.add_or_update(gx.ExpectationSuite(
                name=item.name, expectations=[_ge_of(e, i) for i, e in enumerate(found)]))
    for ts, object_id, statement, report in runs:
        doc = json.loads(report)
        name = names.get(object_id, object_id)  # a dropped object: its id
        when = dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
        run = RunIdentifier(run_name=statement.replace(" ", "_"), run_time=when)
        result = ExpectationSuiteValidationResult(
            results=[ExpectationValidationResult(**r) for r in doc.get("results", [])],
            suite_name=name, success=bool(doc.get("success")),
            statistics=doc.get("statistics"),
            meta={**(doc.get("meta") or {}), "run_id": run, "mzflow_time": ts})
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=name),
            run_id=run, batch_identifier=f"{name}-{ts}")
        ctx.validation_results_store.set(key, result)
    ctx.build_data_docs()
    return folder / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


# -- a summary per object, for the Airflow plugin ----------------------------------------


def summary(snap: Snapshot, warehouse: Path, results: list[tuple[Any, ...]]
            ) -> list[dict[str, Any]]:
    """Per object with expectations: its expectations, the batches validated, the rows
    that failed, the statements or ticks rejected (FAIL), the rows quarantined, and the
    rows its quarantine table holds now (delta-rs statistics: no Spark)."""
    out = []
    for item in snap.items:
        found = snap.expectations_on(item.id)
        if not found:
            continue
        mine = [r for r in results if r[1] == item.id]  # (ts, object_id, …) rows
        quarantine = snap.find(ddl.quarantine_name(item.name))
        held = None
        if quarantine is not None and quarantine.kind == TABLE:
            from deltalake import DeltaTable

            adds = pa.table(DeltaTable(str(paths.table(warehouse, quarantine.id)))
                            .get_add_actions(flatten=True))  # arro3 → pyarrow
            held = int(pc.sum(adds.column("num_records")).as_py() or 0) if adds.num_rows else 0
        out.append({"object": item.name, "expectations": len(found),
                    "batches": len({(r[0], r[3]) for r in mine}),
                    "failed_rows": sum(int(r[5]) for r in mine),
                    "rejected": len({(r[0], r[3]) for r in mine if r[7] == ddl.FAIL}),
                    "quarantined_rows": sum(int(r[5]) for r in mine
                                            if r[7] == ddl.QUARANTINE),
                    "in_quarantine": held})
    return out
