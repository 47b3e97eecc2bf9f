"""OpenLineage for mzflow's operators: what a tick or a sink export read and wrote.

Inputs are the tables the object reads, views inlined (``plan/inline.py``), each at
the time the tick read it (mzflow's tables keep their history by time: the time names
the version); outputs are the maintained index (named as its Asset,
``graph.asset_uri``) or the sink's target files. Column lineage traces each output
column through the bound, inlined plan with sqlglot's ``lineage``. Runs in the worker
after the task, reading the catalog only (no Spark).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mzflow.airflow.uris import SCHEME
from mzflow.catalog.model import Item, Snapshot


@dataclass(frozen=True)
class Lineage:
    """Plain data, so it is testable without OpenLineage: dataset names are
    ``(namespace, name)``; ``columns`` maps each output column to its input columns
    ``(input dataset index, column)``."""

    inputs: list[tuple[str, str]]
    output: tuple[str, str]
    output_columns: list[tuple[str, str]]  # (name, type)
    columns: dict[str, list[tuple[int, str]]] = field(default_factory=dict)


def _table_name(snap: Snapshot, item: Item) -> tuple[str, str]:
    return f"{SCHEME}://{snap.installation_id}", f"{item.schema}.{item.name}"


Sources = dict[str, list[tuple[int, str]]]


def read_lineage(snap: Snapshot, relation: Item) -> tuple[list[Item], Sources]:
    """The tables ``relation`` (a view, materialized view or table) reads, and each of
    its columns' source columns as ``(index into the tables, column)``."""
    from sqlglot import exp
    from sqlglot.lineage import lineage
    from sqlglot.optimizer.scope import build_scope

    from mzflow.catalog.bind import bind, pinned
    from mzflow.plan.inline import inline_views
    from mzflow.sql.parse import parse_query

    if relation.definition is None:  # a table: itself, column for column
        return [relation], {c.name: [(0, c.name)] for c in relation.columns}
    query = inline_views(snap, bind(snap, parse_query(relation.definition)).query)
    tables: list[Item] = []
    for t in query.find_all(exp.Table):
        pin = pinned(t.name)
        if pin is not None and snap.item(pin[0]) not in tables:
            tables.append(snap.item(pin[0]))
    scope = build_scope(query)
    columns: dict[str, list[tuple[int, str]]] = {}
    for column, projection in zip(relation.columns, query.selects, strict=False):
        node = lineage(projection.alias_or_name, query, {}, scope=scope, trim_selects=False)
        found: list[tuple[int, str]] = []
        for n in node.walk():
            pin = pinned(n.source.name) if isinstance(n.source, exp.Table) else None
            if pin is None or n.downstream:
                continue
            source = (tables.index(snap.item(pin[0])), n.name.rpartition(".")[2])
            if source not in found:
                found.append(source)
        columns[column.name] = found
    return tables, columns


def of_index(snap: Snapshot, index_name: str) -> Lineage:
    """A tick of ``index_name``: its object's tables in, the index (its Asset) out."""
    from mzflow.airflow.graph import asset_uri
    from mzflow.airflow.uris import openlineage_name
    from mzflow.catalog import names

    index = names.find(snap, index_name)
    assert index is not None and index.on_id is not None, index_name
    on = snap.item(index.on_id)
    tables, columns = read_lineage(snap, on)
    return Lineage(inputs=[_table_name(snap, t) for t in tables],
                   output=openlineage_name(asset_uri(snap.installation_id, index)),
                   output_columns=[(c.name, c.type) for c in on.columns], columns=columns)


def of_sink(snap: Snapshot, sink_name: str) -> Lineage:
    """A sink's export: its source's tables in, its target folder out (a ``file``
    dataset, as OpenLineage names local paths)."""
    from mzflow.catalog import names
    from mzflow.catalog import sinks as catalog_sinks

    item = names.find(snap, sink_name)
    assert item is not None, sink_name
    spec = catalog_sinks.spec(item)
    source = snap.item(spec.source_id)
    if source.kind == "index":
        assert source.on_id is not None
        source = snap.item(source.on_id)
    tables, columns = read_lineage(snap, source)
    return Lineage(inputs=[_table_name(snap, t) for t in tables],
                   output=("file", spec.path),
                   output_columns=[(c.name, c.type) for c in source.columns], columns=columns)


def operator_lineage(found: Lineage, read_at: int | None, version: int | None,
                     rows: int | None) -> Any:
    """``found`` as the OpenLineage provider's ``OperatorLineage``."""
    from airflow.providers.common.compat.openlineage.facet import (
        ColumnLineageDatasetFacet,
        Fields,
        InputDataset,
        InputField,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.generated.dataset_version_dataset import (
        DatasetVersionDatasetFacet,
    )

    def versioned(v: int | None) -> dict[str, Any]:
        return {} if v is None else {"version": DatasetVersionDatasetFacet(datasetVersion=str(v))}

    inputs = [InputDataset(namespace=ns, name=name, facets=versioned(read_at))
              for ns, name in found.inputs]
    facets: dict[str, Any] = {
        "schema": SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=n, type=t)
                                             for n, t in found.output_columns]),
        "columnLineage": ColumnLineageDatasetFacet(fields={
            out: Fields(inputFields=[InputField(namespace=found.inputs[i][0],
                                                name=found.inputs[i][1], field=col)
                                     for i, col in sources],
                        transformationDescription="", transformationType="")
            for out, sources in found.columns.items() if sources}),
        **versioned(version),
    }
    stats: dict[str, Any] = ({} if rows is None else
             {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows)})
    output = OutputDataset(namespace=found.output[0], name=found.output[1], facets=facets,
                           outputFacets=stats)
    return OperatorLineage(inputs=inputs, outputs=[output])


def snapshot(home: str, catalog_url: str | None) -> Snapshot:
    from mzflow import config
    from mzflow.catalog.store import Store

    store = Store(config.load(home, catalog_url).catalog_url)
    try:
        return store.snapshot()
    finally:
        store.close()
