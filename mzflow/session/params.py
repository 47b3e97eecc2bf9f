"""Bound parameters: PostgreSQL's ``$1 … $n`` in one statement, and their types.

A parameter is a value, never SQL text: each ``$n`` node of the parsed statement is
replaced by a typed literal node (``CAST('…' AS date)``), so nothing a value holds can
reach the parser. Its type comes, first found first:

1. the declared one (``param_types``, as the wire protocol's Parse gives them);
2. the Python value's (int → bigint, Decimal → numeric, aware datetime → timestamp
   with time zone …);
3. for a ``str`` or ``None`` (PostgreSQL's *unknown*, as psycopg sends a str), the
   context, as PostgreSQL infers it: ``a = $1`` takes ``a``'s type, ``$1::date`` is a
   date, ``LIMIT $1`` a bigint, ``INSERT … VALUES ($1)`` the column's type;
4. else ``text``.

A text value with a type other than text is read as that type's input function reads
it (``CAST('2024-01-02' AS date)``), as PostgreSQL does with a text-format parameter.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from sqlglot import exp

from mzflow.catalog import exprtypes, system
from mzflow.catalog.bind import bind
from mzflow.catalog.model import Snapshot
from mzflow.errors import Error, MalformedQuery, Unsupported
from mzflow.session.select import replace_functions
from mzflow.sql import ast, session_ast
from mzflow.storage.types import parse_type

MAX_PARAMS = 65535  # what PostgreSQL's protocol can number
# PostgreSQL's internal names with digits (what a driver may declare), which
# storage.types reads in their SQL spelling.
_TYPE_ALIASES = {"int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
                 "float8": "double precision"}
_MARK = "mz_param"  # node meta: the parameter a placeholder node stands for
# Statements whose parameters PostgreSQL binds; any other statement has none.
_BINDABLE = (exp.Query, ast.AsOf, exp.Insert, exp.Update, exp.Delete, ast.Subscribe,
             ast.Explain, session_ast.Declare)


class UndefinedParameter(Error):
    code = "42P02"  # undefined_parameter


class ProtocolViolation(Error):
    code = "08P01"  # protocol_violation


class IndeterminateDatatype(Error):
    code = "42P18"  # indeterminate_datatype


class UntranslatableCharacter(Error):
    code = "22021"  # character_not_in_repertoire


def numbers(stmt: exp.Expr) -> list[int]:
    """The parameters ``stmt`` references, in order of appearance (repeats kept)."""
    for odd in stmt.find_all(exp.Placeholder):
        shown = "?" if odd.args.get("jdbc") or not odd.name else f":{odd.name}"
        raise MalformedQuery(f'syntax error at or near "{shown}"')
    out = []
    for node in stmt.find_all(exp.Parameter):
        inner = node.this
        if not (isinstance(inner, exp.Literal) and not inner.is_string):
            raise MalformedQuery(f'syntax error at or near "${inner.name}"')
        n = int(inner.this)
        if not 1 <= n <= MAX_PARAMS:
            raise UndefinedParameter(f"there is no parameter ${n}")
        out.append(n)
    return out


def declared(param_types: Sequence[str | None] | None) -> list[str | None]:
    """``param_types`` in canonical type names (``int4`` → integer); None: unspecified."""
    out: list[str | None] = []
    for t in param_types or ():
        if t is None or t.strip().lower() in ("", "unknown"):
            out.append(None)
        else:
            name = t.strip().lower()
            out.append(parse_type(_TYPE_ALIASES.get(name, name)).name)
    return out


def python_type(value: Any) -> str | None:
    """The SQL type of a Python value; None for PostgreSQL's *unknown* (str, None)."""
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint" if -(2 ** 63) <= value < 2 ** 63 else "numeric"
    if isinstance(value, float):
        return "double precision"
    if isinstance(value, Decimal):
        return "numeric"
    if isinstance(value, dt.datetime):
        aware = value.tzinfo is not None and value.utcoffset() is not None
        return "timestamp with time zone" if aware else "timestamp without time zone"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, bytes | bytearray | memoryview):
        return "bytea"
    raise Unsupported(f"a parameter of Python type {type(value).__name__} is not supported",
                      hint="pass its text as a str, with its SQL type in param_types")


