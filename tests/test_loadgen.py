"""Load generators (issue 37, item 3): parsing, Materialize's errors and shapes, and
deterministic steps. Pure Python: no Spark."""

from __future__ import annotations

import pytest

from mzflow.errors import InvalidOption, ParseError, Unsupported
from mzflow.sources import loadgen
from mzflow.sql import ast
from mzflow.sql.parse import parse_one


def _gen(sql: str) -> loadgen.Generator:
    stmt = parse_one(sql)
    assert isinstance(stmt, ast.CreateSource)
    return loadgen.of(stmt)


def test_parse_counter_with_cluster_and_tick_interval():
    stmt = parse_one("CREATE SOURCE IF NOT EXISTS c IN CLUSTER cl FROM LOAD GENERATOR "
                     "COUNTER (TICK INTERVAL '1s', UP TO 3)")
    assert isinstance(stmt, ast.CreateSource)
    assert stmt.this.name == "c" and stmt.args["cluster"].name == "cl"
    assert stmt.args["exists"]
    assert [o.name for o in stmt.args["options"]] == ["TICK INTERVAL", "UP TO"]
    assert not stmt.args.get("all_tables")


def test_parse_errors():
    with pytest.raises(ParseError, match="LOAD GENERATOR or FILES"):
        parse_one("CREATE SOURCE c FROM KAFKA CONNECTION k")
    with pytest.raises(ParseError, match="Expected FROM"):
        parse_one("CREATE SOURCE c LOAD GENERATOR COUNTER")


def test_materialize_errors():
    with pytest.raises(InvalidOption, match="multi-output sources require a FOR ALL TABLES"):
        _gen("CREATE SOURCE a FROM LOAD GENERATOR AUCTION")
    with pytest.raises(InvalidOption, match="only valid for multi-output"):
        _gen("CREATE SOURCE c FROM LOAD GENERATOR COUNTER FOR ALL TABLES")
    with pytest.raises(Unsupported, match="MARKETING"):
        _gen("CREATE SOURCE m FROM LOAD GENERATOR MARKETING FOR ALL TABLES")
    with pytest.raises(InvalidOption, match="KEYS"):
        _gen("CREATE SOURCE c FROM LOAD GENERATOR COUNTER (KEYS 3)")
    with pytest.raises(InvalidOption, match="SCALE FACTOR is only valid for TPCH"):
        _gen("CREATE SOURCE c FROM LOAD GENERATOR COUNTER (SCALE FACTOR 1)")


def test_counter_advances_one_row_per_step_and_stops_at_up_to():
    g = _gen("CREATE SOURCE c FROM LOAD GENERATOR COUNTER (TICK INTERVAL '1s', UP TO 4)")
    assert g.step(0) == {}  # Materialize's counter has an empty snapshot
    values = [v for n in range(1, 6) for t in g.step(n).values()
              for v in t.column("counter").to_pylist()]
    assert values == [1, 2, 3]
    assert g.step(2)["counter"].schema.names == ["counter"]


def test_auction_has_materializes_tables_and_columns():
    g = _gen("CREATE SOURCE a FROM LOAD GENERATOR AUCTION FOR ALL TABLES")
    assert set(g.tables) == {"accounts", "auctions", "bids", "organizations", "users"}
    assert [c for c, _ in g.tables["bids"]] == ["id", "buyer", "auction_id", "amount",
                                                "bid_time"]
    assert [c for c, _ in g.tables["auctions"]] == ["id", "seller", "item", "end_time"]
    snapshot = g.step(0)
    assert set(snapshot) == {"organizations", "users", "accounts"}
    users = set(snapshot["users"].column("id").to_pylist())
    orgs = set(snapshot["organizations"].column("id").to_pylist())
    assert set(snapshot["users"].column("org_id").to_pylist()) <= orgs
    for n in range(1, 20):
        step = g.step(n)
        assert step["auctions"].column("id").to_pylist() == [n]
        bids = step["bids"]
        assert set(bids.column("auction_id").to_pylist()) == {n}
        assert set(bids.column("buyer").to_pylist()) <= users


def test_steps_are_deterministic_so_a_retry_recomputes_the_same_rows():
    sql = "CREATE SOURCE a FROM LOAD GENERATOR AUCTION FOR ALL TABLES"
    first, second = _gen(sql), _gen(sql)
    for n in range(0, 5):
        assert first.step(n) == second.step(n)
    assert first.step(1) != first.step(2)
    seeded = _gen("CREATE SOURCE a FROM LOAD GENERATOR AUCTION (SEED 7) FOR ALL TABLES")
    assert seeded.step(1) != first.step(1)


