"""A client's statements on one ``mzflow.session.connection.Connection``: what the
protocol's ``Backend`` asks (``backend.py``), in mzflow's terms.

A simple query is split at its top-level ``;`` with mzflow's own tokenizer, and every
statement is parsed before the first runs (a syntax error anywhere rejects the batch,
as in PostgreSQL), with error positions counted in the text the client sent. Two forms
the SQL parser does not take are the wire's own: ``COPY (query) TO STDOUT`` (and
``COPY t TO STDOUT``), whose query runs, or whose SUBSCRIBE streams, as COPY data; and
``COPY t FROM STDIN`` (copy.py). Startup options and parameters become ``SET``.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from mzflow import caches, config
from mzflow.errors import Error, ParseError, QueryCanceled, Unsupported
from mzflow.server.backend import Described, Outcome, Statement
from mzflow.server.copy import FromStdin
from mzflow.session.connection import Connection
from mzflow.session.result import Result
from mzflow.sql import ast, parse_cache
from mzflow.sql.parse import DIALECT
from mzflow.sql.parse_cache import parse

log = logging.getLogger("mzflow.server")

# What Materialize reports at startup and whenever one changes (its "notify set"), by
# the names clients look for; mzflow's variables are the lower-cased names.
REPORTED = ("application_name", "client_encoding", "DateStyle", "integer_datetimes",
            "IntervalStyle", "server_encoding", "server_version",
            "standard_conforming_strings", "TimeZone", "cluster", "database", "search_path",
            "mz_version")
# Startup parameters that are not variables to SET.
_NOT_SET = ("user", "database", "options", "replication")

# Statements after which the reported parameters are read again (SET, RESET, and the
# end of a transaction, which may undo a SET).
_MAY_CHANGE_PARAMETERS = ("SET", "RESET", "COMMIT", "ROLLBACK", "DISCARD ALL")

_tags = itertools.count(1)
# A client's text → its statements' texts, offsets and COPY forms: a text sent again
# (a pool's check, a dashboard's refresh) is not tokenized again.
_SPLITS = caches.lru("server.split_texts", 512)


def _takes(method: Any, name: str) -> bool:
    return name in inspect.signature(method).parameters


def open_session(cfg: config.Config, role: str, params: dict[str, str]) -> Session:
    """A session for a client logged in as ``role``: a Connection of its own."""
    if _takes(Connection.__init__, "role"):  # part C's roles
        conn = Connection(cfg, role=role)  # type: ignore[call-arg,unused-ignore]
    else:
        conn = Connection(cfg)
    return Session(conn, role)


class Session:
    """One client's session; the protocol's ``Backend``."""

    def __init__(self, conn: Connection, role: str, pid: int = 0):
        self.conn = conn
        self.role = role
        self.pid = pid
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._tag: str | None = None
        self._subscription: Any = None
        self._reported: dict[str, str] = {}
        self._maybe_changed = False  # a statement that may have changed a reported one

    # -- the session's state -------------------------------------------------------------

    @property
    def transaction_status(self) -> str:
        return str(getattr(self.conn, "transaction_status", "I"))  # part D's

    def startup(self, params: dict[str, str]) -> list[str]:
        """Apply what the client sent at connect time; the notices for what could not
        be (Materialize goes on with a notice rather than refusing the connection)."""
        notices = []
        settings = [(k, v) for k, v in params.items() if k not in _NOT_SET]
        try:
            settings += options(params.get("options", ""))
        except ValueError:
            notices.append("startup setting options not set: could not parse")
        for name, value in settings:
            try:
                self.set(name, value)
            except Error as e:
                notices.append(f"startup setting {name} not set: {e.message}")
        database = params.get("database") or params.get("user")
        if database and database != "materialize":
            notices.append(f'session database "{database}" does not exist')
        return notices

    def set(self, name: str, value: str) -> None:
        quoted = '"' + name.lower().replace('"', '""') + '"'
        self.conn.execute(f"SET {quoted} = '{value.replace(chr(39), chr(39) * 2)}'")

    def parameters(self) -> dict[str, str]:
        self._reported = {name: self.conn.variable(name.lower()) for name in REPORTED}
        return dict(self._reported)

    def changed_parameters(self) -> dict[str, str]:
        if not self._maybe_changed:
            return {}
        self._maybe_changed = False
        before = self._reported
        now = self.parameters()
        return {k: v for k, v in now.items() if before.get(k) != v}

    # -- statements ------------------------------------------------------------------------

    def split(self, sql: str) -> list[Statement]:
        """The statements of ``sql``, each checked by the parser before any runs."""
        kept = _SPLITS.get(sql)
        if kept is not None:
            return [self._parsed(*piece) for piece in kept]
        try:
            tokens = DIALECT.tokenize(sql)
        except Exception:  # noqa: BLE001 - parse() words the tokenizer's error
            self._parsed(sql, 0, None)
            raise
        out, pieces = [], []
        for piece in _pieces(tokens):
            start, end = piece[0].start, piece[-1].end + 1
            copy = _copy_to_stdout(sql, piece)
            found = (copy[0], copy[1], "out") if copy is not None else (
                sql[start:end], start, None)
            out.append(self._parsed(*found))
            pieces.append(found)
        if parse_cache.keeps(sql):
            _SPLITS[sql] = tuple(pieces)
        return out

    def _parsed(self, text: str, offset: int, copy: str | None) -> Statement:
        try:
            trees = parse(text)
        except ParseError as e:
            e.position = offset + _index(text, e.line, e.column) + 1  # type: ignore[attr-defined]
            raise
        tree = trees[0] if trees else None
        params = max((int(p.this.name) for p in tree.find_all(exp.Parameter)
                      if p.this is not None and p.this.name.isdigit()), default=0
                     ) if tree is not None else 0
        if copy is None and _from_stdin(tree):
            copy = "in"
        return Statement(text, offset, params, copy, tree)

    def describe(self, statement: Statement, param_types: Sequence[str | None]) -> Described:
        if statement.copy is not None:
            return Described([None] * statement.params)
        describe = getattr(self.conn, "describe", None)
        if describe is None:
            raise Unsupported("Describe needs Connection.describe (issue 35, part D)")
        found = describe(statement.text, list(param_types) or None)
        return Described(list(found.params), list(found.columns), list(found.types))

    def run(self, statement: Statement, params: Sequence[Any],
            param_types: Sequence[str | None]) -> Outcome:
        if statement.copy == "out":
            return self._copy_out(statement, params, param_types)
        if statement.copy == "in":
            return self._copy_in(statement)
        result = self._execute(statement.text, params, param_types, statement.tree)
        if result.status in _MAY_CHANGE_PARAMETERS:
            self._maybe_changed = True
        return _outcome(result)

    def _execute(self, sql: str, params: Sequence[Any], param_types: Sequence[str | None],
                 tree: exp.Expr | None = None) -> Result:
        if not params:
            # Parsed once already, by split().
            return self.conn.execute_parsed(tree) if tree is not None else self.conn.execute(sql)
        execute: Any = self.conn.execute
        if not _takes(execute, "params"):
            raise Unsupported("bound parameters need Connection.execute(sql, params) "
                              "(issue 35, part D)")
        return execute(sql, list(params), param_types=list(param_types))

    def _copy_out(self, statement: Statement, params: Sequence[Any],
                  param_types: Sequence[str | None]) -> Outcome:
        if isinstance(statement.tree, ast.Subscribe):
            if params:
                raise Unsupported("SUBSCRIBE with bound parameters is not supported")
            sub = self.conn.subscribe(statement.text)
            with self._lock:
                self._subscription = sub
            head = ["mz_timestamp"] + (["boolean"] if sub.progress else []) + ["bigint"]
            return Outcome(columns=sub.columns, types=head + [c.type for c in
                                                              sub.source.columns],
                           rows=self._streaming(sub), copy_out=True)
        result = self._execute(statement.text, params, param_types)
        return Outcome(columns=result.columns, types=result.types, rows=result.rows,
                       notices=result.notices, copy_out=True)

    def _streaming(self, sub: Any) -> Iterator[tuple[Any, ...]]:
        try:
            yield from sub
        finally:
            with self._lock:
                self._subscription = None

    def _copy_in(self, statement: Statement) -> Outcome:
        stmt = statement.tree
        if isinstance(stmt.this, exp.Schema):
            raise Unsupported("COPY … FROM STDIN with a column list is not supported")
        item = self.conn.store.snapshot().resolve(stmt.this.name)
        columns = [c.name for c in item.columns]

        def run(copy: exp.Expr) -> Outcome:
            return _outcome(self.conn.execute_parsed(copy))

        return Outcome(copy_in=FromStdin(stmt, columns, self.conn.config.home / "tmp", run))

    # -- cancel ------------------------------------------------------------------------------

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around one Query or Execute message: its Spark jobs carry a tag of their own,
        and whatever fails after a cancel was the cancel."""
        from mzflow.engine.spark import tags

        self._cancelled.clear()
        tag = f"mzflow-pgwire-{self.pid}-{next(_tags)}"
        with self._lock:
            self._tag = tag
        try:
            with tags.tagged(tag):
                yield
        except Error as e:
            if self._cancelled.is_set() and not isinstance(e, QueryCanceled):
                raise QueryCanceled("canceling statement due to user request") from e
            raise
        except Exception as e:  # Spark's own error for an interrupted job, say
            if self._cancelled.is_set():
                raise QueryCanceled("canceling statement due to user request") from e
            raise
        finally:
            with self._lock:
                self._tag = None

    def check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise QueryCanceled("canceling statement due to user request")

    def cancel(self) -> None:
        """From another thread (CancelRequest, a client that vanished)."""
        from mzflow.engine.spark import tags

        self._cancelled.set()
        with self._lock:
            tag, sub = self._tag, self._subscription
        if sub is not None:
            sub.stop.set()
        if tag is not None and tags.interrupt(tag):
            log.info("cancelled %s's Spark jobs (%s)", self.role, tag)

    def close(self) -> None:
        self.cancel()
        self.conn.close()


