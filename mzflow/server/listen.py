"""``mzflow serve``'s sockets and threads: TCP and Unix listeners, TLS, one thread per
client running ``protocol.Connection``, the registry CancelRequest looks keys up in, and
a watcher that cancels the statement of a client that hung up while it ran.

A statement blocks its connection's thread (mzflow's statements are blocking calls,
Spark's among them), so nobody reads a busy client's socket: the watcher polls every
client's socket for the peer's hang-up (POLLRDHUP), which arrives even with unread data
queued, and cancels what that client's session runs.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mzflow.server.backend import Closed
from mzflow.server.login import Settings
from mzflow.server.protocol import Connection

log = logging.getLogger("mzflow.server")

MAX_CONNECTIONS = 500
# Connections from one address that have not logged in yet: a flood of failing logins
# (each held in its growing delay) from one address takes at most this many of the
# MAX_CONNECTIONS, and the others keep theirs. The Unix socket is the OS user's alone.
MAX_LOGINS_PER_PEER = 64
LOGIN_SECONDS = 60.0  # PostgreSQL's authentication_timeout: a silent client is let go
_CHUNK = 64 * 1024  # a client's bytes are read up to this much at a time
_HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class SocketWire:
    """A client's socket as the protocol's ``Wire``."""

    def __init__(self, sock: socket.socket, peer: str, unix: bool,
                 tls: ssl.SSLContext | None):
        self.sock = sock
        self.peer = peer
        self.unix = unix
        self.tls_available = tls is not None
        self.tls_active = False
        self.logging_in = False  # counted in its peer's logins under way (Server)
        self._tls = tls
        self._buffer = bytearray()  # read from the socket, not yet taken

    def recv(self, n: int) -> bytes:
        # What the client sent is read in chunks: a driver sends Bind, Describe, Execute
        # and Sync in one packet, and each read of the socket lets go of the GIL, which
        # 50 busy sessions then hand round before this one gets it back.
        buf = self._buffer
        if len(buf) < n and not buf and n >= _CHUNK:
            return self._recv_exactly(n)  # a large message: straight into its own buffer
        while len(buf) < n:
            try:
                data = self.sock.recv(max(_CHUNK, n - len(buf)))
            except (OSError, ValueError):
                raise Closed from None
            if not data:
                raise Closed
            buf += data
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def _recv_exactly(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:], n - got)
            except (OSError, ValueError):
                raise Closed from None
            if k == 0:
                raise Closed
            got += k
        return bytes(buf)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (OSError, ValueError):
            raise Closed from None

    def start_tls(self) -> None:
        assert self._tls is not None
        if self._buffer:
            # Bytes sent in the clear after SSLRequest would be taken as if they came
            # through TLS (PostgreSQL's CVE-2021-23214): refused, as PostgreSQL does.
            log.info("%s sent unencrypted data after its SSL request", self.peer)
            raise Closed
        try:
            self.sock = self._tls.wrap_socket(self.sock, server_side=True)
        except (OSError, ssl.SSLError) as e:
            log.info("TLS handshake with %s failed: %s", self.peer, e)
            raise Closed from None
        self.tls_active = True

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


@dataclass
class _Client:
    connection: Connection
    wire: SocketWire
    secret: int = field(default_factory=lambda: secrets.randbits(31))


class Server:
    """Listeners and clients of one ``mzflow serve``."""

    def __init__(self, settings: Settings, host: str = "127.0.0.1", port: int = 6875,
                 tls: ssl.SSLContext | None = None, unix_dir: Path | None = None):
        self.settings = settings
        settings.register, settings.unregister = self._register, self._unregister
        settings.cancel = self.cancel
        self.host, self.port, self.tls, self.unix_dir = host, port, tls, unix_dir
        self._listeners: list[tuple[socket.socket, bool]] = []
        self._clients: dict[int, _Client] = {}
        self._wires: dict[int, SocketWire] = {}  # every open client socket, by thread
        self._logins: dict[str, int] = {}  # a peer's connections not yet logged in
        self._lock = threading.Lock()
        self._pids = iter(range(os.getpid() % 1000 * 100_000 + 1, 2**31))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- starting and stopping ------------------------------------------------------------

    def start(self) -> list[str]:
        """Listen; the addresses, for the log. The accept loops and the watcher run in
        threads of their own."""
        addresses = []
        tcp = socket.create_server((self.host, self.port), reuse_port=False, backlog=128)
        self.port = tcp.getsockname()[1]
        self._listeners.append((tcp, False))
        addresses.append(f"{self.host}:{self.port}")
        if self.unix_dir is not None:
            path = self.unix_dir / f".s.PGSQL.{self.port}"
            path.unlink(missing_ok=True)
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.bind(str(path))
            os.chmod(path, 0o600)  # trust on it means trust in this OS user only
            unix.listen(128)
            self._listeners.append((unix, True))
            addresses.append(str(path))
        for sock, is_unix in self._listeners:
            self._thread(self._accept, sock, is_unix)
        self._thread(self._watch)
        return addresses

    def _thread(self, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True,
                             name=f"mzflow-serve-{target.__name__}")
        t.start()
        self._threads.append(t)

    def stop(self, wait: float = 5.0) -> None:
        """Stop listening, cancel what runs, hang up on every client."""
        self._stop.set()
        for sock, is_unix in self._listeners:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            except OSError:
                pass
            sock.close()
            if is_unix and self.unix_dir is not None:
                (self.unix_dir / f".s.PGSQL.{self.port}").unlink(missing_ok=True)
        with self._lock:
            clients = list(self._clients.values())
            wires = list(self._wires.values())
        for client in clients:
            client.connection.cancel()
        for wire in wires:
            wire.close()
        deadline = time.monotonic() + wait
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))

    def wait(self) -> None:
        self._stop.wait()

    # -- clients ----------------------------------------------------------------------------

    def _accept(self, listener: socket.socket, is_unix: bool) -> None:
        while not self._stop.is_set():
            try:
                sock, address = listener.accept()
            except OSError:
                return  # closed by stop()
            peer = "unix" if is_unix else str(address[0])
            if not is_unix:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            wire = SocketWire(sock, peer, is_unix, self.tls)
            refusal = None
            with self._lock:
                if len(self._wires) >= MAX_CONNECTIONS:
                    refusal = "sorry, too many clients already"
                elif not is_unix and self._logins.get(peer, 0) >= MAX_LOGINS_PER_PEER:
                    refusal = f"sorry, too many logins under way from {peer}"
                elif not is_unix:
                    self._logins[peer] = self._logins.get(peer, 0) + 1
                    wire.logging_in = True
            if refusal is not None:
                from mzflow.server import codec

                if "logins" in refusal:
                    log.warning("refused a connection from %s: %d logins under way",
                                peer, MAX_LOGINS_PER_PEER)
                wire.send(codec.error({"S": "FATAL", "V": "FATAL", "C": "53300",
                                       "M": refusal}))
                wire.close()
                continue
            t = threading.Thread(target=self._serve, args=(wire,), daemon=True,
                                 name=f"mzflow-serve-client-{peer}")
            t.start()

    def _serve(self, wire: SocketWire) -> None:
        me = threading.get_ident()
        with self._lock:
            self._wires[me] = wire
        wire.sock.settimeout(LOGIN_SECONDS)  # lifted once logged in (_register)
        try:
            Connection(wire, self.settings).run()
        finally:
            with self._lock:
                self._wires.pop(me, None)
                self._logged_in(wire)
            wire.close()

    def _logged_in(self, wire: SocketWire) -> None:
        """``wire``'s login is over (either way); under the lock."""
        if wire.logging_in:
            wire.logging_in = False
            left = self._logins.get(wire.peer, 1) - 1
            if left > 0:
                self._logins[wire.peer] = left
            else:
                self._logins.pop(wire.peer, None)

    def _register(self, connection: Connection) -> tuple[int, int]:
        wire = connection.wire
        assert isinstance(wire, SocketWire)
        wire.sock.settimeout(None)  # a session may idle as long as it likes
        client = _Client(connection, wire)
        with self._lock:
            pid = next(self._pids)
            self._clients[pid] = client
            self._logged_in(wire)
        connection.pid = pid
        return pid, client.secret

    def _unregister(self, connection: Connection) -> None:
        with self._lock:
            self._clients.pop(getattr(connection, "pid", -1), None)

    def cancel(self, pid: int, secret: int) -> None:
        """CancelRequest: the key must match, or nothing happens (and nothing is said)."""
        with self._lock:
            client = self._clients.get(pid)
        if client is None or not hmac.compare_digest(
                secret.to_bytes(4, "big", signed=True),
                client.secret.to_bytes(4, "big", signed=True)):
            log.info("a cancel request for an unknown key (process %d)", pid)
            return
        log.info("cancel request for process %d (role %s)", pid, client.connection.role)
        client.connection.cancel()

    def _watch(self) -> None:
        """Cancel the statement of every client that hung up (each client once)."""
        # Keyed by process id, never by fd: a closed client's fd is reused at once by the
        # next connection, which a set of fds would then never watch (CI lost a vanished
        # subscriber that way, its fd freshly freed by the test's previous connection).
        seen: set[int] = set()
        while not self._stop.is_set():
            with self._lock:
                clients = dict(self._clients)
            seen &= set(clients)
            watched = {c.wire.sock.fileno(): (pid, c) for pid, c in clients.items()
                       if pid not in seen and c.wire.sock.fileno() >= 0}
            poller = select.poll()
            for fd in watched:
                poller.register(fd, _HANGUP)
            try:
                events = poller.poll(500) if watched else []
            except OSError:
                events = []
            if not watched:
                self._stop.wait(0.5)
            for fd, _mask in events:
                if fd in watched:
                    pid, client = watched[fd]
                    seen.add(pid)
                    log.info("client of process %s hung up; cancelling its statement", pid)
                    client.connection.cancel()
