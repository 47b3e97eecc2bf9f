"""Binding: resolve the names in a query against the catalog.

Produces the query's dependencies (catalog item ids), its output columns
(names as PostgreSQL/Materialize name them, types, nullability) and a fully
qualified copy of the query that later stages can trust.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

from mzflow.catalog import checks, exprtypes, from_clause, names, srf, system
from mzflow.catalog.model import (
    RELATION_KINDS,
    ROWID,
    TABLE,
    Column,
    Item,
    Snapshot,
)
from mzflow.errors import (
    Error,
    InvalidDefinition,
    TypeMismatch,
    UnknownColumn,
    UnknownObject,
    UnknownRelation,
    Unsupported,
    WrongObjectType,
)
from mzflow.sql.ast import VersionedTable
from mzflow.sql.joins import replace_relation
from mzflow.sql.parse import DIALECT

UNNAMED = "?column?"
ROWID_COLUMN = Column(ROWID, "bigint", nullable=False)

@dataclass(frozen=True)
class Bound:
    query: exp.Query  # qualified: every column carries its relation
    columns: tuple[Column, ...]
    depends_on: tuple[str, ...]  # item ids of user relations read
    system_tables: tuple[str, ...]  # mz_* tables read


def type_name(dtype: exp.DataType | None) -> str:
    """A declared type → the name Materialize prints in SHOW COLUMNS / mz_columns,
    modifiers kept: numeric(12,2) and varchar(10) constrain what may be stored."""
    name = exprtypes.from_sqlglot(dtype)
    return "text" if name == exprtypes.UNKNOWN else name


def output_name(projection: exp.Expr) -> str:
    """The column name PostgreSQL gives an un-aliased projection (its FigureColname)."""
    return _figure_name(projection)[0] or UNNAMED


# sqlglot's node → the function name PostgreSQL names the column after, where the two
# differ (TRIM is btrim in PostgreSQL's grammar; now() is parsed as CURRENT_TIMESTAMP).
_FUNCTION_NAMES: dict[type[exp.Expr], str] = {
    exp.TimestampTrunc: "date_trunc", exp.DateTrunc: "date_trunc", exp.Trim: "btrim",
    exp.StrPosition: "position", exp.GroupConcat: "string_agg", exp.LogicalAnd: "bool_and",
    exp.LogicalOr: "bool_or", exp.Pow: "power", exp.CurrentTimestamp: "now",
    exp.TimeToStr: "to_char", exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop",
    exp.VariancePop: "var_pop", exp.Variance: "variance", exp.Extract: "extract",
}
# Casts of constants are named after PostgreSQL's internal type name.
_CAST_NAMES = {
    "integer": "int4", "bigint": "int8", "smallint": "int2", "boolean": "bool",
    "double precision": "float8", "real": "float4", "character varying": "varchar",
    "character": "bpchar", "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
}


def _figure_name(node: exp.Expr) -> tuple[str | None, int]:
    """(name, strength) as PostgreSQL's FigureColnameInternal: 2 for a column or
    function name, 1 for a type name or ``case``, 0 for nothing (``?column?``)."""
    if isinstance(node, exp.Alias):
        return node.alias, 2
    if isinstance(node, exp.Paren):
        return _figure_name(node.this)
    if isinstance(node, exp.Column):
        return (node.name, 2) if not isinstance(node.this, exp.Star) else (None, 0)
    if isinstance(node, exp.Cast | exp.TryCast):
        name, strength = _figure_name(node.this)
        if strength >= 2:
            return name, strength
        type_ = exprtypes.base(exprtypes.from_sqlglot(node.to))
        return _CAST_NAMES.get(type_, type_), 1
    if isinstance(node, exp.Interval):
        return "interval", 1
    if isinstance(node, exp.Window):
        return _figure_name(node.this)
    if isinstance(node, exp.Subquery):
        inner = node.this
        while isinstance(inner, exp.SetOperation):
            inner = inner.left
        if isinstance(inner, exp.Select) and inner.selects:
            return _figure_name(inner.selects[0])
        return None, 0
    if isinstance(node, exp.Exists):
        return "exists", 2
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        name, strength = _figure_name(default) if default is not None else (None, 0)
        return (name, strength) if strength >= 2 else ("case", 1)
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower(), 2
    if isinstance(node, exp.Pad):
        return ("lpad" if node.args.get("is_left") else "rpad"), 2
    if isinstance(node, exp.Trim):  # trim(trailing …) is rtrim in PostgreSQL's grammar
        position = str(node.args.get("position") or "").upper()
        return {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "btrim"), 2
    if type(node) in _FUNCTION_NAMES:
        return _FUNCTION_NAMES[type(node)], 2
    if isinstance(node, exp.Func) and not isinstance(node, exp.DPipe):
        return node.sql_name().lower(), 2
    return None, 0


_PIN = re.compile(r"^mz_(u\d+)_v(\d+)$")
_VIEW = re.compile(r"^mz_(u\d+)$")


def pin_key(item: Item, version: int) -> str:
    """The relation name a bound query uses for one version of a table."""
    return f"mz_{item.id}_v{version}"


def pinned(name: str) -> tuple[str, int] | None:
    """``(item id, version)`` if ``name`` is a :func:`pin_key`."""
    m = _PIN.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def view_key(item: Item) -> str:
    """The relation name a bound query uses for a view (unique across schemas)."""
    return f"mz_{item.id}"


def viewed(snap: Snapshot, name: str) -> Item | None:
    """The view or materialized view a bound query's relation ``name`` reads, if any."""
    m = _VIEW.match(name)
    return snap.item(m.group(1)) if m else None


