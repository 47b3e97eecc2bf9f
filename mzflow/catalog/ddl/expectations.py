"""ALTER TABLE … ADD / DROP CONSTRAINT … EXPECT, and the expectations of CREATE TABLE.

Whether an expectation can be checked (its columns, its type, its Great Expectations
type and arguments) is the quality wing's knowledge: its write hook (catalog/hooks.py)
checks a definition, raising the definition's error. A QUARANTINE expectation creates
the table's quarantine table, ``<table>_quarantine``, in the same transaction: a plain
table (queryable, writable, so that fixed rows can be replayed and removed) with the
table's columns and three more.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlglot import exp

from mzflow.catalog import normalize
from mzflow.catalog.ddl.core import Notices, check_new_name, new_item, table_named
from mzflow.catalog.hooks import WriteHook, check_of
from mzflow.catalog.model import TABLE, Column, Expectation, Item, Snapshot
from mzflow.catalog.store import Store, Writer
from mzflow.errors import DuplicateObject, InvalidOption, UnknownObject, Unsupported
from mzflow.sql import ast

Check = Callable[[Snapshot, Item, Expectation], None]
CreateShard = Callable[[Item, int], None]

WARN, DROP_ROW, QUARANTINE, FAIL = "WARN", "DROP ROW", "QUARANTINE", "FAIL"
# The quarantine's own columns, after the table's: which expectations a row failed,
# when, and by which statement (or tick).
QUARANTINE_COLUMNS = (Column("_mz_expectations", "text", False),
                      Column("_mz_quarantined_at", "bigint", False),
                      Column("_mz_statement", "text", False))


def quarantine_name(table: str) -> str:
    return f"{table}_quarantine"


def read_filters(snap: Snapshot, item: Item) -> list[str]:
    """The conditions a view's rows must not fail to be read: its DROP ROW and QUARANTINE
    expectations. A maintained view's index keeps every row of the definition (a row
    left out could not be retracted later), and each reader leaves the failing ones out
    (plan/inline.py, plan/query.py)."""
    if item.kind == TABLE:
        return []  # a table's failing rows never reach it
    return [e.definition for e in snap.expectations_on(item.id)
            if e.kind == "sql" and e.action in (DROP_ROW, QUARANTINE)]


def filtered_sql(name: str, alias: str, conditions: list[str]) -> str:
    """``SELECT * FROM name`` without the rows that fail a condition (NULL passes, as in
    a CHECK constraint)."""
    where = " AND ".join(f"COALESCE(({c}), TRUE)" for c in conditions)
    return f"SELECT * FROM {name} AS {alias} WHERE {where}"


def table_of(snap: Snapshot, name: exp.Table) -> Item:
    return table_named(snap, name, "expectations")


def _literal(node: exp.Expr, what: str) -> object:
    """A GE argument's value: a literal, or a list of literals (ARRAY[…] or (…, …))."""
    if isinstance(node, exp.Array | exp.Tuple):
        return [_literal(e, what) for e in node.expressions]
    if isinstance(node, exp.Paren):
        return _literal(node.this, what)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        value = _literal(node.this, what)
        assert isinstance(value, int | float)
        return -value
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return float(text) if any(c in text for c in ".eE") else int(text)
    raise InvalidOption(f"argument {what} must be a literal or a list of literals",
                        detail=f"got {node.sql()}")


def definition_of(node: ast.Expectation) -> tuple[str, str, str]:
    """(kind, definition, args as JSON) of a parsed expectation."""
    if node.args.get("expression") is not None:
        return "sql", normalize.sql(node.args["expression"]), "{}"
    args = {o.this.name: _literal(o.args["value"], o.this.name)
            for o in node.args.get("ge_args") or []}
    return "ge", node.args["ge_type"].name, json.dumps(args, sort_keys=True)


