"""mzflow's SQL dialect: sqlglot's Materialize dialect plus the DDL it lacks.

sqlglot parses Materialize's queries well but returns an unparsed ``Command``
for clusters, ``IN CLUSTER``, default indexes, sinks, SHOW and RESET. We add
real parsers for those statements and refuse anything that would still come
back as a ``Command``, so every statement mzflow accepts is a typed tree.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.dialects.materialize import Materialize
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.generators.materialize import MaterializeGenerator
from sqlglot.helper import seq_get
from sqlglot.parsers.materialize import MaterializeParser
from sqlglot.tokens import TokenType

from mzflow.sql import ast

# DROP targets, longest first so MATERIALIZED VIEW wins over VIEW.
DROP_KINDS = (
    ("MATERIALIZED", "VIEW"),
    ("TABLE",),
    ("VIEW",),
    ("INDEX",),
    ("SINK",),
    ("CLUSTER",),
)

SHOW_LISTS = (
    ("MATERIALIZED", "VIEWS"),
    ("CLUSTERS",),
    ("SINKS",),
    ("TABLES",),
    ("VIEWS",),
    ("OBJECTS",),
)

SHOW_CREATE_KINDS = (
    ("CLUSTER",),
    ("MATERIALIZED", "VIEW"),
    ("TABLE",),
    ("VIEW",),
    ("INDEX",),
    ("SINK",),
)


class MzParser(MaterializeParser):
    STATEMENT_PARSERS = {
        **MaterializeParser.STATEMENT_PARSERS,
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

    # -- helpers ---------------------------------------------------------------

    def _at_end(self) -> bool:
        return self._curr is None or self._curr.token_type in (
            TokenType.SENTINEL, TokenType.SEMICOLON)

    def _match_words(self, *words: str) -> bool:
        return self._match_text_seq(*words)

    def _match_any_words(self, choices: tuple[tuple[str, ...], ...]) -> str | None:
        for words in choices:
            if self._match_text_seq(*words):
                return " ".join(words)
        return None

    def _expect_name(self, what: str) -> exp.Identifier:
        ident = self._parse_id_var(any_token=False)
        if not isinstance(ident, exp.Identifier):
            self.raise_error(f"Expected {what}")
            raise AssertionError("unreachable")  # raise_error raises at IMMEDIATE level
        return ident

    def _expect_object(self, what: str = "object name") -> exp.Table:
        table = self._parse_table_parts(schema=True)
        if not isinstance(table, exp.Table) or not table.name:
            self.raise_error(f"Expected {what}")
            raise AssertionError("unreachable")
        return table

    def _parse_in_cluster(self) -> exp.Identifier | None:
        if self._match_pair(TokenType.IN, TokenType.VAR, advance=False) and (
            self._next and self._next.text.upper() == "CLUSTER"
        ):
            self._advance(2)
            return self._expect_name("cluster name")
        return None

    def _parse_option_value(self) -> exp.Expr | None:
        if self._match(TokenType.DEFAULT):
            return None
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            return self.expression(exp.Tuple(expressions=self._parse_wrapped_csv(
                self._parse_option_value)))
        value = self._parse_string() or self._parse_number() or self._parse_boolean()
        if value is None:
            value = self._parse_id_var(any_token=True)
        if value is None:
            self.raise_error("Expected an option value")
        return value

    def _parse_option_name(self) -> ast.Option:
        """An option named without a value, as ``ALTER CLUSTER … RESET (SIZE)`` lists them."""
        if self._at_end() or self._curr.token_type in (
            TokenType.COMMA, TokenType.L_PAREN, TokenType.R_PAREN, TokenType.EQ,
            TokenType.STRING, TokenType.NUMBER, TokenType.SEMICOLON,
        ):
            self.raise_error("Expected an option name")
        name = self._curr.text.upper()
        self._advance()
        return self.expression(ast.Option(this=name))

    def _parse_option(self) -> ast.Option:
        if self._curr is not None and self._curr.text.upper() == "EXPECT" and (
                self._next is not None and self._next.token_type != TokenType.EQ):
            # A materialized view's expectation: EXPECT name (<condition>) [ON VIOLATION …]
            self._advance()
            name = self._expect_name("expectation name")
            return self.expression(ast.Option(this="EXPECT",
                                              value=self._parse_expectation_body(name)))
        name_parts: list[str] = []
        while not self._at_end() and self._curr.token_type not in (
            TokenType.EQ, TokenType.COMMA, TokenType.R_PAREN, TokenType.STRING,
            TokenType.NUMBER, TokenType.SEMICOLON, TokenType.ALIAS,
        ):
            if self._curr.text.upper() in ("IN", "FROM", "INTO", "ON") and name_parts:
                break
            name_parts.append(self._curr.text.upper())
            self._advance()
            if name_parts[-1] in ("VIRTUAL",):
                break
        if not name_parts:
            self.raise_error("Expected an option name")
        value: exp.Expr | None = None
        if name_parts[-1] == "FOR" and len(name_parts) > 1:
            name_parts.pop()  # RETAIN HISTORY FOR '1h' is RETAIN HISTORY = FOR '1h'
        has_value = self._match(TokenType.EQ) or (
            self._curr is not None
            and self._curr.token_type in (TokenType.STRING, TokenType.NUMBER, TokenType.L_PAREN)
        )
        if has_value:
            self._match(TokenType.FOR)
            value = self._parse_option_value()
        return self.expression(ast.Option(this=" ".join(name_parts), value=value))

    def _parse_options(self) -> list[ast.Option]:
        """Options as ``WITH (a = 1, b)``, ``(a = 1)`` or bare ``[WITH] a, b``."""
        with_kw = self._match(TokenType.WITH)
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            return self._parse_wrapped_csv(self._parse_option)
        if self._at_end() or self._curr.token_type == TokenType.ALIAS:
            if with_kw:
                self.raise_error("Expected an option")
            return []
        return self._parse_csv(self._parse_option)

    # -- CREATE ----------------------------------------------------------------

    def _parse_mz_create(self) -> exp.Expr:
        index = self._index
        replace = self._match_pair(TokenType.OR, TokenType.REPLACE)
        if self._match_words("CLUSTER"):
            name = self._expect_name("cluster name")
            return self.expression(ast.CreateCluster(this=name, options=self._parse_options()))
        if self._match(TokenType.DEFAULT):
            if not self._match(TokenType.INDEX):
                self.raise_error("Expected INDEX after CREATE DEFAULT")
            return self._parse_create_index(default=True)
        if self._match(TokenType.INDEX):
            return self._parse_create_index(default=False)
        if self._match_words("SINK"):
            return self._parse_create_sink()
        materialized = self._match_words("MATERIALIZED")
        if self._match(TokenType.VIEW):
            return self._parse_create_view(replace=replace, materialized=materialized)
        if materialized:
            self.raise_error("Expected VIEW after MATERIALIZED")
        if self._match(TokenType.TABLE):
            return self._parse_create_table()
        self._retreat(index)
        self.raise_error("Expected CLUSTER, INDEX, SINK, TABLE, VIEW or MATERIALIZED VIEW")
        raise AssertionError("unreachable")

    def _parse_create_table(self) -> ast.CreateTable:
        exists = self._parse_exists(not_=True)
        name = self._expect_object("table name")
        schema = self._parse_schema(this=name)
        if not isinstance(schema, exp.Schema):
            self.raise_error("Expected a column list")
        partition_by = None
        if self._match(TokenType.PARTITION_BY):
            partition_by = (self._parse_wrapped_csv(lambda: self._expect_name("column name"))
                            if self._curr and self._curr.token_type == TokenType.L_PAREN
                            else self._parse_csv(lambda: self._expect_name("column name")))
        options = self._parse_options() if self._match(TokenType.WITH, advance=False) else []
        return self.expression(ast.CreateTable(this=schema, exists=exists, options=options,
                                               partition_by=partition_by))

    def _parse_constraint(self) -> exp.Expr | None:
        # PROJECTION p (SELECT …) among a table's columns; a column named "projection"
        # is still a column (its type follows the name, never a parenthesized SELECT).
        if (self._curr is not None and self._curr.text.upper() == "PROJECTION"
                and self._next is not None and self._next.token_type != TokenType.COMMA
                and self._index + 3 < len(self._tokens)
                and self._tokens[self._index + 2].token_type == TokenType.L_PAREN
                and self._tokens[self._index + 3].token_type in (TokenType.SELECT,
                                                                 TokenType.WITH)):
            self._advance()
            name = self._expect_name("projection name")
            return self.expression(ast.Projection(this=name, query=self._parse_projection_query()))
        if (self._curr is not None and self._curr.token_type == TokenType.CONSTRAINT
                and self._index + 2 < len(self._tokens)
                and self._tokens[self._index + 2].text.upper() == "EXPECT"):
            self._advance()
            return self._parse_expectation()
        return super()._parse_constraint()

    # Expectations (data quality): after CONSTRAINT, ``name EXPECT …``.
    ACTIONS = (("WARN",), ("DROP", "ROW"), ("QUARANTINE",), ("FAIL",))

    def _parse_expectation(self) -> ast.Expectation:
        name = self._expect_name("constraint name")
        if not self._match_words("EXPECT"):
            self.raise_error("Expected EXPECT after the constraint name")
        return self._parse_expectation_body(name)

    def _parse_expectation_body(self, name: exp.Identifier) -> ast.Expectation:
        expression = ge_type = ge_args = None
        if self._match(TokenType.L_PAREN):
            expression = self._parse_disjunction()
            if expression is None:
                self.raise_error("Expected a boolean expression after EXPECT (")
            if not self._match(TokenType.R_PAREN):
                self.raise_error("Expected ) after the expectation's expression")
        else:
            ge_type = self._expect_name("an expectation: ( <boolean expression> ) or a "
                                        "Great Expectations type")
            ge_args = []
            if self._match(TokenType.L_PAREN):
                while not self._match(TokenType.R_PAREN):
                    arg = self._expect_name("argument name")
                    if not self._match(TokenType.FARROW):
                        self.raise_error("Expected => after the argument name")
                    value = self._parse_bitwise()
                    if value is None:
                        self.raise_error("Expected an argument value")
                    ge_args.append(ast.Option(this=arg, value=value))
                    if not self._match(TokenType.COMMA) and not (
                            self._curr and self._curr.token_type == TokenType.R_PAREN):
                        self.raise_error("Expected , or ) in the expectation's arguments")
        action = None
        if self._match(TokenType.ON):
            if not self._match_words("VIOLATION"):
                self.raise_error("Expected VIOLATION after ON")
            action = self._match_any_words(self.ACTIONS)
            if action is None:
                self.raise_error("Expected WARN, DROP ROW, QUARANTINE or FAIL after "
                                 "ON VIOLATION")
        return self.expression(ast.Expectation(this=name, expression=expression,
                                               ge_type=ge_type, ge_args=ge_args,
                                               action=action))

    def _parse_projection_query(self) -> exp.Query:
        """``(SELECT …)`` or, after ADD PROJECTION, the RFC's ``AS SELECT …``."""
        if self._match(TokenType.ALIAS):
            query = self._parse_select()
        else:
            if not self._match(TokenType.L_PAREN):
                self.raise_error("Expected ( SELECT … ) after the projection name")
            query = self._parse_select()
            if not self._match(TokenType.R_PAREN):
                self.raise_error("Expected ) after the projection's SELECT")
        if not isinstance(query, exp.Query):
            self.raise_error("Expected a SELECT for the projection")
            raise AssertionError("unreachable")
        return query

    def _parse_create_index(self, *, default: bool) -> ast.CreateIndex:
        exists = self._parse_exists(not_=True)
        name = None
        if not default and self._curr and self._curr.token_type != TokenType.ON and not (
            self._curr.token_type == TokenType.IN
        ):
            name = self._expect_name("index name")
        cluster = self._parse_in_cluster()
        if not self._match(TokenType.ON):
            self.raise_error("Expected ON")
        on = self._expect_object()
        keys = None
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            if default:
                self.raise_error("a default index takes no key list")
            keys = self._parse_wrapped_csv(self._parse_assignment)
        options = self._parse_options() if self._match(TokenType.WITH, advance=False) else []
        return self.expression(ast.CreateIndex(
            this=name, on=on, keys=keys, cluster=cluster, default=default, exists=exists,
            options=options,
        ))

    def _parse_create_view(self, *, replace: bool, materialized: bool) -> ast.CreateView:
        exists = self._parse_exists(not_=True)
        name = self._expect_object("view name")
        columns = None
        if self._curr and self._curr.token_type == TokenType.L_PAREN:
            columns = self._parse_wrapped_csv(lambda: self._expect_name("column name"))
        cluster = self._parse_in_cluster()
        options = self._parse_options() if self._match(TokenType.WITH, advance=False) else []
        if not self._match(TokenType.ALIAS):
            self.raise_error("Expected AS")
        query = self._parse_ddl_select()
        if not isinstance(query, exp.Query):
            self.raise_error("Expected a SELECT")
        return self.expression(ast.CreateView(
            this=name, query=query, columns=columns, cluster=cluster,
            materialized=materialized, replace=replace, exists=exists, options=options,
        ))

    def _parse_create_sink(self) -> ast.CreateSink:
        exists = self._parse_exists(not_=True)
        name = self._expect_object("sink name")
        cluster = self._parse_in_cluster()
        if not self._match(TokenType.FROM):
            self.raise_error("Expected FROM")
        source = self._expect_object()
        if not self._match(TokenType.INTO):
            self.raise_error("Expected INTO")
        into = self._expect_name("sink format (PARQUET, CSV, JSON or DELTA)")
        path = self._parse_string()
        if path is None:
            self.raise_error("Expected the sink's target path as a string")
        options = self._parse_options() if self._match(TokenType.WITH, advance=False) else []
        return self.expression(ast.CreateSink(
            this=name, source=source, into=into, path=path, cluster=cluster,
            exists=exists, options=options,
        ))

    # -- DROP ------------------------------------------------------------------

    def _parse_mz_drop(self) -> ast.DropObjects:
        kind = self._match_any_words(DROP_KINDS)
        if kind is None:
            self.raise_error(
                "Expected TABLE, VIEW, MATERIALIZED VIEW, INDEX, SINK or CLUSTER after DROP")
        exists = self._parse_exists()
        if kind == "CLUSTER":
            names: list[Any] = self._parse_csv(lambda: self._expect_name("cluster name"))
        else:
            names = self._parse_csv(self._expect_object)
        cascade = False
        if self._match_words("CASCADE"):
            cascade = True
        else:
            self._match_words("RESTRICT")
        return self.expression(ast.DropObjects(
            kind=kind, expressions=names, exists=bool(exists), cascade=cascade))

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
        if self._match(TokenType.CREATE):
            kind = self._match_any_words(SHOW_CREATE_KINDS)
            if kind is None:
                self.raise_error("Expected CLUSTER, TABLE, VIEW, MATERIALIZED VIEW, INDEX or "
                                 "SINK after SHOW CREATE")
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

    def _parse_mz_set(self, *, system: bool) -> ast.SetVariable:
        self._match_words("SESSION") or self._match_words("LOCAL")
        name = self._expect_name("variable name")
        if not (self._match(TokenType.EQ) or self._match_words("TO")):
            self.raise_error("Expected = or TO")
        value = self._parse_option_value()
        return self.expression(ast.SetVariable(this=name, value=value, system=system))

    def _parse_mz_reset(self, *, system: bool) -> ast.ResetVariable:
        name = self._expect_name("variable name")
        return self.expression(ast.ResetVariable(this=name, system=system))

    def _parse_mz_alter(self) -> exp.Expr:
        if self._match_words("SYSTEM"):
            if self._match(TokenType.SET):
                return self._parse_mz_set(system=True)
            if self._match_words("RESET"):
                return self._parse_mz_reset(system=True)
            self.raise_error("Expected SET or RESET after ALTER SYSTEM")
        if self._match_words("CLUSTER"):
            name = self._expect_name("cluster name")
            if self._match_words("RESET"):
                options = (self._parse_wrapped_csv(self._parse_option_name)
                           if self._curr and self._curr.token_type == TokenType.L_PAREN
                           else self._parse_csv(self._parse_option_name))
                return self.expression(ast.AlterCluster(this=name, options=options, reset=True))
            self._match(TokenType.SET)
            options = self._parse_options()
            if not options:
                self.raise_error("Expected cluster options")
            return self.expression(ast.AlterCluster(this=name, options=options))
        index = self._index
        kind = self._match_any_words(DROP_KINDS[:-1])
        if kind is not None:
            target = self._expect_object()
            if self._match_words("RENAME"):
                if not self._match_words("TO"):
                    self.raise_error("Expected TO after RENAME")
                return self.expression(ast.RenameObject(
                    kind=kind, this=target, to=self._expect_name("new name")))
            self._retreat(index)
        if self._match(TokenType.TABLE, advance=False):
            projection = self._parse_alter_projection()
            if projection is not None:
                return projection
            expectation = self._parse_alter_expectation()
            if expectation is not None:
                return expectation
            alter = self._parse_alter()
            if isinstance(alter, exp.Command):
                self.raise_error("unsupported ALTER TABLE form")
            return alter
        self.raise_error("Expected CLUSTER, SYSTEM, TABLE, VIEW, MATERIALIZED VIEW, INDEX or "
                         "SINK after ALTER")
        raise AssertionError("unreachable")


    def _parse_alter_projection(self) -> ast.AlterProjection | None:
        """``ALTER TABLE t {ADD|DROP|MATERIALIZE|CLEAR} PROJECTION …``, else None (and
        nothing consumed)."""
        index = self._index
        self._advance()  # TABLE
        table = self._expect_object("table name")
        action = self._match_any_words((("ADD",), ("DROP",), ("MATERIALIZE",), ("CLEAR",)))
        if action is None or not self._match_words("PROJECTION"):
            self._retreat(index)
            return None
        exists = (self._parse_exists(not_=True) if action == "ADD"
                  else self._parse_exists() if action == "DROP" else False)
        name = self._expect_name("projection name")
        query = self._parse_projection_query() if action == "ADD" else None
        partition = None
        if action in ("MATERIALIZE", "CLEAR") and self._match(TokenType.IN):
            if not self._match(TokenType.PARTITION):
                self.raise_error("Expected PARTITION after IN")
            partition = self._parse_primary() or self._parse_id_var()
            if partition is None:
                self.raise_error("Expected a partition value")
        return self.expression(ast.AlterProjection(
            this=table, action=action, name=name, query=query, exists=bool(exists),
            partition=partition))


    def _parse_alter_expectation(self) -> ast.AlterExpectation | None:
        """``ALTER TABLE t ADD CONSTRAINT c EXPECT …`` and ``ALTER TABLE t DROP CONSTRAINT
        [IF EXISTS] c``, else None (and nothing consumed)."""
        index = self._index
        self._advance()  # TABLE
        table = self._expect_object("table name")
        if self._match_words("ADD") and self._match(TokenType.CONSTRAINT):
            if (self._next is None or self._next.text.upper() != "EXPECT"):
                self._retreat(index)
                return None
            return self.expression(ast.AlterExpectation(
                this=table, action="ADD", expectation=self._parse_expectation()))
        self._retreat(index)
        self._advance()
        self._expect_object("table name")
        if self._match(TokenType.SET) and self._match(TokenType.L_PAREN) and (
                self._match_words("EXPECTATION", "SUITE")):
            self._match(TokenType.EQ)
            path = self._parse_primary()
            if not isinstance(path, exp.Literal) or not path.is_string:
                self.raise_error("Expected the suite file's path as a string")
            if not self._match(TokenType.R_PAREN):
                self.raise_error("Expected )")
            return self.expression(ast.AlterExpectation(this=table, action="SUITE",
                                                        name=path))
        self._retreat(index)
        self._advance()
        self._expect_object("table name")
        if self._match_words("DROP") and self._match(TokenType.CONSTRAINT):
            exists = self._parse_exists()
            name = self._expect_name("constraint name")
            return self.expression(ast.AlterExpectation(this=table, action="DROP", name=name,
                                                        exists=bool(exists)))
        self._retreat(index)
        return None