@pytest.mark.slow  # starts tpchgen-cli
def test_tpch_snapshot_has_the_8_tables_and_steps_are_refresh_batches():
    g = _gen("CREATE SOURCE t FROM LOAD GENERATOR TPCH (SCALE FACTOR 0.001) FOR ALL TABLES")
    snapshot = g.step(0)
    assert set(snapshot) == set(loadgen.TPCH_TABLES)
    assert snapshot["region"].num_rows == 5 and snapshot["nation"].num_rows == 25
    old_keys = set(snapshot["orders"].column("o_orderkey").to_pylist())
    batch = g.step(1)
    assert set(batch) == {"orders", "lineitem"}
    new_keys = set(batch["orders"].column("o_orderkey").to_pylist())
    assert not new_keys & old_keys
    assert set(batch["lineitem"].column("l_orderkey").to_pylist()) == new_keys
    assert new_keys.isdisjoint(g.step(2)["orders"].column("o_orderkey").to_pylist())
    custkeys = set(snapshot["customer"].column("c_custkey").to_pylist())
    assert set(batch["orders"].column("o_custkey").to_pylist()) <= custkeys


def test_a_session_checks_the_statement_before_creating_the_source(tmp_path):
    from mzflow.session.connection import connect

    conn = connect(str(tmp_path / "home"))
    with pytest.raises(InvalidOption, match="multi-output sources require"):
        conn.execute("CREATE SOURCE a FROM LOAD GENERATOR AUCTION")
    assert conn.execute("SHOW SOURCES").rows == []
    conn.execute("CREATE SOURCE c FROM LOAD GENERATOR COUNTER (TICK INTERVAL '1s')")
    assert conn.execute("SHOW SOURCES").rows == [("c", "load-generator", "default", "")]


@pytest.mark.slow  # commits to Delta tables through the session's write path
def test_a_retried_step_does_not_insert_twice(tmp_path):
    from mzflow.session.connection import connect
    from mzflow.sources import feed

    conn = connect(str(tmp_path / "home"))
    gen = _gen("CREATE SOURCE a FROM LOAD GENERATOR AUCTION FOR ALL TABLES")
    names = {t: f"a_{t}" for t in gen.tables}
    for sql in feed.create_tables_sql(gen, names):
        conn.execute(sql)
    expected = {t: 0 for t in gen.tables}
    for step in (0, 1, 1, 2, 3, 3):  # steps 1 and 3 retried
        feed.advance(conn.writes, "a", gen, names, step)
    for step in (0, 1, 2, 3):
        for t, data in gen.step(step).items():
            expected[t] += data.num_rows
    got = {t: conn.execute(f"SELECT count(*) FROM {names[t]}").rows[0][0] for t in gen.tables}
    assert got == expected
    bids = conn.execute("SELECT DISTINCT auction_id FROM a_bids ORDER BY 1").rows
    assert bids == [(1,), (2,), (3,)]


@pytest.mark.slow  # ticks a maintained view on Spark
@pytest.mark.spark
def test_a_maintained_view_over_generated_tables_equals_duckdb(tmp_path):
    import duckdb

    from mzflow.session.connection import connect
    from mzflow.sources import feed

    gen = _gen("CREATE SOURCE a FROM LOAD GENERATOR AUCTION FOR ALL TABLES")
    names = {t: t for t in gen.tables}
    view = ("SELECT u.org_id, count(*) AS n, sum(b.amount) AS total FROM bids b "
            "JOIN users u ON u.id = b.buyer GROUP BY u.org_id")
    db = duckdb.connect()
    with connect(str(tmp_path / "home")) as conn:
        conn.execute("CREATE CLUSTER work")
        for sql in feed.create_tables_sql(gen, names):
            conn.execute(sql)
            db.execute(sql.replace("timestamp with time zone", "timestamptz"))
        conn.execute(f"CREATE MATERIALIZED VIEW per_org IN CLUSTER work AS {view}")
        for step in range(4):
            feed.advance(conn.writes, "a", gen, names, step)
            for t, data in gen.step(step).items():
                db.register("batch", data)
                db.execute(f"INSERT INTO {t} SELECT * FROM batch")
                db.unregister("batch")
            reports = conn.tick(cluster="work")
            assert all(r.error is None for r in reports)
            conn.execute("SET cluster = work; SET transaction_isolation = 'serializable'")
            maintained = sorted(conn.execute("SELECT * FROM per_org").rows)
            conn.execute("RESET transaction_isolation; SET cluster = default")
            oracle = sorted(tuple(r) for r in db.execute(view).fetchall())
            assert [tuple(int(v) for v in r) for r in maintained] == \
                [tuple(int(v) for v in r) for r in oracle]
