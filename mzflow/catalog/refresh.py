"""Refresh policies: when the cluster's DAG ticks a materialized view or an index.

Materialize's options, in a materialized view's ``WITH (…)``:

- ``REFRESH ON COMMIT``, the default: the object follows every commit (today: every run
  of its cluster's DAG, and every strict serializable read's catch-up tick);
- ``REFRESH EVERY '<interval>' [ALIGNED TO <time>]``: at ``aligned + k * interval``;
  without ALIGNED TO, aligned to the CREATE (as Materialize fills it in);
- ``REFRESH AT { CREATION | <time> }``, any number of times;

and mzflow's own, for a batch scheduler, ``REFRESH ON SCHEDULE '<cron | @preset>'
[TIMEZONE '<Area/City>']`` (a sink's SCHEDULE and TIMEZONE, ``catalog/schedules.py``).
Materialize has no refresh option on indexes; mzflow takes the same options on
``CREATE INDEX``, since an index is ticked by its cluster's DAG like a view. A
materialized view's default index follows the view's policy.

A policy becomes a :class:`Schedule`, what Airflow runs the cluster's DAG on: cron
expressions in one time zone (EVERY, in UTC, and ON SCHEDULE), or a list of instants
(AT). An EVERY becomes crons exactly when its interval divides a day or is a week and
its phase is a whole minute; anything else is refused by name, since only Airflow's own
timetables are used (a DAG file then needs no plugin to be scheduled). ``AT CREATION``
adds the CREATE's time to a list of instants and nothing to crons: a cron DAG's first
scheduling runs its latest due point at once.

The objects of one cluster share its DAG, so they share one schedule: two objects whose
schedules differ *conflict* (ON COMMIT objects conflict with none; they tick on every run
of the DAG). A policy is checked when it is created (``check``) and read back from the
stored ``CREATE`` statement (``of_index``), as a sink's options are.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from sqlglot import exp

from mzflow import caches, values
from mzflow.catalog import intervals, schedules
from mzflow.catalog.model import INDEX, MATERIALIZED_VIEW, Item, Snapshot
from mzflow.errors import InvalidOption, InvalidTextRepresentation, Unsupported
from mzflow.sql import ast

ON_COMMIT = "ON COMMIT"
UTC = "UTC"
MINUTE_MS = 60_000
DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS

# Materialize's errors (src/sql/src/plan/statement/ddl.rs, plan/error.rs).
_BAD_AT = ("REFRESH AT argument must be an expression that can be simplified and/or cast "
           "to a constant whose type is mz_timestamp")
_BAD_ALIGNED = ("REFRESH EVERY ... ALIGNED TO argument must be an expression that can be "
                "simplified and/or cast to a constant whose type is mz_timestamp")
_TIME_TYPES = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ,
               exp.DataType.Type.TIMESTAMPLTZ)


@dataclass(frozen=True)
class Every:
    interval_ms: int
    aligned_ms: int
    text: str = dataclasses.field(default="", compare=False)  # the interval as written


@dataclass(frozen=True)
class Schedule:
    """What a cluster's DAG runs on: ``crons`` in ``timezone``, or, without crons, the
    instants ``ats`` (ms) plus the creation times of objects refreshed AT CREATION."""

    crons: tuple[str, ...] = ()
    timezone: str = UTC
    ats: tuple[int, ...] = ()

    def describe(self) -> str:
        """How the DAG runs: ``on cron '0 3 * * *' in UTC``, ``at <times>``."""
        if self.crons:
            return f"on cron {', '.join(repr(c) for c in self.crons)} in {self.timezone}"
        return "at " + (", ".join(_time_text(t) for t in self.ats) or "creation")


@dataclass(frozen=True)
class Policy:
    """One object's policy; none of the fields set: ON COMMIT."""

    everies: tuple[Every, ...] = ()
    ats: tuple[int, ...] = ()
    at_creation: bool = False
    crons: tuple[str, ...] = ()  # ON SCHEDULE, as written
    timezone: str = UTC  # of ON SCHEDULE

    @property
    def on_commit(self) -> bool:
        return not (self.everies or self.ats or self.at_creation or self.crons)

    def describe(self) -> str:
        """The policy as SQL: what EXPLAIN and the system tables show."""
        if self.on_commit:
            return ON_COMMIT
        parts = [f"EVERY '{e.text}' ALIGNED TO '{_time_text(e.aligned_ms)}'"
                 for e in self.everies]
        parts += [f"ON SCHEDULE '{c}' TIMEZONE '{self.timezone}'" for c in self.crons]
        parts += ["AT CREATION"] * self.at_creation + [f"AT '{_time_text(t)}'"
                                                       for t in self.ats]
        return ", ".join(parts)

    def schedule(self) -> Schedule | None:
        if self.on_commit:
            return None
        crons = [c for e in self.everies for c in every_crons(e)]
        crons += [schedules.cron(c) for c in self.crons]
        if crons:
            tz = self.timezone if self.crons else UTC
            return Schedule(crons=tuple(sorted(set(crons))), timezone=tz)
        return Schedule(ats=self.ats)


