"""A sink's Delta output table, whose commits are the sink's progress."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


class SinkTable:
    """A sink's Delta output. Each interval is one commit carrying the idempotency key
    ``(sink-<id>, interval end)``: the commit is the interval's progress, and an
    interval already committed is never written twice."""

    def __init__(self, path: str, app_id: str):
        self.path, self.app_id = path, app_id

    def done_through(self) -> int | None:
        """The end (ms) of the last interval committed, if any."""
        from deltalake import DeltaTable

        try:
            dt = DeltaTable(self.path)
        except Exception:  # no table yet
            return None
        return dt.transaction_version(self.app_id)

    def append(self, rows: pa.Table, end_ms: int) -> None:
        from deltalake import write_deltalake

        props = _sink_props(self.app_id, end_ms)
        write_deltalake(self.path, rows, mode="append", commit_properties=props)

    def upsert(self, rows: pa.Table, key: list[str], state: str, end_ms: int) -> None:
        """Merge the interval's latest row per key; ``state == 'delete'`` rows remove it."""
        from deltalake import DeltaTable, write_deltalake

        values = rows.drop_columns([state])
        if self.done_through() is None:
            write_deltalake(self.path, values.schema.empty_table(), mode="append")
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in key)
        (DeltaTable(self.path).merge(rows, on, source_alias="s", target_alias="t",
                                     commit_properties=_sink_props(self.app_id, end_ms))
         .when_matched_delete(predicate=f"s.`{state}` = 'delete'")
         .when_matched_update(updates={c: f"s.`{c}`" for c in values.column_names},
                              predicate=f"s.`{state}` = 'upsert'")
         .when_not_matched_insert(updates={c: f"s.`{c}`" for c in values.column_names},
                                  predicate=f"s.`{state}` = 'upsert'")
         .execute())


def _sink_props(app_id: str, end_ms: int) -> Any:
    from deltalake import CommitProperties, Transaction

    return CommitProperties(custom_metadata={"mzflow.sink_end": str(end_ms)},
                            app_transactions=[Transaction(app_id, end_ms)])
