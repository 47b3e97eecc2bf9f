"""mzflow's SQL generator: sqlglot's Materialize generator plus our statements' nodes."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.generators.materialize import MaterializeGenerator

from mzflow.sql import ast


class MzGenerator(MaterializeGenerator):
    """Renders our nodes back to SQL; used for normalized ``create_sql``."""

    def option_sql(self, e: ast.Option) -> str:
        value = e.args.get("value")
        if isinstance(value, ast.Expectation):
            return self.sql(value).replace("CONSTRAINT ", "", 1).replace(" EXPECT ", " ", 1
                                                                         ).join(("EXPECT ", ""))
        return e.name if value is None else f"{e.name} = {self.sql(value)}"

    def refreshpolicy_sql(self, e: ast.RefreshPolicy) -> str:
        """Materialize's display (``REFRESH = EVERY '1 day' ALIGNED TO …`` in an option
        list), which its parser and ours read back."""
        kind = e.args["kind"]
        first = {"AT": "at", "EVERY": "interval", "ON SCHEDULE": "schedule"}.get(kind)
        out = kind if first is None else f"{kind} {self.sql(e.args[first])}"
        if e.args.get("aligned_to") is not None:
            out += f" ALIGNED TO {self.sql(e.args['aligned_to'])}"
        if e.args.get("timezone") is not None:
            out += f" TIMEZONE {self.sql(e.args['timezone'])}"
        return out

    def _options(self, e: exp.Expr, prefix: str = " WITH ") -> str:
        opts = e.args.get("options") or []
        return f"{prefix}({', '.join(self.sql(o) for o in opts)})" if opts else ""

    def _in_cluster(self, e: exp.Expr) -> str:
        cluster = e.args.get("cluster")
        return f" IN CLUSTER {self.sql(cluster)}" if cluster else ""

    def createcluster_sql(self, e: ast.CreateCluster) -> str:
        opts = e.args.get("options") or []
        return f"CREATE CLUSTER {self.sql(e.this)}" + (
            f" {', '.join(self.sql(o) for o in opts)}" if opts else "")

    def createindex_sql(self, e: ast.CreateIndex) -> str:
        head = "CREATE DEFAULT INDEX" if e.args.get("default") else "CREATE INDEX"
        if e.args.get("exists"):
            head += " IF NOT EXISTS"
        name = f" {self.sql(e.this)}" if e.this else ""
        keys = e.args.get("keys")
        key_sql = f" ({', '.join(self.sql(k) for k in keys)})" if keys else ""
        return f"{head}{name}{self._in_cluster(e)} ON {self.sql(e.args['on'])}{key_sql}" + (
            self._options(e))

    def createview_sql(self, e: ast.CreateView) -> str:
        head = "CREATE OR REPLACE" if e.args.get("replace") else "CREATE"
        head += " MATERIALIZED VIEW" if e.args.get("materialized") else " VIEW"
        if e.args.get("exists"):
            head += " IF NOT EXISTS"
        cols = e.args.get("columns")
        col_sql = f" ({', '.join(self.sql(c) for c in cols)})" if cols else ""
        return (f"{head} {self.sql(e.this)}{col_sql}{self._in_cluster(e)}{self._options(e)}"
                f" AS {self.sql(e.args['query'])}")

    def createsink_sql(self, e: ast.CreateSink) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        return (f"CREATE SINK{exists} {self.sql(e.this)}{self._in_cluster(e)} FROM "
                f"{self.sql(e.args['source'])} INTO {self.sql(e.args['into']).upper()} "
                f"{self.sql(e.args['path'])}{self._options(e)}")

    def createsource_sql(self, e: ast.CreateSource) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        opts = e.args.get("options") or []
        opt_sql = f" ({', '.join(self.sql(o) for o in opts)})" if opts else ""
        head = f"CREATE SOURCE{exists} {self.sql(e.this)}{self._in_cluster(e)} FROM "
        if e.args.get("generator") is not None:
            tail = " FOR ALL TABLES" if e.args.get("all_tables") else ""
            return f"{head}LOAD GENERATOR {self.sql(e.args['generator'])}{opt_sql}{tail}"
        cols = e.args.get("columns")
        col_sql = f" ({', '.join(self.sql(c) for c in cols)})" if cols else ""
        with_opts = e.args.get("with_options") or []
        with_sql = f" WITH ({', '.join(self.sql(o) for o in with_opts)})" if with_opts else ""
        return f"{head}FILES {self.sql(e.args['files'])}{opt_sql}{col_sql}{with_sql}"

    def createtable_sql(self, e: ast.CreateTable) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        parts = e.args.get("partition_by")
        partition = (f" PARTITION BY ({', '.join(self.sql(p) for p in parts)})"
                     if parts else "")
        return f"CREATE TABLE{exists} {self.sql(e.this)}{partition}{self._options(e)}"

    def projection_sql(self, e: ast.Projection) -> str:
        return f"PROJECTION {self.sql(e.this)} ({self.sql(e.args['query'])})"

    def alterprojection_sql(self, e: ast.AlterProjection) -> str:
        action = e.args["action"]
        exists = ""
        if e.args.get("exists"):
            exists = " IF NOT EXISTS" if action == "ADD" else " IF EXISTS"
        tail = f" ({self.sql(e.args['query'])})" if e.args.get("query") else ""
        if e.args.get("partition") is not None:
            tail += f" IN PARTITION {self.sql(e.args['partition'])}"
        return (f"ALTER TABLE {self.sql(e.this)} {action} PROJECTION{exists} "
                f"{self.sql(e.args['name'])}{tail}")

    def expectation_sql(self, e: ast.Expectation) -> str:
        if e.args.get("expression") is not None:
            body = f"({self.sql(e.args['expression'])})"
        else:
            args = ", ".join(f"{self.sql(o.this)} => {self.sql(o.args['value'])}"
                             for o in e.args.get("ge_args") or [])
            body = f"{self.sql(e.args['ge_type'])} ({args})"
        action = e.args.get("action")
        tail = f" ON VIOLATION {action}" if action else ""
        return f"CONSTRAINT {self.sql(e.this)} EXPECT {body}{tail}"

    def alterexpectation_sql(self, e: ast.AlterExpectation) -> str:
        if e.args["action"] == "ADD":
            return f"ALTER TABLE {self.sql(e.this)} ADD {self.sql(e.args['expectation'])}"
        if e.args["action"] == "SUITE":
            return (f"ALTER TABLE {self.sql(e.this)} SET (EXPECTATION SUITE = "
                    f"{self.sql(e.args['name'])})")
        exists = " IF EXISTS" if e.args.get("exists") else ""
        return f"ALTER TABLE {self.sql(e.this)} DROP CONSTRAINT{exists} {self.sql(e.args['name'])}"

    def versionadded_sql(self, e: ast.VersionAdded) -> str:
        return f"VERSION ADDED {self.sql(e.this)}"

    def versionedtable_sql(self, e: ast.VersionedTable) -> str:
        name = exp.Table(**{k: v for k, v in e.args.items()
                            if k in ("this", "db", "catalog")})
        alias = e.args.get("alias")
        alias_sql = f" AS {self.sql(alias)}" if alias else ""
        # The first relation of a parenthesized join carries the group's joins.
        joins = self.expressions(e, key="joins", sep="", flat=True)
        return (f"[{self.sql(e.args['item_id'])} AS {self.sql(name)} VERSION "
                f"{self.sql(e.args['pinned'])}]{alias_sql}{joins}")

    def asof_sql(self, e: ast.AsOf) -> str:
        least = " AT LEAST" if e.args.get("at_least") else ""
        return f"{self.sql(e.this)} AS OF{least} {self.sql(e.args['at'])}"

    def renameobject_sql(self, e: ast.RenameObject) -> str:
        return f"ALTER {e.args['kind']} {self.sql(e.this)} RENAME TO {self.sql(e.args['to'])}"

    def subscribe_sql(self, e: ast.Subscribe) -> str:
        target = e.this
        text = self.sql(target) if isinstance(target, exp.Table) else f"({self.sql(target)})"
        out = f"SUBSCRIBE {text}{self._options(e)}"
        if e.args.get("as_of") is not None:
            least = " AT LEAST" if e.args.get("at_least") else ""
            out += f" AS OF{least} {self.sql(e.args['as_of'])}"
        if e.args.get("up_to") is not None:
            out += f" UP TO {self.sql(e.args['up_to'])}"
        return out

    def explain_sql(self, e: ast.Explain) -> str:
        kind = e.args.get("kind")
        return f"EXPLAIN {kind + ' ' if kind else ''}{self.sql(e.this)}"

    def dropobjects_sql(self, e: ast.DropObjects) -> str:
        exists = " IF EXISTS" if e.args.get("exists") else ""
        cascade = " CASCADE" if e.args.get("cascade") else ""
        names = ", ".join(self.sql(n) for n in e.expressions)
        return f"DROP {e.args['kind']}{exists} {names}{cascade}"

    def swapobject_sql(self, e: ast.SwapObject) -> str:
        return f"ALTER {e.args['kind']} {self.sql(e.this)} SWAP WITH {self.sql(e.args['to'])}"

    def altercluster_sql(self, e: ast.AlterCluster) -> str:
        verb = "RESET" if e.args.get("reset") else "SET"
        return f"ALTER CLUSTER {self.sql(e.this)} {verb}{self._options(e, prefix=' ')}"

    def mz_show_sql(self, e: ast.Show) -> str:
        kind = e.args["kind"]
        if kind == "VARIABLE":
            return f"SHOW {self.sql(e.this)}"
        if kind.startswith("CREATE"):
            return f"SHOW {kind} {self.sql(e.this)}"
        parts = [f"SHOW {kind}"]
        if e.args.get("on"):
            word = "FROM" if kind in ("COLUMNS", "PROJECTIONS", "CONSTRAINTS") else "ON"
            parts.append(f"{word} {self.sql(e.args['on'])}")
        if e.args.get("schema"):
            parts.append(f"FROM {self.sql(e.args['schema'])}")
        if e.args.get("cluster"):
            parts.append(f"IN CLUSTER {self.sql(e.args['cluster'])}")
        if e.args.get("like"):
            parts.append(f"LIKE {self.sql(e.args['like'])}")
        if e.args.get("where"):
            parts.append(f"WHERE {self.sql(e.args['where'])}")
        return " ".join(parts)

    def setvariable_sql(self, e: ast.SetVariable) -> str:
        head = "ALTER SYSTEM SET" if e.args.get("system") else "SET"
        value = e.args.get("value")
        return f"{head} {self.sql(e.this)} = {self.sql(value) if value else 'DEFAULT'}"

    def resetvariable_sql(self, e: ast.ResetVariable) -> str:
        head = "ALTER SYSTEM RESET" if e.args.get("system") else "RESET"
        return f"{head} {self.sql(e.this)}"

    TRANSFORMS = {
        **MaterializeGenerator.TRANSFORMS,
        ast.Option: option_sql,
        ast.RefreshPolicy: refreshpolicy_sql,
        ast.RenameObject: renameobject_sql,
        ast.SwapObject: swapobject_sql,
        ast.Explain: explain_sql,
        ast.CreateTable: createtable_sql,
        ast.Projection: projection_sql,
        ast.AlterProjection: alterprojection_sql,
        ast.Expectation: expectation_sql,
        ast.AlterExpectation: alterexpectation_sql,
        ast.VersionAdded: versionadded_sql,
        ast.VersionedTable: versionedtable_sql,
        ast.AsOf: asof_sql,
        ast.Subscribe: subscribe_sql,
        ast.CreateCluster: createcluster_sql,
        ast.AlterCluster: altercluster_sql,
        ast.CreateIndex: createindex_sql,
        ast.CreateView: createview_sql,
        ast.CreateSink: createsink_sql,
        ast.CreateSource: createsource_sql,
        ast.DropObjects: dropobjects_sql,
        ast.Show: mz_show_sql,
        ast.SetVariable: setvariable_sql,
        ast.ResetVariable: resetvariable_sql,
    }
