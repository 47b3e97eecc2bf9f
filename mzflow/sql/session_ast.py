"""Syntax nodes of the session's own statements: transaction control and cursors.

Kept apart from ``ast.py`` (the catalog's statements): they change no catalog object,
only the state of one connection (``session/transactions.py``, ``session/cursors.py``).
"""

from __future__ import annotations

from sqlglot import exp


class StartTransaction(exp.Expression):
    """``BEGIN`` / ``START TRANSACTION`` with its modes. ``access`` is ``READ ONLY``,
    ``READ WRITE`` or None; ``isolation`` the level as written, or None."""

    arg_types = {"access": False, "isolation": False}


class EndTransaction(exp.Expression):
    """``COMMIT`` / ``END`` (``kind`` COMMIT) or ``ROLLBACK`` / ``ABORT`` (``ROLLBACK``);
    ``chain`` is set for ``AND CHAIN``."""

    arg_types = {"kind": True, "chain": False}


class Declare(exp.Expression):
    """``DECLARE name CURSOR [WITHOUT HOLD] FOR <SELECT | SUBSCRIBE …>``."""

    arg_types = {"this": True, "query": True}


class Fetch(exp.Expression):
    """``FETCH [FORWARD] [n | ALL] [FROM | IN] name [WITH (TIMEOUT = …)]``. ``count`` is
    None for ALL; ``options`` as in other option lists."""

    arg_types = {"this": True, "count": False, "options": False}


class Close(exp.Expression):
    """``CLOSE name`` (``this``), or ``CLOSE ALL`` (``this`` None)."""

    arg_types = {"this": False}


class Savepoint(exp.Expression):
    """``SAVEPOINT s``, ``RELEASE [SAVEPOINT] s``, ``ROLLBACK TO [SAVEPOINT] s`` (kind)."""

    arg_types = {"this": True, "kind": True}
