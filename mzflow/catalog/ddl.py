"""DDL: check a statement against the catalog and persist it, in one transaction.

Each public function takes the store, the parsed statement and the session's
active cluster, and returns notices for the user (``… already exists,
skipping``). All checks run inside the write transaction, on the state that
transaction sees, so concurrent sessions cannot both pass a check and then
conflict.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from mzflow.catalog import intervals, normalize, sinks, sizes
from mzflow.catalog.bind import bind, type_name
from mzflow.catalog.determinism import check_deterministic
from mzflow.catalog.model import (
    INDEX,
    MATERIALIZED_VIEW,
    RELATION_KINDS,
    ROWID,
    SINK,
    TABLE,
    VIEW,
    Cluster,
    Column,
    IndexKey,
    Item,
    Snapshot,
)
from mzflow.catalog.store import Store, Writer
from mzflow.errors import (
    DependentObjects,
    DuplicateObject,
    InvalidDefinition,
    InvalidOption,
    UnknownObject,
    Unsupported,
    WrongObjectType,
)
from mzflow.sql import ast
from mzflow.sql.ast import VersionedTable

Notices = list[str]

# -- clusters ------------------------------------------------------------------


def _cluster_options(options: list[ast.Option]) -> tuple[bool, str | None]:
    seen: set[str] = set()
    virtual, size = False, None
    for opt in options:
        name = opt.name
        if name in seen:
            raise InvalidOption(f"{name} specified more than once")
        seen.add(name)
        value = opt.args.get("value")
        if name == "VIRTUAL":
            virtual = True
        elif name == "SIZE":
            if not isinstance(value, exp.Literal) or not value.is_string:
                raise InvalidOption("SIZE must be a string, such as SIZE 'small'")
            size = sizes.lookup(value.name).name
        elif name == "REPLICAS":
            raise Unsupported("cluster replicas are not supported: a cluster is one Airflow "
                              "pool; use SIZE to scale it")
        else:
            raise InvalidOption(f'unexpected cluster option "{name}"',
                                hint="valid options are VIRTUAL and SIZE")
    if virtual and size is not None:
        raise InvalidOption("only one of VIRTUAL, REMOTE, and SIZE may be specified")
    return virtual, size


def create_cluster(store: Store, stmt: ast.CreateCluster) -> Notices:
    name = stmt.this.name
    virtual, size = _cluster_options(stmt.args.get("options") or [])
    with store.write() as w:
        if w.snapshot.find_cluster(name):
            raise DuplicateObject(f"cluster '{name}' already exists")
        w.insert_cluster(Cluster(id=w.next_id("cluster"), name=name, virtual=virtual, size=size))
    return []


def alter_cluster(store: Store, stmt: ast.AlterCluster) -> Notices:
    virtual, size = _cluster_options(stmt.args.get("options") or [])
    with store.write() as w:
        cluster = w.snapshot.cluster_by_name(stmt.this.name)
        w.update_cluster(Cluster(id=cluster.id, name=cluster.name, virtual=virtual, size=size))
    return []


# -- relations -------------------------------------------------------------------


# What a user calls each column constraint sqlglot parses (the rest: its SQL keyword).
_CONSTRAINT_NAMES: dict[type, str] = {
    exp.PrimaryKeyColumnConstraint: "PRIMARY KEY",
    exp.UniqueColumnConstraint: "UNIQUE",
    exp.CheckColumnConstraint: "CHECK",
    exp.Reference: "FOREIGN KEY",
    exp.DefaultColumnConstraint: "DEFAULT",
    exp.GeneratedAsIdentityColumnConstraint: "GENERATED",
    exp.AutoIncrementColumnConstraint: "AUTOINCREMENT",
    exp.CollateColumnConstraint: "COLLATE",
}


def _constraint_name(kind: exp.Expr | None) -> str:
    name = _CONSTRAINT_NAMES.get(type(kind)) if kind is not None else None
    if name:
        return name
    words = normalize.sql(kind).split() if kind is not None else []
    return words[0].upper() if words else "this column"


def _column_def(col: exp.ColumnDef, table: str) -> Column:
    nullable = True
    for constraint in col.constraints:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint):
            nullable = bool(kind.args.get("allow_null"))
        elif isinstance(kind, ast.VersionAdded):
            raise InvalidDefinition(f'invalid table definition for "{table}"',
                                    detail="VERSION ADDED appears only in statements the "
                                           "catalog generates for ALTER TABLE … ADD COLUMN")
        else:
            raise Unsupported(f"{_constraint_name(kind)} constraints are not supported")
    dtype = col.args.get("kind")
    if not isinstance(dtype, exp.DataType):
        raise InvalidDefinition(f'column "{col.name}" needs a type')
    if col.name.lower() == ROWID:
        raise InvalidDefinition(f'column name "{col.name}" is reserved for mzflow\'s row ids')
    return Column(name=col.name, type=type_name(dtype), nullable=nullable)


def _check_new_name(snap: Snapshot, name: str) -> None:
    if snap.find(name) is not None:
        raise DuplicateObject(f"catalog item '{name}' already exists")


def _new_item(w: Writer, **fields: object) -> Item:
    return Item(id=f"u{w.next_id('item')}", global_id=f"u{w.next_id('global')}",
                oid=w.next_id("oid"), **fields)  # type: ignore[arg-type]


CreateShard = Callable[[Item, int], None]
AddToShard = Callable[[Item, Column, int], None]


REFRESH_MODES = ("auto", "incremental")


def refresh_mode(options: list[ast.Option]) -> str:
    """``REFRESH = 'incremental'`` refuses definitions that would be recomputed;
    ``'auto'`` (the default) recomputes them and says why in EXPLAIN."""
    for opt in options:
        if opt.name == "REFRESH":
            value = opt.args.get("value")
            mode = value.name.lower() if value is not None else ""
            if mode not in REFRESH_MODES:
                raise InvalidOption(f"invalid REFRESH mode '{mode}'",
                                    hint="valid modes are 'auto' and 'incremental'")
            return mode
    return "auto"


def _retention(options: list[ast.Option], allow_refresh: bool = False) -> int | None:
    retain = None
    for opt in options:
        value = opt.args.get("value")
        if opt.name == "RETAIN HISTORY" and isinstance(value, exp.Literal) and value.is_string:
            retain = intervals.to_ms(value.name)
        elif opt.name == "REFRESH" and allow_refresh:
            refresh_mode([opt])
        else:
            raise InvalidOption(f'unexpected option "{opt.name}"',
                                hint="valid: RETAIN HISTORY FOR '<interval>'")
    return retain


def create_table(store: Store, stmt: ast.CreateTable, create_shard: CreateShard) -> Notices:
    """Record the table and create its shard in one transaction; the shard gets the
    CREATE's timestamp as its version 0."""
    schema = stmt.this
    name = schema.this.name
    columns = tuple(_column_def(c, name) for c in schema.expressions
                    if isinstance(c, exp.ColumnDef))
    retain = _retention(stmt.args.get("options") or [])
    seen: set[str] = set()
    for col in columns:
        # Case-insensitively: a Delta schema cannot hold both x and X.
        if col.name.lower() in seen:
            raise DuplicateObject(f'column "{col.name}" specified more than once')
        seen.add(col.name.lower())
    with store.write() as w:
        if w.snapshot.find(name) is not None:
            if stmt.args.get("exists"):
                return [f"table \"{name}\" already exists, skipping"]
            _check_new_name(w.snapshot, name)
        ts = w.allocate_ts()
        item = _new_item(w, name=name, kind=TABLE, columns=columns, created_ts=ts,
                         retain_history_ms=retain,
                         create_sql=normalize.create_table_sql(name, columns))
        w.insert_item(item)
        create_shard(item, ts)
        w.committed(ts)
    return []


