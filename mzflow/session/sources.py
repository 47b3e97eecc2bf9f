"""Sources in a session: CREATE SOURCE, each cluster tick's step, and refused writes.

A source's step n is what its cluster's n-th tick adds (step 0, its snapshot, is
committed at creation): a load generator's rows for step n (sources/loadgen.py), or a
landing folder's new files (session/copy_folder.py, each file once). Each table's
commit of a generator step carries the txn id ``(source-<id>, n)`` and each file its
identity, so a step retried after a crash lands once. The last step done is a small
file beside the tables (``paths.source_progress``), written after the step's commits:
a crash before it repeats the step, which then commits nothing twice. A tick given a
time (an Airflow run's) records it, so the same run retried advances no further.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from mzflow.catalog import names, normalize
from mzflow.catalog.ddl.sources import Outputs, create_source
from mzflow.catalog.model import Column, Item, Snapshot
from mzflow.errors import Error, WrongObjectType
from mzflow.session.result import Result
from mzflow.sql import ast
from mzflow.sql.parse import parse_one
from mzflow.storage import landing, paths
from mzflow.storage.errors import StorageError
from mzflow.storage.files import BadFile

if TYPE_CHECKING:
    from mzflow.session.connection import Connection
    from mzflow.sources.files import FilesSpec

log = logging.getLogger("mzflow.sources")

# The statements that write a table, and Materialize's verb for refusing each.
_VERBS: dict[type, str] = {exp.Insert: "insert into", exp.Update: "update",
                           exp.Delete: "delete from", exp.Copy: "copy into"}


def create(conn: Connection, stmt: ast.CreateSource) -> Result:
    """Create the source and its tables, then commit its step 0."""
    outputs: Outputs
    if stmt.args.get("generator") is not None:
        from mzflow.sources import loadgen

        gen = loadgen.of(stmt)
        single = len(gen.tables) == 1
        outputs = [(None if single else table, tuple(Column(c, t) for c, t in cols))
                   for table, cols in gen.tables.items()]
    else:
        outputs = [(None, _file_columns(conn, stmt))]
    notices, source = create_source(conn.store, stmt, conn.variable("cluster"), outputs,
                                    conn._create_shard)
    if source is not None:
        notices += advance(conn, source, None)
    return Result(status="CREATE SOURCE", notices=notices)


def _file_columns(conn: Connection, stmt: ast.CreateSource) -> tuple[Column, ...]:
    from mzflow.catalog.ddl.tables import _column_def
    from mzflow.sources import files

    spec = files.of(stmt)
    written = stmt.args.get("columns")
    if written:
        return tuple(_column_def(c, stmt.this.name) for c in written)
    found = landing.matching(spec.folder, spec.pattern)
    if not found:
        raise Error(f"cannot infer the columns of source \"{stmt.this.name}\": no file in "
                    f"'{spec.folder}' matches", hint="add a column list, or a first file")
    try:
        schema = files.file_schema(found[0].path, spec)
    except (OSError, ValueError) as e:
        raise BadFile(f'could not read the columns of "{found[0].path}": '
                      f"{str(e).splitlines()[0]}") from None
    return tuple(Column(f.name, files.sql_type(f.type)) for f in schema)


def advance_all(conn: Connection, cluster: str | None, tick: int | None) -> None:
    """One step of every source in ``cluster`` (None: every cluster): a cluster's tick
    starts with its sources, so the indexes it then ticks see the new rows."""
    snap = conn.store.snapshot()
    cluster_id = snap.cluster_by_name(cluster).id if cluster is not None else None
    for source in [i for i in snap.items if i.is_source]:
        if cluster_id is None or source.cluster_id == cluster_id:
            advance(conn, source, tick)


def advance(conn: Connection, source: Item, tick: int | None) -> list[str]:
    """Commit the source's next step; a tick already recorded (its time) is a no-op."""
    progress = _progress(conn, source)
    if tick is not None and progress.get("tick") == tick:
        return []
    step = progress["step"] + 1 if "step" in progress else 0
    stmt = parse_one(source.create_sql)
    assert isinstance(stmt, ast.CreateSource)
    snap = conn.store.snapshot()
    tables = snap.tables_of(source.id)
    notices: list[str] = []
    if stmt.args.get("generator") is not None:
        from mzflow.sources import feed, loadgen

        gen = loadgen.of(stmt)
        by_output = {t: normalize.of_item(i) for t, i in
                     _outputs(gen.tables, tables, source).items()}
        feed.advance(conn.writes, source.id, gen, by_output, step)
    else:
        from mzflow.sources import files

        notices = _load_files(conn, snap, tables[0], files.of(stmt))
    _write_progress(conn, source, {"step": step, "tick": tick})
    log.info("source %s: step %d", source.qualified_name, step)
    return notices