def insert(w: Writer, snap: Snapshot, table: Item, node: ast.Expectation, ts: int,
           check: Check, create_shard: CreateShard) -> Snapshot:
    """Check and record one expectation of ``table`` (``snap`` already holds the table);
    returns ``snap`` with it (and any quarantine table it made)."""
    name = node.this.name
    if any(e.name == name for e in snap.expectations_on(table.id)):
        raise DuplicateObject(f'constraint "{name}" for relation "{table.name}" already '
                              "exists")
    kind, definition, args = definition_of(node)
    expectation = Expectation(id=f"e{w.next_id('expectation')}", item_id=table.id, name=name,
                              kind=kind, definition=definition, args=args,
                              action=node.args.get("action") or WARN, created_ts=ts)
    check(snap, table, expectation)
    made = None
    if expectation.action == QUARANTINE:
        made = _ensure_quarantine(w, snap, table, ts, create_shard)
    w.insert_expectation(expectation)
    return dataclasses.replace(snap, expectations=snap.expectations + (expectation,),
                               items=snap.items + ((made,) if made else ()))


def quarantine_of(snap: Snapshot, table: Item) -> Item | None:
    """The table's quarantine table, if an expectation made one."""
    item = snap.find(quarantine_name(table.name), table.schema)
    if item is None or item.kind != TABLE:
        return None
    names = {c.name for c in item.columns}
    return item if all(c.name in names for c in QUARANTINE_COLUMNS) else None


def _ensure_quarantine(w: Writer, snap: Snapshot, table: Item, ts: int,
                       create_shard: CreateShard) -> Item | None:
    name = quarantine_name(table.name)
    existing = snap.find(name, table.schema)
    if existing is not None:
        if quarantine_of(snap, table) is not None:
            return None  # made by an earlier QUARANTINE expectation
        raise DuplicateObject(f'cannot create quarantine table "{name}": that name is taken',
                              hint="rename or drop it first")
    check_new_name(snap, name, table.schema)
    # Every column nullable: a row fails an expectation precisely when it is not what
    # the table promises.
    columns = tuple(Column(c.name, c.type, True) for c in table.columns) + QUARANTINE_COLUMNS
    item = new_item(w, name=name, schema=table.schema, kind=TABLE, columns=columns,
                    created_ts=ts, retain_history_ms=None, partition_by=(),
                    create_sql=normalize.create_table_sql(name, columns,
                                                          schema=table.schema))
    w.insert_item(item)
    create_shard(item, ts)
    return item


def of_create(w: Writer, stmt: ast.CreateTable, table: Item, ts: int, check: Check,
              create_shard: CreateShard) -> None:
    """The CONSTRAINT … EXPECT clauses of a CREATE TABLE, recorded with the table."""
    snap = dataclasses.replace(w.snapshot, items=w.snapshot.items + (table,))
    for node in stmt.this.expressions:
        if isinstance(node, ast.Expectation):
            snap = insert(w, snap, table, node, ts, check, create_shard)


def alter(store: Store, stmt: ast.AlterExpectation, hooks: Sequence[WriteHook],
          create_shard: CreateShard) -> Notices:
    check = check_of(hooks, Expectation)
    if check is None:
        raise Unsupported("expectations are not supported here")
    with store.write() as w:
        table = table_of(w.snapshot, stmt.this)
        if stmt.args["action"] == "SUITE":
            return _set_suite(w, table, stmt.args["name"].name, check, create_shard)
        if stmt.args["action"] == "ADD":
            ts = w.allocate_ts()
            insert(w, w.snapshot, table, stmt.args["expectation"], ts, check, create_shard)
            w.committed(ts)
            return []
        name = stmt.args["name"].name
        found = [e for e in w.snapshot.expectations_on(table.id) if e.name == name]
        if not found:
            if stmt.args.get("exists"):
                return [f'constraint "{name}" of relation "{table.name}" does not exist, '
                        "skipping"]
            raise UnknownObject(f'constraint "{name}" of relation "{table.name}" does not '
                                "exist")
        # The quarantine table stays: it holds rows someone may still want to replay.
        w.delete_expectation(found[0].id)
    return []


