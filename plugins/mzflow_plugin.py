"""Airflow finds mzflow's plugin here: a catalog view (clusters, pools, maintained
indexes, frontiers and lag) in the Airflow 3 UI. See mzflow/airflow/plugin.py."""

from mzflow.airflow.plugin import MzflowPlugin

__all__ = ["MzflowPlugin"]
