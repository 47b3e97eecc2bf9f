"""PostgreSQL's semantics for functions, operators and casts Spark computes its own way,
as rewrites of the bound tree before it becomes Spark SQL (``pg_sql.pg_semantics``
calls :func:`rewrite` on each node, deepest first). Dates and times are in
``pg_time.py``, numbers in ``pg_numbers.py``.

The operand types come from the binder (``exprtypes.OPERANDS`` on the node). Where
Spark's answer would differ and no rewrite makes it agree (a double's shortest text),
the binder refuses by name, or the rewrite does: an error, never a different answer.
An error a rewrite raises while a row is evaluated is Spark's
``raise_error('mzflow:<SQLSTATE>:<message>')``, which :func:`raised` turns back into
PostgreSQL's error. ``engine/arrow_functions.py`` is the in-process twin;
``tests/test_scalar_semantics.py`` and ``tests/test_scalar_differential.py`` check both
against PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from mzflow.engine.spark import pg_numbers, pg_time
from mzflow.engine.spark.pg_base import (
    FLOATS,
    INTS,
    PREFIX,
    TEXTS,
    case,
    cast,
    double,
    fail,
    fn,
    is_,
    lit,
    op,
    operand,
    paren,
    type_name,
)
from mzflow.errors import Error, Unsupported


def rewrite(node: exp.Expr) -> exp.Expr:
    """``node`` as Spark SQL with PostgreSQL's result (``node`` itself if Spark's
    already is)."""
    handler = _REWRITES.get(type(node))
    new = handler(node) if handler is not None else node
    # A function replaced by an operator (extract(isodow …) is WEEKDAY(x) + 1) keeps
    # its place among its parent's operands.
    return paren(new) if new is not node and type(new) is not type(node) else new


# Spark's type names in CAST_INVALID_INPUT → PostgreSQL's, and the SQLSTATE its input
# function raises (22007 invalid_datetime_format for dates and times).
_INPUT_TYPES = {"INT": "integer", "BIGINT": "bigint", "SMALLINT": "smallint",
                "DOUBLE": "double precision", "FLOAT": "real", "BOOLEAN": "boolean",
                "DATE": "date", "TIMESTAMP": "timestamp with time zone",
                "TIMESTAMP_NTZ": "timestamp without time zone"}


def raised(text: str) -> Error | None:
    """The error a rewrite raised in Spark (``raise_error``), or Spark's failed cast of
    text, as PostgreSQL's."""
    from mzflow.engine.spark.failures import evaluation_error

    m = re.search(r"USER_RAISED_EXCEPTION\]\s*" + PREFIX + r"(\w{5}):(.*?)(?:\s+SQLSTATE: \w+)?$",
                  text, flags=re.S | re.M)
    if m:
        return evaluation_error(f"Evaluation error: {m.group(2)}", m.group(1))
    m = re.search(r"CAST_INVALID_INPUT.*?The value '([^']*)' of the type \"\w+\" cannot be cast "
                  r"to \"(\w+)(?:\([^\"]*\))?\"", text, flags=re.S)
    if m:
        target = _INPUT_TYPES.get(m.group(2), "numeric" if m.group(2) == "DECIMAL"
                                  else m.group(2).lower())
        code = "22007" if m.group(2).startswith(("DATE", "TIMESTAMP")) else "22P02"
        return evaluation_error(f'Evaluation error: invalid input syntax for type {target}: '
                                f'"{m.group(1)}"', code)
    return None


# -- text -----------------------------------------------------------------------------


def text_of(e: exp.Expr, t: exp.DataType | None, *, as_cast: bool, what: str) -> exp.Expr:
    """``e`` (of type ``t``) as PostgreSQL's text: a cast's (``true``) or the output
    function's (``t``), as concat prints it."""
    if t is None or is_(t, *TEXTS):
        return e
    if is_(t, exp.DType.BOOLEAN):
        if as_cast:
            return cast(e, "STRING")
        return case((e, lit("t")), (exp.Not(this=e.copy()), lit("f")))
    if is_(t, *INTS, exp.DType.DECIMAL):
        return cast(e, "STRING")
    if is_(t, exp.DType.DATE, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPNTZ):
        return _no_plus(cast(e, "STRING"))
    if is_(t, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ):
        return fn("CONCAT", _no_plus(cast(e, "STRING")), lit("+00"))
    if is_(t, exp.DType.VARBINARY, exp.DType.BINARY):
        return fn("CONCAT", lit("\\x"), fn("LOWER", fn("HEX", e)))
    # A double's text is its shortest digits (float8out); Spark's Java digits differ
    # ("1.0", "1.0E16").
    raise Unsupported(f"{what} of {type_name(t)} is not supported on Spark yet",
                      hint="cast it to numeric first, e.g. x::numeric::text")


