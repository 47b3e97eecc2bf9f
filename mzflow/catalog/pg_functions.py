"""PostgreSQL's catalog functions over one snapshot: ``format_type``, ``pg_get_viewdef``,
``pg_table_is_visible``, the ``reg*`` types' input and output…, as plain Python.

They answer what a client's catalog query asks of each row (engine/catalog_sql.py
calls them). Visibility and the ``reg*`` types depend on the search path, which a
:class:`CatalogFunctions` is made with.
"""

from __future__ import annotations

import datetime as dt

from sqlglot import exp
from sqlglot.errors import ParseError as SqlglotParseError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from mzflow.catalog import names, pg_catalog, pg_types
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, VIEW, Item, Snapshot
from mzflow.errors import UnknownObject, UnknownRelation, UnknownSchema
from mzflow.sql.parse import DIALECT

# PostgreSQL's OIDs of its catalogs (pg_class.oid of each), which regclass input of
# 'pg_catalog.<name>' gives (pg_description.classoid = 'pg_catalog.pg_class'::regclass).
SYSTEM_RELATION_OIDS = {
    "pg_class": 1259, "pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255,
    "pg_namespace": 2615, "pg_constraint": 2606, "pg_description": 2609,
    "pg_index": 2610, "pg_database": 1262, "pg_am": 2601, "pg_collation": 3456,
    "pg_depend": 2608, "pg_inherits": 2611, "pg_trigger": 2620, "pg_rewrite": 2618,
    "pg_authid": 1260, "pg_tablespace": 1213, "pg_shdescription": 2396,
    "pg_attrdef": 2604, "pg_policy": 3256, "pg_statistic_ext": 3381, "pg_sequence": 2224,
    "pg_extension": 3079, "pg_opclass": 2616, "pg_operator": 2617, "pg_cast": 2605,
    "pg_enum": 3501, "pg_range": 3541, "pg_language": 2612, "pg_event_trigger": 3466,
    "pg_foreign_table": 3118, "pg_partitioned_table": 3350, "pg_auth_members": 1261,
}
_OTHER_SYSTEM_OIDS = 15000  # the rest, numbered in name order from here


def system_relation_oids() -> dict[tuple[str, str], int]:
    """(schema, name) → OID of every system relation."""
    from mzflow.catalog import system

    out: dict[tuple[str, str], int] = {}
    rest = sorted((t.schema, t.name) for t in system.every()
                  if t.name not in SYSTEM_RELATION_OIDS or t.schema != "pg_catalog")
    for t in system.every():
        if t.schema == "pg_catalog" and t.name in SYSTEM_RELATION_OIDS:
            out[(t.schema, t.name)] = SYSTEM_RELATION_OIDS[t.name]
    for n, key in enumerate(rest):
        out[key] = _OTHER_SYSTEM_OIDS + n
    return out


