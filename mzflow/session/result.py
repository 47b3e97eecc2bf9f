"""What one statement returns to the caller."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    import pandas


@dataclass
class Result:
    """What one statement returned. ``status`` is the command tag (``CREATE CLUSTER``)."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    status: str = ""
    notices: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)  # a query's column types, as printed

    def to_arrow(self) -> pa.Table:
        """The rows as an Arrow table, each column of its SQL type's Arrow type
        (``numeric(10,2)`` a decimal128(10, 2), ``timestamp with time zone`` a UTC
        timestamp); a column without a known type as Arrow infers it."""
        types = self.types or value_types(self.rows, len(self.columns))
        arrays, fields = [], []
        for i, name in enumerate(self.columns):
            values = [row[i] for row in self.rows]
            arrow = _arrow_type(types[i] if i < len(types) else None, values)
            array = pa.array(values, type=arrow) if arrow is not None else pa.array(values)
            arrays.append(array)
            fields.append(pa.field(name, array.type))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def to_pandas(self) -> pandas.DataFrame:
        """The rows as a pandas DataFrame (through :meth:`to_arrow`)."""
        return self.to_arrow().to_pandas()


def _arrow_type(type_name: str | None, values: list[Any]) -> pa.DataType | None:
    from mzflow.errors import Error
    from mzflow.storage.types import parse_type

    if type_name is None or type_name == "interval":
        return None
    try:
        arrow = parse_type(type_name).arrow
    except Error:
        return None
    if pa.types.is_decimal(arrow) and type_name.strip() == "numeric":
        # An unconstrained numeric: each value carries its own scale; keep the widest.
        exponents = [v.as_tuple().exponent for v in values
                     if isinstance(v, Decimal) and v.is_finite()]
        return pa.decimal128(38, max([0, *[-e for e in exponents if isinstance(e, int)]]))
    return arrow


# Python value → SQL type, for columns whose statement names no types (SHOW's).
_PYTHON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"), (int, "bigint"), (float, "double precision"), (Decimal, "numeric"),
    (str, "text"), (bytes, "bytea"), (dt.datetime, "timestamp without time zone"),
    (dt.date, "date"), (dt.timedelta, "interval"),
)


def value_types(rows: list[tuple[Any, ...]], width: int) -> list[str]:
    """Each column's type, read off its first non-NULL value (text when all are NULL)."""
    out = []
    for i in range(width):
        found = next((row[i] for row in rows if i < len(row) and row[i] is not None), None)
        name = "text"
        for python, sql in _PYTHON_TYPES:
            if isinstance(found, python):
                name = sql
                if isinstance(found, dt.datetime) and found.tzinfo is not None:
                    name = "timestamp with time zone"
                break
        out.append(name)
    return out
