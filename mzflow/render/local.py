"""Run a query in-process over small in-memory relations (the system tables).

Catalog queries must answer in milliseconds and never start a JVM, so they
run on sqlglot's Python executor instead of Spark. It is only ever handed
catalog-sized inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import ExecuteError, OptimizeError
from sqlglot.executor import execute

from mzflow.catalog.bind import bind_error
from mzflow.errors import Error, Unsupported
from mzflow.sql.parse import DIALECT

Rows = list[tuple[object, ...]]


def run(query: exp.Query, tables: Mapping[str, tuple[Sequence[str], Rows]]) -> Rows:
    data = {name: [dict(zip(cols, row, strict=True)) for row in rows]
            for name, (cols, rows) in tables.items()}
    # The executor infers columns from the first row; an empty table needs a schema.
    schema = {name: dict.fromkeys(cols, "text") for name, (cols, _) in tables.items()}
    try:
        result = execute(query, tables=data, schema=schema, dialect=DIALECT)
    except ExecuteError as e:
        raise Error(_clean(str(e))) from None
    except OptimizeError as e:
        # A name the caller did not bind, such as a column in SHOW … WHERE.
        raise bind_error(e) from None
    except (NotImplementedError, KeyError) as e:
        raise Unsupported(f"this catalog query is not supported: {e}") from None
    return [tuple(r) for r in result.rows]


def _clean(msg: str) -> str:
    return msg.split("\n")[0]
