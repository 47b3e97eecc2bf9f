import atexit
import json
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mzflow_dev import pg_server

# Ticks run on the process's own Spark in tests: a warm server per cluster would start a
# JVM per test home. tests/test_cluster_servers.py turns the managed servers on.
os.environ.setdefault("MZFLOW_CLUSTER_SPARK", "in-process")
# The warm servers tests start count against a budget of their own, not against the
# user's real warm processes (clusters/budget.py), nor do they take the user's room.
if "MZFLOW_WARM_REGISTRY" not in os.environ:
    os.environ["MZFLOW_WARM_REGISTRY"] = tempfile.mkdtemp(prefix="mzflow-warm-")
    atexit.register(shutil.rmtree, os.environ["MZFLOW_WARM_REGISTRY"], True)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """SQLAlchemy URL of a database on a throwaway PostgreSQL server (started once)."""
    bindir = pg_server.find_bindir()
    if bindir is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found under "
                    f"/usr/lib/postgresql/*/bin or on PATH: run {pg_server.ENSURE_SCRIPT} "
                    "(as root) to install them", pytrace=False)
    server = pg_server.PgServer(bindir)
    try:
        server.start()
        yield server.create_database("mzflow_test")
    finally:
        server.stop()


@contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    """Keep the markers honest. A test outside ``slow`` starts no process: no Spark
    (pyspark launches its JVM as a child), no PostgreSQL, no Airflow server, no
    subprocess; ``make fast`` (``-m "not slow"``) relies on it. A test outside ``spark``
    does not start Spark (one that reuses the session an earlier test started goes
    unnoticed: run ``-m "not spark"`` to check those)."""
    slow = item.get_closest_marker("slow") is not None
    spark = item.get_closest_marker("spark") is not None
    if slow and spark:
        yield
        return
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def guarded(self: subprocess.Popen[bytes], args: object, *rest: object) -> None:
        command = [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
        # pytest.fail, not an Exception: callers that catch Exception cannot hide it.
        if not spark and any(a.endswith(("spark-submit", "spark-class")) for a in command):
            pytest.fail(f"{item.nodeid} starts Spark: mark it spark", pytrace=False)
        # platform.architecture() asks file(1), once per process (croniter does on
        # import): a millisecond, not what the fast set keeps out.
        if not slow and command[:2] != ["file", "-b"]:
            pytest.fail(f"{item.nodeid} starts a process ({command}): mark it slow",
                        pytrace=False)
        return execute_child(self, args, *rest)  # type: ignore[no-any-return]

    subprocess.Popen._execute_child = guarded  # type: ignore[attr-defined]
    try:
        yield
    finally:
        subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]


# Setup (the fixtures a test brings up, module- and session-wide ones included) and
# the test itself; not teardown, where the last test of a run stops servers that
# slow tests started.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        yield


_DURATIONS = Path(__file__).with_name("durations.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest test files first (tests/durations.json, written by
    scripts/test_durations.py; a file not in it is guessed at half a second a test).
    make test runs ``--dist loadfile --no-loadscope-reorder``: xdist then hands files out
    in this order, so no long file starts when the other worker is nearly done. Tests
    keep their order within a file."""
    known = json.loads(_DURATIONS.read_text()) if _DURATIONS.exists() else {}
    files = [item.nodeid.split("::")[0] for item in items]
    counts = Counter(files)
    weight = {f: known.get(f, counts[f] * 0.5) for f in counts}
    order = {f: i for i, f in enumerate(sorted(counts, key=lambda f: -weight[f]))}
    items[:] = [item for _, item in sorted(zip(files, items, strict=True),
                                           key=lambda fi: order[fi[0]])]
