"""A shard's commits, read straight from its Delta log (``_delta_log/<v>.json``).

mzflow keeps every log entry (``delta.logRetentionDuration``), so the soak can see each
commit's mzflow time, idempotency key (the ``txn`` action) and whether it changed data,
independently of mzflow's own reading of them. Entries never change: cached.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TS_KEY = "mzflow.ts"


@dataclass(frozen=True)
class Commit:
    version: int
    ts: int | None
    operation: str
    txns: tuple[tuple[str, int], ...]
    data_change: bool  # an add or remove with dataChange
    columns: tuple[str, ...] | None  # a metaData action's schema fields
    error: str | None  # an index tick's evaluation error


_CACHE: dict[tuple[str, int], Commit] = {}


def _parse(path: Path, version: int) -> Commit | None:
    key = (str(path), version)
    if key in _CACHE:
        return _CACHE[key]
    entry = path / "_delta_log" / f"{version:020d}.json"
    try:
        text = entry.read_text()
    except FileNotFoundError:
        return None
    if not text.endswith("\n") and not text.rstrip().endswith("}"):
        return None  # being written (delta-rs writes a temp file and renames: not seen)
    ts = None
    op = ""
    error = None
    txns = []
    change = False
    columns = None
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"]
            op = str(info.get("operation", ""))
            ts = int(info[TS_KEY]) if TS_KEY in info else None
            error = info.get("mzflow.error")
        elif "txn" in action:
            txns.append((action["txn"]["appId"], int(action["txn"]["version"])))
        elif "add" in action or "remove" in action:
            body = action.get("add") or action.get("remove")
            change = change or bool(body.get("dataChange", True))
        elif "metaData" in action:
            schema = json.loads(action["metaData"]["schemaString"])
            columns = tuple(f["name"] for f in schema["fields"])
    commit = Commit(version, ts, op, tuple(txns), change, columns, error)
    _CACHE[key] = commit
    return commit


def commits(path: Path) -> list[Commit]:
    """Every commit of the shard at ``path``, oldest first (stops at the first gap)."""
    out = []
    version = 0
    while True:
        c = _parse(path, version)
        if c is None:
            return out
        out.append(c)
        version += 1
