"""The DDL and session statements of mzflow's parser: CREATE, DROP, ALTER, SET and
RESET, with the option lists and names they share.

``sql/parser.py``'s ``MzParser`` builds on this class (statement dispatch, queries,
SHOW, EXPLAIN, SUBSCRIBE): the split only keeps each file small.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from mzflow.sql import ast
from mzflow.sql.parens import unwrap
from mzflow.sql.parser_refresh import RefreshParser

# DROP targets, longest first so MATERIALIZED VIEW wins over VIEW.
DROP_KINDS = (
    ("MATERIALIZED", "VIEW"),
    ("TABLE",),
    ("VIEW",),
    ("INDEX",),
    ("SINK",),
    ("CLUSTER",),
    ("SCHEMA",),
    ("SOURCE",),
)
# What ALTER … RENAME TO renames.
RENAME_KINDS = DROP_KINDS[:5]


class DdlParser(RefreshParser):
    """CREATE, DROP, ALTER, SET and RESET; ``MzParser`` dispatches to them."""

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
        if self._at_refresh_policy():  # REFRESH EVERY '1 day' …: sql/parser_refresh.py
            return self._parse_refresh_policy()
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
        if self._match_words("TEMPORARY") or self._match_words("TEMP"):
            # dbt-materialize's contracts read a model's columns through one
            self.raise_error("CREATE TEMPORARY is not supported: mzflow has no temporary "
                             "objects")
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
        if self._match_words("SOURCE"):
            return self._parse_create_source()
        if self._match(TokenType.SCHEMA):
            return self._parse_create_schema()
        materialized = self._match_words("MATERIALIZED")
        if self._match(TokenType.VIEW):
            return self._parse_create_view(replace=replace, materialized=materialized)
        if materialized:
            self.raise_error("Expected VIEW after MATERIALIZED")
        if self._match(TokenType.TABLE):
            return self._parse_create_table()
        self._retreat(index)
        self.raise_error("Expected CLUSTER, INDEX, SCHEMA, SINK, SOURCE, TABLE, VIEW or "
                         "MATERIALIZED VIEW")
        raise AssertionError("unreachable")

    def _parse_create_schema(self) -> ast.CreateSchema:
        exists = self._parse_exists(not_=True)
        name = self._expect_object("schema name")  # [database.]schema
        if name.args.get("catalog"):
            self.raise_error("Expected a schema name of at most two parts")
        return self.expression(ast.CreateSchema(
            this=name.this, database=name.args.get("db"), exists=bool(exists)))

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
        if query is not None:
            query = unwrap(query)  # AS (SELECT …), as dbt writes it
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

    def _parse_create_source(self) -> ast.CreateSource:
        # Materialize's current syntax: multi-output generators need FOR ALL TABLES
        # (the checks on kind and options are in mzflow.sources.loadgen).
        exists = self._parse_exists(not_=True)
        name = self._expect_object("source name")
        cluster = self._parse_in_cluster()
        if not self._match(TokenType.FROM):
            self.raise_error("Expected FROM")
        if self._match_words("FILES"):
            return self._parse_files_source(name, cluster, exists)
        if not self._match_words("LOAD", "GENERATOR"):
            self.raise_error("Expected LOAD GENERATOR or FILES: mzflow's sources are load "
                             "generators and landing folders")
        generator = self._expect_name("one of AUCTION, COUNTER or TPCH")
        options: list[ast.Option] = []
        if self._curr is not None and self._curr.token_type == TokenType.L_PAREN:
            options = self._parse_wrapped_csv(self._parse_option)
        all_tables = self._match_words("FOR", "ALL", "TABLES")
        return self.expression(ast.CreateSource(
            this=name, generator=generator, cluster=cluster, exists=exists,
            options=options, all_tables=all_tables or None,
        ))

    def _parse_files_source(self, name: exp.Table, cluster: exp.Identifier | None,
                            exists: bool | None) -> ast.CreateSource:
        """``FILES '<folder>' (FORMAT …, PATTERN …) [(columns)] [WITH (…)]``: the
        checks on options are in mzflow.sources.files."""
        path = self._parse_string()
        if path is None:
            self.raise_error("Expected the landing folder as a string after FILES")
        options: list[ast.Option] = []
        if self._curr is not None and self._curr.token_type == TokenType.L_PAREN:
            options = self._parse_wrapped_csv(self._parse_option)
        columns = None
        if self._curr is not None and self._curr.token_type == TokenType.L_PAREN:
            columns = self._parse_wrapped_csv(self._parse_column_def_only)
        with_options = (self._parse_options() if self._match(TokenType.WITH, advance=False)
                        else [])
        return self.expression(ast.CreateSource(
            this=name, files=path, cluster=cluster, exists=exists, options=options,
            columns=columns, with_options=with_options or None,
        ))

    def _parse_column_def_only(self) -> exp.ColumnDef:
        found = self._parse_field_def()
        if not isinstance(found, exp.ColumnDef):
            self.raise_error("Expected a column definition (name type)")
        return found  # type: ignore[return-value]

    # -- DROP ------------------------------------------------------------------

    def _parse_mz_drop(self) -> ast.DropObjects:
        kind = self._match_any_words(DROP_KINDS)
        if kind is None:
            self.raise_error(
                "Expected TABLE, VIEW, MATERIALIZED VIEW, INDEX, SINK, SOURCE, CLUSTER or SCHEMA "
                "after DROP")
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

    # -- SET / RESET / ALTER ---------------------------------------------------

    def _parse_mz_set(self, *, system: bool) -> ast.SetVariable:
        self._match_words("SESSION") or self._match_words("LOCAL")
        name = self._expect_name("variable name")
        if not (self._match(TokenType.EQ) or self._match_words("TO")):
            self.raise_error("Expected = or TO")
        values = self._parse_csv(self._parse_option_value)
        # SET search_path = a, b: a list (a single value stays itself).
        value = values[0] if len(values) == 1 else self.expression(exp.Tuple(
            expressions=values)) if values else None  # SET x = DEFAULT
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
        if self._match_words("SCHEMA"):
            name = self._expect_name("schema name")
            swap = self._parse_swap("SCHEMA", name)
            if swap is None:
                self.raise_error("Expected SWAP WITH after ALTER SCHEMA <name>")
                raise AssertionError("unreachable")  # raise_error raises at IMMEDIATE level
            return swap
        if self._match_words("CLUSTER"):
            name = self._expect_name("cluster name")
            swap = self._parse_swap("CLUSTER", name)
            if swap is not None:
                return swap
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
        kind = self._match_any_words(RENAME_KINDS)
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
        self.raise_error("Expected CLUSTER, SCHEMA, SYSTEM, TABLE, VIEW, MATERIALIZED VIEW, "
                         "INDEX or SINK after ALTER")
        raise AssertionError("unreachable")


    def _parse_swap(self, kind: str, name: exp.Identifier) -> ast.SwapObject | None:
        """``… SWAP WITH <name>`` after ALTER SCHEMA|CLUSTER <name>, else None."""
        if not self._match_words("SWAP"):
            return None
        if not self._match_words("WITH"):
            self.raise_error("Expected WITH after SWAP")
        return self.expression(ast.SwapObject(kind=kind, this=name,
                                              to=self._expect_name(f"{kind.lower()} name")))

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
