"""``pg_catalog``'s relations, computed from a catalog snapshot, as PostgreSQL clients
read them (psql's ``\\d``, SQLAlchemy's inspector, JDBC drivers, dbt).

Columns and types are PostgreSQL 15's (``tests/test_pg_catalog.py`` compares them
with a real server), plus the columns older servers had that clients still ask a
server reporting version 9.5 for (``pg_class.relhasoids``). The rows describe the
user's relations: tables (``r``), views (``v``), materialized views (``m``) and
indexes (``i``); their OIDs are the items' own, stable for an item's life. What
mzflow has none of (constraints, triggers, policies, sequences…) is an empty relation
with PostgreSQL's columns, so a client's join on it finds nothing rather than fails.
"""

from __future__ import annotations

from pathlib import Path

from mzflow import caches
from mzflow.catalog import names, normalize, pg_types
from mzflow.catalog.model import (
    DATABASE,
    INDEX,
    MATERIALIZED_VIEW,
    TABLE,
    VIEW,
    Item,
    Snapshot,
)
from mzflow.catalog.system import Row, SystemTable, _cols

# The class OIDs pg_description.classoid names (PostgreSQL's).
PG_CLASS_OID = 1259
PG_NAMESPACE_OID = 2615
BTREE_OID = 403  # pg_am: every index is a btree to a client
HEAP_OID = 2  # pg_am: tables and materialized views
DEFAULT_TABLESPACE_OID = 1663
RELKINDS = {TABLE: "r", VIEW: "v", MATERIALIZED_VIEW: "m", INDEX: "i"}


def roles(snap: Snapshot) -> list[tuple[int, str, bool, bool]]:
    """(oid, name, superuser, can login) of every role (catalog/roles.py)."""
    return [(r.oid, r.name, r.superuser, r.login) for r in snap.roles]


def owner_oid(snap: Snapshot, object_type: str, object_id: str) -> int:
    """The OID of the role that owns an object (``item``, ``schema``, ``database``;
    the system's objects are the built-in superuser's)."""
    from mzflow.catalog import privileges
    from mzflow.catalog import roles as role_rules

    owner = privileges.owner_of(snap, (object_type, object_id))
    found = role_rules.by_id(snap, owner) or role_rules.by_id(snap, role_rules.MATERIALIZE_ID)
    return found.oid if found is not None else 0


def system_oid(snap: Snapshot) -> int:
    """The OID of the role that owns the system's objects: the built-in superuser."""
    return owner_oid(snap, "system", "")


def owner_role_name(snap: Snapshot, item: Item) -> str:
    """The name of the role that owns ``item``."""
    from mzflow.catalog import privileges
    from mzflow.catalog import roles as role_rules

    return role_rules.name_of(snap, privileges.owner_of(snap, ("item", item.id)))


def owner_name(snap: Snapshot, oid: int | None) -> str | None:
    """pg_get_userbyid: a role's name, PostgreSQL's text for an unknown OID."""
    if oid is None:
        return None
    found = next((r[1] for r in roles(snap) if r[0] == oid), None)
    return found if found is not None else f"unknown (OID={oid})"


def relations(snap: Snapshot) -> list[Item]:
    """The items pg_class lists."""
    return [i for i in snap.items if i.kind in RELKINDS]


def attributes(snap: Snapshot, item: Item) -> list[tuple[str, str, bool]]:
    """(name, mzflow type, nullable) of a pg_class entry's columns: a relation's own, or
    an index's keys (an expression key is ``expr``, as PostgreSQL names it)."""
    if item.kind != INDEX:
        return [(c.name, c.type, c.nullable) for c in item.columns]
    on = snap.item(item.on_id) if item.on_id else None
    types = {c.name: (c.type, c.nullable) for c in on.columns} if on else {}
    out = []
    for key in item.keys:
        if key.column is not None:
            t, nullable = types.get(key.column, ("text", True))
            out.append((key.column, t, nullable))
        else:
            out.append(("expr", "text", True))
    return out


