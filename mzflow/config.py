"""Where things live: the home folder, the catalog URL, the Spark master.

Precedence, strongest first: explicit arguments, ``MZFLOW_*`` environment
variables, the project's ``conf/mzflow.toml`` (or ``$MZFLOW_CONFIG``), then the
defaults shipped in ``mzflow/conf/defaults.toml``.

This is the only module that reads ``MZFLOW_*`` variables and the TOML files
(tests/test_config_surface.py checks it): everything else is handed a ``Config``, its
``SparkSettings`` or its ``Tuning``, and a parent passes configuration on to a child
process with :func:`child_environment`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mzflow.errors import InvalidOption

_DEFAULTS = Path(__file__).parent / "conf" / "defaults.toml"


@dataclass(frozen=True)
class Config:
    home: Path
    catalog_url: str
    spark_master: str
    # When set, CREATE/ALTER/DROP CLUSTER also sync this Airflow home's pools.
    airflow_home: Path | None = None
    # "managed": a SIZEd cluster's ticks run on its own warm Spark Connect server
    # (clusters/servers.py); "in-process": on the process's Spark.
    cluster_spark: str = "managed"
    cluster_idle_seconds: float = 900.0
    # Where the machine's warm cluster processes are listed (clusters/budget.py); None:
    # the default (budget.registry_folder).
    warm_registry: Path | None = None
    # A read hold (read/holds.py) lapses this long after its holder last renewed it;
    # a live holder renews it every third of that.
    read_hold_lease_seconds: float = 60.0
    # The driver JVM's heap when mzflow starts Spark itself ("6g"); None: sized to the
    # machine (engine/spark/runtime.py).
    spark_driver_memory: str | None = None

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    @property
    def spark_settings(self) -> SparkSettings:
        return SparkSettings(self.spark_master, self.spark_driver_memory)


@dataclass(frozen=True)
class SparkSettings:
    """What the process's own Spark starts with (engine/spark/runtime.py)."""

    master: str = "local[*]"
    driver_memory: str | None = None  # a JVM size ("6g"); None: sized to the machine


def _read(path: Path) -> dict[str, object]:
    with path.open("rb") as f:
        data = tomllib.load(f)
    for key in ("home", "airflow_home", "warm_registry"):
        value = data.get(key)
        if isinstance(value, str) and value:
            p = Path(value).expanduser()
            data[key] = str(p if p.is_absolute() else (path.parent / p).resolve())
    return data


def project_config_path() -> Path | None:
    env = os.environ.get("MZFLOW_CONFIG")
    if env:
        return Path(env)
    local = Path.cwd() / "conf" / "mzflow.toml"
    return local if local.exists() else None


def _files() -> dict[str, object]:
    """The defaults, under the project's file."""
    data = _read(_DEFAULTS)
    project = project_config_path()
    if project is not None:
        data.update(_read(project))
    return data


def load(home: str | os.PathLike[str] | None = None, catalog_url: str | None = None, *,
         spark_master: str | None = None) -> Config:
    """The configuration; ``spark_master`` overrides the files' and the environment's
    (Airflow's ``mzflow_spark`` connection)."""
    data = _files()
    env_home = os.environ.get("MZFLOW_HOME")
    given_home = str(home or env_home or str(data["home"]))
    if "://" in given_home:
        # Path() would make "s3://b/h" a local folder named "s3:" under the cwd.
        raise InvalidOption(f'mzflow\'s home must be a local or shared-disk path, not '
                            f'"{given_home}"', hint="the warehouse cannot be in object storage "
                            "yet: docs/object-storage.md; landing folders can (COPY FROM "
                            "'s3://…')")
    resolved_home = Path(given_home).expanduser().resolve()
    url = catalog_url or os.environ.get("MZFLOW_CATALOG_URL") or str(data.get("catalog_url") or "")
    if not url:
        url = f"sqlite:///{resolved_home / 'catalog.db'}"
    spark = _spark(data, spark_master)
    airflow = os.environ.get("MZFLOW_AIRFLOW_HOME", str(data.get("airflow_home") or ""))
    cluster_spark = os.environ.get("MZFLOW_CLUSTER_SPARK") or str(
        data.get("cluster_spark") or "managed")
    if cluster_spark not in ("managed", "in-process"):
        raise InvalidOption(f'cluster_spark must be "managed" or "in-process", not '
                            f'"{cluster_spark}"')
    registry = os.environ.get("MZFLOW_WARM_REGISTRY") or str(data.get("warm_registry") or "")
    return Config(home=resolved_home, catalog_url=url, spark_master=spark.master,
                  airflow_home=Path(airflow).expanduser().resolve() if airflow else None,
                  cluster_spark=cluster_spark,
                  warm_registry=Path(registry).expanduser().resolve() if registry else None,
                  cluster_idle_seconds=_seconds(data, "cluster_idle_seconds", 900),
                  read_hold_lease_seconds=_seconds(data, "read_hold_lease_seconds", 60),
                  spark_driver_memory=spark.driver_memory)


