"""COPY over the wire: rows out in PostgreSQL's text format (``COPY (…) TO STDOUT``),
and ``COPY t FROM STDIN``'s data into mzflow's COPY, which reads files.

What the client sends is spooled to a file under the home (memory stays flat for any
size). CSV goes to mzflow's COPY as it came. PostgreSQL's text format (the default, and
psql's ``\\copy``) is decoded here into a Parquet file of text columns, since text
keeps NULL and the empty string apart where CSV cannot; the table's types then parse
each field, with the same errors as any write.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from sqlglot import exp

from mzflow.errors import InvalidOption, InvalidTextRepresentation, Unsupported
from mzflow.server.backend import Outcome
from mzflow.session import access
from mzflow.values import pg_text

log = logging.getLogger("mzflow.server")

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\b": "\\b", "\f": "\\f",
            "\v": "\\v"}
_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.S)
_UNESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def text_row(row: Sequence[Any], types: Sequence[str]) -> bytes:
    """One row of COPY's text format: tab-separated, ``\\N`` for NULL, backslash escapes."""
    fields = []
    for i, value in enumerate(row):
        text = pg_text(value, types[i] if i < len(types) else None)
        if text is None:
            fields.append("\\N")
        else:
            fields.append("".join(_ESCAPES.get(c, c) for c in text))
    return ("\t".join(fields) + "\n").encode("utf-8")


class FromStdin:
    """COPY … FROM STDIN: CopyData spooled to a file, then mzflow's COPY of that file."""

    def __init__(self, stmt: exp.Copy, columns: list[str], folder: Path,
                 run: Callable[[exp.Expr], Outcome]):
        options = _options(stmt)
        self.format = options.pop("format", "text")
        if self.format not in ("text", "csv"):
            raise InvalidOption(f"COPY FROM STDIN format {self.format.upper()} is not "
                                "supported", hint="use FORMAT TEXT or FORMAT CSV")
        self.options = options
        self.stmt = stmt
        self.names = columns
        self.columns = len(columns)
        self.run = run
        folder.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept open
            dir=folder, prefix="copy-", suffix=f".{self.format}", delete=False)
        self.path = Path(self._file.name)

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def abort(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)

    def finish(self) -> Outcome:
        self._file.close()
        parquet = self.path.with_suffix(".parquet")
        try:
            copy = self.stmt.copy()
            params: list[exp.Expr] = []
            if self.format == "csv":
                source = self.path
                params = [_param("FORMAT", "CSV")]
                if self.options.get("header") not in (None, "false", "off", "0"):
                    params.append(_param("HEADER", "true"))
                if "delimiter" in self.options:
                    params.append(_param("DELIMITER", self.options["delimiter"]))
            else:
                _text_to_parquet(self.path, parquet, self.names,
                                 self.options.get("delimiter", "\t"),
                                 self.options.get("null", "\\N"))
                source, params = parquet, [_param("FORMAT", "PARQUET")]
            copy.set("files", [exp.Literal.string(str(source))])
            # The spooled file is the client's data: no server file privilege applies.
            copy.set(access.FROM_CLIENT, True)
            copy.set("params", [exp.CopyParameter(this=p.this, expression=p.expression)
                                for p in params])
            return self.run(copy)
        finally:
            self.path.unlink(missing_ok=True)
            parquet.unlink(missing_ok=True)


def _param(name: str, value: str) -> exp.CopyParameter:
    return exp.CopyParameter(this=exp.var(name), expression=exp.Literal.string(value))


def _options(stmt: exp.Copy) -> dict[str, str]:
    out: dict[str, str] = {}
    for param in stmt.args.get("params") or []:
        name = param.this.name.lower()
        value = param.args.get("expression")
        text = "true" if value is None else (
            ("true" if value.this else "false") if isinstance(value, exp.Boolean)
            else value.name)
        if name not in ("format", "header", "delimiter", "null"):
            raise InvalidOption(f'unexpected COPY option "{name.upper()}"',
                                hint="valid options are FORMAT, HEADER, DELIMITER and NULL")
        out[name] = text.lower() if name in ("format", "header") else text
    if out.get("format", "text") == "text" and "header" in out:
        raise Unsupported("COPY HEADER available only in CSV mode")
    delimiter = out.get("delimiter")
    if delimiter is not None and len(delimiter) != 1:
        raise InvalidOption("COPY delimiter must be a single one-byte character")
    return out


def _text_to_parquet(source: Path, target: Path, names: list[str], delimiter: str,
                     null: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns: list[list[str | None]] = [[] for _ in names]
    with source.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.decode("utf-8").rstrip("\n").removesuffix("\r")
            if line == "\\.":
                break
            fields = line.split(delimiter)
            if len(fields) != len(names):
                what = "extra data after last expected column" if len(fields) > len(
                    names) else f'missing data for column "{names[len(fields)]}"'
                raise InvalidTextRepresentation(f"{what} (COPY line {number})")
            for i, field in enumerate(fields):
                columns[i].append(None if field == null else _unescape(field, number))
    pq.write_table(pa.table({n: pa.array(c, pa.string()) for n, c in zip(names, columns,
                                                                          strict=True)}),
                   target)


def _unescape(field: str, line: int) -> str:
    """COPY text's backslash escapes: ``\\n`` and friends, octal ``\\123``, hex
    ``\\x41``; any other escaped character is itself."""
    if "\\" not in field:
        return field

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(int(m.group(1), 8))
        if m.group(2):
            return chr(int(m.group(2), 16))
        return _UNESCAPES.get(m.group(3), m.group(3))

    text = _ESCAPE.sub(one, field)
    if "\0" in text:
        raise InvalidTextRepresentation(f"invalid byte sequence (COPY line {line})")
    return text
