"""Clients' catalog queries (``pg_catalog``, ``information_schema``), in process, on
DuckDB.

psql's ``\\d``, SQLAlchemy's inspector and JDBC drivers send queries with correlated
subqueries, outer joins, CASE, arrays (``= ANY``, ``unnest``, ``array_agg``), regular
expressions and casts to ``regclass``: more than sqlglot's Python executor evaluates
correctly (``engine/local.py`` keeps to a small verified subset). DuckDB evaluates
them, over the system relations' rows registered as Arrow tables, with PostgreSQL's
NULL ordering. A query is first rewritten for it here:

- each system relation becomes its registered table, under the name it was read by;
  column qualifiers lose their schema (``pg_catalog.pg_class.relname``);
- ``pg_catalog.f(…)`` is ``f(…)``; PostgreSQL's catalog functions call the snapshot's
  (``catalog/pg_functions.py``, as DuckDB Python functions); those whose answer is
  always the same here are constants (``has_table_privilege``: true; ``pg_get_expr``:
  NULL, nothing has an expression);
- ``'name'::regclass`` is the relation's OID; ``oid::regclass`` stays the OID in
  comparisons and is printed as the relation's name (its output function) where it
  is a result column or is cast to text; likewise ``regtype``, ``regnamespace``,
  ``regrole`` and ``regproc``;
- ``OPERATOR(pg_catalog.~)`` is ``~``; ``COLLATE "default"`` / ``"C"`` go (DuckDB
  compares bytes, as the C collation).

What :func:`verify` does not know to agree with PostgreSQL is refused by name
(:class:`~mzflow.engine.local.NotEvaluable`): division, arithmetic on anything but
integers, date and time functions, and any function not listed here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.catalog.pg_functions import CatalogFunctions
from mzflow.engine import catalog_rewrites
from mzflow.engine.local import NotEvaluable
from mzflow.errors import Error, UnknownRelation
from mzflow.storage.types import parse_type


@dataclass(frozen=True)
class Relation:
    """A system relation's rows under the name the query reads it by."""

    key: str  # the DuckDB table name
    columns: tuple[tuple[str, str], ...]  # (name, type): PostgreSQL or mzflow type names
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True)
class Answer:
    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]


# -- types ---------------------------------------------------------------------------

_LIST_OF = {"int2vector": "smallint", "oidvector": "oid"}
_ARROW: dict[str, pa.DataType] = {
    "oid": pa.uint32(), "xid": pa.uint32(), "regclass": pa.uint32(), "regtype": pa.uint32(),
    "regnamespace": pa.uint32(), "regrole": pa.uint32(),
    "name": pa.string(), '"char"': pa.string(), "regproc": pa.string(),
    "pg_node_tree": pa.string(), "anyarray": pa.string(), "aclitem": pa.string(),
    "mz_aclitem": pa.string(), "interval": pa.duration("us"),
    "character varying": pa.string(), "json": pa.string(),
}


def arrow_type(type_text: str) -> pa.DataType:
    """How a column of ``type_text`` is registered with DuckDB."""
    if type_text in _LIST_OF:
        return pa.list_(arrow_type(_LIST_OF[type_text]))
    if type_text.endswith("[]"):
        return pa.list_(arrow_type(type_text[:-2]))
    if type_text in _ARROW:
        return _ARROW[type_text]
    return parse_type(type_text).arrow


_DUCK_CASTS = {
    "oid": "UINTEGER", "xid": "UINTEGER", "name": "VARCHAR", "text": "VARCHAR",
    "varchar": "VARCHAR", "character varying": "VARCHAR", "bpchar": "VARCHAR",
    "char": "VARCHAR", "character": "VARCHAR", '"char"': "VARCHAR", "int2": "SMALLINT",
    "smallint": "SMALLINT", "int4": "INTEGER", "int": "INTEGER", "integer": "INTEGER",
    "int8": "BIGINT", "bigint": "BIGINT", "bool": "BOOLEAN", "boolean": "BOOLEAN",
    "float8": "DOUBLE", "double precision": "DOUBLE", "float4": "FLOAT", "real": "FLOAT",
    "json": "JSON", "jsonb": "JSON",
}
# A cast's PostgreSQL type name, as Result.types prints it.
_PG_NAMES = {"int2": "smallint", "int4": "integer", "int": "integer", "int8": "bigint",
             "bool": "boolean", "float8": "double precision", "float4": "real",
             "varchar": "character varying", "bpchar": "character", "char": '"char"',
             "character": "character"}
