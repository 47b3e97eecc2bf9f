"""Result tables as psql prints them: aligned, or expanded (``\\x``) one field a line."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import TextIO

from mzflow.values import pg_text


def print_result(result: object, out: TextIO, expanded: bool | None = False) -> None:
    """``expanded``: True, False, or None for psql's ``\\x auto`` (expanded when the
    aligned table is wider than the terminal)."""
    for notice in getattr(result, "notices", []):
        print(f"NOTICE: {notice}", file=sys.stderr)
    columns = getattr(result, "columns", [])
    if not columns:
        print(getattr(result, "status", ""), file=out)
        return
    rows = getattr(result, "rows", [])
    types = getattr(result, "types", None)
    text = format_table(columns, rows, types)
    if expanded is None:
        width = max(len(line) for line in text.splitlines())
        expanded = width > shutil.get_terminal_size().columns
    print(format_expanded(columns, rows, types) if expanded else text, file=out)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[object]],
                 types: Sequence[str] | None = None) -> str:
    """psql's aligned format: header, rule, rows, then ``(n rows)``. ``types``: the
    columns' SQL types, for PostgreSQL's text of their values."""
    cells = [_cells(row, types) for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]
    lines = [" | ".join(c.center(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
             "-+-".join("-" * w for w in widths)]
    for row in cells:
        lines.append(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(" " + line if i < len(lines) - 1 else line for i, line in enumerate(lines))


def format_expanded(columns: Sequence[str], rows: Sequence[Sequence[object]],
                    types: Sequence[str] | None = None) -> str:
    """psql's ``\\x``: a ``-[ RECORD n ]`` header, then ``column | value`` per line."""
    if not rows:
        return "(0 rows)"
    width = max(len(c) for c in columns)
    lines = []
    for n, row in enumerate(rows, start=1):
        values = _cells(row, types)
        rule = max([width + 3 + max(len(v) for v in values), 14])
        header = f"-[ RECORD {n} ]"
        lines.append(header + "-" * max(rule - len(header), 0))
        lines += [f"{c.ljust(width)} | {v}".rstrip() for c, v in zip(columns, values,
                                                                     strict=True)]
    return "\n".join(lines)


def _cells(row: Sequence[object], types: Sequence[str] | None) -> list[str]:
    return [cell(v, types[i] if types and i < len(types) else None)
            for i, v in enumerate(row)]


def cell(value: object, type_name: str | None = None) -> str:
    """A value as psql shows it: PostgreSQL's text output, NULL as nothing."""
    return pg_text(value, type_name) or ""
