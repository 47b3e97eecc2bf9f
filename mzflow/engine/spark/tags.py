"""Cancelling one statement's Spark work, and nobody else's: a job tag per statement.

Spark's job tags belong to the thread that adds them, and stopping the jobs that carry
one works from any thread: in classic PySpark (pinned threads) the SparkContext's
``addJobTag`` / ``cancelJobsWithTag``, a local property every job of the thread gets
(``SparkSession.addTag`` did not reach the jobs of a ``collectToPython``: tried on 4.3);
in a Spark Connect client the session's ``addTag`` / ``interruptTag``. A statement runs
inside :func:`tagged`; every session that runtime.session() hands its thread gets the
tag before its first job, so a statement that starts the JVM, or moves onto a
cluster's server, is tagged there too, and a statement that never touches Spark
starts nothing. :func:`interrupt` is the cancel (the pgwire server's CancelRequest).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("mzflow.spark")

_local = threading.local()
_lock = threading.Lock()
# tag → the sessions it was added to: one entry per running statement,
# removed when it ends (tagged's finally)
_sessions: dict[str, list[Any]] = {}  # bounded: see above


@contextmanager
def tagged(tag: str) -> Iterator[None]:
    """Tag the Spark work this thread does inside the block with ``tag``: the session
    runtime.session() hands the thread gets it then, before its first job. Not before:
    tagging is three calls into the JVM, which a server's catalog reads paid on every
    statement once Spark had started (50 clients' reads took three times as long).

    Blocks nest: a tick (its time limit's tag) inside a client's statement (its cancel's
    tag) carries both, so that either stops it."""
    outer = list(getattr(_local, "tags", ()))
    _local.tags = [*outer, tag]
    with _lock:
        _sessions[tag] = []
    try:
        yield
    finally:
        _local.tags = outer
        with _lock:
            sessions = _sessions.pop(tag, [])
        for session in sessions:
            try:
                _tagging(session, "remove", tag)
            except Exception:  # noqa: BLE001 - a JVM that died keeps no tags to remove
                pass


def apply(session: Any) -> None:
    """Give ``session`` this thread's statement tags, once each (runtime.session() calls
    it)."""
    for tag in getattr(_local, "tags", ()):
        with _lock:
            known = _sessions.get(tag)
            if known is None or any(s is session for s in known):
                continue
            known.append(session)
        try:
            _tagging(session, "add", tag)
        except Exception:  # noqa: BLE001 - the statement's own call reports a dead JVM
            log.debug("could not tag Spark work with %s", tag, exc_info=True)


def _tagging(session: Any, action: str, tag: str) -> None:
    try:
        sc = session.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext in the client
        sc = None
    if sc is not None:
        if action == "add":
            # A cancel interrupts the tasks' threads too: without it, cancelled jobs'
            # running tasks ran to their end and held the cores (a cross join psql
            # cancelled kept the next query waiting past two minutes in make test).
            sc.setInterruptOnCancel(True)
        {"add": sc.addJobTag, "remove": sc.removeJobTag,
         "interrupt": sc.cancelJobsWithTag}[action](tag)
    else:
        {"add": session.addTag, "remove": session.removeTag,
         "interrupt": session.interruptTag}[action](tag)


def interrupt(tag: str) -> bool:
    """Stop the operations tagged ``tag`` on every session they run on; whether any
    session had the tag (a statement that never reached Spark has none)."""
    with _lock:
        sessions = list(_sessions.get(tag, []))
    for session in sessions:
        try:
            _tagging(session, "interrupt", tag)
        except Exception:  # noqa: BLE001 - a cancel that finds nothing to stop is no error
            log.debug("interrupting %s failed", tag, exc_info=True)
    return bool(sessions)
