"""The pgwire protocol layer in memory (issue 35, part A): the codec, one connection's
state machine against a stand-in backend (startup, SCRAM login, simple and extended
query, COPY, errors), and Hypothesis feeding it random bytes and random message
sequences. No sockets, no Spark, no process."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scramp import ScramClient

from mzflow.catalog.roles import auth_info, make_verifier
from mzflow.errors import InvalidOption, ParseError, QueryCanceled
from mzflow.server import codec
from mzflow.server import types as pgtypes
from mzflow.server.auth import Throttle
from mzflow.server.backend import Closed, Described, Outcome, Statement
from mzflow.server.copy import _unescape, text_row
from mzflow.server.login import Settings
from mzflow.server.protocol import BATCH_BYTES, Connection
from mzflow.server.statements import options

# -- a client's side, in bytes --------------------------------------------------------


def startup(user: str = "materialize", version: int = codec.PROTOCOL_3, **params: str) -> bytes:
    body = struct.pack("!i", version) + b"".join(
        codec.cstr(k) + codec.cstr(v) for k, v in {"user": user, **params}.items()) + b"\0"
    return struct.pack("!i", len(body) + 4) + body


def special(code: int, extra: bytes = b"") -> bytes:
    return struct.pack("!ii", 8 + len(extra), code) + extra


def query(sql: str) -> bytes:
    return codec.message(b"Q", codec.cstr(sql))


def parse_msg(name: str, sql: str, oids: Sequence[int] = ()) -> bytes:
    return codec.message(b"P", codec.cstr(name) + codec.cstr(sql) + struct.pack(
        "!h", len(oids)) + b"".join(struct.pack("!I", o) for o in oids))


def bind(portal: str, stmt: str, params: Sequence[bytes | None] = (),
         formats: Sequence[int] = (), results: Sequence[int] = ()) -> bytes:
    body = codec.cstr(portal) + codec.cstr(stmt) + struct.pack("!h", len(formats))
    body += b"".join(struct.pack("!h", f) for f in formats) + struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    body += struct.pack("!h", len(results)) + b"".join(struct.pack("!h", f) for f in results)
    return codec.message(b"B", body)


def describe(kind: str, name: str) -> bytes:
    return codec.message(b"D", kind.encode() + codec.cstr(name))


def execute(portal: str, max_rows: int = 0) -> bytes:
    return codec.message(b"E", codec.cstr(portal) + struct.pack("!i", max_rows))


def close(kind: str, name: str) -> bytes:
    return codec.message(b"C", kind.encode() + codec.cstr(name))


SYNC = codec.message(b"S")
TERMINATE = codec.message(b"X")


def messages(out: bytes) -> list[tuple[str, bytes]]:
    """The backend's messages; a lone 'N'/'S' byte (an answer to SSLRequest) first."""
    found = []
    i = 0
    while i < len(out):
        tag = out[i:i + 1]
        if tag in (b"N", b"S") and (i + 5 > len(out) or struct.unpack_from(
                "!i", out, i + 1)[0] > len(out)):
            found.append((tag.decode(), b""))
            i += 1
            continue
        (length,) = struct.unpack_from("!i", out, i + 1)
        found.append((tag.decode(), out[i + 5:i + 1 + length]))
        i += 1 + length
    return found


def fields(body: bytes) -> dict[str, str]:
    out = {}
    for part in body.rstrip(b"\0").split(b"\0"):
        if part:
            out[part[:1].decode()] = part[1:].decode()
    return out


def data_rows(msgs: list[tuple[str, bytes]]) -> list[list[str | None]]:
    rows = []
    for tag, body in msgs:
        if tag != "D":
            continue
        r = codec.Reader(body, "DataRow")
        row: list[str | None] = []
        for _ in range(r.int16()):
            n = r.int32()
            row.append(None if n == -1 else r.take(n).decode())
        rows.append(row)
    return rows


# -- the server's side, in memory ---------------------------------------------------------

