"""Airflow DAGs generated from the mzflow catalog (written by `mzflow airflow init`).

The DAGs follow the catalog at each parse; nothing to edit here. The home comes from
MZFLOW_HOME / MZFLOW_CONFIG / conf/mzflow.toml, as for the CLI.
"""

from mzflow.airflow.dags import load

globals().update(load())
