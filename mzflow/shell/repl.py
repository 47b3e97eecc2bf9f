"""The interactive shell of ``mzflow sql``, with psql's habits.

Input is read a line at a time. A line that starts with a backslash (outside a
quoted string) is a meta-command and runs at once, whatever SQL is pending; it
never becomes part of a statement. SQL runs statement by statement as each
``;`` arrives. After any failure — an SQL error, a bug, Ctrl-C — the prompt
comes back, and the session (its SET variables) is the same one.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from mzflow import __version__
from mzflow.errors import Error
from mzflow.session.connection import Connection
from mzflow.shell import complete, describe
from mzflow.shell.grammar import help_text
from mzflow.shell.output import print_result
from mzflow.shell.split import Splitter
from mzflow.shell.status import Status

HELP = """\
General
  \\q                  quit
  \\conninfo           the home, catalog and Spark this session uses
Help
  \\?                  this list
  \\h [STATEMENT]      syntax of mzflow's SQL statements
Query buffer
  \\p                  show the pending statement
  \\r                  discard the pending statement
  \\g                  run the pending statement (as if ';' were typed)
Input/Output
  \\i FILE             run statements and meta-commands from FILE
  \\o [FILE]           send results to FILE (\\o alone: back to the screen)
Formatting
  \\x [on|off|auto]    expanded display, one field per line
  \\timing [on|off]    show how long each statement took
Informational (PATTERN may use * and ?)
  \\d                  tables, views, materialized views and sinks
  \\d NAME             an object: columns, indexes, cluster, frontier, last tick
  \\dt, \\dv, \\dm [PATTERN]   tables, views, materialized views
  \\di, \\ds [PATTERN]   indexes, sinks
  \\dc [PATTERN]       clusters
