"""DDL: check a statement against the catalog and persist it, in one transaction.

Each public function takes the store, the parsed statement and the session's
active cluster, and returns notices for the user (``… already exists,
skipping``). All checks run inside the write transaction, on the state that
transaction sees, so concurrent sessions cannot both pass a check and then
conflict.

One module per object kind; :mod:`.core` holds what they share.
"""

from mzflow.catalog.ddl.clusters import alter_cluster, create_cluster
from mzflow.catalog.ddl.comments import comment
from mzflow.catalog.ddl.core import REFRESH_MODES, Notices, refresh_mode
from mzflow.catalog.ddl.drops import drop
from mzflow.catalog.ddl.indexes import create_index
from mzflow.catalog.ddl.renames import rename
from mzflow.catalog.ddl.schemas import create_schema
from mzflow.catalog.ddl.settings import set_system
from mzflow.catalog.ddl.sinks import create_sink
from mzflow.catalog.ddl.swaps import swap
from mzflow.catalog.ddl.tables import add_column, create_table
from mzflow.catalog.ddl.views import create_view

__all__ = [
    "REFRESH_MODES",
    "Notices",
    "add_column",
    "alter_cluster",
    "comment",
    "create_cluster",
    "create_index",
    "create_schema",
    "create_sink",
    "create_table",
    "create_view",
    "drop",
    "refresh_mode",
    "rename",
    "set_system",
    "swap",
]