def bind_values(snap: Snapshot, stmt: exp.Expr, params: Sequence[Any],
                param_types: Sequence[str | None] | None = None) -> exp.Expr:
    """``stmt`` with each ``$n`` replaced by ``params[n - 1]`` as a typed literal."""
    refs = numbers(stmt)
    given = declared(param_types)
    required = max([*refs, len(given)], default=0)
    if len(params) != required:
        raise ProtocolViolation(f"bind message supplies {len(params)} parameters, but "
                                f'prepared statement "" requires {required}')
    if refs and not isinstance(stmt, _BINDABLE):
        raise UndefinedParameter(f"there is no parameter ${refs[0]}")
    known: dict[int, str] = {}
    for n, value in enumerate(params, start=1):
        t = (given[n - 1] if n <= len(given) else None) or python_type(value)
        if t is not None:
            known[n] = t
    types = _complete(snap, stmt, refs, known, required)
    # The in-process executor of catalog queries evaluates plain literals, not casts.
    plain = _reads_system_tables(stmt)
    values = {n: (plain and _plain_literal(params[n - 1], types[n])) or literal(
        params[n - 1], types[n]) for n in set(refs)}
    return _replace(stmt, values)


def describe(snap: Snapshot, stmt: exp.Expr, param_types: Sequence[str | None] | None = None
             ) -> tuple[exp.Expr, list[str]]:
    """``stmt`` with each ``$n`` replaced by a NULL of its type, and the types of
    ``$1 … $n`` (PostgreSQL's ParameterDescription)."""
    refs = numbers(stmt)
    given = declared(param_types)
    if refs and not isinstance(stmt, _BINDABLE):
        raise UndefinedParameter(f"there is no parameter ${refs[0]}")
    known = {n: t for n, t in enumerate(given, start=1) if t is not None}
    required = max([*refs, len(given)], default=0)
    types = _complete(snap, stmt, refs, known, required)
    nulls: dict[int, exp.Expr] = {n: exp.Cast(this=exp.Null(), to=_sqlglot_type(types[n]))
                                  for n in set(refs)}
    return _replace(stmt, nulls), [exprtypes.display_name(types[n])
                                   for n in range(1, required + 1)]


def _complete(snap: Snapshot, stmt: exp.Expr, refs: list[int], known: dict[int, str],
              required: int) -> dict[int, str]:
    """Every parameter's type: the known ones, the rest inferred from their context."""
    if any(n not in known for n in refs):
        inferred = infer(snap, stmt, known)
        known = {**inferred, **known}
    for n in range(1, required + 1):
        if n not in known and n not in refs:
            raise IndeterminateDatatype(f"could not determine data type of parameter ${n}")
    return {n: known.get(n, "text") for n in range(1, required + 1)}


def literal(value: Any, type_: str) -> exp.Expr:
    """``value`` as a literal node of SQL type ``type_``."""
    to = _sqlglot_type(type_, value)
    if value is None:
        return exp.Cast(this=exp.Null(), to=to)
    if isinstance(value, bool):
        node: exp.Expr = exp.Boolean(this=value)
    elif isinstance(value, int):
        node = exp.Literal.number(value)
    else:
        node = exp.Literal.string(_text(value))
    return exp.Cast(this=node, to=to)


_TRUE = ("t", "true", "y", "yes", "on", "1")
_FALSE = ("f", "false", "n", "no", "off", "0")


def _plain_literal(value: Any, type_: str) -> exp.Expr | None:
    """``value`` as a literal without a cast, where its type leaves it the same value:
    text as a string, an integer as a number, a boolean as TRUE or FALSE, NULL."""
    b = exprtypes.base(type_)
    if value is None:
        return exp.Null()
    if b in exprtypes.TEXT_TYPES and isinstance(value, str):
        return exp.Literal.string(_text(value))
    if b in exprtypes.INTEGERS and not isinstance(value, bool) and isinstance(value, int | str):
        try:
            number = int(value)
        except ValueError:
            return None  # the cast says why
        node = exp.Literal.number(abs(number))
        return exp.Neg(this=node) if number < 0 else node
    if b == "boolean" and isinstance(value, bool | str):
        word = str(value).strip().lower()
        if word in _TRUE or word in _FALSE:
            return exp.Boolean(this=word in _TRUE)
    return None


