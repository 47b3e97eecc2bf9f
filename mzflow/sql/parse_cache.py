""":func:`mzflow.sql.parse.parse`, remembered by the statement's text.

Clients send the same texts again and again (a pool's health check, an ORM's catalog
queries, a dashboard's refresh; the extended protocol parses a statement at Parse and
again to Describe it), and parsing a short SELECT costs more Python than copying its
tree. A tree is a function of the text alone (one dialect, no session state), so it is
kept by text; each caller gets a copy of its own, since sqlglot's trees are mutable and
the session's stages change theirs. What the parser refuses is never kept (the error
is raised again). Nor is a long text (a bulk INSERT's VALUES would evict the rest), nor
role DDL: its strings are passwords, which nothing keeps.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow import caches
from mzflow.sql import parse as parse_mod
from mzflow.sql.redact import has_role_ddl

LONGEST = 8192  # characters: ORM catalog queries fit, bulk INSERTs do not
_TREES = caches.lru("sql.parsed", 512)


def parse(sql: str) -> list[exp.Expr]:
    """As :func:`mzflow.sql.parse.parse`; each tree is the caller's own."""
    found = _TREES.get(sql)
    if found is None:
        found = tuple(parse_mod.parse(sql))
        if keeps(sql):
            _TREES[sql] = tuple(t.copy() for t in found)
            return list(found)
    return [t.copy() for t in found]


def keeps(sql: str) -> bool:
    """Whether what is made of ``sql`` may be kept by its text (not too long, no
    password in it)."""
    return len(sql) <= LONGEST and not has_role_ddl(sql)