def _outcome(result: Result) -> Outcome:
    if result.status == "EMPTY":
        return Outcome(empty=True, notices=result.notices)
    return Outcome(result.status, result.columns, result.types, result.rows,
                   result.notices)


def options(text: str) -> list[tuple[str, str]]:
    """The startup ``options`` parameter: ``--name=value``, ``-c name=value`` and
    ``-cname=value``, separated by spaces (a backslash escapes one); ``-`` in a name is
    ``_``, as PostgreSQL reads them. ValueError for anything else."""
    words, word, escaped = [], "", False
    for ch in text:
        if escaped:
            word, escaped = word + ch, False
        elif ch == "\\":
            escaped = True
        elif ch.isspace():
            if word:
                words.append(word)
            word = ""
        else:
            word += ch
    if word:
        words.append(word)
    out = []
    pending_c = False
    for w in words:
        if pending_c:
            body, pending_c = w, False
        elif w == "-c":
            pending_c = True
            continue
        elif w.startswith(("--", "-c")):
            body = w[2:]
        else:
            raise ValueError(w)
        name, sep, value = body.partition("=")
        if not sep or not name:
            raise ValueError(w)
        out.append((name.replace("-", "_"), value))
    if pending_c:
        raise ValueError("-c")
    return out


def _pieces(tokens: list[Token]) -> Iterator[list[Token]]:
    piece: list[Token] = []
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            if piece:
                yield piece
            piece = []
        else:
            piece.append(t)
    if piece:
        yield piece


