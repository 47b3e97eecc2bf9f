"""Writing a sink's interval to a file, atomically and reproducibly.

A file is written under a hidden temporary name in the target directory, flushed,
and renamed to its final name; the directory is then flushed too. The rename is
the commit: a reader (and the sink's own progress, which is the set of final
files) sees either the whole file or none of it, and a writer killed half way
leaves only a ``.…tmp-<pid>`` file, removed by the next run. The same rows give
the same bytes (no timestamps or random ids are written), so a rerun of an
interval rewrites an identical file.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
from pathlib import Path

import pyarrow as pa

from mzflow.errors import Error
from mzflow.storage.processes import process_alive


class ExportError(Error):
    code = "58030"  # io_error


def write_file(table: pa.Table, final: Path, fmt: str) -> int:
    """Write ``table`` to ``final`` (PARQUET, CSV or JSON lines); the byte count."""
    directory = final.parent
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as out:
            _encode(table, out, fmt)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
        _fsync_dir(directory)
    except OSError as e:
        if _writable(directory):
            tmp.unlink(missing_ok=True)
        raise ExportError(f'cannot write "{final}": {e.strerror or e}') from None
    return final.stat().st_size


def remove_stale(directory: Path, prefix: str) -> list[Path]:
    """Temporary files of writers that are gone (killed mid-export)."""
    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    for path in directory.glob(f".{prefix}*.tmp-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and process_alive(int(pid)) and int(pid) != os.getpid():
            continue
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _encode(table: pa.Table, out: object, fmt: str) -> None:
    if fmt == "PARQUET":
        import pyarrow.parquet as pq

        pq.write_table(table, out, compression="snappy")
    elif fmt == "CSV":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, out)
    elif fmt == "JSON":
        names = table.column_names
        for batch in table.to_batches(max_chunksize=65536):
            lines = [json.dumps(dict(zip(names, row, strict=True)), default=_json_value,
                                ensure_ascii=False) for row in zip(
                *[c.to_pylist() for c in batch.columns], strict=True)]
            if lines:
                out.write(("\n".join(lines) + "\n").encode())  # type: ignore[attr-defined]
    else:
        raise ExportError(f"unknown file format {fmt}")


def _json_value(v: object) -> object:
    # Decimals as strings keep every digit (JSON readers parse numbers as doubles).
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, dt.timedelta):
        return str(v)
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _writable(directory: Path) -> bool:
    return directory.is_dir() and os.access(directory, os.W_OK)
