"""The functions a session answers, evaluated once per statement before it is planned:
``version()``, ``current_schema()``, ``current_schemas(bool)``, ``current_database()``,
``current_user``/``session_user``, ``current_setting(name[, missing_ok])``,
``set_config(name, value, is_local)`` and ``pg_backend_pid()``.

Each call becomes a constant cast to the type PostgreSQL gives it (``name`` for
schemas and roles), and keeps PostgreSQL's column name where it is a result column.
``set_config`` sets the variable as SET would (``is_local``: a transaction's setting;
outside one PostgreSQL keeps it for the session too, with a warning, as here).
"""

from __future__ import annotations

import os
import platform
import sys

from sqlglot import exp

from mzflow.catalog import names
from mzflow.catalog.model import DATABASE, Snapshot
from mzflow.errors import Error, InvalidOption, UnknownObject, Unsupported
from mzflow.session.variables import Variables
from mzflow.sql import ast

SERVER_VERSION = "9.5.0"  # what Materialize reports, and clients pick their queries by


def version_string() -> str:
    """``version()``: Materialize's shape, ``PostgreSQL 9.5 on <target> (Materialize …)``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("mzflow")
    except PackageNotFoundError:
        mine = "unknown"
    system = {"linux": "unknown-linux-gnu", "darwin": "apple-darwin"}.get(
        sys.platform, sys.platform)
    major, minor = SERVER_VERSION.split(".")[:2]
    return f"PostgreSQL {major}.{minor} on {platform.machine()}-{system} (mzflow {mine})"


_NAMED = {
    exp.CurrentSchema: "current_schema", exp.CurrentSchemas: "current_schemas",
    exp.CurrentDatabase: "current_database", exp.CurrentCatalog: "current_catalog",
    exp.CurrentUser: "current_user", exp.SessionUser: "session_user",
    exp.CurrentVersion: "version",
}
_ANONYMOUS = {"current_schema", "current_schemas", "current_database", "version",
              "current_setting", "set_config", "pg_backend_pid", "current_user",
              "session_user", "mz_is_superuser", "has_system_privilege"}
_BARE = {"current_role": "current_role", "user": "current_user"}


def _call(node: exp.Expr) -> tuple[str, list[exp.Expr]] | None:
    """(function, arguments) if ``node`` calls one of the session's functions."""
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and (
            node.this.name.lower() == "pg_catalog"):
        return _call(node.expression)
    for kind, name in _NAMED.items():
        if type(node) is kind:
            return name, [a for a in node.iter_expressions()]
    if isinstance(node, exp.Anonymous) and str(node.this).lower() in _ANONYMOUS:
        return str(node.this).lower(), list(node.expressions)
    if isinstance(node, exp.Column) and not node.table and node.name in _BARE and (
            not node.this.quoted) and (node.name == "current_role" or (
                (select := node.find_ancestor(exp.Select)) is not None
                and not select.args.get("from_"))):
        # current_role is a reserved word: never a column (dbt-materialize's deploy
        # macros compare role names with it in queries of mz_roles); ``user`` only
        # without a FROM, where no column can be meant.
        return _BARE[node.name], []
    return None


def replace(query: exp.Query, snap: Snapshot, variables: Variables) -> exp.Query:
    """``query`` with each session function call replaced by its value."""
    if not any(_call(n) for n in query.walk()):
        return query
    query = query.copy()
    for select in list(query.find_all(exp.Select)):
        select.set("expressions", [
            exp.alias_(p, found[0]) if (found := _call(p)) is not None else p
            for p in select.expressions])
    path = variables.search_path()

    def swap(node: exp.Expr) -> exp.Expr:
        found = _call(node)
        return _value(*found, snap, variables, path) if found is not None else node

    out = query.transform(swap)
    assert isinstance(out, exp.Query)
    return out


def _constant(value: str | None, type_: str) -> exp.Expr:
    literal = exp.null() if value is None else exp.Literal.string(value)
    return exp.Cast(this=literal, to=exp.DataType.build(type_, dialect="postgres"))


def _value(name: str, args: list[exp.Expr], snap: Snapshot, variables: Variables,
           path: tuple[str, ...]) -> exp.Expr:
    if name == "version":
        return _constant(version_string(), "text")
    if name in ("current_database", "current_catalog"):
        return _constant(DATABASE, "name")
    if name in ("current_user", "session_user", "current_role"):
        return _constant(variables.role, "name")
    if name == "pg_backend_pid":
        return exp.Literal.number(os.getpid())
    if name in ("mz_is_superuser", "has_system_privilege"):
        return exp.Boolean(this=_role_may(name, args, snap, variables.role))
    with names.using(path):
        if name == "current_schema":
            return _constant(names.current_schema(snap), "name")
        if name == "current_schemas":
            implicit = _constant_arg(args, 0, "current_schemas")
            found = names.current_schemas(snap, implicit.lower() in ("true", "t"))
            return exp.Cast(this=exp.Array(expressions=[exp.Literal.string(s) for s in found]),
                            to=exp.DataType.build("name[]", dialect="postgres"))
    if name == "current_setting":
        setting = _constant_arg(args, 0, name)
        missing_ok = len(args) > 1 and _constant_arg(args, 1, name).lower() in ("true", "t")
        try:
            return _constant(variables.get(setting), "text")
        except Error:
            if missing_ok:
                return _constant(None, "text")
            raise
    if name == "set_config":
        setting, value = _constant_arg(args, 0, name), _constant_arg(args, 1, name)
        variables.set(ast.SetVariable(this=exp.to_identifier(setting),
                                      value=exp.Literal.string(value)))
        return _constant(variables.get(setting), "text")
    raise Unsupported(f"function {name} is not supported")


def _role_may(name: str, args: list[exp.Expr], snap: Snapshot, role_name: str) -> bool:
    """Materialize's ``mz_is_superuser()`` and ``has_system_privilege([role,] privilege)``
    (CREATEROLE, CREATEDB, CREATECLUSTER), of the session's role or the one named."""
    from mzflow.catalog import privileges, roles

    if name == "has_system_privilege" and len(args) == 2:
        role_name = _constant_arg(args, 0, name)
    role = roles.find(snap, role_name)
    if role is None:
        raise UnknownObject(f"unknown role '{role_name}'")
    if name == "mz_is_superuser":
        return role.superuser
    wanted = _constant_arg(args, len(args) - 1, name).upper() if args else ""
    letter = privileges.LETTERS.get(wanted)
    if letter is None or letter not in "RBN":
        raise InvalidOption(f"unrecognized privilege type: \"{wanted.lower()}\"")
    return privileges.has(snap, role.id, privileges.SYSTEM, letter)


def settings_rows(variables: Variables) -> list[tuple[object, ...]]:
    """pg_settings: each variable with its value in this session."""
    from mzflow.session.variables import VARIABLES

    snap = variables.store.snapshot()
    out: list[tuple[object, ...]] = []
    for name in sorted(VARIABLES):
        var = VARIABLES[name]
        default = var.default(snap)
        value = variables.get(name)
        out.append((name, value, None, "mzflow", var.description, None, "user", "string",
                    "session" if name in variables.values else "default", None, None, None,
                    default, default, None, None, False))
    return out


def _constant_arg(args: list[exp.Expr], i: int, function: str) -> str:
    node = args[i] if i < len(args) else None
    while isinstance(node, exp.Cast | exp.Paren):
        node = node.this
    if isinstance(node, exp.Boolean):
        return "true" if node.this else "false"
    if isinstance(node, exp.Literal):
        return str(node.this)
    raise Unsupported(f"{function}() with an argument that is not a constant is not "
                      "supported yet")
