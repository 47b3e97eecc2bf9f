"""One client connection's protocol: startup (TLS, cancel requests), login, then the
simple and extended query protocols and COPY, over a ``Wire`` (``listen.py``'s socket,
or bytes in memory in tests) and a ``Backend`` (``statements.py``'s session).

Errors keep the connection: an ErrorResponse, then (extended protocol) every message up
to Sync is skipped, as PostgreSQL does. Only a broken frame, an oversized message, a
failed login or an unknown message type ends it (a FATAL ErrorResponse first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from mzflow.errors import Error, Unsupported
from mzflow.server import codec
from mzflow.server import types as pgtypes
from mzflow.server.backend import Backend, Closed, Outcome, Statement, Wire
from mzflow.server.codec import ProtocolError
from mzflow.server.login import Login, Settings, _notice

log = logging.getLogger("mzflow.server")

BATCH_BYTES = 64 * 1024  # the output is sent whenever this much is pending
COPY_IN_LIMIT = 2**30  # COPY … FROM STDIN's data, at most (Materialize's default, 1 GiB)


@dataclass
class _Portal:
    statement: Statement
    params: list[Any]
    param_types: list[str | None]
    formats: list[int]
    outcome: Outcome | None = None
    rows: Iterator[Sequence[Any]] | None = None
    sent: int = 0


@dataclass
class _Prepared:
    statement: Statement | None  # None: an empty query
    param_oids: list[int]


class Connection(Login):
    def __init__(self, wire: Wire, settings: Settings):
        self.wire = wire
        self.settings = settings
        self.backend: Backend | None = None
        self.role = ""
        self.pid = 0  # BackendKeyData's process id, once logged in
        self._out: list[bytes] = []
        self._pending = 0
        self._statements: dict[str, _Prepared] = {}
        self._portals: dict[str, _Portal] = {}
        self._skipping = False  # after an extended-protocol error, until Sync

    # -- the connection's life ---------------------------------------------------------

    def run(self) -> None:
        """Serve the client until it leaves; never raises."""
        try:
            params = self._startup()
            if params is not None and self._login(params):
                self._serve()
        except Closed:
            pass
        except ProtocolError as e:
            self._fatal(e.code, e.message)
        except Exception:  # a bug: the client hears so, the server goes on
            log.exception("connection from %s failed", self.wire.peer)
            self._fatal("XX000", "internal error")
        finally:
            if self.backend is not None:
                self.settings.unregister(self)
                try:
                    self.backend.close()
                except Exception:  # noqa: BLE001 - closing what already failed
                    log.debug("closing a session failed", exc_info=True)

    def cancel(self) -> None:
        """CancelRequest (from another thread): stop the statement running now."""
        if self.backend is not None:
            self.backend.cancel()

    def _fatal(self, code: str, message: str) -> None:
        try:
            self._send(codec.error({"S": "FATAL", "V": "FATAL", "C": code, "M": message}))
            self._flush()
        except Closed:
            pass

    # -- output ------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        self._out.append(data)
        self._pending += len(data)
        if self._pending >= BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out, self._pending = [], 0
            self.wire.send(data)

    # -- input -------------------------------------------------------------------------

    def _message(self) -> tuple[bytes, bytes]:
        header = self.wire.recv(5)
        length = codec.frame_length(header, self.settings.max_message)
        return header[:1], self.wire.recv(length) if length else b""

    # -- the query loop ----------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            tag, body = self._message()
            if tag == b"X":
                return
            if tag in (b"d", b"c", b"f"):
                continue  # COPY's messages outside COPY: ignored, as PostgreSQL does
            if tag == b"S":
                self._skipping = False
                self._sync()
                continue
            if tag == b"H":
                self._flush()
                continue
            if tag == b"Q":
                self._skipping = False
                self._simple(codec.parse_query(body))
                continue
            handler = self._EXTENDED.get(tag)
            if handler is None:
                raise ProtocolError(f"invalid frontend message type {tag[0]}", fatal=True)
            if self._skipping:
                continue
            try:
                handler(self, body)
            except Exception as e:  # noqa: BLE001 - every error is the client's answer
                self._answer_error(e)
                self._skipping = True

    def _ready(self) -> None:
        assert self.backend is not None
        self._send(codec.ready(self.backend.transaction_status))
        self._flush()

    def _sync(self) -> None:
        assert self.backend is not None
        if self.backend.transaction_status == "I":
            self._portals.clear()  # the implicit transaction ended, and its portals
        self._ready()

    def _error(self, e: BaseException) -> None:
        self._send(codec.error(error_fields(e)))

    def _answer_error(self, e: Exception) -> None:
        """``e`` as the statement's answer; what ends the connection (a lost client, a
        fatal protocol error) goes on up."""
        if isinstance(e, Closed) or (isinstance(e, ProtocolError) and e.fatal):
            raise e
        self._error(e)

    def _parameters(self) -> None:
        assert self.backend is not None
        for name, value in self.backend.changed_parameters().items():
            self._send(codec.parameter_status(name, value))

    # -- simple query ----------------------------------------------------------------------

    def _simple(self, sql: str) -> None:
        assert self.backend is not None
        self._statements.pop("", None)
        self._portals.pop("", None)
        try:
            with self.backend.running():
                statements = self.backend.split(sql)
                if not statements:
                    self._send(codec.EMPTY_QUERY)
                for statement in statements:
                    self.backend.check_cancelled()
                    outcome = self.backend.run(statement, [], [])
                    self._outcome(outcome, describe=True)
        except Exception as e:  # noqa: BLE001 - the client's answer
            self._answer_error(e)
        self._ready()

    def _outcome(self, outcome: Outcome, *, describe: bool, max_rows: int = 0,
                 portal: _Portal | None = None) -> None:
        """Send what a statement produced: rows (all, or up to ``max_rows`` of a
        portal's), COPY's data either way, or its command tag."""
        for text in outcome.notices:
            self._send(_notice(text))
        if outcome.empty:
            self._send(codec.EMPTY_QUERY)
            return
        if outcome.copy_in is not None:
            self._copy_in(outcome)
            return
        if outcome.copy_out:
            self._copy_out(outcome)
            return
        if describe and outcome.columns:
            self._send(codec.row_description(_fields(outcome.columns, outcome.types)))
        if outcome.columns:
            rows = portal.rows if portal is not None else iter(outcome.rows)
            assert rows is not None
            sent = self._rows(rows, outcome.types, len(outcome.columns), max_rows)
            if portal is not None:
                portal.sent += sent
                if max_rows > 0 and sent == max_rows and _more(portal):
                    self._send(codec.PORTAL_SUSPENDED)
                    return
        self._send(codec.command_complete(outcome.status))
        self._parameters()

    def _rows(self, rows: Iterator[Sequence[Any]], types: Sequence[str], width: int,
              max_rows: int) -> int:
        assert self.backend is not None
        columns = [pgtypes.column_type(types[i] if i < len(types) else None)
                   for i in range(width)]
        sent = 0
        for row in rows if max_rows <= 0 else islice(rows, max_rows):
            self._send(codec.data_row([pgtypes.encode_text(v, c)
                                       for v, c in zip(row, columns, strict=False)]))
            sent += 1
            if sent % 1024 == 0:
                self.backend.check_cancelled()
        return sent

    # -- COPY ------------------------------------------------------------------------------

    def _copy_out(self, outcome: Outcome) -> None:
        from mzflow.server.copy import text_row

        assert self.backend is not None
        self._send(codec.copy_out_response(len(outcome.columns)))
        self._flush()
        sent = 0
        for row in outcome.rows:
            self._send(codec.copy_data(text_row(row, outcome.types)))
            sent += 1
            # A SUBSCRIBE waits between rows: what it has produced goes out now.
            self._flush()
        self.backend.check_cancelled()  # a stopped SUBSCRIBE ends quietly: say why
        self._send(codec.COPY_DONE)
        self._send(codec.command_complete(outcome.tag(sent)))

    def _copy_in(self, outcome: Outcome) -> None:
        sink = outcome.copy_in
        assert sink is not None
        self._send(codec.copy_in_response(sink.columns))
        self._flush()
        received = 0
        try:
            while True:
                tag, body = self._message()
                if tag == b"d":
                    received += len(body)
                    if received > COPY_IN_LIMIT:
                        raise ProtocolError(f"COPY FROM STDIN is larger than the limit of "
                                            f"{COPY_IN_LIMIT} bytes", "54000")
                    sink.write(body)
                elif tag == b"c":
                    break
                elif tag == b"f":
                    raise Error(f"COPY from stdin failed: {codec.parse_copy_fail(body)}")
                elif tag in (b"H", b"S"):
                    continue
                else:
                    raise ProtocolError(f"unexpected message type 0x{tag[0]:02X} during "
                                        "COPY from stdin")
        except BaseException:
            sink.abort()
            raise
        self._outcome(sink.finish(), describe=False)

    # -- extended query ------------------------------------------------------------------

    def _parse(self, body: bytes) -> None:
        assert self.backend is not None
        msg = codec.parse_parse(body)
        if msg.name and msg.name in self._statements:
            raise _Named("42P05", f'prepared statement "{msg.name}" already exists')
        statements = self.backend.split(msg.sql)
        if len(statements) > 1:
            raise _Named("42601", "cannot insert multiple commands into a prepared statement")
        self._statements[msg.name] = _Prepared(statements[0] if statements else None,
                                               msg.param_oids)
        self._send(codec.PARSE_COMPLETE)

    def _bind(self, body: bytes) -> None:
        msg = codec.parse_bind(body)
        prepared = self._statement(msg.statement)
        if msg.portal and msg.portal in self._portals:
            raise _Named("42P03", f'portal "{msg.portal}" already exists')
        need = max(prepared.statement.params if prepared.statement else 0,
                   len(prepared.param_oids))
        if len(msg.params) != need:
            raise ProtocolError(f"bind message supplies {len(msg.params)} parameters, but "
                                f'prepared statement "{msg.statement}" requires {need}')
        if len(msg.param_formats) not in (0, 1, len(msg.params)):
            raise ProtocolError(f"bind message has {len(msg.param_formats)} parameter "
                                f"formats but {len(msg.params)} parameters")
        if any(f == 1 for f in msg.result_formats):
            raise Unsupported("binary format for results is not supported",
                              hint="ask for results in text format")
        oids = [prepared.param_oids[i] if i < len(prepared.param_oids) else 0
                for i in range(len(msg.params))]
        values = [pgtypes.decode_param(raw, codec.format_for(msg.param_formats, i), oids[i])
                  for i, raw in enumerate(msg.params)]
        statement = prepared.statement or Statement("")
        self._portals[msg.portal] = _Portal(statement, values,
                                            [pgtypes.type_name_of(o) for o in oids],
                                            msg.result_formats)
        self._send(codec.BIND_COMPLETE)

    def _describe(self, body: bytes) -> None:
        assert self.backend is not None
        target = codec.parse_target(body, "Describe")
        if target.kind == "S":
            prepared = self._statement(target.name)
            statement = prepared.statement
            given = [pgtypes.type_name_of(o) for o in prepared.param_oids]
            described = self.backend.describe(statement, given) if statement else None
            params = described.params if described else []
            oids = [prepared.param_oids[i] if i < len(prepared.param_oids) and
                    prepared.param_oids[i] else pgtypes.oid_of(params[i]
                                                                if i < len(params) else None)
                    for i in range(max(len(params), len(prepared.param_oids)))]
            self._send(codec.parameter_description(oids))
        elif target.name and target.name not in self._portals:
            # A cursor DECLAREd in SQL is a portal of the protocol too (PostgreSQL):
            # psycopg's server-side cursors describe it by that name.
            quoted = target.name.replace('"', '""')
            (fetch,) = self.backend.split(f'FETCH ALL FROM "{quoted}"')
            described = self.backend.describe(fetch, [])
        else:
            portal = self._portal(target.name)
            statement = portal.statement
            described = (self.backend.describe(statement, portal.param_types)
                         if statement.text.strip() else None)
        if described is None or not described.columns:
            self._send(codec.NO_DATA)
        else:
            self._send(codec.row_description(_fields(described.columns, described.types)))

    def _execute(self, body: bytes) -> None:
        assert self.backend is not None
        msg = codec.parse_execute(body)
        portal = self._portal(msg.portal)
        with self.backend.running():
            if portal.outcome is None:
                if not portal.statement.text.strip():
                    portal.outcome = Outcome(empty=True)
                else:
                    portal.outcome = self.backend.run(portal.statement, portal.params,
                                                      portal.param_types)
                portal.rows = iter(portal.outcome.rows)
            elif portal.rows is None or not portal.outcome.columns:
                # A portal run to completion runs no more (PostgreSQL: "SELECT 0").
                self._send(codec.command_complete(portal.outcome.status))
                return
            self._outcome(portal.outcome, describe=False, max_rows=msg.max_rows,
                          portal=portal)

    def _close(self, body: bytes) -> None:
        target = codec.parse_target(body, "Close")
        if target.kind == "S":
            self._statements.pop(target.name, None)
        else:
            self._portals.pop(target.name, None)
        self._send(codec.CLOSE_COMPLETE)

    def _statement(self, name: str) -> _Prepared:
        found = self._statements.get(name)
        if found is None:
            raise _Named("26000", f'prepared statement "{name}" does not exist')
        return found

    def _portal(self, name: str) -> _Portal:
        found = self._portals.get(name)
        if found is None:
            raise _Named("34000", f'portal "{name}" does not exist')
        return found

    def _function_call(self, body: bytes) -> None:
        raise Unsupported("the function call protocol is not supported")

    def _password_message(self, body: bytes) -> None:
        raise ProtocolError("unexpected password message")

    _EXTENDED: dict[bytes, Callable[[Connection, bytes], None]] = {
        b"P": _parse, b"B": _bind, b"D": _describe, b"E": _execute, b"C": _close,
        b"F": _function_call, b"p": _password_message,
    }


class _Named(Error):
    """A protocol-level error with its SQLSTATE (prepared statements and portals)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _more(portal: _Portal) -> bool:
    """Whether a portal's rows go on (peeked, and put back)."""
    assert portal.rows is not None
    try:
        first = next(portal.rows)
    except StopIteration:
        portal.rows = iter(())
        return False
    rest = portal.rows
    portal.rows = _chain(first, rest)
    return True


def _chain(first: Sequence[Any], rest: Iterator[Sequence[Any]]) -> Iterator[Sequence[Any]]:
    yield first
    yield from rest


def _fields(columns: Sequence[str], types: Sequence[str]) -> list[codec.Field]:
    out = []
    for i, name in enumerate(columns):
        c = pgtypes.column_type(types[i] if i < len(types) else None)
        out.append(codec.Field(name, c.oid, c.size, c.typmod))
    return out


def error_fields(e: BaseException) -> dict[str, str]:
    """An ErrorResponse's fields: SQLSTATE, message, detail, hint, and the 1-based
    character position of a syntax error in what the client sent."""
    if isinstance(e, ProtocolError):
        return {"S": "FATAL" if e.fatal else "ERROR", "V": "FATAL" if e.fatal else "ERROR",
                "C": e.code, "M": e.message}
    if not isinstance(e, Error):
        log.error("internal error", exc_info=e)
        return {"S": "ERROR", "V": "ERROR", "C": "XX000",
                "M": f"internal error: {type(e).__name__}: {e}"}
    position = getattr(e, "position", None)
    fields = {"S": "ERROR", "V": "ERROR", "C": e.code,
              "M": getattr(e, "reason", e.message) if position else e.message}
    # A syntax error's detail is its caret drawing: the position says it to a client.
    if e.detail and position is None:
        fields["D"] = e.detail
    if e.hint:
        fields["H"] = e.hint
    if position:
        fields["P"] = str(position)
    return fields

