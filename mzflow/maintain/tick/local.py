"""A tick's computation in process (``incremental/local/``): the index's changed rows
from the rules' Arrow paths, keyed in Arrow with the same row keys Spark computes
(``engine/row_keys.py``), and the kept state committed as on Spark, under the same
idempotent txn id. Raises NotLocal before anything is committed when it cannot run
the tick exactly; the caller then runs it on Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from mzflow.engine import diffs, row_keys
from mzflow.engine.frames import DIFF
from mzflow.incremental.local import NotLocal
from mzflow.incremental.local import state as local_state
from mzflow.incremental.local.flow import LocalFlow
from mzflow.incremental.modes import Mode
from mzflow.incremental.rules.reduce_state import KeptState
from mzflow.maintain.tick.execute import Counters, IndexTarget, _targets
from mzflow.maintain.tick.inputs import Inputs
from mzflow.storage import paths
from mzflow.storage.delta import KEY, StateShard
from mzflow.storage.rows import conform


def incremental(t: IndexTarget, inputs: Inputs, mode: Mode, since: int, at: int,
                warehouse: Path, n: Counters, rebuild: bool = False) -> pa.Table | None:
    root = t.plan.root
    assert root is not None
    # A rebuild reads its inputs whole: ``decide.executor`` sent it here because they fit.
    flow = LocalFlow(root, inputs, read_limit=(t.tuning.local_rebuild_rows if rebuild
                                               else t.tuning.local_read_rows))
    try:
        if mode == Mode.DELTA:
            d = flow.delta(root)
            return None if d is None else t.finish(_apply(t, d))
        if mode != Mode.STATE:
            raise NotLocal(f"mode {mode} has no in-process path")
        ctx = t.plan.context
        reduce = ctx.state_reduce
        assert reduce is not None
        state = KeptState(StateShard(paths.state(warehouse, t.plan.index.id)), since, rebuild)
        got = local_state.run(flow, ctx.chain, reduce, state, topk_margin=t.tuning.topk_margin)
        if got is None:
            return None
        result, out = got
        changed = _changes(t, out) if result.full else _apply(t, out)
        state.commit(reduce, result, at, f"tick-{t.plan.index.id}-{mode}")
        return t.finish(changed)
    finally:
        n.rows_read += flow.rows_read
        n.files_read += flow.files_read


def _keyed(t: IndexTarget, rows: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table:
    """The rows (the index's columns by position) cast to the stored types, keyed."""
    names = t.names
    values = conform(rows.select(list(range(len(names)))).rename_columns(names),
                     _targets(t.plan.columns))
    keys = row_keys.row_keys(values, [c.type for c in t.plan.columns])
    if keys is None:
        raise NotLocal("a column's type has no in-process row key", lasting=True)
    out = values.append_column(KEY, keys)
    for c in extra:
        out = out.append_column(c, rows.column(c))
    return out


def _apply(t: IndexTarget, d: pa.Table) -> pa.Table:
    return diffs.checked(diffs.apply_keyed(_keyed(t, d, (DIFF,)), t.files(), t.names))


def _changes(t: IndexTarget, rows: pa.Table) -> pa.Table:
    return diffs.changes_keyed(_keyed(t, rows), t.files(), t.names)
