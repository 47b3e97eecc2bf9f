"""What a query must pass before any engine sees it, with PostgreSQL's message and
SQLSTATE, or Materialize's where its sqllogictest files show another wording.

Spark would refuse most of these too, in its own words (``[MISSING_AGGREGATION] …``);
the user asked PostgreSQL's question and gets PostgreSQL's answer instead:

- :func:`references`, before qualify: a qualified name ``x.c`` whose ``x`` is no FROM
  entry in reach or has no column ``c``; a LIMIT or OFFSET that reads its own query's
  columns; a type name that does not exist; ORDER BY / GROUP BY positions past the
  select list; one FROM naming a relation twice.
- :func:`placement`, after qualify (every column carries its relation, GROUP BY
  ordinals and aliases are expanded): aggregates and window functions where PostgreSQL
  forbids them, nested aggregates, window functions without OVER, columns neither
  grouped nor aggregated, DISTINCT ON against its ORDER BY, the widths of set
  operations and subqueries, and LIMIT / OFFSET values (negative, not constant). A
  constant LIMIT is folded to the integer PostgreSQL reads it as, so every later stage
  sees a plain number.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from mzflow.errors import (
    DuplicateAlias,
    GroupingError,
    InvalidColumnReference,
    InvalidLimit,
    InvalidOffset,
    InvalidTextRepresentation,
    MalformedQuery,
    UnknownColumn,
    UnknownObject,
    UnknownRelation,
    UnknownSchema,
    Unsupported,
    WindowingError,
    WrongObjectType,
)

_INTEGERS = (exp.DType.TINYINT, exp.DType.SMALLINT, exp.DType.INT, exp.DType.BIGINT)
_WRAPPERS = (exp.Filter, exp.IgnoreNulls, exp.RespectNulls)
_SCHEMAS = ("public", "pg_catalog", "mz_catalog", "mz_internal", "information_schema")
_WINDOW_ONLY = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.PercentRank, exp.CumeDist,
                exp.Ntile, exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue)
# Where a subquery is a relation or a set, not a value (which must be one column).
_NOT_SCALAR = (exp.From, exp.Join, exp.Lateral, exp.Exists, exp.In, exp.Any, exp.All,
               exp.SetOperation, exp.Subquery, exp.CTE, exp.Array)


# -- before qualify ------------------------------------------------------------------------

def references(query: exp.Query, columns: Mapping[str, object]) -> None:
    """``columns``: each FROM table's columns (a mapping by column name), by the table's
    (pinned) name."""
    for dtype in query.find_all(exp.DataType):
        if dtype.this == exp.DType.USERDEFINED:
            name = dtype.args.get("kind")
            if isinstance(name, exp.Dot) and name.this.name not in _SCHEMAS:
                raise UnknownSchema(f'schema "{name.this.name}" does not exist')
            raise UnknownObject(f'type "{name.sql() if name else dtype.sql()}" does not exist')
    scopes = list(traverse_scope(query))
    aliases = {alias for s in scopes for alias in s.sources}
    for scope in scopes:
        stars = [p for p in scope.expression.selects if isinstance(p, exp.Column)
                 and isinstance(p.this, exp.Star)] if isinstance(scope.expression,
                                                                  exp.Select) else []
        for column in [*scope.columns, *stars]:
            if column.table:
                _resolve(scope, column, columns, aliases)
        if isinstance(scope.expression, exp.Select):
            _limit_reads_own_columns(scope, columns)
            _positions(scope.expression)
            _aliases_once(scope.expression)


def _resolve(scope: Scope, column: exp.Column, columns: Mapping[str, object],
             aliases: set[str]) -> None:
    qualifier = column.table
    owner = _in_reach(scope, qualifier)
    if owner is None:
        if qualifier in aliases:
            # An entry of another FROM (a derived table's sibling): Materialize's words
            # (its join-lateral.slt); PostgreSQL says "invalid reference to FROM-clause
            # entry", with the same meaning.
            raise UnknownColumn(f'column "{qualifier}.{column.name}" does not exist')
        raise UnknownRelation(f'missing FROM-clause entry for table "{qualifier}"')
    if isinstance(column.this, exp.Star):
        return
    names = _names(owner.sources[qualifier], columns)
    if names is not None and column.name not in names:
        # Materialize quotes the qualified name (its aggregates.slt); PostgreSQL does not.
        raise UnknownColumn(f'column "{qualifier}.{column.name}" does not exist')


def _in_reach(scope: Scope, qualifier: str) -> Scope | None:
    """The scope whose FROM ``qualifier`` names, looking outward as SQL does: a derived
    table or a CTE sees the queries around its own query, not its FROM siblings."""
    s: Scope | None = scope
    while s is not None:
        if qualifier in s.sources:
            return s
        if (s.is_derived_table or s.is_cte) and s.parent is not None:
            s = s.parent.parent
        else:
            s = s.parent
    return None


def _names(source: object, columns: Mapping[str, object]) -> set[str] | None:
    """The column names a FROM entry offers, None where not known here (qualify
    checks those)."""
    if isinstance(source, exp.Table):
        stored = columns.get(source.name)
        if not isinstance(stored, Mapping):
            return None
        return set(_aliased(list(stored), source.args.get("alias")))
    if isinstance(source, Scope) and isinstance(source.expression, exp.Select):
        select = source.expression
        if any(isinstance(p, exp.Star) or (isinstance(p, exp.Column) and isinstance(
                p.this, exp.Star)) for p in select.selects):
            return None
        names = list(select.named_selects)
        if "" in names:
            return None
        holder = select.parent
        alias = holder.args.get("alias") if isinstance(holder, exp.Subquery | exp.CTE) else None
        return set(_aliased(names, alias))
    return None


def _aliased(names: list[str], alias: exp.Expr | None) -> list[str]:
    given = [c.name for c in alias.columns] if isinstance(alias, exp.TableAlias) else []
    return given + names[len(given):]


def _limit_reads_own_columns(scope: Scope, columns: Mapping[str, object]
                             ) -> None:
    """A LIMIT is evaluated once per query, before any of its rows: only an enclosing
    query's columns are in reach (a LATERAL top-k). PostgreSQL says "argument of LIMIT
    must not contain variables"; Materialize, whose words its limit.slt checks, does
    not look in the query's own FROM and so says the column does not exist."""
    select = scope.expression
    assert isinstance(select, exp.Select)
    own = {alias: _names(src, columns) for alias, src in scope.sources.items()}
    for word, clause in _limit_clauses(select):
        _forbidden(clause, word)
        for column in _own(clause):
            if not isinstance(column, exp.Column):
                continue
            if column.table in own or (not column.table and any(
                    names is not None and column.name in names for names in own.values())
                    and not _outside(scope, column.name, columns)):
                raise UnknownColumn(f'column "{column.sql()}" does not exist')


