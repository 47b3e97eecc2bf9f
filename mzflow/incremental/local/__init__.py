"""The in-process executor: a small tick's dataflow in Arrow, without Spark.

A tick of a few thousand changed rows does milliseconds of work, and Spark's fixed
costs (a job per collect, py4j calls to build plans) were most of its time. This
package runs the same rules' algorithms (``incremental/rules/``) over Arrow tables:
filters and maps through ``engine/arrow_expr.py`` (PostgreSQL's semantics, as Spark's
path renders them), a join as a chain of index lookups into the cluster's
arrangements, a kept GROUP BY's partials through Arrow's ``group_by``.

``decide.py`` chooses it (``Decision.executor``); a tick it cannot run exactly raises
:class:`NotLocal` before anything is committed, and runs on Spark instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mzflow.errors import Unsupported
from mzflow.incremental.modes import Mode
from mzflow.plan import ir

if TYPE_CHECKING:
    from mzflow.config import Tuning
    from mzflow.incremental.plan import ChangePlan


class NotLocal(Unsupported):
    """The in-process executor cannot run this tick exactly: Spark runs it.
    ``lasting``: nor any later tick of the same plan (an expression it cannot
    evaluate), as opposed to this tick's data (a read too large)."""

    def __init__(self, message: str, *, lasting: bool = False):
        super().__init__(message)
        self.lasting = lasting


def refusal(plan: ChangePlan, topk_margin: int) -> str | None:
    """Why the in-process executor cannot run ``plan``'s ticks, from its operators
    alone (None: it can try; an expression it cannot evaluate raises NotLocal)."""
    from mzflow.incremental.rules.topk_state import Ranking

    root = plan.root
    if root is None:
        return "no change plan"
    if plan.mode == Mode.DELTA:
        nodes = list(root.walk())
    elif plan.mode == Mode.STATE and plan.context.state_reduce is not None:
        chain, reduce = plan.context.chain, plan.context.state_reduce
        if any(not isinstance(n, ir.Map | ir.Filter | ir.TopK) for n in chain):
            return "an operator above the GROUP BY has no in-process path yet"
        if any(isinstance(n, ir.TopK) for n in chain) and Ranking.of(
                chain, bool(reduce.keys), topk_margin) is None:
            return "a top-k that keeps no candidates ranks every group (Spark)"
        nodes = list(reduce.input.walk())
    else:
        return f"mode {plan.mode} has no in-process path"
    for n in nodes:
        if not isinstance(n, ir.Get | ir.Filter | ir.Map | ir.Join | ir.Reduce | ir.Union):
            return f"{type(n).__name__} has no in-process path yet"
        if isinstance(n, ir.Reduce) and not n.keys:
            return "a GROUP BY without keys inside the plan is recomputed whole"
    return None


def describe(plan: ChangePlan, tuning: Tuning) -> str:
    """EXPLAIN's ``Executor:`` line: where the plan's incremental ticks run."""
    if plan.mode == Mode.RECOMPUTE:
        return "Spark (every tick recomputes)"
    if tuning.tick_executor == "spark":
        return "Spark (tick_executor = 'spark')"
    why = refusal(plan, tuning.topk_margin)
    if why is not None:
        return f"Spark ({why})"
    if tuning.tick_executor == "local":
        return "in process whenever it can run the tick exactly (tick_executor = 'local')"
    return (f"in process for batches of up to {tuning.local_tick_rows} change rows, else "
            "Spark; first ticks and state rebuilds on Spark")