class CatalogFunctions:
    """The functions, for one statement: its snapshot and its search path."""

    def __init__(self, snap: Snapshot, search_path: tuple[str, ...]):
        self.snap = snap
        self.path = search_path
        self.by_oid = {i.oid: i for i in snap.items}
        self._system: dict[tuple[str, str], int] | None = None
        self.now = dt.datetime.now(dt.UTC)  # now(): the statement's time

    @property
    def system(self) -> dict[tuple[str, str], int]:
        if self._system is None:
            self._system = system_relation_oids()
        return self._system

    # -- pg_catalog functions ---------------------------------------------------------

    def aclexplode(self, items: list[str] | None) -> list[dict[str, object]]:
        """``mz_aclexplode(mz_aclitem[])``: a row per privilege (catalog/privileges.py)."""
        from mzflow.catalog import privileges

        return [{"grantor": grantor, "grantee": grantee, "privilege_type": kind,
                 "is_grantable": grantable}
                for grantor, grantee, kind, grantable in privileges.explode(items)]

    def format_type(self, oid: int | None, typmod: int | None) -> str | None:
        return pg_types.format_type(oid, typmod)

    def get_userbyid(self, oid: int | None) -> str | None:
        return pg_catalog.owner_name(self.snap, oid)

    def table_is_visible(self, oid: int | None) -> bool | None:
        if oid is None:
            return None
        item = self.by_oid.get(oid)
        if item is None:
            # A system relation is visible: its schema is searched first.
            return any(v == oid for v in self.system.values()) or None
        with names.using(self.path):
            return names.visible(self.snap, item)

    def get_viewdef(self, oid: int | None) -> str | None:
        item = self.by_oid.get(oid) if oid is not None else None
        return self._viewdef(item)

    def get_viewdef_by_name(self, name: str | None) -> str | None:
        if name is None:
            return None
        return self._viewdef(self._item_named(name))

    def _viewdef(self, item: Item | None) -> str | None:
        if item is None or item.kind not in (VIEW, MATERIALIZED_VIEW):
            return None
        return pg_catalog._definition(item)

    def get_indexdef(self, oid: int | None, column: int | None = 0) -> str | None:
        item = self.by_oid.get(oid) if oid is not None else None
        if item is None or item.kind != INDEX:
            return None
        if column:  # one key column's text, as PostgreSQL gives it for column n
            keys = item.keys
            if not 1 <= column <= len(keys):
                return ""
            key = keys[column - 1]
            return key.column if key.column is not None else key.expression
        return pg_catalog.index_definition(self.snap, item)

    def obj_description(self, oid: int | None, catalog: str | None = "pg_class"
                        ) -> str | None:
        item = self.by_oid.get(oid) if oid is not None else None
        if item is None or catalog not in (None, "pg_class"):
            return None
        return self.snap.comment(item.id, 0)

    def col_description(self, oid: int | None, column: int | None) -> str | None:
        item = self.by_oid.get(oid) if oid is not None else None
        if item is None or column is None or column < 1:
            return None
        return self.snap.comment(item.id, column)

    @staticmethod
    def encoding_to_char(encoding: int | None) -> str | None:
        if encoding is None:
            return None
        return "UTF8" if encoding == 6 else ""

    @staticmethod
    def size_pretty(size: int | None) -> str | None:
        """pg_size_pretty: bytes below 10 kB, then the largest unit under 20 of it,
        rounded half away from zero, as PostgreSQL 15 prints it."""
        if size is None:
            return None
        units = [("bytes", 10 * 1024, False, 0), ("kB", 20 * 1024 - 1, True, 10),
                 ("MB", 20 * 1024 - 1, True, 20), ("GB", 20 * 1024 - 1, True, 30),
                 ("TB", 20 * 1024 - 1, True, 40), ("PB", 20 * 1024 - 1, True, 50)]
        for i, (name, limit, rounds, bits) in enumerate(units):
            last = i == len(units) - 1
            if last or abs(size) < limit:
                if rounds:
                    size = int((size + (-1 if size < 0 else 1)) / 2)  # C's truncation
                return f"{size} {name}"
            nxt = units[i + 1]
            shift = nxt[3] - bits - (1 if nxt[2] else 0) + (1 if rounds else 0)
            size = int(size / (1 << shift))
        return None

    @staticmethod
    def quote_ident(name: str | None) -> str | None:
        return None if name is None else names.quote_ident(name)

    # -- reg* types -------------------------------------------------------------------

    def regclass_in(self, text: str | None) -> int | None:
        """'name'::regclass: the OID of the relation the name means now."""
        if text is None:
            return None
        if text.isdigit():
            return int(text)
        from mzflow.catalog import system

        table = _table_name(text)
        try:
            with names.using(self.path):
                found = system.find_relation(self.snap, table)
        except (UnknownSchema, UnknownObject):
            found = None
        if found is None:
            raise UnknownRelation(f'relation "{text}" does not exist')
        if isinstance(found, Item):
            return found.oid
        return self.system[(found.schema, found.name)]

    def regclass_out(self, oid: int | None) -> str | None:
        if oid is None:
            return None
        item = self.by_oid.get(oid)
        if item is not None:
            with names.using(self.path):
                return names.minimal(self.snap, item)
        for (schema, name), found in self.system.items():
            if found == oid:
                return name if schema in names.IMPLICIT else f"{schema}.{name}"
        return str(oid)

    @staticmethod
    def regtype_in(text: str | None) -> int | None:
        if text is None:
            return None
        oid, _ = pg_types.oid_of(text.removeprefix("pg_catalog."))
        if pg_types.BY_OID.get(oid) is None or (oid == 25 and text.strip() != "text"):
            raise UnknownObject(f'type "{text}" does not exist')
        return oid

    def to_regtype(self, text: str | None) -> int | None:
        """to_regtype(): regtype_in's OID, or NULL for a type that does not exist."""
        try:
            return self.regtype_in(text)
        except UnknownObject:
            return None

    def to_regclass(self, text: str | None) -> int | None:
        """to_regclass(): the relation's OID, or NULL for a name that means none."""
        try:
            return self.regclass_in(text)
        except (UnknownObject, UnknownSchema):
            return None

    @staticmethod
    def regtype_out(oid: int | None) -> str | None:
        if oid is None:
            return None
        return pg_types.type_name(oid) or str(oid)

    def regnamespace_in(self, text: str | None) -> int | None:
        if text is None:
            return None
        return names.schema_oid(self.snap, text)

    def regnamespace_out(self, oid: int | None) -> str | None:
        if oid is None:
            return None
        for name, (_, found) in names.SYSTEM_SCHEMAS.items():
            if found == oid:
                return name
        schema = next((s for s in self.snap.schemas if s.oid == oid), None)
        return names.quote_ident(schema.name) if schema else str(oid)

    def regrole_in(self, text: str | None) -> int | None:
        if text is None:
            return None
        found = next((r[0] for r in pg_catalog.roles(self.snap) if r[1] == text), None)
        if found is None:
            raise UnknownObject(f'role "{text}" does not exist')
        return found

    def regrole_out(self, oid: int | None) -> str | None:
        if oid is None:
            return None
        return next((r[1] for r in pg_catalog.roles(self.snap) if r[0] == oid), str(oid))

    @staticmethod
    def regproc_out(oid: int | None) -> str | None:
        # No function has an OID here (pg_proc is empty): PostgreSQL prints 0 as "-".
        return None if oid is None else "-" if oid == 0 else str(oid)

    def _item_named(self, text: str) -> Item | None:
        try:
            with names.using(self.path):
                return names.find(self.snap, _table_name(text))
        except (UnknownSchema, UnknownObject):
            return None


def _table_name(text: str) -> exp.Table:
    """A relation name as regclass input reads it: dotted, quoted parts kept as
    written, unquoted ones folded to lower case."""
    try:
        table = exp.to_table(text, dialect=DIALECT)
    except SqlglotParseError:
        raise UnknownRelation(f'invalid name syntax "{text}"') from None
    folded = normalize_identifiers(table, dialect=DIALECT)
    assert isinstance(folded, exp.Table)
    return folded
