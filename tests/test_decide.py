"""The tick's decision (``incremental/decide.py``) from tables of numbers: no I/O, no
Spark. Each row: the facts a tick gathered, and the mode and reason it must pick."""

from __future__ import annotations

import pytest

from mzflow.config import Tuning
from mzflow.incremental.decide import (
    BATCH_KEY,
    MODE_KEY,
    ROWS_KEY,
    SECONDS_KEY,
    Decision,
    Facts,
    decide,
    executor,
)
from mzflow.incremental.modes import Mode
from mzflow.reasons import R_BATCH, R_FIRST, R_MEASURED, R_MEASURING, R_REFRESH
from mzflow.storage.delta import TS_KEY

DELTA, FULL, REBUILD, STATE = Mode.DELTA, Mode.RECOMPUTE, Mode.REBUILD, Mode.STATE


def tick(mode: str, seconds: float, batch: int = 10, rows: int = 1000, ts: int = 0
         ) -> dict[str, str]:
    return {MODE_KEY: mode, SECONDS_KEY: str(seconds), BATCH_KEY: str(batch),
            ROWS_KEY: str(rows), TS_KEY: str(ts)}


FAST = [tick(STATE, 0.5, ts=9), tick(STATE, 0.5, ts=8), tick(FULL, 3.0, ts=7)]
SLOW = [tick(DELTA, 9.0, ts=9), tick(DELTA, 9.0, ts=8), tick(FULL, 3.0, ts=7)]
UNMEASURED = [tick(STATE, 0.5, ts=9), tick(STATE, 0.5, ts=8)]

CASES = [
    # planned, since, history, batch, inputs, refresh → mode, reason, rebuild, measure
    (DELTA, -1, [], 0, 0, False, FULL, R_FIRST, False, False),
    (STATE, -1, [], 5, 5, False, STATE, None, True, False),
    (FULL, 9, FAST, 1, 1000, False, FULL, None, False, False),
    (DELTA, 9, FAST, 300, 1000, False, FULL, R_BATCH, False, False),  # 30 % > 25 %
    (DELTA, 9, FAST, 200, 1000, False, DELTA, None, False, False),
    (DELTA, 9, SLOW, 10, 1000, False, FULL, R_MEASURED, False, False),
    (DELTA, 9, SLOW, 10, 10_000, False, DELTA, None, False, False),  # recompute dearer
    (STATE, 9, [tick(FULL, 3.0, ts=9), *UNMEASURED], 10, 1000, False, STATE, None, True,
     False),  # a recompute left the state behind
    (STATE, 9, UNMEASURED, 10, 1000, False, STATE, None, False, True),  # measure on the side
    (DELTA, 9, UNMEASURED, 10, 1000, False, FULL, R_MEASURING, False, False),
    (STATE, 9, FAST, 10, 1000, True, FULL, R_REFRESH, False, False),
    (STATE, 9, [tick(REBUILD, 3.0, ts=9), *SLOW], 10, 1000, False, STATE, None, False, False),
    # a state view's recompute is a rebuild: it keeps the state for the next small tick
    (STATE, 9, SLOW, 10, 1000, False, STATE, R_MEASURED, True, False),
]


@pytest.mark.parametrize(("planned", "since", "history", "batch", "inputs", "refresh", "mode",
                          "reason", "rebuild", "measure"), CASES)
def test_decide(planned: str, since: int, history: list[dict[str, str]], batch: int,
                inputs: int, refresh: bool, mode: str, reason: str | None, rebuild: bool,
                measure: bool) -> None:
    d = decide(Facts(planned, since, history, batch, inputs, refresh), Tuning())
    assert (d.mode, d.reason, d.rebuild, d.measure) == (mode, reason, rebuild, measure)
    assert bool(d.detail) == (reason == R_MEASURED)


def test_the_switches_follow_the_tuning() -> None:
    # recompute_share >= 1 turns the measured switches off; the share itself still counts.
    off = Tuning(recompute_share=1000)
    assert decide(Facts(DELTA, 9, SLOW, 10, 1000), off).mode == DELTA
    assert decide(Facts(DELTA, 9, UNMEASURED, 10, 1000), off).mode == DELTA
    assert decide(Facts(DELTA, 9, [], 500, 1000), Tuning(recompute_share=0.6)).mode == DELTA
    assert decide(Facts(DELTA, 9, [], 500, 1000), Tuning(recompute_share=0.4)).reason == R_BATCH
    # measure_every bounds how far back a warm recompute counts.
    assert decide(Facts(STATE, 9, FAST, 10, 1000), Tuning(measure_every=2)).measure