class MemoryWire:
    def __init__(self, data: bytes = b"", *, unix: bool = False):
        self.input = bytearray(data)
        self.output = bytearray()
        self.peer = "10.0.0.1"
        self.unix = unix
        self.tls_available = False
        self.tls_active = False
        self.slept: list[float] = []
        self.on_send: Any = None

    def recv(self, n: int) -> bytes:
        if len(self.input) < n:
            raise Closed
        out = bytes(self.input[:n])
        del self.input[:n]
        return out

    def send(self, data: bytes) -> None:
        self.output += data
        if self.on_send is not None:
            self.on_send(self)

    def start_tls(self) -> None:
        raise AssertionError("no TLS here")

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class FakeBackend:
    """Statements of a tiny language: ``rows N`` (N integer rows), ``fail`` (an error),
    ``copy N`` (COPY out), ``copyin`` (COPY in), anything else a command."""

    def __init__(self) -> None:
        self.transaction_status = "I"
        self.ran: list[tuple[str, list[Any], list[str | None]]] = []
        self.copied = bytearray()
        self.cancelled = False

    def startup(self, params: dict[str, str]) -> list[str]:
        return ["hello"] if params.get("application_name") == "greet" else []

    def parameters(self) -> dict[str, str]:
        return {"server_version": "9.5.0", "client_encoding": "UTF8"}

    def changed_parameters(self) -> dict[str, str]:
        return {}

    def split(self, sql: str) -> list[Statement]:
        if "syntax" in sql:
            raise ParseError("syntax error at or near \"syntax\"", line=1, column=1)
        out = []
        for part in sql.split(";"):
            if part.strip():
                copy = "in" if part.strip() == "copyin" else None
                out.append(Statement(part.strip(), params=part.count("$"), copy=copy))
        return out

    def describe(self, statement: Statement, param_types: Sequence[str | None]) -> Described:
        if statement.text.startswith("rows"):
            return Described(["integer"] * statement.params, ["n"], ["integer"])
        return Described(["integer"] * statement.params)

    def run(self, statement: Statement, params: Sequence[Any],
            param_types: Sequence[str | None]) -> Outcome:
        self.ran.append((statement.text, list(params), list(param_types)))
        words = statement.text.split()
        if words[0] == "fail":
            raise InvalidOption("it failed", hint="as asked")
        if words[0] == "rows":
            n = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
            return Outcome(f"SELECT {n}", ["n"], ["integer"], ((i,) for i in range(n)))
        if words[0] == "copy":
            n = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
            return Outcome(columns=["a", "b"], types=["integer", "text"],
                           rows=((i, None) for i in range(n)), copy_out=True)
        if statement.copy == "in":
            return Outcome(copy_in=_Sink(self))
        return Outcome("OK", notices=["noted"] if words[0] == "notice" else [])

    @contextmanager
    def running(self) -> Iterator[None]:
        yield

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise QueryCanceled("canceling statement due to user request")

    def cancel(self) -> None:
        self.cancelled = True

    def close(self) -> None:
        pass


class _Sink:
    columns = 2

    def __init__(self, backend: FakeBackend):
        self.backend = backend

    def write(self, data: bytes) -> None:
        self.backend.copied += data

    def finish(self) -> Outcome:
        lines = self.backend.copied.count(b"\n")
        return Outcome(f"COPY {lines}")

    def abort(self) -> None:
        self.backend.copied.clear()


def serve(data: bytes, *, trust: bool = True, verifiers: Any = None,
          backend: FakeBackend | None = None, wire: MemoryWire | None = None,
          **kw: Any) -> tuple[list[tuple[str, bytes]], FakeBackend, MemoryWire]:
    backend = backend or FakeBackend()
    wire = wire or MemoryWire(data)
    if not wire.input:
        wire.input += data
    conf = Settings(open_backend=lambda role, params: backend,
                    verifiers=verifiers or (lambda name: None), trust=trust, **kw)
    Connection(wire, conf).run()
    return messages(bytes(wire.output)), backend, wire


