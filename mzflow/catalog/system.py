"""The ``mz_*`` system tables, computed from a catalog snapshot.

They are plain rows in memory: DDL, SHOW and catalog queries never need Spark.
Some columns are *hidden*: selectable by name but left out of ``SELECT *``,
like PostgreSQL's system columns. That keeps ``SELECT * FROM mz_clusters``
shaped as Materialize's cluster design prints it, ``(id, name)``, while
``virtual``, ``size`` and ``spark`` are still there for whoever asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from mzflow.catalog import frontiers, normalize, sizes
from mzflow.catalog.exprtypes import display_name
from mzflow.catalog.model import (
    INDEX,
    MATERIALIZED_VIEW,
    RELATION_KINDS,
    SINK,
    TABLE,
    VIEW,
    Column,
    Item,
    Snapshot,
)

SCHEMA_ID = "u3"  # materialize.public, as Materialize numbers it
Row = tuple[object, ...]


@dataclass(frozen=True)
class SystemTable:
    name: str
    columns: tuple[Column, ...]
    hidden: tuple[Column, ...]
    rows: Callable[[Snapshot], list[Row]]  # each row: visible values, then hidden ones

    @property
    def all_columns(self) -> tuple[Column, ...]:
        return self.columns + self.hidden


def _cols(spec: str) -> tuple[Column, ...]:
    """``"name type [null]"`` pairs separated by commas."""
    out = []
    for part in spec.split(","):
        words = part.split()
        nullable = words[-1] == "null"
        if nullable:
            words = words[:-1]
        out.append(Column(words[0], " ".join(words[1:]), nullable=nullable))
    return tuple(out)


def _cluster_name(snap: Snapshot, cluster_id: int | None) -> str | None:
    cluster = snap.cluster(cluster_id)
    return cluster.name if cluster else None


def materialized_view_cluster(snap: Snapshot, mv: Item) -> int | None:
    """A materialized view lives where its default index lives (the cluster design)."""
    for idx in snap.indexes_on(mv.id):
        if idx.is_default_index:
            return idx.cluster_id
    return None


def _definition(item: Item) -> str:
    return f"{normalize.humanize(item.definition)};" if item.definition else ""


def _clusters(snap: Snapshot) -> list[Row]:
    out: list[Row] = []
    for c in snap.clusters:
        size = sizes.of_cluster(c.virtual, c.size)
        out.append((c.id, c.name, c.virtual, c.size, size.pool_slots, c.spark))
    return out


def _replica_rows(snap: Snapshot) -> list[Row]:
    return [(f"r{c.id}", "r1", c.id, None if c.virtual else c.size or sizes.DEFAULT_SIZE,
             None, None, None, None) for c in snap.clusters]


def _index_rows(snap: Snapshot) -> list[Row]:
    return [(i.id, i.oid, i.name, i.on_id, i.cluster_id) for i in snap.items if i.kind == INDEX]


def _sink_rows(snap: Snapshot) -> list[Row]:
    return [(i.id, i.oid, SCHEMA_ID, i.name, i.on_id, i.cluster_id)
            for i in snap.items if i.kind == SINK]


def _kind_rows(kind: str) -> Callable[[Snapshot], list[Row]]:
    def rows(snap: Snapshot) -> list[Row]:
        out: list[Row] = []
        for i in snap.items:
            if i.kind != kind:
                continue
            if kind == VIEW:
                out.append((i.id, i.oid, SCHEMA_ID, i.name, _definition(i)))
            elif kind == MATERIALIZED_VIEW:
                out.append((i.id, i.oid, SCHEMA_ID, i.name,
                            materialized_view_cluster(snap, i), _definition(i)))
            else:
                out.append((i.id, i.oid, SCHEMA_ID, i.name))
        return out

    return rows


def _column_rows(snap: Snapshot) -> list[Row]:
    return [
        (i.id, c.name, pos, c.nullable, display_name(c.type))
        for i in snap.items if i.kind in RELATION_KINDS
        for pos, c in enumerate(i.columns, start=1)
    ]


def _object_rows(snap: Snapshot) -> list[Row]:
    return [(i.id, i.oid, SCHEMA_ID, i.name, i.kind) for i in snap.items]


def _collection_rows(snap: Snapshot) -> list[Row]:
    return [(item_id, global_id, version) for item_id, global_id, version in snap.collection_ids]


def _frontier_rows(snap: Snapshot) -> list[Row]:
    return [(i.id, frontiers.since(i, snap), frontiers.upper(snap))
            for i in snap.items if i.kind == TABLE]


def _comment_rows(snap: Snapshot) -> list[Row]:
    kinds = {i.id: i.kind for i in snap.items}
    return [(item_id, kinds.get(item_id), sub or None, text)
            for item_id, sub, text in snap.comments]


def projection_kind(query: str) -> str:
    """``aggregate`` (GROUP BY or aggregates) or ``sorted``, from the SELECT's text."""
    from mzflow.sql.parse import parse

    select = parse(query)[0]
    grouped = select.args.get("group") is not None or select.find(exp.AggFunc) is not None
    return "aggregate" if grouped else "sorted"


def _projection_rows(snap: Snapshot) -> list[Row]:
    return [(p.id, p.table_id, p.name, projection_kind(p.query), p.query, None, None, None,
             None, None) for p in snap.projections]


