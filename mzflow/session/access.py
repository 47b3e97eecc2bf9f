"""What each statement needs of the session's role, checked before it runs.

Materialize's RBAC (its ``rbac.rs``, ``privilege_checks.slt``), statement by statement:
ownership first, then privileges in the order Materialize reports them (the schema's
USAGE, the object's privilege, then the cluster's USAGE). A superuser skips it all.
The rules themselves are catalog/privileges.py's; this module only maps statements to
them. Ticks, sinks' exports and Airflow's tasks run as the system: no statement, no
check.

Beyond Materialize: reading or writing server files (``COPY … FROM '<file>'``, a source
FROM FILES, a sink, an expectation suite read from a file) needs the privileges of
PostgreSQL's ``pg_read_server_files``/``pg_write_server_files``, and each path must
resolve under ``allowed_file_roots`` (session/files.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from mzflow.catalog import names, roles, system
from mzflow.catalog import privileges as p
from mzflow.catalog.bind import resolve_relation
from mzflow.catalog.ddl.core import KINDS
from mzflow.catalog.ddl.roles import grant_objects
from mzflow.catalog.model import DATABASE, Item, Snapshot
from mzflow.errors import InsufficientPrivilege
from mzflow.session import files
from mzflow.sql import ast


@dataclass(frozen=True)
class Session:
    snap: Snapshot
    role_id: str
    cluster: str  # the session's cluster variable
    places: files.Places | None = None  # None: no server path is allowed

    def server_files(self, mode: str, action: str, location: str, *,
                     pattern: str | None = None) -> None:
        """``location`` read (files.READ) or written (files.WRITE) by the server: the
        role needs the predefined role's privileges, and the path an allowed root."""
        files.require(self.snap, self.role_id, mode, action)
        if self.places is None:
            raise InsufficientPrivilege(f"permission denied to {action}",
                                        detail="This session has no server file roots.")
        files.confine(self.snap, self.places, location, pattern=pattern)

    def need(self, obj: p.Obj, letter: str) -> p.Need:
        return p.Need(self.role_id, obj, letter)

    def owner(self, obj: p.Obj) -> None:
        p.require_owner(self.snap, self.role_id, obj)

    def check(self, needs: Iterable[p.Need]) -> None:
        p.check(self.snap, needs)

    def superuser(self, action: str, why: str = "") -> None:
        p.require_superuser(self.snap, self.role_id, action, why)

    def cluster_object(self, explicit: exp.Identifier | None = None) -> p.Obj:
        name = explicit.name if explicit is not None else self.cluster
        return p.cluster_object(self.snap.cluster_by_name(name).id)


def authorize(snap: Snapshot, role_id: str, stmt: exp.Expr, cluster: str,
              places: files.Places | None = None) -> None:
    """Raise InsufficientPrivilege (42501) unless ``role_id`` may run ``stmt``;
    ``places`` locate the server's file roots (session/files.py)."""
    role = roles.by_id(snap, role_id)
    if role is None:
        raise InsufficientPrivilege(f"role {role_id} was concurrently dropped",
                                    detail="Please disconnect and re-connect with a valid "
                                           "role.")
    if role.superuser:
        return
    rule = _RULES.get(type(stmt))
    if rule is not None:
        rule(Session(snap, role_id, cluster, places), stmt)


def read_needs(session: Session, node: exp.Expr, *, cluster: bool) -> list[p.Need]:
    """Reading every relation ``node`` names, and the cluster's USAGE if it reads any."""
    items = list(relations(session.snap, node))
    needs = p.reads(session.snap, session.role_id, [i.id for i in items])
    if cluster and items:
        needs.append(session.need(session.cluster_object(), "U"))
    return needs


def relations(snap: Snapshot, node: exp.Expr) -> Iterator[Item]:
    """The catalog relations ``node`` names (as the binder resolves them), CTEs and
    system tables aside; each once."""
    ctes = {cte.alias_or_name for cte in node.find_all(exp.CTE)}
    seen: set[str] = set()
    for table in node.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier) or (
                table.name in ctes and not table.db):
            continue
        found = resolve_relation(snap, table)
        if isinstance(found, system.SystemTable) or found.id in seen:
            continue
        seen.add(found.id)
        yield found


def _schema_of(snap: Snapshot, name: exp.Table) -> p.Obj:
    """The schema a new object called ``name`` goes into (by the search path)."""
    return p.schema_object(snap, None, names.creation_schema(snap, name))


