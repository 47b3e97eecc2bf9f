"""Materialize's load generators: COUNTER, AUCTION and TPCH, as deterministic steps.

Step 0 is a generator's snapshot, step n (n >= 1) what its cluster's n-th tick adds.
A step's rows depend only on (generator, options, step): a retried tick recomputes the
same rows, and the caller commits them with the idempotency key ``(source id, step)``
so they land once.
"""

from __future__ import annotations

import datetime as dt
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from mzflow.errors import InvalidOption, Unsupported
from mzflow.sql import ast

# The outputs' columns, as Materialize documents them (sql/create-source/load-generator).
COUNTER_TABLES = {"counter": [("counter", "bigint")]}
AUCTION_TABLES = {
    "organizations": [("id", "bigint"), ("name", "text")],
    "users": [("id", "bigint"), ("org_id", "bigint"), ("name", "text")],
    "accounts": [("id", "bigint"), ("org_id", "bigint"), ("balance", "bigint")],
    "auctions": [("id", "bigint"), ("seller", "bigint"), ("item", "text"),
                 ("end_time", "timestamp with time zone")],
    "bids": [("id", "bigint"), ("buyer", "bigint"), ("auction_id", "bigint"),
             ("amount", "integer"), ("bid_time", "timestamp with time zone")],
}
TPCH_TABLES = {
    "region": [("r_regionkey", "integer"), ("r_name", "text"), ("r_comment", "text")],
    "nation": [("n_nationkey", "integer"), ("n_name", "text"), ("n_regionkey", "integer"),
               ("n_comment", "text")],
    "supplier": [("s_suppkey", "bigint"), ("s_name", "text"), ("s_address", "text"),
                 ("s_nationkey", "integer"), ("s_phone", "text"),
                 ("s_acctbal", "numeric(15,2)"), ("s_comment", "text")],
    "part": [("p_partkey", "bigint"), ("p_name", "text"), ("p_mfgr", "text"),
             ("p_brand", "text"), ("p_type", "text"), ("p_size", "integer"),
             ("p_container", "text"), ("p_retailprice", "numeric(15,2)"),
             ("p_comment", "text")],
    "partsupp": [("ps_partkey", "bigint"), ("ps_suppkey", "bigint"),
                 ("ps_availqty", "integer"), ("ps_supplycost", "numeric(15,2)"),
                 ("ps_comment", "text")],
    "customer": [("c_custkey", "bigint"), ("c_name", "text"), ("c_address", "text"),
                 ("c_nationkey", "integer"), ("c_phone", "text"),
                 ("c_acctbal", "numeric(15,2)"), ("c_mktsegment", "text"),
                 ("c_comment", "text")],
    "orders": [("o_orderkey", "bigint"), ("o_custkey", "bigint"), ("o_orderstatus", "text"),
               ("o_totalprice", "numeric(15,2)"), ("o_orderdate", "date"),
               ("o_orderpriority", "text"), ("o_clerk", "text"),
               ("o_shippriority", "integer"), ("o_comment", "text")],
    "lineitem": [("l_orderkey", "bigint"), ("l_partkey", "bigint"), ("l_suppkey", "bigint"),
                 ("l_linenumber", "integer"), ("l_quantity", "numeric(15,2)"),
                 ("l_extendedprice", "numeric(15,2)"), ("l_discount", "numeric(15,2)"),
                 ("l_tax", "numeric(15,2)"), ("l_returnflag", "text"),
                 ("l_linestatus", "text"), ("l_shipdate", "date"), ("l_commitdate", "date"),
                 ("l_receiptdate", "date"), ("l_shipinstruct", "text"),
                 ("l_shipmode", "text"), ("l_comment", "text")],
}
TABLES = {"COUNTER": COUNTER_TABLES, "AUCTION": AUCTION_TABLES, "TPCH": TPCH_TABLES}
_OPTIONS = {"TICK INTERVAL", "AS OF", "UP TO", "SCALE FACTOR", "SEED"}
_ARROW = {"bigint": pa.int64(), "integer": pa.int32(), "text": pa.string(),
          "timestamp with time zone": pa.timestamp("us", tz="UTC"), "date": pa.date32(),
          "numeric(15,2)": pa.decimal128(15, 2)}