def resolve_relation(snap: Snapshot, table: exp.Table) -> Item | system.SystemTable:
    """An ``exp.Table`` in a FROM clause → a user relation or a system table."""
    if isinstance(table, VersionedTable):
        item_id = table.args["item_id"].name
        try:
            item = snap.item(item_id)
        except UnknownObject:
            raise UnknownObject(f"unknown catalog item '{item_id}'") from None
        if item.kind != TABLE:
            raise WrongObjectType(f"{item.qualified_name} is not a table")
        return item
    found = system.find_relation(snap, table)
    if isinstance(found, system.SystemTable):
        return found
    if found is None:
        raise UnknownRelation(f"unknown catalog item '{names.written(table)}'")
    item = found
    if item.kind not in RELATION_KINDS:
        raise WrongObjectType(f"{item.qualified_name} is not a relation")
    return item


def bind(snap: Snapshot, query: exp.Query) -> Bound:
    query = query.copy()
    srf.prepare(query)  # generate_series: checked, FROM forms made LATERAL ROWS FROM
    cte_names = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    visible: dict[str, object] = {}
    full: dict[str, object] = {}
    nullable: dict[tuple[str, str], bool] = {}
    base_types: dict[tuple[str, str], str] = {}
    deps: list[str] = []
    sys_tables: list[str] = []
    for select in query.find_all(exp.Select):
        from_clause.check_groups(select)
    # A list: renaming a table that heads a parenthesized join moves its joins over.
    for table in list(query.find_all(exp.Table)):
        if table.name in cte_names and not table.db:
            continue
        rel = resolve_relation(snap, table)
        alias = table.alias_or_name
        key = rel.name
        if isinstance(rel, system.SystemTable):
            key = rel.key
            cols, hidden = rel.columns, rel.hidden
            if rel.name not in sys_tables:
                sys_tables.append(rel.name)
        elif rel.kind == TABLE:
            # A table reference reads one version of the table: the one it names, or
            # the newest. It is renamed to that version's pin key from here on.
            version = _version_of(rel, table)
            cols, hidden = rel.columns_at(version), (ROWID_COLUMN,)
            key = pin_key(rel, version)
        else:
            cols, hidden = rel.columns, ()
            key = view_key(rel)
        if not isinstance(rel, system.SystemTable) and rel.id not in deps:
            deps.append(rel.id)
        # Later stages see bare names; the catalog namespace has one schema.
        # Column aliases (t AS x(p, q)) stay for qualify; _unalias_columns drops them.
        given = table.args.get("alias")
        if given is not None and len(given.columns) > len(cols):
            raise InvalidDefinition(f'table "{alias}" has {len(cols)} columns available '
                                    f"but {len(given.columns)} columns specified")
        renamed = exp.Table(this=exp.to_identifier(key), alias=exp.TableAlias(
            this=exp.to_identifier(alias),
            columns=[c.copy() for c in given.columns] if given is not None else []))
        replace_relation(table, renamed)
        visible[key] = {c.name: _schema_type(c.type) for c in cols}
        full[key] = {c.name: _schema_type(c.type) for c in cols + hidden}
        for c in cols + hidden:
            nullable[(alias, c.name)] = c.nullable
            base_types[(alias, c.name)] = c.type
    ctes = {cte.alias: cte for cte in query.find_all(exp.CTE)}
    # USING and NATURAL by PostgreSQL's rules (sqlglot's qualify does not scope them to
    # their join). Innermost first: an outer query's names of a derived table need its
    # * expanded.
    for select in reversed(list(query.find_all(exp.Select))):
        from_clause.resolve_using(select, lambda rel: _source_names(rel, visible, ctes))
    names = _output_names(query, visible)
    _pad_values_aliases(query)
    _alias_subquery_projections(query)
    checks.references(query, full)
    try:
        # Pass 1 expands * to visible columns only (a hidden one named with its
        # table's alias is not unknown there: pass 2 checks it); pass 2 resolves and
        # validates every column, hidden ones included.
        query = qualify(query, schema=visible, dialect=DIALECT, validate_qualify_columns=False,
                        identify=False, allow_partial_qualification=True)
        query = qualify(query, schema=full, dialect=DIALECT, identify=False)
        checks.placement(query)
        _unalias_columns(query, visible)
        srf.unnest_projections(query)
        query = annotate_types(query, schema=full, dialect=DIALECT)
    except OptimizeError as e:
        raise bind_error(e) from None
    except Error:
        raise
    except Exception as e:  # sqlglot optimizer internals on constructs it cannot type
        raise Unsupported(f"cannot plan this query: {e}") from None
    padded = from_clause.null_extended(query)
    for alias, column in list(nullable):
        if alias in padded:
            nullable[(alias, column)] = True
    types = _output_types(query, base_types)
    if len(names) != len(query.selects):
        # A * over a source the names above do not follow: qualify's names (which may
        # differ from PostgreSQL's for unnamed expressions), never a column lost.
        names = [sel.alias_or_name for sel in query.selects]
    columns = tuple(
        Column(name=name, type=_stored_type(t, proj, bool(deps)),
               nullable=_nullable(proj, nullable))
        for name, proj, t in zip(names, query.selects, types, strict=False)
    )
    return Bound(query=query, columns=columns, depends_on=tuple(deps),
                 system_tables=tuple(sys_tables))


