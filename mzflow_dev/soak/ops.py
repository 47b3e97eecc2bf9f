"""What the soak runs: the starting catalog and each worker's seeded operations.

Every operation is a pure function of ``(seed, worker, n)``, so a worker restarted after
a kill regenerates exactly the operation it was killed in and retries it with the same
idempotency key ``(worker, n)``. Each write also carries the SQL the DuckDB oracle
replays for it (COPY's file becomes an INSERT of the same rows).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLUSTERS = ("c1", "c2")
TABLES = {
    "t1": "id int, k int, v int, s text",
    "t2": "k int, name text, w int",
    "t3": "id int, a int",  # the DDL worker adds columns to it
}
# Maintained views that live for the whole soak: name -> (cluster, SELECT). The shapes
# are the ones tests/test_reads_oracle.py and tests/test_fuzz.py show working.
FIXED_VIEWS = {
    "mv_agg": ("c1", "SELECT k, count(*) AS n, sum(v) AS sv, min(v) AS mn, max(v) AS mx "
                     "FROM t1 GROUP BY k"),
    "mv_join": ("c2", "SELECT t1.id, t1.v, t2.name FROM t1 JOIN t2 ON t1.k = t2.k "
                      "WHERE t1.v IS NOT NULL"),
    "mv_distinct": ("c1", "SELECT DISTINCT k, s FROM t1"),
    "mv_union": ("c2", "SELECT k, v FROM t1 WHERE v > 50 UNION ALL SELECT k, w FROM t2"),
    "mv_joinagg": ("c1", "SELECT t2.name, count(*) AS n, sum(t1.v) AS sv FROM t1 "
                         "JOIN t2 ON t1.k = t2.k GROUP BY t2.name"),
    "mv_t3": ("c2", "SELECT a, count(*) AS n FROM t3 GROUP BY a"),
}
# Views the DDL worker creates and drops: (SELECT, reads a fixed view?)
DYNAMIC_SHAPES = (
    "SELECT k, count(*) AS n FROM t1 WHERE v IS NULL GROUP BY k",
    "SELECT s, sum(v) AS sv FROM t1 GROUP BY s",
    "SELECT t2.k, t2.name, t1.s FROM t2 JOIN t1 ON t2.k = t1.k WHERE t1.id % 3 = 0",
    "SELECT DISTINCT name FROM t2",
    "SELECT k, n FROM mv_agg WHERE n > 2",
    "SELECT a, count(*) AS n FROM t3 WHERE a IS NOT NULL GROUP BY a",
)
NAMES = ("ann", "bob", "cy", None)
# Projections the DDL worker adds and drops: (table, its SELECT, no FROM). Aggregate
# ones (GROUP BY) and sorted ones (ORDER BY); the reads below are shaped to use them.
PROJECTIONS = (
    ("t1", "SELECT k, sum(v), count(*), min(v), max(v) GROUP BY k"),
    ("t1", "SELECT s, count(*), avg(v) GROUP BY s"),
    ("t1", "SELECT k, s, sum(v), count(*) GROUP BY k, s"),
    ("t1", "SELECT k, v, s ORDER BY k"),
    ("t2", "SELECT name, sum(w), count(*), max(w) GROUP BY name"),
    ("t2", "SELECT k, name, w ORDER BY k"),
)
# Reads a live projection can answer ({k}, {k2}: a key 0-9). Projections never change an
# answer: the checker compares each with DuckDB's at the time it read.
PROJECTION_READS = (
    "SELECT k, sum(v), count(*) FROM t1 GROUP BY k",
    "SELECT k, min(v), max(v) FROM t1 GROUP BY k",
    "SELECT s, count(*), avg(v) FROM t1 GROUP BY s",
    "SELECT k, s, sum(v) FROM t1 GROUP BY k, s",
    "SELECT k, v, s FROM t1 WHERE k = {k}",
    "SELECT name, sum(w), count(*) FROM t2 GROUP BY name",
    "SELECT k, name, w FROM t2 WHERE k IN ({k}, {k2})",
)
# Expectations the DDL worker adds to t2 and drops: SQL conditions on one row. The
# writers make rows that fail each (w < 0, w >= 95, k = 9), so every action has work.
EXPECT_TABLE = "t2"
EXPECT_CONDITIONS = ("w IS NULL OR w >= 0", "w < 95", "k <> 9")
ACTIONS = ("WARN", "DROP ROW", "QUARANTINE", "FAIL")
QUARANTINE = "t2_quarantine"
QUARANTINE_COLS = "k int, name text, w int, _mz_expectations text, " \
                  "_mz_quarantined_at bigint, _mz_statement text"


# Sinks that live for the whole soak: name -> source. Minutely intervals, Parquet,
# APPEND envelope (mz_timestamp, mz_diff, row…); the checker replays their files. A
# view's sink evaluates it (on Spark) at every time its tables changed: mv_t3 reads the
# table written least often.
SINKS = {"s_t2": "t2", "s_t3": "mv_t3"}


STAGED_WRITE_MIN_ROWS = 5


def setup_sql(retain: str, sink_dir: str) -> list[str]:
    out = [f"ALTER SYSTEM SET retain_history = '{retain}'",
           # The writers' UPDATEs and DELETEs match a few rows each: from 5, they write
           # their files before the lock and commit them under it (storage/rewrite.py)
           # when they are a quarter of the files they touch, so kills and full disks
           # meet that path too; the rest merge under the lock.
           f"ALTER SYSTEM SET staged_write_min_rows = {STAGED_WRITE_MIN_ROWS}"]
    out += [f"CREATE CLUSTER {c} SIZE 'small'" for c in CLUSTERS]
    out += [f"CREATE TABLE {t} ({cols})" for t, cols in TABLES.items()]
    # A projection and an expectation from the start (the DDL worker may drop them), so
    # that even a short soak routes reads and quarantines rows.
    out += [f"ALTER TABLE t1 ADD PROJECTION p0 ({PROJECTIONS[0][1]})",
            f"ALTER TABLE {EXPECT_TABLE} ADD CONSTRAINT e0 EXPECT ({EXPECT_CONDITIONS[0]}) "
            "ON VIOLATION QUARANTINE"]
    out += [f"CREATE MATERIALIZED VIEW {v} IN CLUSTER {c} AS {q}"
            for v, (c, q) in FIXED_VIEWS.items()]
    out += [f"CREATE SINK {name} IN CLUSTER c1 FROM {src} INTO PARQUET '{sink_dir}/{name}' "
            "WITH (SCHEDULE = '* * * * *')" for name, src in SINKS.items()]
    return out


@dataclass
class Op:
    kind: str  # insert, update, delete, copy, ddl
    sql: str
    table: str | None = None
    oracle: str | None = None  # what DuckDB replays (None: the same SQL)
    copy_rows: list[tuple[Any, ...]] = field(default_factory=list)  # COPY's file content
    view: str | None = None  # DDL: the view it creates or drops
    select: str | None = None  # DDL: the created view's SELECT
    ddl: str | None = None  # DDL: its kind (create_mv, add_projection, add_expectation, …)


def rng_for(seed: int, worker: str, n: int) -> random.Random:
    return random.Random(f"{seed}/{worker}/{n}")


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


def _values(rows: list[tuple[Any, ...]]) -> str:
    return ", ".join("(" + ", ".join(_lit(v) for v in r) + ")" for r in rows)


def _t1_rows(r: random.Random, base: int) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    for j in range(r.randint(1, 5)):
        v = None if r.random() < 0.15 else r.randint(0, 100)
        s = r.choice(("x", "y", "z", None))
        rows.append((base + j, r.randint(0, 9), v, s))
    if r.random() < 0.3:  # an exact duplicate: a multiset keeps both
        rows.append(rows[0])
    return rows


def write_op(seed: int, worker: str, widx: int, n: int, spark: bool, copy_dir: Path) -> Op:
    """Writer ``worker``'s ``n``-th write. Row ids are unique per (worker, n, j), so the
    checker can tell a write applied twice from one applied once."""
    r = rng_for(seed, worker, n)
    base = widx * 10_000_000 + n * 10
    kinds = ["insert1", "insert2", "insert3", "copy"] + (["update", "delete"] * 2 if spark else [])
    kind = r.choice(kinds)
    if kind == "insert1":
        rows = _t1_rows(r, base)
        return Op("insert", f"INSERT INTO t1 VALUES {_values(rows)}", "t1")
    if kind == "insert2":
        # w from -20: some rows fail the expectations the DDL worker adds (ops.EXPECT_…)
        rows2 = [(r.randint(0, 9), r.choice(NAMES),
                  None if r.random() < 0.1 else r.randint(-20, 99))
                 for _ in range(r.randint(1, 3))]
        return Op("insert", f"INSERT INTO t2 VALUES {_values(rows2)}", "t2")
    if kind == "insert3":
        rows3 = [(base + j, None if r.random() < 0.2 else r.randint(0, 4)) for j in range(2)]
        return Op("insert", f"INSERT INTO t3 (id, a) VALUES {_values(rows3)}", "t3")
    if kind == "copy":
        rows = _t1_rows(r, base)
        path = copy_dir / f"{worker}-{n}.parquet"
        return Op("copy", f"COPY t1 FROM '{path}' WITH (FORMAT parquet)", "t1",
                  oracle=f"INSERT INTO t1 VALUES {_values(rows)}", copy_rows=rows)
    if kind == "update":
        if r.random() < 0.5:
            sql = f"UPDATE t1 SET v = v + 1 WHERE k = {r.randint(0, 9)}"
        else:
            sql = f"UPDATE t2 SET w = w + 10, name = 'upd' WHERE k = {r.randint(0, 9)} AND w < 50"
        return Op("update", sql, sql.split()[1])
    if r.random() < 0.6:
        sql = f"DELETE FROM t1 WHERE k = {r.randint(0, 9)} AND v < {r.randint(0, 30)}"
    else:
        sql = f"DELETE FROM t2 WHERE k = {r.randint(0, 9)} AND w > {r.randint(60, 99)}"
    return Op("delete", sql, sql.split()[2])


def ddl_op(seed: int, n: int, live: Sequence[str],
           projections: Sequence[tuple[str, str]] = (), expectations: Sequence[str] = ()) -> Op:
    """The DDL worker's ``n``-th statement. ``live`` (the dynamic views it believes
    exist), ``projections`` ((table, name) of the live ones) and ``expectations`` (names
    of t2's) only choose what to drop; dropping one already gone is a clean error."""
    r = rng_for(seed, "ddl", n)
    choice = r.random()
    if choice < 0.25 or choice < 0.41 and not live:
        name = f"dv{n}"
        select = r.choice(DYNAMIC_SHAPES)
        plain = sorted(v for v in live if v.startswith("pv"))
        if plain and r.random() < 0.3:  # a maintained view over a plain one: CASCADE's prey
            select = f"SELECT * FROM {r.choice(plain)}"
        cluster = r.choice(CLUSTERS)
        return Op("ddl", f"CREATE MATERIALIZED VIEW {name} IN CLUSTER {cluster} AS {select}",
                  view=name, select=select, ddl="create_mv")
    if choice < 0.29:
        name = f"pv{n}"  # a plain view, indexed later or dropped with CASCADE
        select = r.choice(DYNAMIC_SHAPES[:4])
        return Op("ddl", f"CREATE VIEW {name} AS {select}", view=name, select=select,
                  ddl="create_view")
    if choice < 0.33:
        return Op("ddl", f"CREATE INDEX ix{n} IN CLUSTER {r.choice(CLUSTERS)} ON t1 (k)",
                  ddl="create_index")
    if choice < 0.37:
        return Op("ddl", f"ALTER TABLE t3 ADD COLUMN x{n} int", ddl="add_column")
    if choice < 0.41:
        victim = r.choice(sorted(live))
        word = "VIEW" if victim.startswith("pv") else "MATERIALIZED VIEW"
        return Op("ddl", f"DROP {word} IF EXISTS {victim} CASCADE", view=victim,
                  ddl="drop_view")
    if choice < 0.56 or choice < 0.76 and not projections:
        table, select = r.choice(PROJECTIONS)
        maybe = " IF NOT EXISTS" if r.random() < 0.3 else ""
        return Op("ddl", f"ALTER TABLE {table} ADD PROJECTION{maybe} p{n} ({select})",
                  table=table, ddl="add_projection")
    if choice < 0.64:
        table, name = r.choice(sorted(projections))
        maybe = " IF EXISTS" if r.random() < 0.5 else ""
        return Op("ddl", f"ALTER TABLE {table} DROP PROJECTION{maybe} {name}", table=table,
                  ddl="drop_projection")
    if choice < 0.76:
        table, name = r.choice(sorted(projections))
        verb = r.choice(("MATERIALIZE", "CLEAR"))
        return Op("ddl", f"ALTER TABLE {table} {verb} PROJECTION {name}", table=table,
                  ddl=f"{verb.lower()}_projection")
    if choice < 0.9 or not expectations:
        cond = r.choice(EXPECT_CONDITIONS)
        action = r.choices(ACTIONS, (3, 3, 3, 1))[0]
        return Op("ddl", f"ALTER TABLE {EXPECT_TABLE} ADD CONSTRAINT e{n} EXPECT ({cond}) "
                         f"ON VIOLATION {action}", table=EXPECT_TABLE, ddl="add_expectation")
    maybe = " IF EXISTS" if r.random() < 0.5 else ""
    return Op("ddl", f"ALTER TABLE {EXPECT_TABLE} DROP CONSTRAINT{maybe} "
                     f"{r.choice(sorted(expectations))}", table=EXPECT_TABLE,
              ddl="drop_expectation")


_ADD_EXPECTATION = re.compile(r"^ALTER TABLE (\w+) ADD CONSTRAINT (\w+) EXPECT \((.*)\) "
                              r"ON VIOLATION (WARN|DROP ROW|QUARANTINE|FAIL)$")


def expectation_of(sql: str) -> tuple[str, str, str, str] | None:
    """(table, name, condition, action) of an ADD CONSTRAINT the DDL worker makes."""
    m = _ADD_EXPECTATION.match(sql)
    return (m.group(1), m.group(2), m.group(3), m.group(4)) if m else None


def projection_read(r: random.Random) -> str:
    return r.choice(PROJECTION_READS).format(k=r.randint(0, 9), k2=r.randint(0, 9))
