"""Determinism: a maintained definition must not depend on when it is evaluated."""

from __future__ import annotations

from sqlglot import exp

from mzflow.errors import Error


class NonDeterministic(Error):
    code = "0A000"


# Functions whose value changes between evaluations: a maintained result would be
# whatever they returned at the last tick, which no reader could predict.
NONDETERMINISTIC = {
    "now", "current_timestamp", "current_date", "current_time", "localtime", "localtimestamp",
    "random", "rand", "uuid", "gen_random_uuid", "mz_now", "clock_timestamp", "timeofday",
    "statement_timestamp", "transaction_timestamp",
}


def check_deterministic(query: exp.Expr, what: str) -> None:
    for node in query.walk():
        name = None
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
        elif isinstance(node, exp.Func):
            name = node.sql_name().lower()
        if name in NONDETERMINISTIC or isinstance(
            node, exp.CurrentTimestamp | exp.CurrentDate | exp.CurrentTime | exp.Rand
        ):
            raise NonDeterministic(
                f"calls to {name or type(node).__name__.lower()} are not allowed in {what}",
                hint="a maintained result must not depend on when it was computed")
