"""Shrinking a failing history by delta debugging, bounded by time.

Pure: it knows nothing of mzflow. ``ddmin`` takes the items of a history that fails and
a ``test(candidate) -> bool`` (does this sub-history still fail the same way?) and drops
what it can: halves, then quarters, … then single items (Zeller's ddmin, complements
only: a sub-history is a history with some operations left out, never one chunk alone,
which would lack the DDL before it). ``replay.py`` supplies the real test.

``plausible`` is the cheap filter in front of a replay: a candidate that writes to a
table it never created, ticks a view it dropped, or creates a view over a name that is
not there fails in replay on an unknown name, so it is not run at all.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass
class Stats:
    tested: int = 0  # candidates the test ran
    replays: int = 0  # of which replayed (the others failed the cheap filter)
    cached: int = 0  # candidates answered from the cache
    reproduced: int = 0
    timed_out: bool = False
    log: list[str] = field(default_factory=list)


def ddmin(items: Sequence[T], test: Callable[[list[T]], bool], deadline: float,
          clock: Callable[[], float] = time.monotonic, stats: Stats | None = None,
          say: Callable[[str], None] | None = None) -> list[T]:
    """The shortest failing sub-sequence of ``items`` found before ``deadline`` (a
    ``clock()`` value). ``items`` must fail (``test(items)`` true): it is not re-tested.
    Each round splits the current history into ``n`` chunks and tries it without each
    one (the later chunks first: what follows the failure is the likeliest to go); a
    success keeps the smaller history and coarsens ``n`` by one, a round without one
    doubles ``n``, down to single items. 1-minimal when it finishes in time."""
    st = stats if stats is not None else Stats()
    seen: dict[tuple[T, ...], bool] = {}

    def run(cand: list[T]) -> bool:
        key = tuple(cand)
        if key in seen:
            st.cached += 1
            return seen[key]
        st.tested += 1
        ok = seen[key] = test(cand)
        st.reproduced += ok
        return ok

    current = list(items)
    n = 2
    while len(current) >= 2:
        size = -(-len(current) // n)  # ceil
        starts = list(range(0, len(current), size))
        reduced = False
        for start in reversed(starts):
            if clock() >= deadline:
                st.timed_out = True
                return current
            cand = current[:start] + current[start + size:]
            if cand and run(cand):
                if say:
                    say(f"{len(current)} -> {len(cand)} operations")
                current = cand
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if size == 1:
                break  # no single item can go: 1-minimal
            n = min(n * 2, len(current))
    return current


# -- the cheap filter --------------------------------------------------------------

# The soak's object names (mzflow_dev/soak/ops.py): tables, fixed and dynamic views,
# clusters, sinks, indexes. Columns (id, k, v, s, name, w, a, x<n>) never match.
_NAME = re.compile(r"\b(t\d+|mv_\w+|dv\d+|pv\d+|c\d+|s_\w+|ix\d+)\b")
_STRING = re.compile(r"'(?:[^']|'')*'")
_CREATE = re.compile(r"^CREATE (?:MATERIALIZED VIEW|VIEW|TABLE|CLUSTER|SINK|INDEX) (\w+)",
                     re.IGNORECASE)
_DROP = re.compile(r"^DROP (?:MATERIALIZED VIEW|VIEW|TABLE|INDEX|SINK)( IF EXISTS)? (\w+)",
                   re.IGNORECASE)


# ALTER TABLE … ADD/DROP/MATERIALIZE/CLEAR PROJECTION and ADD/DROP CONSTRAINT.
_PART = re.compile(r"^ALTER TABLE \w+ (ADD|DROP|MATERIALIZE|CLEAR) (?:PROJECTION|CONSTRAINT)"
                   r"( IF (?:NOT )?EXISTS)? (\w+)")


def names_in(sql: str) -> set[str]:
    """The soak object names ``sql`` mentions (string literals, paths included, left out)."""
    return set(_NAME.findall(_STRING.sub("''", sql)))


def plausible(ops: Sequence[dict[str, Any]]) -> bool:
    """Whether every name each operation uses exists when it runs (DROP … CASCADE takes
    what was built on the dropped object with it). False is a promise the replay would
    fail on an unknown name; True promises nothing."""
    deps: dict[str, set[str]] = {}  # live name -> the live names it was built on

    def drop(name: str) -> None:
        gone = {name}
        while True:
            more = {n for n, on in deps.items() if on & gone and n not in gone}
            if not more:
                break
            gone |= more
        for n in gone:
            deps.pop(n, None)

    parts: set[str] = set()  # live projections and expectations (pN, eN)
    for op in ops:
        kind = op["op"]
        part = _PART.match(op.get("sql") or "") if kind == "sql" else None
        if part:
            verb, guarded, name = part.groups()
            if verb == "ADD":
                parts.add(name)
            elif name not in parts and not guarded:
                return False  # DROP, MATERIALIZE or CLEAR of one never added
            elif verb == "DROP":
                parts.discard(name)
        if kind in ("sql", "write"):
            sql = op["sql"]
            created = _CREATE.match(sql)
            dropped = _DROP.match(sql)
            used = names_in(sql)
            if created:
                used.discard(created.group(1))
            if dropped:
                used.discard(dropped.group(2))
                if dropped.group(1) is None and dropped.group(2) not in deps:
                    return False
            if not used <= deps.keys():
                return False
            if created:
                deps[created.group(1)] = used
            if dropped:
                drop(dropped.group(2))
        elif kind in ("tick", "read"):
            if op["view"] not in deps:
                return False
        elif kind == "subscribe":
            if op["rel"] not in deps:
                return False
        elif kind == "sink":
            if op["sink"] not in deps:
                return False
    return True
