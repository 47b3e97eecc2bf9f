"""Row keys written in Arrow (mzflow/engine/row_keys.py) are byte for byte the keys
Spark writes (diffs.key_column over the canonical values), for random tables over every
type row_keys takes: NULLs, empty and awkward strings, extreme decimals, dates and
timestamps far outside 1-9999, arrays. Types it cannot match give None."""

from __future__ import annotations

import os
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mzflow.engine import diffs
from mzflow.engine.row_keys import row_keys
from mzflow.errors import Unsupported
from mzflow.storage.delta import KEY
from mzflow.storage.rows import Target, conform
from mzflow.storage.types import parse_type

_ORDER = "_order"
EXAMPLES = int(os.environ.get("MZFLOW_KEY_EXAMPLES") or 30)
_WIDE = Context(prec=80)  # the default context keeps 28 digits


def _integers(bits: int) -> st.SearchStrategy[int]:
    top = 2 ** (bits - 1)
    return st.one_of(st.integers(-3, 3), st.sampled_from([-top, top - 1]),
                     st.integers(-top, top - 1))


def _decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    top = 10 ** precision - 1
    unscaled = st.one_of(st.integers(-1000, 1000), st.sampled_from([-top, top, 0]),
                         st.integers(-top, top))
    return unscaled.map(lambda u: Decimal(u).scaleb(-scale, _WIDE))


# Characters Jackson escapes (or might), mixed with any others.
_AWKWARD = st.sampled_from(['"', "\\", "/", "\x00", "\x01", "\b", "\t", "\n", "\x0b", "\f",
                            "\r", "\x1f", "\x7f", "\x80", "\x9f", "é", "\u2028", "\u2029",
                            "\ufeff", "\U0001f600", "'", "<", " "])


def _texts(longest: int) -> st.SearchStrategy[str]:
    return st.text(st.one_of(_AWKWARD, st.characters(exclude_categories=("Cs",))),
                   max_size=longest)


_DAYS = st.one_of(st.integers(-800_000, 3_000_000), st.integers(-2**31, 2**31 - 1),
                  st.sampled_from([-719_529, -719_528, -719_162, 2_932_896, 2_932_897]))
_MICROS = st.one_of(st.integers(-(2**62), 2**62), st.integers(-(2**63) + 1, 2**63 - 1),
                    st.integers(-10**6, 10**6),
                    st.sampled_from([-62_135_596_800_000_001, 253_402_300_800_000_000]))

# Each type row_keys takes, and its values as Arrow holds them (dates as days and
# timestamps as microseconds since the epoch: Python's datetime stops at year 9999).
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "smallint": _integers(16),
    "integer": _integers(32),
    "bigint": _integers(64),
    "numeric(15,2)": _decimals(15, 2),
    "numeric": _decimals(38, 10),
    "numeric(38,0)": _decimals(38, 0),
    "numeric(38,38)": _decimals(38, 38),
    "numeric(10,7)": _decimals(10, 7),
    "numeric(*,4)": _decimals(38, 4),
    "text": _texts(12),
    "character(1)": _texts(1),
    "varchar(25)": _texts(25),
    "jsonb": _texts(6),
    "boolean": st.booleans(),
    "date": _DAYS,
    "timestamp": _MICROS,
    "timestamptz": _MICROS,
    "bytea": st.binary(max_size=7),
}
for _element in ("integer", "text", "numeric(15,2)", "date", "boolean"):
    VALUES[f"{_element}[]"] = st.lists(st.none() | VALUES[_element], max_size=4)


def _arrow(values: list[Any], pg_type: str) -> pa.Array:
    arrow = parse_type(pg_type).arrow
    raw = {pa.date32(): pa.int32(), pa.timestamp("us"): pa.int64(),
           pa.timestamp("us", tz="UTC"): pa.int64()}.get(arrow)
    if pa.types.is_list(arrow) and arrow.value_type == pa.date32():
        return pa.array(values, pa.list_(pa.int32())).cast(arrow)
    return pa.array(values, raw).cast(arrow) if raw is not None else pa.array(values, arrow)