def check(options: list[ast.Option], now_ms: int) -> tuple[Policy, list[ast.Option]]:
    """The policy the ``REFRESH`` options of a CREATE give, and the options as stored:
    ALIGNED TO filled in, every time a UTC literal (``mz_now()``: the CREATE's time,
    ``now_ms``). Raises Materialize's errors, and mzflow's for what Airflow cannot run."""
    nodes = [o.args["value"] for o in options
             if o.name == "REFRESH" and isinstance(o.args.get("value"), ast.RefreshPolicy)]
    on_commits = sum(n.args["kind"] == ON_COMMIT for n in nodes)
    if on_commits > 1:
        raise InvalidOption("REFRESH ON COMMIT cannot be specified multiple times")
    if on_commits and len(nodes) > 1:
        raise InvalidOption("REFRESH ON COMMIT is not compatible with any of the other "
                            "REFRESH options")
    stored = []
    for node in nodes:
        node = node.copy()
        if node.args["kind"] == "AT":
            node.set("at", _literal(_instant(node.args["at"], now_ms, _BAD_AT)))
        elif node.args["kind"] == "EVERY":
            aligned = node.args.get("aligned_to")
            node.set("aligned_to", _literal(now_ms // MINUTE_MS * MINUTE_MS if aligned is None
                                            else _instant(aligned, now_ms, _BAD_ALIGNED)))
        stored.append(node)
    policy = _policy(stored)
    for every in policy.everies:
        every_crons(every)  # refuses what Airflow cannot run
    if policy.ats and (policy.everies or policy.crons):
        raise Unsupported(
            "REFRESH AT <time> together with REFRESH EVERY or REFRESH ON SCHEDULE is not "
            "supported", hint="a cluster's DAG runs on one Airflow timetable: list the times "
                              "alone, or pair a recurring policy with REFRESH AT CREATION")
    if policy.everies and policy.crons and policy.timezone != UTC:
        raise Unsupported("REFRESH EVERY (in UTC) together with REFRESH ON SCHEDULE in "
                          f"TIMEZONE '{policy.timezone}' is not supported",
                          hint="give the ON SCHEDULE crons TIMEZONE 'UTC'")
    return policy, [ast.Option(this="REFRESH", value=n) for n in stored]


def replace_policies(options: list[ast.Option], stored: list[ast.Option]
                     ) -> list[ast.Option]:
    """``options`` with their REFRESH policies replaced, in order, by ``check``'s."""
    rest = iter(stored)
    return [next(rest) if isinstance(o.args.get("value"), ast.RefreshPolicy) else o
            for o in options]


