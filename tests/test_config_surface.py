"""One configuration surface: what conf/mzflow.toml (or ``MZFLOW_CONFIG``'s file) says
reaches every part that acts on it. No Spark starts here: a stand-in for pyspark's
session builder records the master Spark would be started with, and stops there."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

import mzflow
from mzflow.catalog.model import Cluster
from mzflow.clusters import servers


class _Stop(Exception):
    """Raised by the stand-in builder where pyspark would launch the JVM."""


class _Builder:
    def __init__(self) -> None:
        self.masters: list[str] = []

    def appName(self, name: str) -> _Builder:  # noqa: N802 - pyspark's name
        return self

    def master(self, url: str) -> _Builder:
        self.masters.append(url)
        raise _Stop

    def remote(self, url: str) -> _Builder:
        self.masters.append(url)
        raise _Stop


def _master_spark_starts_with(monkeypatch: pytest.MonkeyPatch) -> str:
    """The master the process's Spark would start with now, from a process that has none
    yet (a test process may hold a real session: it is left alone)."""
    from pyspark.sql import SparkSession

    from mzflow.engine import spark

    builder = _Builder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    monkeypatch.setattr(spark.runtime.process(), "_session", None)
    for name in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP"):  # what starting sets: restored
        monkeypatch.setenv(name, "x")
    with pytest.raises(_Stop):
        spark.session()
    assert len(builder.masters) == 1
    return builder.masters[0]


def test_a_spark_master_set_only_in_the_project_file_is_the_one_spark_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A runtime of the test's own (this process may hold a real session for later tests):
    # the connection configures it, as it configures the process's.
    from mzflow.engine import spark

    monkeypatch.setattr(spark.runtime, "_PROCESS", spark.SparkRuntime())
    project = tmp_path / "mzflow.toml"
    project.write_text('spark_master = "spark://spark.example:7077"\n')
    monkeypatch.setenv("MZFLOW_CONFIG", str(project))
    monkeypatch.delenv("MZFLOW_SPARK_MASTER", raising=False)
    monkeypatch.setenv("MZFLOW_CLUSTER_SPARK", "managed")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        assert conn.config.spark_master == "spark://spark.example:7077"
        # The configured master turns the warm cluster servers off…
        assert servers.endpoint_for(conn.config, Cluster(2, "etl", size="xsmall")) is None
        # …so the cluster's ticks run on the process's Spark, which must be that master.
        assert _master_spark_starts_with(monkeypatch) == "spark://spark.example:7077"


def test_the_airflow_connections_master_reaches_spark_as_an_argument(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """airflow/tasks.py opens its connection with the ``mzflow_spark`` connection's
    master; nothing passes through the environment."""
    from mzflow.engine import spark

    monkeypatch.setattr(spark.runtime, "_PROCESS", spark.SparkRuntime())
    monkeypatch.setenv("MZFLOW_SPARK_MASTER", "local[1]")  # the argument is stronger
    with mzflow.connect(str(tmp_path / "home"), spark_master="sc://spark.example:15002"
                        ) as conn:
        assert conn.config.spark_master == "sc://spark.example:15002"
        assert _master_spark_starts_with(monkeypatch) == "sc://spark.example:15002"
    assert os.environ["MZFLOW_SPARK_MASTER"] == "local[1]"


def test_the_driver_memory_comes_from_the_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mzflow.engine import spark

    monkeypatch.setattr(spark.runtime, "_PROCESS", spark.SparkRuntime())
    monkeypatch.setenv("MZFLOW_SPARK_DRIVER_MEMORY", "3g")
    with mzflow.connect(str(tmp_path / "home")) as conn:
        assert conn.config.spark_driver_memory == "3g"
    monkeypatch.delenv("MZFLOW_SPARK_DRIVER_MEMORY")
    assert spark.driver_memory() == "3g"  # the connection's, once it configured Spark


def test_a_child_gets_its_configuration_in_its_environment() -> None:
    from mzflow import config

    parent = {"PATH": "/bin", "MZFLOW_SPARK_MASTER": "spark://m:7077", "MZFLOW_HOME": "/h"}
    assert config.child_environment(parent, spark_master=None, cluster_spark="managed") == {
        "PATH": "/bin", "MZFLOW_HOME": "/h", "MZFLOW_CLUSTER_SPARK": "managed"}
    assert parent["MZFLOW_SPARK_MASTER"] == "spark://m:7077"  # the parent's is its own


# -- only config.py reads MZFLOW_* -------------------------------------------------------

PACKAGE = Path(mzflow.__file__).parent
CONFIG = PACKAGE / "config.py"


def _names_a_variable(node: ast.AST) -> bool:
    """A string that is an ``MZFLOW_*`` name, or an f-string that builds one: the only
    way code reads, writes or filters such a variable (prose that mentions one, in a
    message or a docstring, is more than the name)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.fullmatch(r"MZFLOW_[A-Z0-9_]*", node.value) is not None
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        return (isinstance(first, ast.Constant) and isinstance(first.value, str)
                and first.value.startswith("MZFLOW_"))
    return False


def side_channels(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == CONFIG:
            continue
        lines = sorted({node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
                        if _names_a_variable(node)})
        found += [f"{path.relative_to(root.parent)}:{line}" for line in lines]
    return found


def test_only_config_reads_mzflow_variables() -> None:
    assert side_channels(PACKAGE) == []


def test_the_side_channel_check_sees_a_read(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "ok.py").write_text('"""Set MZFLOW_HOME to move it."""\nHINT = "see MZFLOW_X"\n')
    assert side_channels(pkg) == []
    (pkg / "bad.py").write_text('import os\nA = os.environ.get("MZFLOW_SPARK_MASTER")\n'
                                'B = os.getenv(f"MZFLOW_{1}")\n')
    assert side_channels(pkg) == ["pkg/bad.py:2", "pkg/bad.py:3"]
