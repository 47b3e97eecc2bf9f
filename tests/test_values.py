"""``mzflow.values.pg_text`` against PostgreSQL's own output functions: each value is
fetched twice from a real server, parsed by psycopg2 (the Python value a read hands
back) and as the raw text the server wrote; ``pg_text`` of the first must be the
second. No Spark: tests/test_ordered_aggregates.py checks the values mzflow's reads
return.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mzflow.values import pg_text
from mzflow_dev import pg_server

psycopg2 = pytest.importorskip("psycopg2")
sa = pytest.importorskip("sqlalchemy")

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

VALUES = [
    "true", "false", "0", "-7::smallint", "9223372036854775807",
    "1.50", "-0.00", "123456789012345678901234567890.123", "'NaN'::numeric", "1e-10::numeric",
    "0.1::float8", "1e20::float8", "1e15::float8", "1e14::float8", "123456789012345::float8",
    "0.0001::float8", "0.00001::float8", "1.5e-7::float8", "-2.5e300::float8",
    "'-0'::float8", "'NaN'::float8", "'Infinity'::float8", "'-Infinity'::float8",
    "(1.0/3)::float8", "0.1::real", "123456.7::real", "1234567::real", "999999::real",
    "1e-5::real", "3.4028235e38::real", "'NaN'::real",
    "'text'", "''", "'a b'", "'ünï'",
    "'ab\\\\x'::bytea", "''::bytea",
    "DATE '2000-01-02'", "DATE '0099-12-31'",
    "TIME '01:02:03'", "TIME '23:59:59.999999'", "TIME '00:00:00.5'",
    "TIMESTAMP '2020-01-01 01:02:03.789'", "TIMESTAMP '2020-01-01 00:00:00'",
    "TIMESTAMP '1999-12-31 23:59:59.000001'",
    "TIMESTAMPTZ '2000-01-01 00:00:00+00'", "TIMESTAMPTZ '2000-06-01 12:30:00.25+02'",
    "INTERVAL '1 minute'", "INTERVAL '-1 minute'", "INTERVAL '1 day 2 hours'",
    "INTERVAL '3 days'", "INTERVAL '-1 day'", "INTERVAL '-1 day -00:00:01'",
    "INTERVAL '1.5 seconds'", "INTERVAL '0'", "INTERVAL '100 days 00:00:00.000001'",
    "ARRAY['a', 'b c', NULL, '', 'NULL', 'null', 'q\"uote', 'back\\slash', '{x}', 'a,b']",
    "ARRAY[1, 2, 3]", "ARRAY[ARRAY[1, 2], ARRAY[3, 4]]", "ARRAY[NULL::int]",
    "ARRAY[1.5, 2]", "ARRAY[0.1::float8, 1e20]", "ARRAY[true, false]",
    "ARRAY[TIMESTAMP '2000-01-01 00:00:00']", "ARRAY[DATE '2000-01-01']",
    "ARRAY['ab'::bytea]", "ARRAY[INTERVAL '1 minute']", "'{}'::int[]",
    "'{\"b\": 1, \"a\": [1, 2.5, null, \"x\"]}'::jsonb",
]


@pytest.fixture(scope="module")
def pg(pg_url: str) -> Iterator[Any]:
    with pg_server.cursor(pg_url) as cur:
        yield cur.connection


def test_pg_text_is_postgresqls_output(pg: Any) -> None:
    sql = "SELECT " + ", ".join(f"{v}, pg_typeof({v})::text" for v in VALUES)
    parsed = pg.cursor()
    parsed.execute("SET TimeZone TO 'UTC'")
    parsed.execute(sql)
    row = parsed.fetchone()
    values, types = row[0::2], row[1::2]
    parsed.execute("SELECT oid FROM pg_type")
    oids = tuple(int(oid) for (oid,) in parsed.fetchall())
    raw = pg.cursor()
    psycopg2.extensions.register_type(
        psycopg2.extensions.new_type(oids, "RAW_TEXT", lambda value, _: value), raw)
    raw.execute(sql)
    texts = raw.fetchone()[0::2]
    differ = [(sql, v, t, pg_text(v, t), want)
              for sql, v, t, want in zip(VALUES, values, types, texts, strict=True)
              if pg_text(v, t) != want]
    assert not differ, "\n".join(f"{s} ({t}): {v!r} → {got!r}, PostgreSQL {want!r}"
                                 for s, v, t, got, want in differ)


def test_a_value_without_its_type_prints_by_its_python_type() -> None:
    assert pg_text(None, "text") is None
    assert pg_text([1, None], None) == "{1,NULL}"
    assert pg_text(0.1, None) == "0.1"  # a double's digits unless the type says real
