"""Clients over the wire (issue 39): ``mzflow serve`` as a soak process, and a worker
that connects through it with psycopg as three roles.

* ``server``: becomes ``python -m mzflow.cli --home <home> serve --port <port>`` (an
  exec, so the coordinator's kills, disk-full faults and its SIGTERM at the end reach
  the real server). The port is a free loopback port the coordinator picked once.
* ``pgclient``: a seeded mix (``op(seed, n)``) of reads by ``soak_reader`` (granted
  SELECT on t2 and the plain view ``v_wire`` over t1, not on t1), ``AS OF`` a time it
  read from ``mz_frontiers`` or plain between two such reads; writes by ``soak_writer``
  (granted INSERT on ``tw`` only): one INSERT, a transaction of two, or COPY FROM
  STDIN, each row keyed ``(pgclient, n)`` by its id; and attempts each role was not
  granted (``soak_nobody`` was granted nothing), which must fail with 42501.

A write is not retried (the wire has no idempotency key): one whose answer was lost is
uncertain, and the checker (wire_check.py) holds it to at most once, all or nothing.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from mzflow_dev.soak.journal import Journal, records
from mzflow_dev.soak.worker import _norm, _stopping

WIRE_TABLE = "tw"
WIRE_COLS = "id int, part int, note text"
VIEW = "v_wire"
VIEW_SELECT = "SELECT k, count(*) AS n, sum(v) AS sv FROM t1 GROUP BY k"
# role -> (password, what it is granted). soak_nobody holds only what PUBLIC holds.
LOGINS = {
    "soak_reader": ("reader pw 1", [f"GRANT SELECT ON t2, {VIEW} TO soak_reader"]),
    "soak_writer": ("writer pw 2", [f"GRANT INSERT ON {WIRE_TABLE} TO soak_writer"]),
    "soak_nobody": ("nobody pw 3", []),
}
# The privileges setup grants, as SHOW PRIVILEGES FOR <role> lists them (name, kind,
# privilege): the final check finds exactly these (a denied GRANT added none).
GRANTED = {"soak_reader": {("t2", "table", "SELECT"), (VIEW, "view", "SELECT")},
           "soak_writer": {(WIRE_TABLE, "table", "INSERT")}, "soak_nobody": set()}
# Reads the reader may make: (its SQL, DuckDB's for the same answer). {k}: a key 0-9.
_V = f"({VIEW_SELECT}) AS {VIEW}"
READS = (
    ("SELECT k, name, w FROM t2 WHERE k = {k}", "SELECT k, name, w FROM t2 WHERE k = {k}"),
    ("SELECT name, count(*), sum(w) FROM t2 GROUP BY name",
     "SELECT name, count(*), sum(w) FROM t2 GROUP BY name"),
    (f"SELECT k, n, sv FROM {VIEW}", f"SELECT k, n, sv FROM {_V}"),
    (f"SELECT k, n, sv FROM {VIEW} WHERE n > 2", f"SELECT k, n, sv FROM {_V} WHERE n > 2"),
    (f"SELECT k, n FROM {VIEW} WHERE k = {{k}}", f"SELECT k, n FROM {_V} WHERE k = {{k}}"),
    # numeric results (sums of bigints) over the view a projection of t1 answers
    (f"SELECT sum(n), sum(sv) FROM {VIEW}", f"SELECT sum(n), sum(sv) FROM {_V}"),
)
# Each is answered in process inside the server (a JVM there costs 30-50 s to start,
# again after each kill), routed to t1's projection or not: tests/test_soak_wire.py and
# tests/test_routed_reads_in_process.py.
DENIED_ID = 900_000_000  # + n: a denied INSERT's row, which must never appear
# What each role was not granted: (role, SQL); {id}: DENIED_ID + n, {n}: n, {k}: a key.
DENIALS = (
    ("soak_nobody", "SELECT * FROM t1"),
    ("soak_nobody", f"SELECT k, n FROM {VIEW}"),
    ("soak_nobody", "SELECT count(*) FROM t2"),
    ("soak_nobody", f"INSERT INTO {WIRE_TABLE} VALUES ({{id}}, 0, 'denied')"),
    ("soak_nobody", "CREATE TABLE denied_{n} (a int)"),
    ("soak_nobody", "DROP TABLE t2"),
    ("soak_nobody", "GRANT SELECT ON t1 TO soak_nobody"),
    ("soak_nobody", f"COPY {WIRE_TABLE} FROM '/etc/hostname'"),
    ("soak_reader", "SELECT * FROM t1"),
    ("soak_reader", f"SELECT id FROM {WIRE_TABLE}"),
    ("soak_reader", "INSERT INTO t2 VALUES ({k}, 'denied', {id})"),
    ("soak_reader", "UPDATE t2 SET w = 0 WHERE k = {k}"),
    ("soak_reader", "DELETE FROM t2 WHERE k = {k}"),
    ("soak_writer", f"SELECT * FROM {WIRE_TABLE}"),
    ("soak_writer", f"DELETE FROM {WIRE_TABLE} WHERE part = 0"),
    ("soak_writer", f"UPDATE {WIRE_TABLE} SET note = 'denied'"),
    ("soak_writer", "INSERT INTO t1 VALUES ({id}, 0, 0, 'denied')"),
    ("soak_writer", "ALTER TABLE t1 ADD COLUMN denied_{n} int"),
)
DENIED_NAME = "denied_"  # no object or column named so may ever exist


def setup_sql() -> list[str]:
    """After ops.setup_sql: the table the writer role writes, the view the reader role
    reads, the roles and their grants."""
    out = [f"CREATE TABLE {WIRE_TABLE} ({WIRE_COLS})", f"CREATE VIEW {VIEW} AS {VIEW_SELECT}"]
    for role, (password, grants) in LOGINS.items():
        out.append(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        out += grants
    return out


@dataclass
class Op:
    kind: str  # read_as_of, read_plain, write, deny
    role: str
    sql: str = ""
    oracle: str = ""
    lag: int = 0  # read_as_of: ms before the newest complete time
    how: str = ""  # write: insert, txn, copy
    rows: list[tuple[int, int, str]] = field(default_factory=list)  # write: tw's rows


def op(seed: int, n: int) -> Op:
    """The client's ``n``-th operation, a pure function of ``(seed, n)``."""
    r = random.Random(f"{seed}/pgclient/{n}")
    choice = r.random()
    if choice < 0.45:
        k = r.randint(0, 9)
        sql, oracle = (s.format(k=k) for s in r.choice(READS))
        if choice < 0.35:
            return Op("read_as_of", "soak_reader", sql, oracle, lag=r.randint(0, 3000))
        return Op("read_plain", "soak_reader", sql, oracle)
    if choice < 0.75:
        how = r.choice(("insert", "insert", "txn", "copy"))
        rows = [(n * 10 + j, j if how == "txn" else 0, r.choice(("a", "b", "it's")))
                for j in range(2 if how == "txn" else r.randint(1, 4))]
        return Op("write", "soak_writer", how=how, rows=rows)
    role, sql = r.choice(DENIALS)
    return Op("deny", role, sql.format(id=DENIED_ID + n, n=n, k=r.randint(0, 9)))


