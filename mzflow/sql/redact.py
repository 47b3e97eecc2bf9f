"""Passwords out of SQL text that is shown, logged or kept (error snippets, the shell's
history, a server's statement log).

In ``CREATE ROLE`` and ``ALTER ROLE`` the only strings are passwords, so once such a
statement appears, every string literal after it is blanked, and so is a bare word
after PASSWORD (a mistake, but still a secret). Text without role DDL is unchanged.
"""

from __future__ import annotations

import re

MASK = "'********'"

_ROLE_DDL = re.compile(r"\b(?:CREATE|ALTER)\s+(?:ROLE|USER)\b", re.IGNORECASE)
_SECRET = re.compile(
    r"""[Ee]'(?:[^'\\]|\\.|'')*(?:'|$)              # an escape string
      | (?:[Uu]&)?'(?:[^']|'')*(?:'|$)             # a string, maybe unterminated
      | \$(\w*)\$.*?(?:\$\1\$|$)                   # a dollar-quoted string
      | (?<=PASSWORD\s)\s*(?!NULL\b)[^\s;,()'$]+   # a bare word after PASSWORD
    """, re.IGNORECASE | re.VERBOSE | re.DOTALL)


def redact_passwords(sql: str) -> str:
    start = _ROLE_DDL.search(sql)
    if start is None:
        return sql
    at = start.start()
    return sql[:at] + blank_strings(sql[at:])


def has_role_ddl(sql: str) -> bool:
    return _ROLE_DDL.search(sql) is not None


def blank_strings(text: str) -> str:
    """Every string literal in ``text`` (and a bare word after PASSWORD) masked."""
    return _SECRET.sub(MASK, text)
