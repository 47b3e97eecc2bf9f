"""Refresh policies (issue 36, item 1): parsing, checking, storing and showing them,
conflicts within a cluster, and the schedule each becomes; compaction's interval (item 3).

No Spark and no Airflow here: the catalog, the graph the DAGs are built from, and
croniter as the oracle for the cron expressions an EVERY becomes. Airflow's side is in
test_airflow_refresh.py.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

import mzflow
from mzflow.airflow import graph
from mzflow.catalog import normalize, refresh
from mzflow.errors import ParseError
from mzflow.sql import ast
from mzflow.sql.parse import parse

MV = "CREATE MATERIALIZED VIEW mv IN CLUSTER c WITH ({}) AS SELECT k FROM t"


def _options(sql: str) -> list[ast.Option]:
    return parse(sql)[0].args["options"]


def _ms(text: str) -> int:
    when = dt.datetime.fromisoformat(text)
    return int(when.replace(tzinfo=when.tzinfo or dt.UTC).timestamp() * 1000)


@pytest.fixture
def conn(tmp_path: Path):  # type: ignore[no-untyped-def]
    with mzflow.connect(str(tmp_path / "home")) as c:
        c.execute("CREATE CLUSTER c SIZE 'small'; CREATE CLUSTER d SIZE 'small'; "
                  "CREATE TABLE t (k int, v int)")
        yield c


def _error(conn: mzflow.Connection, sql: str) -> mzflow.Error:
    with pytest.raises(mzflow.Error) as e:
        conn.execute(sql)
    return e.value


# -- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize("written", [
    "REFRESH ON COMMIT",
    "REFRESH = ON COMMIT",
    "REFRESH EVERY '1 day'",
    "REFRESH EVERY '1 day' ALIGNED TO '2024-01-01 03:00'",
    "REFRESH AT CREATION, REFRESH AT '2024-06-06 12:00:00'",
    "REFRESH AT mz_now()",
    "REFRESH AT '2024-06-06'::timestamp",
    "REFRESH ON SCHEDULE '@daily' TIMEZONE 'Europe/Berlin'",
    "REFRESH ON SCHEDULE '0 3 * * *', RETAIN HISTORY FOR '1h'",
])
def test_policies_parse_and_print_back(written: str) -> None:
    tree = parse(MV.format(written))[0]
    policies = [o for o in tree.args["options"] if o.name == "REFRESH"]
    assert policies and all(isinstance(o.args["value"], ast.RefreshPolicy) for o in policies)
    printed = normalize.sql(tree)
    assert "REFRESH = " in printed  # Materialize's display
    assert parse(printed)[0] == tree


def test_the_tick_mode_option_is_not_a_policy() -> None:
    (opt,) = _options(MV.format("REFRESH = 'incremental'"))
    assert opt.name == "REFRESH" and not isinstance(opt.args["value"], ast.RefreshPolicy)
    assert opt.args["value"].name == "incremental"


@pytest.mark.parametrize(("written", "message", "at"), [
    ("REFRESH EVERY 5", "Expected an interval string after REFRESH EVERY", "5"),
    ("REFRESH ON MONDAY", "Expected COMMIT or SCHEDULE after REFRESH ON", "MONDAY"),
    ("REFRESH EVERY '1 day' ALIGNED '2024-01-01'", "Expected TO after ALIGNED",
     "'2024-01-01'"),
    ("REFRESH EVERY '1 day' ALIGNED TO", "Expected a time after ALIGNED TO", ")"),
    ("REFRESH ON SCHEDULE 5", "Expected a cron expression or @preset string", "5"),
    ("REFRESH ON SCHEDULE '@daily' TIMEZONE Berlin", "Expected a time zone string",
     "Berlin"),
])
def test_syntax_errors_point_at_line_and_column(written: str, message: str, at: str) -> None:
    sql = "CREATE MATERIALIZED VIEW mv IN CLUSTER c\n  WITH (" + written + ")\nAS SELECT 1"
    with pytest.raises(ParseError) as e:
        parse(sql)
    line_text = sql.splitlines()[1]
    assert message in e.value.reason
    assert (e.value.line, e.value.column) == (2, line_text.rindex(at) + 1)


def test_refresh_at_without_a_time_points_at_what_follows() -> None:
    sql = "CREATE MATERIALIZED VIEW mv WITH (\n    REFRESH AT\n) AS SELECT 1"
    with pytest.raises(ParseError) as e:
        parse(sql)
    assert "Expected CREATION or a time after REFRESH AT" in e.value.reason
    assert (e.value.line, e.value.column) == (3, 1)


# -- checking: Materialize's errors, and mzflow's limits -----------------------------------


@pytest.mark.parametrize(("written", "code", "message"), [
    ("REFRESH ON COMMIT, REFRESH ON COMMIT", "22023",
     "REFRESH ON COMMIT cannot be specified multiple times"),
    ("REFRESH ON COMMIT, REFRESH AT CREATION", "22023",
     "REFRESH ON COMMIT is not compatible with any of the other REFRESH options"),
    ("REFRESH EVERY '-1 hour'", "22023", "REFRESH interval must be positive; got: -01:00:00"),
    ("REFRESH EVERY '0 days'", "22023", "REFRESH interval must be positive; got: 00:00:00"),
    ("REFRESH EVERY '1 month'", "22023",
     "REFRESH interval must not involve units larger than days"),
    ("REFRESH EVERY 'soon'", "22P02", 'invalid input syntax for type interval: "soon"'),
    ("REFRESH AT now()", "22023", "REFRESH AT argument must be an expression that can be "
     "simplified and/or cast to a constant whose type is mz_timestamp"),
    ("REFRESH EVERY '1 day' ALIGNED TO 1 + 1", "22023", "REFRESH EVERY ... ALIGNED TO "
     "argument must be an expression that can be simplified and/or cast to a constant"),
    ("REFRESH AT 'tomorrow'", "22P02", "invalid input syntax for type mz_timestamp"),
    ("REFRESH ON SCHEDULE 'every tuesday'", "22023", "invalid REFRESH ON SCHEDULE "
     "'every tuesday'"),
    ("REFRESH ON SCHEDULE '61 * * * *'", "22023", "invalid REFRESH ON SCHEDULE"),
    ("REFRESH ON SCHEDULE '@daily' TIMEZONE 'Mars/Olympus'", "22023",
     "invalid TIMEZONE 'Mars/Olympus'"),
    # mzflow's limits, refused by name: what one Airflow timetable cannot run exactly.
    ("REFRESH EVERY '2 days'", "0A000", "REFRESH EVERY '2 days' is not supported"),
    ("REFRESH EVERY '7 minutes'", "0A000", "REFRESH EVERY '7 minutes' is not supported"),
    ("REFRESH EVERY '30 seconds'", "0A000", "REFRESH EVERY '30 seconds' is not supported"),
    ("REFRESH EVERY '1 hour' ALIGNED TO '2024-01-01 00:00:30'", "0A000",
     "it is not on a whole minute"),
    ("REFRESH AT '2030-01-01', REFRESH EVERY '1 day'", "0A000",
     "REFRESH AT <time> together with REFRESH EVERY"),
    ("REFRESH ON SCHEDULE '0 0 3 * * *'", "0A000", "Airflow schedules to the minute"),
    ("REFRESH ON SCHEDULE '@daily', REFRESH ON SCHEDULE '@hourly' TIMEZONE 'Asia/Tokyo'",
     "0A000", "REFRESH ON SCHEDULE options in different time zones"),
    ("REFRESH EVERY '1 hour', REFRESH ON SCHEDULE '@daily' TIMEZONE 'Europe/Berlin'",
     "0A000", "REFRESH EVERY (in UTC) together with REFRESH ON SCHEDULE"),
])
def test_bad_policies_are_refused(conn: mzflow.Connection, written: str, code: str,
                                  message: str) -> None:
    e = _error(conn, MV.format(written))
    assert e.code == code and message in e.message, e
    assert conn.execute("SELECT count(*) FROM mz_materialized_views").rows == [(0,)]


def test_policies_belong_to_materialized_views_and_indexes_only(conn: mzflow.Connection
                                                                ) -> None:
    e = _error(conn, "CREATE TABLE u (a int) WITH (REFRESH EVERY '1 day')")
    assert e.code == "22023" and 'unexpected option "REFRESH"' in e.message
    e = _error(conn, "CREATE VIEW v WITH (REFRESH EVERY '1 day') AS SELECT 1")
    assert "a view takes no options" in e.message


# -- stored, shown ----------------------------------------------------------------------


def test_show_create_keeps_the_policy_made_explicit(conn: mzflow.Connection) -> None:
    before = int(time.time() * 1000)
    conn.execute(MV.format("REFRESH EVERY '1 day', REFRESH AT CREATION"))
    conn.execute("CREATE INDEX t_k IN CLUSTER d ON t (k) WITH (REFRESH AT CREATION, "
                 "REFRESH AT '2030-06-06 12:00:00+02', REFRESH AT mz_now())")
    after = int(time.time() * 1000)
    (_, create), = conn.execute("SHOW CREATE MATERIALIZED VIEW mv").rows
    nodes = [o.args["value"] for o in parse(create)[0].args["options"]]
    assert [n.args["kind"] for n in nodes] == ["EVERY", "AT CREATION"]
    # ALIGNED TO defaults to the CREATE's time (to the minute: Airflow's grain), written
    # out as a literal, as Materialize fills it in.
    aligned = _ms(nodes[0].args["aligned_to"].name)
    assert before // 60_000 * 60_000 <= aligned <= after and aligned % 60_000 == 0
    (_, create), = conn.execute("SHOW CREATE INDEX t_k").rows
    nodes = [o.args["value"] for o in parse(create)[0].args["options"]]
    assert [n.args["kind"] for n in nodes] == ["AT CREATION", "AT", "AT"]
    assert nodes[1].args["at"].name == "2030-06-06 10:00:00+00"  # in UTC
    assert before <= _ms(nodes[2].args["at"].name) <= after  # mz_now(): the CREATE's time
    # The stored statements read back to the same policies, as a new session sees them.
    with mzflow.connect(str(conn.config.home)) as other:
        snap = other.store.snapshot()
        mv, index = snap.resolve("mv"), snap.resolve("t_k")
        assert refresh.of_sql(mv.create_sql).everies == (refresh.Every(86_400_000, aligned),)
        policy = refresh.of_index(snap, index)
    assert policy.at_creation and policy.ats[-1] == _ms("2030-06-06 10:00:00+00:00")
    assert before <= (mv.created_ts or 0) <= after
    assert before <= (index.created_ts or 0) <= after


def test_system_tables_show_each_policy(conn: mzflow.Connection) -> None:
    conn.execute(MV.format("REFRESH EVERY '6 hours' ALIGNED TO '2024-01-01 01:30'"))
    conn.execute("CREATE MATERIALIZED VIEW plain IN CLUSTER c AS SELECT v FROM t")
    conn.execute("CREATE MATERIALIZED VIEW once IN CLUSTER d WITH (REFRESH AT CREATION, "
                 "REFRESH AT '2031-01-01') AS SELECT v FROM t")
    conn.execute("CREATE INDEX t_k IN CLUSTER d ON t (k) WITH (REFRESH AT CREATION, "
                 "REFRESH AT '2031-01-01')")
    conn.execute("CREATE MATERIALIZED VIEW berlin IN CLUSTER default WITH ("
                 "REFRESH ON SCHEDULE '@daily' TIMEZONE 'Europe/Berlin') AS SELECT k FROM t")
    got = dict(conn.execute("SELECT name, refresh FROM mz_materialized_views").rows)
    assert got == {"mv": "EVERY '6 hours' ALIGNED TO '2024-01-01 01:30:00+00'",
                   "plain": "ON COMMIT",
                   "once": "AT CREATION, AT '2031-01-01 00:00:00+00'",
                   "berlin": "ON SCHEDULE '@daily' TIMEZONE 'Europe/Berlin'"}
    # SELECT * keeps Materialize's columns: refresh is there for whoever asks by name.
    assert "refresh" not in conn.execute("SELECT * FROM mz_materialized_views").columns
    indexes = dict(conn.execute("SELECT name, refresh FROM mz_indexes").rows)
    assert indexes["t_k"] == got["once"] and indexes["mv_primary_idx"] == got["mv"]
    ids = dict(conn.execute("SELECT name, id FROM mz_materialized_views").rows)
    rows = conn.execute(
        "SELECT materialized_view_id, type, interval, aligned_to, at, schedule, timezone "
        "FROM mz_internal.mz_materialized_view_refresh_strategies").rows
    by = {(r[0], r[1]): r[2:] for r in rows}
    utc = dt.UTC
    assert by[(ids["mv"], "every")] == (dt.timedelta(hours=6),
                                        dt.datetime(2024, 1, 1, 1, 30, tzinfo=utc), None,
                                        None, None)
    assert by[(ids["plain"], "on-commit")] == (None, None, None, None, None)
    assert by[(ids["berlin"], "on-schedule")] == (None, None, None, "@daily", "Europe/Berlin")
    once = sorted(r[4] for r in rows if r[:2] == (ids["once"], "at"))
    created = conn.store.snapshot().resolve("once").created_ts
    assert once == [dt.datetime.fromtimestamp((created or 0) / 1000, tz=utc),
                    dt.datetime(2031, 1, 1, tzinfo=utc)]
    assert len(rows) == 5  # one per option, on-commit for the default


def test_explain_says_a_policy_that_is_not_the_default(conn: mzflow.Connection) -> None:
    conn.execute(MV.format("REFRESH EVERY '90 minutes' ALIGNED TO '2024-01-01 00:00'"))
    conn.execute("CREATE MATERIALIZED VIEW plain IN CLUSTER c AS SELECT v FROM t")
    text = conn.execute("EXPLAIN MATERIALIZED VIEW mv").rows[0][0]
    assert ("Refresh: EVERY '90 minutes' ALIGNED TO '2024-01-01 00:00:00+00' (its cluster's "
            "DAG runs on cron '0 0,3,6,9,12,15,18,21 * * *', "
            "'30 1,4,7,10,13,16,19,22 * * *' in UTC)") in text.splitlines()
    assert "Refresh:" not in conn.execute("EXPLAIN MATERIALIZED VIEW plain").rows[0][0]


# -- the schedule each policy becomes -----------------------------------------------------


@pytest.mark.parametrize(("interval", "aligned"), [
    ("1 minute", "2024-01-01 00:00"), ("15 minutes", "2024-03-05 10:05"),
    ("45 minutes", "2024-01-01 00:10"), ("90 minutes", "2024-01-01 00:00"),
    ("1 hour", "2024-02-02 02:17"), ("6 hours", "2024-06-04 01:30:00+02"),
    ("8 hours", "2023-12-31 23:59"), ("1 day", "2024-01-01 03:00"),
    ("1 day 2 hours -2 hours", "2024-01-01 03:00"), ("7 days", "2024-06-04 12:00"),
])
def test_every_becomes_crons_that_fire_exactly_on_its_points(interval: str, aligned: str
                                                             ) -> None:
    from croniter import croniter

    opts = _options(MV.format(f"REFRESH EVERY '{interval}' ALIGNED TO '{aligned}'"))
    policy, _ = refresh.check(opts, 0)
    schedule = policy.schedule()
    assert schedule is not None and schedule.timezone == "UTC"
    step, phase = policy.everies[0].interval_ms, _ms(aligned)
    # Two weeks of cron points, from every cron (croniter, in UTC), against the policy's
    # own points aligned + k * interval in the same span.
    start = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=14 if step >= 86_400_000 else 2)
    fired: set[int] = set()
    for cron in schedule.crons:
        it = croniter(cron, start - dt.timedelta(seconds=1))
        while (t := it.get_next(dt.datetime)) < end:
            fired.add(int(t.timestamp() * 1000))
    first = phase + -(-(int(start.timestamp() * 1000) - phase) // step) * step
    wanted = set(range(first, int(end.timestamp() * 1000), step))
    assert fired == wanted and wanted


def test_policies_become_schedules() -> None:
    def schedule(written: str) -> refresh.Schedule | None:
        return refresh.check(_options(MV.format(written)), 0)[0].schedule()

    assert schedule("REFRESH ON COMMIT") is None
    assert schedule("REFRESH AT CREATION") == refresh.Schedule()  # instants: creation's
    daily = schedule("REFRESH EVERY '1 day' ALIGNED TO '2024-01-01 03:00'")
    assert daily == refresh.Schedule(crons=("0 3 * * *",))
    # One schedule spelled two ways is one schedule; AT CREATION adds nothing to crons.
    assert schedule("REFRESH ON SCHEDULE '0 3 * * *', REFRESH AT CREATION") == daily
    assert schedule("REFRESH ON SCHEDULE '@daily' TIMEZONE 'Europe/Berlin'") == (
        refresh.Schedule(crons=("0 0 * * *",), timezone="Europe/Berlin"))
    # Times as text (UTC unless they say) or as mz_timestamp milliseconds; one instant once.
    assert schedule("REFRESH AT '2031-01-01 01:00:00+01', REFRESH AT 1924992000000, "
                    "REFRESH AT '2030-01-01'") == refresh.Schedule(
        ats=(_ms("2030-01-01 00:00:00"), 1_924_992_000_000))


# -- conflicts within a cluster ----------------------------------------------------------


def test_conflicting_policies_in_one_cluster_are_refused_naming_both(
        conn: mzflow.Connection) -> None:
    conn.execute(MV.format("REFRESH EVERY '1 day' ALIGNED TO '2024-01-01 03:00'"))
    e = _error(conn, "CREATE MATERIALIZED VIEW hourly IN CLUSTER c WITH (REFRESH EVERY "
                     "'1 hour') AS SELECT v FROM t")
    assert e.code == "22023"
    assert e.message == ("REFRESH policy of materialized view materialize.public.hourly "
                         "conflicts with the REFRESH policy of materialized view "
                         'materialize.public.mv in cluster "c"')
    assert "on cron '0 3 * * *' in UTC" in (e.detail or "")
    # An index's own policy against the view's, the other way round.
    e = _error(conn, "CREATE INDEX t_k IN CLUSTER c ON t (k) WITH (REFRESH AT CREATION)")
    assert e.message.startswith("REFRESH policy of index materialize.public.t_k conflicts "
                                "with the REFRESH policy of materialized view "
                                "materialize.public.mv")
    names = {n for n, in conn.execute("SELECT name FROM mz_objects").rows}
    assert "hourly" not in names and "t_k" not in names  # nothing was created
    # Not conflicts: ON COMMIT objects, the same schedule spelled differently, another
    # cluster, and an object replacing itself.
    conn.execute("CREATE MATERIALIZED VIEW plain IN CLUSTER c AS SELECT v FROM t")
    conn.execute("CREATE INDEX t_v IN CLUSTER c ON t (v)")
    conn.execute("CREATE MATERIALIZED VIEW same IN CLUSTER c WITH (REFRESH ON SCHEDULE "
                 "'0 3 * * *', REFRESH AT CREATION) AS SELECT k, v FROM t")
    conn.execute("CREATE MATERIALIZED VIEW hourly IN CLUSTER d WITH (REFRESH EVERY "
                 "'1 hour') AS SELECT v FROM t")
    e = _error(conn, "CREATE OR REPLACE MATERIALIZED VIEW same IN CLUSTER c WITH (REFRESH "
                     "EVERY '12 hours') AS SELECT k, v FROM t")
    assert "materialize.public.mv" in e.message  # still conflicts with mv, not itself
    conn.execute("DROP MATERIALIZED VIEW same; DROP MATERIALIZED VIEW mv")
    conn.execute("CREATE OR REPLACE MATERIALIZED VIEW plain IN CLUSTER c WITH (REFRESH "
                 "EVERY '12 hours') AS SELECT v FROM t")
    conn.execute("CREATE OR REPLACE MATERIALIZED VIEW plain IN CLUSTER c WITH (REFRESH "
                 "EVERY '1 hour') AS SELECT v FROM t")  # replaces its own policy


def test_the_cluster_graph_carries_the_shared_schedule(conn: mzflow.Connection) -> None:
    conn.execute(MV.format("REFRESH EVERY '1 day' ALIGNED TO '2024-01-01 03:00', "
                           "REFRESH AT CREATION"))
    conn.execute("CREATE MATERIALIZED VIEW plain IN CLUSTER c AS SELECT k FROM mv")
    conn.execute("CREATE MATERIALIZED VIEW a IN CLUSTER d WITH (REFRESH AT CREATION, "
                 "REFRESH AT '2031-01-01') AS SELECT v FROM t")
    conn.execute("CREATE INDEX t_k IN CLUSTER d ON t (k) WITH (REFRESH AT '2031-01-01', "
                 "REFRESH AT CREATION)")
    conn.execute("CREATE MATERIALIZED VIEW free IN CLUSTER default AS SELECT k FROM t")
    snap = conn.store.snapshot()
    dags = {d.cluster: d for d in graph.cluster_dags(snap)}
    assert dags["c"].refresh == refresh.Schedule(crons=("0 3 * * *",))
    assert {t.task_id: t.refresh for t in dags["c"].tasks} == {
        "mv": "EVERY '1 day' ALIGNED TO '2024-01-01 03:00:00+00', AT CREATION",
        "plain": "ON COMMIT"}
    # A list of instants: the times written, and the creation of each AT CREATION object.
    created = sorted(snap.resolve(n).created_ts or 0 for n in ("a", "t_k"))
    assert dags["d"].refresh == refresh.Schedule(ats=(*created, _ms("2031-01-01 00:00")))
    assert dags["default"].refresh is None


# -- compaction's interval ----------------------------------------------------------------


def test_compaction_interval_follows_the_shortest_retention(conn: mzflow.Connection) -> None:
    def shown() -> str:
        return str(conn.execute("SHOW compaction_interval").rows[0][0])

    plan = graph.compact_dag(conn.store.snapshot())
    assert plan is not None and plan.dag_id == "mzflow_compact"
    assert (plan.interval_ms, shown()) == (3_600_000, "01:00:00")  # retain_history's 1 hour
    conn.execute("CREATE TABLE short (a int) WITH (RETAIN HISTORY FOR '20 minutes')")
    assert shown() == "00:20:00"
    plan = graph.compact_dag(conn.store.snapshot())
    assert plan is not None and plan.reason == "RETAIN HISTORY of materialize.public.short"
    conn.execute("CREATE TABLE tiny (a int) WITH (RETAIN HISTORY FOR '5 seconds')")
    assert shown() == "00:01:00"  # not more often than a minute
    conn.execute("DROP TABLE tiny; DROP TABLE short; ALTER SYSTEM SET retain_history = '3 days'")
    assert shown() == "1 day"  # nor less often than a day
    conn.execute("ALTER SYSTEM SET compaction_interval = '10 minutes'")
    assert shown() == "00:10:00"
    plan = graph.compact_dag(conn.store.snapshot())
    assert plan is not None and plan.interval_ms == 600_000
    e = _error(conn, "ALTER SYSTEM SET compaction_interval = '5 seconds'")
    assert "compaction_interval must be at least 1 minute" in e.message
    e = _error(conn, "SET compaction_interval = '5 minutes'")
    assert "can only be set with ALTER SYSTEM SET" in e.message
    conn.execute("ALTER SYSTEM RESET compaction_interval")
    assert shown() == "1 day"


def test_nothing_to_compact_no_compaction_dag(tmp_path: Path) -> None:
    with mzflow.connect(str(tmp_path / "h")) as c:
        assert graph.compact_dag(c.store.snapshot()) is None
        c.execute("CREATE TABLE t (a int)")
        assert graph.compact_dag(c.store.snapshot()) is not None
