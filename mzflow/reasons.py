"""Why a maintained object (or one of its operators) is recomputed: stable codes.

Codes appear in EXPLAIN, tick reports, task logs, commit metadata and the error of
``REFRESH = 'incremental'``, so they never change meaning. Every stage may import
this module (like ``errors.py``); README's table of reason codes is this one.
"""

from __future__ import annotations

# The plan: what lowering leaves opaque, and operators without an incremental rule.
R_SUBQUERY = "R002"
R_CONSTRUCT = "R003"
R_GLOBAL_AGG = "R004"
R_GLOBAL_TOPK = "R005"
R_WINDOW = "R006"
R_OUTER = "R007"
# The run time: what a tick decides from its batch and its measured history.
R_BATCH = "R010"
R_HISTORY = "R011"
R_FIRST = "R012"
R_MEASURED = "R013"
R_MEASURING = "R014"
R_REFRESH = "R015"
R_LAPSED = "R016"

REASONS = {
    R_SUBQUERY: "a subquery that could not be decorrelated into a join",
    R_CONSTRUCT: "a construct the incremental operators do not model",
    R_GLOBAL_AGG: "an aggregate without GROUP BY whose aggregates do not accumulate, or below "
                  "the top of the plan, is recomputed whole",
    R_GLOBAL_TOPK: "ORDER BY … LIMIT without a partition is recomputed whole",
    R_WINDOW: "window functions without a common PARTITION BY column",
    R_OUTER: "an outer join without an equality between its sides",
    R_BATCH: "the batch is a large share of the inputs, so recomputing is cheaper",
    R_HISTORY: "the inputs' change history since the last tick was compacted away",
    R_FIRST: "the first tick computes the whole contents",
    R_MEASURED: "incremental ticks of this index were measured slower than recomputing it",
    R_MEASURING: "a recompute measures what recomputing this index costs (once per "
                 "measure_every ticks)",
    R_REFRESH: "a full refresh was asked for",
    R_LAPSED: "the index's read hold on its inputs lapsed (its lease ran out before a tick "
              "renewed it) and compaction passed the time its changes start from",
}


def text(code: str) -> str:
    return REASONS[code]
