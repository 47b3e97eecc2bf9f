"""Roles and privileges in mzflow's parser: CREATE/ALTER/DROP ROLE, GRANT and REVOKE
(Materialize's GRANT PRIVILEGE), and SHOW ROLES / SHOW PRIVILEGES.

``sql/parser.py``'s ``MzParser`` builds on this class. A password is read as a string
token; an error never quotes it (the error points at PASSWORD, and sql/redact.py
blanks it from the snippet).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from mzflow.sql import ast
from mzflow.sql.parser_ddl import DdlParser

PRIVILEGE_NAMES = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "USAGE", "CREATEROLE",
                   "CREATEDB", "CREATECLUSTER")
# Role attributes: Materialize's, then PostgreSQL's others (refused by name when run).
ROLE_ATTRIBUTES = ("LOGIN", "NOLOGIN", "SUPERUSER", "NOSUPERUSER", "INHERIT", "NOINHERIT",
                   "CREATEDB", "NOCREATEDB", "CREATEROLE", "NOCREATEROLE", "CREATECLUSTER",
                   "NOCREATECLUSTER", "REPLICATION", "NOREPLICATION", "BYPASSRLS",
                   "NOBYPASSRLS")
_GRANT_KINDS = ("TABLE", "CLUSTER", "SCHEMA", "DATABASE", "SYSTEM")
# ALTER DEFAULT PRIVILEGES … ON <kind>: Materialize's object types.
DEFAULT_PRIVILEGE_KINDS = ("TABLES", "TYPES", "SECRETS", "CONNECTIONS", "DATABASES", "SCHEMAS",
                           "CLUSTERS")
_SHOW_PRIVILEGE_KINDS = ("TABLES", "CLUSTERS", "SCHEMAS", "DATABASES", "SYSTEM")


class RolesParser(DdlParser):
    STATEMENT_PARSERS = {
        **DdlParser.STATEMENT_PARSERS,
        TokenType.GRANT: lambda self: self._parse_grant_privileges(revoke=False),
        TokenType.REVOKE: lambda self: self._parse_grant_privileges(revoke=True),
    }

    def _parse_mz_create(self) -> exp.Expr:
        if self._match_words("ROLE"):
            return self.expression(ast.CreateRole(this=self._expect_name("role name"),
                                                  options=self._parse_role_options()))
        return super()._parse_mz_create()

    def _parse_mz_alter(self) -> exp.Expr:
        if self._match_words("DEFAULT", "PRIVILEGES"):
            return self._parse_alter_default_privileges()
        if self._match_words("ROLE"):
            name = self._expect_name("role name")
            options = self._parse_role_options()
            if not options:
                self.raise_error("Expected role options (LOGIN, PASSWORD …) after the name")
            return self.expression(ast.AlterRole(this=name, options=options))
        return super()._parse_mz_alter()

    def _parse_mz_drop(self) -> exp.Expr:  # type: ignore[override]
        if self._match_words("ROLE"):
            exists = bool(self._parse_exists())
            names = self._parse_csv(lambda: self._expect_name("role name"))
            return self.expression(ast.DropRoles(expressions=names, exists=exists))
        return super()._parse_mz_drop()

    def _parse_role_options(self) -> list[ast.RoleOption]:
        self._match(TokenType.WITH)
        options: list[ast.RoleOption] = []
        while not self._at_end():
            self._match_words("ENCRYPTED")  # PostgreSQL's noise word before PASSWORD
            if self._match_words("PASSWORD"):
                keyword = self._prev
                value: exp.Expr | None = exp.Null() if self._match(TokenType.NULL) else (
                    self._parse_string())
                if value is None:
                    # Point at PASSWORD: whatever follows may be the password.
                    self.raise_error("Expected the password as a string, or NULL",
                                     token=keyword)
                options.append(self.expression(ast.RoleOption(this="PASSWORD",
                                                              value=value)))
                continue
            if self._curr.token_type == TokenType.STRING:
                # Never quote a string here: it is likely a password.
                self.raise_error("syntax error at or near a string (a password follows "
                                 "PASSWORD)")
            if self._curr.text.upper() not in ROLE_ATTRIBUTES:
                self.raise_error(f'syntax error at or near "{self._curr.text}"')
            options.append(self.expression(ast.RoleOption(this=self._curr.text.upper())))
            self._advance()
        return options

    # -- GRANT / REVOKE --------------------------------------------------------

    def _parse_grant_privileges(self, *, revoke: bool) -> ast.GrantPrivileges:
        privileges: list[str] | None = None
        start = self._index
        if self._match(TokenType.ALL):
            self._match_words("PRIVILEGES")
        else:
            privileges = self._parse_csv(self._parse_word)
        if privileges is not None and self._curr is not None and (
                self._curr.text.upper() in ("TO", "FROM")):
            # GRANT <role> TO <role>: role membership. The names again, as names (a
            # privilege is upper-cased, a role name is case-folded or quoted).
            self._retreat(start)
            granted = self._parse_csv(lambda: self._expect_name("role name"))
            self._advance()
            members = self._parse_csv(lambda: self._expect_name("role name"))
            if not self._at_end():
                self.raise_error("WITH ADMIN OPTION and GRANTED BY are not supported"
                                 if self._curr.text.upper() in ("WITH", "GRANTED")
                                 else f'syntax error at or near "{self._curr.text}"')
            return self.expression(ast.GrantPrivileges(
                privileges=[name.name for name in granted], kind="ROLE", expressions=[],
                roles=members, revoke=revoke))
        if not self._match(TokenType.ON):
            self.raise_error("Expected ON")
        for name in privileges or ():
            if name not in PRIVILEGE_NAMES:
                self.raise_error(f'unrecognized privilege type "{name.lower()}"')
        kind = self._match_any_words(tuple((k,) for k in _GRANT_KINDS)) or "TABLE"
        targets: list[Any] = []
        if kind in ("TABLE", "SCHEMA"):
            targets = self._parse_csv(self._expect_object)
        elif kind in ("CLUSTER", "DATABASE"):
            targets = self._parse_csv(lambda: self._expect_name(f"{kind.lower()} name"))
        if not (self._match(TokenType.FROM) if revoke else self._match_words("TO")):
            self.raise_error("Expected FROM" if revoke else "Expected TO")
        roles = self._parse_csv(lambda: self._expect_name("role name"))
        if not self._at_end():
            self.raise_error("WITH GRANT OPTION and GRANTED BY are not supported"
                             if self._curr.text.upper() in ("WITH", "GRANTED")
                             else f'syntax error at or near "{self._curr.text}"')
        return self.expression(ast.GrantPrivileges(
            privileges=privileges, kind=kind, expressions=targets, roles=roles,
            revoke=revoke))

    def _parse_alter_default_privileges(self) -> ast.AlterDefaultPrivileges:
        """Materialize's form: FOR ROLE or FOR ALL ROLES is required."""
        if not self._match(TokenType.FOR):
            self.raise_error("Expected FOR after ALTER DEFAULT PRIVILEGES")
        creators: list[exp.Identifier] | None = None
        if self._match(TokenType.ALL):
            if not self._match_words("ROLES"):
                self.raise_error("Expected ROLES after FOR ALL")
        elif self._match_any_words((("ROLE",), ("USER",))):
            creators = self._parse_csv(lambda: self._expect_name("role name"))
        else:
            self.raise_error("Expected ROLE, USER or ALL ROLES after FOR")
        schemas: list[exp.Table] = []
        databases: list[exp.Identifier] = []
        if self._match(TokenType.IN):
            if self._match_words("SCHEMA"):
                schemas = self._parse_csv(lambda: self._expect_object("schema name"))
            elif self._match_words("DATABASE"):
                databases = self._parse_csv(lambda: self._expect_name("database name"))
            else:
                self.raise_error("Expected SCHEMA or DATABASE after IN")
        revoke = bool(self._match(TokenType.REVOKE))
        if not revoke and not self._match(TokenType.GRANT):
            self.raise_error("Expected GRANT or REVOKE")
        privileges: list[str] | None = None
        if self._match(TokenType.ALL):
            self._match_words("PRIVILEGES")
        else:
            privileges = self._parse_csv(self._parse_word)
            for name in privileges:
                if name not in PRIVILEGE_NAMES:
                    self.raise_error(f'unrecognized privilege type "{name.lower()}"')
        if not self._match(TokenType.ON):
            self.raise_error("Expected ON")
        kind = self._match_any_words(tuple((k,) for k in DEFAULT_PRIVILEGE_KINDS))
        if kind is None:
            self.raise_error("Expected TABLES, TYPES, SECRETS, CONNECTIONS, DATABASES, "
                             "SCHEMAS or CLUSTERS")
        if not (self._match(TokenType.FROM) if revoke else self._match_words("TO")):
            self.raise_error("Expected FROM" if revoke else "Expected TO")
        grantees = self._parse_csv(lambda: self._expect_name("role name"))
        if not self._at_end():
            self.raise_error(f'syntax error at or near "{self._curr.text}"')
        return self.expression(ast.AlterDefaultPrivileges(
            roles=creators, schemas=schemas, databases=databases, privileges=privileges,
            kind=kind, grantees=grantees, revoke=revoke))

    def _parse_word(self) -> str:
        if self._at_end() or self._curr.token_type in (TokenType.ON, TokenType.COMMA):
            self.raise_error("Expected a privilege: SELECT, INSERT, UPDATE, DELETE, CREATE, "
                             "USAGE, CREATEROLE, CREATEDB, CREATECLUSTER or ALL")
        name = self._curr.text.upper()
        self._advance()
        return name

    # -- SHOW ------------------------------------------------------------------

    def _parse_role_show(self) -> ast.Show | None:
        """SHOW ROLES and SHOW PRIVILEGES [ON <kind>] [FOR <role>]; None otherwise."""
        if self._match_words("ROLES"):
            return self.expression(ast.Show(kind="ROLES", **self._parse_like_or_where()))
        if not self._match_words("PRIVILEGES"):
            return None
        on = role = None
        if self._match(TokenType.ON):
            on = self._match_any_words(tuple((k,) for k in _SHOW_PRIVILEGE_KINDS))
            if on is None:
                self.raise_error("Expected TABLES, CLUSTERS, SCHEMAS, DATABASES or SYSTEM")
        if self._match(TokenType.FOR):
            role = self._expect_name("role name")
        return self.expression(ast.Show(kind="PRIVILEGES", on=on, role=role,
                                        **self._parse_like_or_where()))

    def _parse_like_or_where(self) -> dict[str, Any]:
        raise NotImplementedError  # MzParser's
