"""The session's variables: SET, RESET and SHOW, ALTER SYSTEM SET, and the table of
variables with their defaults (from the catalog's settings) and checks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mzflow import caches, config, values
from mzflow.catalog import ddl, frontiers, intervals, names
from mzflow.catalog.model import SCHEMA, Snapshot
from mzflow.catalog.store import Store
from mzflow.errors import InvalidOption, ReadOnlyParameter, UnknownObject, Unsupported
from mzflow.session import files
from mzflow.session.result import Result
from mzflow.sql import ast

# Materialize accepts the standard's four levels and runs each as serializable; only
# strict serializable differs (a read waits for the newest time).
ISOLATION_LEVELS = ("strict serializable", "serializable", "repeatable read", "read committed",
                    "read uncommitted")


@dataclass(frozen=True)
class Variable:
    default: Callable[[Snapshot], str]
    description: str
    check: Callable[[str], None] | None = None


def _check_interval(value: str) -> None:
    intervals.to_ms(value)


def _compaction_interval(snap: Snapshot) -> str:
    ms = frontiers.compaction_interval(snap)[0]
    return str(values.pg_text(dt.timedelta(milliseconds=ms), "interval"))


def _check_compaction(value: str) -> None:
    frontiers.check_compaction_interval(value)


_TRUE = ("true", "on", "1", "yes")
_BOOLS = (*_TRUE, "false", "off", "0", "no")


def _check_bool(name: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value.lower() not in _BOOLS:
            raise InvalidOption(f'parameter "{name}" requires a Boolean value')
    return check


def _check_isolation(value: str) -> None:
    if value.lower() not in ISOLATION_LEVELS:
        raise InvalidOption(f'invalid value for parameter "transaction_isolation": "{value}"',
                            hint=f"valid values are {', '.join(ISOLATION_LEVELS)}")


VARIABLES: dict[str, Variable] = {
    "cluster": Variable(lambda s: s.settings.get("cluster", "default"),
                        "Sets the current cluster (Materialize)."),
    "database": Variable(lambda s: "materialize", "Sets the current database (CockroachDB)."),
    "search_path": Variable(lambda s: SCHEMA,
                            "Sets the schema search order for names that are not "
                            "schema-qualified (PostgreSQL)."),
    "retain_history": Variable(
        lambda s: s.settings.get("retain_history", frontiers.DEFAULT_RETAIN_HISTORY),
        "How long tables keep readable history unless they say RETAIN HISTORY FOR "
        "(mzflow; set with ALTER SYSTEM SET).", _check_interval),
    "compaction_interval": Variable(
        _compaction_interval,
        "How often the generated mzflow_compact DAG runs mzflow compact; unset, the "
        "shortest RETAIN HISTORY, from 1 minute to 1 day (mzflow; set with ALTER SYSTEM "
        "SET).", _check_compaction),
    "optimize_use_projections": Variable(
        lambda s: s.settings.get("optimize_use_projections", "true"),
        "Answers queries from a table's projections when one can (ClickHouse; set the "
        "default with ALTER SYSTEM SET).", _check_bool("optimize_use_projections")),
    "allowed_file_roots": Variable(
        lambda s: s.settings.get(files.SETTING, files.DEFAULT_ROOTS),
        "Where roles with pg_read_server_files or pg_write_server_files may make the "
        "server read or write files: absolute paths, $home/… or s3:// prefixes, comma-"
        "separated; empty allows none (mzflow; set with ALTER SYSTEM SET).",
        files.check_roots),
    "transaction_isolation": Variable(lambda s: "strict serializable",
                                      "Sets the current transaction's isolation level "
                                      "(PostgreSQL).", _check_isolation),
}


# What PostgreSQL's clients set at connect time and read back (pgwire's ParameterStatus,
# JDBC's and psql's startup): Materialize's values, and only those it accepts.
SERVER_VERSION = "9.5.0"  # Materialize claims 9.5.0: newer makes clients warn, older
#                          sends them down legacy paths


def _one_of(name: str, *allowed: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value.strip().lower() not in allowed:
            raise InvalidOption(f'invalid value for parameter "{name}": "{value}"')
    return check


def _read_only(name: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        raise ReadOnlyParameter(f'parameter "{name}" cannot be changed')
    return check


def _float_digits(value: str) -> None:
    try:
        ok = -15 <= int(value) <= 3
    except ValueError:
        ok = False
    if not ok:
        raise InvalidOption(f'invalid value for parameter "extra_float_digits": "{value}"')


# The Materialize release whose SQL surface (catalog tables, SHOW, options) mzflow follows.
# Clients gate features on it: dbt-materialize refuses a server below v0.68.0.
MATERIALIZE_VERSION = "0.130.0"
# Read once: the package metadata's lookup took a millisecond of every server login.
_PACKAGE_VERSION = caches.lru("session.package_version", 1)


def _mz_version(snap: Snapshot) -> str:
    """Materialize's form, "v0.130.0 (<build>)": the build is mzflow's own version."""
    found = _PACKAGE_VERSION.get("mzflow")
    if found is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = f"v{MATERIALIZE_VERSION} (mzflow {version('mzflow')})"
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = f"v{MATERIALIZE_VERSION} (mzflow)"
        _PACKAGE_VERSION["mzflow"] = found
    return str(found)


VARIABLES.update({
    "application_name": Variable(lambda s: "", "Sets the application name to be reported "
                                 "in statistics and logs (PostgreSQL)."),
    "client_encoding": Variable(lambda s: "UTF8", "Sets the client's character set "
                                "encoding (PostgreSQL).",
                                _one_of("client_encoding", "utf8", "utf-8", "unicode")),
    "client_min_messages": Variable(
        lambda s: "notice", "Sets the message levels that are sent to the client "
        "(PostgreSQL).", _one_of("client_min_messages", "debug5", "debug4", "debug3",
                                 "debug2", "debug1", "log", "notice", "warning", "error")),
    "datestyle": Variable(lambda s: "ISO, MDY", "Sets the display format for date and time "
                          "values (PostgreSQL).",
                          _one_of("DateStyle", "iso, mdy", "iso,mdy", "iso", "mdy")),
    "extra_float_digits": Variable(lambda s: "3", "Adjusts the number of digits displayed "
                                   "for floating-point values (PostgreSQL).", _float_digits),
    "integer_datetimes": Variable(lambda s: "on", "Reports whether the server uses 64-bit "
                                  "integer dates and times (PostgreSQL).",
                                  _read_only("integer_datetimes")),
    "intervalstyle": Variable(lambda s: "postgres", "Sets the display format for interval "
                              "values (PostgreSQL).", _one_of("IntervalStyle", "postgres")),
    # pgjdbc's getImportedKeys reads it from pg_settings (PostgreSQL's compiled-in limit).
    "max_index_keys": Variable(lambda s: "32", "Shows the maximum number of index keys "
                               "(PostgreSQL).", _read_only("max_index_keys")),
    "mz_version": Variable(_mz_version, "Shows the Materialize server version (Materialize).",
                           _read_only("mz_version")),
    "server_encoding": Variable(lambda s: "UTF8", "Shows the server's character set "
                                "encoding (PostgreSQL).", _read_only("server_encoding")),
    "server_version": Variable(lambda s: SERVER_VERSION, "Shows the PostgreSQL compatible "
                               "server version (PostgreSQL).", _read_only("server_version")),
    "server_version_num": Variable(lambda s: "90500", "Shows the PostgreSQL compatible "
                                   "server version as an integer (PostgreSQL).",
                                   _read_only("server_version_num")),
    "standard_conforming_strings": Variable(
        lambda s: "on", "Causes '...' strings to treat backslashes literally (PostgreSQL).",
        _one_of("standard_conforming_strings", "on", "true")),
    # Materialize's, sent by dbt-materialize at every connect (`--welcome_message=off` …);
    # accepted and shown, with nothing in mzflow for them to turn off.
    "auto_route_catalog_queries": Variable(
        lambda s: "on", "Whether to force queries that depend only on system tables to run "
        "on the mz_catalog_server cluster (Materialize; mzflow's need no cluster).",
        _check_bool("auto_route_catalog_queries")),
    "current_object_missing_warnings": Variable(
        lambda s: "on", "Whether to emit warnings when the current database, schema, or "
        "cluster is missing (Materialize; mzflow emits none).",
        _check_bool("current_object_missing_warnings")),
    "welcome_message": Variable(lambda s: "on", "Whether to send a notice with a welcome "
                                "message after a successful connection (Materialize; "
                                "mzflow sends none).", _check_bool("welcome_message")),
    "timezone": Variable(lambda s: "UTC", "Sets the time zone for displaying and "
                         "interpreting time stamps (PostgreSQL).",
                         _one_of("TimeZone", "utc", "etc/utc", "+00:00", "gmt", "z")),
})


def _tuning_variable(name: str) -> Variable:
    def current(snap: Snapshot) -> str:
        tuning = config.tuning(snap.settings)
        if name == "warm_memory_budget":  # 'auto' shows what it is on this machine
            from mzflow.clusters import budget

            return budget.describe_budget(tuning)
        return str(getattr(tuning, name))

    def check(value: str) -> None:
        config.tuning_value(name, value)
    doc = config.TUNING_FIELDS[name].metadata["doc"]
    return Variable(current, f"{doc} (mzflow tuning; set with ALTER SYSTEM SET).", check)


# The tuning thresholds (mzflow/config.py: Tuning): shown by SHOW ALL, set for the
# installation with ALTER SYSTEM SET.
VARIABLES.update({name: _tuning_variable(name) for name in config.TUNING_FIELDS})
SYSTEM_VARIABLES = ("cluster", "retain_history", "compaction_interval",
                    "optimize_use_projections", files.SETTING, *config.TUNING_FIELDS)
SYSTEM_ONLY = ("retain_history", "compaction_interval", files.SETTING, *config.TUNING_FIELDS)


class Variables:
    """One session's values; a variable it never set has its default."""

    def __init__(self, store: Store, role: str = "materialize"):
        self.store = store
        self.role = role  # the session's role: current_user and session_user
        self.values: dict[str, str] = {}

    def get(self, name: str) -> str:
        name = name.lower()
        var = VARIABLES.get(name)
        if var is None:
            raise UnknownObject(f'unrecognized configuration parameter "{name}"')
        return self.values.get(name) or var.default(self.store.snapshot())

    def search_path(self) -> tuple[str, ...]:
        # Not through get(): its default would load the catalog before the statement does.
        value = self.values.get("search_path")
        return names.parse_path(value) if value is not None else (SCHEMA,)

    def enabled(self, name: str) -> bool:
        """A Boolean variable's value."""
        return self.get(name).lower() in _TRUE

    def set(self, stmt: ast.SetVariable) -> Result:
        name = stmt.this.name.lower()
        var = VARIABLES.get(name)
        if var is None:
            raise UnknownObject(f'unrecognized configuration parameter "{name}"')
        value_node = stmt.args.get("value")
        value = None if value_node is None else value_node.name
        if isinstance(value_node, exp.Boolean):  # SET x = false: a Boolean has no name
            value = "true" if value_node.this else "false"
        if name == "search_path" and value_node is not None:
            # A list of schemas, each a name or a string: 'ba r', foo
            parts = value_node.expressions if isinstance(value_node, exp.Tuple) else [
                value_node]
            value = names.format_path([p.name for p in parts])
        elif isinstance(value_node, exp.Tuple):
            raise InvalidOption(f"SET {name} takes only one argument")
        if value is not None and var.check:
            var.check(value)
        if stmt.args.get("system"):
            if name not in SYSTEM_VARIABLES:
                raise Unsupported(f'ALTER SYSTEM SET "{name}" is not supported')
            return Result(status="ALTER SYSTEM", notices=ddl.set_system(self.store, name, value))
        if name in SYSTEM_ONLY:
            raise InvalidOption(f'parameter "{name}" can only be set with ALTER SYSTEM SET')
        if value is None:
            self.values.pop(name, None)
        else:
            self.values[name] = value.lower() if name == "transaction_isolation" else value
        return Result(status="SET")

    def reset(self, stmt: ast.ResetVariable) -> Result:
        return self.set(ast.SetVariable(this=stmt.this, value=None,
                                        system=stmt.args.get("system")))

    def show(self, stmt: ast.Show) -> Result:
        """SHOW <variable>, SHOW ALL."""
        name = stmt.this.name.lower()
        if name == "all":
            rows: list[tuple[Any, ...]] = [
                (n, self.get(n), v.description) for n, v in VARIABLES.items()]
            return Result(["name", "setting", "description"], rows, "SHOW")
        return Result([name], [(self.get(name),)], "SHOW")
