"""mzflow: Materialize-style maintained SQL views on Spark, Delta Lake and Airflow.

>>> import mzflow
>>> conn = mzflow.connect("/tmp/mzflow-example")        # doctest: +SKIP
>>> conn.execute("CREATE CLUSTER etl SIZE 'small'")     # doctest: +SKIP
>>> conn.execute("SHOW CLUSTERS").rows                  # doctest: +SKIP
[('default',), ('etl',)]

Importing mzflow is cheap: no Spark, no Delta, no Airflow until a statement needs them.
"""

from typing import TYPE_CHECKING, Any

from mzflow.errors import (
    CatalogError,
    DependentObjects,
    DuplicateObject,
    Error,
    InsufficientPrivilege,
    InvalidDefinition,
    InvalidOption,
    InvalidTextRepresentation,
    ParseError,
    TypeMismatch,
    UnknownColumn,
    UnknownFunction,
    UnknownObject,
    UnknownRelation,
    Unsupported,
    WrongObjectType,
)

if TYPE_CHECKING:
    from mzflow.session.connection import Connection, Result, connect

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The session pulls in SQLAlchemy, pyarrow, sqlglot and the planner (about a second
    # on an idle machine): only when it is used, so `mzflow --version`, `--help` and a
    # DAG file's parse do not pay for it.
    if name in ("Connection", "Result", "connect"):
        from mzflow.session import connection as session

        return getattr(session, name)
    raise AttributeError(f"module 'mzflow' has no attribute {name!r}")

__all__ = [
    "CatalogError",
    "Connection",
    "DependentObjects",
    "DuplicateObject",
    "Error",
    "InsufficientPrivilege",
    "InvalidDefinition",
    "InvalidOption",
    "InvalidTextRepresentation",
    "ParseError",
    "Result",
    "TypeMismatch",
    "UnknownColumn",
    "UnknownFunction",
    "UnknownObject",
    "UnknownRelation",
    "Unsupported",
    "WrongObjectType",
    "__version__",
    "connect",
]
