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

from typing import Any

from cachetools import LRUCache

_ALL: dict[str, LRUCache[Any, Any]] = {}


def lru(name: str, maxsize: int) -> LRUCache[Any, Any]:
    """A new bounded cache, registered as ``name`` (a module's import makes it once)."""
    cache: LRUCache[Any, Any] = LRUCache(maxsize=maxsize)
    _ALL[name] = cache
    return cache


def reset() -> None:
    """Empty every cache of this process."""
    for cache in _ALL.values():
        cache.clear()


def sizes() -> dict[str, tuple[int, int]]:
    """Each cache's name → (entries, bound)."""
    return {name: (len(c), int(c.maxsize)) for name, c in sorted(_ALL.items())}
