"""PostgreSQL's wire protocol v3 as bytes: frames, the frontend's messages parsed, the
backend's built. Pure: no sockets, no mzflow session; ``protocol.py`` drives it.

A frame is a tag byte, then an Int32 length that counts itself and the body. The
startup-phase messages (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest) have
no tag: an Int32 length, then an Int32 code. Every length is checked against a cap
before anything is read, so a client cannot make the server allocate what it claims.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

PROTOCOL_3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

# PostgreSQL's own limit on a startup packet (MAX_STARTUP_PACKET_LENGTH).
MAX_STARTUP = 10_000
# Any other message: large enough for a big INSERT or a COPY chunk, small enough that a
# bogus length is refused before it is read.
MAX_MESSAGE = 64 * 2**20

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")


class ProtocolError(Exception):
    """The client broke the protocol: answered with ``code`` (08P01 by default); fatal
    ones end the connection."""

    def __init__(self, message: str, code: str = "08P01", *, fatal: bool = False):
        super().__init__(message)
        self.message = message
        self.code = code
        self.fatal = fatal


# -- reading --------------------------------------------------------------------------

def frame_length(header: bytes, cap: int = MAX_MESSAGE) -> int:
    """The body's length from a tagged frame's 5-byte header."""
    (length,) = _I32.unpack_from(header, 1)
    if length < 4:
        raise ProtocolError(f"invalid message length {length}", fatal=True)
    if length - 4 > cap:
        raise ProtocolError(f"message of {length} bytes is larger than the limit of {cap}",
                            "54000", fatal=True)
    return length - 4


def startup_length(header: bytes) -> int:
    """The body's length (after the code) from a startup packet's 8-byte header."""
    (length,) = _I32.unpack_from(header, 0)
    if length < 8 or length > MAX_STARTUP:
        raise ProtocolError("invalid length of startup packet", fatal=True)
    return length - 8


def startup_code(header: bytes) -> int:
    return _I32.unpack_from(header, 4)[0]


class Reader:
    """Fields of one message's body, each read checked against its end."""

    def __init__(self, body: bytes, what: str):
        self.body = body
        self.at = 0
        self.what = what

    def _need(self, n: int) -> None:
        if n < 0 or self.at + n > len(self.body):
            raise ProtocolError(f"invalid {self.what} message: truncated")

    def int16(self) -> int:
        self._need(2)
        (v,) = _I16.unpack_from(self.body, self.at)
        self.at += 2
        return int(v)

    def int32(self) -> int:
        self._need(4)
        (v,) = _I32.unpack_from(self.body, self.at)
        self.at += 4
        return int(v)

    def uint32(self) -> int:
        self._need(4)
        (v,) = _U32.unpack_from(self.body, self.at)
        self.at += 4
        return int(v)

    def take(self, n: int) -> bytes:
        self._need(n)
        out = self.body[self.at:self.at + n]
        self.at += n
        return out

    def cstring(self) -> str:
        end = self.body.find(b"\0", self.at)
        if end < 0:
            raise ProtocolError(f"invalid {self.what} message: unterminated string")
        raw = self.body[self.at:end]
        self.at = end + 1
        return text(raw)

    def rest(self) -> bytes:
        out = self.body[self.at:]
        self.at = len(self.body)
        return out

    def done(self) -> None:
        if self.at != len(self.body):
            raise ProtocolError(f"invalid {self.what} message: trailing bytes")


def text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError('invalid byte sequence for encoding "UTF8"', "22021") from None


def startup_params(body: bytes) -> dict[str, str]:
    """A StartupMessage's ``name\\0value\\0…\\0`` pairs."""
    r = Reader(body, "startup")
    out: dict[str, str] = {}
    while True:
        name = r.cstring()
        if not name:
            break
        out[name] = r.cstring()
    r.done()
    return out


def cancel_key(body: bytes) -> tuple[int, int]:
    r = Reader(body, "cancel request")
    pid, secret = r.int32(), r.int32()
    r.done()
    return pid, secret


@dataclass(frozen=True)
class Parse:
    name: str
    sql: str
    param_oids: list[int]


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: list[int]
    params: list[bytes | None]
    result_formats: list[int]


@dataclass(frozen=True)
class Target:
    """Describe's and Close's object: ``kind`` 'S' (statement) or 'P' (portal)."""

    kind: str
    name: str


@dataclass(frozen=True)
class Execute:
    portal: str
    max_rows: int


def parse_query(body: bytes) -> str:
    r = Reader(body, "Query")
    sql = r.cstring()
    r.done()
    return sql


def parse_parse(body: bytes) -> Parse:
    r = Reader(body, "Parse")
    name, sql = r.cstring(), r.cstring()
    n = r.int16()
    if n < 0:
        raise ProtocolError("invalid Parse message: negative parameter count")
    oids = [r.uint32() for _ in range(n)]
    r.done()
    return Parse(name, sql, oids)