def _no_plus(text: exp.Expr) -> exp.Expr:
    """Spark writes a year past 9999 with a sign (+10000-01-01); PostgreSQL does not."""
    return fn("REGEXP_REPLACE", text, lit("^\\+"), lit(""))


def _to_text(node: exp.Cast) -> exp.Expr:
    return text_of(node.this, operand(node, 0), as_cast=True,
                   what="a cast to text")


def _concat(node: exp.Concat) -> exp.Expr:
    parts = [fn("COALESCE", text_of(a, operand(node, i), as_cast=False, what="concat"),
                 lit("")) for i, a in enumerate(node.expressions)]
    return fn("CONCAT", *parts) if parts else lit("")


def _dpipe(node: exp.DPipe) -> exp.Expr:
    left, right = operand(node, 0), operand(node, 1)
    if is_(left, exp.DType.VARBINARY) or is_(right, exp.DType.VARBINARY):
        raise Unsupported("bytea || is not supported on Spark yet")
    return fn("CONCAT", text_of(node.this, left, as_cast=True, what="||"),
               text_of(node.expression, right, as_cast=True, what="||"))


# -- casts ----------------------------------------------------------------------------


def _cast_node(node: exp.Cast) -> exp.Expr:
    to, src = node.to, operand(node, 0)
    if to.is_type(exp.DType.DECIMAL) and is_(src, *FLOATS):
        return _float_to_numeric(node)
    return _cast_other(node)


def _float_to_numeric(node: exp.Cast) -> exp.Expr:
    """PostgreSQL's numeric holds NaN and (unconstrained) ±Infinity; a Delta decimal
    cannot, and Spark's cast gives NULL for them: refused by name (a constrained numeric
    cannot hold infinity in PostgreSQL either: 22003)."""
    x = node.this
    infinite = exp.In(this=x.copy(), expressions=[double("Infinity"), double("-Infinity")])
    return case((fn("ISNAN", x), fail("0A000", "numeric NaN is not supported yet")),
                (infinite, fail("22003", "numeric field overflow") if node.to.expressions
                 else fail("0A000", "numeric Infinity is not supported yet")),
                default=_cast_other(node))


def _cast_other(node: exp.Cast) -> exp.Expr:
    to, src = node.to, operand(node, 0)
    if to.is_type(exp.DType.DECIMAL) and not to.expressions:
        # Spark's bare DECIMAL is decimal(10,0); an unconstrained numeric keeps digits.
        out = node.copy()
        out.set("to", exp.DataType.build("DECIMAL(38, 10)"))
        return out
    if to.is_type(*INTS) and is_(src, exp.DType.DECIMAL):  # Spark truncates
        return exp.Cast(this=fn("ROUND", node.this, exp.Literal.number(0)), to=to.copy())
    if to.is_type(*INTS) and is_(src, *FLOATS):  # PostgreSQL's rint: half to even
        return exp.Cast(this=fn("BROUND", node.this, exp.Literal.number(0)), to=to.copy())
    if to.is_type(exp.DType.TEXT) or (to.is_type(exp.DType.VARCHAR) and not to.expressions):
        return _to_text(node)
    if to.is_type(exp.DType.VARBINARY) and is_(src, *TEXTS):
        return _bytea(node.this)
    if to.is_type(exp.DType.BOOLEAN) and is_(src, *TEXTS):
        return _boolean(node.this)
    if to.is_type(exp.DType.DATE, exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ) and is_(
            src, *TEXTS):
        return _datetime(node)
    return node


def _datetime(node: exp.Cast) -> exp.Expr:
    """Text to a date or timestamp in PostgreSQL's ISO forms (``storage/rows.py``
    reads the same ones): Spark also reads ``2020`` as a date, and says 22007 where a
    field is out of range (PostgreSQL: 22008)."""
    from mzflow.storage.rows import TIMESTAMP

    e, to = node.this, node.to
    name = {exp.DType.DATE: "date", exp.DType.TIMESTAMP: "timestamp without time zone"}.get(
        to.this, "timestamp with time zone")
    shape = exp.RegexpLike(this=e.copy(), expression=lit("(?i)^" + TIMESTAMP.pattern + "$"))
    tried = exp.TryCast(this=e.copy(), to=to.copy(), safe=True)
    digits = exp.RegexpLike(this=e.copy(), expression=lit("[0-9]"))
    special = exp.RegexpLike(this=e.copy(), expression=lit(
        "(?i)^\\s*[+-]?(epoch|infinity|now|today|tomorrow|yesterday|allballs)\\s*$"))
    return case((exp.Is(this=e.copy(), expression=exp.null()), exp.Cast(this=exp.null(),
                                                                         to=to.copy())),
                # Text with digits in another of PostgreSQL's many forms (19990108,
                # 1/8/1999, Jan 8 1999): refused, not read as Spark would read it.
                (exp.or_(special, exp.and_(digits, exp.Not(this=shape.copy()))),
                 fail("0A000", 'cannot read "', e, f'" as {name}: mzflow reads '
                                'YYYY-MM-DD[ HH:MM[:SS[.ffffff]]][zone] only')),
                (exp.Not(this=shape), fail("22007", f'invalid input syntax for type {name}: "',
                                           e, '"')),
                (exp.Is(this=tried, expression=exp.null()),
                 fail("22008", 'date/time field value out of range: "', e, '"')),
                default=exp.Cast(this=e.copy(), to=to.copy()))


