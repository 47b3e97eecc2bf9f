"""TPC-H data for mzflow and for a DuckDB oracle: generation, loading, refresh batches.

Used by ``tests/test_tpch.py`` and by the TPC-H benchmarks in ``bench/``. Data comes
from ``tpchgen-cli`` (PyPI), written as Parquet once per scale factor into a cache
directory; the same files are COPYed into mzflow and loaded into DuckDB with the same
column types.

Refresh batches have the shape of TPC-H's refresh functions: RF1 inserts new orders
(keys above the current maximum) with 1 to 7 line items each, referencing existing
customers, parts and suppliers; RF2 deletes the oldest orders by key with their
line items. Batches are drawn from a seeded generator, so both sides and every run
see the same rows.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "queries"

TABLES: dict[str, list[tuple[str, str]]] = {
    "region": [("r_regionkey", "bigint"), ("r_name", "char(25)"),
               ("r_comment", "varchar(152)")],
    "nation": [("n_nationkey", "bigint"), ("n_name", "char(25)"), ("n_regionkey", "bigint"),
               ("n_comment", "varchar(152)")],
    "supplier": [("s_suppkey", "bigint"), ("s_name", "char(25)"), ("s_address", "varchar(40)"),
                 ("s_nationkey", "bigint"), ("s_phone", "char(15)"),
                 ("s_acctbal", "numeric(15,2)"), ("s_comment", "varchar(101)")],
    "customer": [("c_custkey", "bigint"), ("c_name", "varchar(25)"),
                 ("c_address", "varchar(40)"), ("c_nationkey", "bigint"),
                 ("c_phone", "char(15)"), ("c_acctbal", "numeric(15,2)"),
                 ("c_mktsegment", "char(10)"), ("c_comment", "varchar(117)")],
    "part": [("p_partkey", "bigint"), ("p_name", "varchar(55)"), ("p_mfgr", "char(25)"),
             ("p_brand", "char(10)"), ("p_type", "varchar(25)"), ("p_size", "integer"),
             ("p_container", "char(10)"), ("p_retailprice", "numeric(15,2)"),
             ("p_comment", "varchar(23)")],
    "partsupp": [("ps_partkey", "bigint"), ("ps_suppkey", "bigint"), ("ps_availqty", "integer"),
                 ("ps_supplycost", "numeric(15,2)"), ("ps_comment", "varchar(199)")],
    "orders": [("o_orderkey", "bigint"), ("o_custkey", "bigint"), ("o_orderstatus", "char(1)"),
               ("o_totalprice", "numeric(15,2)"), ("o_orderdate", "date"),
               ("o_orderpriority", "char(15)"), ("o_clerk", "char(15)"),
               ("o_shippriority", "integer"), ("o_comment", "varchar(79)")],
    "lineitem": [("l_orderkey", "bigint"), ("l_partkey", "bigint"), ("l_suppkey", "bigint"),
                 ("l_linenumber", "integer"), ("l_quantity", "numeric(15,2)"),
                 ("l_extendedprice", "numeric(15,2)"), ("l_discount", "numeric(15,2)"),
                 ("l_tax", "numeric(15,2)"), ("l_returnflag", "char(1)"),
                 ("l_linestatus", "char(1)"), ("l_shipdate", "date"), ("l_commitdate", "date"),
                 ("l_receiptdate", "date"), ("l_shipinstruct", "char(25)"),
                 ("l_shipmode", "char(10)"), ("l_comment", "varchar(44)")],
}


def create_sql(table: str) -> str:
    cols = ", ".join(f"{name} {type_}" for name, type_ in TABLES[table])
    return f"CREATE TABLE {table} ({cols})"


def cache_root() -> Path:
    return Path(os.environ.get("MZFLOW_TPCH_CACHE", Path.home() / ".cache" / "mzflow-tpch"))


def _tpchgen() -> str:
    beside = Path(sys.executable).parent / "tpchgen-cli"
    found = str(beside) if beside.exists() else shutil.which("tpchgen-cli")
    if found is None:
        raise RuntimeError("tpchgen-cli not found: pip install tpchgen-cli (the dev extra)")
    return found


def generate(sf: float, root: Path | None = None) -> Path:
    """Parquet files of the 8 tables at scale factor ``sf`` (generated once, then cached)."""
    out = (root or cache_root()) / f"sf{sf:g}"
    if all((out / f"{t}.parquet").is_file() for t in TABLES):
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    subprocess.run([_tpchgen(), "parquet", "-s", f"{sf:g}", "-o", str(tmp), "-q"], check=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def load_mzflow(conn: Any, data: Path, progress: Callable[[str], None] | None = None) -> None:
    for table in TABLES:
        conn.execute(create_sql(table))
        conn.execute(f"COPY {table} FROM '{data / (table + '.parquet')}' WITH (FORMAT parquet)")
        if progress:
            progress(f"loaded {table}")


def load_duckdb(db: Any, data: Path) -> None:
    for table, cols in TABLES.items():
        db.execute(create_sql(table))
        names = ", ".join(n for n, _ in cols)
        db.execute(f"INSERT INTO {table} SELECT {names} FROM "
                   f"read_parquet('{data / (table + '.parquet')}')")


def queries(numbers: list[int] | None = None) -> dict[str, str]:
    """``{"q01": sql, …}``: the TPC-H queries with the spec's validation parameters."""
    out = {}
    for n in numbers or range(1, 23):
        text = (QUERIES / f"q{n:02d}.sql").read_text()
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
        out[f"q{n:02d}"] = "\n".join(lines).strip().rstrip(";")
    return out


