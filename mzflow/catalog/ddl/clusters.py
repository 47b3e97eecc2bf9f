"""CREATE CLUSTER and ALTER CLUSTER (DROP CLUSTER is in :mod:`.drops`)."""

from __future__ import annotations

from sqlglot import exp

from mzflow.catalog import sizes
from mzflow.catalog.ddl.core import Notices
from mzflow.catalog.model import Cluster
from mzflow.catalog.store import Store
from mzflow.errors import DuplicateObject, InvalidOption, Unsupported
from mzflow.sql import ast


def _cluster_options(options: list[ast.Option]) -> tuple[bool, str | None]:
    seen: set[str] = set()
    virtual, size = False, None
    for opt in options:
        name = opt.name
        if name in seen:
            raise InvalidOption(f"{name} specified more than once")
        seen.add(name)
        value = opt.args.get("value")
        if name == "VIRTUAL":
            virtual = True
        elif name == "SIZE":
            if not isinstance(value, exp.Literal) or not value.is_string:
                raise InvalidOption("SIZE must be a string, such as SIZE 'small'")
            size = sizes.lookup(value.name).name
        elif name == "REPLICAS":
            raise Unsupported("cluster replicas are not supported: a cluster is one Airflow "
                              "pool; use SIZE to scale it")
        else:
            raise InvalidOption(f'unexpected cluster option "{name}"',
                                hint="valid options are VIRTUAL and SIZE")
    if virtual and size is not None:
        raise InvalidOption("only one of VIRTUAL, REMOTE, and SIZE may be specified")
    return virtual, size


def create_cluster(store: Store, stmt: ast.CreateCluster) -> Notices:
    name = stmt.this.name
    virtual, size = _cluster_options(stmt.args.get("options") or [])
    with store.write() as w:
        if w.snapshot.find_cluster(name):
            raise DuplicateObject(f"cluster '{name}' already exists")
        w.insert_cluster(Cluster(id=w.next_id("cluster"), name=name, virtual=virtual, size=size))
    return []


def alter_cluster(store: Store, stmt: ast.AlterCluster) -> Notices:
    virtual, size = _cluster_options(stmt.args.get("options") or [])
    with store.write() as w:
        cluster = w.snapshot.cluster_by_name(stmt.this.name)
        w.update_cluster(Cluster(id=cluster.id, name=cluster.name, virtual=virtual, size=size))
    return []
