"""PostgreSQL's result types for expressions, as catalog type names.

sqlglot's own annotation types ``avg(int)`` as DOUBLE, ``sum(numeric(12,2))`` as
``numeric(12,2)`` and ``date_trunc`` as UNKNOWN; PostgreSQL (and Materialize) say
``numeric``, ``numeric`` and ``timestamp``. The rules here follow PostgreSQL's
operator and function resolution for what the renderer accepts, checked against a
real server by ``tests/test_types_oracle.py``.

Numeric values in PostgreSQL carry their own scale; Delta and Spark store one scale
per column. So an unconstrained numeric result is typed ``numeric(*,s)`` (Oracle's
spelling: any precision, scale ``s``), with ``s`` the scale PostgreSQL gives its
values: the operand's for ``sum``, ``min``, ``max``, ``+``; their sum for ``*``; the
digits asked for by ``round``. Division and ``avg`` get 16 decimal places
(``NUMERIC_MIN_SIG_DIGITS``): PostgreSQL shows that many significant digits, so
the scale matches it for quotients from 1 to 9999 and differs above and below.
``numeric(*,s)`` is printed as ``numeric`` (:func:`display_name`).

Each node typed here gets its ``type`` set, so the renderer can read, say, a
division's result type (``engine/spark/pg_sql.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp
from sqlglot.errors import ParseError

from mzflow.errors import Error, TypeMismatch, UnknownFunction, Unsupported
from mzflow.sql import to_char
from mzflow.sql.parse import DIALECT

INTEGERS = ("smallint", "integer", "bigint")
FLOATS = ("real", "double precision")
DIV_SCALE = 16  # PostgreSQL's NUMERIC_MIN_SIG_DIGITS
MAX_SCALE = 32  # leaves six integer digits in a 38-digit decimal
# Node meta key: the operand types of a division or an average, for the renderer (the
# IR renames columns, and its new column nodes carry no type).
OPERANDS = "mzflow_operand_types"
UNKNOWN = "unknown"  # a string literal or NULL: takes the other operand's type
TEXT_TYPES = ("text", "character varying", "character")

# sqlglot DataType → catalog base name (as Materialize prints it in SHOW COLUMNS).
_SQLGLOT_NAMES = {
    "INT": "integer", "SMALLINT": "smallint", "BIGINT": "bigint", "TEXT": "text",
    "VARCHAR": "character varying", "CHAR": "character", "BOOLEAN": "boolean",
    "DOUBLE": "double precision", "FLOAT": "real", "DECIMAL": "numeric", "DATE": "date",
    "TIMESTAMP": "timestamp without time zone", "TIMESTAMPTZ": "timestamp with time zone",
    "VARBINARY": "bytea", "JSONB": "jsonb", "INTERVAL": "interval",
}


class CannotCoerce(TypeMismatch):
    code = "42846"  # cannot_coerce: no cast between the two types


def display_name(t: str) -> str:
    """The type name PostgreSQL prints: ``numeric(*,2)`` is an unconstrained ``numeric``."""
    return "numeric" if t.replace(" ", "").startswith("numeric(*") else t


def base(t: str) -> str:
    return t.split("(")[0].strip()


def scale(t: str) -> int:
    """The stored scale of a numeric type (``numeric`` alone: the default, 10)."""
    m = re.search(r",\s*(\d+)\)", t)
    if m:
        return int(m.group(1))
    return 0 if "(" in t else 10


def sqlglot_scale(dtype: exp.DataType | None) -> int:
    """The scale of a bound sqlglot type: a DECIMAL's (an unconstrained one is stored
    with 10, storage.types.NUMERIC_DEFAULT), 0 for anything else."""
    if dtype is None or not dtype.is_type(exp.DType.DECIMAL):
        return 0
    params = dtype.expressions
    if len(params) < 2:
        return 10 if not params else 0
    p = params[1]
    return int((p.this if isinstance(p, exp.DataTypeParam) else p).name)


def numeric(s: int) -> str:
    return f"numeric(*,{max(0, min(s, MAX_SCALE))})"


def from_sqlglot(dtype: exp.DataType | None) -> str:
    """A sqlglot type → a catalog name, modifiers kept (``numeric(12,2)``)."""
    if dtype is None or dtype.this == exp.DType.UNKNOWN:
        return UNKNOWN
    if dtype.this == exp.DType.NULL:
        return UNKNOWN
    key = dtype.this.name if hasattr(dtype.this, "name") else str(dtype.this)
    name = _SQLGLOT_NAMES.get(key)
    if name is None:
        return dtype.sql(dialect=DIALECT).lower()
    params = [p.this.name if isinstance(p, exp.DataTypeParam) else p.name
              for p in dtype.expressions]
    if params and name in ("numeric", "character varying", "character"):
        return f"{name}({','.join(params)})"
    return name


def to_sqlglot(t: str) -> exp.DataType:
    """A catalog name → the sqlglot type the renderer reads (``numeric(*,2)`` is a
    38-digit decimal of scale 2)."""
    b = base(t)
    if b == "numeric":
        if "(" not in t:
            return exp.DataType.build("DECIMAL(38, 10)")
        p = re.search(r"\(([^,)]+)", t)
        precision = "38" if p is None or p.group(1).strip() == "*" else p.group(1).strip()
        return exp.DataType.build(f"DECIMAL({precision}, {scale(t)})")
    spelled = {"timestamp without time zone": "TIMESTAMP",
               "timestamp with time zone": "TIMESTAMPTZ", "character varying": "VARCHAR",
               "double precision": "DOUBLE", "real": "FLOAT", "unknown": "TEXT",
               "jsonb": "JSONB", "bytea": "VARBINARY"}.get(b, b)
    text = spelled + t[len(b):] if b in TEXT_TYPES else spelled
    try:
        return exp.DataType.build(text, dialect="postgres")
    except ParseError:  # a catalog type sqlglot has no word for ("char", int2vector)
        return exp.DataType.build(text, dialect="postgres", udt=True)


def unconstrained(t: str) -> str:
    """What an operation on a value of type ``t`` keeps: PostgreSQL drops type
    modifiers (``max`` of a ``numeric(12,2)`` is a ``numeric``, of a ``varchar(5)`` a
    ``text``), but the values keep their scale."""
    b = base(t)
    if b == "numeric":
        return numeric(scale(t))
    if b in ("character varying", "character"):
        return "text"
    return b


def _int_rank(t: str) -> int:
    return INTEGERS.index(t)


def arithmetic(op: type[exp.Expr], left: str, right: str) -> str | None:
    """``left op right`` for + - * / %."""
    lb, rb = base(left), base(right)
    if lb == UNKNOWN:
        lb, left = rb, right
    if rb == UNKNOWN:
        rb, right = lb, left
    if lb in INTEGERS and rb in INTEGERS:
        return INTEGERS[max(_int_rank(lb), _int_rank(rb))]
    if lb == "real" and rb == "real":
        return "real"
    if lb in FLOATS + INTEGERS + ("numeric",) and rb in FLOATS + INTEGERS + ("numeric",):
        if lb in FLOATS or rb in FLOATS:
            return "double precision"
        ls = scale(left) if lb == "numeric" else 0
        rs = scale(right) if rb == "numeric" else 0
        if op is exp.Mul:
            return numeric(ls + rs)
        if op is exp.Div:
            return numeric(max(DIV_SCALE, ls, rs))
        return numeric(max(ls, rs))
    stamps = ("timestamp without time zone", "timestamp with time zone")
    if lb == "date" and rb in INTEGERS and op in (exp.Add, exp.Sub):
        return "date"
    if lb in INTEGERS and rb == "date" and op is exp.Add:
        return "date"
    if lb == "date" and rb == "date" and op is exp.Sub:
        return "integer"
    if {lb, rb} <= {"date", "interval"} and lb != rb and op in (exp.Add, exp.Sub):
        return "timestamp without time zone"
    if lb in stamps and rb == "interval" and op in (exp.Add, exp.Sub):
        return lb
    if lb == "interval" and rb in stamps and op is exp.Add:
        return rb
    if lb in stamps + ("date",) and rb == lb and op is exp.Sub:
        return "interval"
    if lb == rb == "interval" and op in (exp.Add, exp.Sub):
        return "interval"
    return None


def common(types: list[str]) -> str | None:
    """The type CASE, COALESCE, UNION … resolve their inputs to (PostgreSQL's
    "UNION, CASE, and related constructs" rules, for the types we store)."""
    known = [t for t in types if base(t) != UNKNOWN]
    if not known:
        return "text"
    bases = {base(t) for t in known}
    if len(bases) == 1 and len(set(known)) == 1:
        return known[0]
    if bases <= set(INTEGERS):
        return max(bases, key=_int_rank)
    if bases <= set(INTEGERS) | {"numeric"}:
        return numeric(max(scale(t) for t in known if base(t) == "numeric"))
    if bases <= set(INTEGERS) | {"real"}:
        return "real"
    if bases <= set(INTEGERS) | {"numeric"} | set(FLOATS):
        return "double precision"
    if bases <= set(TEXT_TYPES):
        # text and varchar convert to each other implicitly: PostgreSQL keeps the first
        # (CASE lists its ELSE first).
        return "character varying" if base(known[0]) == "character varying" else "text"
    if bases <= {"timestamp without time zone", "timestamp with time zone", "date"}:
        return ("timestamp with time zone" if "timestamp with time zone" in bases
                else "timestamp without time zone")
    if len(bases) == 1:
        return unconstrained(known[0])
    return None


def _aggregate(agg: exp.Expr, arg: str) -> str | None:
    b = base(arg)
    if isinstance(agg, exp.Count):
        return "bigint"
    if isinstance(agg, exp.Sum):
        if b in ("smallint", "integer"):
            return "bigint"
        if b == "bigint":
            return numeric(0)
        if b in FLOATS + ("interval",):
            return b
        return numeric(scale(arg)) if b == "numeric" else None
    if isinstance(agg, exp.Avg):
        if b in INTEGERS:
            return numeric(DIV_SCALE)
        if b == "numeric":
            return numeric(max(DIV_SCALE, scale(arg)))
        return "double precision" if b in FLOATS else ("interval" if b == "interval" else None)
    if isinstance(agg, exp.Min | exp.Max):
        return unconstrained(arg) if b != UNKNOWN else "text"
    if isinstance(agg, exp.Stddev | exp.StddevSamp | exp.StddevPop | exp.Variance
                  | exp.VariancePop):
        return "double precision" if b in FLOATS else numeric(DIV_SCALE)
    if isinstance(agg, exp.LogicalAnd | exp.LogicalOr):
        return "boolean"
    if isinstance(agg, exp.GroupConcat):
        return "text"
    return None


_BOOLEAN = (exp.Predicate, exp.Connector, exp.Not, exp.Exists, exp.Boolean)
_TEXT_FUNCS = (exp.Upper, exp.Lower, exp.Substring, exp.Trim, exp.Concat, exp.ConcatWs,
               exp.DPipe, exp.Replace, exp.Left, exp.Right, exp.Pad, exp.Initcap, exp.MD5,
               exp.SplitPart, exp.TimeToStr, exp.Reverse, exp.Repeat, exp.Chr,
               exp.RegexpReplace, exp.ToChar)
_INT_FUNCS = (exp.Length, exp.StrPosition, exp.Ascii)
_SAME_AS_ARG = (exp.Abs, exp.Neg, exp.Paren, exp.Sign)
_FLOAT_FUNCS = (exp.Sqrt, exp.Ln, exp.Exp, exp.Log, exp.Pow)


class Typer:
    """Types the expressions of one bound query. ``column`` gives a column's catalog
    type, or None to fall back to sqlglot's annotation."""

    def __init__(self, column: Callable[[exp.Column], str | None]):
        self.column = column

    def infer(self, node: exp.Expr) -> str:
        t = self._infer(node)
        if t is None:
            # sqlglot may know a function we have no rule for.
            t = from_sqlglot(node.type) if isinstance(node.type, exp.DataType) else UNKNOWN
        if base(t) != UNKNOWN:
            node.type = to_sqlglot(t)
        return t

    def _args(self, node: exp.Expr) -> list[str]:
        return [self.infer(a) for a in node.iter_expressions()
                if not isinstance(a, exp.DataType | exp.Var | exp.Identifier)]

    def _infer(self, node: exp.Expr) -> str | None:
        if isinstance(node, exp.Alias):
            return self.infer(node.this)
        if isinstance(node, exp.Column):
            return self.column(node) or from_sqlglot(node.type)
        if isinstance(node, exp.Literal):
            return _literal(node)
        if isinstance(node, exp.Null):
            return UNKNOWN
        if isinstance(node, exp.Cast | exp.TryCast):
            arg = self.infer(node.this)
            self._record(node, [arg])
            to = from_sqlglot(node.to)
            pair = {base(arg), base(to)}
            if "boolean" in pair and len(pair) == 2 and not pair & {
                    "integer", UNKNOWN, *TEXT_TYPES}:
                raise CannotCoerce(f"cannot cast type {display_name(arg)} to "
                                   f"{display_name(to)}")
            if to in ("text", "character varying"):
                _text_of_columns(node, [arg], "a cast to text")
            return to
        if isinstance(node, exp.Window):
            return self._window(node)
        if isinstance(node, exp.Subquery | exp.Select | exp.SetOperation):
            query = node.this if isinstance(node, exp.Subquery) else node
            if isinstance(query, exp.Select) and len(query.selects) == 1:
                return self.infer(query.selects[0])
            return None
        if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
            left, right = self.infer(node.left), self.infer(node.right)
            if isinstance(node, exp.Div):
                node.meta[OPERANDS] = (to_sqlglot(left), to_sqlglot(right))
            else:
                self._record(node, [left, right])
            if isinstance(node, exp.Mod) and {base(left), base(right)} & set(FLOATS):
                # PostgreSQL has no % for real or double precision.
                raise UnknownFunction(f"operator does not exist: {display_name(left)} % "
                                      f"{display_name(right)}")
            return arithmetic(type(node), left, right)
        if isinstance(node, exp.IntDiv):
            args = self._args(node)
            return common(args)
        if isinstance(node, _BOOLEAN):
            self._record(node, self._args(node))
            return "boolean"
        if isinstance(node, exp.Distinct):
            return common(self._args(node))
        if isinstance(node, exp.AggFunc) and isinstance(node, exp.Count | exp.Sum | exp.Avg
                                                         | exp.Min | exp.Max | exp.Stddev
                                                         | exp.StddevSamp | exp.StddevPop
                                                         | exp.Variance | exp.VariancePop
                                                         | exp.LogicalAnd | exp.LogicalOr
                                                         | exp.GroupConcat):
            arg = node.this
            arg_type = ("bigint" if arg is None or isinstance(arg, exp.Star)
                        else self.infer(arg))
            if isinstance(node, exp.Avg):
                node.meta[OPERANDS] = (to_sqlglot(arg_type),)
            for extra in list(node.iter_expressions())[1:]:
                self.infer(extra)
            return _aggregate(node, arg_type)
        if isinstance(node, exp.Case):
            for when in node.args.get("ifs") or []:
                self.infer(when.this)
            results = [self.infer(w.args["true"]) for w in node.args.get("ifs") or []]
            if node.args.get("default") is not None:
                results.insert(0, self.infer(node.args["default"]))  # PostgreSQL's order
            return common(results)
        if isinstance(node, exp.If):
            self.infer(node.this)
            results = [self.infer(node.args["true"])]
            if node.args.get("false") is not None:
                results.append(self.infer(node.args["false"]))
            return common(results)
        if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
            return common(self._args(node))
        if isinstance(node, exp.Nullif):
            args = self._args(node)
            self._record(node, args)
            first = args[0]
            return "text" if first == UNKNOWN else first  # the first argument's, modifiers kept
        if isinstance(node, exp.Sign):
            arg = self.infer(node.this)
            self._record(node, [arg])
            # sign(numeric) is numeric (-1, 0, 1); every other number goes to double.
            return numeric(0) if base(arg) == "numeric" else "double precision"
        if isinstance(node, _SAME_AS_ARG):
            arg = self.infer(node.this)
            return None if arg == UNKNOWN else unconstrained(arg)
        if isinstance(node, exp.Round | exp.Trunc | exp.Ceil | exp.Floor):
            return self._rounding(node)
        if isinstance(node, _FLOAT_FUNCS):
            args = self._args(node)
            exact = any(base(a) == "numeric" for a in args) if isinstance(
                node, exp.Pow | exp.Log) else base(args[0]) == "numeric"
            if isinstance(node, exp.Log) and len(args) == 2:
                exact = True  # log(b, x) exists for numeric only
            if exact and node.find(exp.Column):
                # Spark computes these in double precision: 16 digits PostgreSQL's exact
                # numerics would not match. Constants are computed in process, exactly.
                name = _FUNCTION_NAMES.get(type(node), node.key)
                raise Unsupported(f"function {name}(numeric) of column values is not "
                                  "supported yet",
                                  hint="cast its argument to double precision")
            return numeric(DIV_SCALE) if exact else "double precision"
        if isinstance(node, _TEXT_FUNCS):
            args = self._args(node)
            self._record(node, args)
            if isinstance(node, exp.ToChar):
                _check_to_char(node, args[0] if args else UNKNOWN)
            if isinstance(node, exp.Initcap) and node.find(exp.Column):
                # Spark's capitalizes after white space only, by Unicode's rules.
                raise Unsupported("function initcap of column values is not supported yet")
            if isinstance(node, exp.Concat | exp.DPipe):
                _text_of_columns(node, args, "concat" if isinstance(node, exp.Concat) else "||")
            return "text"
        if isinstance(node, _INT_FUNCS):
            self._args(node)
            return "integer"
        if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
            arg = self.infer(node.this)
            self._record(node, [arg])
            if base(arg) == "date":
                return "timestamp with time zone"  # PostgreSQL's date → timestamptz
            return base(arg) if base(arg) in ("timestamp without time zone",
                                               "timestamp with time zone", "interval") else None
        if isinstance(node, exp.Extract):
            arg = self.infer(node.expression)
            self._record(node, [arg])
            unit = node.this.name.lower() if isinstance(node.this, exp.Var | exp.Identifier) else ""
            if base(arg) == "date" and unit.rstrip("s") in _TIME_UNITS:
                raise Unsupported(f'unit "{unit}" not supported for type date')
            return numeric(0) if not _fractional(node) else numeric(6)
        if isinstance(node, exp.CurrentTimestamp):
            return "timestamp with time zone"
        if isinstance(node, exp.CurrentDate):
            return "date"
        if isinstance(node, exp.Interval):
            return "interval"
        if isinstance(node, exp.Bracket | exp.Anonymous):
            self._args(node)
            return None
        return None

    @staticmethod
    def _record(node: exp.Expr, args: list[str]) -> None:
        """Keep the operand types on the node for the renderer (``engine/spark/pg_functions.py``;
        None: an unknown-typed literal): lowering to the IR renames columns, and new
        column nodes carry no type."""
        node.meta[OPERANDS] = tuple(to_sqlglot(a) if base(a) != UNKNOWN else None
                                    for a in args)

    def _window(self, node: exp.Window) -> str | None:
        for part in node.args.get("partition_by") or []:
            self.infer(part)
        order = node.args.get("order")
        for ordered in order.expressions if order else []:
            self.infer(ordered.this)
        fn = node.this
        if isinstance(fn, exp.RowNumber | exp.Rank | exp.DenseRank):
            return "bigint"
        if isinstance(fn, exp.Ntile):
            return "integer"
        if isinstance(fn, exp.PercentRank | exp.CumeDist):
            return "double precision"
        if isinstance(fn, exp.Lag | exp.Lead | exp.FirstValue | exp.LastValue | exp.NthValue):
            return unconstrained(self._args(fn)[0])
        return self.infer(fn)

    def _rounding(self, node: exp.Expr) -> str | None:
        arg = self.infer(node.this)
        self._record(node, [arg])
        digits = node.args.get("decimals")
        if digits is not None:
            self.infer(digits)
        b = base(arg)
        if b == "numeric":
            if isinstance(node, exp.Round | exp.Trunc) and digits is not None:
                if isinstance(digits, exp.Literal) and not digits.is_string:
                    return numeric(int(digits.this))
                return numeric(scale(arg))
            return numeric(0)
        if b in INTEGERS + FLOATS:
            return "double precision"
        return None


