"""PostgreSQL's semantics for functions, operators and casts Spark computes its own way,
as rewrites of the bound tree before it becomes Spark SQL (``spark.pg_semantics``
calls :func:`rewrite` on each node, deepest first).

The operand types come from the binder (``exprtypes.OPERANDS`` on the node). Where
Spark's answer would differ and no rewrite makes it agree (a double's shortest text),
the rewrite refuses by name: an error, never a different answer. An error a rewrite
raises while a row is evaluated is Spark's ``raise_error('mzflow:<SQLSTATE>:<message>')``,
which :func:`raised` turns back into PostgreSQL's error. ``render/arrow_functions.py``
is the in-process twin; ``tests/test_scalar_semantics.py`` checks both against
PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from mzflow.catalog.exprtypes import OPERANDS
from mzflow.errors import Error, Unsupported
from mzflow.sql import to_char

_PREFIX = "mzflow:"
_INTS = exp.DataType.INTEGER_TYPES
_FLOATS = (exp.DType.DOUBLE, exp.DType.FLOAT)
_TEXTS = (exp.DType.TEXT, exp.DType.VARCHAR, exp.DType.CHAR)


def rewrite(node: exp.Expr) -> exp.Expr:
    """``node`` as Spark SQL with PostgreSQL's result (``node`` itself if Spark's
    already is)."""
    handler = _REWRITES.get(type(node))
    return handler(node) if handler is not None else node


NODES = ()  # filled below: the node types rewrite() changes


def raised(text: str) -> Error | None:
    """The error a rewrite raised in Spark (``raise_error``), as PostgreSQL's."""
    from mzflow.render.spark import evaluation_error

    m = re.search(r"USER_RAISED_EXCEPTION\]\s*" + _PREFIX + r"(\w{5}):(.*?)(?:\s+SQLSTATE: \w+)?$",
                  text, flags=re.S | re.M)
    return evaluation_error(f"Evaluation error: {m.group(2)}", m.group(1)) if m else None


# -- building blocks ------------------------------------------------------------------


def _fn(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=[a.copy() for a in args])


def _str(text: str) -> exp.Expr:
    return exp.Literal.string(text)


def _fail(code: str, *message: exp.Expr | str) -> exp.Expr:
    parts = [_str(_PREFIX + code + ":")] + [_str(m) if isinstance(m, str) else m
                                            for m in message]
    return _fn("RAISE_ERROR", _fn("CONCAT", *parts) if len(parts) > 1 else parts[0])


def _case(*branches: tuple[exp.Expr, exp.Expr], default: exp.Expr | None = None) -> exp.Expr:
    case = exp.Case()
    for cond, value in branches:
        case = case.when(cond.copy(), value.copy())
    return case.else_(default.copy()) if default is not None else case


def _cast(e: exp.Expr, to: str) -> exp.Expr:
    return exp.Cast(this=e.copy(), to=exp.DataType.build(to, dialect="spark"))


def _operand(node: exp.Expr, i: int) -> exp.DataType | None:
    recorded = node.meta.get(OPERANDS)
    if recorded is not None and i < len(recorded):
        return recorded[i]
    return None


def _is(t: exp.DataType | None, *kinds: exp.DType) -> bool:
    return t is not None and t.is_type(*kinds)


def _name(t: exp.DataType) -> str:
    from mzflow.catalog.exprtypes import display_name, from_sqlglot

    return display_name(from_sqlglot(t))


def _double(value: str) -> exp.Expr:
    return _cast(_str(value), "DOUBLE")


# -- text -----------------------------------------------------------------------------