def _outside(scope: Scope, name: str, columns: Mapping[str, object]) -> bool:
    """Whether an enclosing query may offer a column ``name`` (True when unsure)."""
    s = scope.parent
    if (scope.is_derived_table or scope.is_cte) and s is not None:
        s = s.parent
    while s is not None:
        for source in s.sources.values():
            names = _names(source, columns)
            if names is None or name in names:
                return True
        s = s.parent.parent if (s.is_derived_table or s.is_cte) and s.parent else s.parent
    return False


def _positions(select: exp.Select) -> None:
    """``ORDER BY 5`` / ``GROUP BY 5`` name an output column by its position."""
    if any(isinstance(p, exp.Star) or isinstance(p.this, exp.Star) for p in select.selects):
        return  # its width is known after qualify expands it
    width = len(select.selects)
    order, group = select.args.get("order"), select.args.get("group")
    for clause, items in (("ORDER BY", [o.this for o in order.expressions] if order else []),
                          ("GROUP BY", group.expressions if group else [])):
        for item in items:
            if isinstance(item, exp.Literal) and item.is_int and not 1 <= int(item.this) <= width:
                raise InvalidColumnReference(
                    f"{clause} position {item.this} is not in select list")


def _aliases_once(select: exp.Select) -> None:
    from_ = select.args.get("from_") or select.args.get("from")
    seen: set[str] = set()
    for item in [from_.this] if from_ is not None else []:
        seen.add(item.alias_or_name)
    for join in select.args.get("joins") or []:
        name = join.this.alias_or_name
        if name and name in seen:
            raise DuplicateAlias(f'table name "{name}" specified more than once')
        seen.add(name)