def add_column(store: Store, stmt: exp.Alter, add_to_shard: AddToShard) -> Notices:
    """ALTER TABLE … ADD COLUMN: a new version of the same item (same shard, new GlobalId)."""
    actions = stmt.args.get("actions") or []
    if len(actions) != 1 or not isinstance(actions[0], exp.ColumnDef):
        raise Unsupported("ALTER TABLE supports only ADD COLUMN")
    col_def = actions[0]
    with store.write() as w:
        item = w.snapshot.resolve(stmt.this.name)
        if item.kind != TABLE:
            raise WrongObjectType(f"{item.qualified_name} is not a table")
        if any(c.name.lower() == col_def.name.lower() for c in item.columns):
            if col_def.args.get("exists"):
                return [f'column "{col_def.name}" of relation "{item.name}" already exists, '
                        "skipping"]
            raise DuplicateObject(
                f'column "{col_def.name}" of relation "{item.name}" already exists')
        column = _column_def(col_def, item.name)
        if not column.nullable:
            raise InvalidDefinition("added columns must be nullable",
                                    detail="rows written before the column existed read it "
                                           "as NULL")
        version = item.version + 1
        column = Column(column.name, column.type, True, version_added=version)
        ts = w.allocate_ts()
        create_sql = normalize.create_table_sql(item.name, item.columns + (column,))
        w.add_column(item, column, f"u{w.next_id('global')}", create_sql)
        add_to_shard(item, column, ts)
        w.committed(ts)
    return []


