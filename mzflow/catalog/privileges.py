"""Privileges, as Materialize's RBAC has them: who may do what to which object.

An object is ``(type, id)``: an ``item`` (a relation, index or sink) by its id, a
``cluster``, a ``schema``, the ``database``, or the ``system``. Its owner (the role
that created it) holds every privilege on it; a superuser bypasses every check. Grants
hold Materialize's ACL letters. Every role is in PUBLIC, which may use the database,
its ``public`` schema and the ``default`` cluster; a member of a role (``GRANT r TO
joe``) holds what the role holds, its ownership included (catalog/roles.py).

Reads follow Materialize (and PostgreSQL): a role reading a view needs SELECT on the
view, and the view's *owner* needs it on what the view reads, recursively; the reader
needs nothing on those. Errors are Materialize's: ``permission denied for TABLE
"materialize.public.t"`` (SQLSTATE 42501) and ``must be owner of TABLE
materialize.public.t``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from mzflow.catalog import roles
from mzflow.catalog.model import (
    DATABASE,
    INDEX,
    MATERIALIZED_VIEW,
    SINK,
    SOURCE,
    TABLE,
    VIEW,
    Item,
    Snapshot,
)
from mzflow.errors import InsufficientPrivilege, InvalidGrant, UnknownObject

Obj = tuple[str, str]  # (object type, object id)
SYSTEM: Obj = ("system", "")

# Materialize's privilege names and ACL letters.
LETTERS = {"SELECT": "r", "INSERT": "a", "UPDATE": "w", "DELETE": "d", "CREATE": "C",
           "USAGE": "U", "CREATEROLE": "R", "CREATEDB": "B", "CREATECLUSTER": "N"}
NAMES = {letter: name for name, letter in LETTERS.items()}

# What each kind of object has privileges for (Materialize's all_object_privileges).
_APPLICABLE = {TABLE: "arwd", VIEW: "r", MATERIALIZED_VIEW: "r", INDEX: "", SINK: "",
               SOURCE: "r",
               "cluster": "UC", "schema": "UC", "database": "UC", "system": "RBN"}
_ITEM_WORDS = {TABLE: "TABLE", VIEW: "VIEW", MATERIALIZED_VIEW: "MATERIALIZED VIEW",
               INDEX: "INDEX", SINK: "SINK", SOURCE: "SOURCE"}


# -- objects -----------------------------------------------------------------------


def item_object(item: Item) -> Obj:
    return ("item", item.id)


def cluster_object(cluster_id: int) -> Obj:
    return ("cluster", str(cluster_id))


def schema_object(snap: Snapshot, database: str | None, schema: str) -> Obj:
    """A schema by name (UnknownSchema if it does not exist)."""
    from mzflow.catalog import names

    return ("schema", names.schema_id(snap, names.require_schema(snap, database, schema)))


def item_schema(snap: Snapshot, item: Item) -> Obj:
    return schema_object(snap, item.database, item.schema)


def _schema_name(snap: Snapshot, schema_id: str) -> str:
    found = next((x for x in snap.schemas if x.id == schema_id), None)
    return found.name if found is not None else schema_id


def database_object(name: str) -> Obj:
    if name != DATABASE:
        raise UnknownObject(f"unknown database '{name}'")
    return ("database", roles.DATABASE_ID)


def kind_of(snap: Snapshot, obj: Obj) -> str:
    """The object's kind: an item's (table, view…), else its type."""
    if obj[0] == "item":
        item = snap.item(obj[1])
        return SOURCE if item.is_source else item.kind
    return obj[0]


def applicable(snap: Snapshot, obj: Obj) -> str:
    return _APPLICABLE[kind_of(snap, obj)]


def type_word(snap: Snapshot, obj: Obj) -> str:
    """``TABLE``, ``CLUSTER``…: how Materialize's errors name the object's type."""
    if obj[0] == "item":
        return _ITEM_WORDS[kind_of(snap, obj)]
    return obj[0].upper()


def name_of(snap: Snapshot, obj: Obj) -> str:
    kind, object_id = obj
    if kind == "item":
        return snap.item(object_id).qualified_name
    if kind == "cluster":
        found = snap.cluster(int(object_id))
        return found.name if found is not None else object_id
    if kind == "schema":
        return f"{DATABASE}.{_schema_name(snap, object_id)}"
    if kind == "database":
        return DATABASE
    return ""


def describe(snap: Snapshot, obj: Obj) -> str:
    """``TABLE "materialize.public.t"``, ``SYSTEM``: Materialize's object description."""
    if obj == SYSTEM:
        return "SYSTEM"
    return f'{type_word(snap, obj)} "{name_of(snap, obj)}"'


