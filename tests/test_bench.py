"""Smoke run of the benchmark harness (bench/run.py) at a tiny scale.

No timing is asserted: only that one run end to end produces its JSON and PNG, that
every system was measured, and that the maintained view equals the recompute and the
Spark Declarative Pipeline's table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark  # the bench runs Spark in a child process

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--sf", "0.01", "--views", "q01",
         "--sizes", "0.01", "--batches", "1", "--quick", "--no-sdp-cli", "--no-profile",
         "--out", str(out), "--home", str(tmp_path / "home")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (json_path,) = out.glob("*.json")
    (png_path,) = out.glob("*.png")
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(json_path.read_text())
    assert result["check_failures"] == []
    cell = result["cells"]["q01"]["1%"]
    assert cell["equal"]
    assert result["sdp"]["enabled"], result["sdp"].get("error")
    for system in ("mzflow", "recompute", "sdp"):
        assert len(cell[system]["seconds"]) == 1
    assert cell["mzflow"]["rows_read_median"] < cell["recompute"]["rows_read_median"]
    assert cell["speedup_vs_recompute"] > 0 and cell["speedup_vs_sdp"] > 0
    assert "view" in proc.stdout and "Equality" in proc.stdout