def _word(t: Token, *words: str) -> bool:
    return t.text.upper() in words


def _copy_to_stdout(sql: str, piece: list[Token]) -> tuple[str, int] | None:
    """``COPY (query) TO STDOUT [WITH] [(FORMAT TEXT)]`` → (query, its offset); ``COPY t
    TO STDOUT`` → a SELECT of the table. None for any other statement."""
    if len(piece) < 4 or piece[0].token_type != TokenType.COPY:
        return None
    if piece[1].token_type == TokenType.L_PAREN:
        k = _closing(piece, 1)
        if k is None:
            return None
        rest = piece[k + 1:]
        if k < 3 or len(rest) < 2 or not (_word(rest[0], "TO") and _word(rest[1], "STDOUT")):
            return None
        _check_copy_options(rest[2:])
        start = piece[2].start
        return sql[start:piece[k - 1].end + 1], start
    to = next((i for i, t in enumerate(piece) if _word(t, "TO")), None)
    if to is None or to + 1 >= len(piece) or not _word(piece[to + 1], "STDOUT"):
        return None
    _check_copy_options(piece[to + 2:])
    name = sql[piece[1].start:piece[to - 1].end + 1]
    return f"SELECT * FROM {name}", piece[1].start


def _closing(tokens: list[Token], at: int) -> int | None:
    """The index of the parenthesis closing the one at ``at``."""
    depth = 0
    for k in range(at, len(tokens)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[k].token_type, 0)
        if depth == 0:
            return k
    return None


def _check_copy_options(rest: list[Token]) -> None:
    words = [t.text.upper() for t in rest if t.token_type not in (
        TokenType.L_PAREN, TokenType.R_PAREN, TokenType.COMMA)]
    if words and words[0] == "WITH":
        words = words[1:]
    if words in ([], ["FORMAT", "TEXT"]):
        return
    raise Unsupported(f"COPY TO STDOUT with options {' '.join(words)} is not supported",
                      hint="COPY … TO STDOUT sends PostgreSQL's text format")


def _from_stdin(tree: exp.Expr | None) -> bool:
    if not isinstance(tree, exp.Copy) or not tree.args.get("kind"):
        return False
    files = tree.args.get("files") or []
    return (len(files) == 1 and isinstance(files[0], exp.Identifier)
            and not files[0].quoted and files[0].name.lower() == "stdin")


def _index(text: str, line: int, column: int) -> int:
    """The 0-based character index of a 1-based line and column."""
    lines = text.split("\n")
    return sum(len(x) + 1 for x in lines[:max(0, line - 1)]) + max(0, column - 1)
