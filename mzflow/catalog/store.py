"""The durable catalog: SQLite by default, any SQLAlchemy URL (PostgreSQL) in production.

Every DDL statement is one transaction (:meth:`Store.write`) that re-reads the
catalog inside the transaction, checks, writes, and bumps ``catalog_version``.
Sessions cache a :class:`Snapshot` and reload it only when that counter moved,
which is how two sessions on one home see each other's DDL at the cost of one
tiny query per statement; on SQLite, of one pragma while nothing commits
(data_version.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from mzflow import caches
from mzflow.catalog import data_version, default_privileges, migrations, roles
from mzflow.catalog.model import (
    Cluster,
    Column,
    Expectation,
    IndexKey,
    Item,
    Projection,
    Schema,
    Snapshot,
)
from mzflow.errors import CatalogError

# Snapshots loaded by any store of this process, by catalog (URL and installation id)
# and version: a new session (a server's login) finds the catalog it opens loaded. A
# version names the catalog's content, so one store's load serves every other's.
_LOADED = caches.lru("catalog.snapshots", 16)


class Store:
    def __init__(self, url: str):
        self.url = url
        try:
            self.engine = _make_engine(url)
            migrations.upgrade(self.engine)
        except sa.exc.SQLAlchemyError as e:
            raise CatalogError(f"cannot open catalog at {url}: {e}") from None
        self._snapshot: Snapshot | None = None
        # SQLite's commit counter, and the snapshot known current at its value.
        self._watch = data_version.watch(self.engine)
        self._fresh: tuple[tuple[int, int], Snapshot] | None = None
        # The role DDL acts as: what it creates, this role owns (catalog/roles.py).
        self.role_id = roles.MATERIALIZE_ID
        # Run first under every write lock: recovery that must happen before any writer
        # can advance read_ts (a quarantine left half-written by a killed writer).
        self.on_lock: list[Callable[[], None]] = []

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self.engine.dispose()

    @property
    def watched(self) -> bool:
        """Whether :meth:`snapshot` costs one pragma while nothing commits (SQLite)."""
        return self._watch is not None

    # -- reads -----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The current catalog, reloaded only if another writer changed it."""
        # Read before the rows below: a commit in between moves it again, and the next
        # call reads them again.
        mark = self._watch.read() if self._watch is not None else None
        fresh = self._fresh
        if mark is not None and fresh is not None and fresh[0] == mark:
            return fresh[1]
        with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                # _load is several SELECTs: under READ COMMITTED a concurrent DDL could
                # commit between them (an item without its columns). One snapshot for all.
                conn.execution_options(isolation_level="REPEATABLE READ")
            version = _catalog_version(conn)
            read_ts = _meta_int(conn, "read_ts")
            if self._snapshot is None or self._snapshot.version != version:
                self._snapshot = _load_shared(self.url, conn, version)
            if self._snapshot.read_ts != read_ts:
                self._snapshot = dataclasses.replace(self._snapshot, read_ts=read_ts)
            snap = self._snapshot
        if mark is not None:
            self._fresh = (mark, snap)
        return snap

    def expectation_results(self) -> list[tuple[object, ...]]:
        t = migrations.expectation_results
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(
                sa.select(t.c.ts, t.c.object_id, t.c.expectation, t.c.statement,
                          t.c.rows_evaluated, t.c.unexpected, t.c.action, t.c.outcome,
                          t.c.sample).order_by(t.c.id))]

    def expectation_runs(self) -> list[tuple[int, str, str, str]]:
        """(ts, object id, statement, GE report JSON) of every validated batch."""
        t = migrations.expectation_runs
        with self.engine.connect() as conn:
            return [(r.ts, r.object_id, r.statement, r.report) for r in conn.execute(
                sa.select(t).order_by(t.c.id))]

    def advance_read_ts(self, ts: int) -> int:
        """Declare every time up to ``ts`` complete. Taking the write lock first means no
        write with an earlier timestamp can still be in flight."""
        with migrations.begin_write(self.engine) as conn:
            for hook in self.on_lock:
                hook()
            current = _meta_int(conn, "read_ts")
            if ts > current:
                _set_meta(conn, "read_ts", ts)
                _set_meta(conn, "oracle_ts", max(ts, _meta_int(conn, "oracle_ts")))
            return max(ts, current)

    # -- writes ----------------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[Writer]:
        """One DDL transaction. Writers serialize (SQLite: BEGIN IMMEDIATE)."""
        with migrations.begin_write(self.engine) as conn:
            for hook in self.on_lock:
                hook()
            version = _catalog_version(conn)
            cached = self._snapshot
            # Under the lock the counter cannot move: an unchanged catalog needs no reload.
            if cached is not None and cached.version == version:
                snap = dataclasses.replace(cached, read_ts=_meta_int(conn, "read_ts"))
            else:
                snap = _load(conn, version)
            writer = Writer(conn, snap, self.role_id)
            yield writer
            if writer.dirty:
                conn.execute(
                    migrations.meta.update()
                    .where(migrations.meta.c.key == "catalog_version")
                    .values(value=str(version + 1))
                )
        if writer.dirty:
            self._snapshot = self._fresh = None