_REG_TYPES = ("regclass", "regtype", "regnamespace", "regrole", "regproc")
_UINTEGER = exp.DataType.build("UINTEGER", dialect="duckdb")


def _cast_type(dtype: exp.DataType) -> str:
    """A cast's target as a PostgreSQL type name (``pg_catalog.`` dropped)."""
    if dtype.is_type(exp.DType.ARRAY) and dtype.expressions:
        inner = dtype.expressions[0]
        assert isinstance(inner, exp.DataType)
        return _cast_type(inner) + "[]"
    kind = dtype.args.get("kind")
    if isinstance(dtype, exp.ObjectIdentifier):
        return dtype.name.lower()
    if isinstance(kind, exp.Dot):
        kind = kind.expression
    if isinstance(kind, exp.Identifier):
        return '"char"' if kind.quoted and kind.name == "char" else kind.name.lower()
    return dtype.sql(dialect="postgres").lower()


def _duck_cast(pg: str) -> exp.DataType:
    if pg.endswith("[]"):
        inner = _duck_cast(pg[:-2])
        return exp.DataType(this=exp.DType.ARRAY, expressions=[inner], nested=True)
    duck = _DUCK_CASTS.get(pg)
    if duck is None:
        raise NotEvaluable(f"a cast to {pg} in a query of system catalogs is not supported "
                           "yet")
    return exp.DataType.build(duck, dialect="duckdb")


def _result_type(duck: str) -> str:
    duck = duck.upper()
    if duck.endswith("[]"):
        return _result_type(duck[:-2]) + "[]"
    if duck.startswith("DECIMAL"):
        return "numeric"
    return {
        "BOOLEAN": "boolean", "TINYINT": "smallint", "SMALLINT": "smallint",
        "INTEGER": "integer", "BIGINT": "bigint", "HUGEINT": "numeric", "UINTEGER": "oid",
        "USMALLINT": "integer", "UBIGINT": "numeric", "FLOAT": "real",
        "DOUBLE": "double precision", "DATE": "date", "INTERVAL": "interval",
        "TIMESTAMP WITH TIME ZONE": "timestamp with time zone",
        "TIMESTAMP": "timestamp without time zone", "JSON": "json",
    }.get(duck, "text")


# -- the rewrite ---------------------------------------------------------------------

# Functions whose answer is the same for every row here.
_CONSTANTS: dict[str, exp.Expr] = {
    **{f: exp.true() for f in (
        "has_table_privilege", "has_schema_privilege", "has_database_privilege",
        "has_column_privilege", "has_any_column_privilege", "has_function_privilege",
        "has_sequence_privilege", "pg_type_is_visible", "pg_collation_is_visible",
        "pg_function_is_visible", "pg_opclass_is_visible", "pg_operator_is_visible")},
    "pg_relation_is_publishable": exp.false(),
    # Sizes of storage PostgreSQL's way are unknown here: NULL (psql prints nothing).
    **{f: exp.cast(exp.null(), "BIGINT") for f in (
        "pg_table_size", "pg_relation_size", "pg_total_relation_size", "pg_indexes_size",
        "pg_database_size")},
    **{f: exp.cast(exp.null(), "VARCHAR") for f in (
        "pg_get_expr", "pg_get_constraintdef", "pg_get_serial_sequence",
        "pg_get_statisticsobjdef_columns", "shobj_description", "pg_get_triggerdef",
        "pg_get_function_identity_arguments", "pg_get_function_result",
        "pg_get_function_arguments", "pg_get_ruledef", "pg_get_partkeydef")},
}
_ACL_ROWS = ("STRUCT(grantor VARCHAR, grantee VARCHAR, privilege_type VARCHAR, "
             "is_grantable BOOLEAN)[]")