def spark_settings() -> SparkSettings:
    """The Spark settings of a process that opened no connection (a test, a benchmark):
    the same layers as :func:`load`'s."""
    return _spark(_files(), None)


def _spark(data: Mapping[str, object], master: str | None) -> SparkSettings:
    return SparkSettings(
        master=master or os.environ.get("MZFLOW_SPARK_MASTER")
        or str(data.get("spark_master") or "local[*]"),
        # Not a key of the files (yet): the environment only, as before.
        driver_memory=os.environ.get("MZFLOW_SPARK_DRIVER_MEMORY") or None)


def child_environment(base: Mapping[str, str], **keys: str | None) -> dict[str, str]:
    """``base`` (a process's environment) for a child process, with the variable of each
    configuration key in ``keys`` set to its value, or removed where it is None: how a
    parent passes its configuration on (``cluster_spark="managed"``)."""
    env = dict(base)
    for key, value in keys.items():
        name = f"MZFLOW_{key.upper()}"
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _seconds(data: dict[str, object], name: str, default: float) -> float:
    """``MZFLOW_<NAME>``, else the config files' value, else ``default``."""
    value = os.environ.get(f"MZFLOW_{name.upper()}") or data.get(name) or default
    try:
        seconds = float(str(value))
    except ValueError:
        raise InvalidOption(f"{name} must be a number, not {value!r}") from None
    if seconds <= 0:
        raise InvalidOption(f"{name} must be positive, not {value!r}")
    return seconds


# -- tuning ------------------------------------------------------------------------------
# Every threshold that trades one cost for another lives here, and nowhere else: a
# module that needs one takes it as a parameter. Strongest first: MZFLOW_<NAME> in the
# environment (for a process), ALTER SYSTEM SET <name> (stored in the catalog, for every
# process of the installation), the [tuning] table of conf/mzflow.toml, the default.