def text_of(e: exp.Expr, t: exp.DataType | None, *, cast: bool, what: str) -> exp.Expr:
    """``e`` (of type ``t``) as PostgreSQL's text: a cast's (``true``) or the output
    function's (``t``), as concat prints it."""
    if t is None or _is(t, *_TEXTS):
        return e
    if _is(t, exp.DType.BOOLEAN):
        if cast:
            return _cast(e, "STRING")
        return _case((e, _str("t")), (exp.Not(this=e.copy()), _str("f")))
    if _is(t, *_INTS, exp.DType.DECIMAL, exp.DType.DATE, exp.DType.TIMESTAMP,
           exp.DType.TIMESTAMPNTZ):
        return _cast(e, "STRING")
    if _is(t, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ):
        return _fn("CONCAT", _cast(e, "STRING"), _str("+00"))
    if _is(t, exp.DType.VARBINARY, exp.DType.BINARY):
        return _fn("CONCAT", _str("\\x"), _fn("LOWER", _fn("HEX", e)))
    # A double's text is its shortest digits (float8out); Spark's Java digits differ
    # ("1.0", "1.0E16").
    raise Unsupported(f"{what} of {_name(t)} is not supported on Spark yet",
                      hint="cast it to numeric first, e.g. x::numeric::text")


def _to_text(node: exp.Cast) -> exp.Expr:
    return text_of(node.this, _operand(node, 0), cast=True,
                   what="a cast to text")


def _concat(node: exp.Concat) -> exp.Expr:
    parts = [_fn("COALESCE", text_of(a, _operand(node, i), cast=False, what="concat"),
                 _str("")) for i, a in enumerate(node.expressions)]
    return _fn("CONCAT", *parts) if parts else _str("")


def _dpipe(node: exp.DPipe) -> exp.Expr:
    left, right = _operand(node, 0), _operand(node, 1)
    if _is(left, exp.DType.VARBINARY) or _is(right, exp.DType.VARBINARY):
        raise Unsupported("bytea || is not supported on Spark yet")
    return _fn("CONCAT", text_of(node.this, left, cast=True, what="||"),
               text_of(node.expression, right, cast=True, what="||"))


# -- casts ----------------------------------------------------------------------------


def _cast_node(node: exp.Cast) -> exp.Expr:
    to, src = node.to, _operand(node, 0)
    if to.is_type(exp.DType.DECIMAL) and not to.expressions:
        # Spark's bare DECIMAL is decimal(10,0); an unconstrained numeric keeps digits.
        out = node.copy()
        out.set("to", exp.DataType.build("DECIMAL(38, 10)"))
        return out
    if to.is_type(*_INTS) and _is(src, exp.DType.DECIMAL):  # Spark truncates
        return exp.Cast(this=_fn("ROUND", node.this, exp.Literal.number(0)), to=to.copy())
    if to.is_type(*_INTS) and _is(src, *_FLOATS):  # PostgreSQL's rint: half to even
        return exp.Cast(this=_fn("BROUND", node.this, exp.Literal.number(0)), to=to.copy())
    if to.is_type(exp.DType.TEXT) or (to.is_type(exp.DType.VARCHAR) and not to.expressions):
        return _to_text(node)
    if to.is_type(exp.DType.VARBINARY) and _is(src, *_TEXTS):
        return _bytea(node.this)
    if to.is_type(exp.DType.BOOLEAN) and _is(src, *_TEXTS):
        return _boolean(node.this)
    return node


_SPACE = " \t\n\r\f\v"  # what PostgreSQL's input functions skip: C's isspace()


def _boolean(e: exp.Expr) -> exp.Expr:
    """boolin: any unambiguous prefix of true/false/yes/no, on/off, 1/0."""
    word = _fn("LOWER", exp.Trim(this=e.copy(), expression=_str(_SPACE)))
    yes = ["t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"]
    no = ["f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"]
    return _case(
        (exp.In(this=word, expressions=[_str(w) for w in yes]), exp.true()),
        (exp.In(this=word, expressions=[_str(w) for w in no]), exp.false()),
        (exp.Is(this=e.copy(), expression=exp.null()), exp.Cast(
            this=exp.null(), to=exp.DataType.build("BOOLEAN"))),
        default=_fail("22P02", 'invalid input syntax for type boolean: "', e, '"'))


