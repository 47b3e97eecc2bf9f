"""``information_schema``'s relations, computed from a catalog snapshot.

PostgreSQL types their columns with domains (``sql_identifier``, ``cardinal_number``,
``character_data``, ``yes_or_no``); a client receives their base types, which is what
these columns are: ``name``, ``integer`` and ``character varying``. Materialized views
are listed with table_type ``MATERIALIZED VIEW``, as Materialize lists them.
"""

from __future__ import annotations

from mzflow.catalog import names, pg_types
from mzflow.catalog.exprtypes import display_name
from mzflow.catalog.model import DATABASE, MATERIALIZED_VIEW, TABLE, VIEW, Snapshot
from mzflow.catalog.pg_catalog import owner_name, system_oid
from mzflow.catalog.system import Row, SystemTable, _cols

_TABLE_TYPES = {TABLE: "BASE TABLE", VIEW: "VIEW", MATERIALIZED_VIEW: "MATERIALIZED VIEW"}
_ID = "name"  # sql_identifier
_NUM = "integer"  # cardinal_number
_TEXT = "character varying"  # character_data and yes_or_no


def _tables(snap: Snapshot) -> list[Row]:
    return [(DATABASE, i.schema, i.name, _TABLE_TYPES[i.kind], None, None, None, None, None,
             "YES" if i.kind == TABLE else "NO", "NO", None)
            for i in snap.items if i.kind in _TABLE_TYPES]


def _precision(type_text: str) -> tuple[object, object, object, object, object]:
    """(character_maximum_length, character_octet_length, numeric_precision,
    numeric_precision_radix, numeric_scale) as PostgreSQL fills them."""
    oid, typmod = pg_types.oid_of(type_text)
    if oid in (1043, 1042):
        n = typmod - 4 if typmod >= 4 else None
        return n, (n * 4 if n is not None else 1073741824), None, None, None
    if oid == 25:
        return None, 1073741824, None, None, None
    if oid in (21, 23, 20):
        return None, None, {21: 16, 23: 32, 20: 64}[oid], 2, 0
    if oid in (700, 701):
        return None, None, {700: 24, 701: 53}[oid], 2, None
    if oid == 1700:
        if typmod < 4:
            return None, None, None, 10, None
        mod = typmod - 4
        return None, None, mod >> 16, 10, mod & 0xFFFF
    return None, None, None, None, None


def _data_type(type_text: str) -> tuple[str, str]:
    """(data_type, udt_name): the SQL name without modifiers, and the pg_type name."""
    oid, _ = pg_types.oid_of(type_text)
    t = pg_types.BY_OID[oid]
    if t.category == "A":
        return "ARRAY", t.name
    return pg_types.format_type(oid, None) or display_name(type_text), t.name


def _columns(snap: Snapshot) -> list[Row]:
    out: list[Row] = []
    for i in snap.items:
        if i.kind not in _TABLE_TYPES:
            continue
        for pos, c in enumerate(i.columns, start=1):
            data_type, udt = _data_type(c.type)
            oid, typmod = pg_types.oid_of(c.type)
            precision = (typmod if oid in (1114, 1184, 1083, 1266) and typmod >= 0
                         else 6 if oid in (1114, 1184, 1083, 1266, 1186)
                         else 0 if oid == 1082 else None)
            out.append((DATABASE, i.schema, i.name, c.name, pos, None,
                        "YES" if c.nullable else "NO", data_type, *_precision(c.type),
                        precision, None, None, None, None, None, None, None, None, None,
                        None, None, DATABASE, "pg_catalog", udt, None, None, None, None, str(pos),
                        "NO", "NO", None, None, None, None, None, "NO", "NEVER", None,
                        "YES" if i.kind == TABLE else "NO"))
    return out


def _schemata(snap: Snapshot) -> list[Row]:
    every = [*names.SYSTEM_SCHEMAS, *(s.name for s in snap.schemas)]
    owner = owner_name(snap, system_oid(snap))
    return [(DATABASE, name, owner, None, None, None, None) for name in every]