def _item(snap: Snapshot, name: exp.Table) -> Item | None:
    return names.find(snap, name)


# -- reads and writes ------------------------------------------------------------------


def _select(s: Session, stmt: exp.Expr) -> None:
    s.check(read_needs(s, stmt, cluster=True))


def _explain(s: Session, stmt: ast.Explain) -> None:
    if stmt.args.get("kind") is not None:
        item = _item(s.snap, stmt.this)
        if item is not None:
            s.check([s.need(p.item_schema(s.snap, item), "U")])
        return
    s.check(read_needs(s, stmt.this, cluster=False))


def _subscribe(s: Session, stmt: ast.Subscribe) -> None:
    target = stmt.this
    s.check(read_needs(s, target if isinstance(target, exp.Query) else exp.select("*")
                       .from_(target.copy()), cluster=True))


def _target(s: Session, name: exp.Expr, letter: str) -> list[p.Need]:
    table = name.this if isinstance(name, exp.Schema) else name
    if not isinstance(table, exp.Table):
        return []  # COPY (<query>) …: no table written
    item = resolve_relation(s.snap, table)
    if isinstance(item, system.SystemTable):
        return []  # writing a system table fails by itself
    return [s.need(p.item_schema(s.snap, item), "U"), s.need(p.item_object(item), letter)]


def _insert(s: Session, stmt: exp.Insert) -> None:
    needs = _target(s, stmt.this, "a")
    source = stmt.expression
    s.check(needs + (read_needs(s, source, cluster=True) if source is not None else []))


def _modify(letter: str) -> Callable[[Session, Any], None]:
    # Materialize asks SELECT on the table for every UPDATE and DELETE too (it reads the
    # rows to change): the table is among what the statement reads.
    def rule(s: Session, stmt: exp.Expr) -> None:
        s.check(_target(s, stmt.this, letter) + read_needs(s, stmt, cluster=True))

    return rule


# Set on the COPY that `mzflow serve` runs for a client's COPY … FROM STDIN (server/
# copy.py): its spooled file is the client's data, not a server file. No SQL text can
# set it: the parser never does.
FROM_CLIENT = "from_client"


def _copy(s: Session, stmt: exp.Copy) -> None:
    paths = [f.this for f in stmt.args.get("files") or [] if isinstance(f, exp.Literal)]
    if not stmt.args.get("kind"):  # COPY … TO: a read (TO STDOUT is an identifier)
        for path in paths:
            s.server_files(files.WRITE, "COPY to a file", path)
        s.check(read_needs(s, stmt.this, cluster=True))
        return
    if not stmt.args.get(FROM_CLIENT):
        pattern = _copy_pattern(stmt)
        for path in paths:  # FROM STDIN is an identifier
            s.server_files(files.READ, "COPY from a file", path, pattern=pattern)
    s.check(_target(s, stmt.this, "a"))


def _copy_pattern(stmt: exp.Copy) -> str | None:
    for param in stmt.args.get("params") or []:
        value = param.args.get("expression")
        if param.this.name.lower() == "pattern" and isinstance(value, exp.Literal):
            return str(value.this)
    return None


# -- DDL -------------------------------------------------------------------------------


def _create_table(s: Session, stmt: ast.CreateTable) -> None:
    s.check([s.need(_schema_of(s.snap, stmt.this.this), "C")])


def _create_view(s: Session, stmt: ast.CreateView) -> None:
    replaced = _item(s.snap, stmt.this) if stmt.args.get("replace") else None
    if replaced is not None:
        s.owner(p.item_object(replaced))
    needs = [s.need(_schema_of(s.snap, stmt.this), "C")]
    if stmt.args.get("materialized"):
        needs.append(s.need(s.cluster_object(stmt.args.get("cluster")), "C"))
    s.check(needs)


def _create_index(s: Session, stmt: ast.CreateIndex) -> None:
    on = _item(s.snap, stmt.args["on"])
    if on is None:
        return  # the DDL says it does not exist
    s.owner(p.item_object(on))
    s.check([s.need(p.item_schema(s.snap, on), "C"),
             s.need(s.cluster_object(stmt.args.get("cluster")), "C")])


def _create_source(s: Session, stmt: ast.CreateSource) -> None:
    """Materialize's: CREATE on the schema and on the cluster. A source FROM FILES
    reads the server's files on every tick, as COPY FROM a file does."""
    if stmt.args.get("generator") is None:
        from mzflow.sources.files import of

        spec = of(stmt)
        s.server_files(files.READ, "create a source from files", spec.folder,
                       pattern=spec.pattern)
    s.check([s.need(_schema_of(s.snap, stmt.this), "C"),
             s.need(s.cluster_object(stmt.args.get("cluster")), "C")])


