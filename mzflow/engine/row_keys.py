"""TEMPORARY SHIM until the real row_keys lands (branch h34-key): Spark computes them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa


def row_keys(table: pa.Table, pg_types: Sequence[str]) -> pa.Array | None:
    from mzflow.engine.diffs import canonical, key_column
    from mzflow.engine.spark import from_arrow, to_arrow
    from mzflow.storage.types import parse_type

    cols = [f"c{i}" for i in range(table.num_columns)]
    df = canonical(from_arrow(table.rename_columns(cols)), cols,
                   [parse_type(t).spark for t in pg_types])
    return to_arrow(df.select(key_column(df, cols).alias("k"))).column("k").combine_chunks()
