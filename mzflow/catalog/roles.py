"""Roles: who a session is, whether it may log in, and its password's verifier.

A password is never kept: the catalog holds its SCRAM-SHA-256 verifier in PostgreSQL's
text form (``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``, base64), made
with the ``scramp`` library, which the server (``mzflow serve``) also uses for the login
exchange. :func:`verifier` and :func:`can_login` are what the server asks.

The built-in role ``materialize`` is a superuser and exists from the start: it is the
default role of an in-process connection, as Materialize's local default user is.

Membership (``GRANT <role> TO <member>``) is PostgreSQL's and Materialize's: a member
holds what its roles hold, transitively (every role INHERITs, as in Materialize).
PostgreSQL's predefined roles ``pg_read_server_files`` and ``pg_write_server_files``
exist from the start (catalog migration 12): their members may make the server read or
write files (session/files.py), which is otherwise a superuser's.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from mzflow.catalog import migrations as m
from mzflow.catalog.model import PUBLIC as _PUBLIC_SCHEMA
from mzflow.catalog.model import Grant, Role, Snapshot
from mzflow.errors import InvalidOption

SCHEMA_ID = _PUBLIC_SCHEMA.id  # materialize.public, as Materialize numbers it

MATERIALIZE = "materialize"
MATERIALIZE_ID = "u1"
PUBLIC = "PUBLIC"
PUBLIC_ID = "p"  # Materialize's id of the PUBLIC pseudo-role, which every role is in
DATABASE_ID = "u1"  # the materialize database, as Materialize numbers it

# PostgreSQL's predefined roles for server files: (id, PostgreSQL's OID, name). "g" ids,
# as Materialize numbers its predefined roles (mz_monitor is g1).
READ_SERVER_FILES = "pg_read_server_files"
WRITE_SERVER_FILES = "pg_write_server_files"
PREDEFINED = (("g1", 4569, READ_SERVER_FILES), ("g2", 4570, WRITE_SERVER_FILES))
PREDEFINED_IDS = frozenset(role_id for role_id, _, _ in PREDEFINED)

MECHANISM = "SCRAM-SHA-256"
ITERATIONS = 4096  # PostgreSQL's scram_iterations default
_SALT_BYTES = 16  # PostgreSQL's SCRAM_DEFAULT_SALT_LEN
_VERIFIER = re.compile(r"SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):"
                       r"([A-Za-z0-9+/=]+)")


def find(snap: Snapshot, name: str) -> Role | None:
    return next((r for r in snap.roles if r.name == name), None)


def by_id(snap: Snapshot, role_id: str) -> Role | None:
    return next((r for r in snap.roles if r.id == role_id), None)


def name_of(snap: Snapshot, role_id: str) -> str:
    """A role id as a name; PUBLIC's and a dropped role's as themselves."""
    if role_id == PUBLIC_ID:
        return PUBLIC
    role = by_id(snap, role_id)
    return role.name if role is not None else role_id


def verifier(snap: Snapshot, name: str) -> str | None:
    """The SCRAM-SHA-256 verifier of ``name``'s password; None for an unknown role or
    one without a password (neither can log in with a password)."""
    role = find(snap, name)
    return role.verifier if role is not None else None


def can_login(snap: Snapshot, name: str) -> bool:
    role = find(snap, name)
    return role is not None and role.login


def is_superuser(snap: Snapshot, role_id: str) -> bool:
    role = by_id(snap, role_id)
    return role is not None and role.superuser


def memberships(snap: Snapshot, role_id: str) -> frozenset[str]:
    """The role ids whose privileges ``role_id`` holds: itself, PUBLIC, and every role
    it is a member of, directly or through another."""
    return closure(snap.role_members, role_id) | {PUBLIC_ID}


def closure(members: Iterable[tuple[str, str, str]], role_id: str) -> frozenset[str]:
    """``role_id`` and the roles it is in, transitively, by (role, member, grantor) rows."""
    edges = list(members)
    held = {role_id}
    todo = [role_id]
    while todo:
        member = todo.pop()
        for role in (r for r, mem, _ in edges if mem == member):
            if role not in held:
                held.add(role)
                todo.append(role)
    return frozenset(held)


def has_role(snap: Snapshot, role_id: str, role_name: str) -> bool:
    """Whether ``role_id`` is ``role_name``, a member of it, or a superuser (who holds
    every role implicitly, as in PostgreSQL)."""
    if is_superuser(snap, role_id):
        return True
    role = find(snap, role_name)
    return role is not None and role.id in memberships(snap, role_id)


def add_member(conn: sa.engine.Connection, role_id: str, member: str, grantor: str) -> None:
    conn.execute(m.role_members.insert().values(role_id=role_id, member=member,
                                                grantor=grantor))


def remove_member(conn: sa.engine.Connection, role_id: str, member: str) -> None:
    t = m.role_members
    conn.execute(t.delete().where((t.c.role_id == role_id) & (t.c.member == member)))


def forget_memberships(conn: sa.engine.Connection, role_id: str) -> None:
    """A dropped role leaves the roles it was in, and its members leave it (PostgreSQL)."""
    t = m.role_members
    conn.execute(t.delete().where((t.c.role_id == role_id) | (t.c.member == role_id)))


# -- verifiers -------------------------------------------------------------------


def make_verifier(password: str, iterations: int = ITERATIONS) -> str:
    """``password``'s verifier in PostgreSQL's text form (a fresh random salt)."""
    from scramp import ScramException, ScramMechanism

    try:
        salt, stored, server, count = ScramMechanism(MECHANISM).make_auth_info(
            password, iteration_count=iterations, salt=os.urandom(_SALT_BYTES))
    except ScramException as e:
        # SASLprep refuses control and some bidirectional characters. (PostgreSQL would
        # hash such a password unprepared; scramp's clients could not log in with it.)
        # The message is scramp's rule, never the password.
        raise InvalidOption(f"invalid password: {str(e).split(':')[0]}",
                            hint="a password may not contain control characters or mix "
                                 "right-to-left and left-to-right text") from None
    return f"{MECHANISM}${count}:{_b64(salt)}${_b64(stored)}:{_b64(server)}"


def is_verifier(text: str) -> bool:
    return auth_info(text) is not None


def auth_info(text: str) -> tuple[bytes, bytes, bytes, int] | None:
    """A verifier as scramp's ``auth_fn`` returns it: (salt, StoredKey, ServerKey,
    iterations); None if ``text`` is not a SCRAM-SHA-256 verifier."""
    match = _VERIFIER.fullmatch(text)
    if match is None:
        return None
    try:
        salt, stored, server = (base64.b64decode(match.group(i), validate=True)
                                for i in (2, 3, 4))
    except (binascii.Error, ValueError):
        return None
    if len(stored) != 32 or len(server) != 32 or not salt:
        return None
    return salt, stored, server, int(match.group(1))


def password_matches(text: str, password: str) -> bool:
    """Whether ``password`` is the one ``text`` verifies (a constant-time comparison)."""
    from scramp import ScramMechanism

    info = auth_info(text)
    if info is None:
        return False
    salt, stored, server, count = info
    _, stored2, server2, _ = ScramMechanism(MECHANISM).make_auth_info(
        password, iteration_count=count, salt=salt)
    return hmac.compare_digest(stored, stored2) and hmac.compare_digest(server, server2)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# -- the store -------------------------------------------------------------------


def load(conn: sa.engine.Connection) -> dict[str, Any]:
    """The roles, grants and owners, as Snapshot's fields."""
    return {
        "roles": tuple(
            Role(id=r.id, oid=r.oid, name=r.name, inherit=bool(r.inherit),
                 login=bool(r.login), superuser=bool(r.superuser), verifier=r.verifier)
            for r in conn.execute(sa.select(m.roles).order_by(m.roles.c.oid))),
        "grants": tuple(
            Grant(r.object_type, r.object_id, r.grantee, r.grantor, r.privileges)
            for r in conn.execute(sa.select(m.grants).order_by(
                m.grants.c.object_type, m.grants.c.object_id, m.grants.c.grantee,
                m.grants.c.grantor))),
        "owners": tuple((r.object_type, r.object_id, r.role_id) for r in conn.execute(
            sa.select(m.owners).order_by(m.owners.c.object_type, m.owners.c.object_id))),
        "role_members": tuple((r.role_id, r.member, r.grantor) for r in conn.execute(
            sa.select(m.role_members).order_by(m.role_members.c.role_id,
                                               m.role_members.c.member))),
    }