def _create_sink(s: Session, stmt: ast.CreateSink) -> None:
    """A sink writes files with the server's access; then Materialize's: CREATE on the
    schema and the cluster, and reading what it exports."""
    s.server_files(files.WRITE, "create a sink", stmt.args["path"].name)
    s.check([s.need(_schema_of(s.snap, stmt.this), "C")]
            + read_needs(s, exp.select("*").from_(stmt.args["source"].copy()),
                         cluster=False)
            + [s.need(s.cluster_object(stmt.args.get("cluster")), "C")])


def _cluster_owner(s: Session, stmt: ast.AlterCluster) -> None:
    found = s.snap.find_cluster(stmt.this.name)
    if found is not None:
        s.owner(p.cluster_object(found.id))


def _swap(s: Session, stmt: ast.SwapObject | ast.SwapObjects) -> None:
    """Materialize's rule: the owner of both (the DDL gives the unknown-name errors)."""
    for one in stmt.expressions if isinstance(stmt, ast.SwapObjects) else [stmt]:
        for name in (one.this.name, one.args["to"].name):
            if one.args["kind"] == "CLUSTER":
                found = s.snap.find_cluster(name)
                if found is not None:
                    s.owner(p.cluster_object(found.id))
            elif s.snap.schema_named(name) is not None:
                s.owner(p.schema_object(s.snap, None, name))


def _drop(s: Session, stmt: ast.DropObjects) -> None:
    kind = stmt.args["kind"]
    for target in stmt.expressions:
        if kind == "CLUSTER":
            found = s.snap.find_cluster(target.name)
            if found is not None:
                s.owner(p.cluster_object(found.id))
            continue
        item = _item(s.snap, target)
        if item is None or item.kind != KINDS[kind]:
            continue  # the DDL's own error (or IF EXISTS notice)
        s.owner(p.item_object(item))
        s.check([s.need(p.item_schema(s.snap, item), "U")])


def _item_owner(name: Callable[[Any], exp.Expr | None]) -> Callable[[Session, Any], None]:
    def rule(s: Session, stmt: exp.Expr) -> None:
        target = name(stmt)
        item = _item(s.snap, target) if isinstance(target, exp.Table) else None
        if item is not None:
            s.owner(p.item_object(item))

    return rule


def _alter_expectation(s: Session, stmt: ast.AlterExpectation) -> None:
    _item_owner(lambda st: st.this)(s, stmt)
    if stmt.args["action"] == "SUITE":
        s.server_files(files.READ, "read an expectation suite from a file",
                       stmt.args["name"].name)


def _comment(s: Session, stmt: exp.Comment) -> None:
    target = stmt.this
    if str(stmt.args.get("kind") or "").upper() == "SCHEMA":
        s.owner(p.schema_object(s.snap, target.db or None, target.name))
        return
    if isinstance(target, exp.Column):
        table = target.args.get("table")  # an Identifier: never re-parsed as SQL text
        target = exp.Table(this=table.copy(), db=target.args.get("db")) if table else None
    _item_owner(lambda st: target)(s, stmt)


def _system_set(s: Session, stmt: ast.SetVariable | ast.ResetVariable) -> None:
    if stmt.args.get("system"):
        s.superuser("alter system")


def _show(s: Session, stmt: ast.Show) -> None:
    kind = stmt.args["kind"]
    target = stmt.args.get("on") if kind == "COLUMNS" else (
        stmt.args.get("this") if kind.startswith("CREATE ") and kind != "CREATE CLUSTER"
        else None)
    item = _item(s.snap, target) if isinstance(target, exp.Table) else None
    if item is not None:
        s.check([s.need(p.item_schema(s.snap, item), "U")])


# -- roles and privileges ------------------------------------------------------------

_SUPERUSER_ROLES = "Only roles with the SUPERUSER attribute may {} roles with the " \
    "SUPERUSER attribute."


def _create_role(s: Session, stmt: ast.CreateRole) -> None:
    s.check([s.need(p.SYSTEM, "R")])
    if any(o.name == "SUPERUSER" for o in stmt.args.get("options") or []):
        s.superuser("create role", _SUPERUSER_ROLES.format("create"))


