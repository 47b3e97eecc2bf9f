"""Great Expectations' Data Docs (``mzflow quality docs``), and the per-object summary
of the Airflow plugin's page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mzflow.catalog.ddl import expectations as ddl
from mzflow.catalog.model import TABLE, Snapshot
from mzflow.quality.validate import ge_of
from mzflow.storage import paths


def build_docs(snap: Snapshot, runs: list[tuple[int, str, str, str]], folder: Path) -> Path:
    """GE's Data Docs site under ``folder``: one suite per object with expectations (as
    they stand) and every recorded validation of a batch. Returns the site's index."""
    import datetime as dt

    import great_expectations as gx
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    folder.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="file", project_root_dir=str(folder))
    names = {i.id: i.name for i in snap.items}
    for item in snap.items:
        found = snap.expectations_on(item.id)
        if found:
            ctx.suites.add_or_update(gx.ExpectationSuite(
                name=item.name, expectations=[ge_of(e, i) for i, e in enumerate(found)]))
    for ts, object_id, statement, report in runs:
        doc = json.loads(report)
        name = names.get(object_id, object_id)  # a dropped object: its id
        when = dt.datetime.fromtimestamp(ts / 1000, dt.UTC)
        run = RunIdentifier(run_name=statement.replace(" ", "_"), run_time=when)
        result = ExpectationSuiteValidationResult(
            results=[ExpectationValidationResult(**r) for r in doc.get("results", [])],
            suite_name=name, success=bool(doc.get("success")),
            statistics=doc.get("statistics"),
            meta={**(doc.get("meta") or {}), "run_id": run, "mzflow_time": ts})
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(name=name),
            run_id=run, batch_identifier=f"{name}-{ts}")
        ctx.validation_results_store.set(key, result)
    ctx.build_data_docs()
    return folder / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


# -- a summary per object, for the Airflow plugin ----------------------------------------


def summary(snap: Snapshot, warehouse: Path, results: list[tuple[Any, ...]]
            ) -> list[dict[str, Any]]:
    """Per object with expectations: its expectations, the batches validated, the rows
    that failed, the statements or ticks rejected (FAIL), the rows quarantined, and the
    rows its quarantine table holds now (delta-rs statistics: no Spark)."""
    out = []
    for item in snap.items:
        found = snap.expectations_on(item.id)
        if not found:
            continue
        mine = [r for r in results if r[1] == item.id]  # (ts, object_id, …) rows
        quarantine = snap.find(ddl.quarantine_name(item.name), item.schema)
        held = None
        if quarantine is not None and quarantine.kind == TABLE:
            from deltalake import DeltaTable

            adds = pa.table(DeltaTable(str(paths.table(warehouse, quarantine.id)))
                            .get_add_actions(flatten=True))  # arro3 → pyarrow
            held = int(pc.sum(adds.column("num_records")).as_py() or 0) if adds.num_rows else 0
        out.append({"object": item.name, "expectations": len(found),
                    "batches": len({(r[0], r[3]) for r in mine}),
                    "failed_rows": sum(int(r[5]) for r in mine),
                    "rejected": len({(r[0], r[3]) for r in mine if r[7] == ddl.FAIL}),
                    "quarantined_rows": sum(int(r[5]) for r in mine
                                            if r[7] == ddl.QUARANTINE),
                    "in_quarantine": held})
    return out