def tags(msgs: list[tuple[str, bytes]]) -> str:
    return "".join(t for t, _ in msgs)


# -- startup and login -------------------------------------------------------------------

def test_trusted_startup_sends_parameters_key_and_ready() -> None:
    msgs, _, _ = serve(startup(application_name="greet") + TERMINATE)
    assert tags(msgs) == "RSSKNZ"
    assert ("S", codec.cstr("server_version") + codec.cstr("9.5.0")) in msgs
    assert fields(msgs[4][1])["M"] == "hello"
    assert msgs[-1] == ("Z", b"I")


def test_ssl_and_gssenc_requests_are_refused_without_tls_then_startup_goes_on() -> None:
    msgs, _, _ = serve(special(codec.GSSENC_REQUEST) + special(codec.SSL_REQUEST) + startup()
                       + TERMINATE)
    assert [t for t, _ in msgs[:2]] == ["N", "N"]
    assert msgs[-1][0] == "Z"


def test_an_unknown_protocol_version_gets_a_fatal_error() -> None:
    msgs, _, _ = serve(startup(version=2 << 16))
    assert tags(msgs) == "E"
    assert fields(msgs[0][1])["C"] == "08004"
    assert fields(msgs[0][1])["S"] == "FATAL"


def test_a_newer_minor_version_is_negotiated_down_to_3_0() -> None:
    msgs, _, _ = serve(startup(version=(3 << 16) | 2, **{"_pq_.x": "1"}) + TERMINATE)
    assert msgs[0][0] == "v"
    r = codec.Reader(msgs[0][1], "v")
    assert (r.int32(), r.int32(), r.cstring()) == (0, 1, "_pq_.x")
    assert msgs[-1][0] == "Z"


def test_cancel_request_reaches_the_registry_and_closes() -> None:
    asked = []
    msgs, _, _ = serve(special(codec.CANCEL_REQUEST, struct.pack("!ii", 7, 42)),
                       cancel=lambda pid, secret: asked.append((pid, secret)))
    assert msgs == [] and asked == [(7, 42)]


def _login(password: str, verifier: str | None, role: str = "alice") -> tuple[
        list[tuple[str, bytes]], MemoryWire, Throttle]:
    """A SCRAM login as libpq does it (an empty user name in client-first), the client
    answering the server as the messages arrive."""
    client = ScramClient(["SCRAM-SHA-256"], role, password)
    wire = MemoryWire(startup(role))
    # libpq's client-first names no user (scramp's client insists on one).
    first = client.get_client_first().replace(f"n={role},", "n=,")
    client.client_first_bare = client.client_first_bare.replace(f"n={role},", "n=,")
    state = {"step": 0}

    def answer(w: MemoryWire) -> None:
        msgs = messages(bytes(w.output))
        auth = [b for t, b in msgs if t == "R"]
        if state["step"] == 0 and auth:
            state["step"] = 1
            body = codec.cstr("SCRAM-SHA-256") + struct.pack("!i", len(first)) + first.encode()
            w.input += codec.message(b"p", body)
        elif state["step"] == 1 and len(auth) >= 2:
            state["step"] = 2
            client.set_server_first(auth[1][4:].decode())
            w.input += codec.message(b"p", client.get_client_final().encode())
            w.input += TERMINATE

    wire.on_send = answer
    throttle = Throttle()
    msgs, _, _ = serve(b"", trust=False, verifiers={role: verifier}.get, wire=wire,
                       throttle=throttle)
    return msgs, wire, throttle


def test_scram_login_with_the_right_password() -> None:
    msgs, wire, _ = _login("s3cret", make_verifier("s3cret"))
    kinds = [struct.unpack_from("!i", b)[0] for t, b in msgs if t == "R"]
    assert kinds == [10, 11, 12, 0]  # SASL, continue, final, ok
    assert msgs[-1][0] == "Z" and wire.slept == []


