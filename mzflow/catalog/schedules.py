"""A sink's schedule: cron (or an @preset) in a time zone → data intervals.

Intervals are half-open ``[start, end)`` between consecutive cron points, taken in
the sink's time zone (pendulum), so an hourly schedule in Europe/Berlin has a
23- or 25-interval day at the DST changes and a daily one starts at local
midnight. Airflow's ``CronDataIntervalTimetable`` yields the same intervals
(``tests/test_sinks.py`` checks a DST week), so a run from the CLI and a run
from Airflow name the same interval the same way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from mzflow.errors import InvalidOption

# Airflow's presets, as cron: croniter knows most but not all of them.
PRESETS = {
    "@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
}


def cron(schedule: str) -> str:
    return PRESETS.get(schedule.strip().lower(), schedule.strip())


def check(schedule: str, timezone: str) -> None:
    import pendulum
    from croniter import croniter

    if not croniter.is_valid(cron(schedule)):
        raise InvalidOption(f"invalid SCHEDULE '{schedule}'",
                            hint="use a cron expression such as '0 * * * *' or a preset "
                                 f"({', '.join(PRESETS)})")
    try:
        pendulum.timezone(timezone)
    except Exception:
        raise InvalidOption(f"invalid TIMEZONE '{timezone}'",
                            hint="use an IANA name such as 'UTC' or 'Europe/Berlin'") from None


def _points(schedule: str, timezone: str, start: dt.datetime) -> Iterator[dt.datetime]:
    """Cron points strictly after ``start``, as aware datetimes in ``timezone``."""
    import pendulum
    from croniter import croniter

    tz = pendulum.timezone(timezone)
    it = croniter(cron(schedule), pendulum.instance(start).in_timezone(tz))
    while True:
        yield pendulum.instance(it.get_next(dt.datetime)).in_timezone(tz)


def containing(schedule: str, timezone: str, ts_ms: int) -> tuple[dt.datetime, dt.datetime]:
    """The interval that holds the instant ``ts_ms``."""
    when = from_ms(ts_ms)
    # croniter steps back from a point; step forward past ``when`` then back once.
    end = next(_points(schedule, timezone, when))
    start = _previous(schedule, timezone, end)
    return start, end


def _previous(schedule: str, timezone: str, point: dt.datetime) -> dt.datetime:
    import pendulum
    from croniter import croniter

    tz = pendulum.timezone(timezone)
    it = croniter(cron(schedule), pendulum.instance(point).in_timezone(tz))
    return pendulum.instance(it.get_prev(dt.datetime)).in_timezone(tz)


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
