"""The session's variables: SET, RESET and SHOW, ALTER SYSTEM SET, and the table of
variables with their defaults (from the catalog's settings) and checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mzflow import config
from mzflow.catalog import ddl, frontiers, intervals
from mzflow.catalog.model import Snapshot
from mzflow.catalog.store import Store
from mzflow.errors import InvalidOption, UnknownObject, Unsupported
from mzflow.session.result import Result
from mzflow.sql import ast

ISOLATION_LEVELS = ("strict serializable", "serializable")


@dataclass(frozen=True)
class Variable:
    default: Callable[[Snapshot], str]
    description: str
    check: Callable[[str], None] | None = None


def _check_interval(value: str) -> None:
    intervals.to_ms(value)


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
    "search_path": Variable(lambda s: "public",
                            "Sets the schema search order for names that are not "
                            "schema-qualified (PostgreSQL)."),
    "retain_history": Variable(
        lambda s: s.settings.get("retain_history", frontiers.DEFAULT_RETAIN_HISTORY),
        "How long tables keep readable history unless they say RETAIN HISTORY FOR "
        "(mzflow; set with ALTER SYSTEM SET).", _check_interval),
    "optimize_use_projections": Variable(
        lambda s: s.settings.get("optimize_use_projections", "true"),
        "Answers queries from a table's projections when one can (ClickHouse; set the "
        "default with ALTER SYSTEM SET).", _check_bool("optimize_use_projections")),
    "transaction_isolation": Variable(lambda s: "strict serializable",
                                      "Sets the current transaction's isolation level "
                                      "(PostgreSQL).", _check_isolation),
}


def _tuning_variable(name: str) -> Variable:
    def current(snap: Snapshot) -> str:
        return str(getattr(config.tuning(snap.settings), name))

    def check(value: str) -> None:
        config.tuning_value(name, value)
    doc = config.TUNING_FIELDS[name].metadata["doc"]
    return Variable(current, f"{doc} (mzflow tuning; set with ALTER SYSTEM SET).", check)


# The tuning thresholds (mzflow/config.py: Tuning): shown by SHOW ALL, set for the
# installation with ALTER SYSTEM SET.
VARIABLES.update({name: _tuning_variable(name) for name in config.TUNING_FIELDS})
SYSTEM_VARIABLES = ("cluster", "retain_history", "optimize_use_projections",
                    *config.TUNING_FIELDS)
SYSTEM_ONLY = ("retain_history", *config.TUNING_FIELDS)


class Variables:
    """One session's values; a variable it never set has its default."""

    def __init__(self, store: Store):
        self.store = store
        self.values: dict[str, str] = {}

    def get(self, name: str) -> str:
        name = name.lower()
        var = VARIABLES.get(name)
        if var is None:
            raise UnknownObject(f'unrecognized configuration parameter "{name}"')
        return self.values.get(name) or var.default(self.store.snapshot())

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
