"""What one statement returns to the caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    """What one statement returned. ``status`` is the command tag (``CREATE CLUSTER``)."""

    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    status: str = ""
    notices: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)  # a query's column types, as printed