# -- after qualify -------------------------------------------------------------------------

def placement(query: exp.Query) -> None:
    scopes = {id(s.expression): s for s in traverse_scope(query)}
    for scope in scopes.values():
        if isinstance(scope.expression, exp.Select):
            _select(scope, scopes)
        elif isinstance(scope.expression, exp.SetOperation):
            _limits(scope.expression)
    _widths(query)


def _widths(query: exp.Query) -> None:
    """Set operations, IN and scalar subqueries take as many columns as they compare."""
    for op in query.find_all(exp.SetOperation):
        if len(op.left.selects) != len(op.right.selects):
            word = {exp.Union: "UNION", exp.Intersect: "INTERSECT"}.get(type(op), "EXCEPT")
            raise MalformedQuery(f"each {word} query must have the same number of columns")
    for sub in query.find_all(exp.Subquery):
        inner = sub.this
        if not isinstance(inner, exp.Query):
            continue
        parent, width = sub.parent, len(inner.selects)
        if isinstance(parent, exp.In) and sub.arg_key == "query":
            left = parent.this
            wanted = len(left.expressions) if isinstance(left, exp.Tuple) else 1
            if width != wanted:
                raise MalformedQuery("subquery has too "
                                     f"{'many' if width > wanted else 'few'} columns")
        elif not isinstance(parent, _NOT_SCALAR) and width != 1:
            raise MalformedQuery("subquery must return only one column")


def _select(scope: Scope, scopes: dict[int, Scope]) -> None:
    select = scope.expression
    assert isinstance(select, exp.Select)
    for join in select.args.get("joins") or []:
        _forbidden(join.args.get("on"), "JOIN conditions")
    where = select.args.get("where")
    _forbidden(where.this if where is not None else None, "WHERE",
               aggregate_place="WHERE clause")  # Materialize's aggregates.slt
    group = select.args.get("group")
    _forbidden(group, "GROUP BY")
    having = select.args.get("having")
    _forbidden(having.this if having is not None else None, "HAVING", aggregates=False)
    for node in _own(select):
        if isinstance(node, _WINDOW_ONLY) and _window_of(node) is None:
            raise WrongObjectType(f"window function {node.sql_name().lower()} requires an "
                                  "OVER clause")
        if isinstance(node, exp.AggFunc):
            _aggregate_arguments(node)
    _limits(select)
    _grouping(scope, select, scopes)
    _distinct_on(select)


def _forbidden(clause: exp.Expr | None, place: str, *, aggregates: bool = True,
               aggregate_place: str | None = None) -> None:
    if clause is None:
        return
    for node in _own(clause):
        if aggregates and _is_aggregate(node):
            raise GroupingError(
                f"aggregate functions are not allowed in {aggregate_place or place}")
        if isinstance(node, exp.Window):
            raise WindowingError(f"window functions are not allowed in {place}")


