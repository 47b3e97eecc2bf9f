"""Text to typed statement trees, with errors that point at line and column."""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.errors import ErrorLevel, TokenError
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from mzflow.errors import ParseError
from mzflow.sql import array_literals
from mzflow.sql.dialect import Mz
from mzflow.sql.joins import flatten_joins
from mzflow.sql.parens import unwrap
from mzflow.sql.redact import blank_strings, has_role_ddl

DIALECT = Mz()


def parse(sql: str) -> list[exp.Expr]:
    """Parse ``;``-separated statements. Empty statements are dropped.

    The whole text is parsed before anything runs, like PostgreSQL's simple
    query protocol: a syntax error anywhere rejects the whole batch.
    """
    try:
        tokens = DIALECT.tokenize(sql)
    except TokenError as e:
        raise _token_error(sql, e) from None
    parser = DIALECT.parser(error_level=ErrorLevel.IMMEDIATE)
    try:
        trees = parser.parse(tokens, sql)
    except SqlglotParseError as e:
        raise _parse_error(sql, e) from None
    except (RecursionError, ValueError, TypeError, AttributeError, IndexError) as e:
        # sqlglot occasionally trips on pathological input instead of raising ParseError;
        # that is still the user's malformed SQL, so report it as such, at the start.
        raise ParseError(f"could not parse statement ({type(e).__name__})", line=1,
                         column=1) from None
    statements = []
    for tree in trees:
        if tree is None or isinstance(tree, exp.Semicolon):
            continue
        if isinstance(tree, exp.Command):
            # Defensive: the dialect should never produce one.
            raise ParseError(f"{tree.name} is not supported", line=1, column=1)
        # PostgreSQL semantics: unquoted identifiers fold to lower case, quoted ones
        # keep their case. Everything downstream compares names exactly.
        tree = unwrap(tree)  # a statement `(SELECT …)`
        tree = flatten_joins(normalize_identifiers(tree, dialect=DIALECT))
        statements.append(array_literals.expand(tree))
    return statements


def parse_one(sql: str) -> exp.Expr:
    statements = parse(sql)
    if len(statements) != 1:
        raise ParseError(f"expected one statement, found {len(statements)}", line=1, column=1)
    return statements[0]


def parse_query(sql: str) -> exp.Query:
    stmt = parse_one(sql)
    if not isinstance(stmt, exp.Query):
        raise ParseError("expected a SELECT", line=1, column=1)
    return stmt


def _parse_error(sql: str, e: SqlglotParseError) -> ParseError:
    first = e.errors[0] if e.errors else {}
    reason = _readable(first.get("description") or str(e).split(". Line")[0],
                       first.get("highlight"))
    line = int(first.get("line") or 1)
    col = int(first.get("col") or 1)
    snippet = "" if has_role_ddl(sql) else (  # a token there may be a password
        (first.get("start_context") or "") + (first.get("highlight") or ""))
    return ParseError(reason, line=line, column=col, snippet=_caret(sql, line, col) or snippet)


# sqlglot's generic complaints, which name its own node classes: PostgreSQL says
# "syntax error at or near" the token instead.
_GENERIC = re.compile(r"Invalid expression / Unexpected token|Required keyword: |"
                      r"Expected an expression|Expecting ")


def _readable(reason: str, token: str | None) -> str:
    """sqlglot's internal phrasing → what a SQL user can act on."""
    if _GENERIC.match(reason) and token is not None:
        return f'syntax error at or near "{token}"' if token else (
            "syntax error at end of input")
    reason = re.sub(r"<Token token_type: [\w.]+, text: (.*?), line: \d+.*?>", r"'\1'", reason)
    return reason.replace("'SENTINEL'", "end of input")


def _token_error(sql: str, e: TokenError) -> ParseError:
    line, col = _position(sql, _token_error_offset(sql, e))
    reason = "unterminated quoted string or identifier" if "'" in sql or '"' in sql else (
        "invalid token")
    return ParseError(reason, line=line, column=col, snippet=_caret(sql, line, col))


# sqlglot's tokenizer says where the failing token starts in the error it wraps:
# "Missing ' from <line>:<offset>", "Numeric string contains invalid characters from …".
_TOKEN_ERROR_AT = re.compile(r" from \d+:(\d+)$")


def _token_error_offset(sql: str, e: TokenError) -> int:
    """Offset of the token the tokenizer choked on (0-based)."""
    m = _TOKEN_ERROR_AT.search(str(e.__cause__ or ""))
    if m:
        return min(int(m.group(1)), len(sql))
    # No position given: the token starts where the longest prefix that still
    # tokenizes ends. (The shortest failing prefix would be wrong: it may stop inside
    # an earlier, properly closed string.)
    if len(sql) <= 20_000:
        for k in range(len(sql) - 1, -1, -1):
            try:
                DIALECT.tokenize(sql[:k])
            except TokenError:
                continue
            return k
    return 0


def _position(sql: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset``."""
    line = sql.count("\n", 0, offset) + 1
    col = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return line, col


def _caret(sql: str, line: int, col: int) -> str:
    lines = sql.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    text = lines[line - 1]
    if has_role_ddl(sql):
        # A password never reaches an error: strings blanked on either side of the caret
        # (an error points at a token's start, never inside a string).
        before = blank_strings(text[:col - 1])
        text, col = before + blank_strings(text[col - 1:]), len(before) + 1
    return f"{text}\n{' ' * max(col - 1, 0)}^"