def _active_cluster(snap: Snapshot, explicit: exp.Identifier | None, session_cluster: str
                    ) -> Cluster:
    return snap.cluster_by_name(explicit.name if explicit is not None else session_cluster)


def create_view(store: Store, stmt: ast.CreateView, session_cluster: str) -> Notices:
    name = stmt.this.name
    materialized = bool(stmt.args.get("materialized"))
    options = stmt.args.get("options") or []
    if options and not materialized:
        raise InvalidOption("a view takes no options: it stores nothing",
                            hint="RETAIN HISTORY applies to tables, indexes and "
                                 "materialized views")
    retain = _retention(options, allow_refresh=True)
    kind = MATERIALIZED_VIEW if materialized else VIEW
    word = "materialized view" if materialized else "view"
    if stmt.args.get("replace") and stmt.args.get("exists"):
        raise InvalidDefinition("cannot specify both OR REPLACE and IF NOT EXISTS")
    with store.write() as w:
        snap = w.snapshot
        cluster = _active_cluster(snap, stmt.args.get("cluster"), session_cluster) if (
            materialized) else None
        existing = snap.find(name)
        if existing is not None:
            if stmt.args.get("exists"):
                return [f'{word} "{name}" already exists, skipping']
            if not stmt.args.get("replace") or existing.kind != kind:
                _check_new_name(snap, name)
        if materialized:
            check_deterministic(stmt.args["query"], "materialized views")
        bound = bind(snap, stmt.args["query"])
        if existing is not None and existing.id in bound.depends_on:
            # OR REPLACE of a view that its own new definition reads (Materialize's wording).
            raise InvalidDefinition(f"cannot replace {word} {existing.qualified_name}: depended "
                                    f"upon by new {existing.qualified_name} definition")
        if materialized and bound.system_tables:
            raise Unsupported("materialized views over system catalog tables are not supported")
        qualified = normalize.qualified(name).sql(dialect=normalize.DIALECT)
        columns = _rename_columns(bound.columns, stmt.args.get("columns"), word, qualified)
        definition = normalize.sql(normalize.qualify_relations(stmt.args["query"], snap))
        col_sql = ""
        if stmt.args.get("columns"):
            col_sql = f" ({', '.join(normalize.quoted(c.name) for c in columns)})"
        cluster_sql = f" IN CLUSTER {normalize.quoted(cluster.name)}" if cluster else ""
        opts_sql = (f" WITH ({', '.join(normalize.sql(o) for o in options)})"
                    if options else "")
        create_sql = (f"CREATE {word.upper()} {qualified}{col_sql}{cluster_sql}{opts_sql} AS "
                      f"{definition}")
        if existing is not None:
            _drop(w, [existing], cascade=False)
        # A materialized view belongs to a cluster through its default index only, so
        # the item itself records no cluster (dropping the index releases the cluster).
        item = _new_item(w, name=name, kind=kind, columns=columns, definition=definition,
                         create_sql=create_sql, depends_on=bound.depends_on,
                         retain_history_ms=retain)
        w.insert_item(item)
        if materialized and cluster is not None:
            # The cluster design: a materialized view is a view plus a default index.
            _insert_index(w, item, cluster, keys=None, name=None, default=True,
                          retain=retain)
    return []