@dataclass(frozen=True)
class Tuning:
    recompute_share: float = field(default=0.25, metadata={"doc": (
        "A delta-mode batch above this share of its inputs' rows is recomputed (R010); "
        "1 or more turns the run-time cost switches off.")})
    join_recompute_share: float = field(default=0.01, metadata={"doc": (
        "A batch above this share of its inputs' rows is recomputed when the view joins "
        "tables (R010), in delta and state mode alike: each changed row is looked up "
        "in the other inputs, and at TPC-H SF 1 that cost more than a recompute from "
        "about 0.5 % of the inputs (Q3, Q5, Q18). It is the switch's prior, for ticks "
        "without a measured history.")})
    measure_every: int = field(default=50, metadata={"doc": (
        "Ticks between measurements of what recomputing an index costs (R014).")})
    probe_every: int = field(default=20, metadata={"doc": (
        "After this many measured recomputes in a row (R013), a tick tries incremental "
        "again.")})
    history_ticks: int = field(default=50, metadata={"doc": (
        "How many of an index's latest tick commits the cost switch reads.")})
    collect_limit: int = field(default=100_000, metadata={"doc": (
        "Affected keys collected to the driver to prune files; above it a key "
        "restriction is a Spark semi-join without pruning.")})
    isin_limit: int = field(default=2_000, metadata={"doc": (
        "Key values also pushed into the Parquet scan as an IN list (row-group "
        "skipping).")})
    arrow_diff_rows: int = field(default=1_000_000, metadata={"doc": (
        "Indexes up to this many rows are compared with a tick's result in Arrow on the "
        "driver; larger ones by a Spark join.")})
    file_size: int = field(default=16 * 1024 * 1024, metadata={"doc": (
        "Target size in bytes of the Parquet files a table write produces.")})
    arrangements: int = field(default=1, metadata={"doc": (
        "1: delta joins look up changed keys in arrangements (kept per cluster, sorted "
        "by join key); 0: they read the tables, pruned by file statistics.")})
    arrangement_group_rows: int = field(default=256, metadata={"doc": (
        "Rows per Parquet row group in an arrangement: a key lookup reads whole row "
        "groups, so smaller ones read less per scattered key and cost more metadata.")})
    lookup_rows: int = field(default=1_000_000, metadata={"doc": (
        "An arrangement lookup whose row groups hold more rows than this reads the "
        "table through Spark instead of bringing the rows to the driver.")})
    hot_arrangements: int = field(default=1, metadata={"doc": (
        "1: a process that ticks a cluster keeps its arrangements in memory (hydrated on "
        "its first tick, then kept up with each batch); 0: lookups read the Delta-backed "
        "arrangements.")})
    hot_memory_share: float = field(default=0.5, metadata={"doc": (
        "The share of the cluster's SIZE memory its in-memory arrangements may take in "
        "one process; a table that would not fit keeps the Delta-backed lookups.")})
    tick_executor: str = field(default="auto", metadata={
        "choices": ("auto", "spark", "local"), "doc": (
        "Where incremental ticks run: 'auto' runs a small batch in process (Arrow) and a "
        "large one on Spark; 'spark' always Spark; 'local' in process whenever it can "
        "(tests of that path).")})
    # TPC-H at SF 1, a 10 % batch (1.5 M change rows, a fifth of the join views'
    # inputs): in process Q3 took 1.8 s and Q18 2.5 s against recomputes of 2.2 s and
    # 3.8 s, where the state rebuilds on Spark took 2.9 s and 4.3 s (issue 34).
    local_tick_rows: int = field(default=3_000_000, metadata={"doc": (
        "'auto' runs a tick in process when its batch has at most this many change rows.")})
    local_join_recompute_share: float = field(default=0.25, metadata={"doc": (
        "join_recompute_share for a tick that runs in process, where a lookup costs "
        "microseconds rather than a share of a Spark job.")})
    # TPC-H at SF 1 (7.7 M input rows): the five bench views hydrated in 15.6 s in
    # process against 35.6 s on their cluster's Spark (issue 34).
    local_rebuild_rows: int = field(default=10_000_000, metadata={"doc": (
        "A state rebuild (a GROUP BY view's first tick, or after a recompute) whose "
        "inputs hold at most this many rows runs in process, reading them whole; "
        "0: always on Spark.")})
    local_read_rows: int = field(default=2_000_000, metadata={"doc": (
        "An in-process tick that would read more rows than this from a table's files "
        "(no arrangement serves the lookup) runs on Spark instead.")})
    local_read_max_rows: int = field(default=100_000, metadata={"doc": (
        "A SELECT whose user tables hold at most this many rows together (their Delta "
        "logs' counts) is answered in process when it can be exactly, else on Spark; "
        "0: always Spark.")})
    copy_batch_files: int = field(default=1000, metadata={"doc": (
        "A landing-folder COPY commits up to this many files as one Delta commit (each "
        "file still loads exactly once; a table with expectations loads file by file).")})
    copy_batch_bytes: int = field(default=256 * 1024 * 1024, metadata={"doc": (
        "... and up to this many bytes of files (the batch is read into memory first).")})
    plan_cache: int = field(default=256, metadata={"doc": (
        "Change plans kept per process (planning a definition costs ~0.15 s).")})
    topk_margin: int = field(default=100, metadata={"doc": (
        "Groups a top-k over a kept GROUP BY keeps ranked beyond its OFFSET + LIMIT: a "
        "tick re-ranks only these and the groups it changed, until changes use the "
        "margin up (then every group, once). Past 1000 in all, none are kept.")})

    index_hold_lease_seconds: int = field(default=86_400, metadata={"doc": (
        "An index holds its inputs' history from the time its next tick starts at, and "
        "each tick renews that hold for this long: an index not ticked for longer lets "
        "compaction pass it, and its next tick recomputes (R016).")})
    write_retries: int = field(default=3, metadata={"doc": (
        "UPDATE, DELETE and INSERT … SELECT compute their rows before taking the catalog's "
        "write lock; "
        "when a write to a table they read commits meanwhile, they compute again, up to "
        "this many times in all, then once under the lock (0: always under the lock).")})
    staged_write_min_rows: int = field(default=100_000, metadata={"doc": (
        "An UPDATE or DELETE of at least this many rows writes its files, and the rows "
        "it changes for the change feed, before the write lock and only commits them "
        "under it; a smaller one merges under the lock. 0: every one.")})

    max_projections_per_table: int = field(default=8, metadata={"doc": (
        "Projections one table may have: every write to the table computes each of "
        "them, so each one adds to what a write costs.")})
    tick_timeout: int = field(default=1800, metadata={"doc": (
        "Seconds a tick of one index may take, waiting for its lock included: then its "
        "Spark work is cancelled, it fails naming this limit with nothing committed, and "
        "its lock is free for the next tick. 0: no limit.")})
    warm_memory_budget: str = field(default="auto", metadata={"kind": "bytes", "doc": (
        "The memory every warm cluster process of this user on the machine may declare "
        "together (each cluster's Spark server heap and overhead, and its tick service "
        "with its hot arrangements), across all homes: a cluster whose processes would "
        "not fit ticks on the shared Spark, with a notice. A size ('8GB', '512MB') or "
        "'auto': half of the machine's memory.")})
    spark_connect_timeout: int = field(default=30, metadata={"doc": (
        "Seconds a Spark Connect endpoint may take to answer a new session's first "
        "calls, and about how long its client retries an unavailable server, before the "
        "statement fails naming the endpoint (pyspark's own policy waits 10 minutes). "
        "0: no limit.")})

    def with_(self, **changes: Any) -> Tuning:
        return dataclasses.replace(self, **changes)


