"""Answers to catalog-only SELECTs, kept for the catalog state they were computed at.

A client's catalog reads repeat (an ORM's inspector, a BI tool's refresh, dbt's
relation listing, a pool's health check), and each costs milliseconds of binding and
in-process evaluation under the GIL: 50 connections asking at once waited for each
other (p99 0.8 s). Such an answer is a function of the catalog's state alone when
every relation it reads is a catalog table computed from the snapshot (not one a read
source fills from storage: frontiers of arrangements, lag, holds) and it calls no
function whose value moves on its own (now(), random()). It is then kept under the
snapshot's version and read time, so any DDL or write makes a new key.

Clients that ask the same at once (50 connecting together, each asking first what the
others ask) wait for the first one's answer instead of each computing it
(:func:`first_computes`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any

from sqlglot import exp

from mzflow import caches
from mzflow.catalog import names, system
from mzflow.catalog.model import Snapshot
from mzflow.errors import Error
from mzflow.read import pg_reads
from mzflow.session.result import Result

_ANSWERS = caches.lru("session.catalog_answers", 1024)
# Functions whose value depends on their arguments alone. sqlglot's AND, OR and EXISTS
# are functions too: without them a WHERE with two conditions was never kept.
_PURE = (exp.AggFunc, exp.Cast, exp.TryCast, exp.Coalesce, exp.Case, exp.If, exp.Lower,
         exp.Upper, exp.Length, exp.Concat, exp.Substring, exp.Trim, exp.Connector,
         exp.Exists, exp.RegexpLike, exp.RegexpILike)

# Argument values a node may hold besides nodes: compared by value.
_PLAIN = (str, bool, int, float, Enum)
_NOT_PLAIN = object()

Key = tuple[Any, ...]

# Keys whose answer a session computes now: a lock, and how many sessions hold or wait.
_COMPUTING: dict[Key, tuple[threading.Lock, list[int]]] = {}  # bounded: removed when done
_GUARD = threading.Lock()


def key(snap: Snapshot, stmt: exp.Expr) -> Key | None:
    """The answer's key, or None when the statement calls a function that may move."""
    try:
        found = _shape(stmt)
    except RecursionError:
        return None
    if found is None:
        return None
    # The search path too: today a system table's name resolves the same under any
    # (mz_catalog is searched first), but the key should not rely on that.
    return (snap.installation_id, snap.version, snap.read_ts, names.search_path(), found)


def _shape(node: exp.Expr) -> tuple[Any, ...] | None:
    """The statement as nested tuples of each node's class and arguments: equal for two
    trees exactly when they are the same statement (comments and positions left out),
    and a tenth of rendering it as SQL (which copies the tree first). None when it
    calls a function that may move, or holds an argument that is no plain value."""
    if isinstance(node, exp.Func) and not isinstance(node, _PURE):
        return None
    args: list[tuple[str, Any]] = []
    for name, value in node.args.items():
        if isinstance(value, exp.Expr):
            value = _shape(value)
            if value is None:
                return None
        elif type(value) is list:
            items = []
            for v in value:
                if isinstance(v, exp.Expr):
                    v = _shape(v)
                    if v is None:
                        return None
                elif (v := _plain(v)) is _NOT_PLAIN:
                    return None
                items.append(v)
            value = tuple(items)
        elif (value := _plain(value)) is _NOT_PLAIN:
            return None
        args.append((name, value))
    return (type(node), tuple(args))


def _plain(value: Any) -> Any:
    """A value as the key holds it: with its type, so that True and 1 differ."""
    if type(value) is str or value is None:
        return value
    return (type(value), value) if isinstance(value, _PLAIN) else _NOT_PLAIN


def get(k: Key) -> Result | None:
    hit = _ANSWERS.get(k)
    if hit is None:
        return None
    columns, rows, types = hit
    return Result(list(columns), list(rows), status=f"SELECT {len(rows)}", types=list(types))


def put(k: Key, result: Result, tables: Collection[str], filled: Collection[str]) -> None:
    """Keep ``result`` if the system tables it read (``tables``) are all computed from
    the snapshot: none of them is one a read source fills (``filled``)."""
    if any(t in filled for t in tables):
        return
    _ANSWERS[k] = (tuple(result.columns), tuple(result.rows), tuple(result.types))


def in_process(snap: Snapshot, stmt: exp.Expr, filled: Collection[str]) -> bool:
    """Whether ``stmt`` reads system tables only, none of them one a read source fills:
    answered in this process, from the snapshot (never on Spark), hence kept."""
    found = pg_reads.tables(stmt)
    for table in found:
        try:
            rel = system.find_relation(snap, table)
        except Error:
            return False
        if not isinstance(rel, system.SystemTable) or rel.name in filled:
            return False
    return bool(found)


@contextmanager
def first_computes(k: Key) -> Iterator[None]:
    """Around computing ``k``'s answer: one session at a time computes it, and the
    others, once it is done, look again (look up ``k`` inside)."""
    with _GUARD:
        lock, holders = _COMPUTING.setdefault(k, (threading.Lock(), [0]))
        holders[0] += 1
    try:
        with lock:
            yield
    finally:
        with _GUARD:
            holders[0] -= 1
            if holders[0] == 0:
                del _COMPUTING[k]
