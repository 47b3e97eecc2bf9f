"""CREATE/ALTER/DROP ROLE, GRANT and REVOKE, each one catalog transaction.

Who may run them is session/access.py's business; here: what they do. A password
becomes its SCRAM-SHA-256 verifier before anything is written (catalog/roles.py); a
verifier given as the password (PostgreSQL's pre-hashed form, as pg_dump writes it) is
kept as it is, so the password itself never needs to reach the server.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlglot import exp

from mzflow.catalog import names, roles
from mzflow.catalog import privileges as p
from mzflow.catalog.ddl.core import Notices
from mzflow.catalog.model import Role, Snapshot
from mzflow.catalog.store import Store, Writer
from mzflow.errors import (
    DependentObjects,
    DuplicateObject,
    InsufficientPrivilege,
    InvalidGrant,
    MalformedQuery,
    ObjectInUse,
    ReservedName,
    UnknownObject,
    Unsupported,
)
from mzflow.sql import ast

# A role option → the Role field it sets, and the value.
_OPTIONS = {"LOGIN": ("login", True), "NOLOGIN": ("login", False),
            "SUPERUSER": ("superuser", True), "NOSUPERUSER": ("superuser", False),
            "INHERIT": ("inherit", True), "NOINHERIT": ("inherit", False)}
_DOCS = "https://materialize.com/docs/sql/create-role/#details"


def create_role(store: Store, stmt: ast.CreateRole) -> Notices:
    name = stmt.this.name
    _check_reserved(name)
    fields, notices = _attributes(stmt.args.get("options") or [])
    with store.write() as w:
        if roles.find(w.snapshot, name) is not None:
            raise DuplicateObject(f"role '{name}' already exists")
        role = Role(id=f"u{w.next_id('role')}", oid=w.next_id("oid"), name=name, **fields)
        roles.insert(w.conn, role)
        w.dirty = True
    return notices


def alter_role(store: Store, stmt: ast.AlterRole) -> Notices:
    fields, notices = _attributes(stmt.args.get("options") or [])
    with store.write() as w:
        role = _role(w.snapshot, stmt.this.name)
        _refuse_predefined(role, "alter")
        changed = dataclasses.replace(role, **fields)
        if role.id == roles.MATERIALIZE_ID and not (changed.superuser and changed.login):
            raise InsufficientPrivilege(
                "permission denied to alter role",
                detail=f'The built-in role "{roles.MATERIALIZE}" must keep the SUPERUSER '
                       "and LOGIN attributes.")
        roles.update(w.conn, changed)
        w.dirty = True
    return notices


def drop_roles(store: Store, stmt: ast.DropRoles, current_role_id: str) -> Notices:
    notices: Notices = []
    with store.write() as w:
        doomed: list[Role] = []
        for name in (n.name for n in stmt.expressions):
            role = roles.find(w.snapshot, name)
            if role is None:
                if stmt.args.get("exists"):
                    notices.append(f'role "{name}" does not exist, skipping')
                    continue
                raise UnknownObject(f"unknown role '{name}'")
            if role.id == current_role_id:
                raise ObjectInUse("current role cannot be dropped")
            if role.id == roles.MATERIALIZE_ID:
                raise ReservedName(f'role "{name}" is built in and cannot be dropped')
            _refuse_predefined(role, "drop")
            doomed.append(role)
        _check_unused(w.snapshot, doomed)
        for role in doomed:
            roles.forget_memberships(w.conn, role.id)
            roles.delete(w.conn, role.id)
            w.dirty = True
    return notices


def _check_unused(snap: Snapshot, doomed: list[Role]) -> None:
    """Materialize refuses to drop a role that owns objects or holds (or granted)
    privileges, and says which."""
    found = {r.name: p.dependents(snap, r.id) + _defaults_of(snap, r.id) for r in doomed}
    found = {name: lines for name, lines in found.items() if lines}
    if found:
        word = "role" if len(found) == 1 else "roles"
        raise DependentObjects(
            f'{word} "{", ".join(found)}" cannot be dropped because some objects depend '
            "on it", detail="\n".join(f"{name}: {line}" for name, lines in found.items()
                                      for line in lines))


def _defaults_of(snap: Snapshot, role_id: str) -> list[str]:
    """The default privileges that name the role, as its creator or its grantee."""
    schemas = {s.id: s.name for s in snap.schemas}
    out = []
    for d in snap.default_privileges:
        if role_id not in (d.role_id, d.grantee):
            continue
        where = f" in schema {schemas.get(d.schema_id, d.schema_id)}" if d.schema_id else ""
        out.append(f"default privileges on new {d.object_type}s created by "
                   f"{roles.name_of(snap, d.role_id)}{where} for "
                   f"{roles.name_of(snap, d.grantee)}")
    return out


def _check_reserved(name: str) -> None:
    if name == "public" or name.startswith(("mz_", "pg_")):
        raise ReservedName(f'role name "{name}" is reserved')


def _refuse_predefined(role: Role, action: str) -> None:
    # PostgreSQL pins its predefined roles: "cannot drop role pg_read_server_files
    # because it is required by the database system".
    if role.id in roles.PREDEFINED_IDS:
        raise DependentObjects(f"cannot {action} role {role.name} because it is required "
                               "by the database system")


def _role(snap: Snapshot, name: str) -> Role:
    role = roles.find(snap, name)
    if role is None:
        raise UnknownObject(f"unknown role '{name}'")
    return role


def _attributes(options: list[ast.RoleOption]) -> tuple[dict[str, Any], Notices]:
    fields: dict[str, Any] = {}
    notices: Notices = []
    for opt in options:
        name = opt.name
        field, value = _OPTIONS.get(name, (None, None))
        if name == "PASSWORD":
            field = "verifier"
        if field is None:
            raise Unsupported(f"{name} attribute is not supported, for more information "
                              f"consult the documentation at {_DOCS}")
        if field in fields:
            raise MalformedQuery("conflicting or redundant options")
        if name == "NOINHERIT":
            raise Unsupported("non inherit roles not yet supported")
        if field == "verifier":
            fields[field], notice = _verifier(opt.args.get("value"))
            notices += notice
        else:
            fields[field] = value
    return fields, notices


def _verifier(value: exp.Expr | None) -> tuple[str | None, Notices]:
    if value is None or isinstance(value, exp.Null):
        return None, []
    text = value.name
    if not text:
        return None, ["empty string is not a valid password, clearing password"]
    if roles.is_verifier(text):
        return text, []
    return roles.make_verifier(text), []


# -- GRANT / REVOKE ----------------------------------------------------------------


def grant_objects(snap: Snapshot, stmt: ast.GrantPrivileges) -> list[p.Obj]:
    """The objects a GRANT or REVOKE names, resolved."""
    kind = stmt.args["kind"]
    if kind == "SYSTEM":
        return [p.SYSTEM]
    out: list[p.Obj] = []
    for target in stmt.expressions:
        if kind == "TABLE":
            out.append(p.item_object(names.resolve(snap, target)))
        elif kind == "SCHEMA":
            out.append(p.schema_object(snap, target.db or None, target.name))
        elif kind == "CLUSTER":
            out.append(p.cluster_object(snap.cluster_by_name(target.name).id))
        else:
            out.append(p.database_object(target.name))
    return out


def grant(store: Store, stmt: ast.GrantPrivileges) -> Notices:
    """GRANT adds privileges (the object's owner their grantor, as in Materialize);
    REVOKE removes them, whoever granted them."""
    if stmt.args["kind"] == "ROLE":
        return grant_membership(store, stmt)
    revoke = bool(stmt.args.get("revoke"))
    with store.write() as w:
        snap = w.snapshot
        grantees = [_grantee(snap, r) for r in stmt.args["roles"]]
        for obj in grant_objects(snap, stmt):
            letters = p.letters_of(snap, obj, stmt.args.get("privileges"))
            for grantee in grantees:
                if revoke:
                    _revoke(w, obj, grantee, letters)
                else:
                    _grant(w, obj, grantee, p.owner_of(snap, obj), letters)
    return []


def _grantee(snap: Snapshot, name: exp.Identifier) -> str:
    if name.name == "public" and not name.quoted:
        return roles.PUBLIC_ID
    return _role(snap, name.name).id


def _grant(w: Writer, obj: p.Obj, grantee: str, grantor: str, letters: str) -> None:
    held = next((g.privileges for g in w.snapshot.grants
                 if (g.object_type, g.object_id, g.grantee, g.grantor)
                 == (*obj, grantee, grantor)), "")
    roles.set_grant(w.conn, obj, grantee, grantor, held + letters)
    w.dirty = True


def _revoke(w: Writer, obj: p.Obj, grantee: str, letters: str) -> None:
    for g in w.snapshot.grants:
        if (g.object_type, g.object_id, g.grantee) == (*obj, grantee):
            roles.set_grant(w.conn, obj, grantee, g.grantor,
                            "".join(c for c in g.privileges if c not in letters))
            w.dirty = True


# -- GRANT <role> TO <member> ------------------------------------------------------------


def membership_roles(snap: Snapshot, stmt: ast.GrantPrivileges) -> list[Role]:
    """The roles a GRANT or REVOKE of membership grants (its "privileges" are names)."""
    return [_role(snap, name) for name in stmt.args["privileges"]]


def grant_membership(store: Store, stmt: ast.GrantPrivileges) -> Notices:
    """GRANT r TO m / REVOKE r FROM m, with Materialize's notices for a membership that
    already exists or does not, and PostgreSQL's and Materialize's refusal of a cycle."""
    revoke = bool(stmt.args.get("revoke"))
    notices: Notices = []
    with store.write() as w:
        snap = w.snapshot
        granted = membership_roles(snap, stmt)
        members = [_role(snap, name.name) for name in stmt.args["roles"]]
        edges = list(snap.role_members)
        for role in granted:
            for member in members:
                current = any((r, m) == (role.id, member.id) for r, m, _ in edges)
                if revoke:
                    if not current:
                        notices.append(f'role "{member.name}" is not a member of role '
                                       f'"{role.name}"')
                        continue
                    roles.remove_member(w.conn, role.id, member.id)
                    edges = [e for e in edges if (e[0], e[1]) != (role.id, member.id)]
                elif current:
                    notices.append(f'role "{member.name}" is already a member of role '
                                   f'"{role.name}"')
                    continue
                else:
                    if member.id in roles.closure(edges, role.id):
                        raise InvalidGrant(f'role "{role.name}" is a member of role '
                                           f'"{member.name}"')
                    roles.add_member(w.conn, role.id, member.id, w.owner)
                    edges.append((role.id, member.id, w.owner))
                w.dirty = True
    return notices
