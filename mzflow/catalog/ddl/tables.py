"""CREATE TABLE and ALTER TABLE … ADD COLUMN: the catalog item and its shard together."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlglot import exp

from mzflow.catalog import names, normalize
from mzflow.catalog.bind import type_name
from mzflow.catalog.ddl.core import Notices, check_new_name, new_item, new_name, retention
from mzflow.catalog.hooks import WriteHook, check_of
from mzflow.catalog.model import (
    PARTITION_KEY_PREFIX,
    ROWID,
    TABLE,
    Column,
    Expectation,
    Item,
    Projection,
)
from mzflow.catalog.store import Store
from mzflow.errors import (
    DuplicateObject,
    InvalidDefinition,
    UnknownColumn,
    Unsupported,
    WrongObjectType,
)
from mzflow.sql import ast

CreateShard = Callable[[Item, int], None]
AddToShard = Callable[[Item, Column, int], None]


# What a user calls each column constraint sqlglot parses (the rest: its SQL keyword).
_CONSTRAINT_NAMES: dict[type, str] = {
    exp.PrimaryKeyColumnConstraint: "PRIMARY KEY",
    exp.PrimaryKey: "PRIMARY KEY",
    exp.ForeignKey: "FOREIGN KEY",
    exp.UniqueColumnConstraint: "UNIQUE",
    exp.CheckColumnConstraint: "CHECK",
    exp.Reference: "FOREIGN KEY",
    exp.DefaultColumnConstraint: "DEFAULT",
    exp.GeneratedAsIdentityColumnConstraint: "GENERATED",
    exp.AutoIncrementColumnConstraint: "AUTOINCREMENT",
    exp.CollateColumnConstraint: "COLLATE",
}


def _constraint_name(kind: exp.Expr | None) -> str:
    name = _CONSTRAINT_NAMES.get(type(kind)) if kind is not None else None
    if name:
        return name
    words = normalize.sql(kind).split() if kind is not None else []
    return words[0].upper() if words else "this column"


def _column_def(col: exp.ColumnDef, table: str) -> Column:
    nullable = True
    for constraint in col.constraints:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint):
            nullable = bool(kind.args.get("allow_null"))
        elif isinstance(kind, ast.VersionAdded):
            raise InvalidDefinition(f'invalid table definition for "{table}"',
                                    detail="VERSION ADDED appears only in statements the "
                                           "catalog generates for ALTER TABLE … ADD COLUMN")
        else:
            raise Unsupported(f"{_constraint_name(kind)} constraints are not supported")
    dtype = col.args.get("kind")
    if not isinstance(dtype, exp.DataType):
        raise InvalidDefinition(f'column "{col.name}" needs a type')
    if dtype.is_type(exp.DType.ARRAY):  # an index stores arrays; table writes do not yet
        raise Unsupported(f"type '{type_name(dtype)}' is not supported")
    if col.name.lower() == ROWID:
        raise InvalidDefinition(f'column name "{col.name}" is reserved for mzflow\'s row ids')
    if col.name.lower().startswith(PARTITION_KEY_PREFIX):
        raise InvalidDefinition(f'column name "{col.name}" is reserved: names starting '
                                f'with "{PARTITION_KEY_PREFIX}" are mzflow\'s partition keys')
    return Column(name=col.name, type=type_name(dtype), nullable=nullable)


def create_table(store: Store, stmt: ast.CreateTable, create_shard: CreateShard,
                 hooks: Sequence[WriteHook] = ()) -> Notices:
    """Record the table (and its projections) and create its shard in one transaction;
    the shard gets the CREATE's timestamp as its version 0. ``hooks`` check the
    projections and expectations it defines (none: they are refused)."""
    check_projection = check_of(hooks, Projection)
    check_expectation = check_of(hooks, Expectation)
    schema = stmt.this
    name = schema.this.name
    columns = tuple(_column_def(c, name) for c in schema.expressions
                    if isinstance(c, exp.ColumnDef))
    retain = retention(stmt.args.get("options") or [])
    seen: set[str] = set()
    for col in columns:
        # Case-insensitively: a Delta schema cannot hold both x and X.
        if col.name.lower() in seen:
            raise DuplicateObject(f'column "{col.name}" specified more than once')
        seen.add(col.name.lower())
    partition_by = tuple(_partition_column(p.name, columns, name)
                         for p in stmt.args.get("partition_by") or [])
    if len(set(partition_by)) != len(partition_by):
        raise DuplicateObject("a column is named more than once in PARTITION BY")
    has_projections = any(isinstance(c, ast.Projection) for c in schema.expressions)
    if has_projections and check_projection is None:
        raise Unsupported("projections are not supported here")
    has_expectations = any(isinstance(c, ast.Expectation) for c in schema.expressions)
    if has_expectations and check_expectation is None:
        raise Unsupported("expectations are not supported here")
    for node in schema.expressions:
        if not isinstance(node, exp.ColumnDef | ast.Projection | ast.Expectation):
            # A table constraint (CHECK, PRIMARY KEY, …): refused, never ignored.
            kinds = [e for e in node.expressions] if isinstance(node, exp.Constraint) else [node]
            raise Unsupported(f"{_constraint_name(kinds[0] if kinds else None)} "
                              "constraints are not supported",
                              hint="CONSTRAINT <name> EXPECT (<condition>) checks rows as "
                                   "they are written")
    with store.write() as w:
        in_schema, name = new_name(w.snapshot, schema.this)
        if w.snapshot.find(name, in_schema) is not None:
            if stmt.args.get("exists"):
                return [f"table \"{name}\" already exists, skipping"]
            check_new_name(w.snapshot, name, in_schema)
        ts = w.allocate_ts()
        item = new_item(w, name=name, schema=in_schema, kind=TABLE, columns=columns,
                        created_ts=ts, retain_history_ms=retain, partition_by=partition_by,
                        create_sql=normalize.create_table_sql(name, columns, partition_by,
                                                              schema=in_schema))
        w.insert_item(item)
        if has_projections:
            assert check_projection is not None
            from mzflow.catalog.ddl.projections import of_create

            of_create(w, stmt, item, ts, check_projection)
        if has_expectations:
            assert check_expectation is not None
            from mzflow.catalog.ddl import expectations

            expectations.of_create(w, stmt, item, ts, check_expectation, create_shard)
        create_shard(item, ts)
        w.committed(ts)
    return []


def _partition_column(name: str, columns: tuple[Column, ...], table: str) -> str:
    for col in columns:
        if col.name == name:
            return col.name
    raise UnknownColumn(f'column "{name}" named in PARTITION BY does not exist in table '
                        f'"{table}"')


def add_column(store: Store, stmt: exp.Alter, add_to_shard: AddToShard) -> Notices:
    """ALTER TABLE … ADD COLUMN: a new version of the same item (same shard, new GlobalId)."""
    actions = stmt.args.get("actions") or []
    if len(actions) != 1 or not isinstance(actions[0], exp.ColumnDef):
        raise Unsupported("ALTER TABLE supports only ADD COLUMN")
    col_def = actions[0]
    with store.write() as w:
        item = names.resolve(w.snapshot, stmt.this)
        if item.kind != TABLE:
            raise WrongObjectType(f"{item.qualified_name} is not a table")
        if any(c.name.lower() == col_def.name.lower() for c in item.columns):
            if col_def.args.get("exists"):
                return [f'column "{col_def.name}" of relation "{item.name}" already exists, '
                        "skipping"]
            raise DuplicateObject(
                f'column "{col_def.name}" of relation "{item.name}" already exists')
        column = _column_def(col_def, item.name)
        if not column.nullable:
            raise InvalidDefinition("added columns must be nullable",
                                    detail="rows written before the column existed read it "
                                           "as NULL")
        version = item.version + 1
        column = Column(column.name, column.type, True, version_added=version)
        ts = w.allocate_ts()
        # A single-output source's table keeps its CREATE SOURCE (its columns are the
        # files', not the statement's).
        create_sql = item.create_sql if item.is_source else normalize.create_table_sql(
            item.name, item.columns + (column,), item.partition_by, schema=item.schema)
        w.add_column(item, column, f"u{w.next_id('global')}", create_sql)
        add_to_shard(item, column, ts)
        # The table's quarantine gains the column too: the rows it will hold have it.
        from mzflow.catalog.ddl.expectations import quarantine_of

        quarantine = quarantine_of(w.snapshot, item)
        if quarantine is not None and all(c.name != column.name for c in quarantine.columns):
            qcol = Column(column.name, column.type, True, version_added=quarantine.version + 1)
            w.add_column(quarantine, qcol, f"u{w.next_id('global')}",
                         normalize.create_table_sql(quarantine.name,
                                                    quarantine.columns + (qcol,),
                                                    schema=quarantine.schema))
            add_to_shard(quarantine, qcol, ts)
        w.committed(ts)
    return []
