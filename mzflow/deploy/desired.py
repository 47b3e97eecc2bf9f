"""The catalog a file describes: its statements run, in order, against an empty scratch
catalog in a temporary home, so a statement is refused with exactly the error the DDL
gives (an unknown name, a type error, a duplicate), and what is left is a snapshot to
compare with the live catalog (diff.py).

The scratch session is cut off from everything live: its own SQLite catalog and
warehouse in a temporary folder (never ``MZFLOW_CATALOG_URL``), and no Airflow home, so
a CREATE CLUSTER syncs no pool. Statements that are not catalog DDL (INSERT, COPY,
SELECT) are not part of a plan: they are listed as ignored, not run.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field

from sqlglot import exp

from mzflow import config
from mzflow.catalog.model import Snapshot
from mzflow.errors import Error
from mzflow.sql import ast

# What a catalog file may hold: the DDL a plan compares.
DDL = (ast.CreateCluster, ast.CreateSchema, ast.CreateTable, ast.CreateView,
       ast.CreateIndex, ast.CreateSink, ast.AlterCluster, ast.AlterProjection,
       ast.AlterExpectation, ast.RenameObject, ast.DropObjects, exp.Alter, exp.Comment)


@dataclass(frozen=True)
class Refused:
    number: int  # the statement's place in the file, from 1
    sql: str
    code: str  # SQLSTATE
    message: str


Key = tuple[str, str, str]  # (kind, schema, name): "cluster" and "schema" have no schema


@dataclass
class Desired:
    snapshot: Snapshot
    statements: int
    refused: list[Refused] = field(default_factory=list)
    ignored: list[tuple[int, str]] = field(default_factory=list)  # (number, SQL)
    # Each statement that ran, in order, with the objects it created (apply.py runs
    # the ones whose objects it must create again).
    made: list[tuple[exp.Expr, list[Key]]] = field(default_factory=list)


def keys(snap: Snapshot) -> set[Key]:
    return ({(i.kind, i.schema, i.name) for i in snap.items}
            | {("cluster", "", c.name) for c in snap.clusters}
            | {("schema", "", s.name) for s in snap.schemas})


def text(stmt: exp.Expr) -> str:
    """The statement as SQL, without the file's comments."""
    from mzflow.sql.parse import DIALECT

    bare = stmt.copy()
    for node in bare.walk():  # the file's comments are not the statement
        node.comments = None
    try:
        return bare.sql(dialect=DIALECT)
    except Exception:  # a node our generator does not write back
        return type(stmt).__name__


def replay(source: str) -> Desired:
    """``source``'s catalog. A syntax error raises (ParseError names line and column):
    nothing of a file that does not parse can be planned."""
    from mzflow.session.connection import Connection
    from mzflow.sql.parse import parse

    statements = parse(source)
    with tempfile.TemporaryDirectory(prefix="mzflow-plan-") as tmp:
        scratch = dataclasses.replace(config.load(tmp, f"sqlite:///{tmp}/catalog.db"),
                                      airflow_home=None)
        conn = Connection(scratch)
        try:
            desired = Desired(conn.store.snapshot(), len(statements))
            for n, stmt in enumerate(statements, start=1):
                if not isinstance(stmt, DDL):
                    desired.ignored.append((n, text(stmt)))
                    continue
                before = keys(conn.store.snapshot())
                try:
                    conn.execute_parsed(stmt)
                except Error as e:
                    desired.refused.append(Refused(n, text(stmt), e.code, e.message))
                    continue
                desired.made.append((stmt, sorted(keys(conn.store.snapshot()) - before)))
            desired.snapshot = conn.store.snapshot()
        finally:
            conn.close()
    return desired