_SPACE = " \t\n\r\f\v"  # what PostgreSQL's input functions skip: C's isspace()


def _boolean(e: exp.Expr) -> exp.Expr:
    """boolin: any unambiguous prefix of true/false/yes/no, on/off, 1/0."""
    word = fn("LOWER", exp.Trim(this=e.copy(), expression=lit(_SPACE)))
    yes = ["t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"]
    no = ["f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"]
    return case(
        (exp.In(this=word, expressions=[lit(w) for w in yes]), exp.true()),
        (exp.In(this=word, expressions=[lit(w) for w in no]), exp.false()),
        (exp.Is(this=e.copy(), expression=exp.null()), exp.Cast(
            this=exp.null(), to=exp.DataType.build("BOOLEAN"))),
        default=fail("22P02", 'invalid input syntax for type boolean: "', e, '"'))


def _bytea(e: exp.Expr) -> exp.Expr:
    """byteain: ``\\x`` and hex digits, or text without backslashes (the escape format's
    other forms are refused as the rows reach them)."""
    hexed = fn("UNHEX", fn("SUBSTRING", e, exp.Literal.number(3)))
    starts = exp.Like(this=e.copy(), expression=lit("\\\\x%"))
    return case(
        (exp.And(this=starts, expression=exp.Is(this=hexed, expression=exp.null())),
         fail("22P02", 'invalid input syntax for type bytea: "', e, '"')),
        (starts, hexed),
        (op(exp.GT, this=fn("INSTR", e, lit("\\")), expression=exp.Literal.number(0)),
         fail("0A000", "bytea escape sequences are not supported on Spark yet")),
        default=cast(e, "BINARY"))


# -- substr ---------------------------------------------------------------------------


def _substring(node: exp.Substring) -> exp.Expr:
    """PostgreSQL's substr: characters before position 1 count toward the length but
    yield nothing (Spark counts a negative start from the end); a negative length is
    an error; any NULL argument gives NULL."""
    s, start, length = node.this, node.args.get("start"), node.args.get("length")
    if start is None:
        return node
    first = exp.If(this=op(exp.LT, this=start.copy(), expression=exp.Literal.number(1)),
                   true=exp.Literal.number(1), false=start.copy())
    if length is None:
        return fn("SUBSTRING", s, first)
    # The end, one past the last character, in bigint: start + length may overflow int.
    end = op(exp.Add, this=cast(start, "BIGINT"), expression=length.copy())
    count = fn("GREATEST", op(exp.Sub, this=end, expression=first.copy()),
                exp.Literal.number(0))
    nulls = exp.or_(*[exp.Is(this=a.copy(), expression=exp.null()) for a in (s, start, length)])
    return case(
        (nulls, exp.Cast(this=exp.null(), to=exp.DataType.build("STRING"))),
        (op(exp.LT, this=length.copy(), expression=exp.Literal.number(0)),
         fail("22011", "negative substring length not allowed")),
        default=fn("SUBSTRING", s, first, cast(fn("LEAST", count, exp.Literal.number(
            2**31 - 1)), "INT")))

# -- strings --------------------------------------------------------------------------

# PostgreSQL refuses a result past 1 GB (4 bytes a character at most): Spark would try
# to build it, and run out of memory.
_MAX_CHARS = 268435454


def _too_long(n: exp.Expr) -> exp.Expr:
    return op(exp.GT, this=n.copy(), expression=exp.Literal.number(_MAX_CHARS))


def _pad(node: exp.Pad) -> exp.Expr:
    n, fill = node.expression, node.args.get("fill_pattern")
    # With nothing to pad with, PostgreSQL only cuts the text: no length check.
    long = _too_long(n) if fill is None else exp.and_(
        _too_long(n), op(exp.NEQ, this=fill, expression=lit("")))
    # lpad is strict: a NULL text is NULL, whatever the length asked for.
    long = exp.and_(exp.Not(this=exp.Is(this=node.this.copy(), expression=exp.null())), long)
    return case((long, fail("54000", "requested length too large")), default=node.copy())