def _reads_system_tables(stmt: exp.Expr) -> bool:
    return any(system.lookup(t.name) is not None for t in stmt.find_all(exp.Table))


def _text(value: Any) -> str:
    """A value's text, as the type's input function reads it."""
    if isinstance(value, str):
        if "\x00" in value:
            raise UntranslatableCharacter('invalid byte sequence for encoding "UTF8": 0x00')
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    return str(value)


def _sqlglot_type(type_: str, value: Any = None) -> exp.DataType:
    if exprtypes.base(type_) == "numeric" and "(" not in type_:
        # An unconstrained numeric keeps the value's digits (to Delta's 38).
        exponent = value.as_tuple().exponent if isinstance(value, Decimal) and (
            value.is_finite()) else 0
        places = -exponent if isinstance(exponent, int) else 0
        if places > 10:
            return exp.DataType.build(f"DECIMAL(38, {min(places, 38)})")
        return exp.DataType.build("DECIMAL")
    return exprtypes.to_sqlglot(type_)


def _replace(stmt: exp.Expr, nodes: dict[int, exp.Expr]) -> exp.Expr:
    def swap(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Parameter):
            return node
        value = nodes[int(node.this.this)].copy()
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            # PostgreSQL names a bare parameter's column ?column?, not after its type.
            return exp.alias_(value, "?column?", quoted=True)
        return value

    return stmt.transform(swap)


# -- inference ------------------------------------------------------------------


def infer(snap: Snapshot, stmt: exp.Expr, known: dict[int, str]) -> dict[int, str]:
    """The types PostgreSQL would infer for the parameters of ``stmt`` not in ``known``,
    where their context says one (unchanged by a value's modifiers: ``numeric``, not
    ``numeric(10,2)``)."""
    marked = _mark(stmt, known)
    found: dict[int, str] = {}

    def note(marker: exp.Expr, t: str | None) -> None:
        n = marker.meta[_MARK]
        if t is not None and exprtypes.base(t) != exprtypes.UNKNOWN and n not in known:
            found.setdefault(n, _unmodified(t))

    for marker in _markers(marked):
        parent, node = _context(marker)
        if isinstance(parent, exp.Cast) and parent.this is node:
            note(marker, exprtypes.from_sqlglot(parent.to))
        elif isinstance(parent, exp.Limit | exp.Offset | exp.Fetch):
            note(marker, "bigint")
    for query, targets in _queries(snap, marked):
        for marker, t in targets:
            note(marker, t)
        try:
            bound = bind(snap, replace_functions(query, snap))
        except Error:
            continue  # the statement's own error, when it runs
        typer = exprtypes.Typer(lambda c: None)
        for marker in _markers(bound.query):
            note(marker, _from_context(marker, typer))
    return found


def _mark(stmt: exp.Expr, known: dict[int, str]) -> exp.Expr:
    """``stmt`` with each ``$n`` a NULL (of its type when known), tagged with ``n``."""
    def swap(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Parameter):
            return node
        n = int(node.this.this)
        t = known.get(n)
        marker: exp.Expr = exp.Cast(this=exp.Null(), to=_sqlglot_type(t)) if t else exp.Null()
        marker.meta[_MARK] = n
        return marker

    return stmt.copy().transform(swap)


def _markers(tree: exp.Expr) -> list[exp.Expr]:
    return [n for n in tree.walk() if _MARK in n.meta and isinstance(n, exp.Null)]


def _context(marker: exp.Expr) -> tuple[exp.Expr | None, exp.Expr]:
    node, parent = marker, marker.parent
    while isinstance(parent, exp.Paren):
        node, parent = parent, parent.parent
    return parent, node


def _is_marker(node: exp.Expr | None) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    return node is not None and _MARK in node.meta and isinstance(node, exp.Null)


