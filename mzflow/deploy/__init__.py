"""Safe changes to a live catalog: plan before apply (issue 38).

Only argparse here: the CLI builds its parser from this without importing the rest.
"""

from __future__ import annotations

from typing import Any


def add_parsers(sub: Any) -> None:
    """``mzflow plan`` and ``mzflow apply`` on the CLI's subparsers."""
    plan = sub.add_parser(
        "plan", help="what a desired catalog file would change, changing nothing",
        description="Compare a file of the whole desired catalog with the live one: what "
                    "to create, alter, replace and drop, breaking changes, the indexes to "
                    "hydrate, the refused statements (exit 1). docs/deploy.md")
    apply = sub.add_parser(
        "apply", help="carry out the plan of a desired catalog file",
        description="Plan (as mzflow plan), then run the statements that take the live "
                    "catalog there, printing each. Refuses, changing nothing, when the "
                    "plan has refusals or the catalog moved (--catalog-version). "
                    "--blue-green swaps the changed schemas in once hydrated; "
                    "--resume continues one that stopped, --abort abandons it. "
                    "docs/deploy.md")
    for p in (plan, apply):
        # (apply --abort needs no file: main checks the others have one)
        p.add_argument("-f", "--file", required=p is plan, metavar="FILE",
                       help="the desired catalog (CREATE statements); '-': stdin")
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    apply.add_argument("--catalog-version", type=int, metavar="N",
                       help="refuse unless the catalog is at version N (the plan's "
                            "catalog_version)")
    apply.add_argument("--blue-green", action="store_true",
                       help="stage the changed schemas and their clusters, wait until "
                            "they are hydrated and fresh, then swap them in atomically")
    apply.add_argument("--resume", action="store_true",
                       help="continue a blue/green apply that stopped, from its last step")
    apply.add_argument("--abort", action="store_true",
                       help="abandon a blue/green apply that stopped before its swap: "
                            "drop the schemas and clusters it staged (*_mzflow_deploy) "
                            "and its record, so a new apply can start; the live version "
                            "is untouched. No -f. Refused once it swapped (--resume "
                            "finishes it); with nothing in progress it says so, exit 0")
    apply.add_argument("--lag-threshold", type=int, default=1000, metavar="MS",
                       help="blue/green: the staged indexes' lag that is fresh enough "
                            "(default 1000)")
    apply.add_argument("--timeout", type=float, default=1800, metavar="S",
                       help="blue/green: how long to wait for hydration (default 1800)")
