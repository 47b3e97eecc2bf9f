"""Partition keys: how a table's ``PARTITION BY (col)`` maps to Delta partitions.

Delta keeps partition columns out of the data files, while every reader here reads
data files directly (Spark over a version's file list, Arrow for arrangements and
projections). So the user's column stays an ordinary data column, with its statistics,
and the Delta table is partitioned by a hidden *key* column derived from it
(``_mz_partition_<col>``, like a Delta generated column): readers of data files see
the real column, with its exact values and type ('' apart from NULL, which Delta's
partition values cannot tell apart), and need no change. Only the shard, which
writes the key and reads whole tables through delta-rs, knows about it.

A key is the value's text (Arrow's cast to string: one canonical form per type; hex
for bytea)
spelled in characters that need no escaping in a path (letters, digits, ``.``, ``-``;
anything else ``_xx`` per UTF-8 byte, '' as ``_``): delta-rs 1.6 reads the change
feed of a partition whose directory name it had to escape from the wrong path. NULL
is Delta's null partition. Keys too long for a directory name end in a hash.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.catalog.model import PARTITION_KEY_PREFIX

_SAFE = frozenset(string.ascii_letters + string.digits + ".-")
_MAX_KEY = 160  # bytes of a key kept verbatim; the directory name adds the column's


def key_column(column: str) -> str:
    """The hidden Delta partition column of the table column ``column``."""
    return PARTITION_KEY_PREFIX + column


def is_key(name: str) -> bool:
    return name.startswith(PARTITION_KEY_PREFIX)


def key_of(text: str | None) -> str | None:
    """The partition key of a value's text (None: the null partition)."""
    if text is None:
        return None
    if text == "":
        return "_"  # never produced otherwise: '_' always starts an escape
    key = "".join(c if c in _SAFE else "".join(f"_{b:02x}" for b in c.encode())
                  for c in text)
    if len(key) > _MAX_KEY:
        key = key[:_MAX_KEY] + "_h" + hashlib.sha256(text.encode()).hexdigest()[:24]
    return key


def keys(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The partition key of each value (few distinct ones: encoded once each)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_string_view(values.type) or pa.types.is_large_string(values.type):
        values = pc.cast(values, pa.string())
    distinct = pc.unique(values)
    if pa.types.is_binary(distinct.type) or pa.types.is_large_binary(distinct.type):
        texts = [None if v is None else v.hex() for v in distinct.to_pylist()]
    else:
        texts = pc.cast(distinct, pa.string()).to_pylist()
    encoded = pa.array([key_of(t) for t in texts], pa.string())
    return pc.take(encoded, pc.index_in(values, distinct))


def with_keys(data: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``data`` with the key column of each partition column (replaced if present)."""
    for column in columns:
        name = key_column(column)
        if name in data.column_names:
            data = data.drop_columns([name])
        data = data.append_column(pa.field(name, pa.string()), keys(data.column(column)))
    return data


def without_keys(data: pa.Table) -> pa.Table:
    hidden = [c for c in data.column_names if is_key(c)]
    return data.drop_columns(hidden) if hidden else data


def key_of_literal(text: str | None, arrow_type: pa.DataType) -> str | None:
    """The key of a literal given as text (``IN PARTITION '2024-01-01'``) for a column
    of ``arrow_type``: the literal cast to the column's type, then keyed like a written
    value. Raises ``pa.ArrowInvalid`` when the text is not a value of that type
    (``ValueError`` for bad hex)."""
    if text is None:
        return None
    literal = pa.array([text], pa.string())
    if pa.types.is_binary(arrow_type):
        value = pa.array([bytes.fromhex(text.removeprefix("\\x"))], arrow_type)
    elif pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        try:
            value = pc.cast(literal, arrow_type)
        except pa.ArrowInvalid:  # no offset given: UTC, as the stored values are
            value = pc.cast(pc.cast(literal, pa.timestamp(arrow_type.unit)), arrow_type)
    else:
        value = pc.cast(literal, arrow_type)
    return keys(value)[0].as_py()