def _pg_class(snap: Snapshot) -> list[Row]:
    out: list[Row] = []
    indexed = {i.on_id for i in snap.items if i.kind == INDEX}
    for i in relations(snap):
        # As PostgreSQL sets them: a view (and a materialized view) is a rule's result;
        # views and indexes have no replica identity.
        am = BTREE_OID if i.kind == INDEX else HEAP_OID if i.kind in (TABLE, MATERIALIZED_VIEW
                                                                      ) else 0
        out.append((
            i.oid, i.name, names.schema_oid(snap, i.schema), 0, 0,
            owner_oid(snap, "item", i.id), am, 0, 0, 0,
            0.0 if i.kind == INDEX else -1.0, 0, 0, i.id in indexed, False, "p",
            RELKINDS[i.kind], len(attributes(snap, i)), 0, i.kind in (VIEW, MATERIALIZED_VIEW),
            False, False, False, False, True, "n" if i.kind in (VIEW, INDEX) else "d", False,
            0, 0, 0, None, None, None, False))
    return out


def _pg_attribute(snap: Snapshot) -> list[Row]:
    out: list[Row] = []
    for item in relations(snap):
        for num, (name, type_text, nullable) in enumerate(attributes(snap, item), start=1):
            oid, typmod = pg_types.oid_of(type_text)
            t = pg_types.BY_OID[oid]
            out.append((
                item.oid, name, oid, -1, t.len, num, 0, -1, typmod, t.byval, t.align,
                t.storage, "", not nullable, False, False, "", "", False, True, 0,
                t.collation, None, None, None, None))
    return out


def _pg_index(snap: Snapshot) -> list[Row]:
    out: list[Row] = []
    for idx in snap.items:
        if idx.kind != INDEX or idx.on_id is None:
            continue
        on = snap.item(idx.on_id)
        positions = {c.name: n for n, c in enumerate(on.columns, start=1)}
        keys = [positions.get(k.column, 0) if k.column else 0 for k in idx.keys]
        zeros = [0] * len(keys)
        out.append((idx.oid, on.oid, len(keys), len(keys), False, False, False, False, True,
                    False, True, False, True, True, False, keys, zeros, zeros, zeros, None,
                    None))
    return out


def _pg_type(snap: Snapshot) -> list[Row]:
    return [(t.oid, t.name, pg_types.PG_CATALOG_OID, system_oid(snap), t.len, t.byval, t.type,
             t.category, t.preferred, True, ",", 0, t.subscript, t.elem, t.array, t.input,
             t.output, t.receive, t.send, t.modin, t.modout,
             "array_typanalyze" if t.category == "A" and t.name.startswith("_") else "-",
             t.align, t.storage, False, 0, -1, 0, t.collation, None, None, None)
            for t in pg_types.TYPES]


def _pg_namespace(snap: Snapshot) -> list[Row]:
    system: list[Row] = [(oid, name, system_oid(snap), None)
                         for name, (_, oid) in names.SYSTEM_SCHEMAS.items()]
    return system + [(s.oid, s.name, owner_oid(snap, "schema", s.id), None)
                     for s in snap.schemas]


def _pg_database(snap: Snapshot) -> list[Row]:
    return [(names.DATABASE_OID, DATABASE, owner_oid(snap, "database", names.DATABASE_ID), 6,
             "c", False, True, -1, 0, 0,
             DEFAULT_TABLESPACE_OID, "C", "C", None, None, None)]


def _pg_description(snap: Snapshot) -> list[Row]:
    oids = {i.id: i.oid for i in relations(snap)}
    return [(oids[item_id], PG_CLASS_OID, sub, text)
            for item_id, sub, text in snap.comments if item_id in oids]


def _definition(item: Item) -> str | None:
    return f"{normalize.humanize(item.definition)};" if item.definition else None


def _pg_views(snap: Snapshot) -> list[Row]:
    return [(i.schema, i.name, owner_role_name(snap, i), _definition(i)) for i in snap.items
            if i.kind == VIEW]


def _pg_matviews(snap: Snapshot) -> list[Row]:
    return [(i.schema, i.name, owner_role_name(snap, i), None, bool(snap.indexes_on(i.id)), True,
             _definition(i)) for i in snap.items if i.kind == MATERIALIZED_VIEW]


def _pg_tables(snap: Snapshot) -> list[Row]:
    return [(i.schema, i.name, owner_role_name(snap, i), None, bool(snap.indexes_on(i.id)),
             False, False, False) for i in snap.items if i.kind == TABLE]


