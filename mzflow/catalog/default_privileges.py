"""Default privileges (Materialize's ``ALTER DEFAULT PRIVILEGES``): what a role gets on
each object created later, by a given creator (or any: ``FOR ALL ROLES``), in a given
schema or database (or anywhere).

They are applied once, when the object is created, as ordinary grants whose grantor is
the object's owner; changing a default later changes no object that exists (PostgreSQL
and Materialize alike). They name schemas by id, so an ``ALTER SCHEMA … SWAP`` carries
them with the schema: dbt-materialize's ``deploy_init`` copies the production schema's
defaults onto the deployment schema, and after the swap the production name has them.

mzflow has tables, views, materialized views, schemas, clusters and the database;
``TABLES`` covers the first three (as in Materialize, which counts views and sources as
tables here). It has no types, secrets or connections: defaults on those are refused.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from mzflow.catalog import migrations as m
from mzflow.catalog import roles
from mzflow.catalog.model import (
    DATABASE,
    MATERIALIZED_VIEW,
    TABLE,
    VIEW,
    DefaultPrivilege,
    Item,
    Snapshot,
)

# ON <kind> → the object type stored (Materialize's mz_default_privileges.object_type).
OBJECT_TYPES = {"TABLES": "table", "TYPES": "type", "SECRETS": "secret",
                "CONNECTIONS": "connection", "DATABASES": "database", "SCHEMAS": "schema",
                "CLUSTERS": "cluster"}
SUPPORTED = ("table", "schema", "cluster", "database")
# What each object type has privileges for (Materialize's all_object_privileges: a
# table's; a view applies only the SELECT of a TABLES default).
APPLICABLE = {"table": "arwd", "schema": "UC", "cluster": "UC", "database": "UC"}
_ITEM_TYPES = {TABLE: "table", VIEW: "table", MATERIALIZED_VIEW: "table"}
_ITEM_LETTERS = {TABLE: "arwd", VIEW: "r", MATERIALIZED_VIEW: "r"}
_LETTER_ORDER = "arwdUCRBN"


def load(conn: sa.engine.Connection) -> tuple[DefaultPrivilege, ...]:
    t = m.default_privileges
    return tuple(
        DefaultPrivilege(r.role_id, r.database_id or None, r.schema_id or None, r.object_type,
                         r.grantee, r.privileges)
        for r in conn.execute(sa.select(t).order_by(
            t.c.role_id, t.c.database_id, t.c.schema_id, t.c.object_type, t.c.grantee)))


def store(conn: sa.engine.Connection, key: DefaultPrivilege, letters: str) -> None:
    """The default ``key`` names (all but its privileges) holds exactly ``letters``."""
    t = m.default_privileges
    where = ((t.c.role_id == key.role_id) & (t.c.database_id == (key.database_id or ""))
             & (t.c.schema_id == (key.schema_id or "")) & (t.c.object_type == key.object_type)
             & (t.c.grantee == key.grantee))
    conn.execute(t.delete().where(where))
    held = "".join(c for c in _LETTER_ORDER if c in letters)
    if held:
        conn.execute(t.insert().values(
            role_id=key.role_id, database_id=key.database_id or "",
            schema_id=key.schema_id or "", object_type=key.object_type, grantee=key.grantee,
            privileges=held))


def held(snap: Snapshot, key: DefaultPrivilege) -> str:
    """The letters the default ``key`` names holds now ("" if none)."""
    return next((d.privileges for d in snap.default_privileges
                 if (d.role_id, d.database_id, d.schema_id, d.object_type, d.grantee)
                 == (key.role_id, key.database_id, key.schema_id, key.object_type,
                     key.grantee)), "")


def _applying(snap: Snapshot, object_type: str, creator: str, database_id: str | None,
              schema_id: str | None) -> dict[str, str]:
    """grantee → letters, from every default that covers a new object."""
    out: dict[str, str] = {}
    for d in snap.default_privileges:
        if d.object_type != object_type or d.role_id not in (creator, roles.PUBLIC_ID):
            continue
        if d.schema_id is not None and d.schema_id != schema_id:
            continue
        if d.database_id is not None and d.database_id != database_id:
            continue
        out[d.grantee] = out.get(d.grantee, "") + d.privileges
    return out


def apply(conn: sa.engine.Connection, snap: Snapshot, obj: tuple[str, str],
          object_type: str, creator: str, letters: str, schema_id: str | None = None,
          database_id: str | None = roles.DATABASE_ID) -> None:
    """Grant a new object what the defaults say, as its owner ``creator`` (the grantor);
    ``letters``: the privileges the object has at all."""
    for grantee, granted in _applying(snap, object_type, creator, database_id,
                                      schema_id).items():
        wanted = "".join(c for c in letters if c in granted)
        if wanted and grantee != creator:  # an owner holds everything already
            roles.set_grant(conn, obj, grantee, creator, wanted)


def apply_to_item(conn: sa.engine.Connection, snap: Snapshot, item: Item, creator: str
                  ) -> None:
    object_type = _ITEM_TYPES.get(item.kind)
    if object_type is None:  # an index or a sink has no privileges
        return
    schema = snap.schema_named(item.schema)
    apply(conn, snap, ("item", item.id), object_type, creator, _ITEM_LETTERS[item.kind],
          schema.id if schema is not None else None)


# -- the system relations -------------------------------------------------------------


def catalog_rows(snap: Snapshot) -> list[tuple[Any, ...]]:
    """mz_default_privileges: (role_id, database_id, schema_id, object_type, grantee,
    privileges), the privileges as Materialize's ACL letters."""
    return [(d.role_id, d.database_id, d.schema_id, d.object_type, d.grantee, d.privileges)
            for d in snap.default_privileges]


def show_rows(snap: Snapshot) -> list[tuple[Any, ...]]:
    """mz_show_default_privileges (and SHOW DEFAULT PRIVILEGES): one row per privilege,
    by name: (object_owner, database, schema, object_type, grantee, privilege_type)."""
    from mzflow.catalog import privileges

    schemas = {s.id: s.name for s in snap.schemas}
    out = []
    for d in snap.default_privileges:
        database = DATABASE if d.database_id is not None or d.schema_id is not None else None
        for letter in d.privileges:
            out.append((roles.name_of(snap, d.role_id), database,
                        schemas.get(d.schema_id) if d.schema_id is not None else None,
                        d.object_type, roles.name_of(snap, d.grantee),
                        privileges.NAMES[letter]))
    return sorted(out, key=lambda r: tuple("" if v is None else str(v) for v in r))