def _rename_columns(columns: tuple[Column, ...], names: list[exp.Identifier] | None, word: str,
                    qualified: str) -> tuple[Column, ...]:
    if names:
        if len(names) != len(columns):
            plural = "" if len(columns) == 1 else "s"
            raise InvalidDefinition(
                f"{word} {qualified} definition names {len(names)} columns, but {word} "
                f"{qualified} has {len(columns)} column{plural}")
        columns = tuple(Column(n.name, c.type, c.nullable) for n, c in zip(names, columns,
                                                                            strict=True))
    seen: set[str] = set()
    for col in columns:
        if col.name in seen:
            raise DuplicateObject(f'column "{col.name}" specified more than once')
        seen.add(col.name)
    return columns


# -- indexes -------------------------------------------------------------------


def _index_name(w: Writer, on: Item, keys: list[IndexKey] | None, default: bool) -> str:
    if default or not keys:
        base = f"{on.name}_primary_idx"
    else:
        base = "_".join([on.name] + [k.column or "expr" for k in keys] + ["idx"])
    # Names dropped earlier in this transaction (CREATE OR REPLACE) are free again.
    freed = {d.name for d in w.dropped}
    name, n = base, 0
    while w.snapshot.find(name) is not None and name not in freed:
        n += 1
        name = f"{base}{n}"
    return name


def _insert_index(w: Writer, on: Item, cluster: Cluster, keys: list[IndexKey] | None,
                  name: str | None, default: bool, retain: int | None = None) -> Item:
    if keys is None:
        # Default key: a known unique key, else all columns (no unique keys are known yet).
        keys = [IndexKey(column=c.name, expression=None) for c in on.columns]
    name = name or _index_name(w, on, keys, default)
    key_sql = ", ".join(normalize.quoted(k.column) if k.column else f"({k.expression})"
                        for k in keys)
    target = normalize.qualified(on.name)
    if on.kind == TABLE:
        # An index on a table is built on one version of it (Materialize's stored form).
        target = VersionedTable(**target.args, item_id=exp.to_identifier(on.id),
                                version=exp.Literal.number(on.version))
    create_sql = (f"CREATE INDEX {normalize.quoted(name)} IN CLUSTER "
                  f"{normalize.quoted(cluster.name)} ON {normalize.sql(target)} ({key_sql})")
    item = _new_item(w, name=name, kind=INDEX, create_sql=create_sql, cluster_id=cluster.id,
                     on_id=on.id, keys=tuple(keys), depends_on=(on.id,),
                     is_default_index=default, retain_history_ms=retain)
    w.insert_item(item)
    return item


def create_index(store: Store, stmt: ast.CreateIndex, session_cluster: str) -> Notices:
    name = stmt.this.name if stmt.this else None
    retain = _retention(stmt.args.get("options") or [])
    with store.write() as w:
        snap = w.snapshot
        if name and snap.find(name) is not None:
            if stmt.args.get("exists"):
                return [f'index "{name}" already exists, skipping']
            _check_new_name(snap, name)
        cluster = _active_cluster(snap, stmt.args.get("cluster"), session_cluster)
        on_table = stmt.args["on"]
        rel = snap.resolve(on_table.name)
        if rel.kind not in RELATION_KINDS:
            raise WrongObjectType(f"cannot create index on {rel.qualified_name}: it is a "
                                  f"{rel.kind_word}")
        keys = None
        if stmt.args.get("keys"):
            known = {c.name for c in rel.columns}
            keys = []
            for key in stmt.args["keys"]:
                if isinstance(key, exp.Column) and not key.table:
                    if key.name not in known:
                        raise UnknownObject(f'column "{key.name}" does not exist')
                    keys.append(IndexKey(column=key.name, expression=None))
                else:
                    keys.append(IndexKey(column=None, expression=normalize.sql(key)))
        _insert_index(w, rel, cluster, keys=keys, name=name,
                      default=bool(stmt.args.get("default")), retain=retain)
    return []


# -- sinks ---------------------------------------------------------------------