def _pg_stat_user_tables(snap: Snapshot) -> list[Row]:
    # PostgreSQL's statistics collector's counters are unknown here: NULL, as sizes are
    # (Metabase's postgres driver reads n_live_tup as an estimate it may lack).
    return [(i.oid, i.schema, i.name) + (None,) * 20 for i in snap.items
            if i.kind in (TABLE, MATERIALIZED_VIEW)]


def index_definition(snap: Snapshot, idx: Item) -> str:
    """pg_get_indexdef's text: the CREATE INDEX that makes it, as stored."""
    return normalize.humanize(idx.create_sql)


def _pg_indexes(snap: Snapshot) -> list[Row]:
    out: list[Row] = []
    for idx in snap.items:
        if idx.kind == INDEX and idx.on_id is not None:
            on = snap.item(idx.on_id)
            out.append((idx.schema, on.name, idx.name, None, index_definition(snap, idx)))
    return out


def _pg_roles(snap: Snapshot) -> list[Row]:
    return [(name, superuser, True, superuser, superuser, login, False, -1, "********",
             None, superuser, None, oid) for oid, name, superuser, login in roles(snap)]


def _pg_user(snap: Snapshot) -> list[Row]:
    return [(name, oid, superuser, superuser, False, superuser, "********", None, None)
            for oid, name, superuser, login in roles(snap) if login]


def _pg_authid(snap: Snapshot) -> list[Row]:
    return [(oid, name, superuser, True, superuser, superuser, login, False, superuser, -1,
             None, None) for oid, name, superuser, login in roles(snap)]


def _pg_auth_members(snap: Snapshot) -> list[Row]:
    oids = {r.id: r.oid for r in snap.roles}
    return [(oids[role], oids[member], oids.get(grantor, 0), False)
            for role, member, grantor in snap.role_members
            if role in oids and member in oids]


def _pg_am(snap: Snapshot) -> list[Row]:
    # amcanorder (hidden) is 9.5's: pgjdbc's getIndexInfo reads it from a server below 9.6.
    return [(HEAP_OID, "heap", "heap_tableam_handler", "t", False),
            (BTREE_OID, "btree", "bthandler", "i", True)]


def _pg_collation(snap: Snapshot) -> list[Row]:
    return [(pg_types.DEFAULT_COLLATION, "default", pg_types.PG_CATALOG_OID, system_oid(snap), "d",
             True, -1, None, None, None, None),
            (950, "C", pg_types.PG_CATALOG_OID, system_oid(snap), "c", True, -1, "C", "C", None,
             None)]


def _pg_tablespace(snap: Snapshot) -> list[Row]:
    return [(DEFAULT_TABLESPACE_OID, "pg_default", system_oid(snap), None, None),
            (1664, "pg_global", system_oid(snap), None, None)]


def _none(snap: Snapshot) -> list[Row]:
    return []


def _table(name: str, spec: str, rows: object = _none) -> SystemTable:
    return SystemTable(name, _cols(spec), (), rows, schema="pg_catalog")  # type: ignore[arg-type]


# pg_get_keywords(): a function in FROM, which catalog/srf.py binds to a relation of this
# name (no identifier a user writes unquoted). Its rows are PostgreSQL's own list
# (scripts/pg_keywords.py wrote the file): clients such as pgjdbc's getSQLKeywords use
# it to decide what to quote, and mzflow's parser takes PostgreSQL's words.
KEYWORDS = "pg_get_keywords()"
_CATEGORIES = {"U": "unreserved", "C": "unreserved (cannot be function or type name)",
               "T": "reserved (can be function or type name)", "R": "reserved"}


_KEYWORDS = caches.lru("catalog.pg_keywords", 1)  # the file's rows, read once


def _keyword_rows() -> tuple[Row, ...]:
    found = _KEYWORDS.get("rows")
    if found is not None:
        return found
    rows = []
    for line in (Path(__file__).with_name("pg_keywords.txt")).read_text().splitlines():
        if line and not line.startswith("#"):
            word, code, *requires_as = line.split()
            bare = not requires_as
            rows.append((word, code, bare, _CATEGORIES[code],
                         "can be bare label" if bare else "requires AS"))
    return tuple(rows)


def _pg_get_keywords(snap: Snapshot) -> list[Row]:
    return list(_keyword_rows())


