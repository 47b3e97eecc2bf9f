"""What the DDL modules share: new items, name checks, retention and refresh options."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import intervals
from mzflow.catalog.model import KIND_WORDS, TABLE, Cluster, Item, Snapshot
from mzflow.catalog.store import Writer
from mzflow.errors import DuplicateObject, InvalidOption, WrongObjectType
from mzflow.sql import ast

Notices = list[str]

# The object kinds DROP, ALTER … RENAME and COMMENT ON name, by their SQL words.
KINDS = {word.upper(): kind for kind, word in KIND_WORDS.items()}


def check_new_name(snap: Snapshot, name: str) -> None:
    if snap.find(name) is not None:
        raise DuplicateObject(f"catalog item '{name}' already exists")


def table_named(snap: Snapshot, name: exp.Table, what: str) -> Item:
    """The table ``name`` resolves to; ``what`` belongs to tables only (the hint)."""
    item = snap.resolve(name.name)
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
        if opt.name == "REFRESH":
            value = opt.args.get("value")
            mode = value.name.lower() if value is not None else ""
            if mode not in REFRESH_MODES:
                raise InvalidOption(f"invalid REFRESH mode '{mode}'",
                                    hint="valid modes are 'auto' and 'incremental'")
            return mode
    return "auto"


def retention(options: list[ast.Option], allow_refresh: bool = False) -> int | None:
    retain = None
    for opt in options:
        value = opt.args.get("value")
        if opt.name == "RETAIN HISTORY" and isinstance(value, exp.Literal) and value.is_string:
            retain = intervals.to_ms(value.name)
        elif opt.name == "REFRESH" and allow_refresh:
            refresh_mode([opt])
        else:
            raise InvalidOption(f'unexpected option "{opt.name}"',
                                hint="valid: RETAIN HISTORY FOR '<interval>'")
    return retain
