"""How one tick runs: its mode, the reason, and the figures behind it. No I/O.

The plan fixes what *can* be maintained (``plan.py``); this decides, per tick,
from facts the tick gathered (its batch and input sizes from the Delta logs, and
the index's recent tick commits), whether to propagate the batch, rebuild a kept
state, or recompute, and whether to measure a recompute on the side. Every tick
commit records its mode and cost under the keys below, so the next decision can
compare incremental work with recomputing, measured on this index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mzflow.config import Tuning
from mzflow.incremental.modes import Mode
from mzflow.reasons import R_BATCH, R_FIRST, R_LAPSED, R_MEASURED, R_MEASURING, R_REFRESH
from mzflow.storage.delta import TS_KEY

DEFAULT = Tuning()
LOCAL, SPARK = "local", "spark"  # where an incremental tick runs (executor)

# Commit metadata of a tick (Delta commitInfo), read back by the next decisions.
MODE_KEY, SECONDS_KEY, BATCH_KEY, ROWS_KEY, REASON_KEY = (
    "mzflow.mode", "mzflow.seconds", "mzflow.batch_rows", "mzflow.input_rows",
    "mzflow.reason")
DETAIL_KEY = "mzflow.strategy"
EXECUTOR_KEY = "mzflow.executor"  # in process or Spark, and why (incremental/local/)
JOBS_KEY = "mzflow.spark_jobs"  # Spark jobs the tick ran
# Input rows the tick read (input_rows is the inputs' size, for the cost switch): the
# plugin's tick history shows it.
READ_KEY = "mzflow.rows_read"
COLD_KEY = "mzflow.cold"  # the first tick: Spark and caches are cold, its cost says little
# A state-mode tick that also timed a recompute it did not commit (R014 without losing
# the state: a committed recompute would leave the state behind, and rebuilding it
# costs 2-3 recomputes on TPC-H Q18 and top-k).
MEASURED_KEY = "mzflow.recompute_seconds"


@dataclass(frozen=True)
class Facts:
    planned: Mode  # the plan's mode (STATE, DELTA or RECOMPUTE)
    since: int  # the index's last error-free time (-1: never ticked)
    history: Sequence[Mapping[str, Any]] = ()  # the index's latest tick commits, newest first
    batch_rows: int = 0  # the inputs' change rows since ``since`` (Delta log metrics)
    input_rows: int = 0  # the inputs' rows at the new time (file statistics)
    full_refresh: bool = False
    joins: bool = False  # the view reads more than one table reference
    # why the in-process executor cannot run this plan (None: it can; incremental/local/)
    local_refusal: str | None = "not checked"
    # compaction passed ``since`` on an input (its read hold had lapsed): which, and when
    passed: str | None = None

    def local(self, t: Tuning) -> bool:
        """An incremental tick of this batch would run in process."""
        return (self.local_refusal is None and t.tick_executor != SPARK
                and (t.tick_executor == LOCAL or self.batch_rows <= t.local_tick_rows))

    @property
    def first(self) -> bool:
        return self.since < 0


@dataclass(frozen=True)
class Decision:
    mode: Mode
    reason: str | None = None  # a run-time reason code (None: the plan's own)
    rebuild: bool = False  # state mode: recompute every group and replace the state
    measure: bool = False  # state mode: also time a recompute (R014), not committed
    detail: str = ""  # the figures behind R013, the inputs compaction passed (R016)


def decide(f: Facts, t: Tuning) -> Decision:
    if f.full_refresh:
        return Decision(Mode.RECOMPUTE, R_REFRESH)
    if f.planned == Mode.RECOMPUTE:
        return Decision(Mode.RECOMPUTE)
    if f.planned == Mode.DELTA and f.first:
        return Decision(Mode.RECOMPUTE, R_FIRST)
    if f.passed is not None:
        return _recompute(f, R_LAPSED, f.passed)
    switches = t.recompute_share < 1  # >= 1: the cost switches are off (tests of paths)
    if f.planned == Mode.DELTA and large(f.batch_rows, f.input_rows, t.recompute_share):
        return _recompute(f, R_BATCH)
    # A join's incremental cost per changed row is many times a recompute's per input
    # row (a lookup per key in every other input), so its break-even share is far
    # lower. State mode too: a recompute leaves the state behind, but rebuilding it
    # later costs about one recompute, and a large batch's delta join costs several.
    # In process, a lookup costs microseconds, not a share of a Spark job: the prior
    # is far higher there.
    join_share = t.local_join_recompute_share if f.local(t) else t.join_recompute_share
    if (switches and f.joins and not f.first and f.planned in (Mode.DELTA, Mode.STATE)
            and large(f.batch_rows, f.input_rows, join_share)):
        return _recompute(f, R_BATCH)
    slower = (measured_slower(f.history, f.batch_rows, f.input_rows, t, f.local(t))
              if switches and f.history else None)
    if slower is not None:
        return _recompute(f, R_MEASURED, f" [{slower}]")
    if f.planned == Mode.STATE and (f.first or state_behind(f.history, f.since)):
        return Decision(Mode.STATE, rebuild=True)
    if not f.first and switches and measurement_due(f.history, t, f.batch_rows, f.local(t)):
        # Without a recent recompute's cost the switch cannot compare: measure one.
        # State mode keeps its state: it ticks, then times a recompute.
        if f.planned == Mode.STATE:
            return Decision(Mode.STATE, measure=True)
        return Decision(Mode.RECOMPUTE, R_MEASURING)
    return Decision(f.planned)


def _recompute(f: Facts, reason: str, detail: str = "") -> Decision:
    """The cost switch's recompute. A state view's is a rebuild: the same reads and
    work, and it writes the groups' partials too. A plain recompute left the state
    behind, and the next small tick paid for a rebuild on Spark (Q18 at SF 1: 6.8 s
    after a 10 % batch, against 0.1 s in process; issue 34)."""
    if f.planned == Mode.STATE:
        return Decision(Mode.STATE, reason, rebuild=True, detail=detail)
    return Decision(Mode.RECOMPUTE, reason, detail=detail)


def executor(f: Facts, t: Tuning, d: Decision) -> tuple[str, str]:
    """Where an incremental tick runs, and why: in process (Arrow) when its batch is
    small and the plan's operators and expressions all have an in-process path; else
    Spark, which also keeps the large work (recomputes, state rebuilds, first ticks)."""
    if (d.rebuild and d.mode == Mode.STATE and f.local_refusal is None
            and t.tick_executor != SPARK and 0 < f.input_rows <= t.local_rebuild_rows):
        # In process, a rebuild skips Spark's fixed costs, and a first one also a cold
        # server's: TPC-H SF 1's five views hydrated in 35.6 s on their cluster's Spark.
        return LOCAL, f"a state rebuild of {f.input_rows} input rows"
    if d.mode == Mode.RECOMPUTE or d.rebuild or f.first:
        # (and why the in-process executor refused this tick, when it tried)
        tried = f.local_refusal or ""
        return SPARK, "reads every input row" + (
            f"; {tried}" if tried.startswith("in process:") else "")
    if t.tick_executor == SPARK:
        return SPARK, "tick_executor = 'spark'"
    if f.local_refusal is not None:
        return SPARK, f.local_refusal
    if not f.local(t):
        return SPARK, f"batch of {f.batch_rows} rows > local_tick_rows {t.local_tick_rows}"
    return LOCAL, f"batch of {f.batch_rows} rows"


def large(batch_rows: int, input_rows: int, share: float) -> bool:
    """The batch is a large share of the inputs: recomputing is cheaper."""
    return input_rows > 0 and batch_rows > share * input_rows


def state_behind(history: Sequence[Mapping[str, Any]], since: int) -> bool:
    """The state is consistent with the index only if the tick that made the index's
    current contents kept it (a recompute does not)."""
    for entry in history:
        # Compaction commits carry the same time and no mode: skip them.
        if int(entry.get(TS_KEY, -1)) == since and MODE_KEY in entry:
            return entry[MODE_KEY] not in (Mode.STATE, Mode.REBUILD)
    return False  # ticks from before modes were recorded kept their state


def measured_slower(history: Sequence[Mapping[str, Any]], batch_rows: int, input_rows: int,
                    t: Tuning = DEFAULT, local: bool = False) -> str | None:
    """Whether to recompute, from an index's tick history (newest first): the cost of
    an incremental tick of this batch, fitted to its recent incremental ticks, against
    its last warm recompute scaled to these inputs. None: go incremental. After a state
    rebuild (other than this switch's own) an incremental tick is always measured, and
    every ``probe_every`` measured recomputes in a row incremental gets another chance
    (batches change)."""
    if not history or (history[0].get(MODE_KEY) == Mode.REBUILD
                       and history[0].get(REASON_KEY) != R_MEASURED):
        return None  # (a rebuild this switch chose is one of its recomputes)
    # Only ticks on the executor this one would use predict it: an in-process tick of
    # 6 k rows says nothing about a Spark tick of 1.2 M.
    incs = [(int(h.get(BATCH_KEY, 1)), _incremental_seconds(h)) for h in history
            if h.get(MODE_KEY) in (Mode.DELTA, Mode.STATE) and SECONDS_KEY in h
            and str(h.get(EXECUTOR_KEY, SPARK)).startswith(LOCAL) == local]
    rec = next((h for h in history if recompute_seconds(h) is not None), None)
    if not incs or rec is None:
        return None
    recent = history[:t.probe_every]
    if len(recent) == t.probe_every and all(h.get(REASON_KEY) == R_MEASURED for h in recent):
        return None
    est_inc = incremental_cost(incs, batch_rows)
    est_rec = (recompute_seconds(rec) or 0.0) * max(1, input_rows) / max(
        1, int(rec.get(ROWS_KEY, 1)))
    if est_inc <= est_rec:
        return None
    return (f"incremental ~{est_inc:.2f} s vs recompute ~{est_rec:.2f} s, from this "
            "index's last ticks")


def recompute_seconds(entry: Mapping[str, Any]) -> float | None:
    """A tick's measure of a warm recompute, if it made one."""
    if entry.get(MODE_KEY) == Mode.RECOMPUTE and not entry.get(COLD_KEY) and SECONDS_KEY in entry:
        return float(entry[SECONDS_KEY])
    if MEASURED_KEY in entry:
        return float(entry[MEASURED_KEY])
    return None


def _incremental_seconds(entry: Mapping[str, Any]) -> float:
    """An incremental tick's own cost (less a recompute it timed on the side)."""
    return float(entry[SECONDS_KEY]) - float(entry.get(MEASURED_KEY, 0))


def incremental_cost(ticks: Sequence[tuple[int, float]], batch_rows: int) -> float:
    """A tick's cost is a fixed part (Spark jobs, commits) plus a part that grows with
    the batch: fitted by least squares when recent batches were at least 2x apart in
    size; else from their medians, grown by the square root of the batch ratio
    (between the all-fixed and all-proportional extremes). Never below the cheapest
    tick seen."""
    sizes = [b for b, _ in ticks]
    floor = min(s for _, s in ticks)
    if max(sizes) >= 2 * max(1, min(sizes)):  # a fit needs sizes at least 2x apart
        n = len(ticks)
        mean_b = sum(b for b, _ in ticks) / n
        mean_s = sum(s for _, s in ticks) / n
        var = sum((b - mean_b) ** 2 for b, _ in ticks)
        slope = max(0.0, sum((b - mean_b) * (s - mean_s) for b, s in ticks) / var)
        return max(floor, mean_s + slope * (batch_rows - mean_b))
    b = sorted(sizes)[len(sizes) // 2]
    s = sorted(s for _, s in ticks)[len(ticks) // 2]
    return s * max(1.0, (batch_rows / max(1, b)) ** 0.5)


# No recompute is cheaper than this: it runs at least one Spark job over every input
# (0.2-0.5 s each on the bench machine, issue 34). Incremental ticks this fast are
# not worth measuring a recompute against: at TPC-H SF 1 the measurement cost 30-80
# in-process ticks (R014 timed 3-9 s beside ticks of 0.1 s).
NO_CHEAPER_RECOMPUTE_S = 0.25


def measurement_due(history: Sequence[Mapping[str, Any]], t: Tuning = DEFAULT,
                    batch_rows: int | None = None, local: bool = False) -> bool:
    """No warm recompute among the last ``measure_every`` ticks, and at least two
    incremental ticks to compare it with, typically slower than any recompute can be.
    (A state rebuild is no measure: it also writes every group's partials, which can
    cost far more than the recompute.) With ``batch_rows``: and a tick of this batch,
    as this executor's recent ticks predict it, would be too: a measurement timed beside
    a 0.1 % tick after a round of 10 % batches cost Q18 at SF 1 6.1 s beside 0.1 s."""
    recent = history[:t.measure_every]
    warm = [h for h in recent if recompute_seconds(h) is not None]
    incremental = [h for h in recent if h.get(MODE_KEY) in (Mode.DELTA, Mode.STATE)
                   and SECONDS_KEY in h]
    if warm or len(incremental) < 2:
        return False
    # The lower median: one slow tick (the first lookup hydrating memory: Q3's 2.5 s
    # among ticks of 0.1 s) does not make the index slow.
    times = sorted(_incremental_seconds(h) for h in incremental)
    if times[(len(times) - 1) // 2] < NO_CHEAPER_RECOMPUTE_S:
        return False
    if batch_rows is None:
        return True
    same = [(int(h.get(BATCH_KEY, 1)), _incremental_seconds(h)) for h in incremental
            if str(h.get(EXECUTOR_KEY, SPARK)).startswith(LOCAL) == local]
    return not same or incremental_cost(same, batch_rows) >= NO_CHEAPER_RECOMPUTE_S