class Writer:
    """Mutations inside one DDL transaction; ``snapshot`` is the state it started from."""

    def __init__(self, conn: Connection, snapshot: Snapshot,
                 owner: str = roles.MATERIALIZE_ID):
        self.conn = conn
        self.snapshot = snapshot
        self.owner = owner  # the role that owns what this transaction creates
        self.dirty = False
        self.dropped: list[Item] = []  # items deleted in this transaction

    def reread(self) -> None:
        """``snapshot`` as this transaction has changed it so far (statements that run
        one after another in one transaction: ALTER … SWAP, session/transactions.py)."""
        self.snapshot = dataclasses.replace(_load(self.conn, self.snapshot.version),
                                            read_ts=self.snapshot.read_ts)

    def allocate_ts(self) -> int:
        """The next write timestamp: wall-clock milliseconds, never going backwards, and
        after every time this transaction has seen (an orphaned commit's included)."""
        ts = max(now_ms(), _meta_int(self.conn, "oracle_ts") + 1, self.snapshot.read_ts + 1)
        _set_meta(self.conn, "oracle_ts", ts)
        return ts

    def committed(self, ts: int) -> None:
        """The write at ``ts`` is durable: reads may now pick ``ts``."""
        _set_meta(self.conn, "read_ts", ts)

    def allocate_rowids(self, n: int) -> int:
        """First of ``n`` fresh row ids."""
        first = _meta_int(self.conn, "next_rowid_id")
        _set_meta(self.conn, "next_rowid_id", first + n)
        return first

    def set_since(self, item_id: str, since: int) -> None:
        self.conn.execute(migrations.items.update().where(migrations.items.c.id == item_id)
                          .values(since_ts=since))

    def add_column(self, item: Item, column: Column, global_id: str, create_sql: str) -> None:
        self.dirty = True
        m = migrations
        position = len(item.columns) + 1
        self.conn.execute(m.columns.insert().values(
            item_id=item.id, position=position, name=column.name, type=column.type,
            nullable=column.nullable, version_added=column.version_added))
        self.conn.execute(m.collection_ids.insert().values(
            item_id=item.id, global_id=global_id, version=column.version_added))
        self.conn.execute(m.items.update().where(m.items.c.id == item.id)
                          .values(global_id=global_id, create_sql=create_sql))

    def next_id(self, counter: str) -> int:
        t = migrations.meta
        key = f"next_{counter}_id"
        value = int(self.conn.execute(sa.select(t.c.value).where(t.c.key == key)).scalar_one())
        self.conn.execute(t.update().where(t.c.key == key).values(value=str(value + 1)))
        return value

    def insert_cluster(self, cluster: Cluster) -> None:
        self.dirty = True
        self.conn.execute(migrations.clusters.insert().values(
            id=cluster.id, name=cluster.name, virtual=cluster.virtual, size=cluster.size,
            spark=cluster.spark))
        roles.set_owner(self.conn, "cluster", str(cluster.id), self.owner)
        default_privileges.apply(self.conn, self.snapshot, ("cluster", str(cluster.id)),
                                 "cluster", self.owner, "UC")

    def update_cluster(self, cluster: Cluster) -> None:
        self.dirty = True
        self.conn.execute(migrations.clusters.update()
                          .where(migrations.clusters.c.id == cluster.id)
                          .values(virtual=cluster.virtual, size=cluster.size,
                                  spark=cluster.spark))

    def delete_cluster(self, cluster_id: int) -> None:
        self.dirty = True
        clusters = migrations.clusters
        self.conn.execute(clusters.delete().where(clusters.c.id == cluster_id))
        roles.forget(self.conn, "cluster", str(cluster_id))

    def swap_clusters(self, a: Cluster, b: Cluster) -> None:
        """Exchange two clusters' names (names are unique: one moves aside first)."""
        self.dirty = True
        t = migrations.clusters
        aside = f"\0swap-{a.id}"
        for cid, name in ((a.id, aside), (b.id, a.name), (a.id, b.name)):
            self.conn.execute(t.update().where(t.c.id == cid).values(name=name))

    def swap_schemas(self, a: Schema, b: Schema) -> None:
        """Exchange two schemas' names, and their items' (which name theirs by name)."""
        self.dirty = True
        s, i = migrations.schemas, migrations.items
        aside = f"\0swap-{a.id}"
        for sid, name in ((a.id, aside), (b.id, a.name), (a.id, b.name)):
            self.conn.execute(s.update().where(s.c.id == sid).values(name=name))
        for old, new in ((a.name, aside), (b.name, a.name), (aside, b.name)):
            self.conn.execute(i.update().where((i.c.database_name == a.database)
                                               & (i.c.schema_name == old))
                              .values(schema_name=new))

    def insert_schema(self, schema: Schema) -> None:
        self.dirty = True
        self.conn.execute(migrations.schemas.insert().values(
            id=schema.id, oid=schema.oid, database_name=schema.database, name=schema.name))
        default_privileges.apply(self.conn, self.snapshot, ("schema", schema.id), "schema",
                                 self.owner, "UC")

    def delete_schema(self, schema_id: str) -> None:
        self.dirty = True
        t = migrations.schemas
        self.conn.execute(t.delete().where(t.c.id == schema_id))
        self.set_object_comment("schema", schema_id, None)
        # its default privileges go with it (as PostgreSQL's and Materialize's do)
        d = migrations.default_privileges
        self.conn.execute(d.delete().where(d.c.schema_id == schema_id))

    def insert_item(self, item: Item, version: int = 0) -> None:
        self.dirty = True
        m = migrations
        self.conn.execute(m.items.insert().values(
            id=item.id, oid=item.oid, database_name=item.database, schema_name=item.schema,
            name=item.name, kind=item.kind, create_sql=item.create_sql,
            definition=item.definition, cluster_id=item.cluster_id, on_id=item.on_id,
            global_id=item.global_id, is_default_index=item.is_default_index,
            created_ts=item.created_ts, retain_history_ms=item.retain_history_ms,
            since_ts=item.since_ts,
        ))
        roles.set_owner(self.conn, "item", item.id, self.owner)
        default_privileges.apply_to_item(self.conn, self.snapshot, item, self.owner)
        self.conn.execute(m.collection_ids.insert().values(
            item_id=item.id, global_id=item.global_id, version=version))
        self._write_columns(item)
        for pos, key in enumerate(item.keys, start=1):
            self.conn.execute(m.index_keys.insert().values(
                index_id=item.id, position=pos, column_name=key.column,
                expression=key.expression))
        for dep in item.depends_on:
            self.conn.execute(m.dependencies.insert().values(item_id=item.id, depends_on=dep))
        for pos, col in enumerate(item.partition_by, start=1):
            self.conn.execute(m.partition_columns.insert().values(
                item_id=item.id, position=pos, column_name=col))

    def insert_projection(self, projection: Projection) -> None:
        self.dirty = True
        self.conn.execute(migrations.projections.insert().values(
            id=projection.id, table_id=projection.table_id, name=projection.name,
            query=projection.query, created_ts=projection.created_ts))

    def delete_projection(self, projection_id: str) -> None:
        self.dirty = True
        t = migrations.projections
        self.conn.execute(t.delete().where(t.c.id == projection_id))

    def insert_expectation(self, e: Expectation) -> None:
        self.dirty = True
        self.conn.execute(migrations.expectations.insert().values(
            id=e.id, item_id=e.item_id, name=e.name, kind=e.kind, definition=e.definition,
            args=e.args, action=e.action, created_ts=e.created_ts))

    def delete_expectation(self, expectation_id: str) -> None:
        self.dirty = True
        t = migrations.expectations
        self.conn.execute(t.delete().where(t.c.id == expectation_id))

    def record_results(self, rows: list[dict[str, object]],
                       runs: list[dict[str, object]] | None = None) -> None:
        """Expectation results, and GE's report of each validated batch (no catalog
        change: the snapshot does not hold them)."""
        if rows:
            self.conn.execute(migrations.expectation_results.insert(), rows)
        if runs:
            self.conn.execute(migrations.expectation_runs.insert(), runs)

    def _write_columns(self, item: Item) -> None:
        for pos, col in enumerate(item.columns, start=1):
            self.conn.execute(migrations.columns.insert().values(
                item_id=item.id, position=pos, name=col.name, type=col.type,
                nullable=col.nullable, version_added=col.version_added))

    def delete_item(self, item_id: str) -> None:
        self.dirty = True
        m = migrations
        for table, col in (
            (m.projections, m.projections.c.table_id),
            (m.expectations, m.expectations.c.item_id),
            (m.partition_columns, m.partition_columns.c.item_id),
            (m.comments, m.comments.c.item_id),
            (m.dependencies, m.dependencies.c.item_id),
            (m.index_keys, m.index_keys.c.index_id),
            (m.columns, m.columns.c.item_id),
            (m.collection_ids, m.collection_ids.c.item_id),
            (m.items, m.items.c.id),
        ):
            self.conn.execute(table.delete().where(col == item_id))
        roles.forget(self.conn, "item", item_id)

    def rename_item(self, item_id: str, name: str | None, create_sql: str,
                    definition: str | None) -> None:
        self.dirty = True
        values: dict[str, object] = {"create_sql": create_sql, "definition": definition}
        if name is not None:
            values["name"] = name
        self.conn.execute(migrations.items.update().where(migrations.items.c.id == item_id)
                          .values(**values))

    def set_comment(self, item_id: str, sub: int, text: str | None) -> None:
        self.dirty = True
        t = migrations.comments
        self.conn.execute(t.delete().where((t.c.item_id == item_id) & (t.c.sub == sub)))
        if text is not None:
            self.conn.execute(t.insert().values(item_id=item_id, sub=sub, comment=text))

    def set_object_comment(self, object_type: str, object_id: str, text: str | None) -> None:
        self.dirty = True
        t = migrations.object_comments
        self.conn.execute(t.delete().where((t.c.object_type == object_type)
                                           & (t.c.object_id == object_id)))
        if text is not None:
            self.conn.execute(t.insert().values(object_type=object_type, object_id=object_id,
                                                comment=text))

    def set_setting(self, name: str, value: str | None) -> None:
        self.dirty = True
        t = migrations.settings
        self.conn.execute(t.delete().where(t.c.name == name))
        if value is not None:
            self.conn.execute(t.insert().values(name=name, value=value))


