"""``\\h``: the statements mzflow runs, with their syntax (what mzflow/sql/dialect.py
parses and mzflow/session/connection.py dispatches)."""

from __future__ import annotations

import itertools

# statement -> (description, syntax)
STATEMENTS: dict[str, tuple[str, str]] = {
    "ALTER CLUSTER": ("change a cluster's options (those not named are kept)",
                      "ALTER CLUSTER name [ SET ] ( { SIZE [ = ] 'size' | VIRTUAL | "
                      "SPARK [ = ] 'sc://host:port' } [, ...] )\n"
                      "ALTER CLUSTER name RESET ( { SIZE | VIRTUAL | SPARK } [, ...] )"),
    "ALTER SYSTEM": ("set or reset a system-wide default",
                     "ALTER SYSTEM SET { cluster | retain_history | compaction_interval } "
                     "{ = | TO } value\n"
                     "ALTER SYSTEM RESET { cluster | retain_history | compaction_interval }"),
    "ALTER TABLE": ("add a column (a new version of the table)",
                    "ALTER TABLE name ADD COLUMN column type"),
    "ALTER ... RENAME": ("rename an object",
                         "ALTER { TABLE | VIEW | MATERIALIZED VIEW | INDEX | SINK } name "
                         "RENAME TO new_name"),
    "COMMENT": ("describe an object or a column",
                "COMMENT ON { TABLE | VIEW | MATERIALIZED VIEW | INDEX | SINK } name "
                "IS { 'text' | NULL }\n"
                "COMMENT ON COLUMN relation.column IS { 'text' | NULL }"),
    "COPY": ("load a file into a table (one atomic Delta commit)",
             "COPY table [ ( column [, ...] ) ] FROM 'path'\n"
             "    [ WITH ( FORMAT { csv | parquet | json } [, HEADER [ true | false ] ] ) ]"),
    "CREATE CLUSTER": ("define a cluster (an Airflow pool and DAG)",
                       "CREATE CLUSTER name [ option [, ...] ]\n"
                       "    option: SIZE [ = ] 'size' | VIRTUAL\n"
                       "          | SPARK [ = ] 'sc://host:port[/;param=value...]'\n"
                       "    (VIRTUAL takes neither SIZE nor SPARK; the options may be "
                       "written in parentheses)"),
    "CREATE INDEX": ("maintain a relation's contents in a cluster",
                     "CREATE INDEX [ IF NOT EXISTS ] [ name ] [ IN CLUSTER cluster ] "
                     "ON relation ( key [, ...] )\n"
                     "CREATE DEFAULT INDEX [ IN CLUSTER cluster ] ON relation\n"
                     "    [ WITH ( refresh [, ...] ) ]   (refresh: as for a materialized "
                     "view; mzflow's)"),
    "CREATE MATERIALIZED VIEW": (
        "a view maintained in a cluster",
        "CREATE [ OR REPLACE ] MATERIALIZED VIEW [ IF NOT EXISTS ] name "
        "[ ( column [, ...] ) ]\n    [ IN CLUSTER cluster ] "
        "[ WITH ( option [, ...] ) ] AS select\n"
        "    option: REFRESH = 'incremental' | RETAIN HISTORY FOR 'interval' | refresh\n"
        "    refresh: REFRESH ON COMMIT | REFRESH EVERY 'interval' [ ALIGNED TO time ]\n"
        "           | REFRESH AT { CREATION | time }\n"
        "           | REFRESH ON SCHEDULE 'cron or @preset' [ TIMEZONE 'Area/City' ]"),
    "CREATE SINK": ("export a relation's changes on a schedule",
                    "CREATE SINK [ IF NOT EXISTS ] name [ IN CLUSTER cluster ] FROM relation\n"
                    "    INTO { PARQUET | CSV | JSON | DELTA } 'path'\n"
                    "    [ WITH ( ENVELOPE = { APPEND | UPSERT | DEBEZIUM }, KEY = ( column "
                    "[, ...] ),\n"
                    "             SCHEDULE = 'cron or @preset', TIMEZONE = 'Area/City', "
                    "SNAPSHOT = bool ) ]"),
    "CREATE TABLE": ("a table stored as a Delta table",
                     "CREATE TABLE [ IF NOT EXISTS ] name ( column type [ NOT NULL ] "
                     "[, ...] )\n    [ WITH ( RETAIN HISTORY FOR 'interval' ) ]"),
    "CREATE VIEW": ("a named query (computed when read, or maintained by an index)",
                    "CREATE [ OR REPLACE ] VIEW [ IF NOT EXISTS ] name [ ( column [, ...] ) ] "
                    "AS select"),
    "DELETE": ("delete rows of a table", "DELETE FROM table [ WHERE condition ]"),
    "DROP": ("remove objects",
             "DROP { TABLE | VIEW | MATERIALIZED VIEW | INDEX | SINK | CLUSTER } "
             "[ IF EXISTS ] name [, ...]\n    [ CASCADE | RESTRICT ]"),
    "EXPLAIN": ("how a query or a maintained object is computed",
                "EXPLAIN [ PLAN FOR ] select\n"
                "EXPLAIN { MATERIALIZED VIEW | INDEX } name"),
    "INSERT": ("add rows to a table",
               "INSERT INTO table [ ( column [, ...] ) ] { VALUES ( value [, ...] ) [, ...] "
               "| select }"),
    "RESET": ("restore a session variable's default", "RESET name"),
    "SELECT": ("read tables and views",
               "SELECT [ DISTINCT ] expression [, ...] [ FROM from_item [, ...] ] "
               "[ WHERE condition ]\n"
               "    [ GROUP BY expression [, ...] ] [ HAVING condition ] "
               "[ { UNION | INTERSECT | EXCEPT } [ ALL ] select ]\n"
               "    [ ORDER BY expression [ ASC | DESC ] [, ...] ] [ LIMIT count ] "
               "[ OFFSET start ]\n"
               "    [ AS OF { ms | timestamp } ]"),
    "SET": ("set a session variable",
            "SET [ SESSION | LOCAL ] { cluster | search_path | database | "
            "transaction_isolation } { = | TO } value"),
    "SHOW": ("list catalog objects, or show a variable",
             "SHOW { TABLES | VIEWS | [ FULL ] MATERIALIZED VIEWS | OBJECTS } "
             "[ FROM schema ] [ IN CLUSTER cluster ]\n"
             "SHOW { INDEXES | INDEX | KEYS } [ { FROM | IN | ON } relation ] "
             "[ IN CLUSTER cluster ]\n"
             "SHOW SINKS [ FROM schema ] [ IN CLUSTER cluster ]\n"
             "SHOW CLUSTERS | SHOW COLUMNS FROM relation\n"
             "SHOW CREATE { CLUSTER | TABLE | VIEW | MATERIALIZED VIEW | INDEX | SINK } name\n"
             "SHOW name | SHOW ALL\n"
             "    ... each listing takes [ LIKE 'pattern' | WHERE condition ]"),
    "SUBSCRIBE": ("stream a relation's changes",
                  "SUBSCRIBE [ TO ] { name | ( select ) } [ WITH ( SNAPSHOT [ = bool ], "
                  "PROGRESS [ = bool ] ) ]\n"
                  "    [ AS OF [ AT LEAST ] time ] [ UP TO time ]"),
    "UPDATE": ("change rows of a table",
               "UPDATE table SET column = expression [, ...] [ WHERE condition ]"),
}


def help_text(topic: str) -> str:
    """``\\h`` alone lists the statements; ``\\h create`` every CREATE …; an unknown
    topic says so, as psql does."""
    topic = " ".join(topic.upper().split()).rstrip(";")
    if not topic:
        names = sorted(STATEMENTS)
        half = (len(names) + 1) // 2
        width = max(len(n) for n in names) + 2
        rows = [f"  {a.ljust(width)}{b}".rstrip()
                for a, b in itertools.zip_longest(names[:half], names[half:], fillvalue="")]
        return "\n".join(["Available help:", *rows,
                          'Type \\h followed by a statement, e.g. "\\h create index".'])
    found = [n for n in STATEMENTS if n == topic] or [
        n for n in sorted(STATEMENTS) if n.startswith(topic)]
    if not found:
        return f'No help available for "{topic.lower()}".\nTry \\h with no arguments to see ' \
               "available help."
    return "\n\n".join(f"Command:     {n}\nDescription: {STATEMENTS[n][0]}\nSyntax:\n"
                       f"{STATEMENTS[n][1]}" for n in found)
