"""One error root for everything a user can cause.

Every error carries a stable code: the PostgreSQL SQLSTATE that Materialize
reports for the same condition, so clients that switch on SQLSTATE keep
working. Messages follow Materialize's wording (``unknown cluster 'bad'``).
"""

from __future__ import annotations


class Error(Exception):
    """Base of every error mzflow raises on purpose."""

    code = "XX000"  # internal_error

    def __init__(self, message: str, *, detail: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        parts = [self.message]
        if self.detail:
            parts.append(f"DETAIL: {self.detail}")
        if self.hint:
            parts.append(f"HINT: {self.hint}")
        return "\n".join(parts)


class ParseError(Error):
    """Malformed SQL. ``line`` and ``column`` are 1-based."""

    code = "42601"  # syntax_error

    def __init__(self, message: str, *, line: int, column: int, snippet: str = ""):
        super().__init__(f"{message} at line {line}, column {column}", detail=snippet or None)
        self.reason = message
        self.line = line
        self.column = column


class MalformedQuery(Error):
    """A query that parses but breaks a rule of SQL's grammar PostgreSQL checks after
    parsing (a UNION of different widths), reported as a syntax error."""

    code = "42601"  # syntax_error


class DuplicateAlias(Error):
    code = "42712"  # duplicate_alias


class UnknownObject(Error):
    """A name that does not resolve (cluster, table, view, index, sink, column)."""

    code = "42704"  # undefined_object


class UnknownColumn(UnknownObject):
    code = "42703"  # undefined_column


class UnknownRelation(UnknownObject):
    """A table, view or other relation named in a query that does not exist."""

    code = "42P01"  # undefined_table


class UnknownSchema(UnknownObject):
    code = "3F000"  # invalid_schema_name


class UnknownDatabase(UnknownObject):
    code = "3D000"  # invalid_catalog_name


class ReadOnlySchema(Error):
    """A create in, or a drop of, a schema only the system writes (pg_catalog…)."""

    code = "42501"  # insufficient_privilege


class UnknownFunction(UnknownObject):
    code = "42883"  # undefined_function


class DuplicateObject(Error):
    code = "42710"  # duplicate_object


class DuplicateSchema(DuplicateObject):
    code = "42P06"  # duplicate_schema


class InvalidOption(Error):
    """A bad option list: repeated, conflicting or unknown values."""

    code = "22023"  # invalid_parameter_value


class DependentObjects(Error):
    """DROP without CASCADE while other objects still depend on the target."""

    code = "2BP01"  # dependent_objects_still_exist


class WrongObjectType(Error):
    code = "42809"  # wrong_object_type


class TypeMismatch(Error):
    code = "42804"  # datatype_mismatch


class InvalidTextRepresentation(TypeMismatch):
    """Text that does not read as a value of its type (`invalid input syntax for …`)."""

    code = "22P02"  # invalid_text_representation


class GroupingError(Error):
    """An aggregate where none may stand, or a column neither grouped nor aggregated."""

    code = "42803"  # grouping_error


class WindowingError(Error):
    code = "42P20"  # windowing_error


class InvalidColumnReference(Error):
    code = "42P10"  # invalid_column_reference


class InvalidLimit(Error):
    code = "2201W"  # invalid_row_count_in_limit_clause


class InvalidOffset(Error):
    code = "2201X"  # invalid_row_count_in_result_offset_clause


class Unsupported(Error):
    """Valid SQL that mzflow does not implement yet; says what is missing."""

    code = "0A000"  # feature_not_supported


class InvalidDefinition(Error):
    code = "42P16"  # invalid_table_definition


class SparkFailure(Error):
    """Spark itself failed (a JVM or server that died, an unreachable endpoint): not the
    data's fault, so a tick raises it and never records it as the object's error."""

    code = "58000"  # system_error


class OutOfMemory(SparkFailure):
    """Spark ran out of memory: the message names the cluster and the setting to raise."""

    code = "53200"  # out_of_memory


class CatalogError(Error):
    """The catalog store itself is unusable (bad URL, newer schema than this code)."""

    code = "58000"  # system_error


class CatalogBusy(CatalogError):
    """Another writer held the catalog's write lock for longer than we wait: nothing was
    done, so the statement is safe to retry (with its idempotency key, if a write)."""

    code = "55P03"  # lock_not_available


class InsufficientPrivilege(Error):
    """A role may not do this (Materialize's RBAC: catalog/privileges.py)."""

    code = "42501"  # insufficient_privilege


class InvalidGrant(Error):
    """A privilege the object does not have (``GRANT INSERT ON <a view>``)."""

    code = "0LP01"  # invalid_grant_operation


class LoginRefused(Error):
    """A session for a role that does not exist or may not log in."""

    code = "28000"  # invalid_authorization_specification


class ReservedName(Error):
    """A name kept for the system (``PUBLIC``, ``mz_…``, ``pg_…`` roles)."""

    code = "42939"  # reserved_name


class ObjectInUse(Error):
    code = "55006"  # object_in_use


class ReadOnlyParameter(Error):
    """SET of a variable the server fixes (server_version, integer_datetimes…)."""

    code = "55P02"  # cant_change_runtime_param


class QueryCanceled(Error):
    """A statement stopped by the client (pgwire's CancelRequest)."""

    code = "57014"  # query_canceled


class SerializationFailure(Error):
    """A statement that read before the catalog's lock and found its table changed when
    it took it (a landing-folder COPY's batch): running it again succeeds."""

    code = "40001"  # serialization_failure
