"""ALTER DEFAULT PRIVILEGES: record (or remove) privileges that objects created later get
(catalog/default_privileges.py applies them). Who may run it is session/access.py's
business: a superuser, or the creator role itself for FOR ROLE."""

from __future__ import annotations

from mzflow.catalog import default_privileges as dp
from mzflow.catalog import names, privileges, roles
from mzflow.catalog.ddl.core import Notices
from mzflow.catalog.ddl.roles import _grantee, _role
from mzflow.catalog.model import DATABASE, DefaultPrivilege, Snapshot
from mzflow.catalog.store import Store
from mzflow.errors import InvalidGrant, InvalidOption, UnknownObject, Unsupported
from mzflow.sql import ast


def alter_default_privileges(store: Store, stmt: ast.AlterDefaultPrivileges) -> Notices:
    kind = stmt.args["kind"]
    object_type = dp.OBJECT_TYPES[kind]
    if object_type not in dp.SUPPORTED:
        raise Unsupported(f"ALTER DEFAULT PRIVILEGES ON {kind}: mzflow has no "
                          f"{kind.lower()}")
    letters = _letters(stmt.args.get("privileges"), object_type)
    revoke = bool(stmt.args.get("revoke"))
    with store.write() as w:
        snap = w.snapshot
        creators = [_role(snap, r.name).id for r in stmt.args.get("roles") or []] or [
            roles.PUBLIC_ID]
        grantees = [_grantee(snap, g) for g in stmt.args["grantees"]]
        for database_id, schema_id in _scopes(snap, stmt, kind):
            for creator in creators:
                for grantee in grantees:
                    key = DefaultPrivilege(creator, database_id, schema_id, object_type,
                                           grantee, "")
                    now = dp.held(snap, key)
                    after = ("".join(c for c in now if c not in letters) if revoke
                             else now + letters)
                    dp.store(w.conn, key, after)
                    w.dirty = True
    return []


def _letters(names_: list[str] | None, object_type: str) -> str:
    """Privilege names (None: ALL) as letters; one the object type lacks is refused as
    Materialize refuses it."""
    allowed = dp.APPLICABLE[object_type]
    if names_ is None:
        return allowed
    wrong = [n for n in names_ if privileges.LETTERS.get(n, "?") not in allowed]
    if wrong:
        raise InvalidGrant(f"invalid privilege types {', '.join(wrong)} for "
                           f"{object_type.upper()}")
    return "".join(privileges.LETTERS[n] for n in names_)


def _scopes(snap: Snapshot, stmt: ast.AlterDefaultPrivileges, kind: str
            ) -> list[tuple[str | None, str | None]]:
    """(database_id, schema_id) of each scope named; (None, None): everywhere."""
    schemas = stmt.args.get("schemas") or []
    databases = stmt.args.get("databases") or []
    if schemas and kind in ("DATABASES", "SCHEMAS", "CLUSTERS"):
        raise InvalidOption(f"cannot specify {kind} and IN SCHEMA at the same time")
    if databases and kind in ("DATABASES", "CLUSTERS"):
        raise InvalidOption(f"cannot specify {kind} and IN DATABASE at the same time")
    if schemas:
        return [(roles.DATABASE_ID, names.schema_id(snap, names.require_schema(
            snap, s.db or None, s.name))) for s in schemas]
    out: list[tuple[str | None, str | None]] = []
    for database in databases:
        if database.name != DATABASE:
            raise UnknownObject(f"unknown database '{database.name}'")
        out.append((roles.DATABASE_ID, None))
    return out or [(None, None)]
