"""Spark's failures told as mzflow's errors: a row's evaluation error with PostgreSQL's
SQLSTATE, an out-of-memory JVM named by the cluster whose memory ran out, a JVM that
died or cannot load a class (forgotten, so the next statement starts another), a lost
Spark Connect server. Never a raw py4j or gRPC error."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from mzflow.engine.spark import series
from mzflow.engine.spark.runtime import process
from mzflow.errors import Error, OutOfMemory, SparkFailure, UnknownFunction, Unsupported


class EvaluationError(Error):
    """A row whose evaluation failed (division by zero, a bad cast), as Materialize says it."""

    code = "22000"  # data_exception


def evaluation_error(message: str, code: str) -> EvaluationError:
    err = EvaluationError(message)
    err.code = code  # the condition's own SQLSTATE, under the data exception class
    return err


_ERRORS = (  # Spark's error class → Materialize's message and PostgreSQL's SQLSTATE
    (r"DIVIDE_BY_ZERO|REMAINDER_BY_ZERO", "Evaluation error: division by zero", "22012"),
    (r"CAST_INVALID_INPUT.*?The value '([^']*)' of the type \"\w+\" cannot be cast to \"(\w+)\"",
     'Evaluation error: invalid input syntax for type {1}: "{0}"', "22P02"),
    # Arrow's words when a kept sum (a GROUP BY state) outgrows 38 digits
    (r"ARITHMETIC_OVERFLOW|NUMERIC_VALUE_OUT_OF_RANGE|CAST_OVERFLOW|"
     r"Decimal value does not fit in precision",
     "Evaluation error: numeric field overflow", "22003"),
    (rf"USER_RAISED_EXCEPTION\] ({series.ZERO_STEP})", "Evaluation error: {0}", "22023"),
)


# -- out of memory ----------------------------------------------------------------------

@dataclass(frozen=True)
class Memory:
    """Whose memory a block's Spark work uses, for an out-of-memory error: the cluster,
    the heap it has, and the setting that gives it more."""

    cluster: str
    heap: str
    setting: str


def memory_of(memory: Memory) -> AbstractContextManager[None]:
    return process().memory_of(memory)


def in_process_memory(cluster: str) -> Memory:
    return Memory(cluster, process().driver_memory(),
                  "set MZFLOW_SPARK_DRIVER_MEMORY higher (by default a quarter of the "
                  "machine's memory, at most 8g)")


# The JVM's own words, and Spark's exit code for a JVM its uncaught-exception handler
# stopped after an OutOfMemoryError (SparkExitCode.OOM): in local mode a task's OOM
# takes the whole driver down, and the caller sees only a failed py4j call
# ("An error occurred while calling o19543.getResult").
_OOM_TEXT = re.compile(r"OutOfMemoryError|Java heap space|GC overhead limit exceeded")
OOM_EXIT_CODE = 52
# The JVM's own heap ran out (it will exit), unlike Spark's SparkOutOfMemoryError for a
# broadcast or a task's memory grant, after which the JVM goes on.
_HEAP_GONE = re.compile(r"java\.lang\.OutOfMemoryError|Java heap space|GC overhead limit")


def out_of_memory(how: str = "") -> OutOfMemory:
    runtime = process()
    memory = runtime.memory()
    if memory is None:
        where = runtime.where()
        memory = in_process_memory("default") if where == "in-process" else Memory(
            "?", "?", f"give the Spark at {where} more memory")
    return OutOfMemory(f'cluster "{memory.cluster}" ran out of memory: Spark\'s driver heap '
                       f"({memory.heap}) is full{how}", hint=memory.setting)


# -- a JVM that died, or is broken --------------------------------------------------------

# A Connect server that died mid-call: gRPC's words for it (a handler cut off by the
# JVM's exit answers "Application error processing RPC").
_LOST = re.compile(r"UNAVAILABLE|Connection refused|Socket closed|failed to connect|"
                   r"Connection reset|Application error processing RPC", re.I)
_STOPPED = re.compile(r"stopped SparkContext|SparkContext was shut down|"
                      r"SparkContext has been shutdown")
# A query that raced the context's stop after an OutOfMemoryError fails on the
# scheduler the stop cleared, with a NullPointerException that hides the out-of-memory
# error (CI's test_memory failure, reproduced under load): the context is stopped for
# good and the JVM is exiting.
_SCHEDULER_GONE = re.compile(r'SparkContext\.dagScheduler\(\)" is null')
_DYING = re.compile(r"SparkContext was shut down|Answer from Java side is empty|"
                    r"Connection refused|Error while (sending|receiving)|"
                    + _SCHEDULER_GONE.pattern)

# A class whose static initializer failed stays unusable for the JVM's life: snappy-java
# extracts its native library to a temporary file on first use, so a full disk then
# (the soak's fault) broke every later Parquet read of an in-process JVM for good.
_BROKEN = re.compile(r"Could not initialize class ([\w.$]+)|ExceptionInInitializerError|"
                     r"UnsatisfiedLinkError")


def text_of(e: BaseException) -> str:
    """``str(e)``, which for a py4j error asks the JVM, and fails once the JVM is gone
    (found by CI: "An error occurred while calling None.None" escaped)."""
    try:
        return str(e)
    except Exception:  # noqa: BLE001 - a dead JVM cannot describe its exception
        return f"{type(e).__name__} (its JVM is gone)"


def _answers(spark: Any) -> bool:
    """Whether the in-process JVM still answers a call."""
    try:
        spark.sparkContext._jvm.java.lang.System.currentTimeMillis()
        return True
    except Exception:  # noqa: BLE001 - refused, reset, closed: it does not
        return False


def context_stopped(text: str) -> bool:
    """Whether a failure says the in-process SparkContext was stopped under the call."""
    return _SCHEDULER_GONE.search(text) is not None


def _jvm_exit(e: Exception, oom: bool, text: str | None = None) -> int | None:
    """The in-process JVM's exit code if ``e`` came from its death, else None. A dead JVM
    is forgotten, so the next session() starts a new one: a long-lived process (the
    shell, a SUBSCRIBE) survives it."""
    text = text_of(e) if text is None else text
    runtime = process()
    spark = runtime.in_process()
    if spark is None:
        return None
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is None:
        return None
    # The failed call may return while the JVM is still exiting: wait a little only
    # for the failures a dying JVM gives, not for every SQL error.
    dying = (oom or _DYING.search(text) is not None
             or isinstance(e, ConnectionError) or type(e).__name__ == "Py4JNetworkError")
    try:
        code = proc.wait(5.0 if dying else 0.0)
    except Exception:  # still running (TimeoutExpired)
        if context_stopped(text):  # a stopped context never recovers: no JVM to keep
            try:  # its exit code says why (52: out of memory)
                code = proc.wait(25.0)
            except Exception:  # noqa: BLE001 - still running
                proc.kill()
                code = proc.wait(30)
            runtime.forget(spark)
            return int(code)
        # Out of memory, the JVM exits (52) after its shutdown hooks, which took longer
        # than the wait on a loaded CI machine: the next statement then found it alive,
        # and its first call was refused. One that ran out and no longer answers is
        # killed; one that still answers (Spark survived, or the error was not its) stays.
        if not (oom and _HEAP_GONE.search(text)):
            return None
        if _answers(spark):
            runtime.suspect(spark)  # the next statement looks again (runtime._dying)
            return None
        proc.kill()
        code = proc.wait(30)
    runtime.forget(spark)
    return int(code)


def _stop_broken_jvm() -> bool:
    """Stop the in-process JVM and forget it, so the next session() starts a new one.
    False when there is none to stop (a Connect server's JVM is its supervisor's)."""
    runtime = process()
    dead = runtime.in_process()
    if dead is None:
        return False
    gateway = getattr(dead.sparkContext, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    try:
        dead.stop()
    except Exception:  # noqa: BLE001 - stopping a broken JVM: the kill below decides
        pass
    if gateway is not None and proc is not None:
        try:
            gateway.shutdown()
        except Exception:  # noqa: BLE001
            pass
        proc.kill()
        proc.wait(30)
    runtime.forget(dead)
    return True


def translate_error(e: Exception) -> Error:
    """Spark's exception → an mzflow error that reads like Materialize's."""
    if isinstance(e, Error):  # refused while rendering the query, before Spark saw it
        return e
    text = text_of(e)
    oom = _OOM_TEXT.search(text) is not None
    exit_code = _jvm_exit(e, oom, text)
    if exit_code == OOM_EXIT_CODE or (oom and exit_code is not None):
        return out_of_memory(" (the JVM stopped; the next statement starts a new one)")
    if oom:
        return out_of_memory()
    if exit_code is not None:
        return SparkFailure(f"Spark's JVM exited with code {exit_code}; the next statement "
                            "starts a new one")
    broken = _BROKEN.search(text)
    if broken is not None and _stop_broken_jvm():
        return SparkFailure(f"Spark's JVM could not load {broken.group(1) or 'a native library'}"
                            " (a full disk while it first loaded it?) and would fail every "
                            "statement from now on; stopped it, the next statement starts "
                            "a new one")
    endpoint = process().endpoint()
    if endpoint is not None and _LOST.search(text):
        return SparkFailure(f"lost the connection to the Spark at {endpoint[0]}: {text[:200]}")
    if endpoint is not None and _STOPPED.search(text):
        # The server's Spark stopped under the query (after an OutOfMemoryError Spark
        # stops its context, then the JVM exits with 52): the caller asks how it died.
        return SparkFailure(f"the Spark at {endpoint[0]} stopped: {text[:200]}")
    from mzflow.engine.spark.pg_functions import raised

    found = raised(text)
    if found is not None:
        return found
    if re.search(r"year -?\d+ is out of range", text):  # Python's date type, collecting rows
        return Unsupported("dates and timestamps after year 9999 are not supported yet")
    for pattern, message, code in _ERRORS:
        m = re.search(pattern, text, flags=re.S)
        if m:
            return evaluation_error(message.format(*m.groups()), code)
    m = re.search(r"UNRESOLVED_ROUTINE\].*?routine `([^`]+)`", text, flags=re.S)
    if m:
        return UnknownFunction(f"function {m.group(1).lower()} does not exist")
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    return Error(f"query failed in Spark: {first}")


@contextmanager
def cleaning_up(spark: Any, undo: Callable[[], None]) -> Iterator[None]:
    """Run the block, then ``undo`` what it set in ``spark``. The JVM may have died
    during the block and still be exiting when translate_error stopped waiting for it
    (an out-of-memory JVM, on a loaded machine): its state went with it, and a refused
    connection here must never replace the block's own error (CI saw a
    ConnectionRefusedError where the out-of-memory error belonged)."""
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        if process().live(spark):
            try:
                undo()
            except Exception as e:
                if not failed and _jvm_exit(e, oom=False) is None:
                    raise translate_error(e) from None