def create_sink(store: Store, stmt: ast.CreateSink, session_cluster: str) -> Notices:
    name = stmt.this.name
    with store.write() as w:
        snap = w.snapshot
        if snap.find(name) is not None:
            if stmt.args.get("exists"):
                return [f'sink "{name}" already exists, skipping']
            _check_new_name(snap, name)
        cluster = _active_cluster(snap, stmt.args.get("cluster"), session_cluster)
        source = snap.resolve(stmt.args["source"].name)
        if source.kind not in RELATION_KINDS:
            raise WrongObjectType(f"{source.qualified_name} is not a relation")
        sinks.options(stmt, tuple(c.name for c in source.columns))
        explicit = stmt.copy()
        explicit.set("this", normalize.qualified(name))
        explicit.set("source", normalize.qualified(source.name))
        explicit.set("cluster", exp.to_identifier(cluster.name, quoted=True))
        explicit.set("exists", None)
        # The sink's as-of: its snapshot is the source at this time, its changes follow.
        ts = w.allocate_ts()
        w.committed(ts)
        w.insert_item(_new_item(w, name=name, kind=SINK, create_sql=normalize.sql(explicit),
                                cluster_id=cluster.id, on_id=source.id,
                                depends_on=(source.id,), created_ts=ts))
    return []


# -- drops ---------------------------------------------------------------------

_DROP_KIND = {"TABLE": TABLE, "VIEW": VIEW, "MATERIALIZED VIEW": MATERIALIZED_VIEW,
              "INDEX": INDEX, "SINK": SINK}


Dropped = Callable[[list[Item]], None]


def drop(store: Store, stmt: ast.DropObjects, on_dropped: Dropped | None = None) -> Notices:
    """Drop the named objects; ``on_dropped`` gets every item removed, after the commit
    (their storage goes after the catalog no longer names it, never before)."""
    kind_sql = stmt.args["kind"]
    cascade = bool(stmt.args.get("cascade"))
    notices: Notices = []
    with store.write() as w:
        for target in stmt.expressions:
            if kind_sql == "CLUSTER":
                notices += _drop_cluster(w, target.name, bool(stmt.args.get("exists")), cascade)
                continue
            item = w.snapshot.find(target.name)
            if item is None:
                if stmt.args.get("exists"):
                    notices.append(f'{kind_sql.lower()} "{target.name}" does not exist, skipping')
                    continue
                raise UnknownObject(f"unknown catalog item '{target.name}'")
            wanted = _DROP_KIND[kind_sql]
            if item.kind != wanted:
                raise WrongObjectType(
                    f"{item.qualified_name} is not a {_DROP_KIND_WORD[wanted]}",
                    hint=f"Use DROP {item.kind_word.upper()} to remove a {item.kind_word}.")
            _drop(w, [item], cascade=cascade)
    return notices


_DROP_KIND_WORD = {TABLE: "table", VIEW: "view", MATERIALIZED_VIEW: "materialized view",
                   INDEX: "index", SINK: "sink"}


def _drop(w: Writer, targets: list[Item], *, cascade: bool) -> None:
    """Drop ``targets`` with their indexes, and with every dependent if ``cascade``."""
    snap = w.snapshot
    doomed: dict[str, Item] = {}
    stack = list(targets)
    while stack:
        item = stack.pop()
        if item.id in doomed:
            continue
        doomed[item.id] = item
        for dep in snap.dependents(item.id):
            if dep.kind == INDEX and dep.on_id == item.id:
                stack.append(dep)  # an object's own indexes always go with it
            elif cascade:
                stack.append(dep)
            elif dep.id not in doomed:
                raise DependentObjects(
                    f"cannot drop {item.qualified_name}: still depended upon by catalog item "
                    f"'{dep.qualified_name}'")
    # Dependents before what they depend on.
    for item in _dependents_first(list(doomed.values())):
        w.delete_item(item.id)
        w.dropped.append(item)


def _dependents_first(items: list[Item]) -> list[Item]:
    ids = {i.id for i in items}
    done: set[str] = set()
    out: list[Item] = []

    def visit(item: Item) -> None:
        if item.id in done:
            return
        done.add(item.id)
        for other in items:
            if item.id in other.depends_on or other.on_id == item.id:
                visit(other)
        out.append(item)

    for item in items:
        if item.id in ids:
            visit(item)
    return out