def _views(snap: Snapshot) -> list[Row]:
    from mzflow.catalog.pg_catalog import _definition

    return [(DATABASE, i.schema, i.name, _definition(i), "NONE", "NO", "NO", "NO", "NO", "NO")
            for i in snap.items if i.kind == VIEW]


def _none(snap: Snapshot) -> list[Row]:
    return []


def _table(name: str, spec: str, rows: object = _none) -> SystemTable:
    spec = spec.replace(" ID", f" {_ID}").replace(" NUM", f" {_NUM}").replace(
        " TEXT", f" {_TEXT}")
    return SystemTable(name, _cols(spec), (), rows,  # type: ignore[arg-type]
                       schema="information_schema")


TABLES = [
    _table("tables",
           "table_catalog ID, table_schema ID, table_name ID, table_type TEXT, "
           "self_referencing_column_name ID null, reference_generation TEXT null, "
           "user_defined_type_catalog ID null, user_defined_type_schema ID null, "
           "user_defined_type_name ID null, is_insertable_into TEXT, is_typed TEXT, "
           "commit_action TEXT null", _tables),
    _table("columns",
           "table_catalog ID, table_schema ID, table_name ID, column_name ID, "
           "ordinal_position NUM, column_default TEXT null, is_nullable TEXT, "
           "data_type TEXT, character_maximum_length NUM null, "
           "character_octet_length NUM null, numeric_precision NUM null, "
           "numeric_precision_radix NUM null, numeric_scale NUM null, "
           "datetime_precision NUM null, interval_type TEXT null, "
           "interval_precision NUM null, character_set_catalog ID null, "
           "character_set_schema ID null, character_set_name ID null, "
           "collation_catalog ID null, collation_schema ID null, collation_name ID null, "
           "domain_catalog ID null, domain_schema ID null, domain_name ID null, "
           "udt_catalog ID, udt_schema ID, udt_name ID, scope_catalog ID null, "
           "scope_schema ID null, scope_name ID null, maximum_cardinality NUM null, "
           "dtd_identifier ID, is_self_referencing TEXT, is_identity TEXT, "
           "identity_generation TEXT null, identity_start TEXT null, "
           "identity_increment TEXT null, identity_maximum TEXT null, "
           "identity_minimum TEXT null, identity_cycle TEXT, is_generated TEXT, "
           "generation_expression TEXT null, is_updatable TEXT", _columns),
    _table("schemata",
           "catalog_name ID, schema_name ID, schema_owner ID, "
           "default_character_set_catalog ID null, default_character_set_schema ID null, "
           "default_character_set_name ID null, sql_path TEXT null", _schemata),
    _table("views",
           "table_catalog ID, table_schema ID, table_name ID, view_definition TEXT, "
           "check_option TEXT, is_updatable TEXT, is_insertable_into TEXT, "
           "is_trigger_updatable TEXT, is_trigger_deletable TEXT, "
           "is_trigger_insertable_into TEXT", _views),
    _table("table_constraints",
           "constraint_catalog ID, constraint_schema ID, constraint_name ID, "
           "table_catalog ID, table_schema ID, table_name ID, constraint_type TEXT, "
           "is_deferrable TEXT, initially_deferred TEXT, enforced TEXT, "
           "nulls_distinct TEXT null"),
    _table("key_column_usage",
           "constraint_catalog ID, constraint_schema ID, constraint_name ID, "
           "table_catalog ID, table_schema ID, table_name ID, column_name ID, "
           "ordinal_position NUM, position_in_unique_constraint NUM null"),
    _table("referential_constraints",
           "constraint_catalog ID, constraint_schema ID, constraint_name ID, "
           "unique_constraint_catalog ID, unique_constraint_schema ID, "
           "unique_constraint_name ID, match_option TEXT, update_rule TEXT, "
           "delete_rule TEXT"),
    _table("table_privileges",
           "grantor ID, grantee ID, table_catalog ID, table_schema ID, table_name ID, "
           "privilege_type TEXT, is_grantable TEXT, with_hierarchy TEXT"),
    _table("role_table_grants",
           "grantor ID, grantee ID, table_catalog ID, table_schema ID, table_name ID, "
           "privilege_type TEXT, is_grantable TEXT, with_hierarchy TEXT"),
]