@st.composite
def tables(draw: st.DrawFn) -> tuple[pa.Table, list[str]]:
    types = draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, max_size=4))
    rows = draw(st.integers(1, 25))
    columns = [_arrow(draw(st.lists(st.none() | VALUES[t], min_size=rows, max_size=rows)), t)
               for t in types]
    names = [f"x{i}" for i in range(len(types))]
    table = pa.table(columns, names=names)
    return conform(table, [Target(n, t, True) for n, t in zip(names, types, strict=True)]), types


def _spark_keys(table: pa.Table, pg_types: list[str]) -> list[str]:
    """The keys a tick computes in Spark (diffs.canonical, then diffs.key_column) over
    the same rows. Only the keys come back: diffs._keyed also collects the values, and
    a frame of local rows is collected through Python's datetime, which stops at 9999."""
    from mzflow.engine.spark import session, to_arrow

    names = table.column_names
    ordered = table.append_column(_ORDER, pa.array(range(table.num_rows), pa.int64()))
    df = diffs.canonical(session().createDataFrame(ordered), names,
                         [parse_type(t).spark for t in pg_types], [_ORDER])
    keyed = to_arrow(df.select(diffs.key_column(df, names).alias(KEY), _ORDER))
    return keyed.sort_by(_ORDER).column(KEY).to_pylist()


@pytest.mark.slow
@pytest.mark.spark
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(tables())
def test_random_rows_have_sparks_keys(drawn: tuple[pa.Table, list[str]]) -> None:
    table, pg_types = drawn
    ours = row_keys(table, pg_types)
    assert ours is not None, pg_types
    assert ours.type == pa.string()
    assert ours.to_pylist() == _spark_keys(table, pg_types), (pg_types, table.to_pylist())


@pytest.mark.slow
@pytest.mark.spark
def test_hand_examples_have_sparks_keys() -> None:
    """Values whose JSON text is easy to get wrong, one column each, against Spark."""
    examples: list[tuple[str, list[Any]]] = [
        ("numeric", [Decimal(0), Decimal("1e-10"), Decimal("-1e-7"), Decimal("1e-6"),
                     Decimal("-0.5"), Decimal("9" * 28 + "." + "9" * 10)]),
        ("numeric(10,7)", [Decimal(0), Decimal("0.0000001")]),
        ("text", ["", "a\"b\\c", "\x00\x1f\x7f", "\u2028é😀", "null", None]),
        ("date", [-719_529, 2_932_897, -(2**31), 2**31 - 1, 0]),
        ("timestamptz", [1_704_164_645_123_456, -1, 1_704_164_645_123_999]),
        ("timestamp", [-62_135_596_800_000_001, 253_402_300_799_999_999]),
        ("integer[]", [[], [None], [1, -2], None]),
        ("bytea", [b"", b"\x00\xff", None]),
    ]
    for pg_type, values in examples:
        table = pa.table([_arrow(values, pg_type)], names=["x0"])
        ours = row_keys(table, [pg_type])
        assert ours is not None
        assert ours.to_pylist() == _spark_keys(table, [pg_type]), pg_type


def test_keys_differ_where_rows_differ() -> None:
    """NULL, the text 'null', an empty string and an empty array are four rows."""
    table = pa.table([pa.array([None, "null", "", "[]"]), pa.array([None, [], [], None],
                                                                   pa.list_(pa.int32()))],
                     names=["a", "b"])
    keys = row_keys(table, ["text", "integer[]"])
    assert keys is not None and len(set(keys.to_pylist())) == 4


@pytest.mark.parametrize("pg_type", ["double precision", "real", "interval", "uuid",
                                     "double precision[]", "time"])
def test_types_it_cannot_match_give_none(pg_type: str) -> None:
    try:
        arrow = parse_type(pg_type).arrow
    except Unsupported:
        arrow = pa.int64()  # a type mzflow does not store: refused before its values
    table = pa.table({"a": pa.array([1], pa.int32()), "b": pa.nulls(1, arrow)})
    assert row_keys(table, ["integer", pg_type]) is None
    assert row_keys(table.select(["a"]), ["integer"]) is not None


def test_a_column_not_in_its_stored_type_gives_none() -> None:
    table = pa.table({"a": pa.array([1], pa.int64())})
    assert row_keys(table, ["integer"]) is None
    assert row_keys(table, ["bigint"]) is not None
