"""Landing folders: the files a ``COPY t FROM '<folder or glob>'`` loads, each once.
The folder may be local or in S3-compatible object storage (storage/objects.py).

A file is known by its identity: its absolute path, size and modification time (a
changed file is a new file). Loaded files' rows are one Delta commit of the table
(a batch of files, or one file when the table has expectations) carrying an app
transaction keyed by each file's identity and each file's facts in the commit metadata,
so a load and its history rows are one atomic commit: they cannot disagree, and a
retried or killed COPY skips exactly the files whose commit exists.

A file that fails leaves nothing in the table. Its failure is appended to a small
JSON-lines log beside the table (``paths.copy_failures``): failures change no data, so
the log is advisory, and losing a line to a crash only means the file is tried (and
recorded) again by the next COPY.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mzflow.catalog.model import TABLE, Snapshot
from mzflow.errors import InvalidOption
from mzflow.storage import objects, paths
from mzflow.storage.errors import StorageError

# The commit metadata of a loaded file's commit (storage/commits.py has the others).
FILE_KEY = "mzflow.copy.file"  # JSON: path, size, mtime_ns, rows, bytes
APP_PREFIX = "copy:"
_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class LandedFile:
    path: str  # an absolute local path, or s3://bucket/key (storage/objects.py)
    size: int
    mtime_ns: int

    @property
    def identity(self) -> str:
        """The app id of its commit: a changed file (size or mtime) is another file."""
        raw = f"{self.path}\0{self.size}\0{self.mtime_ns}".encode()
        return APP_PREFIX + hashlib.sha256(raw).hexdigest()[:32]

    def facts(self, rows: int) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns, "rows": rows}

    def metadata(self, rows: int) -> dict[str, str]:
        return {FILE_KEY: json.dumps(self.facts(rows))}


def batch_metadata(loaded: list[tuple[LandedFile, int]]) -> dict[str, str]:
    """The commit metadata of several files committed together: a list of facts."""
    return {FILE_KEY: json.dumps([f.facts(rows) for f, rows in loaded])}


def batch_key(files: list[LandedFile]) -> tuple[str, int]:
    """The app transaction of a batch as a whole (each file has its own besides)."""
    raw = "\0".join(f.identity for f in files).encode()
    return APP_PREFIX + "batch:" + hashlib.sha256(raw).hexdigest()[:32], 1


def _globbed(target: str) -> bool:
    return any(c in target for c in _GLOB_CHARS)


def is_folder_form(target: str, pattern: str | None) -> bool:
    """A folder, a glob, or any target with a PATTERN: the many-files COPY. An existing
    file is the one-file COPY, even if its name has a glob's characters (``a[1].csv``)."""
    if objects.is_remote(target):
        kind = objects.kind_of(target)
        return pattern is not None or kind == "dir" or (kind == "missing" and _globbed(target))
    if pattern is None and Path(target).is_file():
        return False
    return pattern is not None or Path(target).is_dir() or _globbed(target)


def stat(path: str) -> LandedFile:
    """The file as it is now; OSError if it is gone."""
    e = objects.stat(path)
    return LandedFile(e.location, e.size, e.mtime_ns)


def _local(target: str) -> list[tuple[str, str]]:
    """(absolute path, name relative to the folder) of the files ``target`` names."""
    if Path(target).is_dir():
        root = Path(target).resolve()
        return [(str(p), p.relative_to(root).as_posix()) for p in root.rglob("*") if p.is_file()]
    if _globbed(target):
        found = [Path(p).resolve() for p in glob.glob(target, recursive=True)]
        return [(str(p), p.name) for p in found if p.is_file()]
    raise InvalidOption(f'COPY FROM "{target}": no such folder')


def _remote(target: str) -> list[tuple[LandedFile, str]]:
    """As ``_local``, in object storage, with each object's size and time from the
    listing (no request per object): a glob lists the folder before its first glob
    character and matches each key against the whole glob (``*`` may cross ``/``)."""
    if not _globbed(target):
        if objects.kind_of(target) != "dir":
            raise InvalidOption(f'COPY FROM "{target}": no such folder')
        return [(LandedFile(e.location, e.size, e.mtime_ns), rel)
                for e, rel in objects.listing(target)]
    head = target[:min(target.index(c) for c in _GLOB_CHARS if c in target)]
    folder = head.rpartition("/")[0]
    if "://" not in folder or not folder.split("://", 1)[1]:
        raise InvalidOption(f'COPY FROM "{target}": a glob needs a bucket before it')
    return [(LandedFile(e.location, e.size, e.mtime_ns), e.location.rpartition("/")[2])
            for e, _ in objects.listing(folder) if fnmatch.fnmatchcase(e.location, target)]


