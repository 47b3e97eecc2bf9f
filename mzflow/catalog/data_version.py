"""Whether anything was committed to a SQLite catalog since the last look, for the price
of one pragma: ``PRAGMA data_version`` on a connection of its own.

SQLite changes that number for a connection whenever *another* connection (of this
process or any other: the CLI, an Airflow task, another server thread) commits to the
file; the connection asking never writes, so every commit counts. A session checks it
before each statement instead of reading the catalog's version and read time (two
SELECTs through SQLAlchemy, about a millisecond of Python under the GIL): the catalog
is read again only when the number moved. PostgreSQL has no such number: a store on
it reads the version rows every time, as before.
"""

from __future__ import annotations

import os
import sqlite3
import threading

from sqlalchemy.engine import Engine

BUSY_TIMEOUT_S = 30.0  # as the catalog's own connections wait (store.py)


class DataVersion:
    """A read-only connection to the catalog's file, asked for its data version."""

    def __init__(self, path: str):
        self._path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._opened = 0
        self._closed = False

    def read(self) -> tuple[int, int] | None:
        """The file's data version, after the number of the connection that read it
        (another connection's numbers do not compare); None once closed (the caller
        reads the rows)."""
        with self._lock:
            if self._closed:
                return None
            try:
                if self._conn is None or self._pid != os.getpid():
                    # Opened on first use, and anew in a forked child: SQLite's
                    # connections do not cross a fork. check_same_thread off: the lock
                    # keeps one caller at a time, and a server closes a client's session
                    # from another thread.
                    self._conn = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S,
                                                 check_same_thread=False,
                                                 isolation_level=None)
                    self._pid = os.getpid()
                    self._opened += 1
                found = self._conn.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error:
                self._conn = None  # the rows' read reports what is wrong, in its words
                return None
            return self._opened, int(found)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None


def watch(engine: Engine) -> DataVersion | None:
    """A watch on ``engine``'s SQLite file; None for anything else (PostgreSQL, an
    in-memory or URI-form SQLite database, which a second connection would not share)."""
    url = engine.url
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or (
            url.query.get("uri")):
        return None
    return DataVersion(database)
