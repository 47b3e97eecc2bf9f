"""mzflow's maintained views against full recompute and a Spark Declarative Pipeline.

    make bench                                   # SF 1, every view, 0.1 % / 1 % / 10 % batches
    .venv/bin/python bench/run.py --sf 0.1 --batches 5
    .venv/bin/python bench/run.py --sf 0.01 --views q01 --sizes 0.01 --batches 1 --quick

One run, one Spark application (mzflow's session; a Spark Connect server is started in
the same JVM for the pipeline), the same data for everyone:

1. TPC-H at ``--sf`` (``tpchgen-cli``) COPYed into a fresh mzflow home; Q1, Q3, Q5, Q18
   and a top-k query (``topk``: the 10 customers with the most revenue) become
   materialized views in cluster ``bench`` and are hydrated.
2. For each batch size (a share of ``lineitem``), ``--batches`` refresh batches (RF1
   inserts new orders with their line items, RF2 deletes as many of the oldest orders).
   After each batch, for each view:
   - **mzflow**: ``conn.tick(object=view)`` (its report gives rows and files read and
     the strategy, e.g. ``recompute (R010 …)`` when mzflow picks recompute itself);
   - **recompute**: what a user does without mzflow, in the same Spark session: read
     each table's current Delta version (its file list, from the Delta log), run the
     query in Spark SQL, and replace a Delta table with the result. delta-spark's
     ``CREATE OR REPLACE TABLE … AS SELECT`` is not available here (no delta-spark
     jars, DESIGN.md §3), so the write is Spark → Arrow → ``deltalake.write_deltalake(
     mode="overwrite")``;
   - **sdp**: a refresh of that view in a Spark Declarative Pipeline (``pyspark.pipelines``;
     sources are temporary views over the same Parquet files, the views are SQL
     ``CREATE MATERIALIZED VIEW`` files), run through a Spark Connect server in the same
     JVM (``create_dataflow_graph`` + ``start_run`` with ``refresh=[view]``, what
     ``spark-pipelines run --refresh view`` sends);
   - **check**: the maintained view (read from its index) equals the recompute, and the
     pipeline's table equals it too. A mismatch fails the run (exit status 1).
3. Also: SELECT latency from an index against recomputing the query, DDL latency
   (``bench/catalog_latency.py``), DAG-file parse time for 200 objects
   (``bench/dag_parse.py``), and one end-to-end ``spark-pipelines run`` of the pipeline
   project (a fresh JVM, as the CLI is used).
4. Two more batches at the smallest size, not counted in the figures: the first ticked
   as usual (``after_largest``: the first small tick after the largest round, a
   target), the second with each view's tick under cProfile: where its time goes
   (``profiles`` in the JSON).

Output: a table on the terminal, ``bench/results/<timestamp>.json`` and ``.png``.
See bench/README.md for how to read them and for the targets.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

import mzflow
from mzflow import config as mzflow_config
from mzflow_dev.tpch import data

ROOT = Path(__file__).resolve().parent.parent

CLUSTER = "bench"
TPCH_VIEWS = {"q01": 1, "q03": 3, "q05": 5, "q18": 18}
# The top-k view: an ORDER BY … LIMIT over an accumulable GROUP BY (customer revenue).
TOPK_SQL = """select
    c_custkey,
    c_name,
    sum(l_extendedprice * (1 - l_discount)) as revenue,
    count(*) as line_items
from
    customer,
    orders,
    lineitem
where
    c_custkey = o_custkey
    and o_orderkey = l_orderkey
group by
    c_custkey,
    c_name
order by
    revenue desc,
    c_custkey
limit 10"""
ALL_VIEWS = [*TPCH_VIEWS, "topk"]
SYSTEMS = ("mzflow", "recompute", "sdp")
# Targets from issue 34 at SF 1, against the full recompute in the same run (the SDP
# refresh is reported beside them). 0.1 % batches: at least this many times faster, a
# median tick of at most 0.5 s, and no recompute.
TARGET_SPEEDUP = {"q01": 20.0, "q03": 5.0, "q05": 10.0, "q18": 10.0, "topk": 10.0}
# With --tick-executor spark the target is "no slower than today": issue 34's figures
# for Spark-only ticks (medians of 5 batches at 0.1 %, against the same recompute).
SPARK_TODAY = {"q01": 5.0, "q03": 0.98, "q05": 1.02, "q18": 1.43, "topk": 2.2}
SMALL_TICK_S = 0.5
ONE_PCT_SPEEDUP = 3.0  # 1 % batches: every view at least 3x
MAX_SLOWDOWN = 1.1  # 10 % batches: never slower than 1.1x the recompute
AFTER_LARGE_RATIO = 3.0  # the first 0.1 % tick after larger batches: <= 3x a normal one
HYDRATION_S = 15.0  # the bench cluster's first ticks, all views
HYDRATION_RSS = 2 * 2**30  # the process's memory after them
DAG_PARSE_TARGET_S = 1.0


def view_sql(name: str) -> str:
    if name == "topk":
        return TOPK_SQL
    return data.queries([TPCH_VIEWS[name]])[name]


def spark_sql(sql: str, prefix: str = "") -> str:
    """The view's query in Spark SQL; base tables renamed ``<prefix><table>``."""
    tree = sqlglot.parse_one(sql, read="postgres")
    if prefix:
        for table in tree.find_all(exp.Table):
            if table.name in data.TABLES:
                alias = table.alias_or_name
                table.set("this", exp.to_identifier(prefix + table.name))
                if not table.args.get("alias"):
                    table.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return tree.sql(dialect="spark")


