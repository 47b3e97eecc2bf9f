"""The process's caches: each one ``cachetools.LRUCache`` with a size bound, made here
and registered by name.

A long-lived process (the shell, a warm cluster server, the pg server, the soak's
workers) opens many shards, plans many definitions and reads many Parquet footers;
each cache keeps the most recently used entries up to its bound, so memory stays flat
however long the process runs. Everything cached can be read again from the log or the
catalog: an evicted entry costs time, never an answer. ``reset()`` empties them all
(tests use it to start cold; ``tests/test_caches.py`` checks every module cache is one
of these).
"""

from __future__ import annotations

import threading
from typing import Any

from cachetools import LRUCache

_ALL: dict[str, LRUCache[Any, Any]] = {}


class _Locked(LRUCache[Any, Any]):
    """An LRUCache safe to share between threads: the tick service, the pg server and
    a read's catch-up tick use the caches from many threads at once. cachetools' own is
    not: a lookup reorders a linked order that a concurrent eviction may have just
    unlinked (KeyError), and ``get`` is a test then a read that an eviction can split."""

    def __init__(self, maxsize: int):
        super().__init__(maxsize=maxsize)
        self._lock = threading.RLock()

    def __getitem__(self, key: Any) -> Any:
        with self._lock:
            return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        with self._lock:
            super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        with self._lock:
            super().__delitem__(key)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return super().__contains__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        with self._lock:
            return super().get(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        with self._lock:
            return super().pop(key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        with self._lock:
            return super().setdefault(key, default)

    def popitem(self) -> tuple[Any, Any]:
        with self._lock:
            return super().popitem()

    def clear(self) -> None:
        with self._lock:
            super().clear()


def lru(name: str, maxsize: int) -> LRUCache[Any, Any]:
    """A new bounded cache, registered as ``name`` (a module's import makes it once)."""
    cache = _Locked(maxsize)
    _ALL[name] = cache
    return cache


def reset() -> None:
    """Empty every cache of this process."""
    for cache in _ALL.values():
        cache.clear()


def sizes() -> dict[str, tuple[int, int]]:
    """Each cache's name → (entries, bound)."""
    return {name: (len(c), int(c.maxsize)) for name, c in sorted(_ALL.items())}