@pytest.mark.parametrize("verifier", [make_verifier("s3cret"), None, "not a verifier"])
def test_a_wrong_password_or_unknown_role_is_refused_with_28P01_after_a_delay(
        verifier: str | None) -> None:
    msgs, wire, _ = _login("guess", verifier)
    error = fields(dict(msgs)["E"])
    assert error["C"] == "28P01"
    assert error["M"] == 'password authentication failed for user "alice"'
    assert "Z" not in tags(msgs)
    assert wire.slept and wire.slept[0] > 0


def test_failed_logins_wait_longer_each_time_up_to_a_cap() -> None:
    now = [0.0]
    t = Throttle(base=0.25, cap=2.0, forget_after=60, clock=lambda: now[0])
    delays = [t.failed("h") for _ in range(6)]
    assert delays == sorted(delays) and delays[0] < delays[2] and delays[-1] == 2.0
    assert t.failed("other") == 0.25  # per client address
    t.succeeded("h")
    assert t.failed("h") == 0.25
    t.failed("h")
    now[0] = 1000.0
    assert t.failed("h") == 0.25  # a long quiet starts over


def test_verifier_round_trip() -> None:
    salt, stored, server, iterations = auth_info(make_verifier("pw"))  # type: ignore[misc]
    assert len(salt) >= 16 and len(stored) == len(server) == 32 and iterations == 4096
    assert auth_info("md5abc") is None


# -- queries ---------------------------------------------------------------------------

def test_simple_query_runs_each_statement_with_one_ready() -> None:
    msgs, backend, _ = serve(startup() + query("rows 2; notice; rows 0") + TERMINATE)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "TDDCNCTCZ"
    assert data_rows(after) == [["0"], ["1"]]
    assert [c for t, c in after if t == "C"] == [codec.cstr("SELECT 2"), codec.cstr("OK"),
                                                   codec.cstr("SELECT 0")]
    assert [r[0] for r in backend.ran] == ["rows 2", "notice", "rows 0"]


def test_an_error_stops_the_batch_and_keeps_the_connection() -> None:
    msgs, backend, _ = serve(startup() + query("fail; rows 1") + query("rows 1") + TERMINATE)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "EZTDCZ"
    err = fields(after[0][1])
    assert (err["S"], err["C"], err["M"], err["H"]) == ("ERROR", "22023", "it failed", "as asked")
    assert [r[0] for r in backend.ran] == ["fail", "rows 1"]


def test_a_syntax_error_carries_its_position_and_runs_nothing() -> None:
    msgs, backend, _ = serve(startup() + query("syntax") + query("") + TERMINATE)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "EZIZ"  # then the empty query
    assert fields(after[0][1])["C"] == "42601" and backend.ran == []


def test_extended_query_named_statement_portals_and_suspension() -> None:
    data = (startup() + parse_msg("s1", "rows 5 $1", [23]) + describe("S", "s1")
            + bind("p1", "s1", [b"7"]) + describe("P", "p1") + execute("p1", 2)
            + execute("p1", 2) + execute("p1", 2) + close("P", "p1") + SYNC
            + bind("", "s1", [struct.pack("!i", 9)], formats=[1]) + execute("") + SYNC
            + TERMINATE)
    msgs, backend, _ = serve(data)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "1tT2TDDsDDsDC3Z2DDDDDCZ"
    assert data_rows(after)[:5] == [["0"], ["1"], ["2"], ["3"], ["4"]]
    # A text parameter stays text, with its type's name; a binary one is decoded.
    assert backend.ran == [("rows 5 $1", ["7"], ["integer"]), ("rows 5 $1", [9], ["integer"])]


def test_an_extended_error_skips_to_sync() -> None:
    data = (startup() + parse_msg("", "fail") + bind("", "") + execute("") + execute("")
            + SYNC + parse_msg("", "rows 1") + bind("", "") + execute("") + SYNC + TERMINATE)
    msgs, backend, _ = serve(data)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "12EZ12DCZ"
    assert [r[0] for r in backend.ran] == ["fail", "rows 1"]