# Functions of the snapshot: name → (arities, method of CatalogFunctions, DuckDB types).
_UDFS: dict[str, tuple[tuple[int, ...], str, tuple[str, ...], str]] = {
    "format_type": ((2,), "format_type", ("BIGINT", "BIGINT"), "VARCHAR"),
    "pg_get_userbyid": ((1,), "get_userbyid", ("BIGINT",), "VARCHAR"),
    "pg_table_is_visible": ((1,), "table_is_visible", ("BIGINT",), "BOOLEAN"),
    "pg_get_viewdef": ((1, 2), "get_viewdef", ("BIGINT",), "VARCHAR"),
    "pg_get_indexdef": ((1, 3), "get_indexdef", ("BIGINT", "BIGINT"), "VARCHAR"),
    "obj_description": ((1, 2), "obj_description", ("BIGINT", "VARCHAR"), "VARCHAR"),
    "col_description": ((2,), "col_description", ("BIGINT", "BIGINT"), "VARCHAR"),
    "pg_encoding_to_char": ((1,), "encoding_to_char", ("BIGINT",), "VARCHAR"),
    "quote_ident": ((1,), "quote_ident", ("VARCHAR",), "VARCHAR"),
    "pg_size_pretty": ((1,), "size_pretty", ("BIGINT",), "VARCHAR"),
    # NULL for a name that means nothing (psycopg's TypeInfo.fetch asks for hstore).
    "to_regtype": ((1,), "to_regtype", ("VARCHAR",), "BIGINT"),
    "to_regclass": ((1,), "to_regclass", ("VARCHAR",), "BIGINT"),
    # A set-returning function: read as ``mz_aclexplode(privileges).*`` (see _explode).
    "mz_aclexplode": ((1,), "aclexplode", ("VARCHAR[]",), _ACL_ROWS),
}
_REG_IO = {name: (f"{name}_in", f"{name}_out") for name in _REG_TYPES}
# Extra arguments PostgreSQL's variants take that change nothing here (pretty printing).
_USED_ARGS = {"pg_get_viewdef": 1, "pg_get_indexdef": 2}
# DuckDB's own functions that agree with PostgreSQL's on catalog values.
_NATIVE = {"array_to_string", "unnest", "explode", "generate_subscripts", "array_agg",
           "bool_and", "bool_or", "logical_and", "logical_or", "string_agg", "group_concat",
           "lower", "upper", "length", "coalesce", "nullif", "array_length", "count",
           "min", "max", "sum", "json_object", "json_build_object", "concat", "trim",
           "btrim", "ltrim", "rtrim", "replace", "starts_with", "array", "row_number",
           "rank", "dense_rank", "_pg_expandarray"}
# PostgreSQL's name → DuckDB's, for the same function.
_RENAMED = {"json_build_object": "json_object"}
_OPERATORS: dict[str, Callable[[exp.Expr, exp.Expr], exp.Expr]] = {
    "~": lambda a, b: exp.RegexpLike(this=a, expression=b),
    "!~": lambda a, b: exp.not_(exp.RegexpLike(this=a, expression=b)),
    "~*": lambda a, b: exp.RegexpILike(this=a, expression=b),
    "!~*": lambda a, b: exp.not_(exp.RegexpILike(this=a, expression=b)),
    "=": lambda a, b: exp.EQ(this=a, expression=b),
    "<>": lambda a, b: exp.NEQ(this=a, expression=b),
    "~~": lambda a, b: exp.Like(this=a, expression=b),
    "!~~": lambda a, b: exp.not_(exp.Like(this=a, expression=b)),
}
_REG_OUT = "mzflow_reg_out"  # meta key: the node is a reg* value printed by this function
_PG_TYPE = "mzflow_pg_type"  # meta key: the PostgreSQL type a cast made


