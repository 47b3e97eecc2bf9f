"""``mzflow_spark``: the Airflow connection that says where ticks run their Spark.

Its type is ``mzflow`` (the provider's connection type, provider.py): the host is the
Spark master or Spark Connect URL, the extras ``home`` and ``catalog_url`` name the
catalog. A connection of the apache-spark provider's types, made before mzflow had
its own, keeps working under the same id, as do its conventions:

- conn type ``spark``: host ``local[*]``, ``yarn``, ``spark://host`` or a bare host
  (read as ``spark://host``), port appended (``spark://host:7077``);
- conn type ``spark_connect``, or a host starting with ``sc://``: a Spark Connect
  endpoint ``sc://host:port`` (default port 15002) with the ``user_id``, ``token`` and
  ``use_ssl`` extras as URL parameters.

No connection means the mzflow configuration decides (``spark_master``, default
``local[*]``). The connection is read in the worker only, never at parse time.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

CONN_ID = "mzflow_spark"
SPARK_CONNECT_PORT = 15002


class MzflowHook(BaseHook):
    conn_name_attr = "conn_id"
    default_conn_name = CONN_ID
    conn_type = "mzflow"
    hook_name = "mzflow"

    def __init__(self, conn_id: str = CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id

    def master(self) -> str | None:
        """The Spark master URL, or None when the connection is not defined."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            return None
        return master_url(conn.conn_type or "mzflow", conn.host or "", conn.port,
                          conn.extra_dejson)

    def catalog(self) -> tuple[str | None, str | None]:
        """The connection's ``(home, catalog_url)`` extras; ``(None, None)`` without one."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            extra = self.get_connection(self.conn_id).extra_dejson
        except AirflowNotFoundException:
            return None, None
        return extra.get("home") or None, extra.get("catalog_url") or None


# The name it had while it borrowed the ``spark`` type; DAG files may import it.
MzflowSparkHook = MzflowHook


def master_url(conn_type: str, host: str, port: int | None,
               extra: dict[str, Any]) -> str:
    """Pure, so the conventions are testable without Airflow's connection store."""
    if conn_type == "spark_connect" or host.startswith("sc://"):
        base = host if host.startswith("sc://") else f"sc://{host}"
        url = f"{base}:{port or SPARK_CONNECT_PORT}"
        params = [f"{k}={extra[k]}" for k in ("user_id", "token") if extra.get(k)]
        if str(extra.get("use_ssl", "")).lower() in ("true", "1"):
            params.append("use_ssl=true")
        return url + "".join(f"/;{p}" if i == 0 else f";{p}" for i, p in enumerate(params))
    if not host:
        return "local[*]"
    if "://" not in host and not host.startswith(("local", "yarn", "k8s")):
        host = f"spark://{host}"
    return f"{host}:{port}" if port else host
