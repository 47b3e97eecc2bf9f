"""Where a tick of a SIZEd cluster's index runs: the cluster's warm Spark
(clusters/servers.py), or the ticking process's own, and whose memory an
out-of-memory error names. A cluster whose warm processes do not fit the machine's
memory budget (clusters/budget.py) ticks on the process's own Spark, with a notice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mzflow import config
from mzflow.catalog.model import Item, Snapshot
from mzflow.clusters import servers as cluster_servers
from mzflow.clusters.budget import OverBudget
from mzflow.errors import Error, OutOfMemory, SparkFailure

log = logging.getLogger("mzflow.session")


@contextmanager
def cluster_spark(cfg: config.Config, snap: Snapshot, index: Item) -> Iterator[list[str]]:
    """The index's cluster's warm Spark, if it has one (clusters/servers.py).
    A read's catch-up tick stays on the session's Spark, which the read needs anyway.
    It yields the tick's notices: why a cluster that has its own Spark does not use
    it (the machine's warm memory budget, clusters/budget.py)."""
    from mzflow.engine import spark

    found = snap.cluster(index.cluster_id) if index.cluster_id is not None else None
    tuning = config.tuning(snap.settings)
    spark.set_connect_timeout(tuning.spark_connect_timeout)
    notices: list[str] = []
    try:
        endpoint = cluster_servers.endpoint_for(cfg, found, tuning)
    except OverBudget as e:
        log.warning("%s", e.message)
        endpoint, notices = None, [e.message]
    if found is None:
        yield notices
        return
    memory = spark.memory_of(cluster_servers.memory(found, endpoint))
    if endpoint is None:
        with memory:
            yield notices
        return
    log.info("tick %s on cluster %s's Spark at %s", index.qualified_name, found.name,
             endpoint.url)
    started = int(time.time() * 1000)
    with memory, spark.using(endpoint.url, endpoint.started_at):
        try:
            yield notices
        except Exception as raised:
            # pyspark's own error where the tick did not translate it (setting a conf
            # on a server killed meanwhile: the soak saw a raw _InactiveRpcError)
            failure = raised if isinstance(raised, Error) else spark.translate_error(raised)
            if not isinstance(failure, SparkFailure):
                raise
            if not (isinstance(failure, OutOfMemory) or found.spark):
                # A managed server that died under the tick: Spark stops its JVM after
                # an OutOfMemoryError (exit code 52), and the client saw only a lost
                # connection.
                code = cluster_servers.died_since(cfg.home, found, started)
                if code == spark.OOM_EXIT_CODE:
                    raise spark.out_of_memory(" (its server stopped; the next tick "
                                              "starts a new one)") from None
                if code is not None:
                    raise SparkFailure(
                        f'cluster "{found.name}": its Spark server died (exit code '
                        f"{code}) during the tick", detail=str(failure),
                        hint="the next tick starts a new one; its log is "
                             f"{cluster_servers.folder(cfg.home, found) / 'server.log'}"
                    ) from None
            if failure is raised:
                raise
            raise failure from None