def _alter_role(s: Session, stmt: ast.AlterRole) -> None:
    options = stmt.args.get("options") or []
    target = roles.find(s.snap, stmt.this.name)
    if target is not None and target.id == s.role_id and all(
            o.name == "PASSWORD" for o in options):
        return  # a role may change its own password (PostgreSQL)
    s.check([s.need(p.SYSTEM, "R")])
    if (target is not None and target.superuser) or any(
            o.name in ("SUPERUSER", "NOSUPERUSER") for o in options):
        s.superuser("alter role", _SUPERUSER_ROLES.format("alter"))


def _drop_roles(s: Session, stmt: ast.DropRoles) -> None:
    s.check([s.need(p.SYSTEM, "R")])
    for name in stmt.expressions:
        target = roles.find(s.snap, name.name)
        if target is not None and target.superuser:
            s.superuser("drop role", _SUPERUSER_ROLES.format("drop"))


def _grant(s: Session, stmt: ast.GrantPrivileges) -> None:
    kind = stmt.args["kind"]
    if kind == "ROLE":
        _grant_role(s, stmt)
        return
    if kind == "SYSTEM":
        s.superuser("GRANT/REVOKE SYSTEM PRIVILEGES")
        return
    objects = grant_objects(s.snap, stmt)
    for obj in objects:
        s.owner(obj)
    needs = []
    for obj in objects:
        if obj[0] == "item":
            needs.append(s.need(p.item_schema(s.snap, s.snap.item(obj[1])), "U"))
        elif obj[0] == "schema":
            needs.append(s.need(p.database_object(DATABASE), "U"))
    s.check(needs)


def _grant_role(s: Session, stmt: ast.GrantPrivileges) -> None:
    """Materialize's: membership is granted by a CREATEROLE holder. A role that is a
    superuser, or that grants server file access, only by a superuser (in PostgreSQL,
    only a superuser holds ADMIN OPTION on the predefined roles)."""
    s.check([s.need(p.SYSTEM, "R")])
    verb = "revoke" if stmt.args.get("revoke") else "grant"
    for name in stmt.args["privileges"]:
        role = roles.find(s.snap, name)
        if role is not None and (role.superuser or role.id in roles.PREDEFINED_IDS):
            s.superuser(f'{verb} role "{name}"',
                        f'Only superusers may {verb} role "{name}": it is a superuser or '
                        "reaches the server's files.")


def _alter_default_privileges(s: Session, stmt: ast.AlterDefaultPrivileges) -> None:
    """Materialize's: FOR ALL ROLES is a superuser's; FOR ROLE r needs membership in r."""
    creators = stmt.args.get("roles")
    if creators is None:
        s.superuser("ALTER DEFAULT PRIVILEGES FOR ALL ROLES")
        return
    if roles.is_superuser(s.snap, s.role_id):
        return
    for name in creators:
        role = roles.find(s.snap, name.name)
        if role is not None and role.id not in roles.memberships(s.snap, s.role_id):
            raise InsufficientPrivilege(f'must be a member of "{name.name}"')


_RULES: dict[type, Callable[[Session, Any], None]] = {
    ast.CreateRole: _create_role,
    ast.AlterRole: _alter_role,
    ast.DropRoles: _drop_roles,
    ast.GrantPrivileges: _grant,
    ast.AlterDefaultPrivileges: _alter_default_privileges,
    exp.Select: _select,
    exp.Union: _select,
    exp.Except: _select,
    exp.Intersect: _select,
    ast.AsOf: lambda s, stmt: _select(s, stmt.this),
    ast.Explain: _explain,
    ast.Subscribe: _subscribe,
    exp.Insert: _insert,
    exp.Update: _modify("w"),
    exp.Delete: _modify("d"),
    exp.Copy: _copy,
    ast.CreateTable: _create_table,
    ast.CreateView: _create_view,
    ast.CreateIndex: _create_index,
    ast.CreateSink: _create_sink,
    ast.CreateSource: _create_source,
    ast.CreateCluster: lambda s, stmt: s.check([s.need(p.SYSTEM, "N")]),
    ast.AlterCluster: _cluster_owner,
    ast.DropObjects: _drop,
    ast.RenameObject: _item_owner(lambda st: st.this),
    ast.SwapObject: _swap,
    ast.SwapObjects: _swap,
    exp.Alter: _item_owner(lambda st: st.this),
    ast.AlterProjection: _item_owner(lambda st: st.this),
    ast.AlterExpectation: _alter_expectation,
    exp.Comment: _comment,
    ast.SetVariable: _system_set,
    ast.ResetVariable: _system_set,
    ast.Show: _show,
}

