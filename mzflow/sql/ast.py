"""Syntax nodes for the statements sqlglot's Materialize dialect does not know.

They are ordinary sqlglot expressions, so comments, positions, tree walks and
SQL generation work on them like on any built-in node. ``this`` is always the
object's name; options are lists of :class:`Option`.
"""

from __future__ import annotations

from sqlglot import exp


class Option(exp.Expression):
    """``NAME [=] value`` in an option list; ``value`` is None for flags (VIRTUAL)."""

    arg_types = {"this": True, "value": False}

    @property
    def name(self) -> str:
        return self.this.upper()


class CreateCluster(exp.Expression):
    arg_types = {"this": True, "options": False}


class AlterCluster(exp.Expression):
    # reset: the options are names to return to their defaults (``RESET (SPARK)``)
    arg_types = {"this": True, "options": False, "reset": False}


class CreateIndex(exp.Expression):
    # this: the index name (None for an unnamed index); on: a Table; keys: key expressions
    arg_types = {
        "this": False,
        "on": True,
        "keys": False,
        "cluster": False,
        "default": False,
        "exists": False,
        "options": False,
    }


class RefreshPolicy(exp.Expression):
    """A ``REFRESH`` option's value (catalog/refresh.py): Materialize's ``ON COMMIT``,
    ``AT CREATION``, ``AT <time>``, ``EVERY '<interval>' [ALIGNED TO <time>]``, and
    mzflow's ``ON SCHEDULE '<cron>' [TIMEZONE '<zone>']``. ``kind`` is one of those words
    (ON COMMIT, AT CREATION, AT, EVERY, ON SCHEDULE); the others are its arguments."""

    arg_types = {"kind": True, "at": False, "interval": False, "aligned_to": False,
                 "schedule": False, "timezone": False}


class CreateView(exp.Expression):
    arg_types = {
        "this": True,
        "query": True,
        "columns": False,
        "cluster": False,
        "materialized": False,
        "replace": False,
        "exists": False,
        "options": False,
    }


class CreateSource(exp.Expression):
    """``CREATE SOURCE … FROM LOAD GENERATOR kind [(options)] [FOR ALL TABLES]``, or
    ``CREATE SOURCE … FROM FILES '<folder>' (FORMAT …, PATTERN …) [(columns)]
    [WITH (SCHEMA EVOLUTION = 'add columns')]``."""

    # generator: COUNTER, AUCTION or TPCH (None: FROM FILES, then ``files`` is the
    # folder); all_tables: FOR ALL TABLES was written; columns: FROM FILES' column
    # definitions; with_options: the WITH (…) list
    arg_types = {
        "this": True,
        "generator": False,
        "files": False,
        "cluster": False,
        "exists": False,
        "options": False,
        "all_tables": False,
        "columns": False,
        "with_options": False,
    }


class CreateSink(exp.Expression):
    # into: the format name (PARQUET, CSV, JSON, DELTA); path: its target
    arg_types = {
        "this": True,
        "source": True,
        "into": True,
        "path": True,
        "cluster": False,
        "exists": False,
        "options": False,
    }


class CreateSchema(exp.Expression):
    # this: the schema's name; database: the database that qualifies it, if written
    arg_types = {"this": True, "database": False, "exists": False}


class DropObjects(exp.Expression):
    # kind: TABLE, VIEW, MATERIALIZED VIEW, INDEX, SINK, CLUSTER or SCHEMA
    arg_types = {"kind": True, "expressions": True, "exists": False, "cascade": False}


class Show(exp.Expression):
    """Every SHOW form. ``kind`` picks the form; the other args qualify it.

    kind is one of CLUSTERS, INDEXES, SINKS, SOURCES, TABLES, VIEWS, MATERIALIZED VIEWS,
    OBJECTS, COLUMNS, [EXTENDED] SCHEMAS, CREATE <object kind>, or VARIABLE (then
    ``this`` is its name).
    """

    arg_types = {
        "kind": True,
        "this": False,
        "on": False,
        "schema": False,
        "cluster": False,
        "like": False,
        "where": False,
        "role": False,  # SHOW PRIVILEGES … FOR <role>
    }