class MzGenerator(MaterializeGenerator):
    """Renders our nodes back to SQL; used for normalized ``create_sql``."""

    def option_sql(self, e: ast.Option) -> str:
        value = e.args.get("value")
        if isinstance(value, ast.Expectation):
            return self.sql(value).replace("CONSTRAINT ", "", 1).replace(" EXPECT ", " ", 1
                                                                         ).join(("EXPECT ", ""))
        return e.name if value is None else f"{e.name} = {self.sql(value)}"

    def _options(self, e: exp.Expr, prefix: str = " WITH ") -> str:
        opts = e.args.get("options") or []
        return f"{prefix}({', '.join(self.sql(o) for o in opts)})" if opts else ""

    def _in_cluster(self, e: exp.Expr) -> str:
        cluster = e.args.get("cluster")
        return f" IN CLUSTER {self.sql(cluster)}" if cluster else ""

    def createcluster_sql(self, e: ast.CreateCluster) -> str:
        opts = e.args.get("options") or []
        return f"CREATE CLUSTER {self.sql(e.this)}" + (
            f" {', '.join(self.sql(o) for o in opts)}" if opts else "")

    def createindex_sql(self, e: ast.CreateIndex) -> str:
        head = "CREATE DEFAULT INDEX" if e.args.get("default") else "CREATE INDEX"
        if e.args.get("exists"):
            head += " IF NOT EXISTS"
        name = f" {self.sql(e.this)}" if e.this else ""
        keys = e.args.get("keys")
        key_sql = f" ({', '.join(self.sql(k) for k in keys)})" if keys else ""
        return f"{head}{name}{self._in_cluster(e)} ON {self.sql(e.args['on'])}{key_sql}" + (
            self._options(e))

    def createview_sql(self, e: ast.CreateView) -> str:
        head = "CREATE OR REPLACE" if e.args.get("replace") else "CREATE"
        head += " MATERIALIZED VIEW" if e.args.get("materialized") else " VIEW"
        if e.args.get("exists"):
            head += " IF NOT EXISTS"
        cols = e.args.get("columns")
        col_sql = f" ({', '.join(self.sql(c) for c in cols)})" if cols else ""
        return (f"{head} {self.sql(e.this)}{col_sql}{self._in_cluster(e)}{self._options(e)}"
                f" AS {self.sql(e.args['query'])}")

    def createsink_sql(self, e: ast.CreateSink) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        return (f"CREATE SINK{exists} {self.sql(e.this)}{self._in_cluster(e)} FROM "
                f"{self.sql(e.args['source'])} INTO {self.sql(e.args['into']).upper()} "
                f"{self.sql(e.args['path'])}{self._options(e)}")


    def createtable_sql(self, e: ast.CreateTable) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        parts = e.args.get("partition_by")
        partition = (f" PARTITION BY ({', '.join(self.sql(p) for p in parts)})"
                     if parts else "")
        return f"CREATE TABLE{exists} {self.sql(e.this)}{partition}{self._options(e)}"

    def projection_sql(self, e: ast.Projection) -> str:
        return f"PROJECTION {self.sql(e.this)} ({self.sql(e.args['query'])})"

    def alterprojection_sql(self, e: ast.AlterProjection) -> str:
        action = e.args["action"]
        exists = ""
        if e.args.get("exists"):
            exists = " IF NOT EXISTS" if action == "ADD" else " IF EXISTS"
        tail = f" ({self.sql(e.args['query'])})" if e.args.get("query") else ""
        if e.args.get("partition") is not None:
            tail += f" IN PARTITION {self.sql(e.args['partition'])}"
        return (f"ALTER TABLE {self.sql(e.this)} {action} PROJECTION{exists} "
                f"{self.sql(e.args['name'])}{tail}")

    def expectation_sql(self, e: ast.Expectation) -> str:
        if e.args.get("expression") is not None:
            body = f"({self.sql(e.args['expression'])})"
        else:
            args = ", ".join(f"{self.sql(o.this)} => {self.sql(o.args['value'])}"
                             for o in e.args.get("ge_args") or [])
            body = f"{self.sql(e.args['ge_type'])} ({args})"
        action = e.args.get("action")
        tail = f" ON VIOLATION {action}" if action else ""
        return f"CONSTRAINT {self.sql(e.this)} EXPECT {body}{tail}"

    def alterexpectation_sql(self, e: ast.AlterExpectation) -> str:
        if e.args["action"] == "ADD":
            return f"ALTER TABLE {self.sql(e.this)} ADD {self.sql(e.args['expectation'])}"
        if e.args["action"] == "SUITE":
            return (f"ALTER TABLE {self.sql(e.this)} SET (EXPECTATION SUITE = "
                    f"{self.sql(e.args['name'])})")
        exists = " IF EXISTS" if e.args.get("exists") else ""
        return f"ALTER TABLE {self.sql(e.this)} DROP CONSTRAINT{exists} {self.sql(e.args['name'])}"

    def versionadded_sql(self, e: ast.VersionAdded) -> str:
        return f"VERSION ADDED {self.sql(e.this)}"

    def versionedtable_sql(self, e: ast.VersionedTable) -> str:
        name = exp.Table(**{k: v for k, v in e.args.items()
                            if k in ("this", "db", "catalog")})
        alias = e.args.get("alias")
        alias_sql = f" AS {self.sql(alias)}" if alias else ""
        # The first relation of a parenthesized join carries the group's joins.
        joins = self.expressions(e, key="joins", sep="", flat=True)
        return (f"[{self.sql(e.args['item_id'])} AS {self.sql(name)} VERSION "
                f"{self.sql(e.args['pinned'])}]{alias_sql}{joins}")

    def asof_sql(self, e: ast.AsOf) -> str:
        least = " AT LEAST" if e.args.get("at_least") else ""
        return f"{self.sql(e.this)} AS OF{least} {self.sql(e.args['at'])}"

    def renameobject_sql(self, e: ast.RenameObject) -> str:
        return f"ALTER {e.args['kind']} {self.sql(e.this)} RENAME TO {self.sql(e.args['to'])}"

    def subscribe_sql(self, e: ast.Subscribe) -> str:
        target = e.this
        text = self.sql(target) if isinstance(target, exp.Table) else f"({self.sql(target)})"
        out = f"SUBSCRIBE {text}{self._options(e)}"
        if e.args.get("as_of") is not None:
            least = " AT LEAST" if e.args.get("at_least") else ""
            out += f" AS OF{least} {self.sql(e.args['as_of'])}"
        if e.args.get("up_to") is not None:
            out += f" UP TO {self.sql(e.args['up_to'])}"
        return out

    def explain_sql(self, e: ast.Explain) -> str:
        kind = e.args.get("kind")
        return f"EXPLAIN {kind + ' ' if kind else ''}{self.sql(e.this)}"

    def dropobjects_sql(self, e: ast.DropObjects) -> str:
        exists = " IF EXISTS" if e.args.get("exists") else ""
        cascade = " CASCADE" if e.args.get("cascade") else ""
        names = ", ".join(self.sql(n) for n in e.expressions)
        return f"DROP {e.args['kind']}{exists} {names}{cascade}"

    def altercluster_sql(self, e: ast.AlterCluster) -> str:
        verb = "RESET" if e.args.get("reset") else "SET"
        return f"ALTER CLUSTER {self.sql(e.this)} {verb}{self._options(e, prefix=' ')}"

    def mz_show_sql(self, e: ast.Show) -> str:
        kind = e.args["kind"]
        if kind == "VARIABLE":
            return f"SHOW {self.sql(e.this)}"
        if kind.startswith("CREATE"):
            return f"SHOW {kind} {self.sql(e.this)}"
        parts = [f"SHOW {kind}"]
        if e.args.get("on"):
            word = "FROM" if kind in ("COLUMNS", "PROJECTIONS", "CONSTRAINTS") else "ON"
            parts.append(f"{word} {self.sql(e.args['on'])}")
        if e.args.get("schema"):
            parts.append(f"FROM {self.sql(e.args['schema'])}")
        if e.args.get("cluster"):
            parts.append(f"IN CLUSTER {self.sql(e.args['cluster'])}")
        if e.args.get("like"):
            parts.append(f"LIKE {self.sql(e.args['like'])}")
        if e.args.get("where"):
            parts.append(f"WHERE {self.sql(e.args['where'])}")
        return " ".join(parts)

    def setvariable_sql(self, e: ast.SetVariable) -> str:
        head = "ALTER SYSTEM SET" if e.args.get("system") else "SET"
        value = e.args.get("value")
        return f"{head} {self.sql(e.this)} = {self.sql(value) if value else 'DEFAULT'}"

    def resetvariable_sql(self, e: ast.ResetVariable) -> str:
        head = "ALTER SYSTEM RESET" if e.args.get("system") else "RESET"
        return f"{head} {self.sql(e.this)}"

    TRANSFORMS = {
        **MaterializeGenerator.TRANSFORMS,
        ast.Option: option_sql,
        ast.RenameObject: renameobject_sql,
        ast.Explain: explain_sql,
        ast.CreateTable: createtable_sql,
        ast.Projection: projection_sql,
        ast.AlterProjection: alterprojection_sql,
        ast.Expectation: expectation_sql,
        ast.AlterExpectation: alterexpectation_sql,
        ast.VersionAdded: versionadded_sql,
        ast.VersionedTable: versionedtable_sql,
        ast.AsOf: asof_sql,
        ast.Subscribe: subscribe_sql,
        ast.CreateCluster: createcluster_sql,
        ast.AlterCluster: altercluster_sql,
        ast.CreateIndex: createindex_sql,
        ast.CreateView: createview_sql,
        ast.CreateSink: createsink_sql,
        ast.DropObjects: dropobjects_sql,
        ast.Show: mz_show_sql,
        ast.SetVariable: setvariable_sql,
        ast.ResetVariable: resetvariable_sql,
    }


class Mz(Materialize):
    class Tokenizer(Materialize.Tokenizer):
        # RESET is a statement of ours, not an opaque command.
        KEYWORDS = {k: v for k, v in Materialize.Tokenizer.KEYWORDS.items()
                    if k not in ("RESET", "EXPLAIN")}
        # A command token makes the tokenizer swallow the rest of the statement as one
        # string; SHOW has a real grammar here.
        COMMANDS = Materialize.Tokenizer.COMMANDS - {TokenType.SHOW}

    Parser = MzParser
    Generator = MzGenerator