def tables_of(sql: str) -> list[str]:
    tree = sqlglot.parse_one(sql, read="postgres")
    return sorted({t.name for t in tree.find_all(exp.Table) if t.name in data.TABLES})


def pct(share: float) -> str:
    return f"{share * 100:g}%"


def p95(xs: list[float]) -> float:
    if len(xs) < 2:
        return xs[0] if xs else float("nan")
    return statistics.quantiles(xs, n=20, method="inclusive")[18]


# --- the baselines' view of the data: each table's current Delta version -----------------


@dataclass
class TableFiles:
    path: str
    version: int
    files: list[str]
    rows: int


def current_files(warehouse: Path, ids: dict[str, str]) -> dict[str, TableFiles]:
    """Each TPC-H table's newest Delta version: its data files and row count, from the log."""
    from deltalake import DeltaTable

    out = {}
    for name, item_id in ids.items():
        t = DeltaTable(str(warehouse / item_id))
        actions = t.get_add_actions(flatten=True)
        rows = sum(v or 0 for v in actions.column("num_records").to_pylist())
        out[name] = TableFiles(str(warehouse / item_id), int(t.version()),
                               list(t.file_uris()), int(rows))
    return out


def columns_of(table: str) -> list[str]:
    return [c for c, _ in data.TABLES[table]]


class Recompute:
    """Full recompute in mzflow's Spark session: Delta log → Spark SQL → Delta overwrite."""

    PREFIX = "bench_"

    def __init__(self, spark: Any, warehouse: Path, ids: dict[str, str], out_root: Path):
        self.spark, self.warehouse, self.ids, self.out_root = spark, warehouse, ids, out_root
        out_root.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, sql: str) -> tuple[float, Any, int, int]:
        """Seconds, the result (Arrow), rows read, files read."""
        from deltalake import write_deltalake

        needed = tables_of(sql)
        started = time.perf_counter()
        files = current_files(self.warehouse, {t: self.ids[t] for t in needed})
        for t in needed:
            (self.spark.read.parquet(*files[t].files).select(*columns_of(t))
             .createOrReplaceTempView(self.PREFIX + t))
        result = self.spark.sql(spark_sql(sql, self.PREFIX)).toArrow()
        write_deltalake(str(self.out_root / name), result, mode="overwrite",
                        schema_mode="overwrite")
        seconds = time.perf_counter() - started
        return (seconds, result, sum(files[t].rows for t in needed),
                sum(len(files[t].files) for t in needed))


# --- the Spark Declarative Pipeline ---------------------------------------------------------

SOURCES_PY = '''"""Sources of the benchmark pipeline: each TPC-H table's current Delta version.

manifest.json (rewritten by bench/run.py after every batch) lists the Parquet files of
each table's newest Delta version; the pipeline reads exactly those (no delta-spark).
"""
import json
from pathlib import Path

from pyspark import pipelines as dp

MANIFEST = json.loads((Path(__file__).resolve().parent.parent / "manifest.json").read_text())


def _source(table):
    files, columns = MANIFEST[table]["files"], MANIFEST[table]["columns"]

    @dp.temporary_view(name=table)
    def read():
        return spark.read.parquet(*files).select(*columns)  # noqa: F821 (set by the loader)


for _table in MANIFEST:
    _source(_table)
'''


