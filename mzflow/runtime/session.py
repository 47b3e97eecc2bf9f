"""A SQL session: parse, dispatch each statement to its stage, return results.

The session owns only its variables; everything durable lives in the catalog
store, so any number of sessions (processes) may share one home.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from mzflow import config
from mzflow.catalog import ddl, system
from mzflow.catalog.bind import bind
from mzflow.catalog.model import TABLE, Snapshot
from mzflow.catalog.store import Store
from mzflow.errors import Error, InvalidOption, Unsupported
from mzflow.plan.inline import inline_views
from mzflow.render import local
from mzflow.runtime import show as show_mod
from mzflow.sql import ast
from mzflow.sql.parse import parse

ISOLATION_LEVELS = ("strict serializable", "serializable")


@dataclass
class Result:
    """What one statement returned. ``status`` is the command tag (``CREATE CLUSTER``)."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    status: str = ""
    notices: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Variable:
    default: Callable[[Snapshot], str]
    description: str
    check: Callable[[str], None] | None = None


def _check_isolation(value: str) -> None:
    if value.lower() not in ISOLATION_LEVELS:
        raise InvalidOption(f'invalid value for parameter "transaction_isolation": "{value}"',
                            hint=f"valid values are {', '.join(ISOLATION_LEVELS)}")


VARIABLES: dict[str, Variable] = {
    "cluster": Variable(lambda s: s.settings.get("cluster", "default"),
                        "Sets the current cluster (Materialize)."),
    "database": Variable(lambda s: "materialize", "Sets the current database (CockroachDB)."),
    "search_path": Variable(lambda s: "public",
                            "Sets the schema search order for names that are not "
                            "schema-qualified (PostgreSQL)."),
    "transaction_isolation": Variable(lambda s: "strict serializable",
                                      "Sets the current transaction's isolation level "
                                      "(PostgreSQL).", _check_isolation),
}
SYSTEM_VARIABLES = ("cluster",)