def _expectation_rows(snap: Snapshot) -> list[Row]:
    return [(e.id, e.item_id, e.name, e.kind, e.definition, e.args, e.action)
            for e in snap.expectations]


TABLES: dict[str, SystemTable] = {
    t.name: t
    for t in (
        SystemTable("mz_clusters", _cols("id bigint, name text"),
                    _cols("virtual boolean, size text null, pool_slots integer, spark text null"),
                    _clusters),
        SystemTable("mz_indexes",
                    _cols("id text, oid integer, name text, on_id text, cluster_id bigint"),
                    (), _index_rows),
        SystemTable("mz_sinks",
                    _cols("id text, oid integer, schema_id text, name text, on_id text, "
                          "cluster_id bigint null"), (), _sink_rows),
        SystemTable("mz_tables", _cols("id text, oid integer, schema_id text, name text"), (),
                    _kind_rows(TABLE)),
        SystemTable("mz_views",
                    _cols("id text, oid integer, schema_id text, name text, definition text"),
                    (), _kind_rows(VIEW)),
        SystemTable("mz_materialized_views",
                    _cols("id text, oid integer, schema_id text, name text, "
                          "cluster_id bigint null, definition text"), (),
                    _kind_rows(MATERIALIZED_VIEW)),
        SystemTable("mz_columns",
                    _cols("id text, name text, position bigint, nullable boolean, type text"),
                    (), _column_rows),
        SystemTable("mz_objects",
                    _cols("id text, oid integer, schema_id text, name text, type text"), (),
                    _object_rows),
        SystemTable("mz_frontiers",
                    _cols("object_id text, read_frontier bigint, write_frontier bigint"), (),
                    _frontier_rows),
        # Rows come from storage, not the catalog: maintain/arrangements.py fills them
        # in, as a read source (read/sources.py; a catalog-only reader sees none).
        SystemTable("mz_arrangements",
                    _cols("id text, object_id text, cluster_id bigint, key text, "
                          "rows bigint null, bytes bigint null, files bigint null, "
                          "records_read_last_tick bigint null"), (), lambda snap: []),
        # An arrangement held in a ticking process's memory (maintain/hot.py), as its
        # last tick left it: Materialize's mz_arrangement_sizes, per arrangement.
        SystemTable("mz_arrangement_sizes",
                    _cols("object_id text, cluster_id bigint, key text, records bigint, "
                          "batches bigint, size bigint, "
                          "hydration_seconds double precision null"), (), lambda snap: []),
        # Projections: the catalog's part here, their storage's in projections/manage.py.
        SystemTable("mz_projections",
                    _cols("id text, table_id text, name text, kind text, definition text, "
                          "parts bigint null, rows bigint null, bytes bigint null, "
                          "write_rows bigint null, write_seconds double precision null"), (),
                    _projection_rows),
        SystemTable("mz_projection_history",
                    _cols("projection_id text, operation text, parts bigint, rows bigint, "
                          "bytes bigint, seconds double precision, "
                          "table_version bigint null, occurred_at_ms bigint null"), (),
                    lambda snap: []),
        SystemTable("mz_expectations",
                    _cols("id text, object_id text, name text, kind text, definition text, "
                          "arguments text, action text"), (), _expectation_rows),
        # Rows kept by the catalog store outside the snapshot: a read source fills them
        # (read/sources.py, registered by session/wiring.py).
        SystemTable("mz_expectation_results",
                    _cols("occurred_at_ms bigint, object_id text, expectation text, "
                          "statement text, rows_evaluated bigint, unexpected bigint, "
                          "action text, outcome text, sample text"), (), lambda snap: []),
        # A cluster's one "replica": where its ticks run (clusters/servers.py
        # fills endpoint, state and times; a catalog-only reader sees NULLs).
        SystemTable("mz_cluster_replicas",
                    _cols("id text, name text, cluster_id bigint, size text null"),
                    _cols("endpoint text null, state text null, "
                          "started_at timestamp with time zone null, "
                          "last_used timestamp with time zone null"), _replica_rows),
        # Freshness, read from the index shards' tick commits: maintain/freshness.py.
        SystemTable("mz_wallclock_lag_history",
                    _cols("object_id text, lag interval, occurred_at timestamp with time zone"),
                    (), lambda snap: []),
        SystemTable("mz_hydration_statuses",
                    _cols("object_id text, hydrated boolean, hydration_time interval null"),
                    (), lambda snap: []),
        # Read holds (catalog/holds.py), kept by the catalog store outside the snapshot:
        # a read source fills them in (read/sources.py). Expired holds stay listed
        # until a compaction drops them.
        SystemTable("mz_read_holds",
                    _cols("object_id text, hold_id text, holder text, read_time bigint, "
                          "pid integer, host text, "
                          "acquired_at timestamp with time zone, "
                          "expires_at timestamp with time zone"), (), lambda snap: []),
        SystemTable("mz_comments",
                    _cols("id text, object_type text, object_sub integer null, comment text"),
                    (), _comment_rows),
        SystemTable("mz_collection_ids", _cols("item_id text, global_id text, version integer"),
                    (), _collection_rows),
    )
}


def lookup(name: str) -> SystemTable | None:
    return TABLES.get(name)