def function_name(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return None


def _bottom_up(query: exp.Expr, fun: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """``fun`` applied to every node, children before their parents (sqlglot's own
    transform does not visit what a replacement contains). A replacement that wraps the
    node itself must wrap a copy: the node is replaced where it stands."""
    for node in reversed(list(query.dfs())):
        new = fun(node)
        if new is node:
            continue
        if node is query:
            query = new
        else:
            node.replace(new)
    return query


def unqualified(query: exp.Query) -> exp.Query:
    """``query`` without ``pg_catalog.`` on its functions and its column qualifiers."""
    out = _bottom_up(query, _unqualify)
    assert isinstance(out, exp.Query)
    return out


_FUNCTION_SCHEMAS = ("pg_catalog", "information_schema", "mz_catalog", "mz_internal")


def _unqualify(node: exp.Expr) -> exp.Expr:
    """``pg_catalog.f(…)`` → ``f(…)``; column qualifiers lose schema and database."""
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and (
            node.this.name.lower() in _FUNCTION_SCHEMAS) and isinstance(
            node.expression, exp.Func):
        return node.expression
    if isinstance(node, exp.Column):
        node.set("db", None)
        node.set("catalog", None)
    return node


def _stringish(node: exp.Expr) -> bool:
    if isinstance(node, exp.Literal):
        return node.is_string
    if isinstance(node, exp.Cast):
        return _cast_type(node.to) in ("text", "varchar", "name", "character varying")
    return function_name(node) in ("pg_get_serial_sequence", "concat") or isinstance(
        node, exp.DPipe)


def _rewrite(node: exp.Expr, fns: CatalogFunctions) -> exp.Expr:
    if isinstance(node, exp.Dot) and (exploded := catalog_rewrites.explode(node)) is not None:
        return exploded
    if isinstance(node, exp.Operator):
        op = str(node.args.get("operator") or "").removeprefix("pg_catalog.").strip()
        make = _OPERATORS.get(op)
        if make is None:
            raise NotEvaluable(f"operator {op} in a query of system catalogs is not "
                               "supported yet")
        return make(node.this, node.expression)
    if isinstance(node, exp.Collate):
        collation = node.expression.name.strip('"').lower()
        if collation not in ("default", "c"):
            raise NotEvaluable(f'collation "{collation}" is not supported')
        return node.this
    if isinstance(node, exp.Cast):
        return _rewrite_cast(node, fns)
    if isinstance(node, exp.ByteString):  # E'…': its escapes already read
        return exp.Literal.string(node.name)
    if isinstance(node, exp.DPipe) and (isinstance(node.this, exp.Array)
                                        or isinstance(node.expression, exp.Array)):
        # PostgreSQL's array || array reads a NULL array as empty; DuckDB's list_concat
        # too (its || gives NULL).
        return exp.Anonymous(this="list_concat", expressions=[node.this, node.expression])
    if isinstance(node, exp.Like | exp.ILike) and not isinstance(node.parent, exp.Escape):
        # PostgreSQL's LIKE escapes with a backslash unless told otherwise; DuckDB's
        # has no escape character unless told.
        return exp.Escape(this=node.copy(), expression=exp.Literal.string("\\"))
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Explode):
        node = exp.Unnest(expressions=[node.this.this], alias=node.args.get("alias"))
    if isinstance(node, exp.Unnest):
        alias = node.args.get("alias")
        if isinstance(alias, exp.TableAlias) and not alias.columns:
            # FROM unnest(a) x: PostgreSQL names the one column x too.
            alias.set("columns", [alias.this.copy()])
        return node
    name = function_name(node)
    if name in catalog_rewrites.NOW:
        return catalog_rewrites.now(node, fns.now)
    if name in catalog_rewrites.NAMES:
        return catalog_rewrites.rewrite(node, name)
    if name == "_pg_expandarray" and isinstance(node, exp.Anonymous):
        return _expand_array(node.expressions[0])
    if name in _RENAMED and isinstance(node, exp.Anonymous):
        return exp.Anonymous(this=_RENAMED[name], expressions=list(node.expressions))
    if name in _CONSTANTS:
        return _CONSTANTS[name].copy()
    if name in _UDFS:
        arities, _, _, _ = _UDFS[name]
        args = list(node.expressions) if isinstance(node, exp.Anonymous) else [
            a for a in node.iter_expressions()]
        if len(args) not in arities:
            raise NotEvaluable(f"function {name} with {len(args)} arguments is not "
                               "supported")
        args = args[:_USED_ARGS.get(name, len(args))]
        if name == "pg_get_viewdef" and isinstance(args[0], exp.Literal) and args[0].is_string:
            call = exp.Anonymous(this="mz_pg_viewdef_by_name_1", expressions=args[:1])
        else:
            call = exp.Anonymous(this=f"mz_pg_{name}_{len(args)}", expressions=args)
        if name == "pg_get_userbyid":
            call.meta[_PG_TYPE] = "name"  # a role name, as PostgreSQL types it
        return call
    return node


def _expand_array(array: exp.Expr) -> exp.Expr:
    """information_schema._pg_expandarray(a): a row (x, n) per element, n from 1 (an
    integer, as PostgreSQL's)."""
    template: exp.Expr = exp.maybe_parse("unnest(list_transform(range(1, len(_a) + 1), "
                               "lambda k: {'x': _a[k], 'n': k::INTEGER}))", dialect="duckdb")
    return template.transform(lambda n: array.copy() if isinstance(n, exp.Column) and (
        n.name == "_a") else n)


def _rewrite_cast(node: exp.Cast, fns: CatalogFunctions) -> exp.Expr:
    target = _cast_type(node.to)
    inner = node.this
    if target == "regproc" and isinstance(inner, exp.Literal) and inner.is_string:
        # The system relations hold a regproc as the function's name (its output).
        return exp.Literal.string(catalog_rewrites.regproc_name(inner.name))
    if target in _REG_TYPES:
        reader, printer = _REG_IO[target]
        if isinstance(inner, exp.Literal) and inner.is_string and target != "regproc":
            oid = getattr(fns, reader)(inner.name)
            value: exp.Expr = exp.Cast(this=exp.Literal.number(oid), to=_UINTEGER.copy())
        elif _stringish(inner) and target != "regproc":
            value = exp.Anonymous(this=f"mz_pg_{reader}_1", expressions=[inner])
        else:
            value = exp.Cast(this=inner, to=_UINTEGER.copy())
        value.meta[_REG_OUT] = printer
        return value
    if inner.meta.get(_REG_OUT) and target in ("text", "varchar", "name"):
        printer = inner.meta.pop(_REG_OUT)
        out: exp.Expr = exp.Anonymous(this=f"mz_pg_{printer}_1", expressions=[inner])
    else:
        out = exp.Cast(this=inner, to=_duck_cast(target))
    out.meta[_PG_TYPE] = target
    return out


def rewrite(query: exp.Query, fns: CatalogFunctions) -> tuple[exp.Query, list[str | None]]:
    """``query`` (its relations already renamed) for DuckDB, rewritten in place, and the
    PostgreSQL type of each result column the rewrite decided (a cast's target, a
    printed reg* value)."""
    query = _bottom_up(query, _unqualify)  # type: ignore[assignment]
    query = _bottom_up(query, lambda n: _rewrite(n, fns))  # type: ignore[assignment]
    _carry_reg_out(query)
    decided: list[str | None] = []
    left = _leftmost(query)
    for proj in list(left.selects if isinstance(left, exp.Select) else []):
        inner = proj.this if isinstance(proj, exp.Alias) else proj
        kind: str | None = None
        if inner.meta.get(_REG_OUT):
            kind = inner.meta[_REG_OUT].removesuffix("_out")
            printer = inner.meta.pop(_REG_OUT)
            inner.replace(exp.Anonymous(this=f"mz_pg_{printer}_1", expressions=[inner.copy()]))
        elif inner.meta.get(_PG_TYPE):
            kind = _PG_NAMES.get(inner.meta[_PG_TYPE], inner.meta[_PG_TYPE])
        decided.append(kind)
    # Any reg* value left (a comparison, ORDER BY) compares as its OID.
    for node in list(query.walk()):
        if isinstance(node, exp.Expr):
            node.meta.pop(_REG_OUT, None)
    return query, decided


def _carry_reg_out(query: exp.Query) -> None:
    """A reg* value a derived table's or a CTE's select list names prints as a name where
    an outer query selects that column as it is, as in PostgreSQL (it printed as its
    OID: the printing is decided on the outermost select list). Innermost first, so a
    column passed up through several levels keeps it."""
    ctes = {cte.alias_or_name: cte.this for cte in query.find_all(exp.CTE)}
    for select in reversed(list(query.find_all(exp.Select))):
        items = [select.args["from_"].this] if select.args.get("from_") else []
        items += [j.this for j in select.args.get("joins") or []]
        printers: dict[str, dict[str, str]] = {}
        for item in items:
            inner = item.this if isinstance(item, exp.Subquery) else (
                ctes.get(item.name) if isinstance(item, exp.Table) and not item.db else None)
            left = _leftmost(inner) if isinstance(inner, exp.Expr) else None
            if isinstance(left, exp.Select):
                printers[item.alias_or_name] = {
                    p.alias_or_name: (p.this if isinstance(p, exp.Alias) else p).meta[_REG_OUT]
                    for p in left.selects
                    if (p.this if isinstance(p, exp.Alias) else p).meta.get(_REG_OUT)}
        for proj in select.selects:
            column = proj.this if isinstance(proj, exp.Alias) else proj
            if not isinstance(column, exp.Column) or column.meta.get(_REG_OUT):
                continue
            for alias in [column.table] if column.table else list(printers):
                printer = printers.get(alias, {}).get(column.name)
                if printer is not None:
                    column.meta[_REG_OUT] = printer
                    break


def _leftmost(query: exp.Expr) -> exp.Expr:
    while isinstance(query, exp.SetOperation):
        query = query.left
    while isinstance(query, exp.Subquery):
        query = query.this
    return query


# -- what DuckDB may evaluate ----------------------------------------------------------

_STRUCTURE = (
    exp.Select, exp.Union, exp.Except, exp.Intersect, exp.Subquery, exp.From, exp.Join,
    exp.Where, exp.Group, exp.Having, exp.Order, exp.Ordered, exp.Limit, exp.Offset,
    exp.Distinct, exp.CTE, exp.With, exp.Table, exp.TableAlias, exp.Alias, exp.Column,
    exp.Identifier, exp.Star, exp.Paren, exp.Tuple, exp.Literal, exp.Null, exp.Boolean,
    exp.Array, exp.DataType, exp.DataTypeParam, exp.Var, exp.Cast,
    exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.In, exp.Between, exp.Is,
    exp.Not, exp.And, exp.Or, exp.Like, exp.ILike, exp.Escape, exp.RegexpLike,
    exp.RegexpILike, exp.Any, exp.All, exp.Exists, exp.NullSafeEQ, exp.NullSafeNEQ,
    exp.Case, exp.If, exp.DPipe, exp.Neg, exp.Lateral, exp.Unnest, exp.ByteString,
    exp.Window, exp.WindowSpec, exp.Bracket, exp.Filter,
    # dbt-materialize's deploy_await: intervals, a time plus an interval (DuckDB and
    # PostgreSQL agree on these for whole units) and EXTRACT(EPOCH FROM …), below.
    exp.Interval,
)
_INTEGER_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.BitwiseAnd, exp.BitwiseOr)