class Pipeline:
    """A pipeline project (spec, Python sources, one SQL file per materialized view) and
    its refreshes through a Spark Connect server started inside mzflow's JVM."""

    def __init__(self, root: Path, views: dict[str, str]):
        self.root, self.views = root, views
        self.spec = root / "spark-pipeline.yml"
        self.storage = root / "storage"
        self.warehouse = root / "warehouse"
        self.database = "bench_sdp"
        self.client: Any = None
        (root / "transformations").mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(exist_ok=True)
        (root / "transformations" / "sources.py").write_text(SOURCES_PY)
        for name, sql in views.items():
            (root / "transformations" / f"{name}.sql").write_text(
                f"CREATE MATERIALIZED VIEW {name} AS\n{spark_sql(sql)}\n")
        self.write_spec(self.spec, database=self.database)

    def write_spec(self, path: Path, database: str | None) -> None:
        lines = ["name: mzflow_bench", f"storage: file://{self.storage}"]
        if database:
            lines.append(f"database: {database}")
        lines += ["configuration:", '  spark.sql.shuffle.partitions: "4"',
                  '  spark.sql.session.timeZone: "UTC"', '  spark.sql.ansi.enabled: "true"',
                  "libraries:", "  - glob:", "      include: transformations/**"]
        path.write_text("\n".join(lines) + "\n")

    def write_manifest(self, files: dict[str, TableFiles]) -> None:
        manifest = {t: {"files": f.files, "columns": columns_of(t)} for t, f in files.items()}
        (self.root / "manifest.json").write_text(json.dumps(manifest))

    def start(self, spark: Any) -> float:
        """Start Spark Connect in mzflow's JVM and connect a client session to it."""
        started = time.perf_counter()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        sc = spark._jsc.sc()
        sc.conf().set("spark.connect.grpc.binding.port", str(port))
        sc.conf().set("spark.connect.grpc.binding.address", "127.0.0.1")
        spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(sc)
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        self.client = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        self.client.sql(f"CREATE DATABASE IF NOT EXISTS {self.database} "
                        f"LOCATION '{self.warehouse}'").collect()
        return time.perf_counter() - started

    def refresh(self, names: list[str] | None = None, full: bool = False) -> tuple[float, list]:
        """One pipeline run (only ``names`` when given): seconds and the run's events."""
        from pyspark.pipelines import cli
        from pyspark.pipelines.spark_connect_graph_element_registry import (
            SparkConnectGraphElementRegistry,
        )
        from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

        started = time.perf_counter()
        spec = cli.load_pipeline_spec(self.spec)
        graph = create_dataflow_graph(self.client, spec.catalog, spec.database,
                                      spec.configuration)
        registry = SparkConnectGraphElementRegistry(self.client, graph)
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
            cli.register_definitions(self.spec, registry, spec, self.client, graph)
        events = []
        for result in start_run(self.client, graph, full_refresh=None,
                                full_refresh_all=full, refresh=names or None, dry=False,
                                storage=spec.storage):
            if "pipeline_event_result" in result:
                events.append(result["pipeline_event_result"].event.message)
        seconds = time.perf_counter() - started
        failed = [m for m in events if "FAILED" in m or "failed" in m]
        if failed or not any("Run is COMPLETED" in m for m in events):
            raise RuntimeError("pipeline run did not complete: " + " | ".join(events[-5:]))
        return seconds, events

    def read(self, name: str) -> Any:
        return self.client.table(f"{self.database}.{name}").toArrow()

    def cli_run(self, scratch: Path) -> dict[str, Any]:
        """The pipeline as users run it: ``spark-pipelines run`` in a fresh JVM (it starts
        its own Spark Connect server; its catalog is in memory, so each CLI run is a
        first run). Wall time includes JVM start."""
        scratch.mkdir(parents=True, exist_ok=True)
        project = scratch / "project"
        shutil.rmtree(project, ignore_errors=True)
        shutil.copytree(self.root / "transformations", project / "transformations")
        shutil.copy(self.root / "manifest.json", project / "manifest.json")
        self.write_spec(project / "spark-pipeline.yml", database=None)
        tool = Path(sys.executable).parent / "spark-pipelines"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        started = time.perf_counter()
        out = subprocess.run([str(tool), "run", "--spec", str(project / "spark-pipeline.yml")],
                             cwd=project, env=env, capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - started
        ok = out.returncode == 0 and "Run is COMPLETED" in out.stdout + out.stderr
        tail = [ln for ln in (out.stdout + out.stderr).splitlines()
                if ln.strip() and not ln.startswith("\tat ")][-8:]
        return {"ok": ok, "seconds": seconds, "warehouse": str(project / "spark-warehouse"),
                "tail": tail}


# --- the run -----------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    rows_read: int
    files_read: int
    strategy: str = ""


@dataclass
class Cell:  # one view at one batch size
    samples: dict[str, list[Sample]] = field(
        default_factory=lambda: {s: [] for s in SYSTEMS})
    checks: list[str] = field(default_factory=list)  # mismatches (empty: all equal)


class Log:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.started:7.1f} s] {msg}", flush=True)


def rows_of(table: Any) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]


def read_index(conn: mzflow.Connection, name: str) -> list[tuple]:
    conn.execute(f"SET cluster = {CLUSTER}")
    try:
        return conn.execute(f"SELECT * FROM {name}").rows
    finally:
        conn.execute("SET cluster = default")