# How long a SQLite writer waits for another's write lock before CatalogBusy.
BUSY_TIMEOUT_S = 30.0


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})

        # pysqlite's own transaction handling defers BEGIN; take the write lock up front
        # so that check-then-write DDL cannot interleave with another process.
        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("mzflow_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def now_ms() -> int:
    import pendulum

    return int(pendulum.now("UTC").timestamp() * 1000)


def _meta_int(conn: Connection, key: str) -> int:
    t = migrations.meta
    return int(conn.execute(sa.select(t.c.value).where(t.c.key == key)).scalar_one())


def _set_meta(conn: Connection, key: str, value: int) -> None:
    t = migrations.meta
    conn.execute(t.update().where(t.c.key == key).values(value=str(value)))


def _catalog_version(conn: Connection) -> int:
    t = migrations.meta
    return int(conn.execute(
        sa.select(t.c.value).where(t.c.key == "catalog_version")).scalar_one())


def _load_shared(url: str, conn: Connection, version: int) -> Snapshot:
    """The catalog at ``version``, loaded by this store or another of this process."""
    t = migrations.meta
    installation = conn.execute(
        sa.select(t.c.value).where(t.c.key == "installation_id")).scalar_one()
    key = (url, installation, version)
    found = _LOADED.get(key)
    if found is None:
        found = _LOADED[key] = _load(conn, version)
    return found


def _load(conn: Connection, version: int) -> Snapshot:
    m = migrations
    clusters = tuple(
        Cluster(id=r.id, name=r.name, virtual=bool(r.virtual), size=r.size, spark=r.spark)
        for r in conn.execute(sa.select(m.clusters).order_by(m.clusters.c.id))
    )
    columns: dict[str, list[Column]] = {}
    for r in conn.execute(sa.select(m.columns).order_by(m.columns.c.item_id,
                                                        m.columns.c.position)):
        columns.setdefault(r.item_id, []).append(
            Column(name=r.name, type=r.type, nullable=bool(r.nullable),
                   version_added=r.version_added))
    keys: dict[str, list[IndexKey]] = {}
    for r in conn.execute(sa.select(m.index_keys).order_by(m.index_keys.c.index_id,
                                                           m.index_keys.c.position)):
        keys.setdefault(r.index_id, []).append(IndexKey(r.column_name, r.expression))
    partitions: dict[str, list[str]] = {}
    for r in conn.execute(sa.select(m.partition_columns).order_by(
            m.partition_columns.c.item_id, m.partition_columns.c.position)):
        partitions.setdefault(r.item_id, []).append(r.column_name)
    deps: dict[str, list[str]] = {}
    for r in conn.execute(sa.select(m.dependencies)):
        deps.setdefault(r.item_id, []).append(r.depends_on)
    items = tuple(
        Item(
            id=r.id, global_id=r.global_id, name=r.name, kind=r.kind, create_sql=r.create_sql,
            schema=r.schema_name, database=r.database_name,
            columns=tuple(columns.get(r.id, ())), definition=r.definition,
            cluster_id=r.cluster_id, on_id=r.on_id, keys=tuple(keys.get(r.id, ())),
            depends_on=tuple(sorted(deps.get(r.id, ()))),
            is_default_index=bool(r.is_default_index), oid=r.oid, created_ts=r.created_ts,
            retain_history_ms=r.retain_history_ms, since_ts=r.since_ts,
            partition_by=tuple(partitions.get(r.id, ())),
        )
        for r in conn.execute(sa.select(m.items).order_by(m.items.c.oid))
    )
    settings = {r.name: r.value for r in conn.execute(sa.select(m.settings))}
    collection_ids = tuple(
        (r.item_id, r.global_id, r.version)
        for r in conn.execute(sa.select(m.collection_ids).order_by(
            m.collection_ids.c.item_id, m.collection_ids.c.version))
    )
    comments = tuple((r.item_id, r.sub, r.comment) for r in conn.execute(
        sa.select(m.comments).order_by(m.comments.c.item_id, m.comments.c.sub)))
    installation_id = conn.execute(
        sa.select(m.meta.c.value).where(m.meta.c.key == "installation_id")).scalar_one()
    schemas = tuple(Schema(id=r.id, oid=r.oid, name=r.name, database=r.database_name)
                    for r in conn.execute(sa.select(m.schemas).order_by(m.schemas.c.oid)))
    object_comments = tuple((r.object_type, r.object_id, r.comment) for r in conn.execute(
        sa.select(m.object_comments).order_by(m.object_comments.c.object_type,
                                              m.object_comments.c.object_id)))
    return Snapshot(**roles.load(conn), default_privileges=default_privileges.load(conn),
                    object_comments=object_comments,
                    version=version, clusters=clusters, items=items, settings=settings,
                    schemas=schemas,
                    collection_ids=collection_ids, installation_id=installation_id,
                    read_ts=_meta_int(conn, "read_ts"), comments=comments,
                    projections=tuple(
                        Projection(id=r.id, table_id=r.table_id, name=r.name, query=r.query,
                                   created_ts=r.created_ts)
                        for r in conn.execute(sa.select(m.projections).order_by(
                            m.projections.c.table_id, m.projections.c.created_ts,
                            m.projections.c.id))),
                    expectations=tuple(
                        Expectation(id=r.id, item_id=r.item_id, name=r.name, kind=r.kind,
                                    definition=r.definition, args=r.args, action=r.action,
                                    created_ts=r.created_ts)
                        for r in conn.execute(sa.select(m.expectations).order_by(
                            m.expectations.c.item_id, m.expectations.c.created_ts,
                            m.expectations.c.id))))
