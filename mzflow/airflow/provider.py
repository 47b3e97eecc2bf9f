"""mzflow as an Airflow provider: what ``ProvidersManager`` reads from the
``apache_airflow_provider`` entry point (pyproject.toml), without importing the hook.

Airflow 3 takes the connection form from ``conn-fields`` and ``ui-field-behaviour``
here (a hook's ``get_connection_form_widgets`` is the deprecated way). Each conn-field
is stored in the connection's extra under its name.
"""

from __future__ import annotations

from typing import Any

from mzflow import __version__

_MOD = "mzflow.airflow"


def get_provider_info() -> dict[str, Any]:
    integration = "mzflow"
    return {
        # Airflow checks it against the distribution that declares the entry point.
        "package-name": "mzflow",
        "name": "mzflow",
        "description": "Materialize-style maintained SQL views on Spark and Delta Lake, "
                       "scheduled by Airflow (version " + __version__ + ")",
        "integrations": [{"integration-name": integration,
                          "how-to-guide": ["docs/airflow.md"], "tags": ["software"]}],
        "operators": [{"integration-name": integration,
                       "python-modules": [f"{_MOD}.operators"]}],
        "hooks": [{"integration-name": integration, "python-modules": [f"{_MOD}.hooks"]}],
        "connection-types": [{
            "connection-type": "mzflow",
            "hook-class-name": f"{_MOD}.hooks.MzflowHook",
            "hook-name": "mzflow",
            "conn-fields": {
                "home": {"label": "mzflow home",
                         "description": "The home folder (catalog, warehouse); empty: "
                                        "MZFLOW_HOME or conf/mzflow.toml",
                         "schema": {"type": ["string", "null"]}},
                "catalog_url": {"label": "Catalog URL",
                                "description": "SQLAlchemy URL of a shared catalog, e.g. "
                                               "postgresql://user@host/db",
                                "schema": {"type": ["string", "null"]}},
            },
            "ui-field-behaviour": {
                "hidden-fields": ["schema", "login", "password", "extra"],
                "relabeling": {"host": "Spark master or Spark Connect URL"},
                "placeholders": {"host": "local[*], spark://host, yarn or sc://host",
                                 "port": "7077 (Spark) or 15002 (Spark Connect)",
                                 "home": "/srv/mzflow",
                                 "catalog_url": "postgresql://mzflow@db/mzflow"},
            },
        }],
        "asset-uris": [_asset_uris()],
        # Airflow 2's name for the same; Airflow 3.x still reads both.
        "dataset-uris": [_asset_uris()],
        # The plugin is registered by the ``airflow.plugins`` entry point instead:
        # listed here too, Airflow would load it twice.
    }


def _asset_uris() -> dict[str, Any]:
    return {"schemes": ["mzflow"], "handler": f"{_MOD}.uris.sanitize_uri",
            "factory": f"{_MOD}.uris.create_asset",
            "to_openlineage_converter": f"{_MOD}.uris.convert_asset_to_openlineage"}