def _from_context(marker: exp.Expr, typer: exprtypes.Typer) -> str | None:
    """The type an unknown-typed value takes where it stands, PostgreSQL's way: the other
    operand's type (its rule for ``unknown`` operands)."""
    parent, node = _context(marker)
    others: list[exp.Expr] = []
    if isinstance(parent, exp.Cast) and parent.this is node:
        return exprtypes.from_sqlglot(parent.to)
    if isinstance(parent, exp.In):
        others = [parent.this] if node is not parent.this else list(parent.expressions)
    elif isinstance(parent, exp.Between):
        others = [parent.this] if node is not parent.this else [parent.args["low"],
                                                                 parent.args["high"]]
    elif isinstance(parent, exp.Binary) and not isinstance(parent, exp.Connector):
        others = [parent.left if node is parent.right else parent.right]
    for other in others:
        if other is None or _is_marker(other):
            continue
        try:
            t = typer.infer(other)
        except Error:
            continue
        if exprtypes.base(t) != exprtypes.UNKNOWN:
            return t
    return None


def _queries(snap: Snapshot, stmt: exp.Expr
             ) -> list[tuple[exp.Query, list[tuple[exp.Expr, str]]]]:
    """The queries to bind to type ``stmt``'s parameters, each with the parameters whose
    type a target column decides (``INSERT … VALUES ($1)``, ``UPDATE … SET a = $1``)."""
    if isinstance(stmt, session_ast.Declare):
        return _queries(snap, stmt.args["query"])
    if isinstance(stmt, ast.Explain | ast.AsOf):
        return _queries(snap, stmt.this) if isinstance(stmt.this, exp.Expr) else []
    if isinstance(stmt, ast.Subscribe):
        return [(stmt.this, [])] if isinstance(stmt.this, exp.Query) else []
    if isinstance(stmt, exp.Query):
        return [(stmt, [])]
    if isinstance(stmt, exp.Insert | exp.Update | exp.Delete):
        return _dml_queries(snap, stmt)
    return []


def _dml_queries(snap: Snapshot, stmt: exp.Insert | exp.Update | exp.Delete
                 ) -> list[tuple[exp.Query, list[tuple[exp.Expr, str]]]]:
    target = stmt.this.this if isinstance(stmt.this, exp.Schema) else stmt.this
    try:
        item = snap.resolve(target.name)
    except Error:
        return []
    types = {c.name: c.type for c in item.columns}
    table = exp.table_(item.name, quoted=True)  # a name, not SQL text to parse
    where = stmt.args.get("where")
    if isinstance(stmt, exp.Insert):
        names = [c.name for c in stmt.this.expressions] if isinstance(
            stmt.this, exp.Schema) else list(types)
        source = stmt.expression
        rows: list[exp.Expr] = [source] if isinstance(source, exp.Query) else []
        if isinstance(source, exp.Values):
            rows = [row for row in source.expressions if isinstance(row, exp.Tuple)]
        targets = []
        for row in rows:
            values = row.selects if isinstance(row, exp.Query) else row.expressions
            for name, value in zip(names, values, strict=False):
                inner = value.this if isinstance(value, exp.Alias) else value
                if _is_marker(inner) and name in types:
                    targets.append((_unparen(inner), types[name]))
        query = source if isinstance(source, exp.Query) else (
            exp.select("*").from_(exp.Subquery(this=source.copy(), alias=exp.TableAlias(
                this=exp.to_identifier("v")))))
        return [(query, targets)]
    if isinstance(stmt, exp.Update):
        targets = [(_unparen(a.expression), types[a.this.name]) for a in stmt.expressions
                   if _is_marker(a.expression) and a.this.name in types]
        query = exp.select(*[a.expression.copy() for a in stmt.expressions]).from_(table)
    else:
        targets, query = [], exp.select("1").from_(table)
    if where is not None:
        query = query.where(where.this.copy())
    return [(query, targets)]


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _unmodified(t: str) -> str:
    """A type without its modifiers: a parameter compared with a ``numeric(10,2)`` is a
    ``numeric`` (its value keeps its digits), with a ``varchar(5)`` a varchar."""
    if t.endswith("[]"):
        return t
    return exprtypes.base(t)
