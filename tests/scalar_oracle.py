"""One scalar expression through PostgreSQL and through both of mzflow's engines, as
comparable outcomes: (type name, value) or the error's SQLSTATE.

- ``postgres``: a real server (the ``pg_url`` fixture), the oracle;
- ``in_process``: a constant SELECT planned and run by ``engine/local.py``, which
  must evaluate it in process (``arrow_constants`` folds it): falling back to Spark
  fails the comparison, so the in-process engine is really the one tested;
- ``on_spark``: the same expression over the columns of a one-row table, which only
  Spark evaluates (constants would be folded by Spark's optimizer, and a column
  reference keeps them from reaching any in-process path).

Values compare as PostgreSQL's text tells them apart, with one allowance: a numeric
of ``numeric(*,s)`` type keeps ``s`` decimal places for every value (Delta keeps one
scale per column), where PostgreSQL's values each carry their own; so two numerics
agree when the one with more decimal places, rounded to the other's, is the other.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from typing import Any

import mzflow
from mzflow.catalog.exprtypes import display_name
from mzflow.engine import local
from mzflow.plan.query import plan
from mzflow.sql.parse import parse


@dataclass(frozen=True)
class Outcome:
    type: str | None = None
    value: Any = None
    code: str | None = None  # SQLSTATE when it failed
    message: str = ""

    def __str__(self) -> str:
        if self.code is not None:
            return f"ERROR {self.code}: {self.message}"
        return f"{self.value!r} :: {self.type}"


def pg_outcomes(cur: Any, sql: str) -> list[Outcome]:
    """Each column of the one row ``sql`` returns, or its error (``cur`` autocommits)."""
    try:
        cur.execute(sql)
        row = cur.fetchone()
    except Exception as e:  # psycopg2.Error: the oracle's answer is the error
        code = getattr(e, "pgcode", None) or "?"
        return [Outcome(code=code, message=str(e).strip().splitlines()[0])]
    types = []
    for column in cur.description:
        cur.execute("SELECT format_type(%s, NULL)", (column.type_code,))
        name = cur.fetchone()[0]
        # psycopg2 reports an unconstrained numeric's typmod as precision 65535.
        if name == "numeric" and column.precision and column.precision < 1000:
            name = f"numeric({column.precision},{column.scale})"
        elif name == "character varying" and column.internal_size and column.internal_size > 0:
            name = f"character varying({column.internal_size})"
        types.append(name)
    return [Outcome(t, _pg_value(v)) for t, v in zip(types, row, strict=True)]


def _pg_value(v: Any) -> Any:
    return bytes(v) if isinstance(v, memoryview) else v


def in_process(conn: mzflow.Connection, sql: str) -> list[Outcome]:
    """A constant query, evaluated in process only (NotEvaluable is an outcome)."""
    try:
        p = plan(conn.store.snapshot(), parse(sql)[0])
        types = [c.type for c in p.bound.columns]
        rows = local.run(p.query, {}, types)
    except mzflow.Error as e:
        return [Outcome(code=e.code, message=f"{type(e).__name__}: {e}")]
    assert len(rows) == 1, rows
    return [Outcome(display_name(t), v) for t, v in zip(types, rows[0], strict=True)]


def on_spark(conn: mzflow.Connection, sql: str) -> list[Outcome]:
    try:
        result = conn.execute(sql)
    except mzflow.Error as e:
        return [Outcome(code=e.code, message=f"{type(e).__name__}: {e}")]
    assert len(result.rows) == 1, result.rows
    return [Outcome(t, v) for t, v in zip(result.types, result.rows[0], strict=True)]


# PostgreSQL's date/time reader tells a malformed text (22007) from an out-of-range
# field (22008) by its own reading of forms mzflow does not read (' 42 ' is a day).
_SAME_CODES = [{"22007", "22008"}]


def agree(ours: Outcome, pg: Outcome, ulps: int = 0) -> bool:
    if pg.code is not None or ours.code is not None:
        return ours.code == pg.code or any({ours.code, pg.code} <= s for s in _SAME_CODES)
    return ours.type == pg.type and same_value(ours.value, pg.value, ulps)


def same_value(a: Any, b: Any, ulps: int = 0) -> bool:
    """Equal as PostgreSQL's text tells them apart (``ulps``: how far two doubles may be
    apart, in units of their last place)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        if not (a.is_finite() and b.is_finite()):
            return str(a) == str(b)
        ea, eb = -a.as_tuple().exponent, -b.as_tuple().exponent  # type: ignore[operator]
        quantum = Decimal(1).scaleb(-min(ea, eb))
        with localcontext(Context(prec=300_000)):  # PostgreSQL's numeric: 131072 digits
            gap = abs(a.quantize(quantum, rounding=ROUND_HALF_UP)
                      - b.quantize(quantum, rounding=ROUND_HALF_UP))
        # Rounded at its own scale and then at the other's, a value may move one unit
        # in that last place (43.66827237527655449 → …5545 → …555, PostgreSQL's …554).
        return gap == 0 or (ea != eb and gap == quantum)
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if a == b:
            return math.copysign(1, a) == math.copysign(1, b)
        # exp, ln, cbrt, power…: C's libm (PostgreSQL) and Java's may differ in the last
        # bits; IEEE's correctly rounded operations may not.
        return ulps and math.isfinite(a) and abs(a - b) <= ulps * math.ulp(max(abs(a), abs(b)))
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        if (a.tzinfo is None) != (b.tzinfo is None):
            return False
        return a == b
    return type(a) is type(b) and a == b


def describe(sql: str, outcomes: Sequence[tuple[str, Outcome]]) -> str:
    return sql + "".join(f"\n  {who:>10}: {o}" for who, o in outcomes)
