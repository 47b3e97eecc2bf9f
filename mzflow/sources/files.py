"""``CREATE SOURCE … FROM FILES``: a landing folder's options, and the schema of a file.

The loading itself is COPY's (session/copy_folder.py: each file once, its history in
``mz_copy_history``); this module says what the statement asks for and what a file
holds, so the session can create the table from the first file and tell a file whose
columns do not fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from mzflow.errors import InvalidOption
from mzflow.sql import ast

FORMATS = ("csv", "parquet", "json")
_OPTIONS = ("FORMAT", "PATTERN", "HEADER", "DELIMITER")
EVOLUTION = "add columns"


@dataclass(frozen=True)
class FilesSpec:
    folder: str
    format: str
    pattern: str | None
    header: bool  # CSV: a first line of column names (the default, as the schema needs it)
    delimiter: str
    add_columns: bool  # WITH (SCHEMA EVOLUTION = 'add columns')

    def copy_options(self) -> dict[str, Any]:
        """What session/copy_folder.py's reader takes."""
        return {"format": self.format, "header": self.header, "delimiter": self.delimiter}


def of(stmt: ast.CreateSource) -> FilesSpec:
    """The checked options of a ``FROM FILES`` source."""
    values: dict[str, str] = {}
    for option in stmt.args.get("options") or []:
        name, value = option.name, option.args.get("value")
        # FORMAT csv (Materialize's COPY spelling) arrives as one two-word name.
        if name.startswith("FORMAT ") and value is None:
            name, text = "FORMAT", name.split(" ", 1)[1]
        else:
            text = "true" if value is None else str(value.name)
        if name not in _OPTIONS:
            raise InvalidOption(f'unexpected FILES option "{name}"',
                                hint=f"valid options are {', '.join(_OPTIONS)}")
        if name in values:
            raise InvalidOption(f"{name} specified more than once")
        values[name] = text
    fmt = values.get("FORMAT", "").lower()
    if fmt not in FORMATS:
        raise InvalidOption(f"unknown FILES format {fmt.upper() or '(none)'}",
                            hint="FROM FILES '<folder>' (FORMAT csv|parquet|json, "
                                 "PATTERN '<glob>')")
    evolution = False
    for option in stmt.args.get("with_options") or []:
        value = option.args.get("value")
        if option.name != "SCHEMA EVOLUTION":
            raise InvalidOption(f'unexpected source option "{option.name}"',
                                hint="valid options are SCHEMA EVOLUTION")
        text = str(value.name).lower() if value is not None else ""
        if text not in (EVOLUTION, "none"):
            raise InvalidOption(f"invalid SCHEMA EVOLUTION '{text}'",
                                hint="valid values are 'add columns' and 'none'")
        evolution = text == EVOLUTION
    header = values.get("HEADER", "true").lower() in ("true", "1", "on", "yes")
    if fmt == "csv" and not header and not stmt.args.get("columns"):
        raise InvalidOption("a CSV source without HEADER needs a column list",
                            hint="its columns cannot come from a file without names")
    return FilesSpec(stmt.args["files"].name, fmt, values.get("PATTERN"), header,
                     values.get("DELIMITER", ","), evolution)


def file_schema(path: str, spec: FilesSpec) -> pa.Schema:
    """The columns a file holds, with the types Arrow infers (CSV: from its first
    block). Errors are the reader's: the caller reports them as the file's."""
    from mzflow.storage import objects

    source: Any = objects.open_input(path) if objects.is_remote(path) else path
    try:
        if spec.format == "parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(source)
        if spec.format == "json":
            import pyarrow.json as pj

            return pj.read_json(source).schema
        import pyarrow.csv as pc

        reader = pc.open_csv(source, parse_options=pc.ParseOptions(delimiter=spec.delimiter))
        return reader.schema
    finally:
        if not isinstance(source, str):
            source.close()


def sql_type(t: pa.DataType) -> str:
    """The SQL type a new column of Arrow type ``t`` gets (text when none fits)."""
    if pa.types.is_integer(t):
        return "bigint" if t.bit_width > 32 else "integer"
    if pa.types.is_floating(t):
        return "double precision"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    return "text"
