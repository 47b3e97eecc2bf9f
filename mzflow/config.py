"""Where things live: the home folder, the catalog URL, the Spark master.

Precedence, strongest first: explicit arguments, ``MZFLOW_*`` environment
variables, the project's ``conf/mzflow.toml`` (or ``$MZFLOW_CONFIG``), then the
defaults shipped in ``mzflow/conf/defaults.toml``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

_DEFAULTS = Path(__file__).parent / "conf" / "defaults.toml"


@dataclass(frozen=True)
class Config:
    home: Path
    catalog_url: str
    spark_master: str
    # When set, CREATE/ALTER/DROP CLUSTER also sync this Airflow home's pools.
    airflow_home: Path | None = None

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"


def _read(path: Path) -> dict[str, object]:
    with path.open("rb") as f:
        data = tomllib.load(f)
    for key in ("home", "airflow_home"):
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


def load(home: str | os.PathLike[str] | None = None, catalog_url: str | None = None) -> Config:
    data = _read(_DEFAULTS)
    project = project_config_path()
    if project is not None:
        data.update(_read(project))
    env_home = os.environ.get("MZFLOW_HOME")
    resolved_home = Path(home or env_home or str(data["home"])).expanduser().resolve()
    url = catalog_url or os.environ.get("MZFLOW_CATALOG_URL") or str(data.get("catalog_url") or "")
    if not url:
        url = f"sqlite:///{resolved_home / 'catalog.db'}"
    master = os.environ.get("MZFLOW_SPARK_MASTER") or str(data.get("spark_master") or "local[*]")
    airflow = os.environ.get("MZFLOW_AIRFLOW_HOME", str(data.get("airflow_home") or ""))
    return Config(home=resolved_home, catalog_url=url, spark_master=master,
                  airflow_home=Path(airflow).expanduser().resolve() if airflow else None)
