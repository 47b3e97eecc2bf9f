"""mzflow: Materialize-style maintained SQL views on Spark, Delta Lake and Airflow.

>>> import mzflow
>>> conn = mzflow.connect("/tmp/mzflow-example")        # doctest: +SKIP
>>> conn.execute("CREATE CLUSTER etl SIZE 'small'")     # doctest: +SKIP
>>> conn.execute("SHOW CLUSTERS").rows                  # doctest: +SKIP
[('default',), ('etl',)]

Importing mzflow is cheap: no Spark, no Delta, no Airflow until a statement needs them.
"""

from mzflow.errors import (
    CatalogError,
    DependentObjects,
    DuplicateObject,
    Error,
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
from mzflow.runtime.session import Connection, Result, connect

__version__ = "0.1.0"

__all__ = [
    "CatalogError",
    "Connection",
    "DependentObjects",
    "DuplicateObject",
    "Error",
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