def _repeat(node: exp.Repeat) -> exp.Expr:
    total = op(exp.Mul, this=cast(fn("OCTET_LENGTH", node.this), "BIGINT"),
                    expression=node.args["times"].copy())
    return case((op(exp.GT, this=total, expression=exp.Literal.number(1073741819)),
                 fail("54000", "requested length too large")), default=node.copy())


def _left_right(node: exp.Left | exp.Right) -> exp.Expr:
    """left/right with a negative count: all but that many characters (Spark: none)."""
    s, n = node.this, node.expression
    negative = op(exp.LT, this=n.copy(), expression=exp.Literal.number(0))
    if isinstance(node, exp.Left):
        rest = fn("SUBSTRING", s, exp.Literal.number(1),
                  fn("GREATEST", op(exp.Add, this=fn("CHAR_LENGTH", s), expression=n.copy()),
                     exp.Literal.number(0)))
    else:  # PostgreSQL negates -2**31, overflows, and keeps the whole text
        rest = exp.If(this=op(exp.EQ, this=n.copy(), expression=exp.Literal.number(-2**31)),
                      true=s.copy(), false=fn("SUBSTRING", s, op(
                          exp.Sub, this=exp.Literal.number(1), expression=n.copy())))
    return exp.If(this=negative, true=rest, false=node.copy())


def _chr(node: exp.Chr) -> exp.Expr:
    """chr(n): the character of code point n (Spark's is n's byte modulo 256)."""
    [n] = node.expressions
    return case((exp.Is(this=n.copy(), expression=exp.null()),
                 exp.Cast(this=exp.null(), to=exp.DataType.build("STRING"))),
                (op(exp.EQ, this=n.copy(), expression=exp.Literal.number(0)),
                 fail("54000", "null character not permitted")),
                (op(exp.LT, this=n.copy(), expression=exp.Literal.number(0)),
                 fail("22023", "character number must be positive")),
                (exp.or_(op(exp.GT, this=n.copy(), expression=exp.Literal.number(0x10FFFF)),
                         exp.Between(this=n.copy(), low=exp.Literal.number(0xD800),
                                     high=exp.Literal.number(0xDFFF))),
                 fail("54000", "requested character not valid for encoding: ", cast(n, "STRING"))),
                default=fn("JAVA_METHOD", lit("java.lang.Character"), lit("toString"),
                           cast(n, "INT")))


def _split_part(node: exp.SplitPart) -> exp.Expr:
    n = node.args.get("part_index")
    if n is None:
        return node
    nulls = exp.or_(*[exp.Is(this=a.copy(), expression=exp.null())
                      for a in (node.this, node.args["delimiter"], n)])
    return case((nulls, exp.Cast(this=exp.null(), to=exp.DataType.build("STRING"))),
                (op(exp.EQ, this=n.copy(), expression=exp.Literal.number(0)),
                 fail("22023", "field position must not be zero")), default=node.copy())


def _like(node: exp.Like | exp.ILike) -> exp.Expr:
    """PostgreSQL's LIKE escapes any character with a backslash (``\\x`` is ``x``);
    Spark refuses one before anything but %, _ and a backslash: drop those."""
    pattern = node.expression
    if isinstance(pattern, exp.Literal) and "\\" not in pattern.this:
        return node
    keep = "\ue000"  # an escaped backslash, set aside while the others are read
    step = fn("REPLACE", pattern, lit("\\\\"), lit(keep))
    step = fn("REGEXP_REPLACE", step, lit("\\\\([^%_])"), lit("$1"))
    out = node.copy()
    out.set("expression", fn("REPLACE", step, lit(keep), lit("\\\\")))
    return out


_REWRITES: dict[type[exp.Expr], Callable[[exp.Expr], exp.Expr]] = {
    exp.Like: _like, exp.ILike: _like,  # type: ignore[dict-item]
    exp.Cast: _cast_node, exp.Concat: _concat, exp.DPipe: _dpipe,  # type: ignore[dict-item]
    exp.Substring: _substring, exp.Pad: _pad, exp.Repeat: _repeat,  # type: ignore[dict-item]
    exp.Left: _left_right, exp.Right: _left_right, exp.Chr: _chr,  # type: ignore[dict-item]
    exp.SplitPart: _split_part,  # type: ignore[dict-item]
    **pg_time.REWRITES, **pg_numbers.REWRITES,
}
NODES = tuple(_REWRITES)
