"""Immutable catalog objects. A snapshot is what one statement sees."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from mzflow.errors import UnknownObject, UnknownSchema

DATABASE = "materialize"
SCHEMA = "public"

# Item kinds, as Materialize spells them in mz_objects.type.
TABLE = "table"
VIEW = "view"
MATERIALIZED_VIEW = "materialized-view"
INDEX = "index"
SINK = "sink"
# A multi-output source (mzflow/sources/): no relation itself; its data are tables whose
# ``on_id`` is its id. A single-output source (COUNTER, FILES) is its own relation, as in
# Materialize: a table whose ``on_id`` is its own id and whose create_sql is the
# CREATE SOURCE (``Item.is_source``).
SOURCE = "source"

KIND_WORDS = {
    TABLE: "table",
    VIEW: "view",
    MATERIALIZED_VIEW: "materialized view",
    INDEX: "index",
    SINK: "sink",
    SOURCE: "source",
}
RELATION_KINDS = (TABLE, VIEW, MATERIALIZED_VIEW)

# Every table row's hidden identity: UPDATE and DELETE find rows by it.
ROWID = "_mz_rowid"
# A partitioned table's Delta partition columns: a hidden key per PARTITION BY column
# (storage/partitions.py), so the column itself stays in the data files.
PARTITION_KEY_PREFIX = "_mz_partition_"


@dataclass(frozen=True)
class Cluster:
    id: int
    name: str
    virtual: bool = False
    size: str | None = None
    # A Spark Connect URL (``sc://host:port``) the cluster's ticks run against; None:
    # mzflow provides the Spark session itself.
    spark: str | None = None

    def __post_init__(self) -> None:
        if self.virtual and self.size is not None:
            raise ValueError("a cluster is either VIRTUAL or SIZEd, not both")
        if self.virtual and self.spark is not None:
            raise ValueError("a VIRTUAL cluster has no Spark endpoint of its own")


@dataclass(frozen=True)
class Schema:
    """A user schema of the one database. ``id`` as Materialize numbers them (``u3`` is
    ``public``); ``oid`` is its pg_namespace OID."""

    id: str
    oid: int
    name: str
    database: str = DATABASE


# Every catalog has it from its first migration; PostgreSQL gives public OID 2200 too.
PUBLIC = Schema("u3", 2200, SCHEMA)


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # SQL type name as Materialize prints it (integer, text, ...)
    nullable: bool = True
    version_added: int | None = None  # set for columns added by ALTER TABLE


@dataclass(frozen=True)
class IndexKey:
    column: str | None  # a plain column key
    expression: str | None  # an expression key (SQL text)

    def __post_init__(self) -> None:
        if (self.column is None) == (self.expression is None):
            raise ValueError("an index key is a column or an expression")


@dataclass(frozen=True)
class Projection:
    """A table's projection (ClickHouse's): a SELECT over the table alone, kept per data
    file by every write. ``query`` is its normalized SELECT without FROM; its name is
    unique per table only, so it is no catalog item."""

    id: str  # "p<n>": names its shard
    table_id: str
    name: str
    query: str
    created_ts: int | None = None


@dataclass(frozen=True)
class Item:
    """A named catalog object. ``id`` is its CatalogItemId; ``global_id`` the current version."""

    id: str
    global_id: str
    name: str
    kind: str
    create_sql: str
    schema: str = SCHEMA
    database: str = DATABASE
    columns: tuple[Column, ...] = ()
    definition: str | None = None  # the SELECT of a view, as written
    cluster_id: int | None = None  # indexes, sinks, sources, materialized views
    # indexes: indexed object; sinks: exported object; tables: the source feeding them
    on_id: str | None = None
    keys: tuple[IndexKey, ...] = ()  # indexes
    depends_on: tuple[str, ...] = ()  # item ids this one reads
    is_default_index: bool = False
    oid: int = 0
    created_ts: int | None = None  # the oracle time of the CREATE
    retain_history_ms: int | None = None  # None: the catalog default
    since_ts: int | None = None  # compaction applied up to here
    partition_by: tuple[str, ...] = ()  # tables: Delta partition columns

    @property
    def version(self) -> int:
        """A table's current version: 0, plus one per ADD COLUMN."""
        added = [c.version_added for c in self.columns if c.version_added is not None]
        return max(added, default=0)

    def columns_at(self, version: int) -> tuple[Column, ...]:
        return tuple(c for c in self.columns
                     if c.version_added is None or c.version_added <= version)

    def __post_init__(self) -> None:
        if self.kind not in KIND_WORDS:
            raise ValueError(f"unknown item kind {self.kind!r}")
        if self.kind in (INDEX, SINK) and self.on_id is None:
            raise ValueError(f"a {self.kind} needs the object it is on")

    @property
    def is_source(self) -> bool:
        return self.kind == SOURCE or (self.kind == TABLE and self.on_id == self.id)

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.schema}.{self.name}"

    @property
    def kind_word(self) -> str:
        return KIND_WORDS[self.kind]


@dataclass(frozen=True)
class Expectation:
    """A data-quality expectation on a table: a SQL check (``kind`` sql, ``definition``
    its boolean expression) or a Great Expectations expectation attached by name (``kind``
    ge, ``definition`` its type, ``args`` its arguments as JSON). ``action`` says what a
    failing row does: WARN, DROP ROW, QUARANTINE or FAIL."""

    id: str  # "e<n>"
    item_id: str
    name: str
    kind: str
    definition: str
    args: str
    action: str
    created_ts: int | None = None


