"""The ``mzflow`` command.

    mzflow sql                      interactive SQL shell
    mzflow sql -c "SHOW CLUSTERS"   run statements and print their results
    mzflow sql -f catalog.sql       run a file of statements
    mzflow serve                    serve it to PostgreSQL clients

Only the standard library is imported up front, so ``mzflow --help`` and
catalog statements answer without starting Spark.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import TextIO

from mzflow import __version__
from mzflow.shell.output import cell as _cell
from mzflow.shell.output import format_table, print_result

EPILOG = """\
environment:
  MZFLOW_HOME          home folder (catalog, warehouse); default from conf/mzflow.toml
  MZFLOW_CATALOG_URL   SQLAlchemy URL of the catalog, e.g. postgresql://user@host/db
  MZFLOW_CONFIG        path of a configuration file (default: ./conf/mzflow.toml)

examples:
  mzflow sql -c "CREATE CLUSTER etl SIZE 'small'; SHOW CLUSTERS"
  mzflow sql -f conf/example/catalog.sql
  mzflow --home /tmp/demo sql
  mzflow airflow init             write the DAG file into Airflow's dags folder
  mzflow airflow sync             pools for the clusters in $AIRFLOW_HOME's database
  mzflow sink run hourly_totals   export the sink's intervals that are due, in order
  mzflow subscribe totals         print the view's changes as they commit (Ctrl-C stops)
  mzflow quality docs             build Great Expectations' Data Docs, print their path
  mzflow cluster start etl        warm the cluster's Spark before its first tick
  mzflow serve                    PostgreSQL's wire protocol on 127.0.0.1:6875 (psql, dbt)
  mzflow plan -f catalog.sql      what applying a catalog file would change (nothing runs)
  mzflow apply -f catalog.sql     carry that plan out
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mzflow",
        description="Maintained SQL views for batch-incremental pipelines "
                    "(Materialize's SQL, Spark, Delta Lake, Airflow).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mzflow {__version__}")
    parser.add_argument("--home", help="home folder (overrides MZFLOW_HOME and conf/)")
    parser.add_argument("--catalog-url", help="SQLAlchemy URL of the catalog database")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sql = sub.add_parser(
        "sql", help="run SQL: a shell, -c statements or -f a file",
        description="Run SQL statements in Materialize's dialect. With neither -c nor -f, "
                    "opens an interactive shell (end statements with ';', \\q to quit).",
    )
    src = sql.add_mutually_exclusive_group()
    src.add_argument("-c", "--command", dest="sql", metavar="SQL",
                     help="statements to run, separated by ';'")
    src.add_argument("-f", "--file", metavar="FILE", help="file of statements to run ('-': stdin)")
    sql.add_argument("--on-error", choices=("stop", "continue"), default="stop",
                     help="with -f: stop at the first failing statement (default) or go on")
    sql.add_argument("--idempotency-key", metavar="APP:N", type=_key,
                     help="apply a single write at most once: rerunning with the same key "
                          "(after a crash or a retry) is skipped")
    tick = sub.add_parser(
        "tick", help="bring maintained indexes and materialized views up to date",
        description="Run one tick of every maintained index (or of one cluster's, or one "
                    "object's): read what changed in the inputs, apply the changes in one "
                    "atomic Delta commit, advance the frontier. Safe to retry and to run twice.")
    tick.add_argument("--cluster", help="only the indexes in this cluster")
    tick.add_argument("--object", help="only this index, or the indexes of this view")
    tick.add_argument("--at", type=int, metavar="MS",
                      help="target time in ms since the epoch (default: every committed write)")
    tick.add_argument("--full-refresh", action="store_true",
                      help="recompute the contents instead of applying the changes (R015)")
    compact = sub.add_parser(
        "compact", help="advance since and reclaim storage of tables, indexes, "
                        "states and arrangements",
        description="For each table (or one): move its read frontier (since) up to its "
                    "retention, merge small files, checkpoint the Delta log and delete files "
                    "no readable version needs. Indexes and the GROUP BY states ticks keep "
                    "beside them are merged, checkpointed and vacuumed the same way; "
                    "arrangements are checkpointed and lose the batches merged away longer "
                    "ago than their table's retention. Run it on a schedule (the generated "
                    "DAGs do not) so that ticks stay as cheap on day 100 as on day 1.")
    compact.add_argument("--table", help="compact only this table (and its arrangements), "
                                         "or only this index (and its state)")
    sink = sub.add_parser(
        "sink", help="sinks: export a relation's changes on a schedule",
        description="A sink exports the changes of a table or view, one schedule interval "
                    "at a time, to files named by interval (or commits to a Delta table), "
                    "exactly once. Airflow runs the same work on the sink's schedule.")
    sink_sub = sink.add_subparsers(dest="sink_command", metavar="ACTION", required=True)
    sink_run = sink_sub.add_parser(
        "run", help="export every interval that has ended and is not exported yet",
        description="Catch up a sink: export its missed intervals in order, through the "
                    "last one that has ended (or through --interval, which is exported "
                    "again even if it was: files are rewritten byte for byte).")
    sink_run.add_argument("name", help="the sink")
    sink_run.add_argument("--interval", type=_interval, metavar="START/END",
                          help="one schedule interval, ISO 8601, e.g. "
                               "2026-11-22T10:00Z/2026-11-22T11:00Z")
    sink_status = sink_sub.add_parser(
        "status", help="the intervals of a sink that have ended and are not exported")
    sink_status.add_argument("name", help="the sink")
    subscribe = sub.add_parser(
        "subscribe", help="stream a relation's changes (SUBSCRIBE) until interrupted",
        description="Print (mz_timestamp, mz_diff, row...) for the snapshot and then every "
                    "change as writes commit, until Ctrl-C or UP TO. Takes a SUBSCRIBE "
                    "statement or just an object name.",
        epilog='example: mzflow subscribe "SUBSCRIBE totals WITH (PROGRESS) UP TO 1763800000000"')
    subscribe.add_argument("statement", help="SUBSCRIBE … or an object name")
    subscribe.add_argument("--poll", type=float, default=0.5, metavar="SECONDS",
                           help="how often to look for new writes (default 0.5)")
    af = sub.add_parser(
        "airflow", help="Airflow: pools and DAGs generated from the catalog",
        description="Each cluster is an Airflow pool (mzflow_<cluster>, slots from its SIZE) "
                    "and a DAG of its maintained indexes; each sink is a DAG "
                    "(mzflow_sink_<sink>) on its schedule, in its cluster's pool.")
    af_sub = af.add_subparsers(dest="airflow_command", metavar="ACTION", required=True)
    sync = af_sub.add_parser(
        "sync", help="create, resize and delete pools to match the clusters",
        description="Bring the pools of the Airflow metadata database ($AIRFLOW_HOME) in "
                    "line with the catalog's clusters. Deletes only pools this catalog made.")
    sync.add_argument("--airflow-home", help="Airflow home (default: $AIRFLOW_HOME)")
    sync.add_argument("--dry-run", action="store_true", help="print the changes, make none")
    af_sub.add_parser("dags", help="print the DAGs the catalog generates (no Airflow needed)")
    init = af_sub.add_parser(
        "init", help="write the DAG file that loads the catalog's DAGs into Airflow",
        description="Write mzflow_catalog.py, the one-line loader of the catalog's DAGs, "
                    "into Airflow's dags folder. The provider and the plugin need nothing: "
                    "pip installed them.")
    init.add_argument("--dags-folder", help="default: Airflow's [core] dags_folder "
                                            "($AIRFLOW_HOME/dags)")
    cluster = sub.add_parser(
        "cluster", help="a cluster's warm Spark: start, stop, status",
        description="A SIZEd cluster's ticks run on its own Spark Connect server, started on "
                    "first use, sized from its SIZE, and stopped after cluster_idle_seconds "
                    "without a tick (default 900). VIRTUAL clusters use the ticking "
                    "process's Spark; CREATE CLUSTER … (SPARK = 'sc://host:port') names a "
                    "server run elsewhere.",
        epilog="example: mzflow cluster start etl && mzflow tick --cluster etl")
    c_sub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    c_start = c_sub.add_parser("start", help="start the cluster's server (no-op if running)")
    c_start.add_argument("name", help="the cluster")
    c_start.add_argument("--port", type=int, help="listen on this port (default: a free one)")
    c_sub.add_parser("stop", help="stop the cluster's server").add_argument(
        "name", help="the cluster")
    c_sub.add_parser("status", help="every cluster's Spark: endpoint, state, last use; "
                     "the machine's warm processes: memory, idle time, the budget")
    serve = sub.add_parser(
        "serve", help="serve the home over PostgreSQL's wire protocol (psql, drivers, dbt)",
        description=textwrap.fill(
            "Serve the home to PostgreSQL clients (psql, psycopg, JDBC, SQLAlchemy, "
            "dbt-materialize) as Materialize does: database 'materialize', one session "
            "per connection, statements in Materialize's dialect. Logins use "
            "SCRAM-SHA-256 against the catalog's roles (CREATE ROLE … LOGIN PASSWORD); "
            "without TLS the password still never crosses the wire, but the queries "
            "do. Logs its address on start; stops cleanly on SIGTERM or Ctrl-C.", 80),
        epilog="examples:\n"
               "  mzflow serve                                  127.0.0.1:6875\n"
               "  mzflow serve --tls-cert server.crt --tls-key server.key --host 0.0.0.0\n"
               "  mzflow serve --unix-socket /tmp   then: psql -h /tmp -p 6875 materialize\n"
               "  psql 'postgresql://alice@127.0.0.1:6875/materialize?sslmode=require'",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only; "
                            "0.0.0.0 for every interface)")
    serve.add_argument("--port", type=int, default=6875,
                       help="TCP port (default 6875, Materialize's)")
    serve.add_argument("--tls-cert", metavar="FILE",
                       help="TLS certificate (PEM); with --tls-key, clients may (and with "
                            "sslmode=require, must) use TLS")
    serve.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    serve.add_argument("--insecure-trust", action="store_true",
                       help="let anyone who reaches the port in as any role, with no "
                            "password: for a throwaway local home only")
    serve.add_argument("--unix-socket", metavar="DIR",
                       help="also listen on DIR/.s.PGSQL.<port>, readable by this OS user "
                            "only; logins there need no password")
    quality = sub.add_parser(
        "quality", help="data-quality expectations: Great Expectations' Data Docs",
        description="Expectations (CONSTRAINT … EXPECT) are validated by Great "
                    "Expectations on every write and tick; results are in "
                    "mz_expectation_results.")
    q_sub = quality.add_subparsers(dest="quality_command", metavar="ACTION", required=True)
    q_sub.add_parser("docs", help="build GE's Data Docs site under <home>/quality and print "
                                  "the path of its index.html")
    from mzflow import deploy  # argparse only: the rest loads when a command runs

    deploy.add_parsers(sub)
    return parser