def _drop_cluster(w: Writer, name: str, if_exists: bool, cascade: bool) -> Notices:
    cluster = w.snapshot.find_cluster(name)
    if cluster is None:
        if if_exists:
            return [f"cluster \"{name}\" does not exist, skipping"]
        raise UnknownObject(f"unknown cluster '{name}'")
    members = w.snapshot.in_cluster(cluster.id)
    if members and not cascade:
        # cluster-2022.slt's wording. (materialized-views-2022.slt, from a later Materialize,
        # expects "…indexes, sinks, materialized views, or replicas" for the same case.)
        raise DependentObjects("cannot drop cluster with active indexes or sinks")
    # A materialized view whose default index lives here goes with the cluster.
    mat_views = [w.snapshot.item(i.on_id) for i in members
                 if i.kind == INDEX and i.is_default_index and i.on_id is not None
                 and w.snapshot.item(i.on_id).kind == MATERIALIZED_VIEW
                 and f'IN CLUSTER {normalize.quoted(cluster.name)} AS'
                 in w.snapshot.item(i.on_id).create_sql]
    if members:
        _drop(w, members + mat_views, cascade=True)
    w.delete_cluster(cluster.id)
    return []


# -- renames -------------------------------------------------------------------


def rename(store: Store, stmt: ast.RenameObject) -> Notices:
    """ALTER … RENAME TO: the item keeps its ids; stored SQL that names it is rewritten."""
    kind_sql = stmt.args["kind"]
    new = stmt.args["to"].name
    with store.write() as w:
        item = w.snapshot.resolve(stmt.this.name)
        wanted = _DROP_KIND[kind_sql]
        if item.kind != wanted:
            raise WrongObjectType(
                f"{item.qualified_name} is not a {_DROP_KIND_WORD[wanted]}",
                hint=f"Use ALTER {item.kind_word.upper()} to rename a {item.kind_word}.")
        _check_new_name(w.snapshot, new)
        old_ref = normalize.sql(normalize.qualified(item.name))
        new_ref = normalize.sql(normalize.qualified(new))
        for other in w.snapshot.items:
            create_sql = other.create_sql.replace(old_ref, new_ref)
            if other.id == item.id and item.kind == INDEX:
                # An index's own name is not schema-qualified in its CREATE INDEX.
                old_head = f"CREATE INDEX {normalize.quoted(item.name)} "
                if create_sql.startswith(old_head):
                    create_sql = (f"CREATE INDEX {normalize.quoted(new)} "
                                  f"{create_sql[len(old_head):]}")
            definition = (other.definition.replace(old_ref, new_ref)
                          if other.definition else None)
            if other.id == item.id or create_sql != other.create_sql:
                w.rename_item(other.id, new if other.id == item.id else None, create_sql,
                              definition)
    return []


# -- comments ------------------------------------------------------------------

_COMMENT_KINDS = {"TABLE": TABLE, "VIEW": VIEW, "MATERIALIZED VIEW": MATERIALIZED_VIEW,
                  "INDEX": INDEX, "SINK": SINK}


def comment(store: Store, stmt: exp.Comment) -> Notices:
    """COMMENT ON {TABLE|VIEW|MATERIALIZED VIEW|INDEX|SINK|COLUMN} … IS '…'."""
    kind = str(stmt.args.get("kind") or "").upper()
    value = stmt.args.get("expression")
    text = None if value is None or isinstance(value, exp.Null) else value.name
    with store.write() as w:
        if kind == "COLUMN":
            column = stmt.this
            item = w.snapshot.resolve(column.table)
            names = [c.name for c in item.columns]
            if column.name not in names:
                raise UnknownObject(f'column "{column.name}" of relation "{item.name}" '
                                    "does not exist")
            w.set_comment(item.id, names.index(column.name) + 1, text)
        elif kind in _COMMENT_KINDS:
            item = w.snapshot.resolve(stmt.this.name)
            if item.kind != _COMMENT_KINDS[kind]:
                raise WrongObjectType(f"{item.qualified_name} is not a {kind.lower()}")
            w.set_comment(item.id, 0, text)
        else:
            raise Unsupported(f"COMMENT ON {kind} is not supported")
    return []


# -- system settings -------------------------------------------------------------


def set_system(store: Store, name: str, value: str | None) -> Notices:
    with store.write() as w:
        w.set_setting(name, value)
    return []
