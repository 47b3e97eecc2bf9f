"""Spark DataFrame helpers that every incremental rule shares.

IR expressions are sqlglot trees over bare column names; these turn them into
Spark SQL (with PostgreSQL's division, averages and rounding) and apply them to frames. Nothing
here knows about times, changes or state: that is each rule's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlglot import exp

from mzflow.engine.spark import pg_semantics

DIFF = "_mz_diff"  # a change row's multiplicity (+n inserted, -n deleted)


def quoted(name: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def renamed(df: Any, pairs: Sequence[tuple[str, str]]) -> Any:
    """``df`` projected to (source, name) pairs. One string expression per column keeps
    a projection one call into the JVM (a Column object per column costs one each, and
    a tick's plan has hundreds)."""
    return df.selectExpr(*[f"{quoted(s)} AS {quoted(n)}" for s, n in pairs])


def picked(df: Any, columns: Sequence[str]) -> Any:
    return df.selectExpr(*[quoted(c) for c in columns])


def sql(e: exp.Expr) -> str:
    """An IR expression as Spark SQL, with PostgreSQL's semantics where Spark's differ."""
    return pg_semantics(e.copy()).sql(dialect="spark")


def project(df: Any, exprs: Sequence[exp.Expr], names: Sequence[str]) -> Any:
    return df.selectExpr(*[f"{sql(e)} AS `{n}`" for e, n in zip(exprs, names, strict=True)])


def sort_key(c: Any, o: exp.Ordered) -> Any:
    """A Spark sort column for ``o`` with PostgreSQL's NULL order (NULLs are largest)."""
    desc = bool(o.args.get("desc"))
    nulls_first = o.args.get("nulls_first")
    if nulls_first is None:
        nulls_first = desc
    if desc:
        return c.desc_nulls_first() if nulls_first else c.desc_nulls_last()
    return c.asc_nulls_first() if nulls_first else c.asc_nulls_last()


def plain(e: exp.Expr) -> str | None:
    """The column name when ``e`` is a bare column reference."""
    return e.name if isinstance(e, exp.Column) and not e.table else None


def substitute(e: exp.Expr, subst: Mapping[str, exp.Expr]) -> exp.Expr:
    """``e`` with bare column references replaced (to move an expression below a
    projection)."""
    def fix(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and not n.table and n.name in subst:
            return subst[n.name].copy()
        return n
    return e.copy().transform(fix)


def columns_of(exprs: Sequence[exp.Expr]) -> set[str]:
    return {c.name for e in exprs for c in e.find_all(exp.Column)}


def row_local(e: exp.Expr) -> bool:
    """Whether ``e``'s value depends on its row alone (no aggregate, no window)."""
    return not any(isinstance(n, exp.AggFunc | exp.Window) for n in e.walk())
