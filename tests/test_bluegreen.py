"""``mzflow apply --blue-green`` (issue 38, item 2): a view's definition changes under a
steady stream of writes and reads; reads never fail and never see an empty or
half-built view; the result equals DuckDB; a kill after each step is resumed with
``--resume`` to the same end; what blue/green cannot deploy is refused unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

import mzflow
from mzflow import cli
from mzflow.deploy import bluegreen

pytestmark = [pytest.mark.slow, pytest.mark.spark]  # ticks, threads, child processes

LIVE = """
CREATE SCHEMA raw; CREATE SCHEMA analytics; CREATE CLUSTER serving SIZE 'small';
CREATE TABLE raw.orders (id bigint NOT NULL, customer text NOT NULL, amount int);
CREATE VIEW analytics.big AS SELECT id, customer, amount FROM raw.orders WHERE amount > 100;
CREATE MATERIALIZED VIEW analytics.totals IN CLUSTER serving AS
    SELECT customer, count(*) AS n FROM analytics.big GROUP BY customer;
"""
DESIRED = """
CREATE SCHEMA raw; CREATE SCHEMA analytics; CREATE CLUSTER serving SIZE 'small';
CREATE TABLE raw.orders (id bigint NOT NULL, customer text NOT NULL, amount int);
CREATE VIEW analytics.big AS SELECT id, customer, amount FROM raw.orders WHERE amount > 200;
CREATE MATERIALIZED VIEW analytics.totals IN CLUSTER serving AS
    SELECT customer, count(*) AS n, sum(amount) AS total FROM analytics.big GROUP BY customer;
"""


def _home(tmp_path: Path, rows: int = 50) -> str:
    home = str(tmp_path / "home")
    with mzflow.connect(home) as conn:
        conn.execute(LIVE)
        conn.execute("INSERT INTO raw.orders VALUES " + ", ".join(
            f"({i}, 'c{i % 5}', {i * 7 % 400})" for i in range(rows)))
        conn.tick()
    (tmp_path / "desired.sql").write_text(DESIRED)
    return home


def _oracle(conn: mzflow.Connection, threshold: int, with_total: bool) -> list[tuple]:
    rows = conn.execute("SELECT id, customer, amount FROM raw.orders").rows
    total = ", sum(amount)" if with_total else ""
    return sorted(duckdb.sql(
        f"SELECT customer, count(*){total} FROM (VALUES "
        + ", ".join(f"({i}, '{c}', {a})" for i, c, a in rows)
        + f") o(id, customer, amount) WHERE amount > {threshold} GROUP BY customer"
    ).fetchall())


def test_a_swap_under_writes_and_reads(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    home = _home(tmp_path)
    stop = threading.Event()
    seen: list[int] = []  # the number of columns each read saw
    errors: list[BaseException] = []

    def reader() -> None:
        with mzflow.connect(home) as c:
            c.execute("SET cluster = serving")
            while not stop.is_set():
                try:
                    rows = c.execute("SELECT * FROM analytics.totals").rows
                    assert rows, "an empty view"
                    seen.append(len(rows[0]))
                except BaseException as e:  # noqa: BLE001 - every failure counts
                    errors.append(e)

    def writer() -> None:
        with mzflow.connect(home) as c:
            n = 1000
            while not stop.is_set():
                c.execute(f"INSERT INTO raw.orders VALUES ({n}, 'c{n % 5}', 300)")
                n += 1
                stop.wait(0.05)

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    try:
        code = cli.main(["--home", home, "apply", "-f", str(tmp_path / "desired.sql"),
                         "--blue-green", "--lag-threshold", "60000"])
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    out = capsys.readouterr().out
    assert code == 0, out
    assert not errors, errors[:3]
    assert seen and set(seen) <= {2, 3} and seen[-1] == 3  # old, then new, never neither
    assert "deployed: analytics (clusters serving)" in out
    with mzflow.connect(home) as conn:
        snap = conn.store.snapshot()
        assert snap.schema_named("analytics" + bluegreen.SUFFIX) is None
        assert snap.find_cluster("serving" + bluegreen.SUFFIX) is None
        conn.tick()
        conn.execute("SET cluster = serving")
        assert sorted(conn.execute("SELECT * FROM analytics.totals").rows) == _oracle(
            conn, 200, True)
    assert cli.main(["--home", home, "plan", "-f", str(tmp_path / "desired.sql")]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "no changes"


CHILD = r"""
import os, sys
step, home, desired = sys.argv[1], sys.argv[2], sys.argv[3]
from mzflow.deploy import bluegreen
original = getattr(bluegreen, step)
def dying(*a, **k):
    original(*a, **k)
    os._exit(9)  # the step's work done, its record not written: as a kill -9
setattr(bluegreen, step, dying)
from mzflow import cli
cli.main(["--home", home, "apply", "-f", desired, "--blue-green", "--lag-threshold", "60000"])
"""


@pytest.mark.parametrize("step", ["stage", "hydrate", "swap", "clean_up"])
def test_a_kill_after_each_step_is_resumed(tmp_path: Path, step: str) -> None:
    home = _home(tmp_path, rows=30)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", CHILD, step, home,
                           str(tmp_path / "desired.sql")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 9, done.stdout[-3000:] + done.stderr[-3000:]
    with mzflow.connect(home) as conn:
        conn.execute("SET cluster = serving")
        # Whatever step died, the live name serves a whole version.
        columns = len(conn.execute("SELECT * FROM analytics.totals").rows[0])
        assert columns == (3 if step in ("swap", "clean_up") else 2)
    # A plain apply refuses while a blue/green one is unfinished.
    assert cli.main(["--home", home, "apply", "-f", str(tmp_path / "desired.sql"),
                     "--blue-green"]) == 1
    assert cli.main(["--home", home, "apply", "-f", str(tmp_path / "desired.sql"),
                     "--resume", "--lag-threshold", "60000"]) == 0
    with mzflow.connect(home) as conn:
        snap = conn.store.snapshot()
        assert snap.schema_named("analytics" + bluegreen.SUFFIX) is None
        conn.tick()
        conn.execute("SET cluster = serving")
        assert sorted(conn.execute("SELECT * FROM analytics.totals").rows) == _oracle(
            conn, 200, True)
    assert bluegreen.load_state(Path(home)).step == "done"  # type: ignore[union-attr]


def test_what_blue_green_cannot_deploy_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = _home(tmp_path, rows=5)
    watch = "CREATE VIEW raw.watch AS SELECT * FROM analytics.big;"
    with mzflow.connect(home) as conn:
        conn.execute(watch)
        version = conn.store.snapshot().version
    cases = {
        # A table in a deployed schema: a swap would hide its data.
        DESIRED.replace("CREATE VIEW analytics.big", "CREATE TABLE analytics.t (a int);\n"
                        "CREATE VIEW analytics.big") + watch: "also has: create table",
        # A view outside the deployed schema reads one inside: it would go on reading
        # the old one.
        DESIRED + watch: "materialize.raw.watch reads objects of analytics",
    }
    for text, message in cases.items():
        (tmp_path / "d.sql").write_text(text)
        assert cli.main(["--home", home, "apply", "-f", str(tmp_path / "d.sql"),
                         "--blue-green"]) == 1
        assert message in capsys.readouterr().err
    with mzflow.connect(home) as conn:
        assert conn.store.snapshot().version == version
