"""``mzflow plan -f catalog.sql``: what applying a desired catalog file would change,
without changing anything (SQLMesh's plan; issue 38, item 1).

The file runs against a scratch catalog (desired.py), the result is compared with the
live one (diff.py), and the indexes to hydrate are estimated (estimate.py). The plan
records the live catalog's version, so that carrying it out later can refuse a catalog
that moved since.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mzflow.catalog.model import Snapshot
from mzflow.deploy import desired as desired_mod
from mzflow.deploy import diff as diff_mod
from mzflow.deploy import estimate


@dataclass
class Plan:
    catalog_version: int
    statements: int
    changes: list[diff_mod.Change] = field(default_factory=list)
    hydrations: list[estimate.Hydration] = field(default_factory=list)
    refused: list[desired_mod.Refused] = field(default_factory=list)
    refusals: list[diff_mod.Refusal] = field(default_factory=list)
    ignored: list[tuple[int, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def make(live: Snapshot, warehouse: Path, text: str) -> Plan:
    wanted = desired_mod.replay(text)
    d = diff_mod.diff(live, wanted.snapshot)
    return Plan(catalog_version=live.version, statements=wanted.statements,
                changes=d.changes, hydrations=estimate.hydrations(live, wanted.snapshot, d,
                                                                  warehouse),
                refused=wanted.refused, refusals=d.refusals, ignored=wanted.ignored)


def _seconds(s: float | None) -> str:
    if s is None:
        return "time unknown (no recompute on record)"
    return f"about {s:.1f} s" if s < 120 else f"about {s / 60:.0f} min"


def render(plan: Plan, source: str) -> str:
    lines = [f"plan of {source} ({plan.statements} statements) against catalog version "
             f"{plan.catalog_version}", ""]
    if not plan.changes:
        lines.append("no changes")
    width = max((len(c.kind) for c in plan.changes), default=0)
    for c in plan.changes:
        mark = " BREAKING" if c.breaking else ""
        lines.append(f"{c.action:<8} {c.kind:<{width}}  {c.name}{mark}"
                     + (f"  ({c.detail})" if c.detail else ""))
        if c.touches:
            lines.append(f"{'':<8} {'':<{width}}  touches: {', '.join(c.touches)}")
    if plan.hydrations:
        lines += ["", "to hydrate:"]
        lines += [f"  {h.index} in cluster {h.cluster}: {h.rows:,} rows, {_seconds(h.seconds)}"
                  for h in plan.hydrations]
    if plan.refused or plan.refusals:
        lines += ["", "refused (apply refuses them too):"]
        lines += [f"  statement {r.number}: {r.sql}\n    ERROR {r.code}: {r.message}"
                  for r in plan.refused]
        lines += [f"  {r.name}: {r.message}" for r in plan.refusals]
    if plan.ignored:
        lines += ["", "ignored (not catalog DDL):"]
        lines += [f"  statement {n}: {sql}" for n, sql in plan.ignored]
    return "\n".join(lines)


def main(args: Any, command: str) -> int:
    """The CLI's ``plan`` and ``apply``: 0 when done, 1 when the plan has refusals (and
    apply changed nothing), 2 when the file cannot be read or parsed."""
    import sys

    import mzflow

    if command == "apply" and args.abort:
        return _abort(args)
    if args.file is None:
        print("ERROR: apply needs -f FILE (or --abort)", file=sys.stderr)
        return 2
    try:
        text = (sys.stdin.read() if args.file == "-"
                else Path(args.file).read_text(encoding="utf-8"))
    except OSError as e:
        print(f"ERROR: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    with mzflow.connect(args.home, catalog_url=args.catalog_url) as conn:
        try:
            if command == "apply":
                from mzflow.deploy import apply

                return apply.run(conn, text, args.catalog_version, args.file,
                                 blue_green=args.blue_green, resume=args.resume,
                                 lag_ms=args.lag_threshold, timeout_s=args.timeout)
            plan = make(conn.store.snapshot(), conn.config.warehouse, text)
        except mzflow.ParseError as e:  # nothing of a file that does not parse is planned
            print(f"ERROR: {e}", file=sys.stderr)
            return 2
        except mzflow.Error as e:
            print(f"ERROR: {e}", file=sys.stderr)
            return 1
    print(json.dumps(plan.to_json(), indent=2) if args.json else render(plan, args.file))
    return 1 if plan.refused or plan.refusals else 0


def _abort(args: Any) -> int:
    """``apply --abort``: 0 when aborted or nothing was in progress, 1 when refused."""
    import sys

    import mzflow
    from mzflow.deploy import bluegreen

    others = [f for f, on in (("-f", args.file is not None), ("--blue-green", args.blue_green),
                               ("--resume", args.resume),
                               ("--catalog-version", args.catalog_version is not None)) if on]
    if others:
        print(f"ERROR: --abort takes no {', '.join(others)}", file=sys.stderr)
        return 2
    with mzflow.connect(args.home, catalog_url=args.catalog_url) as conn:
        try:
            return bluegreen.abort(conn, sys.stdout)
        except mzflow.Error as e:
            print(f"ERROR: {e}", file=sys.stderr)
            return 1
