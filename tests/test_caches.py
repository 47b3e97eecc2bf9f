"""The process's caches (issue 33): each one bounded object made by ``mzflow/caches.py``,
emptied by ``caches.reset()``; no module keeps a growing dict of its own. No Spark."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pyarrow as pa

import mzflow
from mzflow import caches
from mzflow.storage.delta import Shard

PACKAGE = Path(mzflow.__file__).parent
# Module-level values that would be a cache without a bound: an empty dict or
# OrderedDict filled later, or a function memoized without a size.
_EMPTY = ("dict", "OrderedDict", "defaultdict", "WeakValueDictionary")


def _unbounded(tree: ast.Module, lines: list[str] | None = None) -> list[str]:
    """Module-level values that could grow without a bound. A dict whose entries its
    own code removes (a registry of what is running now) says so on its line, with a
    ``# bounded:`` comment that gives the reason."""
    found = []
    for node in tree.body:
        if lines and "# bounded:" in lines[node.lineno - 1]:
            continue
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Dict) and not value.keys:
            found.append(f"line {node.lineno}: an empty dict")
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name | ast.Attribute):
            name = value.func.id if isinstance(value.func, ast.Name) else value.func.attr
            if name in _EMPTY and not value.args:
                found.append(f"line {node.lineno}: {name}()")
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                text = ast.unparse(d)
                if text in ("cache", "functools.cache") or "maxsize=None" in text:
                    found.append(f"line {node.lineno}: @{text} on {node.name}")
    return found


def test_no_module_keeps_an_unbounded_cache() -> None:
    bad = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "caches.py":
            continue  # the registry of the caches, one entry per cache
        text = path.read_text()
        found = _unbounded(ast.parse(text), text.splitlines())
        if found:
            bad[str(path.relative_to(PACKAGE))] = found
    assert not bad, f"use mzflow.caches.lru(name, bound) instead: {bad}"


def test_the_check_finds_an_unbounded_cache() -> None:
    tree = ast.parse("_A: dict[str, int] = {}\n_B = OrderedDict()\n@cache\ndef f(): ...\n"
                     "_C = {'k': 1}\n")
    assert [f.split(":")[0] for f in _unbounded(tree)] == ["line 1", "line 2", "line 4"]


def _import_all() -> None:
    for info in pkgutil.walk_packages([str(PACKAGE)], "mzflow."):
        if ".airflow" in info.name or info.name.endswith("__main__"):
            continue  # Airflow's modules import Airflow; none of them caches
        importlib.import_module(info.name)


def test_every_cache_is_bounded_and_reset_empties_them() -> None:
    _import_all()
    sizes = caches.sizes()
    assert len(sizes) >= 6, sizes  # storage's, maintain's, projections' and quality's
    for name, cache in caches._ALL.items():
        bound = int(cache.maxsize)
        for i in range(bound + 5):
            cache[("test", i)] = i
        assert len(cache) == bound, name
        assert ("test", 0) not in cache and ("test", bound + 4) in cache  # oldest out
    caches.reset()
    assert all(n == 0 for n, _ in caches.sizes().values())


def test_a_shard_reads_its_history_again_after_a_reset(tmp_path: Path) -> None:
    shard = Shard.shared(tmp_path / "t")
    shard.create(pa.schema([("a", pa.int32())]), 1)
    rows = pa.table({"a": pa.array([1], pa.int32()), "_mz_rowid": pa.array([7], pa.int64())})
    shard.append(rows, 10)
    before = (shard.history(), shard.version_at(10), shard.files(1))
    caches.reset()
    again = Shard.shared(tmp_path / "t")
    assert again is not shard  # the open shard was forgotten too
    assert (again.history(), again.version_at(10), again.files(1)) == before


def test_a_cache_shared_by_threads_never_fails_a_lookup() -> None:
    """Many threads reading, writing and evicting one small cache at once (as the pg
    server's connections and the tick service do): cachetools' LRUCache alone raised
    KeyError here, from a lookup reordering a key another thread had evicted."""
    import threading

    cache = caches.lru("test.shared", 8)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(20_000):
                k = (seed * 7 + i) % 24
                if cache.get(k) is None:
                    cache[k] = i
                if i % 5 == 0:
                    cache.pop(k, None)
        except BaseException as e:  # noqa: BLE001 - counted, then asserted
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(cache) <= 8
