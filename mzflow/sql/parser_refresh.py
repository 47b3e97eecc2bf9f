"""The ``REFRESH`` option of materialized views and indexes, in Materialize's grammar:

    REFRESH [=] ON COMMIT
    REFRESH [=] AT { CREATION | <time> }
    REFRESH [=] EVERY '<interval>' [ ALIGNED TO <time> ]

and mzflow's, for a batch scheduler: ``REFRESH [=] ON SCHEDULE '<cron | @preset>'
[ TIMEZONE '<Area/City>' ]``. What the values mean, and the errors of values that parse
but make no policy, are ``catalog/refresh.py``'s; a word out of place is a syntax error
here, with its line and column. mzflow's older ``REFRESH = 'incremental'`` (the tick
mode) is not a policy: it is the generic option it always was.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.parsers.materialize import MaterializeParser
from sqlglot.tokens import TokenType

from mzflow.sql import ast

_POLICY_WORDS = ("ON", "AT", "EVERY")


class RefreshParser(MaterializeParser):
    """``DdlParser`` builds on it; ``_parse_option`` asks ``_at_refresh_policy`` first."""

    def _at_refresh_policy(self) -> bool:
        if self._curr is None or self._curr.text.upper() != "REFRESH":
            return False
        ahead = 2 if self._next is not None and self._next.token_type == TokenType.EQ else 1
        i = self._index + ahead
        return i < len(self._tokens) and (
            self._tokens[i].token_type != TokenType.STRING
            and self._tokens[i].text.upper() in _POLICY_WORDS)

    def _parse_refresh_policy(self) -> ast.Option:
        self._advance()  # REFRESH
        self._match(TokenType.EQ)
        if self._match_text_seq("ON"):
            if self._match_text_seq("COMMIT"):
                policy = ast.RefreshPolicy(kind="ON COMMIT")
            elif self._match_text_seq("SCHEDULE"):
                schedule = self._refresh_string(
                    "Expected a cron expression or @preset string after REFRESH ON SCHEDULE")
                timezone = (self._refresh_string("Expected a time zone string after TIMEZONE")
                            if self._match_text_seq("TIMEZONE") else None)
                policy = ast.RefreshPolicy(kind="ON SCHEDULE", schedule=schedule,
                                           timezone=timezone)
            else:
                self.raise_error("Expected COMMIT or SCHEDULE after REFRESH ON")
        elif self._match_text_seq("AT"):
            if self._match_text_seq("CREATION"):
                policy = ast.RefreshPolicy(kind="AT CREATION")
            else:
                policy = ast.RefreshPolicy(kind="AT", at=self._refresh_time(
                    "Expected CREATION or a time after REFRESH AT"))
        else:
            self._match_text_seq("EVERY")  # _at_refresh_policy saw one of the three words
            interval = self._refresh_string("Expected an interval string after REFRESH EVERY")
            aligned = None
            if self._match_text_seq("ALIGNED"):
                if not self._match_text_seq("TO"):
                    self.raise_error("Expected TO after ALIGNED")
                aligned = self._refresh_time("Expected a time after ALIGNED TO")
            policy = ast.RefreshPolicy(kind="EVERY", interval=interval, aligned_to=aligned)
        return self.expression(ast.Option(this="REFRESH", value=self.expression(policy)))

    def _refresh_string(self, message: str) -> exp.Literal:
        value = self._parse_string()
        if not isinstance(value, exp.Literal):
            self.raise_error(message)
            raise AssertionError("unreachable")  # raise_error raises at IMMEDIATE level
        return value

    def _refresh_time(self, message: str) -> exp.Expr:
        if self._curr is None or self._curr.token_type in (
                TokenType.COMMA, TokenType.R_PAREN, TokenType.SEMICOLON):
            self.raise_error(message)
        value = self._parse_bitwise()
        if value is None:
            self.raise_error(message)
            raise AssertionError("unreachable")
        return value