def _interval(text: str) -> tuple[object, object]:
    import pendulum

    start, sep, end = text.partition("/")
    try:
        if not sep:
            raise ValueError
        return pendulum.parse(start), pendulum.parse(end)
    except Exception:
        raise argparse.ArgumentTypeError(
            "expected START/END in ISO 8601, e.g. 2026-11-22T10:00Z/2026-11-22T11:00Z"
        ) from None


def _key(text: str) -> tuple[str, int]:
    app, sep, n = text.rpartition(":")
    if not sep or not app or not n.isdigit():
        raise argparse.ArgumentTypeError("expected APP:N, e.g. nightly-load:42")
    return app, int(n)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    if args.command == "tick" and args.cluster:
        served = _tick_on_service(args)
        if served is not None:
            return served
    if args.command == "serve":
        return _serve(args)
    if args.command == "airflow" and args.airflow_command == "init":
        return _airflow_init(args.dags_folder)
    if args.command in ("plan", "apply"):
        from mzflow.deploy import plan as deploy_plan

        return deploy_plan.main(args, args.command)
    import mzflow

    try:
        conn = mzflow.connect(args.home, catalog_url=args.catalog_url)
    except mzflow.Error as e:
        _print_error(e)
        return 1
    from mzflow.engine import spark
    from mzflow.shell.repl import spark_log

    # The JVM's start-up chatter and log4j's console go to a file, not the screen.
    spark.log_jvm_to(spark_log(conn.config.home))
    with conn:
        if args.command == "compact":
            return _compact(conn, args.table)
        if args.command == "tick":
            return _tick(conn, args.cluster, args.object, args.at, args.full_refresh)
        if args.command == "airflow":
            return _airflow(conn, args)
        if args.command == "sink":
            return _sink(conn, args)
        if args.command == "subscribe":
            return _subscribe(conn, args.statement, args.poll)
        if args.command == "quality":
            return _quality_docs(conn)
        if args.command == "cluster":
            from mzflow.shell import cluster_command

            return cluster_command.run(conn, args)
        if getattr(args, "idempotency_key", None) is not None:
            if args.sql is None:
                print("ERROR: --idempotency-key needs -c with one write statement",
                      file=sys.stderr)
                return 2
            try:
                print_result(conn.execute(args.sql, idempotency_key=args.idempotency_key),
                             sys.stdout)
            except mzflow.Error as e:
                _print_error(e)
                return 1
            return 0
        if args.sql is not None and args.sql.lstrip().startswith("\\"):
            from mzflow.shell.repl import Shell

            shell = Shell(conn)
            shell.feed(args.sql.strip(), record=False)  # psql's -c '\d t'
            return 1 if shell.failed else 0
        if args.sql is not None:
            return run_text(conn, args.sql, sys.stdout)
        if args.file is not None:
            try:
                text = sys.stdin.read() if args.file == "-" else _read(args.file)
            except OSError as e:
                print(f"ERROR: cannot read {args.file}: {e.strerror}", file=sys.stderr)
                return 1
            return run_text(conn, text, sys.stdout, keep_going=args.on_error == "continue")
        from mzflow.shell.repl import Shell

        return Shell(conn).run()


