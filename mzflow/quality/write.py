"""A table write's expectations: the write hook of the quality wing.

Before the commit the batch is validated (validate.py) and what its actions let through
is committed; the failing rows of a QUARANTINE expectation go to the table's quarantine
around the table's commit (quarantine.py), and the results are recorded in the write's
catalog transaction (mz_expectation_results). A FAIL writes nothing but the results.
"""

from __future__ import annotations

import pyarrow as pa

from mzflow.catalog.hooks import Apply, HookWrite, WriteHook, WriteInfo
from mzflow.catalog.model import Expectation, Item
from mzflow.catalog.store import Writer, now_ms
from mzflow.quality import quarantine
from mzflow.quality.validate import Checked, ExpectationFailed, check, validate
from mzflow.storage import paths
from mzflow.storage.delta import Shard


class _Expectations(HookWrite):
    def __init__(self, info: WriteInfo):
        self.info = info
        self.checked: Checked | None = None

    def check(self, w: Writer, table: Item, rows: pa.Table) -> pa.Table:
        checked = validate(w.snapshot, table, rows, self.info.statement)
        if checked is None:
            return rows
        if self.checked is None:
            self.checked = checked
        return checked.kept

    def holds_rows(self) -> bool:
        return self.checked is not None and self.checked.quarantined is not None

    def nothing_written(self, w: Writer) -> None:
        if self.checked is not None:  # every row dropped: still a validated batch
            w.record_results(*self.checked.records(now_ms()))

    def commit(self, w: Writer, table: Item, ts: int, count: int, apply: Apply
               ) -> int | None:
        """The table's rows and the quarantined ones (staged first: quarantine.py).
        Returns the table's new version."""
        bad = self.checked.quarantined if self.checked is not None else None
        if bad is None:
            return apply(ts)
        target = quarantine.quarantine_of(w.snapshot, table)
        rows = self.info.rows_for(w, target, quarantine.quarantine_rows(bad, target, ts))
        if count == 0:  # nothing for the table: one commit, atomic by itself
            Shard(paths.table(self.info.warehouse, target.id)).append(
                rows, ts, (f"quarantine-{table.id}", ts))
            return None
        staged = quarantine.stage(self.info.warehouse, table, target, rows, ts)
        version = apply(ts)
        quarantine.commit(staged)
        return version

    def committed(self, w: Writer, ts: int) -> None:
        if self.checked is not None:
            w.record_results(*self.checked.records(ts))

    def failed(self, error: BaseException) -> None:
        if isinstance(error, ExpectationFailed):
            # Nothing was written; the results say why, in a transaction of their own.
            with self.info.store.write() as again:
                again.record_results(*error.checked.records(now_ms()))

    def notices(self) -> list[str]:
        return list(self.checked.notices) if self.checked is not None else []


HOOK = WriteHook("quality", checks={Expectation: check}, on_lock=quarantine.recover,
                 begin=_Expectations)
