"""What the process's in-process Spark holds, for the tests and soaks that check a
long-lived process does not grow with the statements it ran (tests/test_memory.py,
scripts/soakmem.py). In-process Spark only: they reach into the JVM through py4j."""

from __future__ import annotations

from typing import Any

from mzflow.engine.spark.runtime import process


def retained() -> dict[str, int]:
    """What the process's Spark holds between statements, counted (a long-lived process
    must not grow these with the number of statements it ran): blocks in the driver's
    memory store (broadcasts: a broadcast join's hash relation, a job's task binary),
    the bytes they take, persisted RDDs, temporary views, and what the status store
    keeps of SQL executions, jobs and stages. In-process Spark only."""
    spark = process().session()
    sc = spark.sparkContext._jsc.sc()
    jvm = spark._jvm

    # Fields by reflection: py4j lists a class's methods to call one, and SparkEnv's
    # and BlockManager's name protobuf classes that pyspark's jars leave out.
    def field(cls: str, name: str, target: Any) -> Any:
        if target is None:  # not made yet (the memory store is a lazy val): empty
            return None
        f = jvm.java.lang.Class.forName(cls).getDeclaredField(name)
        f.setAccessible(True)
        return f.get(target)

    env = sc.env()
    entries = field("org.apache.spark.storage.memory.MemoryStore", "entries", field(
        "org.apache.spark.storage.BlockManager", "memoryStore",
        field("org.apache.spark.SparkEnv", "blockManager", env)))
    names: list[str] = []
    # Listed again if the store changed meanwhile.
    for _ in range(5 if entries is not None else 0):
        try:
            names = [n for n in str(entries.keySet().toString()).strip("[]").split(", ") if n]
            break
        except Exception:
            continue
    storage = field("org.apache.spark.SparkEnv", "_memoryManager", env).storageMemoryUsed()
    kv = sc.statusStore().store()

    def count(cls: str) -> int:
        return int(kv.count(jvm.java.lang.Class.forName(cls)))

    return {
        "broadcast blocks": sum(n.startswith("broadcast_") for n in names),
        "memory store blocks": len(names),
        "storage bytes": int(storage),
        "persisted RDDs": int(sc.getPersistentRDDs().size()),
        "temp views": int(spark._jsparkSession.sessionState().catalog()
                          .getTempViewNames().size()),
        "SQL executions": count("org.apache.spark.sql.execution.ui.SQLExecutionUIData"),
        "jobs": count("org.apache.spark.status.JobDataWrapper"),
        "stages": count("org.apache.spark.status.StageDataWrapper"),
    }


def heap_after_gc() -> int:
    """The in-process JVM's heap in use after full collections, in bytes: what the
    process's live objects hold. Python's garbage first, once Spark's listeners caught
    up: a DataFrame it no longer uses keeps its JVM plan until its py4j proxy is
    collected *and py4j has told the JVM* (``release_dropped``). Then the JVM's, until
    the memory store stops shrinking: Spark's ContextCleaner drops a broadcast's blocks
    only after a collection found the broadcast unreachable, and those blocks go with a
    later one."""
    import gc
    import time

    spark = process().session()
    # A finished query's end event holds its plan (its broadcasts) until the listener
    # bus has delivered it.
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    gc.collect()
    release_dropped()
    jvm = spark._jvm
    heap = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
    before: tuple[int, int] | None = None
    for _ in range(10):
        jvm.java.lang.System.gc()
        time.sleep(0.3)
        # The blocks the cleaner dropped since the last collection are freed by this
        # one: settled when neither the blocks nor the heap moved (by 1 MB) since.
        jvm.java.lang.System.gc()
        now = (retained()["memory store blocks"], int(heap.getHeapMemoryUsage().getUsed()))
        if before is not None and now[0] == before[0] and now[1] > before[1] - 2**20:
            return now[1]
        before = now
    assert before is not None
    return before[1]


def release_dropped() -> int:
    """Tell the JVM now about the py4j proxies Python has collected; returns how many.

    py4j's client-server mode (pyspark's) does not release a collected proxy's JVM
    object itself: it queues the release for a worker thread that sends one at a time
    and sleeps a second whenever it finds the queue empty. Until then the JVM object
    (a DataFrame, its plan, the broadcasts in the plan) stays bound in the gateway,
    alive to any collection: a heap measured right after ``gc.collect()`` counted it."""
    client = process().session().sparkContext._gateway._gateway_client
    pending = getattr(client, "finalizer_deque", None)  # absent: releases are synchronous
    released = 0
    while pending:
        try:
            task = pending.pop()  # the worker's end, like the worker
        except IndexError:
            break
        if not isinstance(task, tuple):  # the worker's shutdown sentinel: leave it
            pending.append(task)
            break
        owner, target_id = task
        owner.garbage_collect_object(target_id, False)
        released += 1
    return released
