"""Dates and times for ``pg_functions.py``: to_char, date ± integer, date - date,
date_trunc's units, interval literals Spark cannot read."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from sqlglot import exp

from mzflow.engine.spark.pg_base import INTS, case, cast, fail, fn, is_, lit, op, operand, paren
from mzflow.errors import Unsupported
from mzflow.sql import to_char

# -- to_char --------------------------------------------------------------------------


def _to_char(node: exp.ToChar) -> exp.Expr:
    template = node.args.get("format")
    if not (isinstance(template, exp.Literal) and template.is_string):
        raise Unsupported("to_char with a template that is not a constant is not supported "
                          "yet")
    src = operand(node, 0)
    zoned = is_(src, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ, exp.DType.DATE)
    ts = cast(node.this, "TIMESTAMP") if zoned else node.this  # a date: midnight, UTC
    parts = [_piece(p, ts, zoned) for p in to_char.parse(template.this)]
    value = fn("CONCAT", *parts) if parts else lit("")
    return exp.If(this=exp.Is(this=node.this.copy(), expression=exp.null()),
                  true=exp.Cast(this=exp.null(), to=exp.DataType.build("STRING")),
                  false=value)


def _micros(ts: exp.Expr) -> exp.Expr:
    return fn("PMOD", fn("UNIX_MICROS", cast(ts, "TIMESTAMP")), exp.Literal.number(1_000_000))


def _number(key: str, ts: exp.Expr) -> exp.Expr:
    def n(text: str) -> exp.Expr:
        return exp.Literal.number(text)

    year, hour = fn("YEAR", ts), fn("HOUR", ts)
    hour12 = op(exp.Add, this=fn("PMOD", op(exp.Add, this=hour, expression=n("11")), n("12")),
                     expression=n("1"))
    seconds = op(exp.Add, this=op(exp.Add, this=op(exp.Mul, this=hour.copy(), expression=n("3600")),
                                   expression=op(exp.Mul, this=fn("MINUTE", ts),
                                                      expression=n("60"))),
                      expression=fn("SECOND", ts))
    values: dict[str, exp.Expr] = {
        "YYYY": year, "YYY": fn("PMOD", year, n("1000")), "YY": fn("PMOD", year, n("100")),
        "Y": fn("PMOD", year, n("10")), "MM": fn("MONTH", ts), "DD": fn("DAY", ts),
        "DDD": fn("DAYOFYEAR", ts), "D": fn("DAYOFWEEK", ts),
        "ID": op(exp.Add, this=fn("WEEKDAY", ts), expression=n("1")), "HH24": hour,
        "HH12": hour12, "HH": hour12, "MI": fn("MINUTE", ts), "SS": fn("SECOND", ts),
        "MS": op(exp.IntDiv, this=_micros(ts), expression=n("1000")), "US": _micros(ts),
        "Q": fn("QUARTER", ts), "SSSS": seconds, "SSSSS": seconds,
        "CC": op(exp.Add, this=op(exp.IntDiv, this=op(exp.Sub, this=year.copy(), expression=n("1")),
                                      expression=n("100")), expression=n("1")),
    }
    for digits in range(1, 7):
        values[f"FF{digits}"] = op(exp.IntDiv, this=_micros(ts),
                                           expression=n(str(10 ** (6 - digits))))
    return values[key]


def _piece(p: to_char.Piece, ts: exp.Expr, zoned: bool) -> exp.Expr:
    key = p.key
    if key is None:
        return lit(p.text)
    if key == "Y,YYY":
        year = fn("YEAR", ts)
        return fn("CONCAT", cast(op(exp.IntDiv, this=year, expression=exp.Literal.number(1000)),
                                   "STRING"), lit(","),
                   fn("FORMAT_STRING", lit("%03d"),
                       fn("PMOD", year, exp.Literal.number(1000))))
    if key in to_char.NUMBERS:
        width = {"YYYY": 4, "YYY": 3, "YY": 2, "Y": 1, "DDD": 3, "D": 1, "ID": 1, "MS": 3,
                 "US": 6, "Q": 1, "SSSS": 0, "SSSSS": 0}.get(key, 2)
        if key.startswith("FF"):
            width = int(key[2])
        if p.fill and key not in ("MS", "US") and not key.startswith("FF"):
            width = 0
        value = _number(key, ts)
        return fn("FORMAT_STRING", lit(f"%0{width}d" if width else "%d"), value)
    if key in ("MONTH", "MON", "DAY", "DY"):
        pattern = {"MONTH": "MMMM", "MON": "MMM", "DAY": "EEEE", "DY": "EEE"}[key]
        name = fn("DATE_FORMAT", ts, lit(pattern))
        if key in ("MONTH", "DAY") and not p.fill:
            name = fn("RPAD", name, exp.Literal.number(9), lit(" "))
        if p.text.isupper():
            return fn("UPPER", name)
        return fn("LOWER", name) if p.text.islower() else name
    if key in ("AM", "PM", "A.M.", "P.M."):
        am, pm = ("A.M.", "P.M.") if "." in key else ("AM", "PM")
        if not p.text[0].isupper():
            am, pm = am.lower(), pm.lower()
        return exp.If(this=op(exp.GTE, this=fn("HOUR", ts), expression=exp.Literal.number(12)),
                      true=lit(pm), false=lit(am))
    if key == "TZ":
        return lit(("UTC" if p.text == "TZ" else "utc") if zoned else "")
    return lit("+00")  # OF: the session's zone is UTC


# Days from 1970-01-01 to PostgreSQL's first and past its last date (4714-11-24 BC,
# 5874897-12-31), and to the first and last Spark and Python hold (years 1 to 9999).
PG_DAYS = (-2440588, 2145042905)
HELD_DAYS = (-719162, 2932896)


def _date_arith(node: exp.Add | exp.Sub) -> exp.Expr:
    """date - date is an integer in PostgreSQL, an interval in Spark. date ± integer
    past PostgreSQL's range is its error; a date past 9999-12-31, which PostgreSQL
    holds and Spark does not, is refused (Spark gave NULL)."""
    left, right = operand(node, 0), operand(node, 1)
    if isinstance(node, exp.Sub) and is_(left, exp.DType.DATE) and is_(right, exp.DType.DATE):
        return fn("DATEDIFF", node.this, node.expression)
    if is_(left, exp.DType.INTERVAL) or is_(right, exp.DType.INTERVAL):
        return _plus_interval(node)
    date, days = node.this, node.expression
    if isinstance(node, exp.Add) and is_(right, exp.DType.DATE) and is_(left, *INTS):
        date, days = days, date
        left, right = right, left
    if not (is_(left, exp.DType.DATE) and is_(right, *INTS)):
        from mzflow.engine.spark.pg_numbers import widened

        return widened(node)
    delta = cast(days, "BIGINT")
    if isinstance(node, exp.Sub):
        delta = exp.Neg(this=paren(delta))
    total = op(exp.Add, this=fn("DATEDIFF", date, cast(lit("1970-01-01"), "DATE")),
                    expression=delta)

    def outside(bounds: tuple[int, int]) -> exp.Expr:
        return exp.or_(op(exp.LT, this=total.copy(), expression=exp.Literal.number(bounds[0])),
                       op(exp.GT, this=total.copy(), expression=exp.Literal.number(bounds[1])))

    return case((outside(PG_DAYS), fail("22008", "date out of range")),
                 (outside(HELD_DAYS), fail("0A000", "dates after 9999-12-31 or before "
                                                     "0001-01-01 are not supported yet")),
                 default=fn("DATE_ADD", date, cast(delta, "INT")))


def _interval_parts(node: exp.Expr) -> tuple[int, int, int] | None:
    """(months, days, microseconds) of an interval constant, as PostgreSQL reads it."""
    from mzflow.engine.pg_text import parse_interval

    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal):
        unit = node.args.get("unit")
        return parse_interval(node.this.this, unit.name if unit is not None else None)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.to.is_type(
            exp.DType.INTERVAL):
        return parse_interval(node.this.this)
    return None


def _plus_interval(node: exp.Add | exp.Sub) -> exp.Expr:
    """``x ± interval`` as PostgreSQL adds it, months first, then days and time, each
    part of Spark's own kind (its literals refuse ``1.5 days``; one literal cannot mix
    months with days)."""
    value, interval = node.this, node.expression
    if isinstance(node, exp.Add) and is_(operand(node, 0), exp.DType.INTERVAL):
        value, interval = interval, value
    parts = _interval_parts(interval)
    if parts is None:
        return node
    months, days, micros = parts
    sign = -1 if isinstance(node, exp.Sub) else 1
    out = value.copy()
    if is_(operand(node, 0 if value is node.this else 1), exp.DType.DATE):
        out = cast(out, "TIMESTAMP_NTZ")  # date + interval is a timestamp (Spark: a date)
    if months:
        out = op(exp.Add, this=out, expression=fn("MAKE_YM_INTERVAL", exp.Literal.number(0),
                                              exp.Literal.number(sign * months)))
    if days or micros or not months:
        seconds = str(Decimal(sign * micros).scaleb(-6))
        out = op(exp.Add, this=out, expression=fn(
            "MAKE_DT_INTERVAL", exp.Literal.number(sign * days), exp.Literal.number(0),
            exp.Literal.number(0), exp.Cast(this=exp.Literal.number(seconds),
                                            to=exp.DataType.build("DECIMAL(18, 6)"))))
    return out


_TRUNC_UNITS = {"microsecond": "MICROSECOND", "millisecond": "MILLISECOND",
                "second": "SECOND", "minute": "MINUTE", "hour": "HOUR", "day": "DAY",
                "week": "WEEK", "month": "MONTH", "quarter": "QUARTER", "year": "YEAR"}


def _date_trunc(node: exp.TimestampTrunc) -> exp.Expr:
    """PostgreSQL's units (plural too; decades, centuries and millennia start at years
    ending in 0, 01 and 001) as Spark's."""
    unit = node.args.get("unit")
    name = (unit.name if unit is not None else "").lower()
    name = name[:-1] if name.endswith("s") and name != "s" else name
    name = {"millennia": "millennium", "centurie": "century"}.get(name, name)
    src = operand(node, 0)
    zoned = not is_(src, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPNTZ)
    ts = cast(node.this, "TIMESTAMP") if is_(src, exp.DType.DATE) else node.this
    if name in _TRUNC_UNITS:
        return fn("DATE_TRUNC", lit(_TRUNC_UNITS[name]), ts)
    year = fn("YEAR", ts)
    start = {"decade": op(exp.Sub, this=year, expression=fn("PMOD", year, exp.Literal.number(10))),
             "century": op(exp.Add, this=op(exp.Mul, this=op(exp.IntDiv,
                 this=op(exp.Sub, this=year.copy(), expression=exp.Literal.number(1)),
                 expression=exp.Literal.number(100)), expression=exp.Literal.number(100)),
                 expression=exp.Literal.number(1)),
             "millennium": op(exp.Add, this=op(exp.Mul, this=op(exp.IntDiv,
                 this=op(exp.Sub, this=year.copy(), expression=exp.Literal.number(1)),
                 expression=exp.Literal.number(1000)), expression=exp.Literal.number(1000)),
                 expression=exp.Literal.number(1))}.get(name)
    if start is None:
        raise Unsupported(f'date_trunc unit "{name}" is not supported yet')
    one = exp.Literal.number(1)
    zero = exp.Literal.number(0)
    return fn("MAKE_TIMESTAMP" if zoned else "MAKE_TIMESTAMP_NTZ", start, one, one.copy(),
               zero, zero.copy(), zero.copy())