class Connection:
    """``conn.execute(sql)`` runs one or more statements; see :func:`mzflow.connect`."""

    def __init__(self, cfg: config.Config):
        self.config = cfg
        cfg.home.mkdir(parents=True, exist_ok=True)
        self.store = Store(cfg.catalog_url)
        self._vars: dict[str, str] = {}

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public API ------------------------------------------------------------

    def execute(self, sql: str) -> Result:
        """Run every statement in ``sql``; return the last one's result."""
        results = self.execute_all(sql)
        return results[-1] if results else Result(status="EMPTY")

    def execute_all(self, sql: str) -> list[Result]:
        return [self.execute_parsed(stmt) for stmt in parse(sql)]

    def variable(self, name: str) -> str:
        name = name.lower()
        var = VARIABLES.get(name)
        if var is None:
            raise Error(f'unrecognized configuration parameter "{name}"')
        return self._vars.get(name) or var.default(self.store.snapshot())

    # -- dispatch ----------------------------------------------------------------

    def execute_parsed(self, stmt: exp.Expr) -> Result:
        """Run one statement already parsed by :func:`mzflow.sql.parse.parse`."""
        handler = _HANDLERS.get(type(stmt))
        if handler is None:
            raise Unsupported(f"{type(stmt).__name__.upper()} statements are not supported yet")
        return handler(self, stmt)

    def _create_cluster(self, stmt: ast.CreateCluster) -> Result:
        return Result(status="CREATE CLUSTER", notices=ddl.create_cluster(self.store, stmt))

    def _alter_cluster(self, stmt: ast.AlterCluster) -> Result:
        return Result(status="ALTER CLUSTER", notices=ddl.alter_cluster(self.store, stmt))

    def _create(self, stmt: exp.Create) -> Result:
        return Result(status="CREATE TABLE", notices=ddl.create_table(self.store, stmt))

    def _create_view(self, stmt: ast.CreateView) -> Result:
        notices = ddl.create_view(self.store, stmt, self.variable("cluster"))
        kind = "MATERIALIZED VIEW" if stmt.args.get("materialized") else "VIEW"
        return Result(status=f"CREATE {kind}", notices=notices)

    def _create_index(self, stmt: ast.CreateIndex) -> Result:
        return Result(status="CREATE INDEX",
                      notices=ddl.create_index(self.store, stmt, self.variable("cluster")))

    def _create_sink(self, stmt: ast.CreateSink) -> Result:
        return Result(status="CREATE SINK",
                      notices=ddl.create_sink(self.store, stmt, self.variable("cluster")))

    def _drop(self, stmt: ast.DropObjects) -> Result:
        return Result(status=f"DROP {stmt.args['kind']}", notices=ddl.drop(self.store, stmt))

    def _alter_table(self, stmt: exp.Alter) -> Result:
        raise Unsupported("ALTER TABLE arrives with Delta-backed tables")

    def _set(self, stmt: ast.SetVariable) -> Result:
        name = stmt.this.name.lower()
        var = VARIABLES.get(name)
        if var is None:
            raise Error(f'unrecognized configuration parameter "{name}"')
        value_node = stmt.args.get("value")
        value = None if value_node is None else value_node.name
        if value is not None and var.check:
            var.check(value)
        if stmt.args.get("system"):
            if name not in SYSTEM_VARIABLES:
                raise Unsupported(f'ALTER SYSTEM SET "{name}" is not supported')
            return Result(status="ALTER SYSTEM", notices=ddl.set_system(self.store, name, value))
        if value is None:
            self._vars.pop(name, None)
        else:
            self._vars[name] = value.lower() if name == "transaction_isolation" else value
        return Result(status="SET")

    def _reset(self, stmt: ast.ResetVariable) -> Result:
        return self._set(ast.SetVariable(this=stmt.this, value=None,
                                         system=stmt.args.get("system")))

    def _show(self, stmt: ast.Show) -> Result:
        if stmt.args["kind"] == "VARIABLE":
            name = stmt.this.name.lower()
            if name == "all":
                rows: list[tuple[Any, ...]] = [
                    (n, self.variable(n), v.description) for n, v in VARIABLES.items()]
                return Result(["name", "setting", "description"], rows, "SHOW")
            return Result([name], [(self.variable(name),)], "SHOW")
        columns, rows = show_mod.show(self.store.snapshot(), stmt)
        return Result(columns, rows, status="SHOW")

    def _select(self, stmt: exp.Query) -> Result:
        snap = self.store.snapshot()
        stmt = _replace_functions(stmt, snap)
        bound = bind(snap, stmt)
        if bound.depends_on:
            # Reading user objects needs a cluster to run in (the cluster design).
            snap.cluster_by_name(self.variable("cluster"))
        query = inline_views(snap, bound.query)
        tables: dict[str, tuple[list[str], local.Rows]] = {}
        for table in query.find_all(exp.Table):
            sys_table = system.lookup(table.name)
            if sys_table is not None:
                tables[table.name] = ([c.name for c in sys_table.all_columns],
                                      sys_table.rows(snap))
            elif (item := snap.find(table.name)) is not None and item.kind == TABLE:
                raise Unsupported(f"reading table {item.qualified_name} needs the Delta storage "
                                  "layer, which is not built yet")
        rows = local.run(query, tables)
        return Result([c.name for c in bound.columns], rows, status=f"SELECT {len(rows)}")


def _replace_functions(query: exp.Query, snap: Snapshot) -> exp.Query:
    """Evaluate catalog functions up front: they are constants for one statement."""
    name = "mz_legacy_installation_id"

    def is_call(node: exp.Expr) -> bool:
        return isinstance(node, exp.Anonymous) and node.name.lower() == name

    query = query.copy()
    if isinstance(query, exp.Select):
        query.set("expressions", [exp.alias_(p, name) if is_call(p) else p
                                  for p in query.expressions])
    swapped = query.transform(
        lambda n: exp.Literal.string(snap.installation_id) if is_call(n) else n)
    assert isinstance(swapped, exp.Query)
    return swapped


_HANDLERS: dict[type, Callable[[Connection, Any], Result]] = {
    ast.CreateCluster: Connection._create_cluster,
    ast.AlterCluster: Connection._alter_cluster,
    exp.Create: Connection._create,
    ast.CreateView: Connection._create_view,
    ast.CreateIndex: Connection._create_index,
    ast.CreateSink: Connection._create_sink,
    ast.DropObjects: Connection._drop,
    exp.Alter: Connection._alter_table,
    ast.SetVariable: Connection._set,
    ast.ResetVariable: Connection._reset,
    ast.Show: Connection._show,
    exp.Select: Connection._select,
    exp.Union: Connection._select,
    exp.Except: Connection._select,
    exp.Intersect: Connection._select,
}


def connect(home: str | None = None, *, catalog_url: str | None = None) -> Connection:
    """Open a session on ``home`` (default: ``$MZFLOW_HOME``, else ``conf/``'s ``home``).

    >>> conn = connect("/tmp/mzflow-doc")              # doctest: +SKIP
    >>> conn.execute("SHOW CLUSTERS").rows             # doctest: +SKIP
    [('default',)]
    """
    return Connection(config.load(home, catalog_url))