class SetVariable(exp.Expression):
    # value None means DEFAULT; system=True for ALTER SYSTEM SET
    arg_types = {"this": True, "value": False, "system": False}


class ResetVariable(exp.Expression):
    arg_types = {"this": True, "system": False}


class CreateTable(exp.Expression):
    # this: an exp.Schema (the name, its column definitions and Projection nodes);
    # partition_by: the Delta partition columns (identifiers)
    arg_types = {"this": True, "exists": False, "options": False, "partition_by": False}


class Projection(exp.Expression):
    """``PROJECTION p (SELECT …)``: a table's projection (ClickHouse's), in CREATE TABLE."""

    arg_types = {"this": True, "query": True}


class AlterProjection(exp.Expression):
    """``ALTER TABLE t {ADD|DROP|MATERIALIZE|CLEAR} PROJECTION …``.

    action: ADD, DROP, MATERIALIZE or CLEAR; query: ADD's SELECT; exists: IF [NOT]
    EXISTS; partition: ``IN PARTITION <value>`` of MATERIALIZE and CLEAR."""

    arg_types = {"this": True, "action": True, "name": True, "query": False,
                 "exists": False, "partition": False}


class Expectation(exp.Expression):
    """``CONSTRAINT c EXPECT (<boolean expression>) [ON VIOLATION <action>]`` or
    ``CONSTRAINT c EXPECT <great expectations type> (arg => value, …) [ON VIOLATION …]``.

    expression: the SQL check; ge_type and ge_args (Option nodes): a Great Expectations
    expectation attached by name; action: WARN, DROP ROW, QUARANTINE or FAIL (None: the
    default, WARN)."""

    arg_types = {"this": True, "expression": False, "ge_type": False, "ge_args": False,
                 "action": False}


class AlterExpectation(exp.Expression):
    """``ALTER TABLE t ADD CONSTRAINT c EXPECT …`` (expectation) or ``ALTER TABLE t DROP
    CONSTRAINT [IF EXISTS] c`` (name, exists)."""

    arg_types = {"this": True, "action": True, "expectation": False, "name": False,
                 "exists": False}


class VersionAdded(exp.Expression, exp.ColumnConstraintKind):
    """``VERSION ADDED n``: only ever in stored create_sql, never accepted from users."""

    arg_types = {"this": True}


class VersionedTable(exp.Table):
    """``[u1 AS "materialize"."public"."t" VERSION 0]``: a table pinned to one version."""

    # Not "version": sqlglot's Table uses that arg for time travel, and its parser resets
    # it (to nothing) after some tables, e.g. one followed by USING.
    arg_types = {**exp.Table.arg_types, "item_id": True, "pinned": True}


class AsOf(exp.Expression):
    """``<query> AS OF [AT LEAST] <time>``."""

    arg_types = {"this": True, "at": True, "at_least": False}


class RenameObject(exp.Expression):
    """``ALTER {TABLE|VIEW|MATERIALIZED VIEW|INDEX|SINK} x RENAME TO y``."""

    arg_types = {"kind": True, "this": True, "to": True}


class SwapObject(exp.Expression):
    """``ALTER {SCHEMA|CLUSTER} a SWAP WITH b``: two names exchanged atomically."""

    arg_types = {"kind": True, "this": True, "to": True}


class SwapObjects(exp.Expression):
    """A transaction's ALTER … SWAP statements, run together at COMMIT."""

    arg_types = {"expressions": True}


class Explain(exp.Expression):
    """``EXPLAIN [PLAN FOR] <query>`` or ``EXPLAIN [PLAN FOR] {VIEW|MATERIALIZED VIEW|INDEX} x``.

    ``kind`` is None for a query (then ``this`` is the query), else the object kind."""

    arg_types = {"this": True, "kind": False}


