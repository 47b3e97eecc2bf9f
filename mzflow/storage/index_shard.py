"""The Delta table of a maintained index, and how far its contents are complete."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa

from mzflow.storage.commits import (
    ERROR_CODE_KEY,
    ERROR_KEY,
    TABLE_CONFIG,
    TS_KEY,
    read_log,
    tick_props,
)
from mzflow.storage.errors import writes
from mzflow.storage.shard import Shard

KEY = "_mz_key"  # identity of a distinct row: a hash of all its values
COUNT = "_mz_count"  # its multiplicity


class IndexState(NamedTuple):
    """How far an index's contents are complete, and the error its newest tick hit."""

    done_through: int  # the time the contents are complete through; -1: never ticked
    error: str | None = None
    error_code: str | None = None  # the error's SQLSTATE

    @classmethod
    def of(cls, entry: dict[str, Any] | None) -> IndexState:
        if not entry:
            return cls(-1)
        return cls(int(entry[TS_KEY]), entry.get(ERROR_KEY), entry.get(ERROR_CODE_KEY))


class IndexShard(Shard):
    """The contents of a maintained index: one row per distinct row, with its count.

    Each tick is one commit whose metadata records the time the contents are
    complete through (``mzflow.ts``, with ``mzflow.upper`` = ts + 1), or the
    evaluation error that time produced (``mzflow.error``, contents unchanged).
    The commit carries the idempotency key ``(tick-<index id>, ts)``, so a tick
    retried for the same time applies once.
    """

    @writes
    def create_index(self, schema: pa.Schema, ts: int) -> int:
        from deltalake import DeltaTable

        full = schema.append(pa.field(KEY, pa.string(), nullable=False)).append(
            pa.field(COUNT, pa.int64(), nullable=False))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        DeltaTable.create(str(self.path), full, mode="error", configuration=TABLE_CONFIG,
                          commit_properties=tick_props(ts, None, None))
        return 0

    def state(self) -> IndexState:
        """From the newest commit mzflow wrote (compactions before this version of
        mzflow left vacuum commits without its metadata)."""
        return IndexState.of(self._newest(lambda e: TS_KEY in e, first_page=1))

    def good_through(self) -> int:
        """The time of the newest commit without an error: the contents are exactly
        the definition's result at that time, so the next tick's changes start there."""
        entry = self._newest(lambda e: ERROR_KEY not in e and TS_KEY in e, first_page=4)
        return int(entry[TS_KEY]) if entry else -1

    def _newest(self, wanted: Callable[[dict[str, Any]], bool],
                first_page: int) -> dict[str, Any] | None:
        """The newest commit entry ``wanted`` accepts. Newest first, in growing pages:
        usually the first page answers, so the cost does not grow with the number of
        ticks before it."""
        dt = self._table()
        limit, total = first_page, int(dt.version()) + 1
        while True:
            entries = read_log(dt, min(limit, total))
            found = next((e for e in entries if wanted(e)), None)
            if found is not None or len(entries) >= total:
                return found
            limit *= 4

    def compact(self, keep_from: int, ts: int) -> dict[str, Any]:
        # Rewriting files changes no row: the contents stay complete through the same
        # time, with the same error state. ``ts`` (the compaction's own time) is unused.
        state = self.state()
        code = {ERROR_CODE_KEY: state.error_code} if state.error_code else None
        return self._compact(keep_from, tick_props(state.done_through, state.error, None, code))

    def ticks(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` tick commits' metadata, newest first."""
        return [e for e in read_log(self._table(), limit) if TS_KEY in e]

    @writes
    def apply(self, changes: pa.Table, ts: int, app_id: str,
              extra: dict[str, str] | None = None) -> int:
        """Merge ``changes`` — rows with their key and their *new* count — at ``ts``.
        ``extra``: more commit metadata (what the tick did and cost)."""
        dt = self._table()
        (dt.merge(changes, f"t.{KEY} = s.{KEY}", source_alias="s", target_alias="t",
                  commit_properties=tick_props(ts, None, (app_id, ts), extra))
         .when_matched_delete(predicate=f"s.{COUNT} = 0")
         .when_matched_update_all()
         .when_not_matched_insert_all(predicate=f"s.{COUNT} > 0")
         .execute())
        return self.version()

    @writes
    def mark(self, ts: int, app_id: str, error: str | None, schema: pa.Schema,
             extra: dict[str, str] | None = None) -> int:
        """A commit that changes no rows: the tick found nothing to change, or failed."""
        from deltalake import write_deltalake

        write_deltalake(str(self.path), schema.empty_table(), mode="append",
                        commit_properties=tick_props(ts, error, (app_id, ts), extra))
        return self.version()
