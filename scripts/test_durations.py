"""Write tests/durations.json from a JUnit XML of a full run (pytest --junitxml=…).

    .venv/bin/python scripts/test_durations.py run.xml

The file holds each test file's seconds (setup, call and teardown of its tests, as
the JUnit file reports them). tests/conftest.py sends the longest files to the xdist
workers first: a long file started last keeps one worker busy after the other is done.
Only the order depends on it; a stale file costs minutes, never a result.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def main(junit: str) -> None:
    seconds: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        if len(module) >= 2 and module[0] == "tests":
            seconds[f"tests/{module[1]}.py"] += float(case.get("time") or 0)
    ranked = {name: round(s) for name, s in seconds.most_common()}
    OUT.write_text(json.dumps(ranked, indent=1) + "\n")
    print(f"{OUT}: {len(ranked)} files, {sum(ranked.values())} s in all")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