# Auction times start here, one simulated second per step (the clock never matters).
_EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
_ITEMS = ("Signed Memorabilia", "City Bar Crawl", "Best Pizza in Town", "Gift Basket",
          "Custom Art")
_ORGS = 5
_USERS_PER_ORG = 4


@dataclass(frozen=True)
class Generator:
    kind: str  # COUNTER, AUCTION or TPCH
    scale_factor: float = 0.01
    up_to: int | None = None  # no rows from this step on (Materialize's UP TO)
    seed: int = 0

    @property
    def tables(self) -> dict[str, list[tuple[str, str]]]:
        return TABLES[self.kind]

    def step(self, n: int) -> dict[str, pa.Table]:
        """The rows step ``n`` adds, by output table (absent: nothing)."""
        if self.up_to is not None and n >= self.up_to:
            return {}
        rows = {"COUNTER": _counter, "AUCTION": _auction, "TPCH": _tpch}[self.kind](self, n)
        return {t: _arrow(self.tables[t], r) for t, r in rows.items() if r}

    def removals(self, n: int) -> dict[str, tuple[str, list[int]]]:
        """What step ``n`` deletes, by output table: (key column, keys). TPCH's refresh
        batches delete as well as insert (TPC-H's RF2): step n removes the snapshot's
        orders n·10-10 … n·10-1 (by TPC-H's sparse keys: 8 used of every 32) with their
        line items, a different slice each step, so a step's deletes never depend on
        what the tables hold."""
        if self.kind != "TPCH" or n == 0 or (self.up_to is not None and n >= self.up_to):
            return {}
        orders = max(1, int(1_500_000 * self.scale_factor))
        picks = [i for i in range((n - 1) * 10, n * 10) if i < orders]
        keys = [(i // 8) * 32 + i % 8 + 1 for i in picks]
        return {"orders": ("o_orderkey", keys), "lineitem": ("l_orderkey", keys)} if keys else {}


def of(stmt: ast.CreateSource) -> Generator:
    """The generator ``stmt`` names, its options checked (Materialize's wording)."""
    kind = stmt.args["generator"].name.upper()
    if kind not in TABLES:
        raise Unsupported(f"LOAD GENERATOR {kind} is not supported: mzflow has "
                                  "AUCTION, COUNTER and TPCH")
    multi = kind != "COUNTER"
    if multi and not stmt.args.get("all_tables"):
        raise InvalidOption("multi-output sources require a FOR ALL TABLES, "
                                    "FOR SCHEMAS, or FOR TABLES statement")
    if not multi and stmt.args.get("all_tables"):
        raise InvalidOption("FOR ALL TABLES is only valid for multi-output sources")
    values: dict[str, Any] = {}
    for option in stmt.args.get("options") or []:
        name = option.name
        if name not in _OPTIONS:
            raise InvalidOption(f"LOAD GENERATOR option {name} is not supported")
        if name in values:
            raise InvalidOption(f"{name} specified more than once")
        value = option.args.get("value")
        values[name] = None if value is None else value.this
    if values.get("TICK INTERVAL") is not None:
        from mzflow.catalog import intervals

        if intervals.to_ms(str(values["TICK INTERVAL"])) <= 0:
            raise InvalidOption("TICK INTERVAL must be positive")
    if "SCALE FACTOR" in values and kind != "TPCH":
        raise InvalidOption("SCALE FACTOR is only valid for TPCH")
    sf = float(values.get("SCALE FACTOR") or 0.01)
    if not 0 < sf <= 1:
        raise InvalidOption("SCALE FACTOR must be positive and at most 1 in mzflow")
    up_to = values.get("UP TO")
    return Generator(kind, sf, None if up_to is None else int(up_to),
                     int(values.get("SEED") or 0))


def _arrow(columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table({name: pa.array([r[i] for r in rows], _ARROW[type_])
                     for i, (name, type_) in enumerate(columns)})


def _counter(g: Generator, n: int) -> dict[str, list[tuple[Any, ...]]]:
    # Materialize emits 1, 2, 3, …: one row per tick, none in the snapshot.
    return {"counter": [(n,)]} if n >= 1 else {}


def _auction(g: Generator, n: int) -> dict[str, list[tuple[Any, ...]]]:
    if n == 0:  # the snapshot: organizations, their users, one account per user
        users = [(o * _USERS_PER_ORG + u, o, f"user-{o}-{u}")
                 for o in range(_ORGS) for u in range(_USERS_PER_ORG)]
        return {"organizations": [(o, f"org-{o}") for o in range(_ORGS)],
                "users": users,
                "accounts": [(uid, org, 1000 * (uid + 1)) for uid, org, _ in users]}
    # Seeded by (seed, step) alone, so a retried step draws the same rows.
    rng = random.Random(f"auction-{g.seed}-{n}")
    n_users = _ORGS * _USERS_PER_ORG
    now = _EPOCH + dt.timedelta(seconds=n)
    auction = (n, rng.randrange(n_users), rng.choice(_ITEMS), now + dt.timedelta(seconds=10))
    bids = [(n * 10 + i, rng.randrange(n_users), n, rng.randint(1, 100),
             now + dt.timedelta(milliseconds=100 * i)) for i in range(rng.randint(1, 5))]
    return {"auctions": [auction], "bids": bids}


def _tpch(g: Generator, n: int) -> dict[str, list[tuple[Any, ...]]]:
    if n == 0:
        return _tpch_snapshot(g.scale_factor)
    # A refresh batch (TPC-H's RF1): new orders with line items, keys above the snapshot's
    # (TPC-H leaves gaps in order keys, so these never collide). Its deletes (RF2):
    # ``Generator.removals``.
    rng = random.Random(f"tpch-{g.seed}-{n}")
    n_cust = max(1, int(150_000 * g.scale_factor))
    n_part = max(1, int(200_000 * g.scale_factor))
    n_supp = max(1, int(10_000 * g.scale_factor))
    base = int(6_000_000 * g.scale_factor) * 4 + 1 + n * 100
    orders, items = [], []
    for i in range(10):
        key = base + i
        day = dt.date(1992, 1, 1) + dt.timedelta(days=rng.randint(0, 2400))
        total = Decimal(0)
        for line in range(1, rng.randint(1, 7) + 1):
            qty = Decimal(rng.randint(1, 50))
            price = (qty * Decimal(rng.randint(900, 2000))).quantize(Decimal("0.01"))
            total += price
            items.append((key, rng.randint(1, n_part), rng.randint(1, n_supp), line,
                          qty, price, Decimal(rng.randint(0, 10)) / 100,
                          Decimal(rng.randint(0, 8)) / 100, "N", "O",
                          day + dt.timedelta(days=rng.randint(1, 121)),
                          day + dt.timedelta(days=rng.randint(30, 90)),
                          day + dt.timedelta(days=rng.randint(122, 150)), "NONE", "MAIL",
                          "refresh"))
        orders.append((key, rng.randint(1, n_cust), "O", total, day, "3-MEDIUM",
                       f"Clerk#{rng.randint(1, 1000):09d}", 0, "refresh"))
    return {"orders": orders, "lineitem": items}


def _tpchgen() -> str:
    beside = Path(sys.executable).parent / "tpchgen-cli"
    found = str(beside) if beside.exists() else shutil.which("tpchgen-cli")
    if found is None:
        raise Unsupported("LOAD GENERATOR TPCH needs tpchgen-cli: pip install "
                                  "tpchgen-cli")
    return found


def _tpch_snapshot(sf: float) -> dict[str, list[tuple[Any, ...]]]:
    """The 8 tables at ``sf``, from tpchgen-cli as bench/ and mzflow_dev invoke it."""
    import pyarrow.parquet as pq

    out: dict[str, list[tuple[Any, ...]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([_tpchgen(), "parquet", "-s", f"{sf:g}", "-o", tmp, "-q"], check=True)
        for table, columns in TPCH_TABLES.items():
            data = pq.read_table(Path(tmp) / f"{table}.parquet",
                                 columns=[c for c, _ in columns])
            cols = [data.column(c).to_pylist() for c, _ in columns]
            out[table] = list(zip(*cols, strict=True))
    return out