def _aggregate_arguments(agg: exp.AggFunc) -> None:
    windowed = _window_of(agg) is not None
    order = agg.this if isinstance(agg.this, exp.Order) else None
    if order is not None and windowed:
        raise Unsupported("aggregate ORDER BY is not implemented for window functions")
    if order is not None and isinstance(order.this, exp.Distinct):
        args = order.this.expressions
        if not all(any(o.this == a for a in args) for o in order.expressions):
            raise InvalidColumnReference("in an aggregate with DISTINCT, ORDER BY expressions "
                                         "must appear in argument list")
    node: exp.Expr = agg
    while isinstance(node.parent, _WRAPPERS) and node.arg_key == "this":
        node = node.parent
        if isinstance(node, exp.Filter):
            _forbidden(node.expression, "FILTER")
    for inner in _own(agg):
        if inner is agg:
            continue
        if isinstance(inner, exp.Window):
            raise (WindowingError("window function calls cannot be nested") if windowed else
                   GroupingError("aggregate function calls cannot contain window function "
                                 "calls"))
        if _is_aggregate(inner) and not windowed:
            raise GroupingError("aggregate function calls cannot be nested")


def _limits(select: exp.Query) -> None:
    for word, value in list(_limit_clauses(select)):
        _forbidden(value, word)
        if value.find(exp.Subquery, exp.Query):
            raise Unsupported(f"a subquery in {word} is not supported yet")
        if any(isinstance(n, exp.Column) for n in _own(value)):
            # references() let through only the columns of an enclosing query.
            raise Unsupported(f"{word} that reads an enclosing query's columns (a LATERAL "
                              "top-k) is not supported yet")
        try:
            n = _bigint(value)
        except _NotConstant:
            continue
        if n is None:
            select.set(word.lower(), None)  # LIMIT NULL: no limit; OFFSET NULL: none
        elif n < 0:
            raise (InvalidLimit if word == "LIMIT" else InvalidOffset)(
                f"{word} must not be negative")
        else:
            value.replace(exp.Literal.number(n))


class _NotConstant(Exception):
    pass


def _bigint(node: exp.Expr) -> int | None:
    """A constant LIMIT/OFFSET as PostgreSQL coerces it to bigint (numerics round half
    away from zero; a quoted literal reads as a bigint's text)."""
    value = _constant(node)
    if isinstance(value, Decimal):
        return int(value.to_integral_value(rounding=ROUND_HALF_UP))
    return value


def _constant(node: exp.Expr) -> int | Decimal | None:
    if isinstance(node, exp.Paren):
        return _constant(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        text = node.this
        if node.is_string:
            try:
                return int(text.strip())
            except ValueError:
                raise InvalidTextRepresentation(
                    f'invalid input syntax for type bigint: "{text}"') from None
        if text.isdigit():
            return int(text)
        try:
            return Decimal(text)
        except InvalidOperation:
            raise _NotConstant from None
    if isinstance(node, exp.Neg):
        inner = _constant(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Cast) and node.to.this in _INTEGERS:
        return _bigint(node.this)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul):
        left, right = _constant(node.left), _constant(node.right)
        if left is None or right is None:
            return None
        if isinstance(node, exp.Add):
            return left + right
        return left - right if isinstance(node, exp.Sub) else left * right
    raise _NotConstant


def _grouping(scope: Scope, select: exp.Select, scopes: dict[int, Scope]) -> None:
    """Once a query groups (GROUP BY, HAVING or an aggregate of its own), what it
    outputs, filters by and orders by may read its own columns only through a grouped
    expression or inside an aggregate."""
    group, having, order = (select.args.get(k) for k in ("group", "having", "order"))
    distinct = select.args.get("distinct")
    on = distinct.args.get("on") if distinct is not None else None
    parts: list[exp.Expr] = [p.this if isinstance(p, exp.Alias) else p for p in select.selects]
    parts += [having.this] if having is not None else []
    parts += [o.this for o in order.expressions] if order is not None else []
    parts += [on] if on is not None else []
    if group is None and having is None and not any(
            _is_aggregate(n) for part in parts for n in _own(part)):
        return
    grouped = list(_grouped(group)) if group is not None else []
    for part in parts:
        found = _ungrouped(part, scope, grouped, scopes, nested=False)
        if found is not None:
            column, nested = found
            name = f'"{column.table}.{column.name}"'
            if nested:
                raise GroupingError(f"subquery uses ungrouped column {name} from outer query")
            raise GroupingError(f"column {name} must appear in the GROUP BY clause or be "
                                "used in an aggregate function")


