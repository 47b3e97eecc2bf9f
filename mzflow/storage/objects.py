"""Where COPY's files live: local disk, or S3-compatible object storage through Arrow's
filesystems (``pyarrow.fs``, the same reader code for both).

A location is a string: a local path, or ``s3://bucket/key``. Credentials and region
come from the environment as for any AWS client (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
profiles and instance roles through the AWS SDK's default chain). The endpoint of an
S3-compatible store (MinIO, moto, Ceph) comes from ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL``, the variables boto3 and the AWS CLI read: Arrow's S3 client does not
read them itself, so they are passed to it here.

Only landing files are remote: the warehouse stays on a local or shared disk
(docs/object-storage.md says why and what a remote warehouse would take).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from mzflow import caches
from mzflow.errors import InvalidOption

if TYPE_CHECKING:
    import pyarrow.fs as pafs

S3 = "s3"
_REMOTE_HINT = "COPY reads local paths and s3:// URLs"


def scheme(location: str) -> str | None:
    """The URL scheme of ``location`` (lowercase), or None for a local path. A Windows
    drive letter is not a scheme, and neither is anything without ``://``."""
    if "://" not in location:
        return None
    return urlsplit(location).scheme.lower() or None


def is_remote(location: str) -> bool:
    return scheme(location) is not None


@dataclass(frozen=True)
class Entry:
    """A file found at a location: ``location`` is what users see and what identifies
    it (an absolute local path, or ``s3://bucket/key``)."""

    location: str
    size: int
    mtime_ns: int


def _endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


_S3 = caches.lru("storage.s3_filesystems", 8)  # per endpoint: each has its own pool


def _s3(endpoint: str | None) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    if (fs := _S3.get(endpoint)) is not None:
        return fs

    # Retries are bounded: a COPY against an unreachable endpoint fails in seconds, not
    # after the SDK's default backoff of several minutes.
    fs = pafs.S3FileSystem(endpoint_override=endpoint, allow_bucket_creation=False,
                           allow_bucket_deletion=False, connect_timeout=5, request_timeout=30,
                           retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3))
    _S3[endpoint] = fs
    return fs


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem that holds ``location`` and the path on it (``bucket/key`` for S3,
    an absolute path locally)."""
    kind = scheme(location)
    if kind is None:
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), str(Path(location).expanduser().resolve())
    if kind != S3:
        raise InvalidOption(f'COPY FROM "{location}": unsupported URL scheme "{kind}"',
                            hint=_REMOTE_HINT)
    parts = urlsplit(location)
    if not parts.netloc:
        raise InvalidOption(f'COPY FROM "{location}": the URL names no bucket',
                            hint="write s3://<bucket>/<prefix>")
    return _s3(_endpoint()), f"{parts.netloc}{parts.path}".rstrip("/")


def _location(kind: str | None, path: str) -> str:
    return path if kind is None else f"{kind}://{path}"


def _entry(kind: str | None, info: pafs.FileInfo) -> Entry:
    return Entry(_location(kind, info.path), int(info.size or 0), int(info.mtime_ns or 0))


def _remote_error(location: str, e: OSError) -> InvalidOption:
    # Arrow's AWS errors are long; their first line names the operation and the cause.
    return InvalidOption(f'COPY FROM "{location}": {str(e).splitlines()[0]}',
                         hint="credentials, region and endpoint come from the AWS_* "
                              "environment variables")


def kind_of(location: str) -> str:
    """``"file"``, ``"dir"`` or ``"missing"``."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    try:
        info = fs.get_file_info(path)
    except OSError as e:
        if is_remote(location):
            raise _remote_error(location, e) from None
        raise
    if info.type == pafs.FileType.File:
        return "file"
    if info.type == pafs.FileType.Directory:
        return "dir"
    bucket = path.split("/", 1)[0]
    if is_remote(location) and fs.get_file_info(bucket).type == pafs.FileType.NotFound:
        # Say so rather than "no such file": a typo in the bucket is the likelier cause.
        raise InvalidOption(f'COPY FROM "{location}": bucket "{bucket}" does not exist',
                            hint="credentials, region and endpoint come from the AWS_* "
                                 "environment variables")
    return "missing"


def stat(location: str) -> Entry:
    """The file's size and modification time now; OSError (FileNotFoundError) if gone."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(location)
    return _entry(scheme(location), info)


def listing(location: str) -> list[tuple[Entry, str]]:
    """Every file under the folder ``location``, recursively, with its name relative to
    the folder (``a/b.csv``)."""
    import pyarrow.fs as pafs

    kind = scheme(location)
    fs, root = filesystem(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except OSError as e:
        if kind is not None:
            raise _remote_error(location, e) from None
        raise
    prefix = root.rstrip("/") + "/"
    return [(_entry(kind, i), i.path[len(prefix):] if i.path.startswith(prefix) else i.base_name)
            for i in infos if i.type == pafs.FileType.File]


def open_input(location: str) -> pafs.NativeFile:
    """A seekable reader of the file (Parquet needs to seek to its footer)."""
    fs, path = filesystem(location)
    return fs.open_input_file(path)
