"""A tick's commit: the changed rows merged into the index in one Delta commit that
records the time (and any evaluation error), what the tick did and cost, and the
txn id ``(tick-<index id>, time)`` that makes it idempotent."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from mzflow.catalog.model import Column, Item
from mzflow.incremental.decide import (
    BATCH_KEY,
    COLD_KEY,
    DETAIL_KEY,
    JOBS_KEY,
    MEASURED_KEY,
    MODE_KEY,
    READ_KEY,
    REASON_KEY,
    ROWS_KEY,
    SECONDS_KEY,
    Decision,
)
from mzflow.incremental.modes import Mode
from mzflow.maintain.tick.execute import Counters
from mzflow.reasons import R_BATCH, R_HISTORY, R_LAPSED, R_MEASURED, R_REFRESH
from mzflow.storage import paths
from mzflow.storage.delta import COUNT, KEY, IndexShard
from mzflow.storage.types import arrow_schema

# Run-time overrides of the plan that EXPLAIN reports as the index's "Last tick".
SHOWN = (R_BATCH, R_HISTORY, R_LAPSED, R_MEASURED, R_REFRESH)


def index_shard(warehouse: Path, index: Item) -> IndexShard:
    return IndexShard(paths.index(warehouse, index.id))


def schema(columns: tuple[Column, ...]) -> pa.Schema:
    return arrow_schema([(c.name, c.type, True) for c in columns])


def ensure_shard(warehouse: Path, index: Item, columns: tuple[Column, ...]) -> IndexShard:
    shard = index_shard(warehouse, index)
    if not shard.exists():
        shard.create_index(schema(columns), -1)
    return shard


def metadata(d: Decision, since: int, batch_rows: int, n: Counters, seconds: float,
             described: str, spark_jobs: int | None) -> dict[str, str]:
    out = {MODE_KEY: str(Mode.REBUILD if d.rebuild else d.mode), SECONDS_KEY: f"{seconds:.3f}",
           BATCH_KEY: str(batch_rows), ROWS_KEY: str(n.input_rows),
           READ_KEY: str(n.rows_read)}
    if spark_jobs is not None:
        out[JOBS_KEY] = str(spark_jobs)
    if since < 0:
        out[COLD_KEY] = "1"
    if n.measured is not None:
        out[MEASURED_KEY] = f"{n.measured:.3f}"
    if d.reason:
        out[REASON_KEY] = d.reason
    if d.reason in SHOWN:
        out[DETAIL_KEY] = described
    return out


def app_id(index: Item) -> str:
    return f"tick-{index.id}"


def commit(shard: IndexShard, index: Item, columns: tuple[Column, ...],
           changes: pa.Table | None, at: int, error: str | None, extra: dict[str, str]) -> int:
    """Merge the changes, or only advance the frontier (no change, or an error)."""
    if changes is not None and changes.num_rows:
        return shard.apply(changes, at, app_id(index), extra)
    return shard.mark(at, app_id(index), error, schema(columns).append(
        pa.field(KEY, pa.string(), nullable=False)).append(
        pa.field(COUNT, pa.int64(), nullable=False)), extra)
