"""``mzflow airflow init``: the one DAG file Airflow needs, written into its dags
folder. Everything else comes with ``pip install mzflow[airflow]``: the provider and
the plugin are entry points (pyproject.toml), the DAGs follow the catalog."""

from __future__ import annotations

import os
from pathlib import Path

FILE_NAME = "mzflow_catalog.py"

# The loader's text: kept in sync with dags/mzflow_catalog.py (tests compare them).
DAG_FILE = '''"""Airflow DAGs generated from the mzflow catalog (written by `mzflow airflow init`).

The DAGs follow the catalog at each parse; nothing to edit here. The home comes from
MZFLOW_HOME / MZFLOW_CONFIG / conf/mzflow.toml, as for the CLI.
"""

from mzflow.airflow.dags import load

globals().update(load())
'''


def dags_folder(given: str | None = None) -> Path:
    """The flag, else Airflow's own setting (AIRFLOW__CORE__DAGS_FOLDER, airflow.cfg
    under AIRFLOW_HOME, its default $AIRFLOW_HOME/dags)."""
    if given:
        return Path(given).expanduser().resolve()
    if os.environ.get("AIRFLOW__CORE__DAGS_FOLDER"):
        return Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).expanduser().resolve()
    from airflow.configuration import conf

    return Path(conf.get("core", "dags_folder")).expanduser().resolve()


def write_dag_file(folder: Path) -> tuple[Path, bool]:
    """``(path, changed)``: written only when missing or different, so re-running
    ``init`` does not make the dag-processor re-parse an unchanged file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE_NAME
    if path.exists() and path.read_text() == DAG_FILE:
        return path, False
    path.write_text(DAG_FILE)
    return path, True


def plugin_copies(folder: str | None = None) -> list[Path]:
    """Copies of mzflow's plugin in Airflow's plugins folder (the by-hand install
    before the entry point). With the package installed, Airflow loads the plugin twice,
    and Airflow 3.3 stops registering entry-point plugins at the first name it meets
    twice: every plugin after it (OpenLineage's listener among them) is silently dropped."""
    if folder is None:
        folder = os.environ.get("AIRFLOW__CORE__PLUGINS_FOLDER")
    if folder is None:
        from airflow.configuration import conf

        folder = conf.get("core", "plugins_folder")
    root = Path(folder).expanduser()
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.py")
                  if "mzflow.airflow.plugin" in p.read_text(errors="replace"))
