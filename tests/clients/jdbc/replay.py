"""Replay a JDBC session file (this folder's ``*.sql``) on one libpq connection, as pgjdbc
puts it on the wire: a ``simple`` step is one Query message (it may hold several
statements); an ``extended`` step is Parse (unnamed, with the parameters' type OIDs),
Bind, Describe, Execute and Sync, with results in text format, which is what pgjdbc's
first executions of a statement send and read. psycopg's ``pgconn`` (libpq itself) does
both, so no driver rewrites the text.

A file is a header of ``-- startup: {json}`` (the startup packet's parameters) and
blocks, each ``-- query: label`` then ``-- key: value`` lines (``source``, ``note``,
``protocol``, ``params`` as a JSON list of ``[type, value]``, ``tolerate``: the SQLSTATE
the client catches and why, ``gap``: why mzflow does not answer it yet), then the
statement, ending with one ``;`` that is not sent.
``{nspoid:name}`` and ``{reloid:schema.name}`` stand for OIDs a client read earlier.
"""

from __future__ import annotations

import json
import re
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
TYPE_OIDS = {"varchar": 1043, "int4": 23, "int8": 20}


@dataclass
class Step:
    label: str
    sql: str
    protocol: str = "extended"
    params: list[tuple[str, Any]] = field(default_factory=list)
    tolerate: str | None = None  # the SQLSTATE a client catches, then why
    source: str = ""
    gap: str | None = None  # a known gap: why mzflow fails it


@dataclass
class Session:
    name: str
    startup: dict[str, str]
    steps: list[Step]


@dataclass
class Answer:
    """What one step got back: the last result's columns, type OIDs and text rows, or
    the error's SQLSTATE and message."""
    columns: list[str] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    rows: list[tuple[str | None, ...]] = field(default_factory=list)
    sqlstate: str | None = None
    message: str | None = None

    def column(self, name: str) -> list[str | None]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]


def load(name: str) -> Session:
    text = (HERE / f"{name}.sql").read_text()
    head, *blocks = re.split(r"^-- query: ", text, flags=re.M)
    startup = json.loads(re.search(r"^-- startup: (.*)$", head, re.M).group(1))  # type: ignore[union-attr]
    steps = []
    for block in blocks:
        label, _, rest = block.partition("\n")
        meta: dict[str, str] = {}
        lines = rest.split("\n")
        while lines and lines[0].startswith("-- "):
            key, _, value = lines.pop(0)[3:].partition(": ")
            meta[key] = value
        sql = "\n".join(lines).rstrip()
        assert sql.endswith(";"), label
        steps.append(Step(label.strip(), sql[:-1], meta.get("protocol", "extended"),
                          [tuple(p) for p in json.loads(meta.get("params", "[]"))],  # type: ignore[misc]
                          meta.get("tolerate"), meta.get("source", ""), meta.get("gap")))
    return Session(name, startup, steps)


def with_oids(sql: str, oids: dict[str, int]) -> str:
    return re.sub(r"\{(?:nspoid|reloid):([\w.]+)\}", lambda m: str(oids[m.group(1)]), sql)


def run(pgconn: Any, step: Step, oids: dict[str, int]) -> Answer:
    """``step`` on ``pgconn`` (a psycopg ``pq.PGconn``), its parameters typed as pgjdbc
    types them."""
    from psycopg import pq

    sql = with_oids(step.sql, oids).encode()
    if step.protocol == "simple":
        pgconn.send_query(sql)
    else:
        values = [with_oids(str(v), oids).encode() for _, v in step.params]
        types = [TYPE_OIDS[t] for t, _ in step.params]
        pgconn.send_query_params(sql, values, param_types=types, result_format=0)
    answer = Answer()
    for res in _results(pgconn):
        if res.status == pq.ExecStatus.FATAL_ERROR:
            answer.sqlstate = (res.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
            answer.message = (res.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode()
        elif res.status == pq.ExecStatus.TUPLES_OK and answer.sqlstate is None:
            answer.columns = [(res.fname(i) or b"").decode() for i in range(res.nfields)]
            answer.types = [res.ftype(i) for i in range(res.nfields)]
            answer.rows = [tuple(None if (v := res.get_value(r, c)) is None else v.decode()
                                 for c in range(res.nfields)) for r in range(res.ntuples)]
    return answer


def _results(pgconn: Any) -> list[Any]:
    """The results of what was sent, waited for without blocking in libpq (which would
    hold the GIL: the tests' server runs in the same process)."""
    from psycopg import generators, waiting

    return list(waiting.wait(generators.execute(pgconn), pgconn.socket))


def object_oids(pgconn: Any, schema: str) -> dict[str, int]:
    """The OIDs of ``schema`` and its relations, as a client reads them."""
    sql = ("SELECT n.nspname, n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1 "
           "UNION ALL SELECT n.nspname || '.' || c.relname, c.oid FROM pg_catalog.pg_class c "
           "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1")
    pgconn.send_query_params(sql.encode(), [schema.encode()],
                             param_types=[TYPE_OIDS["varchar"]])
    res = _results(pgconn)[-1]
    return {res.get_value(r, 0).decode(): int(res.get_value(r, 1).decode())
            for r in range(res.ntuples)}


def startup(host: str, port: int, params: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """A StartupMessage with exactly ``params`` (what pgjdbc puts in its startup packet,
    which libpq's keywords cannot all say), and the server's messages up to
    ReadyForQuery or an ErrorResponse, for a server that trusts the login."""
    body = struct.pack("!I", 196608) + b"".join(
        k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items()) + b"\0"
    out: list[tuple[bytes, bytes]] = []
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(struct.pack("!I", len(body) + 4) + body)
        data = b""
        while not out or out[-1][0] not in (b"Z", b"E"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            while len(data) >= 5 and len(data) >= 1 + struct.unpack("!I", data[1:5])[0]:
                n = struct.unpack("!I", data[1:5])[0]
                out.append((data[:1], data[5:1 + n]))
                data = data[1 + n:]
        sock.sendall(b"X\0\0\0\4")
    return out