def verify(query: exp.Expr) -> None:
    """Raise NotEvaluable naming the first construct DuckDB might answer differently
    from PostgreSQL (checked before the rewrite, on what the client wrote)."""
    for node in query.walk():
        if isinstance(node, _STRUCTURE):
            continue
        if isinstance(node, _INTEGER_ARITHMETIC) and all(
                _integer_literal(x) or not isinstance(x, exp.Literal)
                for x in (node.this, node.expression)):
            continue  # catalog values are integers; a decimal literal is refused here
        if isinstance(node, exp.Operator | exp.Collate | exp.Dot | exp.ObjectIdentifier):
            continue  # rewritten (or refused) by the rewrite
        name = function_name(node)
        if name is not None and (name in _NATIVE or name in _CONSTANTS or name in _UDFS):
            continue
        if name in catalog_rewrites.NAMES and catalog_rewrites.evaluable(node, name):
            continue
        if isinstance(node, exp.Extract) and node.name.upper() == "EPOCH":
            continue  # seconds, as PostgreSQL's (DuckDB's other fields differ in type)
        if name in catalog_rewrites.NOW or (isinstance(node, exp.Add) and (
                isinstance(node.expression, exp.Interval) or isinstance(node.this, exp.Interval))):
            continue
        what = f"function {name}" if name else f"operator {node.key.replace('_', ' ')}"
        raise NotEvaluable(f"{what} in a query of system catalogs is not supported yet")


