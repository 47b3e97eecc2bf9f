"""Transactions as Materialize defines them: read-only, insert-only, or one statement.

Outside ``BEGIN … COMMIT`` every statement commits on its own. Inside, what the first
statements do decides what the rest may do (Materialize's ``TransactionOps``):

- **reads**: SELECTs, all at one time, the first one's (a read hold keeps the tables
  and indexes readable at it until the end). A SELECT of constants (``SELECT 1``) does
  not fix the kind; ``… AS OF`` reads at its own time and fixes nothing either.
- **a subscription**: one SUBSCRIBE (through ``DECLARE … CURSOR FOR SUBSCRIBE``), the
  only read of its transaction.
- **writes**: constant ``INSERT … VALUES``, buffered and committed at COMMIT, one Delta
  commit per table (each table's rows atomically; Delta has no commit across tables,
  so a transaction that inserted into two tables commits them one after the other).
  ROLLBACK discards them. A SELECT of constants is still allowed.
- **one statement**: a DDL statement, run at COMMIT (its command tag answers at once);
  or several ``ALTER … SWAP``, run at COMMIT in one catalog transaction.

Anything else is refused with Materialize's error and SQLSTATE; an error fails the
transaction (``E``) until ROLLBACK or COMMIT (which then rolls back).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from sqlglot import exp

from mzflow import config
from mzflow.catalog import names
from mzflow.catalog.model import INDEX, TABLE, Snapshot
from mzflow.catalog.store import Store
from mzflow.errors import Error, Unsupported
from mzflow.read import holds
from mzflow.session import subscribe as subscribe_mod
from mzflow.session.cursors import Cursors, InvalidCursorName, SelectCursor, SubscribeCursor
from mzflow.session.result import Result
from mzflow.session.select import Selects
from mzflow.session.writes import TableWrites
from mzflow.sql import ast, session_ast
from mzflow.sql.parse import DIALECT

log = logging.getLogger("mzflow.transactions")

Dispatch = Callable[[exp.Expr], Result]
# The columns and types of a query, bound now (session/describe.py).
Describe = Callable[[exp.Expr], tuple[list[str], list[str]]]
Guard = Callable[[exp.Expr], AbstractContextManager[Snapshot | None]]

READ_ONLY_DETAIL = "SELECT queries cannot be combined with other query types, including SUBSCRIBE."


class InvalidTransactionState(Error):
    code = "25000"  # invalid_transaction_state


class ActiveSqlTransaction(Error):
    code = "25001"  # active_sql_transaction


class ReadOnlySqlTransaction(Error):
    code = "25006"  # read_only_sql_transaction


class NoActiveSqlTransaction(Error):
    code = "25P01"  # no_active_sql_transaction


class InvalidSavepoint(Error):
    code = "3B001"  # invalid_savepoint_specification


class InFailedSqlTransaction(Error):
    code = "25P02"  # in_failed_sql_transaction


def _read_only() -> Error:
    return ReadOnlySqlTransaction("transaction in read-only mode", detail=READ_ONLY_DETAIL)


def _write_only() -> Error:
    return InvalidTransactionState("transaction in write-only mode")


def _subscribe_only() -> Error:
    return InvalidTransactionState("SUBSCRIBE in transactions must be the only read statement")


def _single() -> Error:
    return InvalidTransactionState("this transaction can only execute a single statement")


def _tag_of_view(stmt: exp.Expr) -> str:
    return "CREATE MATERIALIZED VIEW" if stmt.args.get("materialized") else "CREATE VIEW"


# Statements a transaction may hold as its one statement, run at COMMIT: the command
# tag each answers with at once (Materialize's "single-statement transaction"). A kind
# not here cannot run inside a transaction block.
DEFERRABLE: dict[type, Callable[[exp.Expr], str]] = {
    ast.CreateCluster: lambda s: "CREATE CLUSTER",
    ast.AlterCluster: lambda s: "ALTER CLUSTER",
    ast.CreateTable: lambda s: "CREATE TABLE",
    ast.CreateView: _tag_of_view,
    ast.CreateIndex: lambda s: "CREATE INDEX",
    ast.CreateSink: lambda s: "CREATE SINK",
    ast.DropObjects: lambda s: f"DROP {s.args['kind']}",
    ast.RenameObject: lambda s: f"ALTER {s.args['kind']}",
    ast.AlterProjection: lambda s: "ALTER TABLE",
    ast.AlterExpectation: lambda s: "ALTER TABLE",
    exp.Alter: lambda s: "ALTER TABLE",
    exp.Comment: lambda s: "COMMENT",
}
# Statements any transaction may run, whatever its kind.
_ANYTIME = (ast.Show, ast.Explain)


@dataclass
class Transaction:
    access: str | None = None  # READ ONLY, READ WRITE, or as its statements decide
    ops: str = "none"  # none | reads | subscribe | writes | single | swaps
    timed_reads: bool = False  # a read so far read stored data (at read_at)
    read_at: int | None = None
    hold: holds.ReadHold | None = None
    inserts: list[exp.Insert] = field(default_factory=list)
    single: exp.Expr | None = None
    swaps: list[ast.SwapObject] = field(default_factory=list)
    failed: bool = False
    cursors: Cursors = field(default_factory=Cursors)
    # (name, INSERTs buffered when it was set): SAVEPOINT, emulated for clients that
    # nest their own work in one (psycopg's transaction() inside SQLAlchemy's).
    savepoints: list[tuple[str, int]] = field(default_factory=list)


class Transactions:
    """One connection's transaction state; ``run`` passes every statement through it."""

    def __init__(self, store: Store, cfg: config.Config, selects: Selects,
                 writes: TableWrites, guard: Guard, describe: Describe):
        """``guard(stmt)``: the block runs as ``stmt``'s (its role's privileges checked,
        names resolved by the session's search_path); it yields the snapshot it checked
        on, if any. What a transaction runs itself (reads, cursors, buffered INSERTs)
        goes through it, as ``dispatch`` does for the rest."""
        self.store = store
        self.guard = guard
        self.config = cfg
        self.selects = selects
        self.writes = writes
        self.describe = describe
        self.current: Transaction | None = None

    @property
    def status(self) -> str:
        """ReadyForQuery's byte: ``I`` idle, ``T`` in a transaction, ``E`` failed."""
        if self.current is None:
            return "I"
        return "E" if self.current.failed else "T"

    def run(self, stmt: exp.Expr, dispatch: Dispatch) -> Result:
        txn = self.current
        if isinstance(stmt, session_ast.EndTransaction):
            return self._end(stmt, dispatch)
        if isinstance(stmt, session_ast.Savepoint):
            return self._savepoint(txn, stmt)
        if txn is None:
            if isinstance(stmt, session_ast.StartTransaction):
                self.current = Transaction(access=stmt.args.get("access"))
                return Result(status="BEGIN")
            if isinstance(stmt, session_ast.Declare):
                raise NoActiveSqlTransaction("DECLARE CURSOR can only be used in transaction "
                                             "blocks")
            if isinstance(stmt, session_ast.Fetch | session_ast.Close) and stmt.this:
                raise _no_cursor(stmt.this.name)
            if isinstance(stmt, session_ast.Close):
                return Result(status="CLOSE CURSOR")
            return dispatch(stmt)
        self.check_not_failed(stmt)
        try:
            return self._in_transaction(txn, stmt, dispatch)
        except BaseException:
            txn.failed = True
            raise

    def _savepoint(self, txn: Transaction | None, stmt: session_ast.Savepoint) -> Result:
        """Savepoints as PostgreSQL has them, over what a transaction here can hold: a
        ROLLBACK TO drops the INSERTs buffered since, and ends a failure."""
        kind, name = stmt.args["kind"], stmt.this.name
        if txn is None:
            what = "SAVEPOINT" if kind == "SAVEPOINT" else f"{kind.split()[0]} SAVEPOINT"
            raise NoActiveSqlTransaction(f"{what} can only be used in transaction blocks")
        if kind != "ROLLBACK TO":
            self.check_not_failed(stmt)
        if kind == "SAVEPOINT":
            txn.savepoints.append((name, len(txn.inserts)))
            return Result(status="SAVEPOINT")
        at = next((i for i in range(len(txn.savepoints) - 1, -1, -1)
                   if txn.savepoints[i][0] == name), None)
        if at is None:
            txn.failed = True
            raise InvalidSavepoint(f'savepoint "{name}" does not exist')
        if kind == "RELEASE":
            del txn.savepoints[at:]
            return Result(status="RELEASE")
        del txn.savepoints[at + 1:]
        del txn.inserts[txn.savepoints[at][1]:]
        txn.failed = False
        return Result(status="ROLLBACK")

    def check_not_failed(self, stmt: exp.Expr) -> None:
        """A failed transaction takes nothing but its end (PostgreSQL's 25P02)."""
        if self.current is not None and self.current.failed and not isinstance(
                stmt, session_ast.EndTransaction):
            raise InFailedSqlTransaction("current transaction is aborted, commands ignored "
                                         "until end of transaction block")

    def fail(self) -> None:
        """An error outside any statement (a syntax error) fails the transaction too."""
        if self.current is not None:
            self.current.failed = True

    def close(self) -> None:
        """The connection closes: its transaction rolls back."""
        if self.current is not None:
            self._finish(self.current)
            self.current = None

    def cursor_description(self, name: str) -> tuple[list[str], list[str]]:
        if self.current is None:
            raise _no_cursor(name)
        cursor = self.current.cursors.get(name)
        return list(cursor.columns), list(cursor.types)

    # -- inside a transaction ------------------------------------------------------

    def _in_transaction(self, txn: Transaction, stmt: exp.Expr, dispatch: Dispatch
                        ) -> Result:
        if isinstance(stmt, session_ast.StartTransaction):
            access = stmt.args.get("access")
            if access == "READ WRITE" and txn.access == "READ ONLY" and txn.ops != "none":
                raise InvalidTransactionState("transaction read-write mode must be set "
                                              "before any query")
            txn.access = access or txn.access
            return Result(status="BEGIN", notices=["there is already a transaction in "
                                                   "progress"])
        if isinstance(stmt, session_ast.Declare):
            return txn.cursors.declare(stmt.this.name, self._cursor(txn, stmt))
        if isinstance(stmt, session_ast.Fetch):
            return txn.cursors.fetch(stmt)
        if isinstance(stmt, session_ast.Close):
            return txn.cursors.close(stmt)
        if isinstance(stmt, ast.SetVariable | ast.ResetVariable):
            self._check_set(txn, stmt)
            return dispatch(stmt)
        if isinstance(stmt, _ANYTIME):
            return dispatch(stmt)
        if isinstance(stmt, exp.Query):
            return self._select(txn, stmt)
        if isinstance(stmt, ast.AsOf):
            if txn.ops == "writes":
                raise _write_only()
            return dispatch(stmt)  # its own time: pins nothing
        if isinstance(stmt, ast.Subscribe):
            self._subscribing(txn, stmt)
            return dispatch(stmt)
        if isinstance(stmt, exp.Insert):
            with self.guard(stmt) as snap:
                count = self.writes.constant_rows(stmt)
                if count is not None:
                    self._writing(txn)
                    # Named as the session's search_path names it now: COMMIT inserts.
                    txn.inserts.append(_qualified(stmt, snap or self.store.snapshot()))
                    return Result(status=f"INSERT 0 {count}")
        if isinstance(stmt, ast.SwapObject):
            # Several swaps may share a transaction, run together at COMMIT (Materialize
            # allows it: it is how blue/green deployments cut over atomically).
            if txn.ops != "swaps":
                self._adding(txn, "single")
            txn.ops = "swaps"
            txn.swaps.append(stmt)
            return Result(status=f"ALTER {stmt.args['kind']}")
        tag = DEFERRABLE.get(type(stmt))
        if tag is None:
            raise ActiveSqlTransaction(f"{_text(stmt)} cannot be run inside a transaction "
                                       "block")
        self._adding(txn, "single")
        txn.ops, txn.single = "single", stmt
        return Result(status=tag(stmt))

    def _adding(self, txn: Transaction, kind: str) -> None:
        """May ``kind`` join what the transaction did so far? (Materialize's add_ops.)"""
        if txn.ops == "none":
            if kind == "writes" and txn.access == "READ ONLY":
                raise _read_only()
            return
        if txn.ops == "reads":
            if kind == "reads" or (kind == "writes" and not txn.timed_reads):
                return
            raise _read_only()
        if txn.ops == "subscribe":
            raise _subscribe_only()
        if txn.ops == "writes":
            if kind == "writes" or kind == "constant":
                return
            raise _write_only()
        raise _single()

    def _select(self, txn: Transaction, stmt: exp.Query) -> Result:
        constant = not _reads_relations(stmt)
        self._adding(txn, "constant" if constant and txn.ops == "writes" else "reads")
        with self.guard(stmt) as snap:
            if txn.ops == "writes":
                return self.selects.select(stmt, snap=snap)
            txn.ops = "reads"
            result = self.selects.select(stmt, at=txn.read_at, snap=snap)
        txn.timed_reads = txn.timed_reads or not constant
        if txn.read_at is None and self.selects.last_at is not None:
            self._pin(txn, self.selects.last_at)
        return result

    def _pin(self, txn: Transaction, at: int) -> None:
        """Every later read of the transaction reads at ``at``: hold what it may read
        (its tables and indexes: Materialize's time domain) until the end."""
        txn.read_at = at
        snap = self.store.snapshot()
        objects = [i for i in snap.items if i.kind in (TABLE, INDEX)]
        try:
            txn.hold = holds.acquire(self.store, objects, at, "transaction",
                                     self.config.read_hold_lease_seconds)
        except Error as e:  # each later read checks its own inputs' since
            log.warning("a read-only transaction could not hold its read time %d: %s", at, e)

    def _writing(self, txn: Transaction) -> None:
        self._adding(txn, "writes")
        txn.ops = "writes"

    def _subscribing(self, txn: Transaction, stmt: ast.Subscribe) -> None:
        if stmt.args.get("as_of") is not None:
            if txn.ops == "writes":  # at its own time: pins nothing, but reads
                raise _write_only()
            return
        self._adding(txn, "subscribe")
        txn.ops = "subscribe"

    def _check_set(self, txn: Transaction, stmt: ast.SetVariable | ast.ResetVariable) -> None:
        name = stmt.this.name.lower()
        if txn.ops == "none" or stmt.args.get("system"):
            return
        if name == "cluster":
            raise ActiveSqlTransaction("SET cluster cannot be called in an active transaction")
        if name == "transaction_isolation":
            raise ActiveSqlTransaction("SET TRANSACTION ISOLATION LEVEL must be called before "
                                       "any query")

    def _cursor(self, txn: Transaction, stmt: session_ast.Declare
                ) -> SelectCursor | SubscribeCursor:
        query = stmt.args["query"]
        if isinstance(query, ast.Subscribe):
            sub = subscribe_mod.subscribe(self.store, self.config.warehouse, query,
                                          poll_seconds=0.25,
                                          lease_seconds=self.config.read_hold_lease_seconds)
            return SubscribeCursor(sub, lambda: self._subscribing(txn, query))
        columns, types = self.describe(query)

        def run() -> Result:
            if isinstance(query, ast.AsOf):
                return self._in_transaction(txn, query, self._as_of)
            return self._select(txn, query)

        return SelectCursor(columns, types, run)

    def _as_of(self, query: exp.Expr) -> Result:
        assert isinstance(query, ast.AsOf)
        with self.guard(query):
            return self.selects.as_of(query)

    # -- the end ---------------------------------------------------------------------

    def _end(self, stmt: session_ast.EndTransaction, dispatch: Dispatch) -> Result:
        kind = stmt.args["kind"]
        txn = self.current
        if stmt.args.get("chain"):
            self.fail()
            raise Unsupported("CHAIN not yet supported")
        if txn is None:
            return Result(status=kind, notices=["there is no transaction in progress"])
        self.current = None
        try:
            if kind == "ROLLBACK" or txn.failed:
                return Result(status="ROLLBACK")
            notices: list[str] = []
            for done in self.writes.insert_all(txn.inserts):
                notices += done.notices
            if txn.single is not None:
                notices += dispatch(txn.single).notices
            if txn.swaps:
                notices += dispatch(ast.SwapObjects(expressions=txn.swaps)).notices
            return Result(status="COMMIT", notices=notices)
        finally:
            self._finish(txn)

    def _finish(self, txn: Transaction) -> None:
        txn.cursors.close_all()
        if txn.hold is not None:
            txn.hold.release()


def _qualified(stmt: exp.Insert, snap: Snapshot) -> exp.Insert:
    """``stmt`` with its target named in full, if it names a table."""
    found = stmt.copy()
    target = found.this.this if isinstance(found.this, exp.Schema) else found.this
    if isinstance(target, exp.Table):
        item = names.find(snap, target)
        if item is not None:
            target.set("db", exp.to_identifier(item.schema, quoted=True))
            target.set("catalog", exp.to_identifier(item.database, quoted=True))
    return found


def _no_cursor(name: str) -> Error:
    return InvalidCursorName(f'cursor "{name}" does not exist')


def _reads_relations(query: exp.Expr) -> bool:
    """Does ``query`` read a relation (not only constants)? CTEs are not relations."""
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    return any(t.name not in ctes or t.db for t in query.find_all(exp.Table))


def _text(stmt: exp.Expr) -> str:
    try:
        return stmt.sql(dialect=DIALECT)
    except Exception:  # a node our generator does not write back
        return type(stmt).__name__.upper()