@pytest.mark.parametrize(("messages_in", "code"), [
    (bind("", "nope"), "26000"),
    (execute("nope"), "34000"),
    (parse_msg("", "a; b"), "42601"),
    (parse_msg("", "rows $1") + bind("", "", []), "08P01"),
    (parse_msg("", "rows 1") + bind("", "", [], results=[1]), "0A000"),
    (parse_msg("", "rows $1", [1186]) + bind("", "", [b"x"], formats=[1]), "22P02"),
    (parse_msg("", "rows $1", [600]) + bind("", "", [b"x"], formats=[1]), "0A000"),
    (codec.message(b"F", b""), "0A000"),
])
def test_extended_protocol_errors_have_postgresql_codes(messages_in: bytes, code: str) -> None:
    msgs, _, _ = serve(startup() + messages_in + SYNC + query("rows 1") + TERMINATE)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert fields(dict(after)["E"])["C"] == code
    assert tags(after).endswith("ZTDCZ")  # and the connection goes on


def test_named_statement_twice_is_refused() -> None:
    msgs, _, _ = serve(startup() + parse_msg("a", "x") + parse_msg("a", "x") + SYNC
                       + TERMINATE)
    assert fields(dict(msgs)["E"])["C"] == "42P05"


def test_copy_out_and_copy_in() -> None:
    data = (startup() + query("copy 2") + query("copyin")
            + codec.message(b"d", b"1\ta\n2\tb\n") + codec.message(b"c") + TERMINATE)
    msgs, backend, _ = serve(data)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "HddcCZGCZ"
    assert [b for t, b in after if t == "d"] == [b"0\t\\N\n", b"1\t\\N\n"]
    assert codec.cstr("COPY 2") in [b for t, b in after if t == "C"]
    assert bytes(backend.copied) == b"1\ta\n2\tb\n"


def test_copy_fail_drops_the_data() -> None:
    data = (startup() + query("copyin") + codec.message(b"d", b"1\n")
            + codec.message(b"f", codec.cstr("changed my mind")) + query("rows 0") + TERMINATE)
    msgs, backend, _ = serve(data)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "GEZTCZ"
    assert "changed my mind" in fields(after[1][1])["M"] and backend.copied == b""


@pytest.mark.parametrize("data", [
    codec.message(b"Q", b"x" * 100)[:1] + struct.pack("!i", 2**31 - 1),  # oversized
    codec.message(b"Q", b"")[:1] + struct.pack("!i", 2),  # shorter than its header
    codec.message(b"?", b""),  # no such message
])
def test_broken_frames_end_the_connection_with_a_fatal_error(data: bytes) -> None:
    msgs, _, _ = serve(startup() + data + query("rows 1"))
    after = msgs[tags(msgs).index("Z") + 1:]
    assert tags(after) == "E"
    assert fields(after[0][1])["S"] == "FATAL"


def test_an_oversized_message_is_refused_before_it_is_read() -> None:
    big = query("rows 1" + " " * 5000)
    msgs, backend, wire = serve(startup() + big, max_message=1000)
    assert fields(dict(msgs)["E"])["C"] == "54000"
    assert len(wire.input) > 4000 and backend.ran == []  # its body was never read


def test_a_cancel_between_rows_stops_the_statement() -> None:
    backend = FakeBackend()
    backend.cancelled = True
    msgs, _, _ = serve(startup() + query("rows 3000") + TERMINATE, backend=backend)
    after = msgs[tags(msgs).index("Z") + 1:]
    assert fields(dict(after)["E"])["C"] == "57014"
    assert len(data_rows(after)) < 3000


