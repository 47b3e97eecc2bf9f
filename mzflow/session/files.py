"""Server files: which roles may make the server read or write them, and where.

A statement that names a path the *server* opens (``COPY t FROM '<file or folder>'``,
``CREATE SOURCE … FROM FILES``, ``ALTER TABLE … SET (EXPECTATION SUITE = '<file>')``,
``CREATE SINK … INTO '<path>'``) acts with the server's operating-system access. As in
PostgreSQL, reading needs the privileges of ``pg_read_server_files`` and writing those
of ``pg_write_server_files`` (a superuser holds both); ``COPY … FROM STDIN`` and
``COPY … TO STDOUT`` carry the client's data and need neither.

Beyond PostgreSQL, such a role reaches only what lies under ``allowed_file_roots``
(``ALTER SYSTEM SET``): each path is made absolute and resolved as the server will
open it (``os.path.realpath``: ``..`` and every symlink followed), and the result must
lie under a root, itself resolved; a relative path (or ``~``) is refused, since a
source's folder and a sink's path are opened later by processes with other working
folders. A folder or glob is listed now and each file it
names checked the same way, so a symlink inside an allowed folder cannot point out of
it. mzflow's own storage (the warehouse and a SQLite catalog, which holds the roles'
verifiers) is never reachable this way, whatever the roots say. ``s3://`` URLs are
governed by the same setting: a URL is allowed under a root that is an ``s3://`` prefix
(none by default), never with a ``.`` or ``..`` segment. A superuser is not confined, as
in PostgreSQL: it could widen the roots anyway. See docs/security.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from mzflow import config
from mzflow.catalog import roles
from mzflow.catalog.model import Snapshot
from mzflow.errors import Error, InsufficientPrivilege, InvalidOption

SETTING = "allowed_file_roots"
# ``$home`` is the mzflow home folder (as PostgreSQL's ``$libdir``): by default a role
# with file access reaches its ``files`` folder only, never the catalog or warehouse.
DEFAULT_ROOTS = "$home/files"
READ, WRITE = "read", "write"
_ROLE = {READ: roles.READ_SERVER_FILES, WRITE: roles.WRITE_SERVER_FILES}
_HINT = f"a superuser can widen them: ALTER SYSTEM SET {SETTING} = '<path>[,<path>…]'"


@dataclass(frozen=True)
class Places:
    """Where this server keeps things: the home (``$home`` in the roots) and what no
    path may reach (the warehouse, the SQLite catalog and its journals)."""

    home: Path
    protected: tuple[str, ...]

    @classmethod
    def of(cls, cfg: config.Config) -> Places:
        protected = [os.path.realpath(cfg.warehouse)]
        if cfg.catalog_url.startswith("sqlite:///"):
            db = os.path.realpath(cfg.catalog_url[len("sqlite:///"):])
            protected += [db + suffix for suffix in ("", "-wal", "-shm", "-journal")]
        return cls(cfg.home, tuple(protected))


def require(snap: Snapshot, role_id: str, mode: str, action: str) -> None:
    """42501 unless ``role_id`` has the privileges of the predefined role for ``mode``
    (PostgreSQL 16's wording)."""
    if not roles.has_role(snap, role_id, _ROLE[mode]):
        raise InsufficientPrivilege(
            f"permission denied to {action}",
            detail=f'Only roles with privileges of the "{_ROLE[mode]}" role may {action}.',
            hint="COPY … FROM STDIN and COPY … TO STDOUT carry the client's own data and "
                 "need no such privilege" if mode == READ else None)


def check_roots(value: str) -> None:
    """ALTER SYSTEM SET allowed_file_roots: absolute paths or s3:// prefixes."""
    for root in _split(value):
        if root.startswith("$home"):
            root = "/home" + root[len("$home"):]
        if "://" in root:
            if not root.lower().startswith("s3://") or not urlsplit(root).netloc:
                raise InvalidOption(f'invalid value for parameter "{SETTING}": "{root}"',
                                    hint="a root is an absolute path, $home/…, or "
                                         "s3://<bucket>/<prefix>")
        elif not os.path.isabs(root):
            raise InvalidOption(f'invalid value for parameter "{SETTING}": "{root}" is '
                                "not an absolute path", hint="write /path or $home/path")


def roots(snap: Snapshot, places: Places) -> list[str]:
    """The roots in force: each local one resolved, ``$home`` expanded; an empty
    setting allows nothing."""
    out = []
    for root in _split(snap.settings.get(SETTING, DEFAULT_ROOTS)):
        if root.startswith("$home"):
            root = str(places.home) + root[len("$home"):]
        out.append(root if "://" in root else os.path.realpath(root))
    return out


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def confine(snap: Snapshot, places: Places, location: str, *,
            pattern: str | None = None) -> None:
    """42501 unless ``location`` (and, for a folder or glob, every file it names now)
    resolves under an allowed root and outside mzflow's own storage."""
    allowed = roots(snap, places)
    scheme = urlsplit(location).scheme.lower() if "://" in location else ""
    if scheme:
        segments = urlsplit(location).path.split("/")
        if scheme != "s3" or "." in segments or ".." in segments or not any(
                _url_under(location, r) for r in allowed if "://" in r):
            _refuse(location, location, allowed)
        return
    if not os.path.isabs(location):
        # A source's folder and a sink's path are opened later by other processes
        # (ticks, Airflow's tasks), each from its own working folder; COPY expands ~.
        raise InsufficientPrivilege(
            f'path "{location}" is not absolute',
            detail="A role that is not a superuser names server files by absolute path.")
    local = [r for r in allowed if "://" not in r]
    _check_local(location, os.path.realpath(location), local, places)
    for found in _named_files(location, pattern):
        _check_local(location, os.path.realpath(found), local, places)


def _named_files(location: str, pattern: str | None) -> list[str]:
    """The files a folder or glob names today (none for one file, or on an error the
    statement itself will report)."""
    from mzflow.storage import landing

    try:
        if not landing.is_folder_form(location, pattern):
            return []
        return [f.path for f in landing.matching(location, pattern)]
    except (Error, OSError):
        return []


def _check_local(given: str, real: str, local_roots: list[str], places: Places) -> None:
    if any(_under(real, p) for p in places.protected):
        raise InsufficientPrivilege(
            f'path "{given}" is inside mzflow\'s own storage',
            detail=f'It resolves to "{real}"; the warehouse and the catalog are never '
                   "read or written as server files.")
    if not any(_under(real, root) for root in local_roots):
        _refuse(given, real, local_roots)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _url_under(url: str, root: str) -> bool:
    a, b = urlsplit(url), urlsplit(root)
    return (a.scheme.lower(), a.netloc) == (b.scheme.lower(), b.netloc) and _under(
        a.path or "/", b.path or "/")


def _refuse(given: str, real: str, allowed: list[str]) -> None:
    # PostgreSQL's own file functions answer a path outside the data directory with
    # 42501 ("path must be in or below the data directory"); so does mzflow.
    where = ", ".join(f'"{r}"' for r in allowed) if allowed else "none (the setting is empty)"
    resolved = f'It resolves to "{real}". ' if real != given else ""
    raise InsufficientPrivilege(f'path "{given}" is outside the allowed file roots',
                                detail=f"{resolved}{SETTING}: {where}.", hint=_HINT)
