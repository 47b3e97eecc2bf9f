"""mzflow as a PEP 249 (DB-API 2.0) module, in process: no server needed.

>>> from mzflow import dbapi
>>> conn = dbapi.connect("/tmp/mzflow-doc")                         # doctest: +SKIP
>>> cur = conn.cursor()                                             # doctest: +SKIP
>>> cur.execute("SELECT a FROM t WHERE b = %s", ["x"])              # doctest: +SKIP
>>> cur.fetchall()                                                  # doctest: +SKIP

``paramstyle`` is ``pyformat``, as psycopg's: ``%s`` for positional parameters,
``%(name)s`` for named ones, ``%%`` for a literal ``%`` (only when parameters are
given). That is what code written for PostgreSQL drivers, ``pandas.read_sql(…,
params=…)`` and SQLAlchemy's PostgreSQL compilers already write. Each placeholder
becomes a bound ``$n`` parameter (``Connection.execute``), never text in the SQL;
PostgreSQL's own ``$1`` works too, with a sequence of parameters.

Transactions follow PEP 249: with ``autocommit`` off (the default) the first statement
opens a transaction that ``commit()`` or ``rollback()`` ends. mzflow's transactions
are Materialize's (``session/transactions.py``): reads only (all at one time), inserts
only, or one DDL statement; set ``conn.autocommit = True`` to run each statement on its
own, as dbt-materialize does.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from mzflow import errors
from mzflow.session.connection import Connection as Session
from mzflow.session.connection import connect as session_connect
from mzflow.session.result import Result

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "pyformat"


# -- exceptions (PEP 249's hierarchy) ---------------------------------------------


class Warning(Exception):  # noqa: A001 - PEP 249's name
    pass


class Error(Exception):
    """``sqlstate`` (also ``pgcode``, psycopg's name) is the SQLSTATE of the mzflow
    error it wraps (``__cause__``)."""

    def __init__(self, message: str = "", sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate
        self.pgcode = sqlstate


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class DataError(DatabaseError):
    pass


class OperationalError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


# SQLSTATE class → exception, as psycopg maps them.
_CLASSES: dict[str, type[DatabaseError]] = {
    "0A": NotSupportedError, "08": OperationalError, "20": ProgrammingError,
    "21": ProgrammingError, "22": DataError, "23": IntegrityError, "24": InternalError,
    "25": InternalError, "26": OperationalError, "27": OperationalError,
    "28": OperationalError, "2B": InternalError, "2D": InternalError, "2F": InternalError,
    "34": OperationalError, "38": InternalError, "39": InternalError, "3B": InternalError,
    "3D": ProgrammingError, "3F": ProgrammingError, "40": OperationalError,
    "42": ProgrammingError, "44": ProgrammingError, "53": OperationalError,
    "54": OperationalError, "55": OperationalError, "57": OperationalError,
    "58": OperationalError, "F0": InternalError, "HV": OperationalError, "P0": InternalError,
    "XX": InternalError,
}


def _wrapped(e: errors.Error) -> DatabaseError:
    kind = _CLASSES.get(e.code[:2], DatabaseError)
    return kind(str(e), e.code)


# -- types (PEP 249's type objects and constructors) ---------------------------------


class _TypeObject:
    """Equal to the type codes (mzflow type names) of one kind of column."""

    def __init__(self, *names: str):
        self.names = frozenset(names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other.split("(")[0].strip() in self.names
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.names)


STRING = _TypeObject("text", "character varying", "character", "jsonb")
BINARY = _TypeObject("bytea")
NUMBER = _TypeObject("smallint", "integer", "bigint", "real", "double precision", "numeric")
DATETIME = _TypeObject("date", "timestamp without time zone", "timestamp with time zone",
                       "interval")
ROWID = _TypeObject()

Date = dt.date
Time = dt.time
Timestamp = dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> dt.date:  # noqa: N802 - PEP 249's names
    return dt.date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> dt.time:  # noqa: N802
    return dt.time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> dt.datetime:  # noqa: N802
    return dt.datetime(*time.localtime(ticks)[:6])


# -- connections ------------------------------------------------------------------------


def connect(home: str | None = None, *, role: str | None = None,
            catalog_url: str | None = None, autocommit: bool = False) -> Connection:
    """A DB-API connection to the mzflow home ``home`` (default: ``$MZFLOW_HOME``)."""
    extra: dict[str, Any] = {} if role is None else {"role": role}
    try:
        session = session_connect(home, catalog_url=catalog_url, **extra)
    except errors.Error as e:
        raise _wrapped(e) from e
    return Connection(session, autocommit=autocommit)


class Connection:
    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(self, session: Session, *, autocommit: bool = False):
        self.session: Session | None = session
        self.autocommit = autocommit

    def _open(self) -> Session:
        if self.session is None:
            raise InterfaceError("connection already closed")
        return self.session

    def cursor(self) -> Cursor:
        self._open()
        return Cursor(self)

    def commit(self) -> None:
        if self._open().transaction_status != "I":
            self._run("COMMIT", None)

    def rollback(self) -> None:
        if self._open().transaction_status != "I":
            self._run("ROLLBACK", None)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()  # an open transaction rolls back
            self.session = None

    @property
    def closed(self) -> bool:
        return self.session is None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if self.session is not None:
            try:
                self.rollback() if kind is not None else self.commit()
            finally:
                self.close()

    def _run(self, sql: str, params: Sequence[Any] | None) -> Result:
        session = self._open()
        try:
            if not self.autocommit and session.transaction_status == "I" and (
                    not _CONTROL.match(sql)):
                session.execute("BEGIN")
            return session.execute(sql, params)
        except errors.Error as e:
            raise _wrapped(e) from e


# Statements that control the transaction themselves: no implicit BEGIN before them.
_CONTROL = re.compile(r"\s*(BEGIN|START|COMMIT|END|ROLLBACK|ABORT)\b", re.I)


class Cursor:
    def __init__(self, connection: Connection):
        self.connection: Connection | None = connection
        self.arraysize = 1
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1
        self.lastrowid = None
        self.statusmessage: str | None = None  # the command tag, as psycopg's cursor has
        self._rows: list[tuple[Any, ...]] = []
        self._position = 0

    def _conn(self) -> Connection:
        if self.connection is None:
            raise InterfaceError("cursor already closed")
        return self.connection

    def execute(self, operation: str, parameters: Sequence[Any] | Mapping[str, Any] | None
                = None) -> Cursor:
        conn = self._conn()
        sql, values = to_numeric(operation, parameters)
        result = conn._run(sql, values)
        self._rows, self._position = result.rows, 0
        self.statusmessage = result.status
        if result.columns:
            types: list[str | None] = list(result.types) or [None] * len(result.columns)
            self.description = [_column(name, t)
                                for name, t in zip(result.columns, types, strict=False)]
            self.rowcount = len(result.rows)
        else:
            self.description = None
            self.rowcount = _count(result.status)
        return self

    def executemany(self, operation: str,
                    seq_of_parameters: Sequence[Sequence[Any] | Mapping[str, Any]]) -> Cursor:
        total = 0
        for parameters in seq_of_parameters:
            self.execute(operation, parameters)
            total = total + self.rowcount if total >= 0 and self.rowcount >= 0 else -1
        self.rowcount = total
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int | None = None) -> list[tuple[Any, ...]]:
        self._check_result()
        size = self.arraysize if size is None else size
        rows = self._rows[self._position:self._position + size]
        self._position += len(rows)
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        self._check_result()
        rows = self._rows[self._position:]
        self._position = len(self._rows)
        return rows

    def _check_result(self) -> None:
        self._conn()
        if self.description is None:
            raise ProgrammingError("the last statement returned no rows to fetch")

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        self.connection = None
        self._rows = []

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _column(name: str, type_: str | None) -> tuple[Any, ...]:
    """PEP 249's 7 items: name, type_code (the mzflow type name), display_size,
    internal_size, precision, scale, null_ok."""
    precision = scale = None
    m = re.fullmatch(r"numeric\((\d+),\s*(\d+)\)", type_ or "")
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
    return (name, type_, None, None, precision, scale, None)


def _count(status: str) -> int:
    """The row count in a command tag (``INSERT 0 3``, ``UPDATE 2``); -1 without one."""
    parts = status.split()
    if parts and parts[0] in ("INSERT", "UPDATE", "DELETE", "COPY") and parts[-1].isdigit():
        return int(parts[-1])
    return -1


# -- pyformat → $n --------------------------------------------------------------------------

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_NAMED = re.compile(r"%\(([^)]+)\)s")


def to_numeric(sql: str, parameters: Sequence[Any] | Mapping[str, Any] | None
               ) -> tuple[str, list[Any] | None]:
    """``sql`` with its pyformat placeholders as ``$n``, and the values in ``$n``'s
    order. Quoted strings, quoted identifiers and comments are left alone. Without
    parameters the SQL is not touched (a ``%`` is then just a ``%``)."""
    if parameters is None:
        return sql, None
    named = isinstance(parameters, Mapping)
    if not named and isinstance(parameters, str | bytes):
        raise ProgrammingError("parameters must be a sequence or a mapping, not a string")
    out: list[str] = []
    order: list[Any] = []  # positional: count; named: names in $n order
    i, n = 0, len(sql)
    while i < n:
        end = _skip(sql, i)
        if end > i:
            out.append(sql[i:end])
            i = end
            continue
        if sql[i] != "%":
            out.append(sql[i])
            i += 1
            continue
        if sql.startswith("%%", i):
            out.append("%")
            i += 2
        elif sql.startswith("%s", i) and not named:
            order.append(len(order))
            out.append(f"${len(order)}")
            i += 2
        elif (m := _NAMED.match(sql, i)) and named:
            if m.group(1) not in order:
                order.append(m.group(1))
            out.append(f"${order.index(m.group(1)) + 1}")
            i = m.end()
        else:
            shown = sql[i:i + 2] if not sql.startswith("%(", i) else "%(…)s"
            raise ProgrammingError(f"{shown} is not a placeholder here: use "
                                   f"{'%(name)s' if named else '%s'}, or %% for a %")
    if named:
        assert isinstance(parameters, Mapping)
        missing = [k for k in order if k not in parameters]
        if missing:
            raise ProgrammingError(f"no value for the parameter %({missing[0]})s")
        return "".join(out), [parameters[k] for k in order]
    values = list(parameters)
    if not order:  # no %s: PostgreSQL's $1 … $n, or no parameters at all
        return sql, values
    if len(order) != len(values):
        raise ProgrammingError(f"the query has {len(order)} placeholders but "
                               f"{len(values)} parameters were given")
    return "".join(out), values


def _skip(sql: str, i: int) -> int:
    """The end of the quoted string, quoted identifier or comment at ``i``; ``i`` when
    none starts there."""
    ch = sql[i]
    if ch == "'":
        escapes = i > 0 and sql[i - 1] in "eE" and (i < 2 or not (
            sql[i - 2].isalnum() or sql[i - 2] == "_"))
        j = i + 1
        while j < len(sql):
            if escapes and sql[j] == "\\":
                j += 2
                continue
            if sql[j] == "'":
                if sql.startswith("''", j):
                    j += 2
                    continue
                return j + 1
            j += 1
        return len(sql)
    if ch == '"':
        j = sql.find('"', i + 1)
        while j != -1 and sql.startswith('""', j):
            j = sql.find('"', j + 2)
        return len(sql) if j == -1 else j + 1
    if sql.startswith("--", i):
        j = sql.find("\n", i)
        return len(sql) if j == -1 else j + 1
    if sql.startswith("/*", i):
        depth, j = 1, i + 2
        while j < len(sql) and depth:
            if sql.startswith("/*", j):
                depth, j = depth + 1, j + 2
            elif sql.startswith("*/", j):
                depth, j = depth - 1, j + 2
            else:
                j += 1
        return j
    if ch == "$" and (m := _DOLLAR_TAG.match(sql, i)) and not (
            i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_")):
        close = sql.find(m.group(0), m.end())
        return len(sql) if close == -1 else close + len(m.group(0))
    return i
