"""A SQL boolean expression evaluated over an Arrow table, vectorized, with PostgreSQL's
semantics: EXPECT constraints judge every batch a table write commits, in-process.

``check`` runs ``evaluate`` over an empty table of the columns' Arrow types: every
type-driven decision (and every refusal) is taken before a row is seen, so the two
cannot disagree about what is supported. A quoted literal is typed from its context
(``d > '2024-01-01'`` compares dates), as PostgreSQL types an ``unknown`` literal.
Types and literals are ``arrow_types.py``'s, arithmetic ``arrow_arith.py``'s, and more
functions ``arrow_functions.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from mzflow.engine.arrow_arith import _arith, _divide
from mzflow.engine.arrow_types import (
    NULL_BOOL,
    Data,
    Unknown,
    Value,
    _array,
    _bool,
    _checked,
    _decimal,
    _fail,
    _isnull,
    _kind,
    _number,
    _parse,
    _pg,
    _ps,
    _text,
    _typed,
    _unify,
    _widen,
)
from mzflow.engine.spark import EvaluationError
from mzflow.errors import UnknownColumn, UnknownFunction, Unsupported
from mzflow.sql.parse import DIALECT
from mzflow.storage.types import parse_type

Ops = dict[type[exp.Expr], tuple[str, str]]
_CMP: Ops = {exp.EQ: ("equal", "="), exp.NEQ: ("not_equal", "<>"), exp.LT: ("less", "<"),
             exp.LTE: ("less_equal", "<="), exp.GT: ("greater", ">"),
             exp.GTE: ("greater_equal", ">=")}
_ARITH: Ops = {exp.Add: ("add", "+"), exp.Sub: ("subtract", "-"), exp.Mul: ("multiply", "*")}
_OPERATORS: dict[type[exp.Expr], str] = {
    exp.Div: "operator /", exp.Mod: "operator %", exp.DPipe: "operator ||", exp.Case: "CASE",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM", exp.NullSafeNEQ: "IS DISTINCT FROM",
    exp.SimilarTo: "SIMILAR TO"}


def check(expr: exp.Expr, types: Mapping[str, str], *, boolean: bool = True) -> None:
    """Raise Unsupported (or PostgreSQL's error for a bad expression) unless evaluate()
    can evaluate ``expr`` over columns of these catalog types. ``boolean`` False: any
    value (a projection's keys and aggregate arguments)."""
    evaluate(expr, pa.schema([(n, parse_type(t).arrow) for n, t in types.items()])
             .empty_table(), boolean=boolean)


def evaluate(expr: exp.Expr, table: pa.Table, *, boolean: bool = True,
             clause: str = "EXPECT") -> pa.ChunkedArray | pa.Array:
    """The expression's value per row: a boolean array (any type when ``boolean`` is
    False), NULL where SQL gives NULL. ``clause``: the boolean's clause, as a
    non-boolean's error names it (PostgreSQL: argument of WHERE must be type boolean)."""
    try:
        v = _eval(expr, table)
        if boolean:
            v = _bool(v, clause)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:  # no kernel for the types
        raise Unsupported(f"EXPECT cannot evaluate {expr.sql(dialect=DIALECT)} yet ({e})",
                          ) from None
    if isinstance(v, pa.Scalar):
        return pa.repeat(v, table.num_rows)
    if not isinstance(v, pa.Array | pa.ChunkedArray):  # an untyped literal alone
        raise Unsupported(f"cannot evaluate {expr.sql(dialect=DIALECT)} on its own yet")
    return v


def _eval(node: exp.Expr, table: pa.Table) -> Value:
    ev = lambda n: _eval(n, table)  # noqa: E731
    if isinstance(node, exp.Paren):
        return ev(node.this)
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        if node.name not in table.column_names:
            raise UnknownColumn(f'column "{node.name}" does not exist')
        col = table.column(node.name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        return col.cast(pa.large_string()) if pa.types.is_string_view(col.type) else col
    if isinstance(node, exp.Literal):
        return Unknown(node.this) if node.is_string else _number(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return _number("-" + node.this.this)  # the grammar folds the sign into the constant
    if isinstance(node, exp.Null):
        return pa.scalar(None)
    if isinstance(node, exp.Boolean):
        return pa.scalar(node.this, pa.bool_())
    if type(node) in _CMP and isinstance(node.expression, exp.Any | exp.All):
        return ev(_quantified(node, node.expression))
    if type(node) in _CMP:
        return _compare(*_CMP[type(node)], ev(node.this), ev(node.expression))
    if isinstance(node, exp.And | exp.Or):
        return _connective(node, table)
    if isinstance(node, exp.Not):
        return pc.invert(_bool(ev(node.this), "NOT"))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null | exp.Boolean):
        v = ev(node.this)
        if isinstance(node.expression, exp.Null):
            return _isnull(v)
        b = _bool(v, "IS")
        return pc.fill_null(b if node.expression.this else pc.invert(b), False)
    if isinstance(node, exp.Between) and not node.args.get("symmetric"):
        # PostgreSQL rewrites it to x >= low AND x <= high, short-circuit included.
        x, low, high = (node.this.copy(), node.args["low"].copy(), node.args["high"].copy())
        return ev(exp.And(this=exp.GTE(this=x, expression=low),
                          expression=exp.LTE(this=x.copy(), expression=high)))
    if isinstance(node, exp.In) and not any(node.args.get(k) for k in ("query", "unnest",
                                                                         "field")):
        x, *items = _unify([ev(e) for e in [node.this, *node.expressions]], "=")
        return reduce(pc.or_kleene, [_compare("equal", "=", x, v) for v in items])
    if isinstance(node, exp.Like | exp.ILike | exp.Escape):
        return _like(node, table)
    if type(node) in _ARITH:
        a, b = ev(node.this), ev(node.expression)
        if isinstance(node, exp.Add | exp.Sub) and _fn().is_dated(a, b):
            return _fn().date_arith(node, a, b, table.num_rows)
        return _arith(*_ARITH[type(node)], a, b)
    if isinstance(node, exp.Div) and isinstance(node.type, exp.DataType):
        return _divide(node, ev(node.this), ev(node.expression), table.num_rows)
    if isinstance(node, exp.Neg | exp.Abs):
        v, fn = _typed([ev(node.this)], "")[0][0], node.key
        if _kind(v.type) not in ("int", "dec", "float"):
            raise UnknownFunction(f"function {fn}({_pg(v.type)}) does not exist")
        return _checked(lambda: getattr(pc, "negate_checked" if fn == "neg" else "abs_checked")(v),
                        v.type)
    if type(node) is exp.Cast:
        return _cast(ev(node.this), node.to)
    if isinstance(node, exp.Length) and not (node.args.get("binary")
                                             or node.args.get("encoding")):
        return pc.utf8_length(_text(ev(node.this), "length"))
    if isinstance(node, exp.Lower | exp.Upper):
        # Unicode's simple case mapping (upper('ß') is 'ẞ'); PostgreSQL's follows the
        # database's locale (C: ASCII only; ICU: full mappings, 'SS'). ASCII agrees.
        return getattr(pc, f"utf8_{node.key}")(_text(ev(node.this), node.key))
    if isinstance(node, exp.Trim) and not node.args.get("collation"):
        chars = node.expression
        if chars is not None and not (isinstance(chars, exp.Literal) and chars.is_string):
            raise Unsupported("EXPECT cannot use trim of non-constant characters yet")
        trim = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(
            str(node.args.get("position") or "").upper(), pc.utf8_trim)
        # PostgreSQL trims spaces, not every kind of whitespace.
        return trim(_text(ev(node.this), "btrim"), characters=chars.this if chars else " ")
    if isinstance(node, exp.Coalesce):
        vals: list[Value] = []
        args = [node.this, *node.expressions]
        for k, arg in enumerate(args):  # each row runs them until one is not NULL
            pending = reduce(pc.and_kleene, [_isnull(v) for v in vals], pa.scalar(True))
            vals.append(_lazy(arg, table, pending))
            if isinstance(vals[-1], Unknown) or (isinstance(vals[-1], pa.Scalar)
                                                 and vals[-1].is_valid):
                # The planner drops what follows a constant: typed, never run.
                rest = [typed_only(a, table) for a in args[k + 1:]]
                vals += [v if isinstance(v, pa.Scalar | Unknown) else pa.scalar(None, v.type)
                         for v in rest]
                break
        return pc.coalesce(*_unify(vals, "COALESCE"))
    found = _fn().evaluate(node, table)
    if found is not None:
        return found
    raise _unsupported(node)


def _fn() -> Any:
    """engine/arrow_functions.py: more functions, built on this module's helpers."""
    from mzflow.engine import arrow_functions

    return arrow_functions


def _connective(node: exp.And | exp.Or, table: pa.Table) -> Data:
    """AND/OR as PostgreSQL runs them. The planner folds constant operands first, and a
    FALSE one decides an AND (a TRUE one an OR) without running the rest; then each row
    runs the others left to right, up to the first that decides it."""
    is_and, name = isinstance(node, exp.And), node.key.upper()
    combine = pc.and_kleene if is_and else pc.or_kleene
    ops = _operands(node, type(node))
    consts = {id(o) for o in ops if not o.find(exp.Column)}
    result = None
    for op in (o for o in ops if id(o) in consts):
        v = _bool(_eval(op, table), name)
        if v.as_py() is (not is_and):
            for rest in ops:  # still typed, as PostgreSQL's parser types them
                if id(rest) not in consts:
                    _bool(_eval(rest, table.slice(0, 0)), name)
            return v
        result = v if result is None else combine(result, v)  # for AND, TRUE or NULL
    for op in ops:
        if id(op) in consts:
            continue
        if result is None:
            result = _bool(_eval(op, table), name)
        else:
            needed = pc.fill_null(result if is_and else pc.invert(result), True)
            result = combine(result, _bool(_lazy(op, table, needed), name))
    return result


def typed_only(node: exp.Expr, table: pa.Table) -> Value:
    """``node`` typed but not run, as PostgreSQL's planner treats a part it drops (after
    a constant COALESCE argument, a constant CASE condition): NULL of its type; a
    constant that fails contributes no type."""
    try:
        return _eval(node, table.slice(0, 0))
    except EvaluationError:
        return pa.scalar(None)


def _operands(node: exp.Expr, cls: type) -> list[exp.Expr]:
    node = node.unnest()
    if type(node) is cls:
        return _operands(node.this, cls) + _operands(node.expression, cls)
    return [node]


def _unsupported(node: exp.Expr) -> Unsupported:
    if type(node) in _OPERATORS:
        what = _OPERATORS[type(node)]
    elif isinstance(node, exp.Anonymous):
        what = f"function {node.name}"
    elif node.find(exp.Query):
        what = "subquery"
    elif isinstance(node, exp.Column):
        what = f"column reference {node.sql(dialect=DIALECT)}"
    elif isinstance(node, exp.Func):
        what = f"function {node.sql_name().lower()}"
    else:
        what = node.key.replace("_", " ")
    return Unsupported(f"EXPECT cannot use {what} yet")


def _lazy(node: exp.Expr, table: pa.Table, needed: Data) -> Value:
    """node's value where it is ``needed``: an evaluation error counts only in rows that
    PostgreSQL's short-circuit evaluation reaches (elsewhere the value is NULL, unused)."""
    try:
        return _eval(node, table)
    except EvaluationError:
        mask = _array(needed, table.num_rows)
        v = _eval(node, table.filter(mask))  # raises again if a needed row fails
        if isinstance(v, pa.Scalar | Unknown):
            return v
        return pc.replace_with_mask(pa.nulls(table.num_rows, v.type), mask, _array(v, 0))


# -- comparisons, casts, LIKE ---------------------------------------------------------


def _quantified(node: exp.Expr, q: exp.Any | exp.All) -> exp.Expr:
    """``x op ANY/ALL (ARRAY[e1, …])`` as ``x op e1 OR/AND …``: PostgreSQL's three-valued
    answer, element by element (none: ANY is false, ALL true). Only an array written out
    (a literal's elements are, ``sql/array_literals.py``); an array value goes to Spark."""
    array, element_type = q.this, None
    while isinstance(array, exp.Paren | exp.Cast):
        if isinstance(array, exp.Cast):
            if not (array.to.is_type(exp.DType.ARRAY) and array.to.expressions):
                break
            element_type = array.to.expressions[0]
        array = array.this
    if not isinstance(array, exp.Array):
        raise Unsupported(f"{q.key.upper()} of an array value is not supported in process yet")
    tests: list[exp.Expr] = [type(node)(this=node.this.copy(), expression=e.copy() if (
        element_type is None) else exp.Cast(this=e.copy(), to=element_type.copy()))
        for e in array.expressions]
    if not tests:
        return exp.Boolean(this=isinstance(q, exp.All))
    join = exp.Or if isinstance(q, exp.Any) else exp.And
    return reduce(lambda a, b: join(this=a, expression=b), tests)


def _compare(fn: str, op: str, a: Value, b: Value) -> Data:
    a, b = _unify([a, b], op)
    k = _kind(a.type)
    if k == "null":
        return NULL_BOOL
    if k != "float":
        return getattr(pc, fn)(a, b)
    # PostgreSQL: NaN equals NaN and sorts above every other number; IEEE says neither.
    flip = {"not_equal": "equal", "greater_equal": "less", "less_equal": "greater"}
    if fn in flip:
        return pc.invert(_compare(flip[fn], op, a, b))
    if fn == "greater":
        a, b, fn = b, a, "less"
    nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
    nan = pc.and_kleene(nan_a if fn == "equal" else pc.invert(nan_a), nan_b)
    return pc.or_kleene(getattr(pc, fn)(a, b), nan)


def cast(v: Value, to: exp.DataType) -> Data:
    """``v`` cast to ``to`` as PostgreSQL casts (Unsupported where not known)."""
    return _cast(v, to)


def _cast(v: Value, to: exp.DataType) -> Data:
    found = _fn().cast(v, to)
    if found is not None:
        return found
    if to.is_type("decimal") and not to.expressions:  # numeric: every digit kept
        v = _parse(v, pa.decimal128(38, 0)) if isinstance(v, Unknown) else v
        if _kind(v.type) in ("int", "null"):
            return pc.cast(v, _decimal(*_ps(v.type)) if _kind(v.type) == "int"
                           else pa.decimal128(38, 0))
        if _kind(v.type) == "dec":
            return v
        raise Unsupported(f"EXPECT cannot cast {_pg(v.type)} to numeric yet")
    st = parse_type(to.sql(dialect=DIALECT))
    t, kt = st.arrow, _kind(st.arrow)
    # Not: real, timestamp(p) (rounds), char (pads), varchar(n) (truncates), jsonb, boolean.
    if (kt not in ("int", "dec", "float", "text", "time") or t == pa.float32()
            or (to.expressions and kt != "dec") or st.name in ("character", "jsonb")):
        raise Unsupported(f"EXPECT cannot cast to {to.sql(dialect=DIALECT).lower()} yet")
    v = _parse(v, t) if isinstance(v, Unknown) else v
    ks = _kind(v.type)
    if v.type == t or ks == "null" or (ks, kt) in (("text", "text"), ("float", "float")):
        return pc.cast(v, t)
    if ks == "int" and kt in ("int", "float", "text"):
        return _checked(lambda: pc.cast(v, t, safe=kt != "float"), t)
    if ks == "int" and kt == "dec":
        return _checked(lambda: pc.cast(pc.cast(v, _decimal(_ps(v.type)[0] + t.scale,
                                                            t.scale)), t), t)
    if ks == "dec" and kt in ("int", "dec"):  # rounds half away from zero, as PostgreSQL
        p, s, scale = v.type.precision, v.type.scale, t.scale if kt == "dec" else 0
        return _checked(lambda: pc.cast(pc.round(
            pc.cast(v, _decimal(p + 1, s)), scale, round_mode="half_towards_infinity")
            if s > scale else v, t), t)
    if ks == "dec" and kt == "float":
        return _widen(v, t)
    if ks == "float" and kt == "int":  # rint(), then a range check (NaN fails it)
        return _checked(lambda: pc.cast(pc.round(v, 0, round_mode="half_to_even"), t), t)
    if ks == kt == "time":  # a timestamp's date is its floor; zones are UTC's
        return pc.cast(v, t, safe=False)
    raise Unsupported(f"EXPECT cannot cast {_pg(v.type)} to {st.name} yet")


def _like(node: exp.Expr, table: pa.Table) -> Data:
    """LIKE as PostgreSQL: % and _, backslash (or ESCAPE's) escape; ILIKE is LIKE on
    lower(string) and lower(pattern)."""
    escape = "\\"
    if isinstance(node, exp.Escape):
        esc = node.expression
        if not (isinstance(esc, exp.Literal) and esc.is_string):
            raise Unsupported("EXPECT cannot use a non-constant LIKE escape yet")
        if len(esc.this) > 1:
            raise _fail("invalid escape string", "22025")
        escape, node = esc.this, node.this
    if not isinstance(node, exp.Like | exp.ILike):
        raise _unsupported(node)
    v, pattern = _eval(node.this, table), node.expression
    if not isinstance(v, Unknown) and _kind(v.type) not in ("text", "null"):
        raise UnknownFunction(f"operator does not exist: {_pg(v.type)} ~~ unknown")
    if isinstance(pattern, exp.Null):
        return NULL_BOOL
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise Unsupported("EXPECT cannot use a non-constant LIKE pattern yet")
    text, tokens, i = pattern.this, [], 0  # (is a wildcard, character)
    while i < len(text):
        if text[i] == escape:
            if i + 1 == len(text):  # PostgreSQL fails only in rows whose match gets there
                raise Unsupported("EXPECT cannot use a LIKE pattern that ends with its escape "
                                  "character", hint="escape it too to match it: \\\\")
            i += 1
            tokens.append((False, text[i]))
        else:
            tokens.append((text[i] in "%_", text[i]))
        i += 1
    s = _text(v, "like")
    if isinstance(node, exp.ILike):
        s = pc.utf8_lower(s)
        lowered = iter(pc.utf8_lower(pa.array([c for w, c in tokens if not w],
                                               pa.string())).to_pylist())
        tokens = [(w, c if w else next(lowered)) for w, c in tokens]
    regex = "".join((".*" if c == "%" else ".") if w else f"\\x{{{ord(c):x}}}"
                    for w, c in tokens)
    found = pc.match_substring_regex(s, f"(?s)\\A{regex}\\z")
    return pc.invert(found) if node.args.get("negate") else found
