"""More of PostgreSQL's functions in clients' catalog queries, each rewritten to DuckDB
only where the two agree (``catalog_sql.py`` calls :func:`evaluable` and
:func:`rewrite`). JDBC's driver and the BI tools over it send these:

- ``generate_series(a, b)`` as a FROM item, on integers (pgjdbc's TypeInfoCache numbers
  the search path with it; ``getImportedKeys`` the key columns): DuckDB's is inclusive
  too and empty for a NULL bound; its values are cast to ``integer``, PostgreSQL's type;
- ``array_upper(a, 1)``: the length of a one-dimensional array, NULL when it is empty;
- ``substring(s, n [, m])`` with constant ``n >= 1`` and ``m >= 0`` (DBeaver's constraint
  listing): DuckDB counts a negative start from the end, PostgreSQL does not;
- ``format(f, …)`` with a constant ``f`` of ``%s``, ``%I`` and ``%%`` (Metabase's field
  listing): ``%s`` prints NULL as nothing, ``%I`` quotes as ``quote_ident`` and refuses
  NULL with PostgreSQL's error;
- ``now()`` (and Materialize's ``mz_now()``, which dbt-materialize's ``deploy_await``
  compares with a timestamp): the statement's time, one constant;
- ``mz_aclexplode(privileges).*``: DuckDB's ``unnest`` of the list of rows the snapshot's
  function returns (catalog/pg_functions.py), its fields spread into columns.
"""

from __future__ import annotations

import datetime as dt
import re

from sqlglot import exp

from mzflow.engine.local import NotEvaluable
from mzflow.errors import Error, InvalidOption

NAMES = ("generate_series", "array_upper", "substring", "format")
NOW = ("current_timestamp", "now", "mz_now", "transaction_timestamp")
NULL_IDENTIFIER = "null values cannot be formatted as an SQL identifier"


class NullValueNotAllowed(Error):
    code = "22004"  # null_value_not_allowed


def evaluable(node: exp.Expr, name: str) -> bool:
    """Whether this call of ``name`` (one of NAMES) agrees on DuckDB; raises
    NotEvaluable naming what does not."""
    args = _args(node)
    if name == "generate_series":
        if not isinstance(node.parent, exp.Table) or len(args) != 2 or any(
                isinstance(a, exp.Literal) and not _natural(a) for a in args):
            raise NotEvaluable("generate_series in a query of system catalogs is supported "
                               "only as a FROM item over two integers")
        return True
    if name == "array_upper":
        if len(args) != 2 or not (isinstance(args[1], exp.Literal) and args[1].this == "1"):
            raise NotEvaluable("array_upper in a query of system catalogs is supported only "
                               "for dimension 1")
        return True
    if name == "substring":
        if not 2 <= len(args) <= 3 or not all(_natural(a, low=i == 0) for i, a in
                                                   enumerate(args[1:])):
            raise NotEvaluable("substring in a query of system catalogs is supported only "
                               "with a constant start of 1 or more")
        return True
    if name == "format":
        if not args or not (isinstance(args[0], exp.Literal) and args[0].is_string):
            raise NotEvaluable("format in a query of system catalogs is supported only with "
                               "a constant format string")
        _pieces(args[0].name, len(args) - 1)
        return True
    return False


def rewrite(node: exp.Expr, name: str) -> exp.Expr:
    """The DuckDB form of a call :func:`evaluable` accepted."""
    args = _args(node)
    if name == "generate_series":
        table = node.parent
        assert isinstance(table, exp.Table)
        series = exp.Anonymous(this="generate_series", expressions=args)
        inner = exp.select(exp.cast(exp.column("generate_series"), "INTEGER").as_(
            "generate_series")).from_(exp.Table(this=series))
        table.replace(exp.Subquery(this=inner, alias=table.args.get("alias")))
        return node
    if name == "array_upper":
        length = exp.cast(exp.Anonymous(this="len", expressions=[args[0]]), "INTEGER")
        return exp.Case(ifs=[exp.If(this=exp.EQ(this=length, expression=exp.Literal.number(0)),
                                    true=exp.null())], default=length.copy())
    if name == "substring":
        return exp.Anonymous(this="substring", expressions=args)
    return _format(args[0].name, args[1:])


