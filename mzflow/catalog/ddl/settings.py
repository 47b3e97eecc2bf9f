"""ALTER SYSTEM SET / RESET: settings stored in the catalog."""

from __future__ import annotations

from mzflow.catalog.ddl.core import Notices
from mzflow.catalog.store import Store


def set_system(store: Store, name: str, value: str | None) -> Notices:
    with store.write() as w:
        w.set_setting(name, value)
    return []