class Subscribe(exp.Expression):
    """``SUBSCRIBE [TO] <object> | (<select>) [WITH (…)] [AS OF [AT LEAST] t] [UP TO t]``.

    ``this`` is an object name (exp.Table) or a query."""

    arg_types = {"this": True, "options": False, "as_of": False, "at_least": False,
                 "up_to": False}


class GenerateSeries(exp.Expression, exp.Func):
    """``generate_series(start, stop [, step])`` as written: the step stays the
    expression it was (sqlglot's own node turns a string step into an interval, and
    fails on ``'1 day 2 hours'``). The binder resolves and coerces the arguments
    (``catalog/srf.py``); no engine renders the node itself, so one missed rewrite
    fails by name rather than running with another engine's semantics."""

    arg_types = {"expressions": True}  # any number: the binder checks the arity
    is_var_len_args = True
    _sql_names = ["GENERATE_SERIES"]


class RowsFrom(exp.Expression, exp.Func):
    """A bound set-returning FROM item: its calls run side by side, zipped to the
    longest (PostgreSQL's ``ROWS FROM (…)``, and how it runs several set-returning
    functions of one SELECT list). Always the ``this`` of an ``exp.Lateral`` whose
    alias names one column per call."""

    arg_types = {"expressions": True}
    is_var_len_args = True
    _sql_names = ["ROWS FROM"]


class RoleOption(exp.Expression):
    """A role attribute (``LOGIN``, ``NOSUPERUSER``…) or ``PASSWORD``, whose ``value`` is
    the password's string or NULL. The password lives only in this tree, in memory."""

    arg_types = {"this": True, "value": False}

    @property
    def name(self) -> str:
        return self.this.upper()


class CreateRole(exp.Expression):
    arg_types = {"this": True, "options": False}


class AlterRole(exp.Expression):
    arg_types = {"this": True, "options": False}


class DropRoles(exp.Expression):
    arg_types = {"expressions": True, "exists": False}


class GrantPrivileges(exp.Expression):
    """``GRANT|REVOKE <privileges> ON <kind> <targets> TO|FROM <roles>``.

    privileges: names (SELECT…), None for ALL; kind: TABLE, CLUSTER, SCHEMA, DATABASE
    or SYSTEM; expressions: the targets (exp.Table for tables and schemas, identifiers
    else; none for SYSTEM); roles: identifiers (unquoted ``public`` is PUBLIC)."""

    arg_types = {"privileges": False, "kind": True, "expressions": False, "roles": True,
                 "revoke": False}


class AlterDefaultPrivileges(exp.Expression):
    """``ALTER DEFAULT PRIVILEGES FOR ROLE r, … | FOR ALL ROLES [IN SCHEMA s, … | IN
    DATABASE d, …] GRANT|REVOKE <privileges> ON <kind> TO|FROM <roles>`` (Materialize's).

    roles: the creators (identifiers), None for ALL ROLES; schemas (exp.Table) or
    databases (identifiers): the scope, or neither; privileges: names, None for ALL;
    kind: TABLES, TYPES, SECRETS, CONNECTIONS, DATABASES, SCHEMAS or CLUSTERS;
    grantees: identifiers (unquoted ``public`` is PUBLIC)."""

    arg_types = {"roles": False, "schemas": False, "databases": False, "privileges": False,
                 "kind": True, "grantees": True, "revoke": False}


MZ_NODES = (
    AlterProjection,
    AlterExpectation,
    Subscribe,
    RenameObject,
    Explain,
    CreateTable,
    AsOf,
    CreateCluster,
    AlterCluster,
    CreateIndex,
    CreateView,
    CreateSink,
    CreateSource,
    DropObjects,
    Show,
    SetVariable,
    ResetVariable,
    RoleOption,
    CreateRole,
    AlterRole,
    DropRoles,
    GrantPrivileges,
    AlterDefaultPrivileges,
)