def _policy(nodes: Iterable[ast.RefreshPolicy]) -> Policy:
    """The policy of checked nodes, whose times are literals (``check``'s output)."""
    everies, ats, crons, zones, at_creation = [], [], [], set(), False
    for node in nodes:
        kind = node.args["kind"]
        if kind == "AT CREATION":
            at_creation = True
        elif kind == "AT":
            ats.append(_instant(node.args["at"], 0, _BAD_AT))
        elif kind == "EVERY":
            text = node.args["interval"].name
            aligned = _instant(node.args["aligned_to"], 0, _BAD_ALIGNED)
            everies.append(Every(_interval_ms(text), aligned, text))
        elif kind == "ON SCHEDULE":
            cron = node.args["schedule"].name
            tz = node.args.get("timezone")
            zone = tz.name if tz is not None else UTC
            schedules.check(cron, zone, what="REFRESH ON SCHEDULE")
            if len(schedules.cron(cron).split()) != 5:
                raise Unsupported(f"REFRESH ON SCHEDULE '{cron}' is not supported: Airflow "
                                  "schedules to the minute",
                                  hint="use five cron fields or a preset such as '@daily'")
            crons.append(cron)
            zones.add(zone)
    if len(zones) > 1:
        raise Unsupported("REFRESH ON SCHEDULE options in different time zones on one object "
                          "are not supported", hint="give them one TIMEZONE")
    return Policy(everies=tuple(dict.fromkeys(everies)), ats=tuple(sorted(set(ats))),
                  at_creation=at_creation, crons=tuple(dict.fromkeys(crons)),
                  timezone=zones.pop() if zones else UTC)


def _interval_ms(text: str) -> int:
    try:
        months, days, micros = intervals.parse_interval(text)
    except ValueError:
        raise InvalidTextRepresentation(
            f'invalid input syntax for type interval: "{text}"') from None
    total = days * 86_400_000_000 + micros
    if months * 30 * 86_400_000_000 + total <= 0:  # Materialize's: a month is 30 days
        shown = values.pg_text(dt.timedelta(microseconds=total), "interval")
        if months:
            word = "mon" if abs(months) == 1 else "mons"
            shown = f"{months} {word}" + (f" {shown}" if total else "")
        raise InvalidOption(f"REFRESH interval must be positive; got: {shown}")
    if months:
        raise InvalidOption("REFRESH interval must not involve units larger than days")
    if total % (MINUTE_MS * 1000):
        raise _not_cron(text)
    return total // 1000


