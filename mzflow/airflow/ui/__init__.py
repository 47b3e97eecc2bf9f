"""The plugin's pages inside Airflow 3's UI: pure data (data.py), HTML (pages.py) and
Airflow's authentication (auth.py); plugin.py wires them into a FastAPI app."""