def _unalias_columns(query: exp.Query, visible: dict[str, object]) -> None:
    """Read ``FROM t AS x(p, q)`` as ``FROM t AS x`` with ``x.p`` meaning ``x.a``: later
    stages know a table's columns by their stored names only. Each column reference is
    resolved to the nearest scope that defines its qualifier, as SQL does (an inner
    ``t AS x`` hides the outer ``x``)."""
    renames: dict[int, dict[str, str]] = {}  # id(Table) -> alias column -> stored name
    for table in query.find_all(exp.Table):
        alias = table.args.get("alias")
        stored = visible.get(table.name)
        if alias is not None and alias.columns and isinstance(stored, dict):
            pairs = zip(alias.columns, stored, strict=False)
            renames[id(table)] = {c.name: name for c, name in pairs}
    if not renames:
        return
    for scope in traverse_scope(query):
        for column in scope.columns:
            owner: Scope | None = scope
            while owner is not None and column.table not in owner.sources:
                owner = owner.parent
            source = owner.sources.get(column.table) if owner is not None else None
            mapping = renames.get(id(source), {})
            if column.name in mapping:
                column.set("this", exp.to_identifier(mapping[column.name]))
    for table in query.find_all(exp.Table):
        if id(table) in renames:
            table.args["alias"].set("columns", [])


def _pad_values_aliases(query: exp.Query) -> None:
    """``(VALUES (1, 2)) AS v(a)`` has columns a and column2, as in PostgreSQL; qualify
    would keep only the aliased ones."""
    for values in query.find_all(exp.Values):
        alias = values.args.get("alias")
        first = values.expressions[0] if values.expressions else None
        width = len(first.expressions) if isinstance(first, exp.Tuple) else 1
        if alias is not None and 0 < len(alias.columns) < width:
            alias.set("columns", list(alias.columns) + [
                exp.to_identifier(f"column{i + 1}") for i in range(len(alias.columns), width)])


def _alias_subquery_projections(query: exp.Query) -> None:
    """Give each unaliased scalar subquery in a select list an ``Alias`` node. sqlglot
    names it through the subquery's own alias instead, and then cannot resolve an ORDER
    BY ordinal that points at it. The output names are already taken (``names``)."""
    for select in list(query.find_all(exp.Select)):
        for i, proj in enumerate(list(select.selects)):
            if isinstance(proj, exp.Subquery):
                alias = proj.alias or f"_col_{i}"
                proj.set("alias", None)
                # Not exp.alias_: on a subquery it sets the subquery's own alias again.
                proj.replace(exp.Alias(this=proj.copy(), alias=exp.to_identifier(alias)))


