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
the passing rows and writes the failing ones to ``<table>_quarantine`` (quarantine.py);
FAIL rejects the statement, naming one failing row. A row failing several expectations
meets the strongest action: FAIL, then QUARANTINE (a bad row must not vanish), then
DROP ROW.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from functools import lru_cache
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

log = logging.getLogger("mzflow.quality")

ROW_ACTIONS = (ddl.DROP_ROW, ddl.QUARANTINE)


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


@lru_cache(maxsize=1)  # one ephemeral Great Expectations context per process
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
        expectation = ge_of(e, i)
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


def ge_of(e: Expectation, i: int) -> Any:
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