def every_crons(every: Every) -> tuple[str, ...]:
    """The UTC cron expressions that fire exactly at ``aligned + k * interval``: for an
    interval that divides a day, one per minute-of-hour the points fall on; for a week,
    one. Anything else has no exact cron form and is refused."""
    step, phase = every.interval_ms, every.aligned_ms
    if step <= 0 or step % MINUTE_MS or not (DAY_MS % step == 0 or step == WEEK_MS):
        raise _not_cron(every.text)
    if phase % MINUTE_MS:
        raise Unsupported(f"REFRESH EVERY … ALIGNED TO '{_time_text(phase)}' is not "
                          "supported: it is not on a whole minute",
                          hint="Airflow schedules to the minute")
    if step == WEEK_MS:
        at = dt.datetime.fromtimestamp(phase / 1000, tz=dt.UTC)
        return (f"{at.minute} {at.hour} * * {(at.weekday() + 1) % 7}",)
    minutes = range((phase % step) // MINUTE_MS, 1440, step // MINUTE_MS)
    if step <= 3_600_000 and 3_600_000 % step == 0:
        return (f"{','.join(str(m) for m in minutes if m < 60)} * * * *",)
    hours_at: dict[int, list[int]] = {}
    for m in minutes:
        hours_at.setdefault(m % 60, []).append(m // 60)
    return tuple(f"{m} {','.join(map(str, hours))} * * *"
                 for m, hours in sorted(hours_at.items()))


def _not_cron(text: str) -> Unsupported:
    return Unsupported(
        f"REFRESH EVERY '{text}' is not supported: Airflow cannot run it on a fixed phase",
        hint="use whole minutes that divide a day ('15 minutes', '6 hours', '1 day') or "
             "'7 days', or REFRESH ON SCHEDULE '<cron>'")


def _instant(node: exp.Expr, now_ms: int, error: str) -> int:
    """A REFRESH time as Materialize casts it to mz_timestamp: a timestamp string (UTC
    unless it names an offset), milliseconds since the epoch, or ``mz_now()``."""
    if isinstance(node, exp.Cast) and (node.to.this in _TIME_TYPES
                                       or node.to.sql().lower() == "mz_timestamp"):
        node = node.this
    if isinstance(node, exp.Anonymous | exp.Func) and node.name.lower() == "mz_now" and (
            not node.expressions):
        return now_ms
    if isinstance(node, exp.Literal) and not node.is_string and node.name.isdigit():
        return int(node.name)
    if not isinstance(node, exp.Literal) or not node.is_string:
        raise InvalidOption(error, hint="Calling `mz_now()` is allowed.")
    try:
        when = dt.datetime.fromisoformat(node.name.strip())
    except ValueError:
        raise InvalidTextRepresentation(
            f'invalid input syntax for type mz_timestamp: "{node.name}"') from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _time_text(ms: int) -> str:
    text = values.pg_text(_utc(ms), "timestamp with time zone")
    assert text is not None
    return text


def _literal(ms: int) -> exp.Literal:
    return exp.Literal.string(_time_text(ms))


# -- reading policies back -------------------------------------------------------------

_POLICIES = caches.lru("catalog.refresh_policies", 1024)


def of_sql(create_sql: str) -> Policy:
    """The policy of a stored CREATE statement (its times already literals)."""
    if "REFRESH" not in create_sql.upper():
        return Policy()
    found = _POLICIES.get(create_sql)
    if found is None:
        from mzflow.sql.parse import parse_one

        stmt = parse_one(create_sql)
        found = _policy([o.args["value"] for o in stmt.args.get("options") or []
                         if isinstance(o.args.get("value"), ast.RefreshPolicy)])
        _POLICIES[create_sql] = found
    return found


def owner(snap: Snapshot, index: Item) -> Item:
    """Whose policy an index follows: its own if it names one; else a materialized
    view's default index follows its view."""
    assert index.kind == INDEX and index.on_id is not None
    on = snap.item(index.on_id)
    if index.is_default_index and on.kind == MATERIALIZED_VIEW and of_sql(
            index.create_sql).on_commit:
        return on
    return index


def of_index(snap: Snapshot, index: Item) -> Policy:
    return of_sql(owner(snap, index).create_sql)


def check_cluster(snap: Snapshot, cluster_id: int, what: str, policy: Policy,
                  skip: Iterable[str] = ()) -> None:
    """Refuse ``policy`` of the object ``what`` (``materialized view a.b.c``) in cluster
    ``cluster_id`` if its schedule differs from another object's there. ``skip``: ids of
    items the statement replaces (CREATE OR REPLACE)."""
    mine = policy.schedule()
    if mine is None:
        return
    skipped = set(skip)
    for index in snap.items:
        if index.kind != INDEX or index.cluster_id != cluster_id or index.id in skipped:
            continue
        other = owner(snap, index)
        theirs = of_sql(other.create_sql)
        schedule = theirs.schedule()
        if other.id in skipped or schedule in (None, mine):
            continue
        assert schedule is not None
        cluster = snap.cluster(cluster_id)
        raise InvalidOption(
            f"REFRESH policy of {what} conflicts with the REFRESH policy of "
            f"{other.kind_word} {other.qualified_name} in cluster "
            f'"{cluster.name if cluster else cluster_id}"',
            detail=f"{what} refreshes {policy.describe()} (runs {mine.describe()}); "
                   f"{other.kind_word} {other.qualified_name} refreshes {theirs.describe()} "
                   f"(runs {schedule.describe()})",
            hint="a cluster's objects share its Airflow DAG and so one schedule (ON COMMIT "
                 "objects aside): give them the same policy, or put one in another cluster")


# -- the system tables -------------------------------------------------------------------


def strategy_rows(snap: Snapshot) -> list[tuple[object, ...]]:
    """mz_internal.mz_materialized_view_refresh_strategies: Materialize's columns (one row
    per REFRESH option, ``on-commit`` for the default), then mzflow's ON SCHEDULE."""
    out: list[tuple[object, ...]] = []
    for mv in snap.items:
        if mv.kind != MATERIALIZED_VIEW:
            continue
        p = of_sql(mv.create_sql)
        if p.on_commit:
            out.append((mv.id, "on-commit", None, None, None, None, None))
        out += [(mv.id, "every", dt.timedelta(milliseconds=e.interval_ms), _utc(e.aligned_ms),
                 None, None, None) for e in p.everies]
        ats = list(p.ats) + ([mv.created_ts] if p.at_creation and mv.created_ts else [])
        out += [(mv.id, "at", None, None, _utc(t), None, None) for t in sorted(ats)]
        out += [(mv.id, "on-schedule", None, None, None, c, p.timezone) for c in p.crons]
    return out


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