def _serve(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    import mzflow
    from mzflow import config, server
    from mzflow.engine import spark
    from mzflow.shell.repl import spark_log

    if (args.tls_cert is None) != (args.tls_key is None):
        print("ERROR: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config.load(args.home, args.catalog_url)
        tls = server.tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
        unix = Path(args.unix_socket) if args.unix_socket else None
        spark.log_jvm_to(spark_log(cfg.home))
        return server.serve(cfg, host=args.host, port=args.port, tls=tls,
                            trust=args.insecure_trust, unix_dir=unix)
    except mzflow.Error as e:
        _print_error(e)
        return 1
    except (OSError, ValueError) as e:  # a port in use, a certificate that does not load
        print(f"ERROR: cannot serve: {e}", file=sys.stderr)
        return 1


def _tick(conn: object, cluster: str | None, obj: str | None, at: int | None,
          full_refresh: bool = False) -> int:
    import mzflow
    from mzflow.catalog import names
    from mzflow.maintain import ticks
    from mzflow.shell.status import Status

    assert isinstance(conn, mzflow.Connection)
    reports = []
    status = Status()
    try:
        if obj is None:  # a cluster's tick starts with its sources (session/sources.py)
            conn.feed_sources(cluster)
        snap = conn.store.snapshot()
        indexes = ticks.indexes_to_tick(snap, cluster, obj)
        # One time for every index, as one conn.tick() call would pick.
        at = snap.read_ts if at is None else at
        with status.running("ticking") as progress:
            for n, index in enumerate(indexes):
                progress.what = f"ticking {index.name} ({n} of {len(indexes)} done)"
                for report in conn.tick(object=names.short(index), at=at,
                                        full_refresh=full_refresh):
                    reports.append(report)
                    status.print(report.line())
    except mzflow.Error as e:
        _print_error(e)
        return 1
    if not reports:
        print("nothing to tick: no maintained indexes", file=sys.stderr)
    return 1 if any(r.error for r in reports) else 0


def _tick_on_service(args: argparse.Namespace) -> int | None:
    """``tick --cluster c`` run by the cluster's warm tick service, if it has one
    (clusters/tick_service.py): this process then imports neither the runtime nor Spark.
    None: no service took it, so this process ticks as usual."""
    from mzflow.clusters import tick_service

    answer = tick_service.ask(args.home, args.catalog_url, args.cluster, {
        "op": "tick", "object": args.object, "at": args.at,
        "full_refresh": args.full_refresh})
    if answer is None:
        return None
    reports = answer.get("reports", [])
    for report in reports:
        print(report["line"], flush=True)
    failure = tick_service.failure_of(answer)
    if failure is not None:
        _print_error(failure)
        return 1
    if not reports:
        print("nothing to tick: no maintained indexes", file=sys.stderr)
    return 1 if any(r["error"] for r in reports) else 0


def _airflow(conn: object, args: argparse.Namespace) -> int:
    import datetime as dt
    import os

    import mzflow
    from mzflow.airflow import graph
    from mzflow.values import pg_text

    assert isinstance(conn, mzflow.Connection)
    snap = conn.store.snapshot()
    if args.airflow_command == "dags":
        rows = [(d.dag_id, d.pool, d.slots, t.task_id, t.index, ", ".join(t.upstream),
                 ", ".join(t.upstream_assets)) for d in graph.cluster_dags(snap) for t in d.tasks]
        print(format_table(["dag", "pool", "slots", "task", "index", "after",
                            "after assets"], rows))
        sink_rows = [(d.dag_id, d.pool, "export", d.sink, d.schedule, d.timezone,
                      d.start.isoformat()) for d in graph.sink_dags(snap)]
        if sink_rows:
            print()
            print(format_table(["dag", "pool", "task", "sink", "schedule", "timezone",
                                "first interval"], sink_rows))
        # What runs on its own: REFRESH policies (catalog/refresh.py), compaction.
        timed = [(d.dag_id, d.refresh.describe(), "REFRESH policies")
                 for d in graph.cluster_dags(snap) if d.refresh is not None]
        timed += [(d.dag_id, "on writes to " + ", ".join(t.name for t in d.tables),
                   "REFRESH ON COMMIT") for d in graph.cluster_dags(snap) if d.tables]
        compact = graph.compact_dag(snap)
        if compact is not None:
            every = dt.timedelta(milliseconds=compact.interval_ms)
            timed.append((compact.dag_id, f"every {pg_text(every, 'interval')}",
                          compact.reason))
        if timed:
            print()
            print(format_table(["dag", "runs", "from"], timed))
        return 0
    if args.airflow_home:
        # Read by Airflow when it is first imported, which happens just below.
        os.environ["AIRFLOW_HOME"] = os.path.abspath(args.airflow_home)
    from mzflow.airflow import pools

    try:
        changes = pools.sync(snap, dry_run=args.dry_run)
    except Exception as e:  # Airflow's errors: no database, not migrated, ...
        print(f"ERROR: cannot sync Airflow pools: {e}", file=sys.stderr)
        return 1
    print(format_table(["action", "pool", "slots"],
                       [(c.action, c.pool, c.slots) for c in changes]))
    return 0


def _airflow_init(folder: str | None) -> int:
    """Needs no catalog: the DAG file finds the home when Airflow parses it."""
    from mzflow.airflow import install

    path, changed = install.write_dag_file(install.dags_folder(folder))
    print(f"{'wrote' if changed else 'up to date:'} {path}")
    for copy in install.plugin_copies():
        print(f"WARNING: remove {copy}: the installed package registers mzflow's plugin "
              "itself, and Airflow drops the plugins after a name it loads twice "
              "(OpenLineage's listener among them)", file=sys.stderr)
    return 0


def _sink(conn: object, args: argparse.Namespace) -> int:
    import mzflow
    from mzflow.sinks import export as sinks

    assert isinstance(conn, mzflow.Connection)
    try:
        if args.sink_command == "status":
            due = sinks.intervals_due(conn.store.snapshot(), args.name)
            print(format_table(["start", "end"], [(s.isoformat(), e.isoformat())
                                                  for s, e in due]))
            return 0
        done = conn.run_sink(args.name, args.interval,
                             on_progress=lambda e: print(e.line(), flush=True))
    except mzflow.Error as e:
        _print_error(e)
        return 1
    if not done:
        print(f"nothing to export: the first interval of {args.name} has not ended yet",
              file=sys.stderr)
    return 0


def _subscribe(conn: object, statement: str, poll: float) -> int:
    import mzflow

    assert isinstance(conn, mzflow.Connection)
    text = statement if statement.strip().upper().startswith("SUBSCRIBE") else (
        f"SUBSCRIBE {statement}")
    try:
        sub = conn.subscribe(text, poll_seconds=poll)
        print("\t".join(sub.columns), flush=True)
        for row in sub:
            print("\t".join(_cell(v) for v in row), flush=True)
    except KeyboardInterrupt:
        return 0
    except mzflow.Error as e:
        _print_error(e)
        return 1
    return 0


def _quality_docs(conn: object) -> int:
    import mzflow
    from mzflow.quality import docs as quality

    assert isinstance(conn, mzflow.Connection)
    runs = conn.store.expectation_runs()
    index = quality.build_docs(conn.store.snapshot(), runs, conn.config.home / "quality")
    print(f"Data Docs: {len(runs)} validated batches", file=sys.stderr)
    print(index)
    return 0


def _compact(conn: object, table: str | None) -> int:
    import mzflow

    assert isinstance(conn, mzflow.Connection)
    try:
        done = conn.compact(table)
    except mzflow.Error as e:
        _print_error(e)
        return 1
    rows = [(c.table, c.kind, c.since, c.kept_from_version, c.version, c.files_merged,
             c.files_removed) for c in done]
    print(format_table(["object", "kind", "since", "kept from version", "version",
                        "files merged", "files removed"], rows))
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def run_text(conn: object, text: str, out: TextIO, keep_going: bool = False) -> int:
    """Run statements one at a time so earlier results print before a later error."""
    import mzflow
    from mzflow.shell.status import Status
    from mzflow.sql.parse import parse

    assert isinstance(conn, mzflow.Connection)
    try:
        statements = parse(text)
    except mzflow.Error as e:
        _print_error(e)
        return 1
    status = 0
    line = Status()
    for n, stmt in enumerate(statements, start=1):
        try:
            with line.running(f"statement {n} of {len(statements)}"):
                result = conn.execute_parsed(stmt)
        except mzflow.Error as e:
            _print_error(e)
            status = 1
            if not keep_going:
                break
            continue
        print_result(result, out)
    return status


def _print_error(e: BaseException) -> None:
    print(f"ERROR: {e}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
