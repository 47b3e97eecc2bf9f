"""Logging in: SCRAM-SHA-256 against the role's verifier, and the delay that grows with
each failed login from a client's address.

The arithmetic is ``scramp``'s (pg8000's library, which ``catalog/roles.py`` makes the
verifiers with): this module turns a verifier (PostgreSQL's text form,
``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``) into what scramp's
server needs, and runs the exchange. A role without a verifier, or none at all, goes
through the same exchange with made-up keys, so the answer never tells whether the role
exists.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from scramp import ScramException, ScramMechanism

from mzflow.catalog import roles
from mzflow.catalog.model import Snapshot

MECHANISM, ITERATIONS = roles.MECHANISM, roles.ITERATIONS

log = logging.getLogger("mzflow.server")

Verifiers = Callable[[str], "str | None"]


class LoginFailed(Exception):
    """The exchange failed: a wrong password, or a malformed SCRAM message."""


def catalog_verifiers(snapshot: Callable[[], Snapshot]) -> Verifiers:
    """The verifier of each role, read from the catalog at each login (an ALTER ROLE …
    PASSWORD applies to the next one)."""
    return lambda name: roles.verifier(snapshot(), name)


def catalog_can_login(snapshot: Callable[[], Snapshot]) -> Callable[[str], bool]:
    """Whether a role exists and has LOGIN (checked after its password, so the answer
    never tells whether a role exists)."""
    return lambda name: roles.can_login(snapshot(), name)


class Scram:
    """One login's exchange, server side: ``first`` answers the client's first message,
    ``final`` checks its proof (LoginFailed) and returns the server's signature."""

    def __init__(self, role: str, verifier: str | None, secret: bytes):
        keys = roles.auth_info(verifier) if verifier else None
        if keys is None:
            # PostgreSQL's mock exchange: a salt stable per role name (so two attempts
            # look alike) and keys no proof matches.
            salt = hmac.new(secret, role.encode(), hashlib.sha256).digest()[:16]
            keys = (salt, os.urandom(32), os.urandom(32), ITERATIONS)
        self._keys = keys
        self._server = ScramMechanism(MECHANISM).make_server(lambda _name: self._keys)

    def first(self, client_first: str) -> str:
        try:
            _set_client_first(self._server, client_first)
            return str(self._server.get_server_first())
        except ScramException as e:
            raise LoginFailed(str(e)) from None

    def final(self, client_final: str) -> str:
        try:
            self._server.set_client_final(client_final)
            return str(self._server.get_server_final())
        except ScramException as e:
            raise LoginFailed(str(e)) from None


def _set_client_first(server: object, client_first: str) -> None:
    """libpq sends an empty user name (``n,,n=,r=…``: the role came in the startup
    message), which scramp refuses: parse with a stand-in name, then put back the bytes
    the client signs, since both proofs are computed over them."""
    parts = client_first.split(",", 3)
    if len(parts) == 4 and parts[2] == "n=":
        server.set_client_first(",".join([*parts[:2], "n=*", parts[3]]))  # type: ignore[attr-defined]
        server.client_first_bare = ",".join(parts[2:])  # type: ignore[attr-defined]
        return
    server.set_client_first(client_first)  # type: ignore[attr-defined]


class Throttle:
    """Failed logins per client address: each failure waits longer before its answer
    (0.25 s, doubling, up to ``cap``), a success or ``forget_after`` seconds of quiet
    start over. It holds at most ``size`` addresses (the oldest go first)."""

    def __init__(self, base: float = 0.25, cap: float = 8.0, forget_after: float = 600.0,
                 size: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.base, self.cap, self.forget_after, self.size = base, cap, forget_after, size
        self.clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def failed(self, who: str) -> float:
        """Record a failure of ``who``; the delay before telling it."""
        with self._lock:
            now = self.clock()
            count, last = self._failures.pop(who, (0, now))
            if now - last > self.forget_after:
                count = 0
            count += 1
            self._failures[who] = (count, now)
            while len(self._failures) > self.size:
                self._failures.popitem(last=False)
        return min(self.cap, self.base * 2 ** (count - 1))

    def succeeded(self, who: str) -> None:
        with self._lock:
            self._failures.pop(who, None)