def free_port() -> int:
    """A loopback port free now (the server binds it with SO_REUSEADDR on restarts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the processes ---------------------------------------------------------------------

def server(args: dict[str, Any], conn: Any, j: Journal) -> None:
    """Become ``mzflow serve`` on the soak's home (SIGXFSZ stays ignored across exec)."""
    conn.close()
    j.write(ev="serve", port=args["port"])
    os.execv(sys.executable, [sys.executable, "-m", "mzflow.cli", "--home", args["home"],
                              "serve", "--port", str(args["port"])])


class Clients:
    """One autocommit connection per role, opened on first use and again after a loss."""

    def __init__(self, port: int):
        self.port = port
        self.conns: dict[str, Any] = {}

    def get(self, role: str) -> Any:
        import psycopg

        if role not in self.conns or self.conns[role].closed:
            conn = psycopg.connect(host="127.0.0.1", port=self.port, dbname="materialize",
                                   user=role, password=LOGINS[role][0], autocommit=True,
                                   connect_timeout=10)
            conn.prepare_threshold = None  # no server-side prepares: each text as sent
            self.conns[role] = conn
        return self.conns[role]

    def lost(self, role: str) -> None:
        conn = self.conns.pop(role, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already gone
                pass


def _code(exc: BaseException) -> str | None:
    """The SQLSTATE the server answered with; None: no answer (the connection went)."""
    return getattr(exc, "sqlstate", None)


def _upper(c: Any) -> int:
    row = c.execute("SELECT max(write_frontier) FROM mz_frontiers").fetchone()
    return int(row[0])


def pgclient(args: dict[str, Any], conn: Any, j: Journal) -> None:
    conn.close()  # everything goes through the server
    clients = Clients(int(args["port"]))
    n = max((rec.get("n", 0) for rec in records(j.path)), default=0) + 1
    pace = random.Random(f"{args['seed']}/pgclient/pace/{os.getpid()}")
    while not _stopping(args):
        o = op(args["seed"], n)
        try:
            run(clients, j, n, o)
        except Exception as exc:  # noqa: BLE001 - the connection went: the server is down
            clients.lost(o.role)
            j.write(ev="wire_down", n=n, role=o.role, type=type(exc).__name__,
                    msg=str(exc)[:200])
            time.sleep(0.5)
        n += 1
        time.sleep(pace.uniform(0.0, float(args.get("wire_pause", 0.5))))


def run(clients: Clients, j: Journal, n: int, o: Op) -> None:
    """One operation, journaled; an error without a SQLSTATE propagates (a lost
    connection), after the journal says what is uncertain."""
    import psycopg

    c = clients.get(o.role)
    if o.kind == "write":
        j.write(ev="wire_write", n=n, how=o.how, rows=o.rows)
        try:
            _write(c, o)
        except psycopg.Error as exc:
            j.write(ev="wire_write_error", n=n, code=_code(exc), msg=str(exc)[:300])
            if _code(exc) is None:
                raise
            return
        j.write(ev="wire_write_done", n=n)
    elif o.kind == "deny":
        try:
            c.execute(o.sql)
        except psycopg.Error as exc:
            code = _code(exc)
            j.write(ev="denial", n=n, role=o.role, sql=o.sql, code=code,
                    msg=str(exc)[:300], outcome="refused" if code else "lost")
            if code is None:
                raise
            return
        j.write(ev="denial", n=n, role=o.role, sql=o.sql, code=None, outcome="allowed")
    else:
        try:
            before = _upper(c)
            at = before - 1 - o.lag if o.kind == "read_as_of" else None
            cur = c.execute(o.sql if at is None else f"{o.sql} AS OF {at}")
            rows = [[_norm(v) for v in row] for row in cur.fetchall()]
            after = _upper(c)
        except psycopg.Error as exc:
            j.write(ev="wire_read_error", n=n, sql=o.sql, code=_code(exc), msg=str(exc)[:300])
            if _code(exc) is None:
                raise
            return
        j.write(ev="wire_read", n=n, sql=o.sql, oracle=o.oracle, at=at, before=before,
                after=after, rows=rows)


def _write(c: Any, o: Op) -> None:
    values = ", ".join(f"({i}, {p}, '{s.replace(chr(39), chr(39) * 2)}')" for i, p, s in o.rows)
    if o.how == "insert":
        c.execute(f"INSERT INTO {WIRE_TABLE} VALUES {values}")
    elif o.how == "txn":  # Materialize's write transaction: INSERTs, committed together
        with c.transaction():
            for i, p, s in o.rows:
                c.execute(f"INSERT INTO {WIRE_TABLE} VALUES (%s, %s, %s)", (i, p, s))
    else:
        with c.cursor() as cur, cur.copy(f"COPY {WIRE_TABLE} FROM STDIN") as copy:
            for row in o.rows:
                copy.write_row(row)


ROLES = {"server": server, "pgclient": pgclient}  # worker.py's process roles
