"""Recapture the client queries in this folder (not a test: run it by hand).

    PYTHONPATH=. python tests/clients/capture.py

It starts a throwaway PostgreSQL 15 with the catalog the tests build (CATALOG), then
- runs psql's describe commands with ``-E`` through a proxy that reports
  server_version 9.5.0 in ParameterStatus, as Materialize does, so psql sends its
  queries for a 9.5 server (``c.relhasoids`` no longer exists in PostgreSQL 15: the
  proxy answers for it with ``false``);
- runs SQLAlchemy's inspector with the dialect's server_version_info set to (9, 5),
  which is what ``version()`` gives it against Materialize, its parameters inlined.
OIDs in the captured text become ``{oid:<name>}``.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import threading
from pathlib import Path

HERE = Path(__file__).parent
CATALOG = [
    "CREATE SCHEMA s2",
    "CREATE TABLE t (a int NOT NULL, b text, c numeric(10,2))",
    "CREATE VIEW v AS SELECT a, b FROM t",
    "CREATE MATERIALIZED VIEW m AS SELECT a, count(*) FROM t GROUP BY a",
    "CREATE INDEX t_b ON t (b)",
    "CREATE TABLE s2.u (x bigint)",
    "COMMENT ON TABLE t IS 'the t'",
    "COMMENT ON COLUMN t.c IS 'the c'",
]
PSQL_COMMANDS = [r"\d", r"\dt", r"\dv", r"\dm", r"\di", r"\dn", r"\d t", r"\d+ t", r"\d v",
                 r"\d+ v", r"\d m", r"\d s2.u", r"\dt+", r"\dv+", r"\dm+", r"\di+", r"\dn+",
                 r"\l", r"\du", r"\df", r"\dT", r"\ds", r"\dx", r"\dp"]


def _frames(data: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    out = []
    while len(data) >= 5:
        n = struct.unpack("!I", data[1:5])[0]
        if len(data) < 1 + n:
            break
        out.append((data[:1], data[5:1 + n]))
        data = data[1 + n:]
    return out, data


def _relay(src: socket.socket, dst: socket.socket, edit: object) -> None:
    buf = b""
    try:
        while chunk := src.recv(65536):
            frames, buf = _frames(buf + chunk)
            dst.sendall(b"".join(t + struct.pack("!I", len(b) + 4) + b
                                 for t, b in (edit(t, b) for t, b in frames)))  # type: ignore[operator]
    except OSError:
        pass
    finally:
        dst.close()


def _server_edit(kind: bytes, body: bytes) -> tuple[bytes, bytes]:
    if kind == b"S" and body.startswith(b"server_version\x00"):
        return kind, b"server_version\x009.5.0\x00"
    return kind, body


def _client_edit(kind: bytes, body: bytes) -> tuple[bytes, bytes]:
    if kind == b"Q":
        return kind, body.replace(b"c.relhasoids", b"false")
    return kind, body


def proxy(upstream: int) -> int:
    """A port that forwards to ``upstream``, reporting server_version 9.5.0."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(client: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", upstream))
        first = client.recv(8)
        if struct.unpack("!I", first[4:8])[0] in (80877103, 80877104):  # SSL/GSS request
            client.sendall(b"N")
            first = client.recv(8)
        n = struct.unpack("!I", first[:4])[0]
        rest = b""
        while len(first) + len(rest) < n:
            rest += client.recv(n - len(first) - len(rest))
        up.sendall(first + rest)
        threading.Thread(target=_relay, args=(client, up, _client_edit), daemon=True).start()
        _relay(up, client, _server_edit)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


def _placeholders(sql: str, oids: dict[int, str]) -> str:
    for oid, name in oids.items():
        sql = re.sub(rf"\b{oid}\b", f"{{oid:{name}}}", sql)
    return sql


def main() -> None:
    import sqlalchemy as sa

    from mzflow_dev import pg_server

    server = pg_server.PgServer(pg_server.find_bindir())  # type: ignore[arg-type]
    server.start()
    try:
        url = server.url()
        with sa.create_engine(url).begin() as conn:
            for stmt in CATALOG:
                conn.exec_driver_sql(stmt)
            oids = {r[0]: r[1] for r in conn.exec_driver_sql(
                "SELECT c.oid, CASE WHEN n.nspname = 'public' THEN '' ELSE n.nspname || '.' "
                "END || c.relname FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname IN ('public', 's2')")}
        port = proxy(server.port)
        env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(port), PGUSER="postgres")
        out, seen = [], set()
        for cmd in PSQL_COMMANDS:
            text = subprocess.run(["psql", "-E", "-d", "postgres", "-c", cmd], env=env,
                                  capture_output=True, text=True, check=False).stdout
            found = re.findall(r"\*{9} QUERY \*{10}\n(.*?)\n\*{26}", text, re.S)
            for n, q in enumerate(found, 1):
                q = _placeholders(q.strip().rstrip(";"), oids)
                if q not in seen:
                    seen.add(q)
                    out.append(f"-- query: psql {cmd} ({n}/{len(found)})\n{q};\n")
        (HERE / "psql15.captured.sql").write_text("\n".join(out))
        engine = sa.create_engine(url)
        engine.dialect._get_server_version_info = lambda conn: (9, 5)  # type: ignore[attr-defined]
        label = ["connect"]
        sent: list[tuple[str, str]] = []

        @sa.event.listens_for(engine, "before_cursor_execute")
        def keep(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
            sent.append((label[0], cursor.mogrify(statement, parameters).decode()))

        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            for name, args in [("get_schema_names", ()), ("get_table_names", ()),
                               ("get_table_names", ("s2",)), ("get_view_names", ()),
                               ("get_materialized_view_names", ()), ("get_columns", ("t",)),
                               ("get_columns", ("v",)), ("get_columns", ("u", "s2")),
                               ("get_pk_constraint", ("t",)), ("get_foreign_keys", ("t",)),
                               ("get_indexes", ("t",)), ("get_unique_constraints", ("t",)),
                               ("get_check_constraints", ("t",)),
                               ("get_table_comment", ("t",)), ("get_view_definition", ("v",)),
                               ("has_table", ("t",)), ("has_schema", ("s2",))]:
                label[0] = f"{name}({', '.join(repr(a) for a in args)})"
                getattr(inspector, name)(*args)
        out, seen = [], set()
        for where, q in sent:
            q = _placeholders(q.strip().rstrip(";"), oids)
            if q not in seen:
                seen.add(q)
                out.append(f"-- query: sqlalchemy {where}\n{q};\n")
        (HERE / "sqlalchemy.captured.sql").write_text("\n".join(out))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
