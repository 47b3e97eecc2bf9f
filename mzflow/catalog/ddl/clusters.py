"""CREATE CLUSTER and ALTER CLUSTER (DROP CLUSTER is in :mod:`.drops`).

``ALTER CLUSTER c SET (…)`` changes the options it names and keeps the others;
``ALTER CLUSTER c RESET (…)`` returns the named options to their defaults.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from sqlglot import exp

from mzflow.catalog import sizes
from mzflow.catalog.ddl.core import Notices
from mzflow.catalog.model import Cluster
from mzflow.catalog.store import Store
from mzflow.errors import DuplicateObject, InvalidOption, Unsupported
from mzflow.sql import ast

SPARK_FORM = "'sc://host:port[/;param=value…]', such as SPARK = 'sc://localhost:15002'"
_SPARK_HINT = f"SPARK takes a Spark Connect URL: {SPARK_FORM}"
# What Spark Connect's client accepts (pyspark's DefaultChannelBuilder), with the port
# required: the netloc is host:port (an IPv6 host in brackets), the path is empty or "/",
# and parameters follow "/;" as key=value pairs (values URL-quoted).
_SPARK_URL = re.compile(
    r"sc://(?P<host>\[[^\]]*\]|[^:/;?#\s]*)(?::(?P<port>[^/;?#\s]*))?(?P<rest>.*)",
    re.DOTALL)
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")
_PARAM = re.compile(r"[A-Za-z0-9_.-]+=[^;/?#=\s]*")
_VALID = "valid options are VIRTUAL, SIZE and SPARK"


def check_spark_url(url: str) -> str:
    """``url`` if it reads as a Spark Connect endpoint, else InvalidOption saying why.

    Only its form is checked: the endpoint may come up after the DDL, so connecting
    (and reporting a refused connection) is the tick's business.
    """
    def bad(why: str) -> InvalidOption:
        return InvalidOption(f"invalid SPARK '{url}': {why}", hint=_SPARK_HINT)

    m = _SPARK_URL.fullmatch(url)
    if m is None:
        raise bad("the scheme must be sc://")
    if any(ch.isspace() for ch in url):
        raise bad("a URL has no white space")
    host, port, rest = m["host"], m["port"], m["rest"]
    if not host:
        raise bad("the host is missing")
    if not _HOST.fullmatch(host):
        raise bad(f"'{host}' is not a host name")
    if not port:
        raise bad("the port is missing")
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise bad(f"the port must be a number from 1 to 65535, not '{port}'")
    if rest not in ("", "/"):
        if not rest.startswith("/;"):
            raise bad("only parameters may follow the port, after '/;'")
        for param in rest[2:].split(";"):
            if not _PARAM.fullmatch(param):
                raise bad(f"'{param}' is not a key=value parameter")
    return url


def _cluster_options(options: list[ast.Option]) -> dict[str, Any]:
    """The settings the options name, as ``Cluster`` field values."""
    seen: set[str] = set()
    settings: dict[str, Any] = {}
    for opt in options:
        name = opt.name
        if name in seen:
            raise InvalidOption(f"{name} specified more than once")
        seen.add(name)
        value = opt.args.get("value")
        if name == "VIRTUAL":
            settings.update(virtual=True, size=None)
        elif name == "SIZE":
            if not isinstance(value, exp.Literal) or not value.is_string:
                raise InvalidOption("SIZE must be a string, such as SIZE 'small'")
            settings.update(virtual=False, size=sizes.lookup(value.name).name)
        elif name == "SPARK":
            if not isinstance(value, exp.Literal) or not value.is_string:
                raise InvalidOption("SPARK must be a string, such as SPARK "
                                    "'sc://localhost:15002'", hint=_SPARK_HINT)
            settings["spark"] = check_spark_url(value.name)
        elif name == "REPLICATION FACTOR":
            # Every mzflow cluster has one replica (where its ticks run, mz_cluster_replicas):
            # 1 is what it is already (dbt-materialize's deploy_init copies it from
            # mz_clusters); another count cannot be honoured.
            if not (isinstance(value, exp.Literal) and not value.is_string
                    and value.name == "1"):
                raise Unsupported("REPLICATION FACTOR other than 1 is not supported: an "
                                  "mzflow cluster has one replica; use SIZE to scale it")
        elif name == "REPLICAS":
            raise Unsupported("cluster replicas are not supported: a cluster is one Airflow "
                              "pool; use SIZE to scale it")
        else:
            raise InvalidOption(f'unexpected cluster option "{name}"', hint=_VALID)
    if "VIRTUAL" in seen and "SIZE" in seen:
        raise InvalidOption("only one of VIRTUAL, REMOTE, and SIZE may be specified")
    if "VIRTUAL" in seen and "SPARK" in seen:
        raise InvalidOption("only one of VIRTUAL and SPARK may be specified",
                            detail="a VIRTUAL cluster shares the default Spark session; "
                                   "SPARK binds a cluster to an endpoint of its own")
    return settings


def _reset_options(options: list[ast.Option]) -> dict[str, Any]:
    """The settings RESET returns to their defaults."""
    defaults: dict[str, dict[str, Any]] = {
        "VIRTUAL": {"virtual": False}, "SIZE": {"size": None}, "SPARK": {"spark": None}}
    settings: dict[str, Any] = {}
    seen: set[str] = set()
    for opt in options:
        name = opt.name
        if name in seen:
            raise InvalidOption(f"{name} specified more than once")
        seen.add(name)
        if name not in defaults:
            raise InvalidOption(f'unexpected cluster option "{name}"', hint=_VALID)
        settings.update(defaults[name])
    return settings


def create_cluster(store: Store, stmt: ast.CreateCluster) -> Notices:
    name = stmt.this.name
    settings = _cluster_options(stmt.args.get("options") or [])
    with store.write() as w:
        if w.snapshot.find_cluster(name):
            raise DuplicateObject(f"cluster '{name}' already exists")
        w.insert_cluster(Cluster(id=w.next_id("cluster"), name=name, **settings))
    return []


def alter_cluster(store: Store, stmt: ast.AlterCluster) -> Notices:
    options = stmt.args.get("options") or []
    settings = (_reset_options(options) if stmt.args.get("reset")
                else _cluster_options(options))
    with store.write() as w:
        cluster = w.snapshot.cluster_by_name(stmt.this.name)
        merged = {**dataclasses.asdict(cluster), **settings}
        if merged["virtual"] and merged["spark"] is not None:
            # One statement changes one side; saying which keeps either from being
            # dropped silently.
            if cluster.virtual:
                raise InvalidOption(
                    f"cluster '{cluster.name}' is VIRTUAL and cannot be bound to SPARK",
                    hint=f"ALTER CLUSTER {cluster.name} RESET (VIRTUAL) first")
            raise InvalidOption(
                f"cluster '{cluster.name}' is bound to SPARK and cannot become VIRTUAL",
                hint=f"ALTER CLUSTER {cluster.name} RESET (SPARK) first")
        w.update_cluster(Cluster(**merged))
    return []