def run(args: argparse.Namespace) -> dict[str, Any]:
    say = Log()
    views = {v: view_sql(v) for v in args.views}
    files = data.generate(args.sf)
    say(f"TPC-H SF {args.sf:g} in {files}")
    db = duckdb.connect()  # tracks the current contents, to draw each batch against
    data.load_duckdb(db, files)
    (lineitems,) = db.execute("SELECT count(*) FROM lineitem").fetchone()
    (per_order,) = db.execute(
        "SELECT count(*) / count(DISTINCT l_orderkey) FROM lineitem").fetchone()
    home = Path(args.home or tempfile.mkdtemp(prefix="mzflow-bench-"))
    result: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(),
                    "load_avg_at_start": list(os.getloadavg())},
        "sf": args.sf, "lineitem_rows": lineitems, "views": list(views),
        "batch_sizes": args.sizes, "batches_per_size": args.batches, "home": str(home),
        "recompute_share": mzflow_config.tuning().recompute_share,
        "cluster_size": args.cluster_size, "tick_executor": args.tick_executor,
        "sdp": {"enabled": not args.no_sdp}, "cells": {}, "check_failures": [],
    }
    say(f"mzflow home {home}; {lineitems} line items")
    failures: list[str] = result["check_failures"]
    with mzflow.connect(str(home)) as conn:
        t = time.perf_counter()
        data.load_mzflow(conn, files)
        result["load_seconds"] = time.perf_counter() - t
        say(f"loaded in {result['load_seconds']:.1f} s")
        conn.execute(f"CREATE CLUSTER {CLUSTER} SIZE '{args.cluster_size}'")
        if args.tick_executor != "auto":
            conn.execute(f"ALTER SYSTEM SET tick_executor = '{args.tick_executor}'")
        for name, sql in views.items():
            conn.execute(f"CREATE MATERIALIZED VIEW {name} IN CLUSTER {CLUSTER} AS {sql}")
            conn.execute(f"CREATE VIEW {name}_plain AS {sql}")
        result["hydration"] = {}
        for name in views:
            (report,) = conn.tick(object=name)
            result["hydration"][name] = report.seconds
            say(f"hydrated {name} in {report.seconds:.1f} s"
                + (f" ERROR {report.error}" if report.error else ""))
        result["hydration_rss_bytes"] = rss_bytes()
        # The oracle lives in this process too: DuckDB holds all of TPC-H in memory
        # (about 1 GiB at SF 1), which is not mzflow's.
        (oracle,) = db.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()"
                               ).fetchone()
        result["oracle_bytes"] = int(oracle or 0)
        say(f"hydration: {sum(result['hydration'].values()):.1f} s in all; process RSS "
            f"{result['hydration_rss_bytes'] / 2**20:.0f} MiB, of which DuckDB's oracle "
            f"{result['oracle_bytes'] / 2**20:.0f} MiB (the JVM's not counted)")
        result["explain"] = {}
        for name in views:
            plan = conn.execute(f"EXPLAIN MATERIALIZED VIEW {name}").rows[0][0]
            result["explain"][name] = plan
            strategy = [ln.strip() for ln in plan.splitlines() if "trateg" in ln]
            say(f"EXPLAIN {name}: {'; '.join(strategy[:2]) or plan.splitlines()[0]}")

        from mzflow.engine import spark as mz_spark

        spark = mz_spark.session()
        ids = {name: str(item_id) for item_id, name in
               conn.execute("SELECT id, name FROM mz_tables").rows if name in data.TABLES}
        warehouse = conn.config.warehouse
        recompute = Recompute(spark, warehouse, ids, home / "recompute")
        pipeline: Pipeline | None = None
        if not args.no_sdp:
            try:
                pipeline = Pipeline(home / "sdp", views)
                pipeline.write_manifest(current_files(warehouse, ids))
                result["sdp"]["connect_start_seconds"] = pipeline.start(spark)
                seconds, _ = pipeline.refresh(full=True)
                result["sdp"]["first_run_seconds"] = seconds
                say(f"pipeline: first run (all views) in {seconds:.1f} s")
            except Exception as e:  # keep the rest of the benchmark
                result["sdp"].update(enabled=False, error=f"{type(e).__name__}: {e}",
                                     traceback=traceback.format_exc())
                say(f"pipeline UNAVAILABLE: {type(e).__name__}: {str(e)[:500]}")
                pipeline = None
        for name, sql in views.items():  # warm the recompute path (planning, JIT)
            recompute.run(name, sql)
            if pipeline:
                pipeline.refresh([name])
        say("warm-up done")

        batch_no = 0
        for share in args.sizes:
            n_orders = max(1, round(share * lineitems / per_order))
            cells = {name: Cell() for name in views}
            for i in range(args.batches):
                t = time.perf_counter()
                batch = data.make_batch(db, n_orders, seed=7000 + batch_no)
                data.apply_mzflow(conn, batch, home / "batches" / str(batch_no))
                data.apply_duckdb(db, batch)
                batch_no += 1
                say(f"{pct(share)} batch {i + 1}/{args.batches}: {batch} "
                    f"({time.perf_counter() - t:.1f} s)")
                if pipeline:
                    pipeline.write_manifest(current_files(warehouse, ids))
                # Whoever reads a batch's new files second finds them warm (OS and JVM
                # caches): mzflow and the recompute take turns going first.
                recompute_first = i % 2 == 1
                for name, sql in views.items():
                    cell = cells[name]
                    if recompute_first:
                        secs, full, rows, nfiles = recompute.run(name, sql)
                    (report,) = conn.tick(object=name)
                    cell.samples["mzflow"].append(Sample(report.seconds, report.rows_read,
                                                         report.files_read, report.strategy))
                    if report.error:
                        cell.checks.append(f"tick error: {report.error}")
                    if not recompute_first:
                        secs, full, rows, nfiles = recompute.run(name, sql)
                    cell.samples["recompute"].append(Sample(secs, rows, nfiles))
                    want = rows_of(full)
                    problem = data.same_rows(read_index(conn, name), want)
                    if problem:
                        cell.checks.append(f"batch {batch_no}: index != recompute: {problem}")
                    line = (f"  {name}: tick {report.seconds:6.2f} s ({report.rows_read} rows, "
                            f"{report.files_read} files; {report.strategy}) | recompute "
                            f"{secs:6.2f} s ({rows} rows, {nfiles} files)")
                    if pipeline:
                        psecs, _ = pipeline.refresh([name])
                        cell.samples["sdp"].append(Sample(psecs, rows, nfiles))
                        problem = data.same_rows(rows_of(pipeline.read(name)), want)
                        if problem:
                            cell.checks.append(f"batch {batch_no}: pipeline != recompute: "
                                               f"{problem}")
                        line += f" | sdp {psecs:6.2f} s"
                    say(line + ("" if not cell.checks else f"  CHECK: {cell.checks[-1]}"))
            for name, cell in cells.items():
                result["cells"].setdefault(name, {})[pct(share)] = summarize(
                    share, n_orders, cell)
                failures.extend(f"{name} {pct(share)}: {c}" for c in cell.checks)

        if args.profile and args.sizes:
            share = min(args.sizes)

            def extra_batch(label: str, seed: int) -> str:
                batch = data.make_batch(db, max(1, round(share * lineitems / per_order)),
                                        seed=seed)
                data.apply_mzflow(conn, batch, home / "batches" / label)
                data.apply_duckdb(db, batch)
                return f"{pct(share)}: {batch}"

            # One more batch at the smallest size, not counted above, ticked as every
            # other (untimed by cProfile, whose overhead on a tick of many small Python
            # calls is 2-3x): the first small tick after the largest round.
            after_batch = extra_batch("after", 6000 + batch_no)
            result["after_largest"] = {"batch": after_batch}
            for name in views:
                (report,) = conn.tick(object=name)
                result["after_largest"][name] = {"seconds": report.seconds,
                                                 "strategy": report.strategy}
                say(f"after the largest round: {name} {report.seconds:.2f} s")
            # And one more: where a tick's time goes, under cProfile.
            profile_batch = extra_batch("profile", 7000 + batch_no)
            if pipeline:  # the CLI run below reads the data as it is now
                pipeline.write_manifest(current_files(warehouse, ids))
            result["profiles"] = {"batch": profile_batch}
            for name in views:
                result["profiles"][name] = profiled_tick(conn, name)
                top = result["profiles"][name]["top"][:4]
                say(f"profile {name}: {result['profiles'][name]['seconds']:.2f} s; "
                    + "; ".join(f"{t['function']} {t['cumulative_s']:.2f} s" for t in top))
        if not args.quick:
            result["select_latency"] = select_latency(conn, views, args.select_n)
            say("SELECT latency measured")
        if pipeline and args.sdp_cli:
            say("spark-pipelines run (fresh JVM, end to end)…")
            cli = pipeline.cli_run(home / "sdp-cli")
            if cli["ok"]:  # its tables equal the last recompute?
                cli["checks"] = {}
                for name, sql in views.items():
                    import pyarrow.parquet as pq

                    got = rows_of(pq.read_table(Path(cli["warehouse"]) / name))
                    _, full, _, _ = recompute.run(name, sql)
                    cli["checks"][name] = data.same_rows(got, rows_of(full)) or "equal"
                    if cli["checks"][name] != "equal":
                        failures.append(f"{name}: spark-pipelines run != recompute: "
                                        f"{cli['checks'][name]}")
            result["sdp"]["cli_run"] = cli
            say(f"spark-pipelines run: {'ok' if cli['ok'] else 'FAILED'} in "
                f"{cli['seconds']:.1f} s")
        # The cluster's server goes with the run: idling on (cluster_idle_seconds) it
        # counted against the machine's warm-memory budget, and the next benchmark's
        # cluster ticked on the shared Spark instead (two of session 27's runs did).
        conn.execute(f"DROP CLUSTER {CLUSTER} CASCADE")
    if not args.home:
        shutil.rmtree(home, ignore_errors=True)  # ~1 GB at SF 1
    if not args.quick:
        result["ddl_latency"] = ddl_latency(args.ddl_n)
        say("DDL latency measured")
        result["dag_parse"] = dag_parse()
        say(f"DAG parse: {result['dag_parse']}")
    result["targets"] = targets(result)
    result["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return result


def rss_bytes() -> int:
    """This process's resident memory now (Linux), the hot arrangements and states
    included; Spark's JVM is a child process and not counted."""
    from mzflow.storage import processes

    return processes.rss_bytes() or 0


def profiled_tick(conn: mzflow.Connection, name: str, everything: bool = False
                  ) -> dict[str, Any]:
    """A tick under cProfile: the mzflow, delta-rs and Spark-client functions that took
    at least 3 % of it (cumulative, so callers include their callees; time spent waiting
    for Spark's JVM shows under the pyspark call that waited). ``everything``: every
    function, built-ins too (numpy's and Arrow's kernels: what grows with a table)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    (report,) = conn.tick(object=name)
    prof.disable()
    stats: Any = pstats.Stats(prof)
    total = report.seconds
    rows = []
    for (file, line, func), (_, ncalls, _, cum, _) in stats.stats.items():
        where = file.replace("\\", "/")
        ours = any(k in where for k in ("/mzflow/", "/deltalake/", "/pyspark/sql/"))
        if not (ours or everything) or cum < 0.03 * total:
            continue
        short = where.split("/mzflow/")[-1] if "/mzflow/" in where else (
            "deltalake/" + where.split("/deltalake/")[-1] if "/deltalake/" in where
            else "pyspark/sql/" + where.split("/pyspark/sql/")[-1] if ours
            else where.rsplit("/", 2)[-1])
        rows.append({"function": f"{short}:{line}({func})", "calls": ncalls,
                     "cumulative_s": round(cum, 3)})
    rows.sort(key=lambda r: -r["cumulative_s"])
    return {"seconds": total, "strategy": report.strategy, "rows_read": report.rows_read,
            "files_read": report.files_read, "top": rows[:40 if everything else 25]}


def summarize(share: float, n_orders: int, cell: Cell) -> dict[str, Any]:
    out: dict[str, Any] = {"share": share, "orders_per_batch": n_orders, "checks": cell.checks,
                           "equal": not cell.checks}
    for system, samples in cell.samples.items():
        if not samples:
            continue
        secs = [s.seconds for s in samples]
        out[system] = {
            "median_s": statistics.median(secs), "p95_s": p95(secs), "seconds": secs,
            "rows_read_median": statistics.median(s.rows_read for s in samples),
            "files_read_median": statistics.median(s.files_read for s in samples),
        }
        if system == "mzflow":
            out[system]["strategies"] = sorted({s.strategy for s in samples})
            # a cost switch's recompute, or a state view's rebuild standing in for one
            out[system]["chose_recompute"] = sum(("R010" in s.strategy or "R013" in s.strategy)
                                                 for s in samples)
    tick = out["mzflow"]["median_s"]
    for base in ("recompute", "sdp"):
        if base in out:
            # mzflow / baseline (< 1: mzflow is cheaper) and its inverse, the speedup
            out[f"ratio_vs_{base}"] = tick / out[base]["median_s"]
            out[f"speedup_vs_{base}"] = out[base]["median_s"] / tick
            out[f"rows_ratio_vs_{base}"] = (out["mzflow"]["rows_read_median"]
                                            / max(out[base]["rows_read_median"], 1))
    return out


# --- the other measurements ----------------------------------------------------------------


def select_latency(conn: mzflow.Connection, views: dict[str, str], n: int) -> dict[str, Any]:
    """``SET cluster = bench; SELECT * FROM v`` (the index) against the same query
    recomputed (``SELECT * FROM v_plain`` in the default cluster, no index)."""
    out = {}
    for name in views:
        def timed(sql: str, cluster: str) -> list[float]:
            conn.execute(f"SET cluster = {cluster}")
            xs = []
            for _ in range(n + 1):
                t = time.perf_counter()
                conn.execute(sql)
                xs.append((time.perf_counter() - t) * 1000)
            conn.execute("SET cluster = default")
            return xs[1:]  # the first one warms up

        index = timed(f"SELECT * FROM {name}", CLUSTER)
        plain = timed(f"SELECT * FROM {name}_plain", "default")
        out[name] = {"index_ms_median": statistics.median(index),
                     "recompute_ms_median": statistics.median(plain),
                     "speedup": statistics.median(plain) / statistics.median(index)}
    return out


def ddl_latency(n: int) -> dict[str, Any]:
    import catalog_latency  # bench/catalog_latency.py

    with mzflow.connect(tempfile.mkdtemp(prefix="mzflow-bench-ddl-")) as conn:
        conn.execute("SELECT 1")
        clusters = catalog_latency.measure(
            conn, [f"CREATE CLUSTER c{i} SIZE 'small'" for i in range(n)])
        views = catalog_latency.measure(
            conn, [f"CREATE VIEW v{i} AS SELECT {i} AS x" for i in range(n)])
        tables = catalog_latency.measure(
            conn, [f"CREATE TABLE t{i} (k int, v text)" for i in range(n)])
    return {name: {"median_ms": statistics.median(xs), "p95_ms": p95(xs), "n": len(xs)}
            for name, xs in (("CREATE CLUSTER", clusters), ("CREATE VIEW", views),
                             ("CREATE TABLE", tables))}


def dag_parse() -> dict[str, Any]:
    script = ROOT / "bench" / "dag_parse.py"
    if not script.exists():
        return {"available": False, "why": "bench/dag_parse.py not present"}
    out = subprocess.run([sys.executable, str(script), "--objects", "200", "--runs", "5"],
                         capture_output=True, text=True, timeout=900)
    m = re.search(r"cold parse.*?median\s+([\d.]+) ms\s+max\s+([\d.]+) ms", out.stdout)
    if out.returncode != 0 or not m:
        return {"available": False,
                "why": f"bench/dag_parse.py failed (exit {out.returncode}): "
                       + (out.stderr or out.stdout)[-600:]}
    return {"available": True, "objects": 200, "cold_median_s": float(m.group(1)) / 1000,
            "cold_max_s": float(m.group(2)) / 1000, "output": out.stdout.strip()}


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 34's targets, checked against this run's figures (stated for SF 1; at
    another scale they are reported, marked as such)."""
    out = []
    at_scale = result["sf"] == 1

    def target(text: str, measured: float, met: bool) -> None:
        out.append({"target": text, "measured": round(measured, 2), "met": met,
                    "at_stated_scale": at_scale})

    cells = result["cells"]
    if result.get("tick_executor") == "spark":
        for name, by_size in cells.items():
            small, want = by_size.get("0.1%"), SPARK_TODAY.get(name)
            if small is not None and want is not None:
                got = small["speedup_vs_recompute"]
                target(f"spark path: {name} at 0.1% no slower than the issue's {want:g}x",
                       got, got >= want)
        return out  # the other targets are the default executor's
    for name, by_size in cells.items():
        small = by_size.get("0.1%")
        if small is not None:
            want = TARGET_SPEEDUP.get(name)
            if want is not None:
                got = small["speedup_vs_recompute"]
                target(f"{name} at 0.1% >= {want:g}x faster than recompute", got, got >= want)
            tick = small["mzflow"]["median_s"]
            target(f"{name} at 0.1%: median tick <= {SMALL_TICK_S} s", tick,
                   tick <= SMALL_TICK_S)
            n = small["mzflow"]["chose_recompute"]
            target(f"{name} at 0.1%: no tick recomputed", n, n == 0)
        one = by_size.get("1%")
        if one is not None:
            got = one["speedup_vs_recompute"]
            target(f"{name} at 1% >= {ONE_PCT_SPEEDUP:g}x faster than recompute", got,
                   got >= ONE_PCT_SPEEDUP)
        ten = by_size.get("10%")
        if ten is not None:
            got = ten["ratio_vs_recompute"]
            target(f"{name} at 10% <= {MAX_SLOWDOWN}x recompute's time", got,
                   got <= MAX_SLOWDOWN)
        after = result.get("after_largest", {}).get(name)
        # (the extra batch is a 0.1 % one after the last round: a larger one?)
        if (after is not None and small is not None
                and result["batch_sizes"][-1] > min(result["batch_sizes"])):
            # "a normal one": the fastest 0.1 % tick (the median of a few includes the
            # first, which hydrates memory, and an R014 measurement)
            ratio = after["seconds"] / max(min(small["mzflow"]["seconds"]), 1e-9)
            target(f"{name}: first 0.1% tick after larger batches <= {AFTER_LARGE_RATIO:g}x "
                   "a normal one", ratio, ratio <= AFTER_LARGE_RATIO)
    hydration = sum(result.get("hydration", {}).values())
    if hydration:
        target(f"hydration of the bench cluster <= {HYDRATION_S:g} s", hydration,
               hydration <= HYDRATION_S)
    rss = result.get("hydration_rss_bytes", 0) - result.get("oracle_bytes", 0)
    if rss:
        target("process memory after hydration, less DuckDB's, <= 2 GiB (GiB)",
               rss / 2**30, rss <= HYDRATION_RSS)
    parse = result.get("dag_parse", {})
    if parse.get("available"):
        out.append({"target": "DAG parse for 200 objects < 1 s (cold median)",
                    "measured": round(parse["cold_median_s"], 3),
                    "met": parse["cold_median_s"] < DAG_PARSE_TARGET_S,
                    "at_stated_scale": True})
    return out


# --- output ----------------------------------------------------------------------------------


def table_text(result: dict[str, Any]) -> str:
    lines = [f"TPC-H SF {result['sf']:g} ({result['lineitem_rows']} line items), "
             f"{result['batches_per_size']} batches per size; seconds are median/p95; "
             "'x' = baseline time / mzflow time (>1: mzflow faster)"]
    head = (f"{'view':<5} {'batch':>6} {'mzflow s':>13} {'recompute s':>13} {'sdp s':>13} "
            f"{'x rec':>6} {'x sdp':>6} {'mz rows':>9} {'mz files':>8} {'full rows':>9} "
            f"{'files':>5} {'eq':>3}  strategy")
    lines += [head, "-" * len(head)]
    for name, by_size in result["cells"].items():
        for size, c in by_size.items():
            def ms(system: str, c: dict[str, Any] = c) -> str:
                s = c.get(system)
                return f"{s['median_s']:6.2f}/{s['p95_s']:<6.2f}" if s else f"{'-':>13}"

            def ratio(base: str, c: dict[str, Any] = c) -> str:
                r = c.get(f"speedup_vs_{base}")
                return f"{r:6.1f}" if r is not None else f"{'-':>6}"

            strategies = c["mzflow"]["strategies"]
            short = "; ".join(sorted({s[:48] for s in strategies}))
            lines.append(
                f"{name:<5} {size:>6} {ms('mzflow'):>13} {ms('recompute'):>13} {ms('sdp'):>13} "
                f"{ratio('recompute')} {ratio('sdp')} "
                f"{c['mzflow']['rows_read_median']:>9.0f} "
                f"{c['mzflow']['files_read_median']:>8.0f} "
                f"{c['recompute']['rows_read_median']:>9.0f} "
                f"{c['recompute']['files_read_median']:>5.0f} "
                f"{'ok' if c['equal'] else 'NO':>3}  {short}")
    sdp = result["sdp"]
    if not sdp.get("enabled"):
        lines.append(f"SDP: not measured ({sdp.get('error', 'disabled with --no-sdp')})")
    elif "cli_run" in sdp:
        cli = sdp["cli_run"]
        lines.append(f"SDP: spark-pipelines run (fresh JVM, all views, end to end): "
                     f"{'ok' if cli['ok'] else 'FAILED'} in {cli['seconds']:.1f} s"
                     + (f"; tables vs recompute: {cli.get('checks')}" if cli["ok"] else ""))
    if "select_latency" in result:
        lines.append("SELECT latency (ms, median): index in its cluster vs recomputing")
        for name, s in result["select_latency"].items():
            lines.append(f"  {name:<5} index {s['index_ms_median']:9.1f}   recompute "
                         f"{s['recompute_ms_median']:9.1f}   x {s['speedup']:.1f}")
    if "ddl_latency" in result:
        lines.append("DDL latency (ms): " + ", ".join(
            f"{k} median {v['median_ms']:.1f} p95 {v['p95_ms']:.1f}"
            for k, v in result["ddl_latency"].items()))
    if "dag_parse" in result:
        d = result["dag_parse"]
        lines.append("DAG parse, 200 objects: " + (
            f"cold median {d['cold_median_s'] * 1000:.0f} ms (max {d['cold_max_s'] * 1000:.0f})"
            if d.get("available") else f"not available ({d.get('why')})"))
    if result["targets"]:
        lines.append("Targets (issue 34):")
        for t in result["targets"]:
            note = ("" if t["at_stated_scale"]
                    else f"  (stated for SF 1; this run SF {result['sf']:g})")
            lines.append(f"  {'MET ' if t['met'] else 'MISS'} {t['target']}: "
                         f"{t['measured']}{note}")
    lines.append("Equality (maintained view == recompute == pipeline): " + (
        "all equal" if not result["check_failures"] else
        f"{len(result['check_failures'])} MISMATCHES: {result['check_failures'][:3]}"))
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    names = list(result["cells"])
    cols = min(3, max(1, len(names)))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    styles = {"mzflow": ("mzflow tick (incremental)", "o-", "tab:blue"),
              "recompute": ("full recompute (Spark → Delta)", "s--", "tab:red"),
              "sdp": ("Spark Declarative Pipeline refresh", "^:", "tab:green")}
    for ax, name in zip(axes.flat, names, strict=False):
        by_size = result["cells"][name]
        shares = [c["share"] * 100 for c in by_size.values()]
        for system, (label, style, color) in styles.items():
            cells = [c for c in by_size.values() if system in c]
            if len(cells) != len(shares):
                continue
            med = [c[system]["median_s"] for c in cells]
            hi = [c[system]["p95_s"] - c[system]["median_s"] for c in cells]
            ax.errorbar(shares, med, yerr=[[0] * len(hi), hi], fmt=style, color=color,
                        label=label, capsize=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_title(name)
        ax.set_xlabel("batch size (% of lineitem)")
        ax.set_ylabel("seconds (median, bar to p95)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
    fig.suptitle(f"TPC-H SF {result['sf']:g}: time per refresh against batch size")
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sf", type=float, default=float(os.environ.get("BENCH_SF", 1)),
                    help="TPC-H scale factor (default 1, or $BENCH_SF)")
    ap.add_argument("--views", default=",".join(ALL_VIEWS),
                    help=f"comma-separated, from {','.join(ALL_VIEWS)}")
    ap.add_argument("--sizes", default="0.001,0.01,0.1",
                    help="batch sizes as shares of lineitem (comma-separated)")
    ap.add_argument("--batches", type=int, default=5, help="batches per size (default 5)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"),
                    help="directory for the JSON and PNG")
    ap.add_argument("--home", help="mzflow home (default: a fresh temporary directory)")
    # The recompute baseline runs on the process's Spark, local[*]: every core. The
    # cluster gets as many by default (medium: 2 cores, this machine's all); 'small' (1
    # core) made its recomputes and rebuilds about 2x the baseline's for that alone.
    ap.add_argument("--cluster-size", default="medium",
                    help="SIZE of the bench cluster (default medium: 2 cores, 4g)")
    ap.add_argument("--tick-executor", default="auto", choices=("auto", "spark", "local"),
                    help="ALTER SYSTEM SET tick_executor (spark: the Spark path alone)")
    ap.add_argument("--no-sdp", action="store_true", help="skip the Declarative Pipeline")
    ap.add_argument("--no-sdp-cli", dest="sdp_cli", action="store_false",
                    help="skip the end-to-end `spark-pipelines run` (a fresh JVM)")
    ap.add_argument("--quick", action="store_true",
                    help="skip SELECT/DDL/DAG-parse measurements (the smoke test)")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the profiled extra batch (cProfile of each view's tick)")
    ap.add_argument("--select-n", type=int, default=5, help="SELECTs per latency figure")
    ap.add_argument("--ddl-n", type=int, default=50, help="statements per DDL figure")
    args = ap.parse_args(argv)
    args.views = [v.strip() for v in args.views.split(",") if v.strip()]
    unknown = set(args.views) - set(ALL_VIEWS)
    if unknown:
        ap.error(f"unknown views {sorted(unknown)}; choose from {ALL_VIEWS}")
    args.sizes = [float(s) for s in args.sizes.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    json_path, png_path = out / f"{stamp}-sf{args.sf:g}.json", out / f"{stamp}-sf{args.sf:g}.png"
    plot(result, png_path)
    result["plot"] = str(png_path)
    json_path.write_text(json.dumps(result, indent=2, default=str))
    print()
    print(table_text(result))
    print(f"\nJSON: {json_path}\nPlot: {png_path}")
    return 1 if result["check_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
