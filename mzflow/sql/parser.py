"""mzflow's statement parser: sqlglot's Materialize parser plus the statements it lacks.

sqlglot parses Materialize's queries well but returns an unparsed ``Command``
for clusters, ``IN CLUSTER``, default indexes, sinks, SHOW and RESET. We add
real parsers for those statements and refuse anything that would still come
back as a ``Command``, so every statement mzflow accepts is a typed tree. The DDL
and SET/RESET parsers are in ``sql/parser_ddl.py``; ``sql/dialect.py`` joins this
parser to ``sql/generator.py``'s generator.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.helper import seq_get
from sqlglot.parsers.materialize import MaterializeParser
from sqlglot.tokens import TokenType

from mzflow.sql import ast
from mzflow.sql.parser_roles import RolesParser
from mzflow.sql.parser_session import SessionParser

SHOW_LISTS = (
    ("MATERIALIZED", "VIEWS"),
    ("SOURCES",),
    ("CLUSTERS",),
    ("SINKS",),
    ("TABLES",),
    ("VIEWS",),
    ("OBJECTS",),
)

SHOW_CREATE_KINDS = (
    ("CLUSTER",),
    ("SOURCE",),
    ("MATERIALIZED", "VIEW"),
    ("TABLE",),
    ("VIEW",),
    ("INDEX",),
    ("SINK",),
)


class MzParser(RolesParser, SessionParser):
    """Every statement mzflow accepts; the DDL and SET/RESET parts come from DdlParser,
    roles and privileges from RolesParser, transaction control and cursors from
    SessionParser."""

    STATEMENT_PARSERS = {
        **RolesParser.STATEMENT_PARSERS,
        TokenType.CREATE: lambda self: self._parse_mz_create(),
        TokenType.DROP: lambda self: self._parse_mz_drop(),
        TokenType.SHOW: lambda self: self._parse_mz_show(),
        TokenType.SET: lambda self: self._parse_mz_set(system=False),
        TokenType.ALTER: lambda self: self._parse_mz_alter(),
    }

    # to_char keeps PostgreSQL's template as written: sqlglot's TimeToStr converts it to
    # strftime's codes and loses what those lack (MS, FM, Month's padding).
    FUNCTIONS = {
        **MaterializeParser.FUNCTIONS,
        "TO_CHAR": lambda args: exp.ToChar(this=seq_get(args, 0), format=seq_get(args, 1)),
        "GENERATE_SERIES": lambda args: ast.GenerateSeries(expressions=args),
    }

    # ``x <> ALL (array)``, as sqlglot reads ``x = ANY (array)``: sqlglot read it as a call
    # of a function named ALL (pgjdbc's getSQLKeywords asks ``word <> ALL ('{…}'::text[])``).
    # Only after a comparison and before a parenthesis; ``ALL (SELECT …)`` is the same node.
    NO_PAREN_FUNCTION_PARSERS = {
        **MaterializeParser.NO_PAREN_FUNCTION_PARSERS,
        "ALL": lambda self: self._parse_quantified_all(),
    }

    def _parse_quantified_all(self) -> exp.Expr | None:
        before = self._tokens[self._index - 2] if self._index >= 2 else None
        if self._curr is None or self._curr.token_type != TokenType.L_PAREN or (
                before is None or before.token_type not in {**self.EQUALITY, **self.COMPARISON}):
            self._retreat(self._index - 1)
            return None
        this = self._parse_bitwise()
        if isinstance(this, exp.Subquery) and not this.alias:
            this = this.this  # ALL (SELECT …): the subquery predicate sqlglot makes
        return self.expression(exp.All(this=this))

    CONSTRAINT_PARSERS = {
        **MaterializeParser.CONSTRAINT_PARSERS,
        "VERSION": lambda self: self._parse_version_added(),
    }

    def _parse_interval_span(self, this: exp.Expr, parse_function_unit: bool = True
                             ) -> exp.Interval:
        """sqlglot reads INTERVAL '1 day 02:03:04' as INTERVAL '1' DAY, dropping what
        follows its first number and unit; PostgreSQL reads the whole text."""
        if this is not None and this.is_string:
            text = this.name
            pairs = exp.INTERVAL_STRING_RE.findall(text)
            if len(pairs) == 1 and not exp.INTERVAL_STRING_RE.fullmatch(text):
                return self.expression(exp.Interval(this=this))
        return super()._parse_interval_span(this, parse_function_unit=parse_function_unit)

    def _parse_version_added(self) -> ast.VersionAdded:
        if not self._match_text_seq("ADDED"):
            self.raise_error("Expected ADDED after VERSION")
        number = self._parse_number()
        if number is None:
            self.raise_error("Expected a version number")
        return self.expression(ast.VersionAdded(this=number))

    def _as_of_follows(self) -> bool:
        return bool(self._curr and self._curr.token_type == TokenType.ALIAS and self._next
                    and self._next.text.upper() == "OF")

    def _parse_table_alias(self, alias_tokens: Any = None) -> exp.TableAlias | None:
        if self._as_of_follows():
            return None
        return super()._parse_table_alias(alias_tokens)

    def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> exp.Expr | None:
        if self._as_of_follows():
            return this
        if (self._curr and self._curr.token_type == TokenType.ALIAS and self._next
                and self._next.token_type in self.RESERVED_TOKENS
                and self._next.text.isalpha()):
            # After AS any keyword is a column label, as in PostgreSQL and Materialize
            # (Metabase's privileges query names its columns select, insert…).
            self._advance(2)
            return self.expression(exp.Alias(this=this, alias=exp.to_identifier(
                self._prev.text.lower())))
        return super()._parse_alias(this, explicit)

    def _parse_table_parts(self, *args: Any, **kwargs: Any) -> Any:
        if self._curr and self._curr.token_type == TokenType.L_BRACKET:
            return self._parse_versioned_table()
        return super()._parse_table_parts(*args, **kwargs)

    def _parse_versioned_table(self) -> ast.VersionedTable:
        self._advance()  # [
        item_id = self._expect_name("catalog item id")
        if not self._match(TokenType.ALIAS):
            self.raise_error("Expected AS")
        name = super()._parse_table_parts(schema=True)
        if not isinstance(name, exp.Table):
            self.raise_error("Expected a table name")
            raise AssertionError("unreachable")
        if not self._match_text_seq("VERSION"):
            self.raise_error("Expected VERSION")
        version = self._parse_number()
        if version is None:
            self.raise_error("Expected a version number")
        if not self._match(TokenType.R_BRACKET):
            self.raise_error("Expected ]")
        table = ast.VersionedTable(**name.args, item_id=item_id, pinned=version)
        # `ON [u1 AS … VERSION 0] (a)` in CREATE INDEX: the parenthesis is the key list.
        if self._curr and self._curr.token_type != TokenType.L_PAREN:
            alias = super()._parse_table_alias()
            if alias is not None:
                table.set("alias", alias)
        return self.expression(table)

    # Tokens that start a query (anything else that starts a statement is a key of
    # STATEMENT_PARSERS, or a word matched by text in _parse_statement).
    _STATEMENT_STARTS = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN,
                                   TokenType.VALUES, TokenType.SEMICOLON})

    def _parse_statement(self) -> exp.Expr | None:
        session = self._parse_session_statement()
        if session is not None:
            return session
        if self._curr and self._curr.text.upper() == "RESET":
            self._advance()
            return self._parse_mz_reset(system=False)
        if self._curr and self._curr.text.upper() == "EXPLAIN":
            self._advance()
            return self._parse_explain()
        if self._curr and self._curr.text.upper() == "SUBSCRIBE":
            self._advance()
            return self._parse_subscribe()
        if (
            self._curr
            and self._curr.token_type in self.dialect.tokenizer_class.COMMANDS
            and self._curr.token_type not in self.STATEMENT_PARSERS
        ):
            # sqlglot would swallow the rest as an opaque Command; we never accept that.
            self.raise_error(f"{self._curr.text.upper()} is not supported")
        if self._curr and self._curr.token_type not in self.STATEMENT_PARSERS and (
                self._curr.token_type not in self._STATEMENT_STARTS):
            # sqlglot would read a bare expression as a statement (`SELEC * FROM t` as
            # the product of two columns); PostgreSQL points at the first word.
            self.raise_error(f'syntax error at or near "{self._curr.text}"')
        stmt = super()._parse_statement()
        if isinstance(stmt, exp.Query) and self._as_of_follows():
            self._advance(2)
            at_least = self._match_text_seq("AT", "LEAST")
            at = self._parse_assignment()
            if at is None:
                self.raise_error("Expected a timestamp after AS OF")
            return self.expression(ast.AsOf(this=stmt, at=at, at_least=at_least))
        return stmt

    _in_comment = False

    def _parse_comment(self, allow_exists: bool = True) -> exp.Expr:
        self._in_comment = True
        try:
            return super()._parse_comment(allow_exists)
        finally:
            self._in_comment = False

    def _parse_string(self) -> exp.Expr | None:
        # `COMMENT ON … IS NULL` removes the comment; sqlglot reads only a string there.
        if self._in_comment and self._prev and self._prev.token_type == TokenType.IS and (
                self._match(TokenType.NULL)):
            return exp.Null()
        return super()._parse_string()

    def raise_error(self, message: str, token: Any = None) -> None:
        # sqlglot reports the column where a token ends; people expect where it starts.
        token = token or (None if self._at_end() else self._curr) or self._prev
        if token is None or not self.sql:
            super().raise_error(message, token)
            return
        start = min(token.start, len(self.sql))
        line = self.sql.count("\n", 0, start) + 1
        col = start - (self.sql.rfind("\n", 0, start) + 1) + 1
        at_end = self._at_end() and token is self._prev
        if at_end:
            # Ran off the end: point just past the last token.
            line = self.sql.count("\n", 0, token.end + 1) + 1
            col = token.end + 1 - (self.sql.rfind("\n", 0, token.end + 1) + 1) + 1
        raise SqlglotParseError.new(
            f"{message}. Line {line}, Col: {col}.", description=message, line=line, col=col,
            start_context="", highlight="" if at_end else token.text, end_context="",
        )

    # -- SHOW ------------------------------------------------------------------

    def _parse_like_or_where(self) -> dict[str, Any]:
        if self._match(TokenType.LIKE):
            pattern = self._parse_string()
            if pattern is None:
                self.raise_error("Expected a LIKE pattern string")
            return {"like": pattern}
        if self._match(TokenType.WHERE):
            return {"where": self._parse_assignment()}
        return {}

    def _parse_mz_show(self) -> ast.Show:
        roles = self._parse_role_show()
        if roles is not None:
            return roles
        if self._match(TokenType.CREATE):
            kind = self._match_any_words(SHOW_CREATE_KINDS)
            if kind is None:
                self.raise_error("Expected CLUSTER, TABLE, VIEW, MATERIALIZED VIEW, INDEX, "
                                 "SINK or SOURCE after SHOW CREATE")
            target = (self._expect_name("cluster name") if kind == "CLUSTER"
                      else self._expect_object())
            return self.expression(ast.Show(kind=f"CREATE {kind}", this=target))
        if self._match(TokenType.INDEX) or self._match_words("INDEXES") or self._match_words(
            "KEYS"
        ):
            on = None
            if self._match_set((TokenType.FROM, TokenType.ON)) or (
                self._curr is not None and self._curr.token_type == TokenType.IN
                and not (self._next and self._next.text.upper() == "CLUSTER")
                and self._match(TokenType.IN)
            ):
                on = self._expect_object()
            cluster = self._parse_in_cluster()
            return self.expression(ast.Show(
                kind="INDEXES", on=on, cluster=cluster, **self._parse_like_or_where()))
        if self._match_words("CONSTRAINTS"):
            on = self._expect_object("table name") if self._match_set(
                (TokenType.FROM, TokenType.ON, TokenType.IN)) else None
            return self.expression(ast.Show(kind="CONSTRAINTS", on=on,
                                            **self._parse_like_or_where()))
        if self._match_words("PROJECTIONS"):
            on = self._expect_object("table name") if self._match_set(
                (TokenType.FROM, TokenType.ON, TokenType.IN)) else None
            return self.expression(ast.Show(kind="PROJECTIONS", on=on,
                                            **self._parse_like_or_where()))
        if self._match_words("COLUMNS"):
            if not self._match_set((TokenType.FROM, TokenType.IN)):
                self.raise_error("Expected FROM")
            return self.expression(ast.Show(
                kind="COLUMNS", on=self._expect_object(), **self._parse_like_or_where()))
        extended = self._match_words("EXTENDED")
        if self._match_words("SCHEMAS"):
            database = self._expect_name("database name") if self._match(
                TokenType.FROM) else None
            return self.expression(ast.Show(
                kind="EXTENDED SCHEMAS" if extended else "SCHEMAS", schema=database,
                **self._parse_like_or_where()))
        if extended:
            self.raise_error("Expected SCHEMAS after SHOW EXTENDED")
        full = self._match_words("FULL")
        listing = self._match_any_words(SHOW_LISTS)
        if full and listing != "MATERIALIZED VIEWS":
            self.raise_error("Expected MATERIALIZED VIEWS after SHOW FULL")
        if listing is not None:
            if full:
                listing = "FULL MATERIALIZED VIEWS"
            schema = self._expect_object("schema name") if self._match(TokenType.FROM) else None
            cluster = self._parse_in_cluster()
            return self.expression(ast.Show(
                kind=listing, schema=schema, cluster=cluster, **self._parse_like_or_where()))
        # PostgreSQL's spelling of SHOW transaction_isolation (SQLAlchemy sends it).
        if self._match_text_seq("TRANSACTION", "ISOLATION", "LEVEL"):
            return self.expression(ast.Show(kind="VARIABLE",
                                            this=exp.to_identifier("transaction_isolation")))
        # SHOW <variable>: any single word, including keywords like ALL.
        if self._at_end():
            self.raise_error("Expected what to SHOW")
        name = self._curr.text.lower()
        self._advance()
        return self.expression(ast.Show(kind="VARIABLE", this=exp.to_identifier(name)))

    # -- SET / RESET / ALTER ---------------------------------------------------

    def _parse_explain(self) -> ast.Explain:
        self._match_text_seq("PLAN", "FOR")
        kind = self._match_any_words((("MATERIALIZED", "VIEW"), ("VIEW",), ("INDEX",)))
        if kind is not None:
            return self.expression(ast.Explain(this=self._expect_object(), kind=kind))
        query = self._parse_statement()
        if not isinstance(query, exp.Query | ast.AsOf):
            self.raise_error("Expected a SELECT, VIEW, MATERIALIZED VIEW or INDEX to explain")
        return self.expression(ast.Explain(this=query))

    def _parse_subscribe(self) -> ast.Subscribe:
        self._match_words("TO")
        target: exp.Expr | None
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            self._advance()
            target = self._parse_select()
            if not isinstance(target, exp.Query):
                self.raise_error("Expected a SELECT in parentheses")
            if not self._match(TokenType.R_PAREN):
                self.raise_error("Expected )")
        else:
            target = self._expect_object("object name or (SELECT …) to subscribe to")
        options = self._parse_options() if self._match(TokenType.WITH, advance=False) else []
        as_of = up_to = None
        at_least = False
        if self._as_of_follows():
            self._advance(2)
            at_least = self._match_text_seq("AT", "LEAST")
            as_of = self._parse_assignment()
            if as_of is None:
                self.raise_error("Expected a timestamp after AS OF")
        if self._match_text_seq("UP", "TO"):
            up_to = self._parse_assignment()
            if up_to is None:
                self.raise_error("Expected a timestamp after UP TO")
        return self.expression(ast.Subscribe(this=target, options=options, as_of=as_of,
                                             at_least=at_least, up_to=up_to))
