"""CREATE/ALTER/DROP CLUSTER → the Airflow pools, when an Airflow home is configured.

The sync runs as a child process (``mzflow airflow sync``) rather than here: importing
Airflow configures its ORM and logging for the whole process and costs over a second,
which a SQL session should not pay or inherit. The DDL has committed by then; if the
sync fails the statement still succeeds, with a notice naming the command to rerun.
"""

from __future__ import annotations

import subprocess
import sys

from mzflow.config import Config

TIMEOUT_S = 120


def sync_pools(cfg: Config) -> list[str]:
    """Notices: one per pool created, resized or deleted, or one saying why not."""
    if cfg.airflow_home is None:
        return []
    cmd = [sys.executable, "-m", "mzflow.cli", "--home", str(cfg.home), "--catalog-url",
           cfg.catalog_url, "airflow", "sync", "--airflow-home", str(cfg.airflow_home)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out = None
    if out is None or out.returncode != 0:
        why = "timed out" if out is None else (out.stderr.strip().splitlines() or ["?"])[-1]
        return [f"Airflow pools not synced ({why}); run `mzflow airflow sync`"]
    notices = []
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 3 and cells[0] in ("create", "resize", "delete"):
            notices.append(f"Airflow pool {cells[1]}: {cells[0]} ({cells[2]} slots)")
    return notices