def _version_of(item: Item, table: exp.Table) -> int:
    if not isinstance(table, VersionedTable):
        return item.version
    version = int(table.args["pinned"].name)
    if not 0 <= version <= item.version:
        raise InvalidDefinition(f'invalid version "{version}" for "{item.name}"')
    return version


def _output_types(query: exp.Query, base_types: dict[tuple[str, str], str]) -> list[str]:
    """Every expression typed by PostgreSQL's rules (``exprtypes``), innermost query
    first so a derived table's columns are known before the query reading them."""
    column_types = dict(base_types)
    typer = exprtypes.Typer(lambda c: column_types.get((c.table, c.name)))
    done: dict[int, list[str]] = {}
    for q in reversed(list(query.find_all(exp.Select, exp.SetOperation, exp.Values))):
        if isinstance(q, exp.Values):
            rows = [[typer.infer(v) for v in row.expressions] for row in q.expressions
                    if isinstance(row, exp.Tuple)]
            alias = q.args.get("alias")
            if rows and alias is not None:
                names = [c.name for c in alias.columns] or [
                    f"column{i + 1}" for i in range(len(rows[0]))]
                for i, name in enumerate(names):
                    column_types[(alias.name, name)] = exprtypes.common(
                        [r[i] for r in rows if i < len(r)]) or exprtypes.UNKNOWN
            continue
        if isinstance(q, exp.Select):
            srf.resolve(q, typer.infer, column_types)  # its FROM's generate_series columns
            types = [typer.infer(p) for p in q.selects]
            # Divisions and averages outside the select list (WHERE, HAVING, ORDER BY)
            # need their types too: the renderer reads them.
            for node in q.find_all(exp.Div, exp.Avg, exp.Mod):
                typer.infer(node)
            _conditions_are_boolean(q, typer)
        else:
            assert isinstance(q, exp.SetOperation)
            left, right = done.get(id(_unwrap(q.left)), []), done.get(id(_unwrap(q.right)), [])
            types = [exprtypes.common([a, b]) or exprtypes.UNKNOWN
                     for a, b in zip(left, right, strict=False)]
        done[id(q)] = types
        # The alias a derived table's columns are read under: (SELECT …) AS s,
        # LATERAL (SELECT …) s, WITH s AS (…).
        holder = q.parent
        while isinstance(holder, exp.Subquery | exp.Paren) and not holder.alias:
            holder = holder.parent
        if isinstance(holder, exp.Subquery | exp.CTE | exp.Lateral) and holder.alias:
            for name, t in zip(q.named_selects, types, strict=False):
                column_types[(holder.alias, name)] = t
    types = done.get(id(query), [])
    return types + [exprtypes.UNKNOWN] * (len(query.selects) - len(types))


# Shapes that are boolean whatever their operands: not typed again.
_BOOLEAN = (exp.Predicate, exp.Connector, exp.Not, exp.Boolean, exp.Null)


def _conditions_are_boolean(select: exp.Select, typer: exprtypes.Typer) -> None:
    """PostgreSQL's 42804 for a condition of another type (``WHERE 1``), before Spark
    or the in-process evaluator says it in their own words."""
    conditions = [("WHERE", select.args.get("where")), ("HAVING", select.args.get("having"))]
    conditions += [("JOIN/ON", j.args.get("on")) for j in select.args.get("joins") or []]
    conditions += [("FILTER", f.expression) for f in select.find_all(exp.Filter)
                   if f.parent_select is select]
    for clause, node in conditions:
        cond = node.this if isinstance(node, exp.Where | exp.Having) else node
        cond = cond.unnest() if cond is not None else None
        if cond is None or isinstance(cond, _BOOLEAN):
            continue
        try:
            t = typer.infer(cond)
        except Error:  # a function the typer refuses: the renderer decides, as before
            continue
        if exprtypes.base(t) not in ("boolean", exprtypes.UNKNOWN):
            raise TypeMismatch(f"argument of {clause} must be type boolean, not type "
                               f"{exprtypes.display_name(t)}")


def _unwrap(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Subquery | exp.Paren) and not node.alias:
        node = node.this
    return node


def _stored_type(t: str, proj: exp.Expr, reads_user_data: bool) -> str:
    if exprtypes.base(t) != exprtypes.UNKNOWN:
        return t
    inner = proj.this if isinstance(proj, exp.Alias) else proj
    if isinstance(inner, exp.Literal | exp.Null) or not reads_user_data:
        return "text"  # PostgreSQL and Materialize type an unknown-typed literal as text
    # Stored data needs a type; refuse the definition now rather than at its first tick.
    raise exprtypes.refuse(inner)