Statements end with ';'. Tab completes keywords and names; history is kept in the home."""

QUIT = object()


class Shell:
    def __init__(self, conn: Connection):
        self.conn = conn
        self.out: TextIO = sys.stdout
        self.expanded: bool | None = False
        self.timing = False
        self.failed = False  # an error was reported (the exit status of sql -c '\\d x')
        self.splitter = Splitter()
        self.status = Status()
        self.history: complete.History | None = None
        self.completer = complete.Completer(
            lambda: complete.Names.of(conn.store.snapshot()), lambda: self.splitter.pending)
        self._entry: list[str] = []  # the lines of the statement being typed
        self._meta: dict[str, Callable[[list[str]], object]] = {
            "?": lambda _: print(HELP), "q": lambda _: QUIT, "quit": lambda _: QUIT,
            "h": self._help, "help": self._help, "conninfo": self._conninfo,
            "p": self._print_buffer, "r": self._reset_buffer, "g": self._go,
            "i": self._include, "include": self._include, "o": self._output,
            "out": self._output, "x": self._expanded, "timing": self._timing,
            "dc": self._clusters,
            **{f"d{letters}": self._listing(letters) for letters in describe.LISTINGS},
        }

    # -- the loop --------------------------------------------------------------------

    def run(self) -> int:
        # Python-side log records (Py4J's, on an interrupted call) go to the log file.
        logging.basicConfig(filename=_log_file(self.conn.config.home, "shell.log"),
                            level=logging.WARNING,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if sys.stdin.isatty():
            self.history = complete.install(self.completer,
                                            self.conn.config.home / "sql_history")
        print(f"mzflow {__version__}, home {self.conn.config.home}\n"
              "End statements with ';'. Type \\? for help, \\h for SQL syntax, \\q to quit.")
        while True:
            try:
                text = input(self._prompt())
            except EOFError:
                print()
                return 0
            except KeyboardInterrupt:
                print()
                self._discard()
                continue
            try:
                if self.feed(text) is QUIT:
                    return 0
            except KeyboardInterrupt:  # between statements, or in a meta-command
                print("\nCancelled.", file=sys.stderr)
                self._discard()

    def feed(self, text: str, record: bool = True) -> object:
        """Handle what was typed (or a file's text, for ``\\i``): meta-commands at once,
        SQL each time a statement is complete. ``record``: keep it in the history."""
        lines = text.split("\n")
        for n, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith("\\") and not self.splitter.in_literal:
                if record and self.history is not None:
                    self.history.add(stripped)
                if self.meta(stripped) is QUIT:
                    return QUIT
                continue
            if not self.splitter.pending and stripped in ("quit", "exit"):
                return QUIT
            self._entry.append(line)
            statements = self.splitter.feed(line)
            for i, statement in enumerate(statements):
                if not self.execute(statement):
                    if record and self.history is not None:
                        self.history.add("\n".join(self._entry))
                    self._discard(statements[i + 1:] + lines[n + 1:])
                    return None
            if not self.splitter.pending:
                if record and self.history is not None:
                    self.history.add("\n".join(self._entry))
                self._entry.clear()
        return None

    def execute(self, text: str) -> bool:
        """Run one statement and print its result. False when what is pending should be
        dropped: the statement was interrupted, or mzflow itself failed."""
        from mzflow.sql.parse import parse

        self.completer.forget()  # DDL may rename, create or drop what completion offers
        start = time.monotonic()
        try:
            with _cancelling(), self.status.running(" ".join(text.split())):
                results = [self.conn.execute_parsed(stmt) for stmt in parse(text)]
        except KeyboardInterrupt:
            self._error("ERROR: canceling statement due to user request")
            return False
        except Exception as e:
            if _INTERRUPTED.is_set():
                # The interrupted Py4J call can surface as its own error ("Answer from
                # Java side is empty") instead of the KeyboardInterrupt.
                self._error("ERROR: canceling statement due to user request")
                return False
            if isinstance(e, Error):
                self._error(f"ERROR: {e}")
                return True
            self._internal(e)  # a bug: say so, keep the details, keep the session
            return False
        for result in results:
            print_result(result, self.out, self.expanded)
        if self.timing:
            print(f"Time: {(time.monotonic() - start) * 1000:.3f} ms", file=self.out)
        self.out.flush()
        return True

    def _internal(self, e: Exception) -> None:
        log = _log_traceback(self.conn.config.home)
        self._error(f"ERROR: internal error: {type(e).__name__}: {e}\n"
                    f"DETAIL: this is a bug in mzflow; the traceback is in {log}")

    def _error(self, text: str) -> None:
        self.failed = True
        print(text, file=sys.stderr)

    def _discard(self, unread: Sequence[str] = ()) -> None:
        """Drop the pending statement and ``unread`` input, saying so when there was any."""
        self._entry.clear()
        dropped = "".join(unread) + self.splitter.reset()
        if dropped.strip():
            print("Query buffer reset (cleared): pending input discarded.", file=sys.stderr)

    def _prompt(self) -> str:
        if not self.splitter.pending:
            return "mzflow=> "
        return f"mzflow{self.splitter.quote_char or '-'}> "

    # -- meta-commands ---------------------------------------------------------------

    def meta(self, line: str) -> object:
        """Run one meta-command line, such as ``\\d orders``."""
        command, _, rest = line[1:].partition(" ")
        # psql's "+" forms (\d+ t) show more; here they show the same.
        handler = self._meta.get(command) or self._meta.get(command.removesuffix("+"))
        if handler is None:
            self._error(f"invalid command \\{command}; try \\? for help")
            return None
        try:
            args = shlex.split(rest.strip().removesuffix(";"))
        except ValueError as e:  # an unbalanced quote
            self._error(f"\\{command}: {e}")
            return None
        try:
            return handler(args)
        except Error as e:
            self._error(f"ERROR: {e}")
        except OSError as e:
            self._error(f"\\{command}: {e.filename or ''}: {e.strerror}")
        except Exception as e:  # a bug: as for statements, the session goes on
            self._internal(e)
        finally:
            self.out.flush()
        return None

    def _listing(self, letters: str) -> Callable[[list[str]], None]:
        def show(args: list[str]) -> None:
            snap = self.conn.store.snapshot()
            if letters == "" and args and not any(c in args[0] for c in "*?"):
                for name in args:
                    print(describe.describe(snap, self.conn.config.warehouse, name),
                          file=self.out)
                return
            print(describe.listing(snap, letters, args[0] if args else None), file=self.out)

        return show

    def _clusters(self, args: list[str]) -> None:
        print(describe.clusters(self.conn.store.snapshot(), args[0] if args else None),
              file=self.out)

    def _help(self, args: list[str]) -> None:
        print(help_text(" ".join(args)))

    def _conninfo(self, _: list[str]) -> None:
        from sqlalchemy.engine import make_url

        from mzflow.engine import spark

        cfg = self.conn.config
        url = make_url(cfg.catalog_url).render_as_string(hide_password=True)
        state = "started" if spark.started() else "starts on the first read"
        print(f'You are connected to home "{cfg.home}" with catalog "{url}".\n'
              f"Spark: {cfg.spark_master} ({state}); its log is {spark_log(cfg.home)}.")

    def _print_buffer(self, _: list[str]) -> None:
        print(self.splitter.pending.rstrip("\n") or "Query buffer is empty.")

    def _reset_buffer(self, _: list[str]) -> None:
        self._entry.clear()
        self.splitter.reset()
        print("Query buffer reset (cleared).")

    def _go(self, _: list[str]) -> object:
        if not self.splitter.pending:
            self._error("Query buffer is empty.")
            return None
        return self.feed(";", record=False)

    def _include(self, args: list[str]) -> object:
        if len(args) != 1:
            self._error("\\i: missing required argument")
            return None
        text = Path(args[0]).expanduser().read_text(encoding="utf-8")
        return self.feed(text.removesuffix("\n"), record=False)

    def _output(self, args: list[str]) -> None:
        if self.out is not sys.stdout:
            self.out.close()
        self.out = sys.stdout
        if args:
            self.out = Path(args[0]).expanduser().open("w", encoding="utf-8")

    def _expanded(self, args: list[str]) -> None:
        values: dict[str, bool | None] = {"on": True, "off": False, "auto": None}
        if args and args[0].lower() not in values:
            self._error(f'\\x: unrecognized value "{args[0]}": Boolean or "auto" expected')
            return
        self.expanded = values[args[0].lower()] if args else not self.expanded
        word = {True: "on", False: "off", None: "used automatically"}[self.expanded]
        print(f"Expanded display is {word}.")

    def _timing(self, args: list[str]) -> None:
        if args and args[0].lower() not in ("on", "off"):
            self._error(f'\\timing: unrecognized value "{args[0]}": Boolean expected')
            return
        self.timing = args[0].lower() == "on" if args else not self.timing
        print(f"Timing is {'on' if self.timing else 'off'}.")


def spark_log(home: Path) -> Path:
    """Where the JVM's own output goes (start-up warnings, log4j), never the terminal."""
    return home / "log" / "spark.log"  # spark.py creates the folder when it starts


@contextmanager
def _cancelling() -> Iterator[None]:
    """Ctrl-C while a statement runs cancels its Spark jobs, then interrupts it."""
    _INTERRUPTED.clear()
    previous = signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# Set by Ctrl-C while a statement runs; whatever that statement then fails with is the
# cancellation.
_INTERRUPTED = threading.Event()


def _interrupt(signum: int, frame: object) -> None:
    from mzflow.engine import spark

    _INTERRUPTED.set()
    if spark.started():
        # From another thread: the main thread's Py4J connection is busy with the call
        # being interrupted.
        threading.Thread(target=_cancel_jobs, daemon=True).start()
    raise KeyboardInterrupt


def _cancel_jobs() -> None:
    from mzflow.engine import spark

    session = spark.session()
    try:
        try:
            session.sparkContext.cancelAllJobs()
        except Exception:  # Spark Connect: no SparkContext in this process
            session.interruptAll()
    except Exception:
        logging.getLogger("mzflow.shell").exception("cancelling Spark jobs failed")


def _log_file(home: Path, name: str) -> Path:
    path = home / "log" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _log_traceback(home: Path) -> Path:
    path = home / "log" / "shell.log"
    try:
        with _log_file(home, "shell.log").open("a", encoding="utf-8") as f:
            f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n")
            f.write(traceback.format_exc())
    except OSError:
        traceback.print_exc()
    return path