# --- refresh batches ----------------------------------------------------------------

CURRENT = dt.date(1995, 6, 17)  # TPC-H's CURRENTDATE: decides line status and return flag
START, END = dt.date(1992, 1, 1), dt.date(1998, 8, 2)
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
INSTRUCTIONS = ["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"]
MODES = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]
WORDS = ("furiously special requests carefully final deposits quickly regular accounts "
         "blithely ironic packages slyly express theodolites pending instructions bold "
         "foxes even ideas unusual platelets").split()
CENT = Decimal("0.01")


@dataclass
class Batch:
    orders: pa.Table  # new orders
    lineitem: pa.Table  # their line items
    delete_upto: int  # orders (and line items) with o_orderkey <= this are deleted
    deleted_orders: int

    def __str__(self) -> str:
        return (f"+{self.orders.num_rows} orders, +{self.lineitem.num_rows} line items, "
                f"-{self.deleted_orders} orders (keys <= {self.delete_upto})")


def _comment(rng: random.Random, limit: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]
    return " ".join(words)[:limit]


def make_batch(db: Any, n_orders: int, seed: int) -> Batch:
    """A refresh batch against the current contents of the DuckDB oracle ``db``."""
    rng = random.Random(seed)
    (max_key,) = db.execute("SELECT max(o_orderkey) FROM orders").fetchone()
    (n_current,) = db.execute("SELECT count(*) FROM orders").fetchone()
    delete_n = min(n_orders, n_current)
    (delete_upto,) = db.execute(
        f"SELECT max(o_orderkey) FROM (SELECT o_orderkey FROM orders ORDER BY o_orderkey "
        f"LIMIT {delete_n})").fetchone()
    (n_cust,) = db.execute("SELECT max(c_custkey) FROM customer").fetchone()
    (n_clerks,) = db.execute("SELECT count(DISTINCT o_clerk) FROM orders").fetchone()
    parts = db.execute("SELECT p_partkey, p_retailprice FROM part ORDER BY 1").fetchall()
    supp: dict[int, list[int]] = {}
    for pk, sk in db.execute("SELECT ps_partkey, ps_suppkey FROM partsupp ORDER BY 1, 2"
                             ).fetchall():
        supp.setdefault(pk, []).append(sk)
    orders: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    span = (END - START).days
    for i in range(n_orders):
        key = max_key + 1 + i
        cust = rng.randint(1, n_cust)
        while cust % 3 == 0:  # as in dbgen: a third of the customers never order
            cust = rng.randint(1, n_cust)
        odate = START + dt.timedelta(days=rng.randint(0, span - 151))
        total = Decimal(0)
        statuses = []
        for line in range(1, rng.randint(1, 7) + 1):
            pk, price = parts[rng.randrange(len(parts))]
            qty = Decimal(rng.randint(1, 50))
            ext = (qty * price).quantize(CENT)
            disc = Decimal(rng.randint(0, 10)) / 100
            tax = Decimal(rng.randint(0, 8)) / 100
            ship = odate + dt.timedelta(days=rng.randint(1, 121))
            commit = odate + dt.timedelta(days=rng.randint(30, 90))
            receipt = ship + dt.timedelta(days=rng.randint(1, 30))
            flag = rng.choice("RA") if receipt <= CURRENT else "N"
            status = "O" if ship > CURRENT else "F"
            statuses.append(status)
            total += (ext * (1 + tax) * (1 - disc)).quantize(CENT)
            items.append({
                "l_orderkey": key, "l_partkey": pk, "l_suppkey": rng.choice(supp[pk]),
                "l_linenumber": line, "l_quantity": qty, "l_extendedprice": ext,
                "l_discount": disc, "l_tax": tax, "l_returnflag": flag,
                "l_linestatus": status, "l_shipdate": ship, "l_commitdate": commit,
                "l_receiptdate": receipt, "l_shipinstruct": rng.choice(INSTRUCTIONS),
                "l_shipmode": rng.choice(MODES), "l_comment": _comment(rng, 44)})
        state = "F" if set(statuses) == {"F"} else "O" if set(statuses) == {"O"} else "P"
        orders.append({
            "o_orderkey": key, "o_custkey": cust, "o_orderstatus": state,
            "o_totalprice": total, "o_orderdate": odate,
            "o_orderpriority": rng.choice(PRIORITIES),
            "o_clerk": f"Clerk#{rng.randint(1, max(n_clerks, 1)):09d}", "o_shippriority": 0,
            "o_comment": _comment(rng, 79)})
    return Batch(_arrow("orders", orders), _arrow("lineitem", items), delete_upto, delete_n)