def _distinct_on(select: exp.Select) -> None:
    """DISTINCT ON keeps the first row of each group in the ORDER BY's order, so the
    ORDER BY must sort by the DISTINCT ON expressions first."""
    distinct, order = select.args.get("distinct"), select.args.get("order")
    on = distinct.args.get("on") if distinct is not None else None
    if on is None or order is None:
        return
    outputs = {p.alias: p.this for p in select.selects if isinstance(p, exp.Alias)}

    def resolved(e: exp.Expr) -> exp.Expr:  # an output column's name (or position)
        return outputs.get(e.name, e) if isinstance(e, exp.Column) and not e.table else e

    left = [resolved(e) for e in (on.expressions if isinstance(on, exp.Tuple) else [on])]
    for ordered in order.expressions:
        if not left:
            return
        key = resolved(ordered.this)
        if not any(key == e for e in left):
            raise InvalidColumnReference("SELECT DISTINCT ON expressions must match initial "
                                         "ORDER BY expressions")
        left = [e for e in left if e != key]


def _grouped(group: exp.Group) -> Iterator[exp.Expr]:
    def flat(e: exp.Expr) -> Iterator[exp.Expr]:
        if isinstance(e, exp.Rollup | exp.Cube | exp.GroupingSets | exp.Tuple):
            for x in e.expressions:
                yield from flat(x)
        else:
            yield e
    for key in ("expressions", "grouping_sets", "cube", "rollup"):
        for e in group.args.get(key) or []:
            yield from flat(e)


def _ungrouped(node: exp.Expr, scope: Scope, grouped: list[exp.Expr],
               scopes: dict[int, Scope], nested: bool) -> tuple[exp.Column, bool] | None:
    if any(node == g for g in grouped):
        return None
    call = node.this if isinstance(node, _WRAPPERS) else node  # agg(…) FILTER (WHERE …)
    if isinstance(call, exp.AggFunc) and (nested or _window_of(call) is None):
        return None  # an aggregate's arguments are its rows'; a subquery's are its own
    if isinstance(node, exp.Column):
        # No relation after qualify: an output column's name (ORDER BY total).
        if node.table and _owner(node, scopes) is scope:
            return node, nested
        return None
    nested = nested or isinstance(node, exp.Subquery | exp.Query)
    for child in node.iter_expressions():
        found = _ungrouped(child, scope, grouped, scopes, nested)
        if found is not None:
            return found
    return None


def _owner(column: exp.Column, scopes: dict[int, Scope]) -> Scope | None:
    """The scope whose FROM the (qualified) column reads."""
    p = column.parent
    while p is not None and id(p) not in scopes:
        p = p.parent
    s = scopes[id(p)] if p is not None else None
    while s is not None and column.table not in s.sources:
        s = s.parent
    return s


# -- shared --------------------------------------------------------------------------------

def _own(root: exp.Expr) -> Iterator[exp.Expr]:
    """``root``'s nodes outside any nested query (a subquery has its own checks)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in node.iter_expressions()
                     if not isinstance(c, exp.Subquery | exp.Query))


def _limit_clauses(select: exp.Query) -> Iterator[tuple[str, exp.Expr]]:
    for key in ("limit", "offset"):
        clause = select.args.get(key)
        if isinstance(clause, exp.Limit | exp.Offset) and clause.expression is not None:
            yield key.upper(), clause.expression


def _window_of(agg: exp.Expr) -> exp.Window | None:
    node = agg
    while isinstance(node.parent, _WRAPPERS) and node.arg_key == "this":
        node = node.parent
    parent = node.parent
    return parent if isinstance(parent, exp.Window) and node.arg_key == "this" else None


def _is_aggregate(node: exp.Expr) -> bool:
    """An aggregate call of the query it stands in (not a window function's)."""
    return isinstance(node, exp.AggFunc) and _window_of(node) is None
