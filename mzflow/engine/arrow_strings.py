"""PostgreSQL's string functions for ``engine/arrow_expr.py`` (through
``arrow_functions``), value by value: replace, left, right, lpad, rpad, repeat,
reverse, md5, strpos/position, ascii, chr, split_part; and now() and current_date.
``engine/spark/pg_functions.py`` gives Spark the same results; the differential test checks both.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from sqlglot import exp

from mzflow.engine import arrow_expr as ax
from mzflow.engine import arrow_types as at

_MAX_CHARS = 268435454  # PostgreSQL refuses a text past 1 GB (4 bytes a character)


def _too_long() -> ax.EvaluationError:
    return at._fail("requested length too large", "54000")


def _replace(s: str, old: str, new: str) -> str:
    return s if old == "" else s.replace(old, new)


def _left(s: str, n: int) -> str:
    return s[:n] if n >= 0 else s[:max(len(s) + n, 0)]


def _right(s: str, n: int) -> str:
    if n >= 0:
        return s[max(len(s) - n, 0):]  # past the text's length: all of it
    if n == -2**31:  # PostgreSQL negates it, overflows, and keeps the whole text
        return s
    return s[-n:]


def _pad(left: bool) -> Callable[..., str]:
    def pad(s: str, n: int, fill: str = " ") -> str:
        if n <= 0:
            return ""
        if fill == "":  # nothing to pad with: PostgreSQL's length check never comes
            return s[:n]
        if n > _MAX_CHARS:
            raise _too_long()
        if len(s) >= n:
            return s[:n]
        extra = (fill * (n // len(fill) + 1))[:n - len(s)]
        return extra + s if left else s + extra
    return pad


def _repeat(s: str, n: int) -> str:
    if n <= 0:
        return ""
    if len(s.encode()) * n > 1073741819:
        raise _too_long()
    return s * n


def _strpos(s: str, sub: str) -> int:
    return s.find(sub) + 1


def _ascii(s: str) -> int:
    return ord(s[0]) if s else 0


def _chr(n: int) -> str:
    if n == 0:
        raise at._fail("null character not permitted", "54000")
    if n < 0:
        raise at._fail("character number must be positive", "22023")
    if n > 0x10FFFF or 0xD800 <= n <= 0xDFFF:
        raise at._fail(f"requested character not valid for encoding: {n}", "54000")
    return chr(n)


def _split_part(s: str, delimiter: str, n: int) -> str:
    if n == 0:
        raise at._fail("field position must not be zero", "22023")
    parts = s.split(delimiter) if delimiter else [s]
    if s == "":
        parts = [""]
    index = n - 1 if n > 0 else len(parts) + n
    return parts[index] if 0 <= index < len(parts) else ""


def _md5(s: str) -> str:
    return hashlib.md5(s.encode()).hexdigest()


# node type → (function, its arguments in order (``#``: an integer), result type)
_FUNCTIONS: dict[type[exp.Expr], tuple[Callable[..., Any], tuple[str, ...], pa.DataType]] = {
    exp.Replace: (_replace, ("this", "expression", "replacement"), pa.string()),
    exp.Left: (_left, ("this", "#expression"), pa.string()),
    exp.Right: (_right, ("this", "#expression"), pa.string()),
    exp.Repeat: (_repeat, ("this", "#times"), pa.string()),
    exp.Reverse: (lambda s: s[::-1], ("this",), pa.string()),
    exp.MD5: (_md5, ("this",), pa.string()),
    exp.StrPosition: (_strpos, ("this", "substr"), pa.int32()),
    exp.Ascii: (_ascii, ("this",), pa.int32()),
    exp.SplitPart: (_split_part, ("this", "delimiter", "#part_index"), pa.string()),
}


def evaluate(node: exp.Expr, table: pa.Table, per_value: Callable[..., at.Data]
             ) -> at.Data | None:
    """``node``'s value, or None when this module does not evaluate it."""
    from mzflow.engine.arrow_functions import _integer

    if isinstance(node, exp.CurrentTimestamp) and not node.args:
        return pa.scalar(dt.datetime.now(dt.UTC), pa.timestamp("us", tz="UTC"))
    if isinstance(node, exp.CurrentDate) and not node.args:
        return pa.scalar(dt.datetime.now(dt.UTC).date(), pa.date32())
    ev = lambda n: ax._eval(n, table)  # noqa: E731
    if isinstance(node, exp.Pad):
        args = [at._text(ev(node.this), "lpad"), _integer(ev(node.expression), "lpad")]
        if node.args.get("fill_pattern") is not None:
            args.append(at._text(ev(node.args["fill_pattern"]), "lpad"))
        return per_value(_pad(bool(node.args.get("is_left"))), args, pa.string(),
                         table.num_rows)
    if isinstance(node, exp.Chr) and len(node.expressions) == 1 and not node.args.get(
            "charset"):
        return per_value(_chr, [_integer(ev(node.expressions[0]), "chr")], pa.string(),
                         table.num_rows)
    found = _FUNCTIONS.get(type(node))
    if found is None:
        return None
    fn, keys, out = found
    name = node.sql_name().lower() if isinstance(node, exp.Func) else node.key
    names = [k.lstrip("#") for k in keys]
    if any(v is not None and v is not False for k, v in node.args.items() if k not in names):
        return None  # a form PostgreSQL's function lacks (position(… IN … FROM n))
    args = [_integer(ev(node.args[k[1:]]), name) if k.startswith("#")
            else at._text(ev(node.args[k]), name) for k in keys]
    return per_value(fn, args, out, table.num_rows)
