"""DAG-as-code: declare mzflow objects inside an ordinary Airflow DAG file.

>>> from airflow.sdk import DAG, task                                  # doctest: +SKIP
>>> from mzflow.airflow.dsl import Catalog
>>> mz = Catalog()                         # the configured home, or Catalog(home="/x")
>>> with DAG("orders", schedule=None) as dag:                          # doctest: +SKIP
...     analytics = mz.cluster("analytics", size="small")
...     orders = mz.table("orders", "id bigint NOT NULL, amount int")
...     totals = mz.materialized_view(
...         "totals", "SELECT count(*) AS n, sum(amount) AS s FROM orders", analytics)
...     @task
...     def load(): ...                    # the user's own work, e.g. COPY a CSV
...     mz.deploy() >> load() >> mz.maintain(analytics)

Why declarations are applied by a task and not when the file is parsed: Airflow
parses DAG files often, in many processes, with a timeout; writing the catalog there
would race and repeat. Declaring is pure Python (no catalog access, no Spark), and
``deploy()`` is the task that creates what is missing, idempotently, at run time.

``maintain(cluster)`` is a task group: one tick per maintained
object declared in this file for that cluster (in the cluster's pool), ordered by
what reads what, the same rules as the generated DAGs (``graph.py``). Ticks are
idempotent, so an object maintained here and by the generated ``mzflow_<cluster>``
DAG is never applied twice; the pool bounds how many run at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mzflow.airflow.graph import Maintained, nearest_maintained, pool_name, safe_id, toposort
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, SINK, TABLE, VIEW, Item

_PLAIN = re.compile(r"[a-z_][a-z0-9_$]*")


def ident(name: str) -> str:
    """``name`` as a SQL identifier: bare when it would not fold, quoted otherwise."""
    return name if _PLAIN.fullmatch(name) else '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Cluster:
    name: str
    size: str | None = None
    virtual: bool = False

    @property
    def pool(self) -> str:
        return pool_name(self.name)


@dataclass(frozen=True)
class Object:
    """A declared table, view, materialized view, index or sink."""

    kind: str
    name: str
    sql: str
    reads: tuple[str, ...] = ()  # names of relations its definition reads
    cluster: str | None = None  # where it is maintained (materialized views, indexes)
    on: str | None = None  # indexes and sinks

    def __str__(self) -> str:
        return self.name


@dataclass
class Catalog:
    """Declarations for one mzflow home; see the module docstring."""

    home: str | None = None
    catalog_url: str | None = None
    clusters: dict[str, Cluster] = field(default_factory=dict)
    objects: list[Object] = field(default_factory=list)
    resolved_home: str = field(init=False, default="")

    def __post_init__(self) -> None:
        from mzflow import config

        # Resolved once, at parse time, so workers open exactly the same home.
        cfg = config.load(self.home, self.catalog_url)
        self.home = self.resolved_home = str(cfg.home)
        default = f"sqlite:///{cfg.home / 'catalog.db'}"
        self.catalog_url = None if cfg.catalog_url == default else cfg.catalog_url

    # -- declarations --------------------------------------------------------------

    def cluster(self, name: str, size: str | None = None, virtual: bool = False) -> Cluster:
        if size is not None:
            from mzflow.catalog import sizes

            sizes.lookup(size)  # an unknown size fails the parse, naming the valid ones
        c = Cluster(name, size, virtual)
        self.clusters[name] = c
        return c

    def table(self, name: str, columns: str) -> Object:
        """``columns``: the column list as in CREATE TABLE, e.g. ``"id int, name text"``."""
        return self._add(Object(TABLE, name, f"CREATE TABLE {ident(name)} ({columns})"))

    def view(self, name: str, select: str) -> Object:
        return self._add(Object(VIEW, name, f"CREATE VIEW {ident(name)} AS {select}",
                                reads=_reads(select)))

    def materialized_view(self, name: str, select: str, cluster: Cluster | str) -> Object:
        c = self._cluster(cluster)
        return self._add(Object(
            MATERIALIZED_VIEW, name,
            f"CREATE MATERIALIZED VIEW {ident(name)} IN CLUSTER {ident(c)} AS {select}",
            reads=_reads(select), cluster=c))

    def index(self, name: str, on: Object | str, columns: list[str],
              cluster: Cluster | str) -> Object:
        c, target = self._cluster(cluster), str(on)
        cols = ", ".join(ident(col) for col in columns)
        return self._add(Object(
            INDEX, name, f"CREATE INDEX {ident(name)} IN CLUSTER {ident(c)} "
                         f"ON {ident(target)} ({cols})", cluster=c, on=target))

    def sink(self, name: str, source: Object | str, cluster: Cluster | str, into: str,
             path: str, options: str = "") -> Object:
        """A sink's definition (``into``: PARQUET, CSV, JSON or DELTA). Only the catalog
        entry for now: sink exports are not built yet."""
        c, src = self._cluster(cluster), str(source)
        with_ = f" WITH ({options})" if options else ""
        return self._add(Object(
            SINK, name, f"CREATE SINK {ident(name)} IN CLUSTER {ident(c)} FROM {ident(src)} "
                        f"INTO {into} '{path}'{with_}", cluster=c, on=src))

    # -- tasks ---------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """The generated DAGs' params (full_refresh, objects, at) for a DAG's form; the
        maintenance tasks read them."""
        from mzflow.airflow.dags import params

        return params(o.name for o in self.objects if o.cluster is not None)

    def deploy(self, task_id: str = "mzflow_deploy", **kwargs: Any) -> Any:
        """The task that creates what is declared and missing (idempotent)."""
        from mzflow.airflow.operators import MzflowDeployOperator

        return MzflowDeployOperator(task_id=task_id, home=self.resolved_home,
                                    catalog_url=self.catalog_url, decls=self.decls(),
                                    **kwargs)

    def maintain(self, cluster: Cluster | str, group_id: str | None = None) -> Any:
        """A task group ticking the objects declared here for ``cluster``."""
        from airflow.sdk import TaskGroup

        from mzflow.airflow.operators import MzflowTickOperator

        name = self._cluster(cluster)
        with TaskGroup(group_id or f"maintain_{safe_id(name)}") as group:
            ops: dict[str, Any] = {}
            for t in self.plan(name):
                op = MzflowTickOperator(
                    task_id=t.task_id, index=t.index, names=sorted(t.names()),
                    home=self.resolved_home, catalog_url=self.catalog_url, pool=pool_name(name),
                    # The group's ticks share a time, recorded by the first of them:
                    # other work of the run (a load before this group) is not theirs.
                    run_scope=group.group_id or "", trigger_rule="none_failed", cluster=name)
                for u in t.upstream:
                    ops[u] >> op
                ops[t.task_id] = op
        return group

    # -- data ----------------------------------------------------------------------

    def decls(self) -> list[dict[str, Any]]:
        """What ``deploy`` applies, in order: clusters first, then objects as declared."""
        out: list[dict[str, Any]] = []
        for c in self.clusters.values():
            if c.virtual:
                sql = f"CREATE CLUSTER {ident(c.name)} VIRTUAL"
            else:
                sql = f"CREATE CLUSTER {ident(c.name)}" + (f" SIZE '{c.size}'" if c.size else "")
            out.append({"kind": "cluster", "name": c.name, "sql": sql, "size": c.size,
                        "alter_sql": f"ALTER CLUSTER {ident(c.name)} SET (SIZE '{c.size}')"})
        out += [{"kind": o.kind, "name": o.name, "sql": o.sql} for o in self.objects]
        return out

    def plan(self, cluster: str) -> list[Maintained]:
        """The cluster's tick tasks in dependency order, from the declarations alone:
        they become catalog-shaped items so ``graph.py``'s rules apply unchanged."""
        items = {o.name: _item(o) for o in self.objects}
        indexes_on: dict[str, list[Item]] = {}
        for o in self.objects:
            if o.kind in (INDEX, MATERIALIZED_VIEW) and o.cluster is not None:
                indexes_on.setdefault(o.on or o.name, []).append(items[o.name])
        tasks = []
        for o in self.objects:
            if o.cluster != cluster or o.kind not in (INDEX, MATERIALIZED_VIEW):
                continue
            target = o.on or o.name
            upstream = []
            if target in items:
                for dep in nearest_maintained(target, items, indexes_on):
                    upstream += [i.name for i in indexes_on[dep]
                                 if _cluster_of(self.objects, i.name) == cluster]
            tasks.append(Maintained(task_id=safe_id(o.name), index=o.name, on=target,
                                    asset="", upstream=tuple(safe_id(u) for u in upstream),
                                    upstream_assets=()))
        return toposort(tasks)

    def _add(self, obj: Object) -> Object:
        if any(o.name == obj.name for o in self.objects):
            raise ValueError(f"{obj.name!r} is declared twice")
        self.objects.append(obj)
        return obj

    def _cluster(self, cluster: Cluster | str) -> str:
        return cluster.name if isinstance(cluster, Cluster) else cluster


def _reads(select: str) -> tuple[str, ...]:
    """Relation names a SELECT reads (CTE names excluded), found with sqlglot."""
    from sqlglot import exp

    from mzflow.sql.parse import parse_query

    query = parse_query(select)
    ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
    return tuple(dict.fromkeys(t.name for t in query.find_all(exp.Table)
                               if t.name not in ctes))


def _item(o: Object) -> Item:
    # Item ids are the names here: declarations have no catalog ids yet. cluster_id only
    # marks "maintained somewhere" (1); the real cluster is looked up by name.
    return Item(id=o.name, global_id=o.name, name=o.name, kind=o.kind, create_sql=o.sql,
                depends_on=o.reads, on_id=o.on,
                cluster_id=1 if o.cluster is not None else None)


def _cluster_of(objects: list[Object], name: str) -> str | None:
    return next((o.cluster for o in objects if o.name == name), None)
