"""The one tuning surface: defaults < conf/mzflow.toml [tuning] < ALTER SYSTEM SET <
MZFLOW_<NAME>; SHOW ALL lists every threshold; bad values are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

import mzflow
from mzflow import config


def test_layers_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MZFLOW_RECOMPUTE_SHARE", raising=False)
    monkeypatch.delenv("MZFLOW_ISIN_LIMIT", raising=False)
    conf = tmp_path / "mzflow.toml"
    conf.write_text("[tuning]\nrecompute_share = 0.5\nisin_limit = 10\n")
    monkeypatch.setenv("MZFLOW_CONFIG", str(conf))
    assert config.tuning().recompute_share == 0.5
    assert config.tuning({"recompute_share": "0.75"}).recompute_share == 0.75
    assert config.tuning({"recompute_share": "0.75"}).isin_limit == 10
    monkeypatch.setenv("MZFLOW_RECOMPUTE_SHARE", "2")
    assert config.tuning({"recompute_share": "0.75"}).recompute_share == 2.0
    assert config.tuning().measure_every == config.Tuning().measure_every


def test_alter_system_set_and_show_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MZFLOW_COLLECT_LIMIT", raising=False)
    with mzflow.connect(str(tmp_path / "home")) as conn:
        shown = {r[0]: r[1] for r in conn.execute("SHOW ALL").rows}
        assert set(config.TUNING_FIELDS) <= set(shown)
        assert shown["collect_limit"] == "100000"
        conn.execute("ALTER SYSTEM SET collect_limit = 500")
        assert conn.execute("SHOW collect_limit").rows == [("500",)]
        assert config.tuning(conn.store.snapshot().settings).collect_limit == 500
        with pytest.raises(mzflow.Error, match='invalid value for parameter "collect_limit"'):
            conn.execute("ALTER SYSTEM SET collect_limit = 'lots'")
        with pytest.raises(mzflow.Error, match="can only be set with ALTER SYSTEM SET"):
            conn.execute("SET collect_limit = 5")
        conn.execute("ALTER SYSTEM RESET collect_limit")
        assert conn.execute("SHOW collect_limit").rows == [("100000",)]


def test_spark_driver_memory_is_sized_to_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    from mzflow.engine import spark

    monkeypatch.delenv("MZFLOW_SPARK_DRIVER_MEMORY", raising=False)
    size = spark.driver_memory()
    assert re.fullmatch(r"[1-8]g", size), size
    monkeypatch.setenv("MZFLOW_SPARK_DRIVER_MEMORY", "3g")
    assert spark.driver_memory() == "3g"


@pytest.mark.slow
@pytest.mark.spark
def test_the_session_runs_with_that_driver_memory() -> None:
    from mzflow.engine import spark

    conf = spark.session().sparkContext.getConf()
    assert conf.get("spark.driver.memory") == spark.driver_memory()
