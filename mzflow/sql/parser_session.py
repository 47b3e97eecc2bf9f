"""The session statements of mzflow's parser: transaction control and cursors.

``BEGIN``/``START TRANSACTION``, ``COMMIT``/``END``, ``ROLLBACK``/``ABORT``, ``DECLARE``,
``FETCH`` and ``CLOSE``, in PostgreSQL's grammar as Materialize accepts it. What
PostgreSQL has and Materialize does not (scrollable or holdable cursors, ``FETCH
BACKWARD``, ``SET TRANSACTION`` and ``SET SESSION CHARACTERISTICS AS TRANSACTION``, which
JDBC's ``setTransactionIsolation`` sends) is refused by name. ``MzParser``
(``sql/parser.py``) tries these first.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from mzflow.errors import Unsupported
from mzflow.sql import ast, session_ast
from mzflow.sql.parser_ddl import DdlParser

_ISOLATION_LEVELS = (
    ("STRICT", "SERIALIZABLE"),
    ("SERIALIZABLE",),
    ("REPEATABLE", "READ"),
    ("READ", "COMMITTED"),
    ("READ", "UNCOMMITTED"),
)
# FETCH directions PostgreSQL has and Materialize does not (its cursors go forward only).
_BACKWARD = ("BACKWARD", "PRIOR", "FIRST", "LAST", "ABSOLUTE", "RELATIVE")


class SessionParser(DdlParser):
    """Parses the session statements; ``None`` when the statement is another kind."""

    def _parse_session_statement(self) -> exp.Expr | None:
        if self._curr is None:
            return None
        word = self._curr.text.upper()
        if word == "START" and self._next is not None and (
                self._next.text.upper() == "TRANSACTION"):
            self._advance(2)
            return self._parse_transaction_modes()
        if word == "BEGIN":
            self._advance()
            self._match_any_words((("WORK",), ("TRANSACTION",)))
            return self._parse_transaction_modes()
        if word == "SET" and (self._match_words("SET", "TRANSACTION") or self._match_words(
                "SET", "SESSION", "CHARACTERISTICS", "AS", "TRANSACTION")):
            self._parse_transaction_modes()  # a syntax error is still one
            # Materialize's words; it refuses both when it describes the statement too.
            raise Unsupported("SET TRANSACTION not yet supported")
        if word == "SAVEPOINT":
            self._advance()
            return self.expression(session_ast.Savepoint(
                kind="SAVEPOINT", this=self._expect_name("savepoint name")))
        if word == "RELEASE":
            self._advance()
            self._match_words("SAVEPOINT")
            return self.expression(session_ast.Savepoint(
                kind="RELEASE", this=self._expect_name("savepoint name")))
        if word in ("COMMIT", "END", "ROLLBACK", "ABORT"):
            self._advance()
            self._match_any_words((("WORK",), ("TRANSACTION",)))
            if word == "ROLLBACK" and self._match_words("TO"):
                self._match_words("SAVEPOINT")
                return self.expression(session_ast.Savepoint(
                    kind="ROLLBACK TO", this=self._expect_name("savepoint name")))
            chain = False
            if self._match_words("AND"):
                chain = not self._match_words("NO")
                if not self._match_words("CHAIN"):
                    self.raise_error("Expected CHAIN")
            kind = "COMMIT" if word in ("COMMIT", "END") else "ROLLBACK"
            return self.expression(session_ast.EndTransaction(kind=kind, chain=chain))
        if word == "DECLARE":
            self._advance()
            return self._parse_declare_cursor()
        if word == "FETCH":
            self._advance()
            return self._parse_fetch()
        if word == "CLOSE":
            self._advance()
            if self._match(TokenType.ALL):
                return self.expression(session_ast.Close())
            return self.expression(session_ast.Close(this=self._expect_name("cursor name")))
        return None

    def _parse_transaction_modes(self) -> session_ast.StartTransaction:
        access = isolation = None
        while not self._at_end():
            if self._match_words("ISOLATION", "LEVEL"):
                isolation = self._match_any_words(_ISOLATION_LEVELS)
                if isolation is None:
                    self.raise_error("Expected an isolation level")
            elif self._match_words("READ", "ONLY"):
                access = "READ ONLY"
            elif self._match_words("READ", "WRITE"):
                access = "READ WRITE"
            elif self._match_words("NOT", "DEFERRABLE") or self._match_words("DEFERRABLE"):
                pass  # PostgreSQL's: matters only to serializable read-only waits
            else:
                self.raise_error(f'syntax error at or near "{self._curr.text}"')
            self._match(TokenType.COMMA)
        return self.expression(session_ast.StartTransaction(access=access,
                                                            isolation=isolation))

    def _parse_declare_cursor(self) -> session_ast.Declare:
        name = self._expect_name("cursor name")
        for word in ("BINARY", "INSENSITIVE", "ASENSITIVE", "SCROLL"):
            if self._match_words(word):
                self.raise_error(f"DECLARE {word} CURSOR is not supported")
        if self._match_words("NO", "SCROLL"):
            pass  # the only kind there is
        if not self._match_words("CURSOR"):
            self.raise_error("Expected CURSOR")
        if self._match_words("WITH", "HOLD"):
            self.raise_error("DECLARE CURSOR WITH HOLD is not supported")
        self._match_words("WITHOUT", "HOLD")
        if not self._match(TokenType.FOR):
            self.raise_error("Expected FOR")
        query = self._parse_statement()
        if not isinstance(query, exp.Query | ast.AsOf | ast.Subscribe):
            self.raise_error("Expected a SELECT or SUBSCRIBE after DECLARE … CURSOR FOR")
        return self.expression(session_ast.Declare(this=name, query=query))

    def _parse_fetch(self) -> session_ast.Fetch:
        for word in _BACKWARD:
            if self._curr is not None and self._curr.text.upper() == word:
                self.raise_error(f"FETCH {word} is not supported: cursors only move forward")
        self._match_words("FORWARD") or self._match_words("NEXT")
        count: exp.Expr | None = exp.Literal.number(1)
        if self._match(TokenType.ALL):
            count = None
        elif self._curr is not None and self._curr.token_type == TokenType.NUMBER:
            count = self._parse_number()
        elif self._curr is not None and self._curr.token_type == TokenType.DASH:
            self.raise_error("FETCH with a negative count is not supported: cursors only "
                             "move forward")
        self._match_set((TokenType.FROM, TokenType.IN))
        name = self._expect_name("cursor name")
        options = self._parse_options() if self._match(TokenType.WITH, advance=False) else []
        return self.expression(session_ast.Fetch(this=name, count=count, options=options))
