"""What the DDL modules share: new items, name checks, retention and refresh options."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import intervals, names
from mzflow.catalog.model import KIND_WORDS, SCHEMA, TABLE, Cluster, Item, Snapshot
from mzflow.catalog.store import Writer
from mzflow.errors import DuplicateObject, InvalidOption, WrongObjectType
from mzflow.sql import ast

Notices = list[str]

# The object kinds DROP, ALTER … RENAME and COMMENT ON name, by their SQL words.
KINDS = {word.upper(): kind for kind, word in KIND_WORDS.items()}


def check_new_name(snap: Snapshot, name: str, schema: str = SCHEMA) -> None:
    if snap.find(name, schema) is not None:
        raise DuplicateObject(f"catalog item '{name}' already exists")


def new_name(snap: Snapshot, ref: exp.Table) -> tuple[str, str]:
    """(schema, name) of an object a CREATE names, by the session's search path."""
    return names.creation_schema(snap, ref), ref.name


def table_named(snap: Snapshot, name: exp.Table, what: str) -> Item:
    """The table ``name`` resolves to; ``what`` belongs to tables only (the hint)."""
    item = names.resolve(snap, name)
    if item.kind != TABLE:
        raise WrongObjectType(f"{item.qualified_name} is not a table",
                              hint=f"{what} belong to tables")
    return item


def new_item(w: Writer, **fields: object) -> Item:
    return Item(id=f"u{w.next_id('item')}", global_id=f"u{w.next_id('global')}",
                oid=w.next_id("oid"), **fields)  # type: ignore[arg-type]


def active_cluster(snap: Snapshot, explicit: exp.Identifier | None, session_cluster: str
                   ) -> Cluster:
    return snap.cluster_by_name(explicit.name if explicit is not None else session_cluster)


REFRESH_MODES = ("auto", "incremental")


def refresh_mode(options: list[ast.Option]) -> str:
    """``REFRESH = 'incremental'`` refuses definitions that would be recomputed;
    ``'auto'`` (the default) recomputes them and says why in EXPLAIN."""
    for opt in options:
        if opt.name == "REFRESH" and not is_policy(opt):
            value = opt.args.get("value")
            mode = value.name.lower() if value is not None else ""
            if mode not in REFRESH_MODES:
                raise InvalidOption(f"invalid REFRESH mode '{mode}'",
                                    hint="valid modes are 'auto' and 'incremental'")
            return mode
    return "auto"


def is_policy(opt: ast.Option) -> bool:
    """A refresh policy (``REFRESH EVERY …``: catalog/refresh.py), not the tick mode."""
    return isinstance(opt.args.get("value"), ast.RefreshPolicy)


def retention(options: list[ast.Option], allow_refresh: bool = False,
              allow_policy: bool = False) -> int | None:
    """RETAIN HISTORY in ms (None: the default). ``allow_refresh`` lets the tick mode
    through, ``allow_policy`` refresh policies (checked by catalog/refresh.py)."""
    retain = None
    for opt in options:
        value = opt.args.get("value")
        if opt.name == "RETAIN HISTORY" and isinstance(value, exp.Literal) and value.is_string:
            retain = intervals.to_ms(value.name)
        elif is_policy(opt) and allow_policy:
            continue
        elif opt.name == "REFRESH" and allow_refresh:
            refresh_mode([opt])
        else:
            raise InvalidOption(f'unexpected option "{opt.name}"',
                                hint="valid: RETAIN HISTORY FOR '<interval>'")
    return retain
