"""ON COMMIT from the triggerer: every write mzflow commits to a table becomes an event
of the table's asset, the writer knowing nothing of Airflow.

Each table asset a cluster's DAG is scheduled on carries an ``AssetWatcher`` whose
trigger, :class:`TableWriteTrigger`, runs in Airflow's triggerer and watches the
table's write frontier: its Delta log. Every write (INSERT, UPDATE, DELETE, COPY, from
``mzflow sql``, ``mzflow serve`` or the Python API) is one Delta commit, and the next
commit's entry name is known (``<version + 1>.json``), so a poll is one ``stat`` of a
local file: no Spark, no delta-rs, no catalog query. An entry that wrote rows (not a
schema change, not a compaction) makes one event, whose payload carries the table, the
version and the write's time; writes seen in one poll make one event.

The last version announced is kept in Airflow's asset state store (Airflow 3.3), so a
triggerer restarted, or a watcher moved to another triggerer, announces the writes it
missed instead of dropping them. Without a stored version (a new watcher), it starts
from the table's newest commit when it starts: writes before the watcher existed are
not announced (the DAG's first run, or the next write, brings the views up to date).

Imports: Airflow's trigger base and ``storage/commits.py`` only; the triggerer never
loads the runtime, Spark or delta-rs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from mzflow.storage import commits

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
STATE_KEY = "mzflow_version"  # the asset state store's key: the last version announced


class TableWriteTrigger(BaseEventTrigger):
    """Yields an event for each poll that finds new writes to the table whose Delta
    log is ``log_dir``; ``table`` (its qualified name) only names it in the payload."""

    def __init__(self, table: str, log_dir: str, poll_interval: float = POLL_SECONDS):
        super().__init__()
        self.table = table
        self.log_dir = log_dir
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "log_dir": self.log_dir,
                 "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        log_dir = Path(self.log_dir)
        # The baseline first: the state store's answer can take seconds (measured: up
        # to ~50 s while the triggerer starts), and a write in that time must count.
        seen = commits.newest_version(log_dir)
        stored = await self._stored()
        if stored is not None and stored < seen:
            seen = stored  # written while no watcher ran: announced below
        # Only at start: a poll must stay one stat, not a listing of the log.
        gap = (commits.writes_after(log_dir, seen)[0] == seen
               and commits.newest_version(log_dir) > seen + 1)
        saving: asyncio.Task[None] | None = None
        saved = stored
        while True:
            newest, ts = commits.writes_after(log_dir, seen)
            if gap:
                # The entry after ``seen`` was cleaned up behind a checkpoint (a long
                # outage): announce once rather than watch a gap forever.
                newest = commits.newest_version(log_dir)
            if newest > seen:
                seen = newest
                if ts is not None or gap:
                    yield TriggerEvent({"table": self.table, "version": newest, "at": ts})
            gap = False
            # Recorded in the background, one write at a time, newest value last: a
            # slow store never delays the next poll.
            if saved != seen and (saving is None or saving.done()):
                saved = seen
                saving = asyncio.ensure_future(self._store(seen))
            await asyncio.sleep(self.poll_interval)

    async def _stored(self) -> int | None:
        store = self.asset_state_store
        if store is None:
            return None
        try:
            got = await store.aget(STATE_KEY)
        except Exception:  # an older API server: run without a memory
            log.warning("mzflow: no asset state store for %s", self.table, exc_info=True)
            return None
        return None if got is None else int(got)  # type: ignore[arg-type]

    async def _store(self, version: int) -> None:
        store = self.asset_state_store
        if store is None:
            return
        try:
            await store.aset(STATE_KEY, version)
        except Exception:
            log.warning("mzflow: cannot record %s's version", self.table, exc_info=True)


class TickTrigger(BaseTrigger):
    """A deferred tick (operators.py, ``deferrable=True``): hands ``request`` to the
    warm tick service whose record is ``service_file`` (clusters/tick_service.py) and
    fires once with its answer, while no worker slot is held.

    The service's protocol is one blocking request and answer (standard library
    ``multiprocessing.connection``), so the call runs in a thread: the triggerer's
    event loop never blocks. The service's key is read from its record (mode 0600)
    here, never carried in the trigger's kwargs, which Airflow stores in its database.
    A triggerer restarted mid-tick sends the request again: the request names a fixed
    time (``at``, or the run whose recorded time the service reads), and a tick is one
    Delta commit under txn id ``tick-<index>`` + time, so the second send finds the
    work done. Fires ``{"status": "answer", "answer": …}``, or ``{"status":
    "no_service"}`` when the service is gone or did not take the tick: the task then
    ticks in the worker, as without deferral."""

    def __init__(self, service_file: str, request: dict[str, Any]):
        super().__init__()
        self.service_file = service_file
        self.request = request

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"service_file": self.service_file, "request": self.request})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from mzflow.clusters import tick_service

        answer = await asyncio.to_thread(_ask_service, Path(self.service_file), self.request)
        if answer is None or "not_mine" in answer:
            log.info("mzflow: no tick service at %s took the tick", self.service_file)
            yield TriggerEvent({"status": "no_service"})
            return
        failure = tick_service.failure_of(answer) if answer.get("error") else None
        if failure is not None:
            log.info("mzflow: the tick failed: %s", failure.message)
        yield TriggerEvent({"status": "answer", "answer": answer})


def _ask_service(service_file: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """The service's answer; None when its record is gone or its process is."""
    import json

    from mzflow.clusters import tick_service
    from mzflow.storage.processes import process_alive

    try:
        record = json.loads(service_file.read_text())
    except (OSError, ValueError):
        return None
    if not process_alive(int(record.get("pid", 0))):
        return None
    return tick_service.call(record, request)
