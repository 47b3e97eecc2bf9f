"""What the protocol asks of the statement layer, and what a statement gives back: the
seam between ``protocol.py`` (messages) and ``statements.py`` (an mzflow session), so
that the protocol runs against a stand-in in tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Statement:
    """One statement of what a client sent. ``offset``: where its text starts in the
    client's string (error positions count from there). ``params``: the highest ``$n``
    it names (Bind must supply that many)."""

    text: str
    offset: int = 0
    params: int = 0
    copy: str | None = None  # "out": COPY (query) TO STDOUT, text is the query; "in"
    tree: Any = None  # the parsed statement, when the statement layer keeps it


@dataclass
class Described:
    """A statement's shape before it runs: its parameters' and columns' type names."""

    params: list[str | None] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)


class CopyIn(Protocol):
    """Where COPY … FROM STDIN's data goes: ``write`` each CopyData, then ``finish``
    (CopyDone) runs the COPY, or ``abort`` (CopyFail, an error) drops it."""

    columns: int

    def write(self, data: bytes) -> None: ...
    def finish(self) -> Outcome: ...
    def abort(self) -> None: ...


@dataclass
class Outcome:
    """A statement's result as the protocol sends it. ``rows`` is consumed once, in
    batches (a SUBSCRIBE's waits between them); ``status`` is the command tag, or a
    function of the rows sent (COPY's count is known only at the end)."""

    status: str = ""
    columns: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    rows: Iterable[Sequence[Any]] = ()
    notices: list[str] = field(default_factory=list)
    copy_out: bool = False
    copy_in: CopyIn | None = None
    empty: bool = False  # an empty query: EmptyQueryResponse

    def tag(self, sent: int) -> str:
        return f"COPY {sent}" if self.copy_out else self.status


class Backend(Protocol):
    """One client's statements (``statements.Session``)."""

    @property
    def transaction_status(self) -> str: ...  # ReadyForQuery's byte: I, T or E

    def startup(self, params: dict[str, str]) -> list[str]: ...
    def parameters(self) -> dict[str, str]: ...
    def changed_parameters(self) -> dict[str, str]: ...
    def split(self, sql: str) -> list[Statement]: ...
    def describe(self, statement: Statement, param_types: Sequence[str | None]
                 ) -> Described: ...
    def run(self, statement: Statement, params: Sequence[Any],
            param_types: Sequence[str | None]) -> Outcome: ...
    def running(self) -> AbstractContextManager[None]: ...
    def check_cancelled(self) -> None: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...


class Closed(Exception):
    """The client went away (EOF, a reset): nothing more can be sent."""


class Wire(Protocol):
    peer: str  # the client's address, for logs and the login throttle
    unix: bool  # a Unix socket: trust is allowed there
    tls_available: bool
    tls_active: bool

    def recv(self, n: int) -> bytes: ...  # exactly n bytes, or Closed
    def send(self, data: bytes) -> None: ...  # all of it, or Closed
    def start_tls(self) -> None: ...  # after 'S' was sent
    def sleep(self, seconds: float) -> None: ...