def _schema_type(type_: str) -> str:
    # sqlglot understands these spellings; keep the schema parseable.
    if type_.startswith("numeric(*"):
        return exprtypes.to_sqlglot(type_).sql()
    return {"timestamp without time zone": "timestamp",
            "timestamp with time zone": "timestamptz",
            "character varying": "varchar"}.get(type_, type_)


def _output_names(query: exp.Query, visible: dict[str, object],
                  ctes: dict[str, exp.CTE] | None = None) -> list[str]:
    """The names PostgreSQL gives a query's columns (its FigureColname; ``a + 1`` is
    ``?column?``), before qualify aliases them (``_col_0``)."""
    if ctes is None:
        ctes = {cte.alias: cte for cte in query.find_all(exp.CTE)}
    left = _leftmost(query)
    if not isinstance(left, exp.Select):
        return [UNNAMED] * len(query.selects)
    names: list[str] = []
    for proj in left.selects:
        if isinstance(proj, exp.Star) or (
            isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star)
        ):
            qualifier = proj.table if isinstance(proj, exp.Column) else ""
            names.extend(_star_names(left, qualifier, visible, ctes))
        else:
            names.append(output_name(proj))
    return names


def _leftmost(query: exp.Expr) -> exp.Expr:
    while isinstance(query, exp.SetOperation):
        query = _unwrap(query.left)  # (SELECT …) UNION …: named by the first SELECT
    return query


def _star_names(select: exp.Select, qualifier: str, visible: dict[str, object],
                ctes: dict[str, exp.CTE]) -> list[str]:
    names: list[str] = []
    sources = [select.args.get("from_") or select.args.get("from")] + list(
        select.args.get("joins") or [])
    for src in sources:
        for rel in from_clause.relations(src.this) if src is not None else ():
            if not qualifier or rel.alias_or_name == qualifier:
                names.extend(_source_names(rel, visible, ctes))
    return names


def _source_names(rel: exp.Expr, visible: dict[str, object], ctes: dict[str, exp.CTE]
                  ) -> list[str]:
    """The columns a FROM item offers a ``*``: a relation's, a CTE's or a derived
    table's own names, renamed by the item's column aliases (``AS x(p, q)``)."""
    names: list[str] = []
    if from_clause.is_group(rel):
        return [n for r in from_clause.relations(rel) for n in _source_names(r, visible, ctes)]
    if isinstance(rel, exp.Table) and isinstance(cols := visible.get(rel.name), dict):
        names = list(cols)
    elif isinstance(rel, exp.Table) and not rel.db and rel.name in ctes:
        cte = ctes[rel.name]
        inner = {k: v for k, v in ctes.items() if k != rel.name}  # no self-reference loop
        names = _aliased(_output_names(cte.this, visible, inner), cte.args.get("alias"))
    elif isinstance(rel, exp.Subquery) and isinstance(rel.this, exp.Query):
        names = _output_names(rel.this, visible, ctes)
    elif isinstance(rel, exp.Values) and rel.expressions:
        first = rel.expressions[0]
        width = len(first.expressions) if isinstance(first, exp.Tuple) else 1
        names = [f"column{i + 1}" for i in range(width)]
    return _aliased(names, rel.args.get("alias"))


def _aliased(names: list[str], alias: exp.Expr | None) -> list[str]:
    given = [c.name for c in alias.columns] if isinstance(alias, exp.TableAlias) else []
    return given + names[len(given):]


def _nullable(proj: exp.Expr, nullable: dict[tuple[str, str], bool]) -> bool:
    inner = proj.this if isinstance(proj, exp.Alias) else proj
    if isinstance(inner, exp.Literal):
        return False
    if isinstance(inner, exp.Boolean):
        return False
    if isinstance(inner, exp.Count):
        return False
    if isinstance(inner, exp.Column):
        return nullable.get((inner.table, inner.name), True)
    return True


def bind_error(e: OptimizeError) -> Error:
    msg = str(e)
    m = re.search(r"Column '([^']+)' could not be resolved", msg)
    if m:
        return UnknownColumn(f'column "{m.group(1)}" does not exist')
    m = re.search(r"Unknown table: '?([^'\s]+)'?", msg)
    if m:
        return UnknownRelation(f"unknown catalog item '{m.group(1)}'")
    m = re.search(r"Ambiguous column '([^']+)'", msg)
    if m:
        return UnknownColumn(f'column reference "{m.group(1)}" is ambiguous')
    return Error(msg.split(". Line")[0])