def _extract(node: exp.Extract) -> exp.Expr:
    """extract(field FROM x) by PostgreSQL's fields: Spark lacks some (decade, century,
    millennium, epoch) and counts dow from 1."""
    unit = node.this.name.lower() if isinstance(node.this, exp.Var | exp.Identifier) else ""
    unit = {"milliseconds": "millisecond", "microseconds": "microsecond"}.get(unit, unit)
    x = node.expression
    if is_(operand(node, 0), exp.DType.DATE):
        x = cast(x, "TIMESTAMP")
    n = exp.Literal.number
    year = fn("YEAR", x)
    second = exp.Extract(this=exp.Var(this="SECOND"), expression=x.copy())  # decimal(8,6)
    values: dict[str, exp.Expr] = {
        "year": year, "month": fn("MONTH", x), "day": fn("DAY", x), "hour": fn("HOUR", x),
        "minute": fn("MINUTE", x), "quarter": fn("QUARTER", x), "doy": fn("DAYOFYEAR", x),
        "dow": op(exp.Sub, this=fn("DAYOFWEEK", x), expression=n(1)),
        "isodow": op(exp.Add, this=fn("WEEKDAY", x), expression=n(1)),
        "week": fn("WEEKOFYEAR", x),
        "isoyear": exp.Extract(this=exp.Var(this="YEAROFWEEK"), expression=x.copy()),
        "second": second,
        "millisecond": op(exp.Mul, this=second, expression=n(1000)),
        "microsecond": op(exp.Mul, this=second, expression=n(1_000_000)),
        "epoch": op(exp.Div, this=cast(fn("UNIX_MICROS", cast(x, "TIMESTAMP")), "DECIMAL(38,6)"),
                    expression=n(1_000_000)),
        "decade": fn("FLOOR", op(exp.Div, this=year, expression=n(10))),
        "century": fn("FLOOR", op(exp.Div, this=op(exp.Add, this=year, expression=n(99)),
                                  expression=n(100))),
        "millennium": fn("FLOOR", op(exp.Div, this=op(exp.Add, this=year, expression=n(999)),
                                     expression=n(1000))),
    }
    if unit not in values:
        raise Unsupported(f'extract field "{unit}" is not supported yet')
    return values[unit]


REWRITES: dict[type[exp.Expr], Callable[[exp.Expr], exp.Expr]] = {
    exp.ToChar: _to_char, exp.Sub: _date_arith, exp.Add: _date_arith,  # type: ignore[dict-item]
    exp.TimestampTrunc: _date_trunc, exp.Extract: _extract,  # type: ignore[dict-item]
}