def _set_suite(w: Writer, table: Item, path: str, check: Check,
               create_shard: CreateShard) -> Notices:
    """Attach a Great Expectations suite (its JSON file, read now): each expectation
    becomes one of the table's, named ``<suite>:<n>`` (or by its meta ``name``), acting
    as its meta ``on_violation`` says (WARN by default). Setting the suite again
    replaces what it attached before."""
    suite_name, entries = read_suite(path)
    prefix = f"{suite_name}:"
    ts = w.allocate_ts()
    snap = w.snapshot
    for old in snap.expectations_on(table.id):
        if old.name.startswith(prefix):
            w.delete_expectation(old.id)
    snap = dataclasses.replace(snap, expectations=tuple(
        e for e in snap.expectations if not (e.item_id == table.id
                                             and e.name.startswith(prefix))))
    for i, (kind, kwargs, meta) in enumerate(entries, start=1):
        action = str(meta.get("on_violation") or WARN).upper()
        if action not in (WARN, DROP_ROW, QUARANTINE, FAIL):
            raise InvalidOption(f"suite {path}: expectation {i} has on_violation "
                                f"{action!r}", hint="WARN, DROP ROW, QUARANTINE or FAIL")
        node = ast.Expectation(
            this=exp.to_identifier(f"{prefix}{meta.get('name') or i}"),
            ge_type=exp.to_identifier(kind),
            ge_args=[ast.Option(this=exp.to_identifier(k), value=_to_literal(v))
                     for k, v in kwargs.items()], action=action)
        snap = insert(w, snap, table, node, ts, check, create_shard)
    w.committed(ts)
    return [f'{len(entries)} expectations of suite "{suite_name}" attached to "{table.name}"']


def read_suite(path: str) -> tuple[str, list[tuple[str, dict[str, object], dict[str, object]]]]:
    """(suite name, [(type, kwargs, meta)]) of a Great Expectations suite JSON file."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise InvalidOption(f"cannot read expectation suite {path}: {err.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidOption(f"expectation suite {path} is not JSON: {err.msg} at line "
                            f"{err.lineno}, column {err.colno}") from None
    found = doc.get("expectations") if isinstance(doc, dict) else None
    if not isinstance(found, list):
        raise InvalidOption(f'expectation suite {path} has no "expectations" list',
                            hint="a Great Expectations suite: {\"name\": …, "
                                 "\"expectations\": [{\"type\": …, \"kwargs\": {…}}]}")
    out = []
    for i, entry in enumerate(found, start=1):
        kind = entry.get("type") or entry.get("expectation_type") if isinstance(
            entry, dict) else None
        kwargs = entry.get("kwargs", {}) if isinstance(entry, dict) else None
        if not isinstance(kind, str) or not isinstance(kwargs, dict):
            raise InvalidOption(f'expectation suite {path}: expectation {i} needs a "type" '
                                'and "kwargs"')
        out.append((kind, kwargs, entry.get("meta") or {}))
    name = doc.get("name") or doc.get("expectation_suite_name") or Path(path).stem
    return str(name), out


def _to_literal(v: object) -> exp.Expr:
    if isinstance(v, list):
        return exp.Array(expressions=[_to_literal(x) for x in v])
    if isinstance(v, bool):
        return exp.Boolean(this=v)
    if v is None:
        return exp.Null()
    if isinstance(v, int | float):
        return exp.Literal.number(v)
    if isinstance(v, str):
        return exp.Literal.string(v)
    raise InvalidOption(f"suite argument {v!r} is not a literal or a list of literals")


def create_sql_parts(snap: Snapshot, item: Item) -> tuple[tuple[str, str], ...]:
    """(name, clause) of each expectation, for SHOW CREATE TABLE."""
    return tuple((e.name, clause(e)) for e in snap.expectations_on(item.id))


def clause(e: Expectation) -> str:
    if e.kind == "sql":
        body = f"({e.definition})"
    else:
        args = json.loads(e.args)
        body = f"{e.definition} ({', '.join(f'{k} => {_sql_value(v)}' for k, v in args.items())})"
    return f"CONSTRAINT {e.name} EXPECT {body} ON VIOLATION {e.action}"


def _sql_value(v: object) -> str:
    if isinstance(v, list):
        return "ARRAY[" + ", ".join(_sql_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)