# -- who holds what ----------------------------------------------------------------


def owner_of(snap: Snapshot, obj: Obj) -> str:
    """The owning role's id. The database, its schema and the system belong to the
    built-in superuser (in Materialize, to ``mz_system``)."""
    for kind, object_id, role_id in snap.owners:
        if (kind, object_id) == obj:
            return role_id
    return roles.MATERIALIZE_ID


def granted(snap: Snapshot, role_id: str, obj: Obj) -> str:
    """The letters granted on ``obj`` to ``role_id``, to a role it is a member of, or to
    PUBLIC (not an owner's)."""
    held = roles.memberships(snap, role_id)
    return "".join(g.privileges for g in snap.grants
                   if (g.object_type, g.object_id) == obj and g.grantee in held)


def has(snap: Snapshot, role_id: str, obj: Obj, letter: str) -> bool:
    if is_owner(snap, role_id, obj):
        return True
    return letter in granted(snap, role_id, obj)


def is_owner(snap: Snapshot, role_id: str, obj: Obj) -> bool:
    """A superuser, the owner, or a member of the owning role (PostgreSQL's and
    Materialize's: a member acts with its roles' privileges, ownership included)."""
    if roles.is_superuser(snap, role_id):
        return True
    owner = owner_of(snap, obj)
    return owner == role_id or owner in roles.memberships(snap, role_id)


# -- checks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Need:
    """``role_id`` needs privilege ``letter`` on ``obj``."""

    role_id: str
    obj: Obj
    letter: str


def check(snap: Snapshot, needs: Iterable[Need]) -> None:
    """Raise for the first need not met, in order (Materialize's order)."""
    for need in needs:
        if not has(snap, need.role_id, need.obj, need.letter):
            raise InsufficientPrivilege(f"permission denied for {describe(snap, need.obj)}")


def require(snap: Snapshot, role_id: str, obj: Obj, letter: str) -> None:
    check(snap, [Need(role_id, obj, letter)])


def require_owner(snap: Snapshot, role_id: str, obj: Obj) -> None:
    if not is_owner(snap, role_id, obj):
        raise InsufficientPrivilege(f"must be owner of {type_word(snap, obj)} "
                                    f"{name_of(snap, obj)}")


def require_superuser(snap: Snapshot, role_id: str, action: str, why: str = "") -> None:
    """Materialize's ``permission denied to <action>``; ``why`` explains, if given."""
    if not roles.is_superuser(snap, role_id):
        raise InsufficientPrivilege(f"permission denied to {action}",
                                    detail=why or f"You must be a superuser to {action}")


def reads(snap: Snapshot, role_id: str, item_ids: Iterable[str]) -> list[Need]:
    """What reading ``item_ids`` needs (Materialize's generate_read_privileges): USAGE on
    each one's schema and SELECT on it; for a view, what its query reads, needed by the
    view's owner. Direct reads first, then each view's, breadth first."""
    seen: set[tuple[Obj, str]] = set()
    needs: list[Need] = []
    layer = [(role_id, item_id) for item_id in item_ids]
    while layer:
        views: list[tuple[str, str]] = []
        for reader, item_id in layer:
            obj = ("item", item_id)
            if (obj, reader) in seen:
                continue
            seen.add((obj, reader))
            item = snap.item(item_id)
            schema = item_schema(snap, item)
            if (schema, reader) not in seen:
                seen.add((schema, reader))
                needs.append(Need(reader, schema, "U"))
            if item.kind in (TABLE, VIEW, MATERIALIZED_VIEW):
                needs.append(Need(reader, obj, "r"))
            if item.kind in (VIEW, MATERIALIZED_VIEW):
                owner = owner_of(snap, obj)
                views += [(owner, dep) for dep in item.depends_on]
        layer = views
    return needs


# -- grants --------------------------------------------------------------------------


def letters_of(snap: Snapshot, obj: Obj, names: list[str] | None) -> str:
    """Privilege names (None: ALL) as the object's letters; a privilege the object does
    not have is refused as Materialize does."""
    allowed = applicable(snap, obj)
    if names is None:
        return allowed
    wrong = [n for n in names if LETTERS.get(n, "?") not in allowed]
    if wrong:
        raise InvalidGrant(f"invalid privilege types {', '.join(wrong)} for "
                           f"{describe(snap, obj)}")
    return "".join(sorted({LETTERS[n] for n in names}, key=allowed.index))


