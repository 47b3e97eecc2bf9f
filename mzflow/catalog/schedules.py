"""A sink's schedule: cron (or an @preset) in a time zone → data intervals.

Intervals are half-open ``[start, end)`` between consecutive cron points, taken in
the sink's time zone (pendulum), so an hourly schedule in Europe/Berlin has a
23- or 25-interval day at the DST changes and a daily one starts at local
midnight. The steps follow Airflow's ``CronDataIntervalTimetable`` exactly (see
``_step``; ``tests/test_airflow_sinks.py`` compares them across both DST changes),
so a run from the CLI and a run from Airflow name the same interval the same way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from mzflow.errors import InvalidOption

# Airflow's presets, as cron: croniter knows most but not all of them.
PRESETS = {
    "@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
}


def cron(schedule: str) -> str:
    return PRESETS.get(schedule.strip().lower(), schedule.strip())


def check(schedule: str, timezone: str, what: str = "SCHEDULE") -> None:
    """``what``: the option's name in the error (a sink's SCHEDULE, a REFRESH ON
    SCHEDULE)."""
    import pendulum
    from croniter import croniter

    if not croniter.is_valid(cron(schedule)):
        raise InvalidOption(f"invalid {what} '{schedule}'",
                            hint="use a cron expression such as '0 * * * *' or a preset "
                                 f"({', '.join(PRESETS)})")
    try:
        pendulum.timezone(timezone)
    except Exception:
        raise InvalidOption(f"invalid TIMEZONE '{timezone}'",
                            hint="use an IANA name such as 'UTC' or 'Europe/Berlin'") from None


def _local_naive(point: dt.datetime, timezone: str) -> tuple[Any, dt.datetime]:
    import pendulum

    local = pendulum.instance(point).in_timezone(pendulum.timezone(timezone))
    return local, dt.datetime(local.year, local.month, local.day, local.hour, local.minute,
                              local.second, local.microsecond)


def _step(schedule: str, timezone: str, point: dt.datetime, forward: bool) -> dt.datetime:
    """The cron point after (or before) ``point``, exactly as Airflow's cron timetables
    compute it (``airflow/timetables/_cron.py``), so that both name the same intervals
    across DST changes: croniter runs on local wall-clock time; a schedule that fires
    every hour steps by the wall-clock distance in absolute time (so it fires in the
    repeated autumn hour too), any other lands on the wall-clock time, taking the
    second of two repeated instants and skipping forward over a missing one."""
    import pendulum
    from croniter import croniter

    local, naive = _local_naive(point, timezone)
    it = croniter(cron(schedule), start_time=naive)
    found = it.get_next(dt.datetime) if forward else it.get_prev(dt.datetime)
    if it.expanded[1] != ["*"]:
        return pendulum.timezone(timezone).convert(found.replace(fold=1))
    return local + (found - naive)


def _points(schedule: str, timezone: str, start: dt.datetime) -> Iterator[dt.datetime]:
    """Cron points strictly after ``start``, as aware datetimes in ``timezone``."""
    point = start
    while True:
        point = _step(schedule, timezone, point, forward=True)
        yield point


def containing(schedule: str, timezone: str, ts_ms: int) -> tuple[dt.datetime, dt.datetime]:
    """The interval that holds the instant ``ts_ms``.

    Intervals are defined by stepping forward (as Airflow does); a backward step only
    finds a point to start from. It can land after ``ts_ms`` (a skipped wall-clock
    time moves forward), so it backs off until it does not."""
    when = from_ms(ts_ms)
    point = _step(schedule, timezone, when, forward=False)
    back = when
    while to_ms(point) > ts_ms:
        back = back - dt.timedelta(hours=2)
        point = _step(schedule, timezone, back, forward=False)
    after = _step(schedule, timezone, point, forward=True)
    while to_ms(after) <= ts_ms:
        point, after = after, _step(schedule, timezone, after, forward=True)
    return point, after


def following(schedule: str, timezone: str, start: dt.datetime
              ) -> Iterator[tuple[dt.datetime, dt.datetime]]:
    """Consecutive intervals, the first starting at the cron point ``start``."""
    prev = start
    for point in _points(schedule, timezone, start):
        yield prev, point
        prev = point


def is_interval(schedule: str, timezone: str, start: dt.datetime, end: dt.datetime) -> bool:
    s, e = containing(schedule, timezone, to_ms(start))
    return to_ms(s) == to_ms(start) and to_ms(e) == to_ms(end)


def to_ms(when: dt.datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def from_ms(ts_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC)


def label(when: dt.datetime) -> str:
    """A file-name-safe UTC stamp: 20261122T100000Z."""
    return when.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