def _integer_literal(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit()


# -- running it ----------------------------------------------------------------------

class _Engine:
    """One DuckDB connection per thread, its functions calling ``functions``."""

    def __init__(self) -> None:
        import duckdb

        self.functions: CatalogFunctions | None = None
        self.con = duckdb.connect(config={"threads": 1})
        # PostgreSQL's default: NULLs sort after every value ascending, first descending.
        self.con.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
        self.con.execute("SET TimeZone = 'UTC'")
        for name, (arities, method, types, result) in _UDFS.items():
            for used in sorted({min(n, _USED_ARGS.get(name, n)) for n in arities}):
                self._register(f"mz_pg_{name}_{used}", method, list(types[:used]), result)
        self._register("mz_pg_viewdef_by_name_1", "get_viewdef_by_name", ["VARCHAR"],
                       "VARCHAR")
        for reg in _REG_TYPES:
            reader, printer = _REG_IO[reg]
            if hasattr(CatalogFunctions, reader):
                self._register(f"mz_pg_{reader}_1", reader, ["VARCHAR"], "UINTEGER")
            self._register(f"mz_pg_{printer}_1", printer, ["BIGINT"], "VARCHAR")

    def _register(self, udf: str, method: str, params: list[str], result: str) -> None:
        def call(*args: Any) -> Any:
            assert self.functions is not None
            return getattr(self.functions, method)(*args)

        # DuckDB reads a Python function's arity from its signature.
        fixed: dict[int, Callable[..., Any]] = {
            1: lambda a: call(a), 2: lambda a, b: call(a, b), 3: lambda a, b, c: call(a, b, c)}

        con: Any = self.con  # duckdb's stubs spell types as literals, not as text
        # NULL arguments reach the function: format_type(oid, NULL) is not NULL.
        con.create_function(udf, fixed[len(params)], params, result,
                            null_handling=_special_nulls())


def _special_nulls() -> Any:
    try:
        from duckdb.func import FunctionNullHandling
    except ImportError:  # duckdb 1.x
        from duckdb.functional import (  # type: ignore[no-redef]
            FunctionNullHandling,
        )
    return FunctionNullHandling.SPECIAL


_LOCAL = threading.local()


def _engine() -> _Engine:
    engine = getattr(_LOCAL, "engine", None)
    if engine is None:
        engine = _LOCAL.engine = _Engine()
    return engine


def run(query: exp.Query, relations: Sequence[Relation], functions: CatalogFunctions,
        names: list[str] | None, types: list[str | None]) -> Answer:
    """``query``'s rows (``query`` is rewritten in place: pass a copy). ``names``: the
    result columns' names (None: DuckDB's, for a query whose select list has a ``*``);
    ``types``: each column's PostgreSQL type where the caller knows it (a system
    relation's column), else None."""
    verify(query)
    engine = _engine()
    duck_query, decided = rewrite(query, functions)
    sql = duck_query.sql(dialect="duckdb")
    engine.functions = functions
    registered = []
    try:
        for rel in relations:
            schema = pa.schema([(c, arrow_type(t)) for c, t in rel.columns])
            data: list[Sequence[Any]] = (list(zip(*rel.rows, strict=True)) if rel.rows
                                         else [[] for _ in schema])
            table = pa.table([pa.array(list(col), type=f.type)
                              for col, f in zip(data, schema, strict=True)],
                             schema=schema)
            engine.con.register(rel.key, table)
            registered.append(rel.key)
        result = engine.con.execute(sql)
        rows = [tuple(r) for r in result.fetchall()]
        description = result.description or []
    except Error:
        raise
    except Exception as e:  # DuckDB's error, or a function's raised through it
        raise _error(e) from None
    finally:
        engine.functions = None
        for key in registered:
            engine.con.unregister(key)
    got = [str(d[0]) for d in description]
    columns = names if names is not None and len(names) == len(got) else got
    out_types = []
    for i, d in enumerate(description):
        known = types[i] if i < len(types) else None
        chosen = decided[i] if i < len(decided) else None
        out_types.append(chosen or known or _result_type(str(d[1])))
    return Answer(columns, out_types, rows)


def _error(e: Exception) -> Error:
    text = str(e)
    if catalog_rewrites.NULL_IDENTIFIER in text:
        return catalog_rewrites.NullValueNotAllowed(catalog_rewrites.NULL_IDENTIFIER)
    for line in text.splitlines():
        # A catalog function's own error, which DuckDB wraps with the function's name.
        if "does not exist" in line and "relation" in line:
            return UnknownRelation(line[line.index("relation"):].strip())
    first = text.split("\n")[0]
    return NotEvaluable(f"this catalog query is not supported: {first}")
