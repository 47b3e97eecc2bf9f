"""EXPLAIN golden files: the IR of each query and every operator's strategy.

``tests/golden/explain.sql`` holds a catalog and the statements to explain;
``explain.out`` their expected output. ``MZFLOW_UPDATE_GOLDEN=1`` rewrites it
(review the diff). EXPLAIN never starts Spark, so this test is fast.
"""

from __future__ import annotations

import os
from pathlib import Path

import mzflow

GOLDEN = Path(__file__).parent / "golden"


def render(home: Path) -> str:
    blocks = (GOLDEN / "explain.sql").read_text().split("\n----\n")
    out: list[str] = []
    with mzflow.connect(str(home)) as conn:
        conn.execute(blocks[0])
        for block in blocks[1:]:
            sql = block.strip()
            rows = conn.execute(sql).rows
            out.append(f"> {sql}\n" + "\n".join(str(r[0]) for r in rows))
    return "\n\n".join(out) + "\n"


def test_explain_matches_golden(tmp_path: Path) -> None:
    got = render(tmp_path)
    path = GOLDEN / "explain.out"
    if os.environ.get("MZFLOW_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()
