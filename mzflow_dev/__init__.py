"""mzflow's development tools, shared by tests/, bench/ and scripts/.

- ``tpch``: TPC-H data (tpchgen-cli), its 22 queries, refresh batches, a DuckDB oracle.
- ``soak``: the fault-injecting soak behind ``make soak`` (see soak/README.md).
- ``pg_server``: a throwaway PostgreSQL server (the ``pg_url`` fixture).
- ``airflow_server``: a real Airflow 3 (api-server, scheduler, dag-processor).

Not part of mzflow's API: nothing under ``mzflow/`` imports it. It ships in the same
distribution so that the checkout's one editable install (``make install``) makes it
importable by every script and test, with no path manipulation.
"""