def _bytea(e: exp.Expr) -> exp.Expr:
    """byteain: ``\\x`` and hex digits, or text without backslashes (the escape format's
    other forms are refused as the rows reach them)."""
    hexed = _fn("UNHEX", _fn("SUBSTRING", e, exp.Literal.number(3)))
    starts = exp.Like(this=e.copy(), expression=_str("\\\\x%"))
    return _case(
        (exp.And(this=starts, expression=exp.Is(this=hexed, expression=exp.null())),
         _fail("22P02", 'invalid input syntax for type bytea: "', e, '"')),
        (starts, hexed),
        (exp.GT(this=_fn("INSTR", e, _str("\\")), expression=exp.Literal.number(0)),
         _fail("0A000", "bytea escape sequences are not supported on Spark yet")),
        default=_cast(e, "BINARY"))


# -- substr ---------------------------------------------------------------------------


def _substring(node: exp.Substring) -> exp.Expr:
    """PostgreSQL's substr: characters before position 1 count toward the length but
    yield nothing (Spark counts a negative start from the end); a negative length is
    an error; any NULL argument gives NULL."""
    s, start, length = node.this, node.args.get("start"), node.args.get("length")
    if start is None:
        return node
    first = exp.If(this=exp.LT(this=start.copy(), expression=exp.Literal.number(1)),
                   true=exp.Literal.number(1), false=start.copy())
    if length is None:
        return _fn("SUBSTRING", s, first)
    # The end, one past the last character, in bigint: start + length may overflow int.
    end = exp.Add(this=_cast(start, "BIGINT"), expression=length.copy())
    count = _fn("GREATEST", exp.Sub(this=end, expression=first.copy()),
                exp.Literal.number(0))
    nulls = exp.or_(*[exp.Is(this=a.copy(), expression=exp.null()) for a in (s, start, length)])
    return _case(
        (nulls, exp.Cast(this=exp.null(), to=exp.DataType.build("STRING"))),
        (exp.LT(this=length.copy(), expression=exp.Literal.number(0)),
         _fail("22011", "negative substring length not allowed")),
        default=_fn("SUBSTRING", s, first, _cast(_fn("LEAST", count, exp.Literal.number(
            2**31 - 1)), "INT")))


# -- to_char --------------------------------------------------------------------------


def _to_char(node: exp.ToChar) -> exp.Expr:
    template = node.args.get("format")
    if not (isinstance(template, exp.Literal) and template.is_string):
        raise Unsupported("to_char with a template that is not a constant is not supported "
                          "yet")
    src = _operand(node, 0)
    zoned = _is(src, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ, exp.DType.DATE)
    ts = _cast(node.this, "TIMESTAMP") if zoned else node.this  # a date: midnight, UTC
    parts = [_piece(p, ts, zoned) for p in to_char.parse(template.this)]
    value = _fn("CONCAT", *parts) if parts else _str("")
    return exp.If(this=exp.Is(this=node.this.copy(), expression=exp.null()),
                  true=exp.Cast(this=exp.null(), to=exp.DataType.build("STRING")),
                  false=value)


def _micros(ts: exp.Expr) -> exp.Expr:
    return _fn("PMOD", _fn("UNIX_MICROS", _cast(ts, "TIMESTAMP")), exp.Literal.number(1_000_000))