def _args(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    if isinstance(node, exp.GenerateSeries):
        return [a for a in (node.args.get("start"), node.args.get("end"), node.args.get("step"))
                if a is not None] + list(node.expressions)
    if isinstance(node, exp.Substring):
        return [a for a in (node.this, node.args.get("start"), node.args.get("length"))
                if a is not None]
    return list(node.iter_expressions())


def _natural(node: exp.Expr, low: bool = False) -> bool:
    """An integer literal, at least 1 when ``low``."""
    return isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit() and (
        not low or int(node.this) >= 1)


_SPEC = re.compile(r"%(.)")


def _pieces(fmt: str, nargs: int) -> list[str]:
    """``fmt`` split into literal text and the specifiers ``%s``/``%I``, checked against
    the number of arguments."""
    out, used, pos = [], 0, 0
    for m in _SPEC.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        spec = m.group(1)
        if spec == "%":
            out[-1] += "%"
            continue
        if spec not in "sI":
            raise NotEvaluable(f"format's %{spec} in a query of system catalogs is not "
                               "supported yet")
        out.append("%" + spec)
        used += 1
    if fmt[pos:].count("%"):
        raise InvalidOption("unterminated format() type specifier")
    out.append(fmt[pos:])
    if used > nargs:
        raise InvalidOption("too few arguments for format()")
    return out


def _format(fmt: str, args: list[exp.Expr]) -> exp.Expr:
    parts: list[exp.Expr] = []
    values = iter(args)
    for piece in _pieces(fmt, len(args)):
        if piece in ("%s", "%I"):
            text = exp.cast(next(values), "VARCHAR")
            if piece == "%s":
                parts.append(exp.func("coalesce", text, exp.Literal.string("")))
            else:
                parts.append(exp.Case(
                    ifs=[exp.If(this=exp.Is(this=text, expression=exp.null()),
                                true=exp.Anonymous(this="error", expressions=[
                                    exp.Literal.string(NULL_IDENTIFIER)]))],
                    default=exp.Anonymous(this="mz_pg_quote_ident_1",
                                          expressions=[text.copy()])))
        elif piece:
            parts.append(exp.Literal.string(piece))
    if not parts:
        return exp.Literal.string("")
    out = parts[0]
    for part in parts[1:]:
        out = exp.DPipe(this=out, expression=part, safe=True)
    return out


def regproc_name(text: str) -> str:
    """``'pg_catalog.array_in'::regproc`` as the system relations hold a regproc: the
    function's name as regproc's output prints it (no ``pg_catalog.``; an unquoted
    name folded to lower case)."""
    name = text.strip()
    if name.lower().startswith("pg_catalog."):
        name = name[len("pg_catalog."):]
    return name[1:-1].replace('""', '"') if name.startswith('"') else name.lower()


def now(node: exp.Expr, moment: dt.datetime) -> exp.Expr:
    """A call of one of NOW as the statement's time (a timestamptz constant)."""
    if isinstance(node, exp.Anonymous) and node.expressions:
        raise NotEvaluable(f"function {node.name} with arguments is not supported")
    return exp.Cast(this=exp.Literal.string(moment.isoformat()),
                    to=exp.DataType.build("TIMESTAMPTZ", dialect="duckdb"))


def explode(node: exp.Dot) -> exp.Expr | None:
    """``f(…).*`` of the rewritten ``mz_aclexplode`` (a list of structs): DuckDB's unnest,
    which spreads the struct's fields into columns; None if ``node`` is no such thing."""
    call = node.this
    if not isinstance(node.expression, exp.Star) or not isinstance(call, exp.Anonymous) or (
            str(call.this) != "mz_pg_mz_aclexplode_1"):
        return None
    return exp.Anonymous(this="unnest", expressions=[call.copy(), exp.Kwarg(
        this=exp.var("recursive"), expression=exp.true())])
