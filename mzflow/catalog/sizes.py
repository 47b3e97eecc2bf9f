"""Cluster sizes: what ``SIZE '<name>'`` buys.

A size maps to Airflow pool slots (how many of the cluster's maintenance tasks
run at once) and a Spark resource profile (what each task may use). A cluster
with no SIZE gets ``DEFAULT_SIZE``; a VIRTUAL cluster shares the default Spark
session and one pool slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from mzflow.errors import InvalidOption


@dataclass(frozen=True)
class Size:
    name: str
    pool_slots: int
    executor_cores: int
    executor_memory: str
    shuffle_partitions: int

    @property
    def memory_bytes(self) -> int:
        """``executor_memory`` in bytes ("2g")."""
        units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
        text = self.executor_memory.lower()
        return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


SIZES: dict[str, Size] = {
    s.name: s
    for s in (
        Size("xsmall", pool_slots=1, executor_cores=1, executor_memory="1g", shuffle_partitions=2),
        Size("small", pool_slots=2, executor_cores=1, executor_memory="2g", shuffle_partitions=4),
        Size("medium", pool_slots=4, executor_cores=2, executor_memory="4g", shuffle_partitions=8),
        Size("large", pool_slots=8, executor_cores=4, executor_memory="8g", shuffle_partitions=16),
        Size("xlarge", pool_slots=16, executor_cores=8, executor_memory="16g",
             shuffle_partitions=32),
    )
}
DEFAULT_SIZE = "small"
VIRTUAL_SIZE = Size("virtual", pool_slots=1, executor_cores=1, executor_memory="1g",
                    shuffle_partitions=2)


def lookup(name: str) -> Size:
    try:
        return SIZES[name]
    except KeyError:
        valid = ", ".join(f"'{s}'" for s in SIZES)
        raise InvalidOption(f"unknown cluster size '{name}'",
                            hint=f"valid sizes are {valid}") from None


def of_cluster(virtual: bool, size: str | None) -> Size:
    if virtual:
        return VIRTUAL_SIZE
    return lookup(size or DEFAULT_SIZE)


def bigger(size: Size) -> Size | None:
    """The next size up (SIZES runs from the smallest), if any."""
    names = list(SIZES)
    at = names.index(size.name) + 1 if size.name in SIZES else len(names)
    return SIZES[names[at]] if at < len(names) else None
