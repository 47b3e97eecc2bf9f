"""A global top-k over a kept GROUP BY state, re-ranking only what changed.

The top-k's *candidates* are the groups (their keys) that ranked first, up to
OFFSET + LIMIT + ``topk_margin`` rows, at the end of the last tick, and whether
they were every ranked group (*complete*). Invariant: every other group ranks
at or after every candidate. A tick that changed the groups G ranks only

    S = (candidates not in G, their partials unchanged) ∪ (G's rows now).

A group outside S is an unchanged non-candidate: it ranks at or after every
unchanged candidate. So while at least OFFSET + LIMIT candidates are unchanged
(or they were complete), the first OFFSET + LIMIT rows of S are the first of all
groups. The new candidates are S's first rows up to the last unchanged candidate
(every group outside S ranks after it), at most OFFSET + LIMIT + margin: changed
candidates that fall back, and deleted ones, use the margin up. When too few
candidates are left, none is stored, or the state was rebuilt, every group is
ranked once and the candidates seeded again (Materialize's hierarchical TopK,
with one level and a margin instead of buckets).

The candidates are recorded in the metadata of the state commit that merges the
tick's groups: one atomic commit, so the state at every version and its
candidates agree. A tick killed before that commit leaves both as they were; a
tick retried after it reads the version before (as of the index's time) with
its own candidates, and finds its state commit applied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.engine.frames import project, sort_key, sql
from mzflow.engine.spark import collect_arrow, from_arrow
from mzflow.plan import ir
from mzflow.storage.delta import KEY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


KEYS_META = "mzflow.topk_candidates"  # the candidates' group keys (a JSON list)
COMPLETE_META = "mzflow.topk_complete"  # "1": the candidates were every ranked group
KEPT = "_mz_kept"  # a ranked row is an unchanged candidate
# Keys ride in commit metadata (64 hex digits each): past this many, a commit's log
# entry would outgrow the bookkeeping it belongs to, and the top-k re-ranks everything.
MOST_CANDIDATES = 1_000


@dataclass(frozen=True)
class Candidates:
    keys: tuple[str, ...]
    complete: bool

    def metadata(self) -> dict[str, str]:
        return {KEYS_META: json.dumps(self.keys), COMPLETE_META: "1" if self.complete else "0"}

    @staticmethod
    def of(meta: Mapping[str, Any]) -> Candidates | None:
        """The candidates a state commit recorded (None: it recorded none)."""
        if KEYS_META not in meta:
            return None
        return Candidates(tuple(json.loads(meta[KEYS_META])), meta.get(COMPLETE_META) == "1")


@dataclass(frozen=True)
class Ranking:
    """A state chain split at its global top-k: ``above`` and ``below`` it (outermost
    first), and how many ranked rows to keep as candidates."""

    above: tuple[ir.Node, ...]
    topk: ir.TopK
    below: tuple[ir.Node, ...]
    keep: int

    @staticmethod
    def of(chain: Sequence[ir.Node], grouped: bool, margin: int) -> Ranking | None:
        """None when no candidates can be kept: a top-k per group, without a LIMIT, over
        a GROUP BY without keys (one group), or keeping too many rows."""
        i = next(i for i, n in enumerate(chain) if isinstance(n, ir.TopK))
        top = chain[i]
        assert isinstance(top, ir.TopK)
        if top.group or top.limit is None or not grouped:
            return None
        wanted = top.offset + top.limit
        if wanted == 0 or wanted + margin > MOST_CANDIDATES:
            return None
        return Ranking(tuple(chain[:i]), top, tuple(chain[i + 1:]), wanted + margin)

    @property
    def wanted(self) -> int:
        return self.topk.offset + (self.topk.limit or 0)

    def unchanged(self, kept: Candidates | None, changed: pa.Array) -> pa.Array | None:
        """The candidates the tick did not change, when they decide the first rows;
        None: every group is ranked."""
        if kept is None:
            return None
        keys = pa.array(kept.keys, pa.string())
        same = keys.filter(pc.invert(pc.is_in(keys, value_set=changed.cast(pa.string()))))
        return same if kept.complete or len(same) >= self.wanted else None

    def rank(self, finalized: DataFrame, unchanged: int | None, complete: bool
             ) -> tuple[DataFrame, Candidates]:
        """The top-k's output (the chain above it applied) and the new candidates.

        ``finalized``: the ranked groups' output columns with KEY and KEPT. ``unchanged``:
        how many unchanged candidates it holds (None: it holds every group);
        ``complete``: they were every ranked group last tick."""
        from pyspark.sql import functions as F

        from mzflow.incremental.rules import rule_for

        ranked = finalized
        for op in reversed(self.below):
            ranked = (project(ranked, op.exprs + (ir.col(KEY), ir.col(KEPT)),
                              op.columns + (KEY, KEPT))
                      if isinstance(op, ir.Map) else rule_for(op).apply(op, ranked))
        order = [sort_key(F.expr(sql(o.this)), o) for o in self.topk.order] or [F.lit(1)]
        # One Spark job: ORDER BY … LIMIT runs as a top-n per partition, then a merge;
        # the rows come back in order.
        head = collect_arrow(ranked.orderBy(*order).limit(self.keep))
        end = head.num_rows
        if unchanged is not None and not complete:
            kept = head.column(KEPT).to_pylist()
            if sum(kept) == unchanged:  # all of them ranked within the first rows
                end = max(i for i, k in enumerate(kept) if k) + 1
        candidates = Candidates(
            tuple(head.column(KEY).slice(0, end).to_pylist()),
            (unchanged is None or complete) and head.num_rows < self.keep)
        columns = [c for c in head.column_names if c not in (KEY, KEPT)]
        top = head.slice(self.topk.offset, self.topk.limit).select(columns)
        out = (from_arrow(top) if top.num_rows
               else ranked.select(*[F.col(f"`{c}`") for c in columns]).limit(0))
        for op in reversed(self.above):
            out = rule_for(op).apply(op, out)
        return out, candidates