def _outputs(outputs: dict[str, Any], tables: list[Item], source: Item) -> dict[str, Item]:
    if len(outputs) == 1:
        return {next(iter(outputs)): tables[0]}
    return {t.name: t for t in tables}


def _load_files(conn: Connection, snap: Snapshot, table: Item, spec: FilesSpec
                ) -> list[str]:
    """The folder's new files, each once (COPY's machinery). A file with a column the
    table lacks adds it first (SCHEMA EVOLUTION = 'add columns'), else fails alone."""
    from mzflow.session.copy_folder import copy_folder
    from mzflow.sources import files

    done = landing.loaded(conn.config.warehouse, table.id)
    new = [f for f in landing.matching(spec.folder, spec.pattern) if f.identity not in done]
    notices: list[str] = []
    run: list[landing.LandedFile] = []
    columns = {c.name for c in table.columns}

    def extra(f: landing.LandedFile) -> list[Any]:
        try:
            return [c for c in files.file_schema(f.path, spec) if c.name not in columns]
        except (OSError, ValueError):
            return []  # unreadable: the load reports it as the file's error

    def load(batch: list[landing.LandedFile]) -> None:
        if not batch:
            return
        name = normalize.of_item(conn.store.snapshot().item(table.id))

        def screen(f: landing.LandedFile) -> Error | None:
            more = extra(f)
            if not more:
                return None
            return BadFile(f'file "{f.path}" has column "{more[0].name}", which table '
                           f'"{table.name}" of source "{spec.folder}" does not have',
                           hint="WITH (SCHEMA EVOLUTION = 'add columns') adds new columns")

        result = copy_folder(conn.writes, name, spec.folder,
                             {**spec.copy_options(), "pattern": spec.pattern}, listed=batch,
                             screen=None if spec.add_columns else screen)
        notices.extend(result.notices)

    for f in new:
        added = extra(f) if spec.add_columns else []
        if added:
            load(run)
            run = []
            for field in added:
                # ADD COLUMN's own version pinning: dependents keep reading the old one.
                conn.execute(f"ALTER TABLE {normalize.sql(normalize.of_item(table))} ADD "
                             f"COLUMN {names.quote_ident(field.name)} "
                             f"{files.sql_type(field.type)}")
                columns.add(field.name)
        run.append(f)
    load(run)
    return notices


def refuse_write(snap: Snapshot, stmt: exp.Expr) -> None:
    """A source's tables are written by its cluster only. Materialize refuses writes to
    a source as ``cannot insert into source '…'``; that exact text is in neither the
    conformance corpus nor the docs we have, so the wording follows its pattern for
    other read-only objects (``cannot insert into view '…'``)."""
    verb = _VERBS.get(type(stmt))
    target = stmt.this
    if verb is None or target is None:
        return
    if isinstance(target, exp.Schema):  # INSERT INTO t (a, b)
        target = target.this
    if not isinstance(target, exp.Table):
        return
    try:
        item = names.find(snap, target)
    except Error:
        return  # the write's own checks say what is wrong with the name
    source = snap.source_of(item) if item is not None else None
    if item is not None and source is not None:
        raise WrongObjectType(
            f"cannot {verb} source '{item.qualified_name}'",
            detail=None if source.id == item.id else
            f"its rows come from source '{source.qualified_name}'")


def _progress(conn: Connection, source: Item) -> dict[str, Any]:
    path = paths.source_progress(conn.config.warehouse, source.id)
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return {}


def _write_progress(conn: Connection, source: Item, progress: dict[str, Any]) -> None:
    path = paths.source_progress(conn.config.warehouse, source.id)
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(progress))
        os.replace(tmp, path)  # atomic: a reader sees the old step or the new one
    except OSError as e:  # a full disk: the step is not recorded, and runs again
        tmp.unlink(missing_ok=True)
        raise StorageError(f"could not record the progress of source "
                           f"{source.qualified_name}: {e.strerror or e}") from e