def _number(key: str, ts: exp.Expr) -> exp.Expr:
    def n(text: str) -> exp.Expr:
        return exp.Literal.number(text)

    year, hour = _fn("YEAR", ts), _fn("HOUR", ts)
    hour12 = exp.Add(this=_fn("PMOD", exp.Add(this=hour, expression=n("11")), n("12")),
                     expression=n("1"))
    seconds = exp.Add(this=exp.Add(this=exp.Mul(this=hour.copy(), expression=n("3600")),
                                   expression=exp.Mul(this=_fn("MINUTE", ts),
                                                      expression=n("60"))),
                      expression=_fn("SECOND", ts))
    values: dict[str, exp.Expr] = {
        "YYYY": year, "YYY": _fn("PMOD", year, n("1000")), "YY": _fn("PMOD", year, n("100")),
        "Y": _fn("PMOD", year, n("10")), "MM": _fn("MONTH", ts), "DD": _fn("DAY", ts),
        "DDD": _fn("DAYOFYEAR", ts), "D": _fn("DAYOFWEEK", ts),
        "ID": exp.Add(this=_fn("WEEKDAY", ts), expression=n("1")), "HH24": hour,
        "HH12": hour12, "HH": hour12, "MI": _fn("MINUTE", ts), "SS": _fn("SECOND", ts),
        "MS": exp.IntDiv(this=_micros(ts), expression=n("1000")), "US": _micros(ts),
        "Q": _fn("QUARTER", ts), "SSSS": seconds, "SSSSS": seconds,
        "CC": exp.Add(this=exp.IntDiv(this=exp.Sub(this=year.copy(), expression=n("1")),
                                      expression=n("100")), expression=n("1")),
    }
    for digits in range(1, 7):
        values[f"FF{digits}"] = exp.IntDiv(this=_micros(ts),
                                           expression=n(str(10 ** (6 - digits))))
    return values[key]


def _piece(p: to_char.Piece, ts: exp.Expr, zoned: bool) -> exp.Expr:
    key = p.key
    if key is None:
        return _str(p.text)
    if key == "Y,YYY":
        year = _fn("YEAR", ts)
        return _fn("CONCAT", _cast(exp.IntDiv(this=year, expression=exp.Literal.number(1000)),
                                   "STRING"), _str(","),
                   _fn("FORMAT_STRING", _str("%03d"),
                       _fn("PMOD", year, exp.Literal.number(1000))))
    if key in to_char.NUMBERS:
        width = {"YYYY": 4, "YYY": 3, "YY": 2, "Y": 1, "DDD": 3, "D": 1, "ID": 1, "MS": 3,
                 "US": 6, "Q": 1, "SSSS": 0, "SSSSS": 0}.get(key, 2)
        if key.startswith("FF"):
            width = int(key[2])
        if p.fill and key not in ("MS", "US") and not key.startswith("FF"):
            width = 0
        value = _number(key, ts)
        return _fn("FORMAT_STRING", _str(f"%0{width}d" if width else "%d"), value)
    if key in ("MONTH", "MON", "DAY", "DY"):
        pattern = {"MONTH": "MMMM", "MON": "MMM", "DAY": "EEEE", "DY": "EEE"}[key]
        name = _fn("DATE_FORMAT", ts, _str(pattern))
        if key in ("MONTH", "DAY") and not p.fill:
            name = _fn("RPAD", name, exp.Literal.number(9), _str(" "))
        if p.text.isupper():
            return _fn("UPPER", name)
        return _fn("LOWER", name) if p.text.islower() else name
    if key in ("AM", "PM", "A.M.", "P.M."):
        am, pm = ("A.M.", "P.M.") if "." in key else ("AM", "PM")
        if not p.text[0].isupper():
            am, pm = am.lower(), pm.lower()
        return exp.If(this=exp.GTE(this=_fn("HOUR", ts), expression=exp.Literal.number(12)),
                      true=_str(pm), false=_str(am))
    if key == "TZ":
        return _str(("UTC" if p.text == "TZ" else "utc") if zoned else "")
    return _str("+00")  # OF: the session's zone is UTC


# -- transcendental functions of doubles ---------------------------------------------