_FUNCTION_NAMES = {exp.Pow: "power", exp.Log: "log", exp.Ln: "ln", exp.Exp: "exp",
                   exp.Sqrt: "sqrt"}


def _text_of_columns(node: exp.Expr, args: list[str], what: str) -> None:
    """A double's text is its shortest digits (float8out); Spark's Java digits differ
    ("1.0", "1.0E16") and cannot be fixed in Spark SQL. Constants are converted in
    process."""
    for arg, operand in zip(args, node.iter_expressions(), strict=False):
        if base(arg) in FLOATS and operand.find(exp.Column):
            raise Unsupported(f"{what} of {arg} column values is not supported yet",
                              hint="cast to numeric first, e.g. x::numeric::text")


def _check_to_char(node: exp.ToChar, arg: str) -> None:
    """Refuse now what neither engine prints as PostgreSQL does."""
    template = node.args.get("format")
    if base(arg) not in ("timestamp without time zone", "timestamp with time zone", "date",
                         UNKNOWN):
        raise Unsupported(f"to_char({display_name(arg)}, text) is not supported yet")
    if not (isinstance(template, exp.Literal) and template.is_string):
        raise Unsupported("to_char with a template that is not a constant is not supported "
                          "yet")
    to_char.parse(template.this)


def _literal(node: exp.Literal) -> str:
    if node.is_string:
        return UNKNOWN
    text = node.this
    if re.fullmatch(r"\d+", text):
        n = int(text)
        return "integer" if n <= 2**31 - 1 else ("bigint" if n <= 2**63 - 1 else numeric(0))
    if "e" in text.lower():
        return numeric(0)
    return numeric(len(text.split(".")[1]) if "." in text else 0)


_TIME_UNITS = ("hour", "minute", "second", "millisecond", "microsecond", "timezone",
               "timezone_hour", "timezone_minute")


def _fractional(node: exp.Extract) -> bool:
    unit = node.this.name.lower() if isinstance(node.this, exp.Var | exp.Identifier) else ""
    return unit in ("second", "seconds", "epoch", "millisecond", "milliseconds",
                    "microsecond", "microseconds", "julian")


def refuse(node: exp.Expr) -> Error:
    why = f"cannot determine the type of {node.sql(dialect='postgres')}"
    if isinstance(node, exp.Anonymous):  # a function nobody knows: PostgreSQL's 42883
        return UnknownFunction(f"function {node.name.lower()} does not exist", detail=why)
    return Unsupported(why, hint="cast it to the type it should have, e.g. CAST(… AS text)")