def matching(target: str, pattern: str | None) -> list[LandedFile]:
    """The files ``target`` (a folder: its files, recursively; else a glob) names whose
    name relative to the folder matches ``pattern`` (a glob; every file when None),
    sorted by path so that loads happen in a stable order."""
    remote = objects.is_remote(target)
    listed: dict[str, LandedFile] = {}
    if remote:
        pairs = _remote(target)
        listed = {f.path: f for f, _ in pairs}
        found = [(f.path, rel) for f, rel in pairs]
    else:
        found = _local(target)
    if pattern is not None:
        found = [(p, rel) for p, rel in found if fnmatch.fnmatchcase(rel, pattern)
                 or fnmatch.fnmatchcase(rel.rpartition("/")[2], pattern)]
    # Hidden and temporary files (a writer's partial ``.x.tmp``) are never loaded.
    found = [(p, rel) for p, rel in found
             if not any(part.startswith(".") for part in rel.split("/"))
             and not p.rpartition("/")[2].startswith(".")]
    out = []
    for p, _ in sorted(found):
        if remote:  # the listing's size and time: no request per object
            out.append(listed[p])
            continue
        try:
            out.append(stat(p))
        except OSError:  # gone since listed: nothing to load
            continue
    return out


# -- failures --------------------------------------------------------------------------


def mark(warehouse: Path, table_id: str) -> None:
    """Note that the table has files loaded by a landing-folder COPY (before its first
    commit), so that only those tables' logs are read for ``mz_copy_history``."""
    paths.copy_failures(warehouse, table_id).parent.mkdir(parents=True, exist_ok=True)


def record_failure(warehouse: Path, table_id: str, f: LandedFile, error: str) -> None:
    line = json.dumps({"path": f.path, "size": f.size, "mtime_ns": f.mtime_ns,
                       "identity": f.identity, "error": error,
                       "at_ms": int(time.time() * 1000)})
    target = paths.copy_failures(warehouse, table_id)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError as e:  # a full disk (the soak's fault): the COPY stops, cleanly
        # (a line cut short is skipped when read; the file is recorded again next time)
        raise StorageError(f'could not record the failure of file "{f.path}": '
                           f"{e.strerror or e}") from e


def _failures(warehouse: Path, table_id: str) -> list[dict[str, Any]]:
    try:
        text = paths.copy_failures(warehouse, table_id).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line a crash cut short
            continue
    return out


def failures_seen(warehouse: Path, table_id: str) -> set[tuple[str, str]]:
    """(identity, error) of every failure recorded on the table."""
    return {(fail["identity"], fail["error"]) for fail in _failures(warehouse, table_id)}


# -- the history (mz_copy_history) -----------------------------------------------------

def _time(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def rows(snap: Snapshot, *, warehouse: Path) -> list[tuple[Any, ...]]:
    """``mz_copy_history``: every table's files (catalog/system.py has its columns)."""
    return [r for i in snap.items if i.kind == TABLE for r in history_rows(i.id, warehouse)]


def _loads(warehouse: Path, table_id: str
           ) -> list[tuple[dict[str, Any], LandedFile, dict[str, Any]]]:
    """(log entry, file, its facts) of each file commit in the table's Delta log, oldest
    first: a commit a killed writer left unrecorded in the catalog too, since its app
    transaction is there."""
    from mzflow.storage.commits import read_log
    from mzflow.storage.delta import Shard

    shard = Shard(paths.table(warehouse, table_id))
    if not shard.exists():
        return []
    out = []
    for e in reversed(read_log(shard._table())):
        if FILE_KEY in e:
            found = json.loads(e[FILE_KEY])
            # One file's facts, or a batch's list of them (one commit, several files).
            for facts in found if isinstance(found, list) else [found]:
                out.append((e, LandedFile(str(facts["path"]), int(facts["size"]),
                                          int(facts["mtime_ns"])), facts))
    return out


def loaded(warehouse: Path, table_id: str) -> set[str]:
    """The identities of the files loaded into the table: one read of its log, where
    asking Delta for each file's app transaction costs a scan of its log per file. (Only
    a filter: the commit itself asks Delta again, under the catalog's write lock.)"""
    return {f.identity for _, f, _ in _loads(warehouse, table_id)}


def history_rows(table_id: str, warehouse: Path) -> list[tuple[Any, ...]]:
    """One row per file attempted on one table: its loads from the table's Delta log,
    its failures from the failure log, oldest first."""
    rows: list[tuple[Any, ...]] = []
    if not paths.copy_failures(warehouse, table_id).parent.is_dir():
        return rows  # no landing-folder COPY ever ran on it: its log need not be read
    for e, f, facts in _loads(warehouse, table_id):
        rows.append((table_id, f.path, f.identity, f.size, _time(f.mtime_ns / 1e6),
                     int(facts["rows"]), f.size, "loaded", None, int(e["version"]),
                     _time(float(e.get("timestamp") or 0))))
    for fail in _failures(warehouse, table_id):
        rows.append((table_id, fail["path"], fail["identity"], int(fail["size"]),
                     _time(int(fail["mtime_ns"]) / 1e6), None, int(fail["size"]), "failed",
                     fail["error"], None, _time(float(fail["at_ms"]))))
    rows.sort(key=lambda r: r[-1])
    return rows