def is_superuser_now(engine: sa.engine.Engine, role_id: str) -> bool:
    """Whether ``role_id`` is a superuser, read from the store itself: one row, no
    snapshot (a statement's checks must not load a second snapshot for it to see)."""
    with engine.connect() as conn:
        return bool(conn.execute(sa.select(m.roles.c.superuser).where(
            m.roles.c.id == role_id)).scalar_one_or_none())


def insert(conn: sa.engine.Connection, role: Role) -> None:
    conn.execute(m.roles.insert().values(
        id=role.id, oid=role.oid, name=role.name, inherit=role.inherit, login=role.login,
        superuser=role.superuser, verifier=role.verifier))


def update(conn: sa.engine.Connection, role: Role) -> None:
    conn.execute(m.roles.update().where(m.roles.c.id == role.id).values(
        inherit=role.inherit, login=role.login, superuser=role.superuser,
        verifier=role.verifier))


def delete(conn: sa.engine.Connection, role_id: str) -> None:
    conn.execute(m.roles.delete().where(m.roles.c.id == role_id))


def set_owner(conn: sa.engine.Connection, object_type: str, object_id: str,
              role_id: str) -> None:
    forget(conn, object_type, object_id)
    conn.execute(m.owners.insert().values(object_type=object_type, object_id=object_id,
                                          role_id=role_id))


def forget(conn: sa.engine.Connection, object_type: str, object_id: str) -> None:
    """A dropped object's owner and grants go with it."""
    for t in (m.owners, m.grants):
        conn.execute(t.delete().where((t.c.object_type == object_type)
                                      & (t.c.object_id == object_id)))


_LETTER_ORDER = "arwdUCRBN"  # how Materialize's ACL items print them


def set_grant(conn: sa.engine.Connection, obj: tuple[str, str], grantee: str, grantor: str,
              letters: str) -> None:
    """What ``grantee`` holds on ``obj`` from ``grantor``: exactly ``letters``."""
    t = m.grants
    kind, object_id = obj
    key = ((t.c.object_type == kind) & (t.c.object_id == object_id)
           & (t.c.grantee == grantee) & (t.c.grantor == grantor))
    conn.execute(t.delete().where(key))
    held = "".join(c for c in _LETTER_ORDER if c in letters)
    if held:
        conn.execute(t.insert().values(object_type=kind, object_id=object_id,
                                       grantee=grantee, grantor=grantor, privileges=held))


def carry_over(conn: sa.engine.Connection, snap: Snapshot, old: tuple[str, str],
               new: tuple[str, str]) -> None:
    """A replaced object's owner and grants go to its replacement (PostgreSQL keeps them
    through CREATE OR REPLACE VIEW)."""
    for kind, object_id, role_id in snap.owners:
        if (kind, object_id) == old:
            set_owner(conn, *new, role_id)
    for g in snap.grants:
        if (g.object_type, g.object_id) == old:
            set_grant(conn, new, g.grantee, g.grantor, g.privileges)
