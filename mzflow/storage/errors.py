"""A storage write's failure, as mzflow's error: nothing was committed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mzflow.errors import Error


class StorageError(Error):
    code = "58030"  # io_error


def writes(method: Callable[..., Any]) -> Callable[..., Any]:
    """A failure of delta-rs or of the file system under a write (a full disk, a lost
    commit race) as a StorageError naming the shard: nothing was committed, and the
    caller's transaction rolls back. Found by the soak's disk-full fault (issue 19):
    writers got delta-rs's raw DeltaError."""
    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Error:
            raise
        except Exception as e:
            from deltalake.exceptions import DeltaError

            if not isinstance(e, OSError | DeltaError):
                raise
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StorageError(f"could not write shard {self.path.name}: {first}") from e
    return wrapped