TUNING_FIELDS = {f.name: f for f in dataclasses.fields(Tuning)}


_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}


def parse_size(text: str) -> int | None:
    """Bytes from a size as PostgreSQL and Materialize write one ('8GB', '512 MB',
    '1024'; units of 1024); None if it is not one."""
    t = text.strip().strip("'").strip().lower().replace("_", "")
    number = t.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = t[len(number):].strip() or "b"
    try:
        value = float(number)
    except ValueError:
        return None
    if unit not in _UNITS or value < 0:
        return None
    return int(value * _UNITS[unit])


def format_size(n: int) -> str:
    """``n`` bytes in the largest unit that writes it whole ('8GB'), as SHOW prints it."""
    for unit in ("TB", "GB", "MB", "kB"):
        if n and n % _UNITS[unit.lower()] == 0:
            return f"{n // _UNITS[unit.lower()]}{unit}"
    return f"{n}B"


def tuning_value(name: str, value: str) -> float | int | str:
    """``value`` parsed as the tuning parameter ``name`` takes it; refused clearly."""
    f = TUNING_FIELDS[name]
    if f.metadata.get("kind") == "bytes":
        text = value.strip().strip("'").strip()
        if text.lower() == "auto":
            return "auto"
        size = parse_size(text)
        if size is None:
            raise InvalidOption(f'invalid value for parameter "{name}": "{value}"',
                                hint=f"{name} takes a size ('8GB', '512MB') or 'auto'")
        return format_size(size)
    choices = f.metadata.get("choices")
    if choices is not None:
        text = value.strip().strip("'").lower()
        if text not in choices:
            raise InvalidOption(f'invalid value for parameter "{name}": "{value}"',
                                hint=f"{name} is one of {', '.join(choices)}")
        return text
    kind = float if f.type in ("float", float) else int
    try:
        parsed = kind(value.replace("_", ""))
    except ValueError:
        raise InvalidOption(f'invalid value for parameter "{name}": "{value}"',
                            hint=f"{name} takes a non-negative "
                                 f"{'number' if kind is float else 'whole number'}") from None
    if parsed < 0:
        raise InvalidOption(f'invalid value for parameter "{name}": "{value}"',
                            hint=f"{name} cannot be negative")
    return parsed


def _project_tuning() -> dict[str, object]:
    path = project_config_path()
    if path is None or not path.exists():
        return {}
    section = _read(path).get("tuning") or {}
    return dict(section) if isinstance(section, dict) else {}


def tuning(settings: Mapping[str, str] | None = None) -> Tuning:
    """The tuning in force: ``settings`` are the catalog's ALTER SYSTEM SET values."""
    values: dict[str, float | int | str] = {}
    layers: list[Mapping[str, object]] = [_project_tuning(), settings or {},
                                          {n: os.environ[f"MZFLOW_{n.upper()}"]
                                           for n in TUNING_FIELDS
                                           if f"MZFLOW_{n.upper()}" in os.environ}]
    for layer in layers:
        for name, value in layer.items():
            if name in TUNING_FIELDS:
                values[name] = tuning_value(name, str(value))
    return Tuning(**values)  # type: ignore[arg-type]
