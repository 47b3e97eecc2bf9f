"""What a sink is: its options, read back from its stored ``CREATE SINK`` statement.

The catalog stores the statement with every choice made explicit (cluster,
qualified source); this module is the one place that turns it into a
``SinkSpec`` and checks its options, so the DDL, the runtime and Airflow's DAG
files agree on defaults. It imports no engine: Airflow parses DAG files with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from mzflow.catalog import schedules
from mzflow.catalog.model import SINK, Item, Snapshot
from mzflow.errors import InvalidOption, UnknownObject
from mzflow.sql import ast

FORMATS = ("PARQUET", "CSV", "JSON", "DELTA")
ENVELOPES = ("APPEND", "UPSERT", "DEBEZIUM")
OPTIONS = ("ENVELOPE", "SCHEDULE", "TIMEZONE", "SNAPSHOT", "KEY")
DEFAULT_SCHEDULE = "@hourly"
DEFAULT_TIMEZONE = "UTC"
EXTENSIONS = {"PARQUET": "parquet", "CSV": "csv", "JSON": "jsonl", "DELTA": ""}


@dataclass(frozen=True)
class SinkSpec:
    id: str
    name: str  # unqualified: file names and DAG ids use it
    qualified_name: str
    cluster_id: int
    source_id: str
    format: str
    path: str
    envelope: str
    key: tuple[str, ...]
    schedule: str
    timezone: str
    snapshot: bool
    start_ts: int  # the sink's as-of: its snapshot time, and where its changes begin


def options(stmt: ast.CreateSink, columns: tuple[str, ...] | None = None
            ) -> dict[str, object]:
    """The checked options of ``stmt``, defaults filled in. ``columns``: the source's,
    to check KEY against (None: a stored statement, checked when it was created)."""
    fmt = stmt.args["into"].name.upper()
    if fmt not in FORMATS:
        raise InvalidOption(f"unknown sink format {fmt}",
                            hint=f"valid formats are {', '.join(FORMATS)}")
    out: dict[str, object] = {"format": fmt, "envelope": "APPEND", "key": (),
                              "schedule": DEFAULT_SCHEDULE, "timezone": DEFAULT_TIMEZONE,
                              "snapshot": True}
    for opt in stmt.args.get("options") or []:
        value = opt.args.get("value")
        if opt.name not in OPTIONS:
            raise InvalidOption(f'unexpected sink option "{opt.name}"',
                                hint=f"valid options are {', '.join(OPTIONS)}")
        if opt.name == "ENVELOPE":
            envelope = _word(value)
            if envelope not in ENVELOPES:
                raise InvalidOption(f"invalid ENVELOPE {envelope or '(none)'}",
                                    hint=f"valid envelopes are {', '.join(ENVELOPES)}")
            out["envelope"] = envelope
        elif opt.name == "KEY":
            names = value.expressions if isinstance(value, exp.Tuple) else [value]
            key = tuple(_name(v) for v in names if v is not None)
            missing = [k for k in key if columns is not None and k not in columns]
            if missing or not key:
                raise UnknownObject(f'column "{missing[0]}" does not exist' if missing else
                                    "KEY needs at least one column")
            out["key"] = key
        elif opt.name == "SCHEDULE":
            out["schedule"] = _text(value, "SCHEDULE")
        elif opt.name == "TIMEZONE":
            out["timezone"] = _text(value, "TIMEZONE")
        elif opt.name == "SNAPSHOT":
            out["snapshot"] = flag(value, "SNAPSHOT")
    if out["envelope"] == "UPSERT" and not out["key"]:
        # Materialize asks for the key of an upsert sink the same way.
        raise InvalidOption("ENVELOPE UPSERT requires a KEY",
                            hint="add KEY = (<column>, ...) to the WITH options")
    schedules.check(str(out["schedule"]), str(out["timezone"]))
    return out


def spec(item: Item) -> SinkSpec:
    from mzflow.sql.parse import parse

    assert item.kind == SINK and item.cluster_id is not None and item.on_id is not None
    stmt = parse(item.create_sql)[0]
    assert isinstance(stmt, ast.CreateSink)
    opts = options(stmt)
    return SinkSpec(id=item.id, name=item.name, qualified_name=item.qualified_name,
                    cluster_id=item.cluster_id, source_id=item.on_id,
                    format=str(opts["format"]), path=stmt.args["path"].name,
                    envelope=str(opts["envelope"]), key=tuple(opts["key"]),  # type: ignore
                    schedule=str(opts["schedule"]), timezone=str(opts["timezone"]),
                    snapshot=bool(opts["snapshot"]), start_ts=item.created_ts or 0)


def specs(snap: Snapshot) -> list[SinkSpec]:
    return [spec(i) for i in snap.items if i.kind == SINK]


def _name(value: exp.Expr) -> str:
    return value.name if isinstance(value, exp.Identifier | exp.Column | exp.Literal) else (
        value.sql())


def _word(value: exp.Expr | None) -> str:
    return _name(value).upper() if value is not None else ""


def _text(value: exp.Expr | None, option: str) -> str:
    if not isinstance(value, exp.Literal) or not value.is_string:
        raise InvalidOption(f"{option} takes a string, as in {option} = "
                            + ("'@hourly'" if option == "SCHEDULE" else "'Europe/Berlin'"))
    return str(value.this)


def flag(value: exp.Expr | None, option: str) -> bool:
    if value is None:
        return True
    if isinstance(value, exp.Boolean):
        return bool(value.this)
    word = _word(value).lower()
    if word in ("true", "on", "1"):
        return True
    if word in ("false", "off", "0"):
        return False
    raise InvalidOption(f"{option} takes true or false, not {value.sql()}")