def _math(node: exp.Expr) -> exp.Expr:
    """Spark returns NULL, NaN or infinity where PostgreSQL raises an error."""
    if node.is_type(exp.DType.DECIMAL):
        # The binder refused numeric arguments that read columns; a constant one is
        # computed in process, exactly.
        return _numeric_constant(node)
    x, y = node.this, node.args.get("expression")
    zero, inf = exp.Literal.number(0), _double("Infinity")
    finite_x = exp.NEQ(this=_fn("ABS", x), expression=inf)
    name = node.key
    if isinstance(node, exp.Log) and y is not None:
        raise Unsupported("log(double precision, double precision) does not exist")
    if isinstance(node, exp.Ln | exp.Log):
        return _case((exp.EQ(this=x.copy(), expression=zero),
                      _fail("2201E", "cannot take logarithm of zero")),
                     (exp.LT(this=x.copy(), expression=zero),
                      _fail("2201E", "cannot take logarithm of a negative number")),
                     default=_fn("LN" if isinstance(node, exp.Ln) else "LOG10", x))
    if isinstance(node, exp.Sqrt):
        return _case((exp.LT(this=x.copy(), expression=zero),
                      _fail("2201F", "cannot take square root of a negative number")),
                     default=_fn("SQRT", x))
    if isinstance(node, exp.Exp):
        r = _fn("EXP", x)
        return _case((exp.And(this=exp.EQ(this=r, expression=inf), expression=finite_x),
                      _fail("22003", "value out of range: overflow")),
                     (exp.And(this=exp.EQ(this=r.copy(), expression=zero),
                              expression=finite_x.copy()),
                      _fail("22003", "value out of range: underflow")),
                     default=r)
    if isinstance(node, exp.Pow):
        assert y is not None
        r = _fn("POWER", x, y)
        finite = exp.And(this=finite_x, expression=exp.NEQ(this=_fn("ABS", y), expression=inf))
        return _case(
            (exp.EQ(this=x.copy(), expression=exp.Literal.number(1)), _double("1")),
            (exp.And(this=exp.EQ(this=x.copy(), expression=zero),
                     expression=exp.LT(this=y.copy(), expression=zero)),
             _fail("2201F", "zero raised to a negative power is undefined")),
            (exp.And(this=exp.And(this=exp.LT(this=x.copy(), expression=zero),
                                  expression=exp.NEQ(this=y.copy(),
                                                     expression=_fn("FLOOR", y))),
                     expression=exp.NEQ(this=_fn("ABS", y), expression=inf.copy())),
             _fail("2201F", "a negative number raised to a non-integer power yields a "
                            "complex result")),
            (exp.And(this=exp.EQ(this=_fn("ABS", r), expression=inf.copy()),
                     expression=finite),
             _fail("22003", "value out of range: overflow")),
            (exp.And(this=exp.And(this=exp.EQ(this=r.copy(), expression=zero),
                                  expression=exp.NEQ(this=x.copy(), expression=zero)),
                     expression=finite.copy()),
             _fail("22003", "value out of range: underflow")),
            default=r)
    raise Unsupported(f"function {name} is not supported on Spark yet")


def _numeric_constant(node: exp.Expr) -> exp.Expr:
    """A numeric exp/ln/log/sqrt/power of constants: its exact value, computed in
    process (``arrow_functions``), as a literal of the bound type."""
    from mzflow.errors import Unsupported as Refused
    from mzflow.render import arrow_constants

    if node.find(exp.Column):
        raise Refused(f"function {node.key}(numeric) of column values is not supported yet",
                      hint="cast its argument to double precision")
    value = arrow_constants.value(node.copy()).to_pylist()[0]
    t = node.type.copy() if isinstance(node.type, exp.DataType) else exp.DataType.build(
        "DECIMAL(38, 16)")
    if value is None:
        return exp.Cast(this=exp.null(), to=t)
    return exp.Cast(this=_str(format(value, "f")), to=t)


_REWRITES: dict[type[exp.Expr], Callable[[exp.Expr], exp.Expr]] = {
    exp.Cast: _cast_node, exp.Concat: _concat, exp.DPipe: _dpipe,  # type: ignore[dict-item]
    exp.Substring: _substring, exp.ToChar: _to_char,  # type: ignore[dict-item]
    exp.Ln: _math, exp.Log: _math, exp.Sqrt: _math, exp.Exp: _math, exp.Pow: _math,
}
NODES = tuple(_REWRITES)  # type: ignore[assignment]