def parse_bind(body: bytes) -> Bind:
    r = Reader(body, "Bind")
    portal, statement = r.cstring(), r.cstring()
    formats = [r.int16() for _ in range(_count(r))]
    params: list[bytes | None] = []
    for _ in range(_count(r)):
        n = r.int32()
        params.append(None if n == -1 else r.take(n))
    results = [r.int16() for _ in range(_count(r))]
    r.done()
    for f in (*formats, *results):
        if f not in (0, 1):
            raise ProtocolError(f"invalid format code {f}", "22023")
    return Bind(portal, statement, formats, params, results)


def _count(r: Reader) -> int:
    n = r.int16()
    if n < 0:
        raise ProtocolError(f"invalid {r.what} message: negative count")
    return n


def parse_target(body: bytes, what: str) -> Target:
    r = Reader(body, what)
    kind = r.take(1)
    name = r.cstring()
    r.done()
    if kind not in (b"S", b"P"):
        raise ProtocolError(f"invalid {what} message subtype {kind!r}")
    return Target(kind.decode(), name)


def parse_execute(body: bytes) -> Execute:
    r = Reader(body, "Execute")
    portal = r.cstring()
    max_rows = r.int32()
    r.done()
    return Execute(portal, max_rows)


def parse_sasl_initial(body: bytes) -> tuple[str, bytes]:
    r = Reader(body, "SASLInitialResponse")
    mechanism = r.cstring()
    n = r.int32()
    data = b"" if n == -1 else r.take(n)
    r.done()
    return mechanism, data


def parse_copy_fail(body: bytes) -> str:
    r = Reader(body, "CopyFail")
    reason = r.cstring()
    r.done()
    return reason


def format_for(formats: Sequence[int], i: int) -> int:
    """Bind's format codes: none (all text), one (for all), or one per column."""
    if not formats:
        return 0
    if len(formats) == 1:
        return formats[0]
    return formats[i]


# -- writing ---------------------------------------------------------------------------

def message(tag: bytes, body: bytes = b"") -> bytes:
    return tag + _I32.pack(len(body) + 4) + body


def cstr(s: str) -> bytes:
    return s.encode("utf-8").replace(b"\0", b"") + b"\0"


AUTH_OK = message(b"R", _I32.pack(0))
PARSE_COMPLETE = message(b"1")
BIND_COMPLETE = message(b"2")
CLOSE_COMPLETE = message(b"3")
NO_DATA = message(b"n")
PORTAL_SUSPENDED = message(b"s")
EMPTY_QUERY = message(b"I")
COPY_DONE = message(b"c")


def auth_sasl(mechanisms: Sequence[str]) -> bytes:
    return message(b"R", _I32.pack(10) + b"".join(cstr(m) for m in mechanisms) + b"\0")


def auth_sasl_continue(data: bytes) -> bytes:
    return message(b"R", _I32.pack(11) + data)


def auth_sasl_final(data: bytes) -> bytes:
    return message(b"R", _I32.pack(12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstr(name) + cstr(value))


def backend_key(pid: int, secret: int) -> bytes:
    return message(b"K", _I32.pack(pid) + _I32.pack(secret))


def ready(status: str) -> bytes:
    return message(b"Z", status.encode("ascii"))


def command_complete(tag: str) -> bytes:
    return message(b"C", cstr(tag))


@dataclass(frozen=True)
class Field:
    """A RowDescription column."""

    name: str
    type_oid: int
    type_size: int = -1
    typmod: int = -1
    format: int = 0
    table_oid: int = 0
    column: int = 0


def row_description(fields: Sequence[Field]) -> bytes:
    body = [_I16.pack(len(fields))]
    for f in fields:
        body.append(cstr(f.name) + struct.pack("!ihihih", f.table_oid, f.column, f.type_oid,
                                               f.type_size, f.typmod, f.format))
    return message(b"T", b"".join(body))


def parameter_description(oids: Sequence[int]) -> bytes:
    return message(b"t", _I16.pack(len(oids)) + b"".join(_U32.pack(o) for o in oids))


def data_row(values: Sequence[bytes | None]) -> bytes:
    body = [_I16.pack(len(values))]
    for v in values:
        body.append(_I32.pack(-1) if v is None else _I32.pack(len(v)) + v)
    return message(b"D", b"".join(body))


def copy_out_response(columns: int) -> bytes:
    return message(b"H", b"\0" + _I16.pack(columns) + _I16.pack(0) * columns)


def copy_in_response(columns: int, binary: bool = False) -> bytes:
    fmt = 1 if binary else 0
    return message(b"G", bytes([fmt]) + _I16.pack(columns) + _I16.pack(fmt) * columns)


def copy_data(data: bytes) -> bytes:
    return message(b"d", data)


def error_fields(tag: bytes, fields: dict[str, str]) -> bytes:
    body = b"".join(k.encode("ascii") + cstr(v) for k, v in fields.items() if v is not None)
    return message(tag, body + b"\0")


def error(fields: dict[str, str]) -> bytes:
    return error_fields(b"E", fields)


def notice(fields: dict[str, str]) -> bytes:
    return error_fields(b"N", fields)