def held_rows(snap: Snapshot) -> Iterator[tuple[Obj, str, str, str]]:
    """(object, grantee, grantor, letters) of every privilege: the grants, and each
    owner's on what it owns (Materialize keeps those as grants too)."""
    existing = {("item", i.id) for i in snap.items} | {
        ("cluster", str(c.id)) for c in snap.clusters}

    def exists(obj: Obj) -> bool:
        return obj in existing or obj[0] not in ("item", "cluster")

    for kind, object_id, role_id in snap.owners:
        obj = (kind, object_id)
        if exists(obj):  # an index's or a sink's owner holds no letters
            yield obj, role_id, role_id, applicable(snap, obj)
    for g in snap.grants:
        obj = (g.object_type, g.object_id)
        if exists(obj):
            yield obj, g.grantee, g.grantor, g.privileges


def dependents(snap: Snapshot, role_id: str) -> list[str]:
    """Why ``role_id`` cannot be dropped (Materialize's wording): what it owns, and the
    privileges granted to it or by it."""
    out = []
    for obj, grantee, grantor, _ in held_rows(snap):
        if grantee == grantor == role_id:
            out.append(f"owner of {describe(snap, obj)}")
        elif grantee == role_id:
            out.append(f"privileges on {describe(snap, obj)} granted by "
                       f"{roles.name_of(snap, grantor)}")
        elif grantor == role_id:
            out.append(f"privileges granted on {describe(snap, obj)} to "
                       f"{roles.name_of(snap, grantee)}")
    return out


SHOW_COLUMNS = ["grantor", "grantee", "database", "schema", "name", "object_type",
                "privilege_type"]
_SHOW_KINDS = {"TABLES": "item", "CLUSTERS": "cluster", "SCHEMAS": "schema",
               "DATABASES": "database", "SYSTEM": "system"}


def show_rows(snap: Snapshot, on: str | None, role_id: str | None
              ) -> list[tuple[object, ...]]:
    """SHOW PRIVILEGES [ON <kind>] [FOR <role>]: one row per privilege, as
    Materialize's (a role's rows include what PUBLIC holds)."""
    rows: list[tuple[object, ...]] = []
    for obj, grantee, grantor, letters in held_rows(snap):
        if on is not None and obj[0] != _SHOW_KINDS[on]:
            continue
        if role_id is not None and grantee not in (role_id, roles.PUBLIC_ID):
            continue
        database, schema, name, kind = _show_names(snap, obj)
        rows += [(roles.name_of(snap, grantor), roles.name_of(snap, grantee), database,
                  schema, name, kind, NAMES[letter]) for letter in letters]
    return sorted(rows, key=lambda r: tuple("" if v is None else str(v) for v in r))


def _show_names(snap: Snapshot, obj: Obj) -> tuple[str | None, str | None, str | None, str]:
    kind, object_id = obj
    if kind == "item":
        item = snap.item(object_id)
        return item.database, item.schema, item.name, item.kind
    if kind == "schema":
        return DATABASE, None, _schema_name(snap, object_id), kind
    if kind == "system":
        return None, None, None, kind
    return None, None, name_of(snap, obj), kind


# -- ACL items (mz_aclitem) ------------------------------------------------------------


def aclitems(snap: Snapshot, obj: Obj) -> list[str]:
    """``obj``'s privileges as Materialize's ``mz_aclitem[]`` prints them:
    ``grantee=letters/grantor`` by role id, PUBLIC's grantee empty (``=U/u1``)."""
    out = []
    for held, grantee, grantor, letters in held_rows(snap):
        if held == obj and letters:
            out.append(f"{'' if grantee == roles.PUBLIC_ID else grantee}={letters}/{grantor}")
    return out


def explode(items: list[str] | None) -> list[tuple[str, str, str, bool]]:
    """``mz_aclexplode``: (grantor, grantee, privilege_type, is_grantable) per privilege
    of each item, in order; PUBLIC's grantee is ``p``, its role id."""
    out: list[tuple[str, str, str, bool]] = []
    for item in items or []:
        grantee, _, rest = item.partition("=")
        letters, _, grantor = rest.partition("/")
        for letter in letters:
            out.append((grantor, grantee or roles.PUBLIC_ID, NAMES[letter], False))
    return out
