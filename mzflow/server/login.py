"""A connection's first phase: the startup packet (TLS, GSSAPI's refusal, a cancel
request, protocol negotiation), then the login: SCRAM-SHA-256 unless trusted, the
session opened, its parameters and key sent. ``protocol.Connection`` runs it.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mzflow.errors import Error
from mzflow.server import codec
from mzflow.server.auth import MECHANISM, LoginFailed, Scram, Throttle, Verifiers
from mzflow.server.backend import Backend, Wire
from mzflow.server.codec import ProtocolError

if TYPE_CHECKING:
    from mzflow.server.protocol import Connection

log = logging.getLogger("mzflow.server")


@dataclass
class Settings:
    """What every connection of one server shares."""

    open_backend: Callable[[str, dict[str, str]], Backend]  # (role, startup params)
    verifiers: Verifiers
    can_login: Callable[[str], bool] = lambda role: True
    trust: bool = False  # --insecure-trust
    throttle: Throttle = field(default_factory=Throttle)
    secret: bytes = field(default_factory=lambda: os.urandom(32))
    register: Callable[[Connection], tuple[int, int]] = lambda c: (0, 0)
    unregister: Callable[[Connection], None] = lambda c: None
    cancel: Callable[[int, int], None] = lambda pid, secret: None
    max_message: int = codec.MAX_MESSAGE


class Login:
    """The startup and login half of ``protocol.Connection``."""

    wire: Wire
    settings: Settings
    backend: Backend | None
    role: str

    def _send(self, data: bytes) -> None: raise NotImplementedError
    def _flush(self) -> None: raise NotImplementedError
    def _fatal(self, code: str, message: str) -> None: raise NotImplementedError
    def _ready(self) -> None: raise NotImplementedError
    def _message(self) -> tuple[bytes, bytes]: raise NotImplementedError

    # -- startup -------------------------------------------------------------------------

    def _startup(self) -> dict[str, str] | None:
        asked_tls = asked_gss = False
        while True:
            header = self.wire.recv(8)
            body = self.wire.recv(codec.startup_length(header))
            code = codec.startup_code(header)
            if code == codec.SSL_REQUEST and not asked_tls and not body:
                asked_tls = True
                if self.wire.tls_available and not self.wire.tls_active:
                    self.wire.send(b"S")
                    self.wire.start_tls()
                else:
                    self.wire.send(b"N")
            elif code == codec.GSSENC_REQUEST and not asked_gss and not body:
                asked_gss = True
                self.wire.send(b"N")
            elif code == codec.CANCEL_REQUEST:
                self.settings.cancel(*codec.cancel_key(body))
                return None
            elif code >> 16 == 3:
                params = codec.startup_params(body)
                if code & 0xFFFF or any(k.startswith("_pq_.") for k in params):
                    self._negotiate(params)
                return {k: v for k, v in params.items() if not k.startswith("_pq_.")}
            else:
                raise ProtocolError("server does not support the client's requested "
                                    "protocol version", "08004", fatal=True)

    def _negotiate(self, params: dict[str, str]) -> None:
        """A 3.x client (x > 0), or protocol options: we speak 3.0 and know none."""
        unknown = [k for k in params if k.startswith("_pq_.")]
        body = struct.pack("!ii", 0, len(unknown)) + b"".join(codec.cstr(k) for k in unknown)
        self._send(codec.message(b"v", body))

    # -- login ---------------------------------------------------------------------------

    def _login(self, params: dict[str, str]) -> bool:
        role = params.get("user", "")
        if not role:
            raise ProtocolError("no PostgreSQL user name specified in startup packet",
                                "28000", fatal=True)
        if params.get("replication", "false").lower() not in ("false", "off", "no", "0"):
            raise ProtocolError("replication connections are not supported", "0A000",
                                fatal=True)
        self.role = role
        trusted = self.settings.trust or self.wire.unix
        if not trusted and not self._password(role):
            return False
        if not self.settings.can_login(role):
            self._fatal("28000", f'role "{role}" is not permitted to log in')
            return False
        try:
            self.backend = self.settings.open_backend(role, params)
            notices = self.backend.startup(params)
        except Error as e:
            self._fatal(e.code, e.message)
            return False
        pid, secret = self.settings.register(self)  # type: ignore[arg-type]
        self._send(codec.AUTH_OK)
        for name, value in self.backend.parameters().items():
            self._send(codec.parameter_status(name, value))
        self._send(codec.backend_key(pid, secret))
        for text in notices:
            self._send(_notice(text))
        self._ready()
        return True

    def _password(self, role: str) -> bool:
        scram = Scram(role, self.settings.verifiers(role), self.settings.secret)
        self._send(codec.auth_sasl([MECHANISM]))
        self._flush()
        try:
            mechanism, first = codec.parse_sasl_initial(self._auth_message())
            if mechanism != MECHANISM:
                raise ProtocolError("client selected an invalid SASL authentication "
                                    "mechanism", fatal=True)
            self._send(codec.auth_sasl_continue(scram.first(codec.text(first)).encode()))
            self._flush()
            final = scram.final(codec.text(self._auth_message()))
        except LoginFailed as e:
            delay = self.settings.throttle.failed(self.wire.peer)
            log.warning("failed login for role %r from %s (%s); answering in %.2fs",
                        role, self.wire.peer, e, delay)
            self.wire.sleep(delay)
            self._fatal("28P01", f'password authentication failed for user "{role}"')
            return False
        self.settings.throttle.succeeded(self.wire.peer)
        self._send(codec.auth_sasl_final(final.encode()))
        return True

    def _auth_message(self) -> bytes:
        tag, body = self._message()
        if tag != b"p":
            raise ProtocolError(f"expected SASL response, got message type {tag[0]}",
                                fatal=True)
        return body



def _notice(text: str) -> bytes:
    return codec.notice({"S": "NOTICE", "V": "NOTICE", "C": "00000", "M": text})
