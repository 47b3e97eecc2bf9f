"""CPU time per statement in one process, for a system-table SELECT: what bounds how
many clients one `mzflow serve` answers (issue 35's 50 clients).

    .venv/bin/python bench/statement_cost.py [--n 2000] [--profile]

Measured with ``time.process_time`` (CPU of this process), so a busy machine slows the
clock but not these figures much. Each line is one path, after a warm-up:

- ``execute``: ``Connection.execute(sql)`` as the superuser ``materialize``;
- ``execute as a role``: the same as a role that is no superuser (privilege checks);
- ``wire, prepared``: the protocol over bytes in memory, as psycopg runs a statement it
  has prepared (Bind, Describe portal, Execute, Sync);
- ``wire, unprepared``: as psycopg's first executions (Parse, Bind, Describe, Execute,
  Sync); ``wire, simple``: a Query message (psql);
- ``login``: opening a server session (trusted: SCRAM's exchange not included) and its
  startup parameters.

``--profile prepared|unprepared|simple`` prints cProfile's top functions of that path. Baseline:
the figures before the statement caches, in bench/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import mzflow
from mzflow import config
from mzflow.server import codec
from mzflow.server.backend import Closed
from mzflow.server.login import Settings
from mzflow.server.protocol import Connection
from mzflow.server.statements import open_session

SQL = "SELECT name FROM mz_clusters"


class _Wire:
    """A client that sent everything up front; what the server sends is counted."""

    peer = "bench"
    unix = True
    tls_available = False
    tls_active = False

    def __init__(self, data: bytes):
        self.input = memoryview(data)
        self.at = 0
        self.sent = 0

    def recv(self, n: int) -> bytes:
        if self.at + n > len(self.input):
            raise Closed
        self.at += n
        return bytes(self.input[self.at - n:self.at])

    def send(self, data: bytes) -> None:
        self.sent += len(data)

    def start_tls(self) -> None:
        raise Closed

    def sleep(self, seconds: float) -> None:
        pass


def _startup() -> bytes:
    body = struct.pack("!i", codec.PROTOCOL_3) + codec.cstr("user") + codec.cstr(
        "materialize") + b"\0"
    return struct.pack("!i", len(body) + 4) + body


def _extended(sql: str, prepared: bool) -> bytes:
    parse = codec.message(b"P", codec.cstr("s") + codec.cstr(sql) + struct.pack("!h", 0))
    bind = codec.message(b"B", codec.cstr("") + codec.cstr("s") + struct.pack("!hhh", 0, 0, 0))
    rest = (bind + codec.message(b"D", b"P" + codec.cstr("")) + codec.message(
        b"E", codec.cstr("") + struct.pack("!i", 0)) + codec.message(b"S"))
    close = codec.message(b"C", b"S" + codec.cstr("s")) + codec.message(b"S")
    return rest if prepared else parse + rest + close


def _wire_run(cfg: config.Config, per_statement: bytes, n: int, *, prepare: bytes = b""
              ) -> Callable[[], None]:
    settings = Settings(open_backend=lambda role, params: open_session(cfg, role, params),
                        verifiers=lambda name: None, trust=True)
    data = _startup() + prepare + per_statement * n + codec.message(b"X")

    def run() -> None:
        Connection(_Wire(data), settings).run()
    return run


def _cpu_ms(run: Callable[[], None], n: int, overhead: float = 0.0) -> float:
    t = time.process_time()
    run()
    return ((time.process_time() - t) * 1000 - overhead) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="statements per path")
    ap.add_argument("--profile", choices=("prepared", "unprepared", "simple"),
                    help="cProfile one wire path")
    args = ap.parse_args()
    n = args.n
    home = Path(tempfile.mkdtemp(prefix="mzflow-statement-cost-"))
    with mzflow.connect(str(home)) as admin:
        admin.execute("CREATE ROLE reader LOGIN")
    cfg = config.load(str(home))
    figures: dict[str, float] = {}
    with mzflow.connect(str(home)) as conn, mzflow.connect(str(home), role="reader") as role:
        for name, c in (("execute", conn), ("execute as a role", role)):
            for _ in range(50):
                c.execute(SQL)

            def loop(c: mzflow.Connection = c) -> None:
                for _ in range(n):
                    c.execute(SQL)
            figures[name] = _cpu_ms(loop, n)

    def login() -> None:
        for _ in range(n // 10):
            s = open_session(cfg, "materialize", {"user": "materialize"})
            s.startup({"user": "materialize"})
            s.parameters()
            s.close()
    login()
    figures["login"] = _cpu_ms(login, n // 10)
    # A connection's own login is measured alone and taken off the wire paths.
    one_login = _cpu_ms(_wire_run(cfg, b"", 0), 1)
    prepare = codec.message(b"P", codec.cstr("s") + codec.cstr(SQL) + struct.pack(
        "!h", 0)) + codec.message(b"S")
    paths = {
        "wire, prepared": _wire_run(cfg, _extended(SQL, True), n, prepare=prepare),
        "wire, unprepared": _wire_run(cfg, _extended(SQL, False), n),
        "wire, simple": _wire_run(cfg, codec.message(b"Q", codec.cstr(SQL)), n),
    }
    for name, run in paths.items():
        run()  # warm
        figures[name] = _cpu_ms(run, n, one_login)
    for name, ms in figures.items():
        unit = "login" if name == "login" else "statement"
        print(f"{name:20s} {ms * 1000:8.0f} µs CPU per {unit}")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(paths[f"wire, {args.profile}"])
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