TABLES = [
    _table(KEYWORDS, "word text, catcode \"char\", barelabel boolean, catdesc text, "
           "baredesc text", _pg_get_keywords),
    _table("pg_class",
           "oid oid, relname name, relnamespace oid, reltype oid, reloftype oid, "
           "relowner oid, relam oid, relfilenode oid, reltablespace oid, relpages integer, "
           "reltuples real, relallvisible integer, reltoastrelid oid, relhasindex boolean, "
           "relisshared boolean, relpersistence \"char\", relkind \"char\", "
           "relnatts smallint, relchecks smallint, relhasrules boolean, "
           "relhastriggers boolean, relhassubclass boolean, relrowsecurity boolean, "
           "relforcerowsecurity boolean, relispopulated boolean, relreplident \"char\", "
           "relispartition boolean, relrewrite oid, relfrozenxid xid, relminmxid xid, "
           "relacl aclitem[] null, reloptions text[] null, relpartbound pg_node_tree null, "
           "relhasoids boolean", _pg_class),
    _table("pg_namespace", "oid oid, nspname name, nspowner oid, nspacl aclitem[] null",
           _pg_namespace),
    _table("pg_attribute",
           "attrelid oid, attname name, atttypid oid, attstattarget integer, "
           "attlen smallint, attnum smallint, attndims integer, attcacheoff integer, "
           "atttypmod integer, attbyval boolean, attalign \"char\", attstorage \"char\", "
           "attcompression \"char\", attnotnull boolean, atthasdef boolean, "
           "atthasmissing boolean, attidentity \"char\", attgenerated \"char\", "
           "attisdropped boolean, attislocal boolean, attinhcount integer, "
           "attcollation oid, attacl aclitem[] null, attoptions text[] null, "
           "attfdwoptions text[] null, attmissingval anyarray null", _pg_attribute),
    _table("pg_type",
           "oid oid, typname name, typnamespace oid, typowner oid, typlen smallint, "
           "typbyval boolean, typtype \"char\", typcategory \"char\", "
           "typispreferred boolean, typisdefined boolean, typdelim \"char\", typrelid oid, "
           "typsubscript regproc, typelem oid, typarray oid, typinput regproc, "
           "typoutput regproc, typreceive regproc, typsend regproc, typmodin regproc, "
           "typmodout regproc, typanalyze regproc, typalign \"char\", typstorage \"char\", "
           "typnotnull boolean, typbasetype oid, typtypmod integer, typndims integer, "
           "typcollation oid, typdefaultbin pg_node_tree null, typdefault text null, "
           "typacl aclitem[] null", _pg_type),
    _table("pg_database",
           "oid oid, datname name, datdba oid, encoding integer, datlocprovider \"char\", "
           "datistemplate boolean, datallowconn boolean, datconnlimit integer, "
           "datfrozenxid xid, datminmxid xid, dattablespace oid, datcollate text, "
           "datctype text, daticulocale text null, datcollversion text null, "
           "datacl aclitem[] null", _pg_database),
    _table("pg_matviews",
           "schemaname name, matviewname name, matviewowner name, tablespace name null, "
           "hasindexes boolean, ispopulated boolean, definition text", _pg_matviews),
    _table("pg_views", "schemaname name, viewname name, viewowner name, definition text",
           _pg_views),
    _table("pg_tables",
           "schemaname name, tablename name, tableowner name, tablespace name null, "
           "hasindexes boolean, hasrules boolean, hastriggers boolean, rowsecurity boolean",
           _pg_tables),
    _table("pg_stat_user_tables",
           "relid oid, schemaname name, relname name, " + ", ".join(
               f"{c} bigint null" for c in (
                   "seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "n_tup_ins",
                   "n_tup_upd", "n_tup_del", "n_tup_hot_upd", "n_live_tup", "n_dead_tup",
                   "n_mod_since_analyze", "n_ins_since_vacuum")) + ", " + ", ".join(
               f"{c} timestamp with time zone null" for c in (
                   "last_vacuum", "last_autovacuum", "last_analyze", "last_autoanalyze"))
           + ", " + ", ".join(f"{c} bigint null" for c in (
               "vacuum_count", "autovacuum_count", "analyze_count", "autoanalyze_count")),
           _pg_stat_user_tables),
    _table("pg_indexes",
           "schemaname name, tablename name, indexname name, tablespace name null, "
           "indexdef text", _pg_indexes),
    _table("pg_index",
           "indexrelid oid, indrelid oid, indnatts smallint, indnkeyatts smallint, "
           "indisunique boolean, indnullsnotdistinct boolean, indisprimary boolean, "
           "indisexclusion boolean, indimmediate boolean, indisclustered boolean, "
           "indisvalid boolean, indcheckxmin boolean, indisready boolean, "
           "indislive boolean, indisreplident boolean, indkey int2vector, "
           "indcollation oidvector, indclass oidvector, indoption int2vector, "
           "indexprs pg_node_tree null, indpred pg_node_tree null", _pg_index),
    _table("pg_description", "objoid oid, classoid oid, objsubid integer, description text",
           _pg_description),
    _table("pg_shdescription", "objoid oid, classoid oid, description text"),
    _table("pg_depend",
           "classid oid, objid oid, objsubid integer, refclassid oid, refobjid oid, "
           "refobjsubid integer, deptype \"char\""),
    _table("pg_proc",
           "oid oid, proname name, pronamespace oid, proowner oid, prolang oid, "
           "procost real, prorows real, provariadic oid, prosupport regproc, "
           "prokind \"char\", prosecdef boolean, proleakproof boolean, "
           "proisstrict boolean, proretset boolean, provolatile \"char\", "
           "proparallel \"char\", pronargs smallint, pronargdefaults smallint, "
           "prorettype oid, proargtypes oidvector, proallargtypes oid[] null, "
           "proargmodes \"char\"[] null, proargnames text[] null, "
           "proargdefaults pg_node_tree null, protrftypes oid[] null, prosrc text, "
           "probin text null, prosqlbody pg_node_tree null, proconfig text[] null, "
           "proacl aclitem[] null, proisagg boolean, proiswindow boolean"),
    _table("pg_roles",
           "rolname name, rolsuper boolean, rolinherit boolean, rolcreaterole boolean, "
           "rolcreatedb boolean, rolcanlogin boolean, rolreplication boolean, "
           "rolconnlimit integer, rolpassword text, "
           "rolvaliduntil timestamp with time zone null, rolbypassrls boolean, "
           "rolconfig text[] null, oid oid", _pg_roles),
    _table("pg_user",
           "usename name, usesysid oid, usecreatedb boolean, usesuper boolean, "
           "userepl boolean, usebypassrls boolean, passwd text, "
           "valuntil timestamp with time zone null, useconfig text[] null", _pg_user),
    _table("pg_authid",
           "oid oid, rolname name, rolsuper boolean, rolinherit boolean, "
           "rolcreaterole boolean, rolcreatedb boolean, rolcanlogin boolean, "
           "rolreplication boolean, rolbypassrls boolean, rolconnlimit integer, "
           "rolpassword text null, rolvaliduntil timestamp with time zone null",
           _pg_authid),
    _table("pg_auth_members", "roleid oid, member oid, grantor oid, admin_option boolean",
           _pg_auth_members),
    # A session's settings: the session fills the rows (session/catalog_functions.py).
    _table("pg_settings",
           "name text, setting text, unit text null, category text, short_desc text, "
           "extra_desc text null, context text, vartype text, source text, "
           "min_val text null, max_val text null, enumvals text[] null, boot_val text, "
           "reset_val text, sourcefile text null, sourceline integer null, "
           "pending_restart boolean"),
    _table("pg_attrdef", "oid oid, adrelid oid, adnum smallint, adbin pg_node_tree"),
    _table("pg_collation",
           "oid oid, collname name, collnamespace oid, collowner oid, "
           "collprovider \"char\", collisdeterministic boolean, collencoding integer, "
           "collcollate text null, collctype text null, colliculocale text null, "
           "collversion text null", _pg_collation),
    _table("pg_constraint",
           "oid oid, conname name, connamespace oid, contype \"char\", "
           "condeferrable boolean, condeferred boolean, convalidated boolean, "
           "conrelid oid, contypid oid, conindid oid, conparentid oid, confrelid oid, "
           "confupdtype \"char\", confdeltype \"char\", confmatchtype \"char\", "
           "conislocal boolean, coninhcount integer, connoinherit boolean, "
           "conkey smallint[] null, confkey smallint[] null, conpfeqop oid[] null, "
           "conppeqop oid[] null, conffeqop oid[] null, confdelsetcols smallint[] null, "
           "conexclop oid[] null, conbin pg_node_tree null"),
    SystemTable("pg_am", _cols("oid oid, amname name, amhandler regproc, amtype \"char\""),
                _cols("amcanorder boolean"), _pg_am, schema="pg_catalog"),
    _table("pg_opclass",
           "oid oid, opcmethod oid, opcname name, opcnamespace oid, opcowner oid, "
           "opcfamily oid, opcintype oid, opcdefault boolean, opckeytype oid"),
    _table("pg_inherits",
           "inhrelid oid, inhparent oid, inhseqno integer, inhdetachpending boolean"),
    _table("pg_policy",
           "oid oid, polname name, polrelid oid, polcmd \"char\", polpermissive boolean, "
           "polroles oid[], polqual pg_node_tree null, polwithcheck pg_node_tree null"),
    _table("pg_statistic_ext",
           "oid oid, stxrelid oid, stxname name, stxnamespace oid, stxowner oid, "
           "stxstattarget integer, stxkeys int2vector, stxkind \"char\"[], "
           "stxexprs pg_node_tree null"),
    _table("pg_trigger",
           "oid oid, tgrelid oid, tgparentid oid, tgname name, tgfoid oid, "
           "tgtype smallint, tgenabled \"char\", tgisinternal boolean, tgconstrrelid oid, "
           "tgconstrindid oid, tgconstraint oid, tgdeferrable boolean, "
           "tginitdeferred boolean, tgnargs smallint, tgattr int2vector, tgargs bytea, "
           "tgqual pg_node_tree null, tgoldtable name null, tgnewtable name null"),
    _table("pg_rewrite",
           "oid oid, rulename name, ev_class oid, ev_type \"char\", ev_enabled \"char\", "
           "is_instead boolean, ev_qual pg_node_tree, ev_action pg_node_tree"),
    _table("pg_sequence",
           "seqrelid oid, seqtypid oid, seqstart bigint, seqincrement bigint, "
           "seqmax bigint, seqmin bigint, seqcache bigint, seqcycle boolean"),
    _table("pg_enum", "oid oid, enumtypid oid, enumsortorder real, enumlabel name"),
    _table("pg_range",
           "rngtypid oid, rngsubtype oid, rngmultitypid oid, rngcollation oid, "
           "rngsubopc oid, rngcanonical regproc, rngsubdiff regproc"),
    _table("pg_extension",
           "oid oid, extname name, extowner oid, extnamespace oid, "
           "extrelocatable boolean, extversion text, extconfig oid[] null, "
           "extcondition text[] null"),
    _table("pg_tablespace",
           "oid oid, spcname name, spcowner oid, spcacl aclitem[] null, "
           "spcoptions text[] null", _pg_tablespace),
    _table("pg_event_trigger",
           "oid oid, evtname name, evtevent name, evtowner oid, evtfoid oid, "
           "evtenabled \"char\", evttags text[] null"),
    _table("pg_foreign_table", "ftrelid oid, ftserver oid, ftoptions text[] null"),
    _table("pg_partitioned_table",
           "partrelid oid, partstrat \"char\", partnatts smallint, partdefid oid, "
           "partattrs int2vector, partclass oidvector, partcollation oidvector, "
           "partexprs pg_node_tree null"),
    _table("pg_language",
           "oid oid, lanname name, lanowner oid, lanispl boolean, lanpltrusted boolean, "
           "lanplcallfoid oid, laninline oid, lanvalidator oid, lanacl aclitem[] null"),
    _table("pg_cast",
           "oid oid, castsource oid, casttarget oid, castfunc oid, castcontext \"char\", "
           "castmethod \"char\""),
    _table("pg_operator",
           "oid oid, oprname name, oprnamespace oid, oprowner oid, oprkind \"char\", "
           "oprcanmerge boolean, oprcanhash boolean, oprleft oid, oprright oid, "
           "oprresult oid, oprcom oid, oprnegate oid, oprcode regproc, oprrest regproc, "
           "oprjoin regproc"),
]