def _arrow(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    def arrow(type_: str) -> pa.DataType:
        if type_.startswith("numeric"):
            return pa.decimal128(15, 2)
        return {"bigint": pa.int64(), "integer": pa.int32(), "date": pa.date32()}.get(
            type_, pa.string())

    schema = pa.schema([(n, arrow(t)) for n, t in TABLES[table]])
    return pa.Table.from_pylist(rows, schema=schema)


def apply_mzflow(conn: Any, batch: Batch, scratch: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    for name, rows in (("orders", batch.orders), ("lineitem", batch.lineitem)):
        path = scratch / f"{name}.parquet"
        pq.write_table(rows, path)
        conn.execute(f"COPY {name} FROM '{path}' WITH (FORMAT parquet)")
    conn.execute(f"DELETE FROM lineitem WHERE l_orderkey <= {batch.delete_upto}")
    conn.execute(f"DELETE FROM orders WHERE o_orderkey <= {batch.delete_upto}")


def apply_duckdb(db: Any, batch: Batch) -> None:
    for name, rows in (("orders", batch.orders), ("lineitem", batch.lineitem)):
        db.register("batch_rows", rows)
        db.execute(f"INSERT INTO {name} SELECT * FROM batch_rows")
        db.unregister("batch_rows")
    db.execute(f"DELETE FROM lineitem WHERE l_orderkey <= {batch.delete_upto}")
    db.execute(f"DELETE FROM orders WHERE o_orderkey <= {batch.delete_upto}")


# --- comparing results ---------------------------------------------------------------


def _close(a: object, b: object) -> bool:
    if isinstance(a, float | Decimal) and isinstance(b, float | Decimal | int):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(b, float | Decimal) and isinstance(a, int):
        return _close(b, a)
    return a == b


def _key(row: tuple) -> tuple:
    return tuple((0, float(v)) if isinstance(v, int | float | Decimal) and v is not True
                 and v is not False else (1, repr(v)) for v in row)


def same_rows(got: list[tuple], want: list[tuple]) -> str | None:
    """None when ``got`` equals ``want`` as multisets (numbers to ~6 digits), else why not."""
    if len(got) != len(want):
        return f"{len(got)} rows, DuckDB has {len(want)}"
    for g, w in zip(sorted(got, key=_key), sorted(want, key=_key), strict=True):
        if len(g) != len(w) or not all(_close(x, y) for x, y in zip(g, w, strict=True)):
            return f"row {g!r} where DuckDB has {w!r}"
    return None
