"""Run a query in-process over small in-memory relations (the system tables).

Catalog queries must answer in milliseconds and never start a JVM, so they
run on sqlglot's Python executor instead of Spark. It is only ever handed
catalog-sized inputs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import ExecuteError, OptimizeError
from sqlglot.executor import execute

from mzflow.catalog.bind import bind_error, output_name
from mzflow.errors import Error, Unsupported
from mzflow.sql.parse import DIALECT

Rows = list[tuple[object, ...]]


def run(query: exp.Query, tables: Mapping[str, tuple[Sequence[str], Rows]]) -> Rows:
    data = {name: [dict(zip(cols, row, strict=True)) for row in rows]
            for name, (cols, rows) in tables.items()}
    # The executor infers columns from the first row; an empty table needs a schema.
    schema = {name: dict.fromkeys(cols, "text") for name, (cols, _) in tables.items()}
    for agg in query.find_all(exp.AggFunc):
        if isinstance(agg.this, exp.Order):  # the executor cannot parse it, let alone sort
            raise NotEvaluable(f"{output_name(agg)} with ORDER BY over catalog tables is "
                               "not supported yet")
    try:
        result = execute(query, tables=data, schema=schema, dialect=DIALECT)
    except ExecuteError as e:
        raise _execute_error(e) from None
    except OptimizeError as e:
        # A name the caller did not bind, such as a column in SHOW … WHERE.
        raise bind_error(e) from None
    except (NotImplementedError, KeyError) as e:
        raise Unsupported(f"this catalog query is not supported: {e}") from None
    return [tuple(r) for r in result.rows]


class NotEvaluable(Unsupported):
    """The Python executor cannot evaluate this (a function it lacks, NULL arithmetic):
    a query that reads no catalog table then runs on Spark instead."""


def _execute_error(e: ExecuteError) -> Error:
    """The Python executor's failure (it wraps the Python exception) → the error
    PostgreSQL raises for the same condition, or :class:`NotEvaluable`."""
    from mzflow.render.spark import evaluation_error  # no pyspark import: only the class

    cause = e.__cause__
    text = str(cause or e)
    if isinstance(cause, ZeroDivisionError):
        return evaluation_error("Evaluation error: division by zero", "22012")
    m = re.match(r"invalid literal for int\(\) with base 10: '(.*)'$", text)
    if isinstance(cause, ValueError) and m:
        return evaluation_error(
            f'Evaluation error: invalid input syntax for type integer: "{m.group(1)}"',
            "22P02")
    m = re.match(r"name '(\w+)' is not defined", text)
    if isinstance(cause, NameError) and m:
        return NotEvaluable(f"function {m.group(1).lower()} does not exist")
    return NotEvaluable(str(e).split("\n")[0])