def test_a_join_recomputes_from_a_far_smaller_batch_share() -> None:
    # 2 % of the inputs changed: a single-table view stays incremental, a join view
    # recomputes, in delta and in state mode (where the recompute is a rebuild, which
    # keeps the state); a first state tick still builds its state.
    small, joined = Facts(STATE, 9, [], 20, 1000), Facts(STATE, 9, [], 20, 1000, joins=True)
    assert decide(small, Tuning()) == Decision(STATE)
    assert decide(joined, Tuning()) == Decision(STATE, R_BATCH, rebuild=True)
    assert decide(Facts(DELTA, 9, [], 20, 1000, joins=True), Tuning()).reason == R_BATCH
    assert decide(Facts(DELTA, 9, [], 5, 1000, joins=True), Tuning()).mode == DELTA
    assert decide(Facts(STATE, -1, [], 20, 1000, joins=True), Tuning()).rebuild
    # the share is tunable, and recompute_share >= 1 turns it off with the other switches
    assert decide(joined, Tuning(join_recompute_share=0.05)) == Decision(STATE)
    assert decide(joined, Tuning(recompute_share=1000)) == Decision(STATE)


def test_a_join_that_ticks_in_process_stays_incremental_for_larger_batches() -> None:
    # In process a lookup costs microseconds: 2 % and 20 % stay incremental (TPC-H's 10 %
    # batches are a fifth of the join views' inputs), 30 % recomputes.
    local = Facts(STATE, 9, [], 20, 1000, joins=True, local_refusal=None)
    assert decide(local, Tuning()) == Decision(STATE)
    assert decide(Facts(STATE, 9, [], 200, 1000, joins=True, local_refusal=None),
                  Tuning()) == Decision(STATE)
    large = Facts(DELTA, 9, [], 300, 1000, joins=True, local_refusal=None)
    assert (decide(large, Tuning()).mode, decide(large, Tuning()).reason) == (FULL, R_BATCH)
    # ... unless the batch is too large for the process: Spark's prior again
    assert decide(local, Tuning(local_tick_rows=10)).reason == R_BATCH
    assert decide(local, Tuning(tick_executor="spark")).reason == R_BATCH


EXECUTOR_CASES = [
    # planned, since, batch, refusal, tick_executor → executor, reason (start)
    (STATE, 9, 100, None, "auto", "local", "batch of 100 rows"),
    (DELTA, 9, 100, None, "auto", "local", "batch of 100 rows"),
    (STATE, 9, 3_000_001, None, "auto", "spark", "batch of 3000001 rows > local_tick_rows"),
    (STATE, 9, 3_000_001, None, "local", "local", "batch of 3000001 rows"),
    (STATE, 9, 100, None, "spark", "spark", "tick_executor = 'spark'"),
    (STATE, 9, 100, "Window has no in-process path yet", "auto", "spark", "Window"),
    # a rebuild: in process while its inputs fit local_rebuild_rows (input rows below)
    (STATE, -1, 100, None, "local", "local", "a state rebuild of 10000000 input rows"),
    (STATE, -1, 100, None, "spark", "spark", "reads every input row"),
    (STATE, -1, 100, "Window has no in-process path yet", "auto", "spark", "reads every"),
    (FULL, 9, 100, None, "local", "spark", "reads every input row"),
]


@pytest.mark.parametrize(("planned", "since", "batch", "refusal", "setting", "where", "why"),
                         EXECUTOR_CASES)
def test_executor(planned: Mode, since: int, batch: int, refusal: str | None, setting: str,
                  where: str, why: str) -> None:
    t = Tuning(tick_executor=setting, recompute_share=1000)
    f = Facts(planned, since, [], batch, 10_000_000, local_refusal=refusal)
    got = executor(f, t, decide(f, t))
    assert got[0] == where and got[1].startswith(why), got
    if got[0] == "local" and "rebuild" in got[1]:  # inputs over the limit: Spark
        over = Tuning(tick_executor=setting, recompute_share=1000, local_rebuild_rows=10)
        assert executor(f, over, decide(f, over))[0] == "spark"


def test_the_cost_switch_compares_ticks_of_the_same_executor() -> None:
    from mzflow.incremental.decide import EXECUTOR_KEY, measured_slower

    local_slow = {**tick(STATE, 9.0, ts=9), EXECUTOR_KEY: "local (batch of 10 rows)"}
    history = [local_slow, tick(STATE, 9.0, ts=8) | {EXECUTOR_KEY: "local (x)"},
               tick(FULL, 3.0, ts=7)]
    # In process, its own slow ticks say recompute ...
    assert measured_slower(history, 10, 1000, Tuning(), True) is not None
    # ... but they say nothing of a tick that would run on Spark (none measured there).
    assert measured_slower(history, 10, 1000, Tuning(), False) is None
    # Ticks from before executors were recorded ran on Spark.
    assert measured_slower(SLOW, 10, 1000, Tuning(), False) is not None