def test_a_large_result_goes_out_in_bounded_batches_as_it_is_produced() -> None:
    produced = [0]
    sizes: list[int] = []

    class Rows(FakeBackend):
        def run(self, statement: Statement, params: Sequence[Any],
                param_types: Sequence[str | None]) -> Outcome:
            def rows() -> Iterator[tuple[str]]:
                for i in range(50_000):
                    produced[0] += 1
                    yield (f"row {i:08d}",)
            return Outcome("SELECT 50000", ["s"], ["text"], rows())

    wire = MemoryWire(startup() + query("big") + TERMINATE)
    wire.on_send = lambda w: sizes.append(produced[0])
    sent_sizes: list[int] = []
    original = wire.send

    def send(data: bytes) -> None:
        sent_sizes.append(len(data))
        original(data)

    wire.send = send  # type: ignore[method-assign]
    msgs, _, _ = serve(b"", backend=Rows(), wire=wire)
    assert len(data_rows(msgs)) == 50_000
    assert max(sent_sizes) < BATCH_BYTES + 100  # never the whole result at once
    assert sizes[1] < 50_000  # the first batch left before the last row was produced


# -- pieces ---------------------------------------------------------------------------------

def test_startup_options_as_materialize_reads_them() -> None:
    assert options("--cluster=etl -c application_name=x -cDateStyle=ISO "
                   "--search-path=a\\ b") == [
        ("cluster", "etl"), ("application_name", "x"), ("DateStyle", "ISO"),
        ("search_path", "a b")]
    for bad in ("cluster=etl", "-c", "--x"):
        with pytest.raises(ValueError):
            options(bad)


def test_copy_text_format_escapes_both_ways() -> None:
    assert text_row(["a\tb\\c\nd", None, True, Decimal("1.50")],
                    ["text", "text", "boolean", "numeric"]) == b"a\\tb\\\\c\\nd\t\\N\tt\t1.50\n"
    assert _unescape("a\\tb\\\\c\\nd\\101\\x41\\q", 1) == "a\tb\\c\nd" + "AAq"


@pytest.mark.parametrize(("name", "oid", "typmod"), [
    ("numeric(10,2)", 1700, (10 << 16 | 2) + 4), ("numeric", 1700, -1),
    ("character varying(3)", 1043, 7), ("timestamp with time zone", 1184, -1),
    ("bigint", 20, -1), ("integer[]", 1007, -1), ("mz_timestamp", 16552, -1),
    (None, 25, -1), ("some future type", 25, -1)])
def test_column_types(name: str | None, oid: int, typmod: int) -> None:
    c = pgtypes.column_type(name)
    assert (c.oid, c.typmod) == (oid, typmod)


# -- fuzz ---------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_or_hang(data: bytes) -> None:
    msgs, _, _ = serve(data)
    for tag, body in msgs:
        if tag == "E":
            assert not fields(body)["M"].startswith("internal error"), fields(body)


_TAGS = st.sampled_from([b"Q", b"P", b"B", b"D", b"E", b"C", b"S", b"H", b"d", b"c", b"f",
                         b"p", b"F", b"X", b"?"])
_BODIES = st.one_of(
    st.binary(max_size=40),
    st.builds(lambda s: codec.cstr(s), st.sampled_from(["rows 3", "fail", "copyin",
                                                         "copy 1", "", "a;b", "rows $1"])),
    st.builds(lambda k, n: k + codec.cstr(n), st.sampled_from([b"S", b"P", b"X"]),
              st.sampled_from(["", "a"])),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.builds(codec.message, _TAGS, _BODIES),
    st.sampled_from([parse_msg("", "rows 3 $1", [23]), parse_msg("a", "rows 2"),
                     bind("", "", [b"1"]), bind("", "a"), bind("p", "a"), execute("", 1),
                     execute("p", 1), describe("S", "a"), describe("P", ""), SYNC,
                     query("copyin"), codec.message(b"c")]),
), max_size=25))
def test_random_message_sequences_never_crash_or_hang(msgs_in: list[bytes]) -> None:
    msgs, _, _ = serve(startup() + b"".join(msgs_in))
    assert tags(msgs).startswith("RSSKZ")
    for tag, body in msgs:
        if tag == "E":
            assert not fields(body)["M"].startswith("internal error"), fields(body)
