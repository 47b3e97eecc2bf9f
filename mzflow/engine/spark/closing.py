"""Spark Connect clients that end, and connections that give up: bounded waits around
grpc.

A process that used mzflow must exit. Each cluster's server has its own Spark Connect
client here, and pyspark leaves each client's channel to ``SparkSession.__del__`` at
interpreter exit, where grpc's ``Channel.close`` waits for the channel's calls to drain.
They drain on grpc's channel-spin thread, a daemon thread that stops when the
interpreter finalizes. pyspark's own exit hook sends every client it does not see
closed an ML-cache cleanup RPC, and abandons its response stream half read (the release
thread pool refuses work once threading has shut down: "cannot schedule new futures
after interpreter shutdown"). That stream sits in a reference cycle: if no garbage
collection runs before the interpreter finalizes, it is cancelled only then, the spin
thread is gone, and the main thread waits in ``Channel.close`` for ever (issue 39:
programs that printed their last line and never ended; tests/test_exits.py). So the
runtime closes its clients itself, before that hook and before finalization
(``Connection.close``, the context manager, an ``atexit`` hook), one at a time, each in
a daemon thread with a bounded wait: a close that still blocks is abandoned, and its
client can no longer be closed again from ``__del__``.

The same bounded wait serves connecting: an endpoint that accepts and never answers held
a statement for pyspark's ten minutes of retries; :func:`connect` gives up after the
``spark_connect_timeout`` and names the endpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from mzflow.errors import SparkFailure

log = logging.getLogger("mzflow.spark")

CLOSE_WAIT = 5.0  # seconds one client's close may take (a healthy one takes milliseconds)
CLOSE_BUDGET = 20.0  # seconds all of a process's closes may take together


class SparkUnreachable(SparkFailure):
    """A Spark Connect endpoint that did not answer within ``spark_connect_timeout``."""

    code = "08001"  # sqlclient_unable_to_establish_sqlconnection


def _in_thread(work: Callable[[], None], name: str, wait: float) -> bool:
    """Run ``work`` in a daemon thread; whether it ended within ``wait`` seconds (if not,
    it is left to finish, or not, on its own: a daemon thread never holds up exit)."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except Exception:  # noqa: BLE001 - a failed close or connect is reported by the caller
            log.debug("%s failed", name, exc_info=True)
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    return done.wait(wait)


def close_sessions(sessions: list[tuple[str, Any]], budget: float = CLOSE_BUDGET,
                   each: float = CLOSE_WAIT) -> list[str]:
    """Close Spark Connect sessions, in order, each within ``each`` seconds and all
    within ``budget``: release the session on its server (its temporary views, cached
    frames, running operations: a warm server outlives the process by its idle time),
    then close the client's channel. Returns the endpoints whose close was abandoned."""
    abandoned: list[str] = []
    deadline = time.monotonic() + budget
    for url, session in sessions:
        wait = max(0.1, min(each, deadline - time.monotonic()))
        if not close_session(session, wait):
            abandoned.append(url)
            log.warning("closing the Spark Connect client of %s took over %.0f s: "
                        "left to finish in the background", url, wait)
    return abandoned


def close_session(session: Any, wait: float) -> bool:
    """Close one Spark Connect session within ``wait`` seconds; whether it closed."""
    try:
        client = session.client
    except Exception:  # noqa: BLE001 - not a Connect session: nothing of grpc to close
        return True
    if getattr(client, "_closed", False):
        return True

    def work() -> None:
        # One try, no retries, within half the wait: a server that does not answer now
        # will not be asked for ten minutes (pyspark's policy) while a program waits to
        # exit, and the channel's close gets the other half.
        client.set_retry_policies([])
        deadlines = getattr(client, "_rpc_deadlines", None)
        if dataclasses.is_dataclass(deadlines) and not isinstance(deadlines, type):
            client._rpc_deadlines = dataclasses.replace(deadlines,
                                                        release_session=max(0.1, wait / 2))
        try:
            client.release_session()
        except Exception:  # noqa: BLE001 - gone, or already released: its state went with it
            log.debug("releasing a Spark Connect session failed", exc_info=True)
        client.close()

    closed = _in_thread(work, "mzflow-spark-close", wait)
    # Whatever happened, nothing may close this client again: a second Channel.close
    # while the first still waits (from SparkSession.__del__ at exit) waits with it, and
    # pyspark's exit hook sends an RPC to any client it does not see closed.
    client._closed = True
    client.close = _closed_already
    _forget_active(session)
    return closed


def _closed_already() -> None:
    """What a closed client's ``close`` does from now on: nothing."""


def _forget_active(session: Any) -> None:
    """pyspark keeps the first session made as the process's default and each thread's
    active one; a closed one must not be handed out again (getOrCreate)."""
    from pyspark.sql.connect.session import SparkSession

    with SparkSession._lock:
        if SparkSession._default_session is session:
            SparkSession._default_session = None
    if getattr(SparkSession._active_session, "session", None) is session:
        SparkSession._active_session.session = None


def bounded_retries(seconds: float) -> Any:
    """pyspark's default policy (the errors it retries: an unavailable server, a
    preempted stream) with its waits adding up to about ``seconds``, not ten minutes."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    backoff, total, retries, top = 100, 0, 0, 5000
    while total + backoff <= seconds * 1000 and retries < 50:
        total += backoff
        retries += 1
        backoff = min(top, backoff * 2)
    return DefaultPolicy(max_retries=retries, initial_backoff=100, backoff_multiplier=2.0,
                         max_backoff=top, jitter=0, max_server_retry_delay=top)


def connect(url: str, seconds: float, make: Callable[[], Any],
            setup: Callable[[Any], None]) -> Any:
    """``make()`` a Spark Connect session to ``url`` and ``setup`` it (its first calls
    to the server) within ``seconds`` (0: no limit); a server that has not answered by
    then fails naming the endpoint, and the half-made session is closed in the
    background."""
    made: list[Any] = []
    failed: list[BaseException] = []
    lock = threading.Lock()
    ends = {"gave_up": False, "finished": False}  # whichever comes second closes

    def work() -> None:
        try:
            session = make()
            made.append(session)
            setup(session)
        except BaseException as e:  # raised again in the caller's thread
            failed.append(e)
        with lock:
            ends["finished"] = True
            late = ends["gave_up"]
        if late and made:
            close_session(made[0], CLOSE_WAIT)

    if seconds <= 0:
        work()
    elif not _in_thread(work, "mzflow-spark-connect", seconds):
        with lock:
            ends["gave_up"] = True
            late = ends["finished"]
        if late and made:  # it ended just now, after the wait: close it here
            close_session(made[0], CLOSE_WAIT)
        raise SparkUnreachable(
            f"Spark Connect endpoint {url} did not answer within {seconds:g} s",
            hint="check that a Spark Connect server listens there, or raise "
                 "ALTER SYSTEM SET spark_connect_timeout = <seconds> (0: no limit)")
    if failed:
        if made:  # a half-made session: its channel must not be left to __del__
            close_session(made[0], CLOSE_WAIT)
        raise failed[0]
    return made[0]
