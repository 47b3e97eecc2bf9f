"""``generate_series`` in Spark SQL, with PostgreSQL's semantics.

Spark's ``sequence`` differs from PostgreSQL's ``generate_series`` where it matters:
``sequence(3, 1)`` counts down (PostgreSQL: no rows, the step is 1), a step of the
wrong sign is an error (PostgreSQL: no rows), it has no numeric variant, and it adds
a month step as ``start + i months`` (PostgreSQL adds the step again and again, so
``Jan 31 + 1 month + 1 month`` is Mar 29, not Mar 31). Each bound call (the binder
typed it and cast its arguments, ``catalog/srf.py``) becomes an array expression:
NULL when an argument is NULL (the function is strict: no rows), an error for a zero
step, empty for a range the step moves away from, else the elements. A FROM item's
calls are exploded together, zipped to the longest as PostgreSQL does.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from sqlglot import exp

from mzflow.catalog.exprtypes import base, scale
from mzflow.catalog.srf import (
    SERIES_SCALE,
    SERIES_STEP,
    SERIES_TYPE,
    STAMPS,
    calls_of,
    is_series,
)
from mzflow.storage.types import parse_type

ZERO_STEP = "step size cannot equal zero"  # PostgreSQL's words (SQLSTATE 22023)
_DAY_US = 86_400_000_000
# Numeric elements are start + i * step computed exactly: i as DECIMAL(10,0), the step
# as DECIMAL(26,s) and the start as DECIMAL(37,s) keep Spark's result types within 38
# digits, where it would otherwise drop decimal places.
_STEP_PRECISION, _START_PRECISION = 26, 37

ArgSql = Callable[[exp.Expr], str]


def generator_sql(calls: list[exp.Expr], arg_sql: ArgSql) -> str:
    """A Spark generator over the calls' elements: one output column per call."""
    arrays = [array_sql(c, arg_sql) for c in calls]
    if len(arrays) == 1:
        return f"explode({arrays[0]})"
    # A NULL array (strict call) zips as an empty one: the other calls keep their rows.
    return "inline(arrays_zip({}))".format(
        ", ".join(f"coalesce({a}, array())" for a in arrays))


def array_sql(call: exp.Expr, arg_sql: ArgSql) -> str:
    """The call's elements as a Spark array (NULL for no rows)."""
    result = call.meta[SERIES_TYPE]
    spark_type = parse_type(result).spark
    args = [f"({arg_sql(a)})" for a in call.expressions]
    if base(result) in STAMPS:
        return _timestamps(args[0], args[1], call.meta[SERIES_STEP], spark_type)
    start, stop = args[0], args[1]
    step = args[2] if len(args) > 2 else f"CAST(1 AS {spark_type})"
    nulls = f"{start} IS NULL OR {stop} IS NULL OR {step} IS NULL"
    elements = ""
    if base(result) == "numeric":
        # Spark compares two 38-digit decimals of different scales in a common type that
        # drops the larger scale (1.1 <= 1 holds): compare in the stop's scale or finer.
        compare = f"DECIMAL(38,{call.meta[SERIES_SCALE]})"
        start, stop = f"CAST({start} AS {compare})", f"CAST({stop} AS {compare})"
        s = scale(result)
        first = f"CAST({start} AS DECIMAL({_START_PRECISION},{s}))"
        inc = f"CAST({step} AS DECIMAL({_STEP_PRECISION},{s}))"
        # The count may round up in Spark's decimal division (the filter drops the extra
        # element), never down by a whole step.
        count = f"CAST(floor(({stop} - {start}) / {step}) AS BIGINT) + 1"
        elements = (f"filter(transform(sequence(0L, {count}), i -> CAST({first} + "
                    f"CAST(i AS DECIMAL(10,0)) * {inc} AS {spark_type})), "
                    f"x -> IF({step} > 0, CAST(x AS {compare}) <= {stop}, "
                    f"CAST(x AS {compare}) >= {stop}))")
    away = f"({step} > 0 AND {start} > {stop}) OR ({step} < 0 AND {start} < {stop})"
    if not elements:
        # In bigint, so that the last step past a large int4 stop cannot overflow.
        elements = (f"transform(sequence(CAST({start} AS BIGINT), CAST({stop} AS BIGINT), "
                    f"CAST({step} AS BIGINT)), x -> CAST(x AS {spark_type}))")
    return (f"CASE WHEN {nulls} THEN CAST(NULL AS ARRAY<{spark_type}>) "
            f"WHEN {step} = 0 THEN CAST(raise_error('{ZERO_STEP}') AS ARRAY<{spark_type}>) "
            f"WHEN {away} THEN CAST(array() AS ARRAY<{spark_type}>) "
            f"ELSE {elements} END")


def _timestamps(start: str, stop: str, step: tuple[int, int, int] | None,
                spark_type: str) -> str:
    null = f"CAST(NULL AS ARRAY<{spark_type}>)"
    if step is None:
        return null
    months, days, micros = step
    # PostgreSQL orders intervals by a 30-day month (interval_cmp).
    sign = (months * 30 * _DAY_US + days * _DAY_US + micros > 0) - (
        months * 30 * _DAY_US + days * _DAY_US + micros < 0)
    nulls = f"{start} IS NULL OR {stop} IS NULL"
    if sign == 0:
        return (f"CASE WHEN {nulls} THEN {null} "
                f"ELSE CAST(raise_error('{ZERO_STEP}') AS ARRAY<{spark_type}>) END")
    away = f"{start} > {stop}" if sign > 0 else f"{start} < {stop}"
    if months == 0:
        # A fixed length: start + i * step, which is what adding it again and again gives.
        total = days * _DAY_US + micros
        elements = f"sequence({start}, {stop}, make_dt_interval(0, 0, 0, {_seconds(total)}))"
    else:
        # Months are added one step at a time, as PostgreSQL does (a day clamped to a
        # short month stays clamped). Each step moves |months| calendar months (its days
        # and microseconds have the same sign), so the month count bounds the steps.
        interval = f"make_interval(0, {months}, 0, {days}, 0, 0, {_seconds(micros)})"
        span = (f"(year({stop}) * 12 + month({stop})) - (year({start}) * 12 + month({start}))"
                if sign > 0 else
                f"(year({start}) * 12 + month({start})) - (year({stop}) * 12 + month({stop}))")
        steps = f"CAST(floor(({span}) / {abs(months)}) AS INT) + 1"
        past = f"x <= {stop}" if sign > 0 else f"x >= {stop}"
        elements = (f"filter(aggregate(sequence(1, {steps}), array({start}), "
                    f"(acc, i) -> concat(acc, array(element_at(acc, -1) + {interval}))), "
                    f"x -> {past})")
    return (f"CASE WHEN {nulls} THEN {null} "
            f"WHEN {away} THEN CAST(array() AS ARRAY<{spark_type}>) "
            f"ELSE CAST({elements} AS ARRAY<{spark_type}>) END")


def _seconds(micros: int) -> str:
    return f"CAST('{Decimal(micros).scaleb(-6)}' AS DECIMAL(18,6))"


def to_spark(query: exp.Expr, arg_sql: ArgSql) -> None:
    """Rewrite a bound query's set-returning FROM items into Spark's LATERAL generators
    (in place)."""
    for item in list(query.find_all(exp.Lateral)):
        if is_series(item):
            item.set("this", exp.Var(this=generator_sql(calls_of(item), arg_sql)))