@dataclass(frozen=True)
class Role:
    """A role (catalog/roles.py). ``verifier`` is the password's SCRAM-SHA-256 verifier
    in PostgreSQL's text form, never the password; None: the role has no password."""

    id: str  # "u<n>", as Materialize numbers user roles
    oid: int
    name: str
    inherit: bool = True
    login: bool = False
    superuser: bool = False
    verifier: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Grant:
    """Privileges ``grantee`` holds on one object (catalog/privileges.py), in
    Materialize's ACL letters (``r`` SELECT, ``a`` INSERT, ``w`` UPDATE, ``d`` DELETE,
    ``C`` CREATE, ``U`` USAGE, ``R``/``B``/``N`` CREATEROLE/CREATEDB/CREATECLUSTER).
    ``object_type`` is item, cluster, schema, database or system."""

    object_type: str
    object_id: str
    grantee: str  # a role id, or "p": PUBLIC
    grantor: str
    privileges: str


@dataclass(frozen=True)
class DefaultPrivilege:
    """ALTER DEFAULT PRIVILEGES: what ``grantee`` gets on each object of ``object_type``
    (table, schema, cluster, database) that ``role_id`` creates ("p": any role), in
    ``schema_id`` or ``database_id`` if given (catalog/default_privileges.py)."""

    role_id: str
    database_id: str | None
    schema_id: str | None
    object_type: str
    grantee: str
    privileges: str


@dataclass(frozen=True)
class Snapshot:
    """The whole catalog at one ``version`` (bumped by every DDL transaction)."""

    version: int
    clusters: tuple[Cluster, ...]
    items: tuple[Item, ...]
    settings: dict[str, str] = field(default_factory=dict)
    collection_ids: tuple[tuple[str, str, int], ...] = ()  # (item id, global id, version)
    installation_id: str = ""
    read_ts: int = 0  # every write at or before this time is committed
    comments: tuple[tuple[str, int, str], ...] = ()  # (item id, column position or 0, text)
    projections: tuple[Projection, ...] = ()
    expectations: tuple[Expectation, ...] = ()
    roles: tuple[Role, ...] = ()
    grants: tuple[Grant, ...] = ()
    owners: tuple[tuple[str, str, str], ...] = ()  # (object type, object id, role id)
    role_members: tuple[tuple[str, str, str], ...] = ()  # (role id, member id, grantor id)
    default_privileges: tuple[DefaultPrivilege, ...] = ()
    # (object type, object id, text) of objects that are not items: schemas'
    object_comments: tuple[tuple[str, str, str], ...] = ()
    schemas: tuple[Schema, ...] = (PUBLIC,)

    def schema_named(self, name: str) -> Schema | None:
        return next((s for s in self.schemas if s.name == name), None)

    def schema_id(self, name: str) -> str:
        """The id of a user schema ``name`` (mz_*.schema_id)."""
        found = self.schema_named(name)
        if found is None:
            raise UnknownSchema(f"unknown schema '{name}'")
        return found.id

    def in_schema(self, name: str) -> list[Item]:
        return [i for i in self.items if i.schema == name]

    def projections_on(self, table_id: str) -> list[Projection]:
        return [p for p in self.projections if p.table_id == table_id]

    def expectations_on(self, item_id: str) -> list[Expectation]:
        return [e for e in self.expectations if e.item_id == item_id]

    def comment(self, item_id: str, sub: int) -> str | None:
        return next((c for i, s, c in self.comments if i == item_id and s == sub), None)

    def cluster_by_name(self, name: str) -> Cluster:
        for c in self.clusters:
            if c.name == name:
                return c
        raise UnknownObject(f"unknown cluster '{name}'")

    def find_cluster(self, name: str) -> Cluster | None:
        return next((c for c in self.clusters if c.name == name), None)

    def cluster(self, cluster_id: int | None) -> Cluster | None:
        return next((c for c in self.clusters if c.id == cluster_id), None)

    def find(self, name: str, schema: str = SCHEMA) -> Item | None:
        for item in self.items:
            if item.name == name and item.schema == schema:
                return item
        return None

    def source_of(self, table: Item) -> Item | None:
        """The source feeding ``table``, if one does."""
        if table.kind != TABLE or table.on_id is None:
            return None
        return next((i for i in self.items if i.id == table.on_id), None)

    def tables_of(self, source_id: str) -> list[Item]:
        return [i for i in self.items if i.kind == TABLE and i.on_id == source_id]

    def item(self, item_id: str) -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise UnknownObject(f"unknown catalog item '{item_id}'")

    def resolve(self, name: str, schema: str = SCHEMA) -> Item:
        item = self.find(name, schema)
        if item is None:
            raise UnknownObject(f"unknown catalog item '{name}'")
        return item

    def dependents(self, item_id: str) -> Iterator[Item]:
        """Items that read ``item_id`` directly (indexes and sinks on it included)."""
        for item in self.items:
            if (item_id in item.depends_on or item.on_id == item_id) and item.id != item_id:
                yield item  # (a single-output source's on_id is its own id)

    def indexes_on(self, item_id: str) -> list[Item]:
        return [i for i in self.items if i.kind == INDEX and i.on_id == item_id]

    def in_cluster(self, cluster_id: int) -> list[Item]:
        return [i for i in self.items
                if i.kind in (INDEX, SINK, SOURCE) and i.cluster_id == cluster_id]
