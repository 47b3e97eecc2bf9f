"""Reading COPY FROM files (CSV, Parquet, newline-delimited JSON) into a table's schema."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow.errors import Error
from mzflow.storage.rows import Target, conform


class BadFile(Error):
    code = "22P04"  # bad_copy_file_format


def read_file(path: str | Path, targets: Sequence[Target], *, format: str, header: bool,
              delimiter: str) -> pa.Table:
    """``path``: a local path or an object's URL (storage/objects.py)."""
    from mzflow.storage import objects

    path = str(path)
    remote = objects.is_remote(path)
    # An object's existence is learnt by opening it: one request, not two.
    if not remote and not Path(path).is_file():
        raise BadFile(f'could not open file "{path}" for reading: no such file')
    names = [t.name for t in targets]
    source: Any = None
    try:
        # One reader for both: Arrow reads a local path itself, an object through its
        # filesystem (a seekable file: Parquet's footer is at its end).
        if remote:
            try:
                source = objects.open_input(path)
            except FileNotFoundError:
                raise BadFile(f'could not open file "{path}" for reading: no such file'
                              ) from None
        else:
            source = path
        if format == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(source)
            missing = [n for n in names if n not in table.column_names]
            if missing:
                raise BadFile(f'file "{path}" has no column "{missing[0]}"',
                              detail=f"it has {', '.join(table.column_names)}")
            table = table.select(names)
        elif format == "json":
            import pyarrow.json as pj

            table = pj.read_json(source)
            table = pa.table({n: table.column(n) if n in table.column_names
                              else pa.nulls(table.num_rows) for n in names})
        else:
            import pyarrow.csv as pc

            # Read every field as text; the table's types then parse it, so that a bad
            # value is reported with its row and column like any other write.
            read = pc.ReadOptions(column_names=None if header else names,
                                  autogenerate_column_names=False)
            parse = pc.ParseOptions(delimiter=delimiter)
            convert = pc.ConvertOptions(column_types={n: pa.string() for n in names},
                                        strings_can_be_null=True, include_columns=names)
            table = pc.read_csv(source, read_options=read, parse_options=parse,
                                convert_options=convert)
    except (pa.ArrowInvalid, OSError, KeyError) as e:
        raise BadFile(f'could not read {format.upper()} file "{path}": '
                      f"{str(e).splitlines()[0]}") from None
    finally:
        if remote and source is not None:
            source.close()
    # CSV's first data line is line 2 when there is a header.
    return conform(table, targets, first_row=2 if header and format == "csv" else 1)
