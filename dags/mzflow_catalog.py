"""Airflow DAGs generated from the mzflow catalog: one DAG and one pool per cluster,
and one scheduled DAG per sink (``mzflow_sink_<name>``, in its cluster's pool).

Nothing to edit here: the DAGs follow the catalog (``CREATE MATERIALIZED VIEW … IN
CLUSTER c`` adds a task to ``mzflow_c``, ``CREATE SINK`` adds a DAG, at the next
parse). The home comes from
``MZFLOW_HOME`` / ``MZFLOW_CONFIG`` / ``conf/mzflow.toml`` as for the CLI; set it in
the environment of the dag-processor and the workers. Parsing reads the catalog only:
no Spark, no delta-rs (see mzflow/airflow/dags.py).
"""

from mzflow.airflow.dags import load

globals().update(load())
