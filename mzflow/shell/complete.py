"""Readline for the shell: history kept in the home, and tab completion.

History entries are whole statements: the lines of a multi-line statement are
recalled (and edited) as one entry. The history file stores one entry per line,
with the newlines inside an entry written as ``\\x01`` (what psql does too).

Completion looks at the words before the cursor in the whole pending
statement: relation names after FROM, JOIN, INTO, UPDATE, …; cluster names
after IN CLUSTER; columns after ``relation.`` and, elsewhere, the columns of
the relations the statement names, together with keywords.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mzflow.catalog import system
from mzflow.catalog.model import RELATION_KINDS, Snapshot
from mzflow.sql.redact import redact_passwords

HISTORY_SIZE = 1000
_NEWLINE = "\x01"

KEYWORDS = """
SELECT FROM WHERE GROUP BY ORDER HAVING LIMIT OFFSET DISTINCT AS ON USING JOIN INNER LEFT
RIGHT FULL OUTER CROSS LATERAL AND OR NOT NULL IS IN EXISTS BETWEEN LIKE ILIKE CASE WHEN
THEN ELSE END UNION INTERSECT EXCEPT ALL ASC DESC WITH INSERT INTO VALUES UPDATE SET DELETE
COPY CREATE ALTER DROP RENAME TO CLUSTER CLUSTERS INDEX INDEXES DEFAULT SINK SINKS TABLE
TABLES VIEW VIEWS MATERIALIZED OBJECTS COLUMNS SHOW EXPLAIN PLAN FOR SUBSCRIBE RESET SYSTEM
CASCADE RESTRICT IF COMMENT SIZE VIRTUAL SPARK REFRESH RETAIN HISTORY FORMAT HEADER CSV
PARQUET JSON DELTA ENVELOPE KEY SCHEDULE TIMEZONE SNAPSHOT PROGRESS OF UP TRUE FALSE CAST COUNT SUM
AVG MIN MAX COALESCE INTEGER BIGINT TEXT NUMERIC DOUBLE BOOLEAN DATE TIMESTAMP INTERVAL
EVERY ALIGNED CREATION COMMIT
""".split()

# After these words a relation name follows.
_RELATION_BEFORE = {"FROM", "JOIN", "INTO", "UPDATE", "TABLE", "VIEW", "COPY", "SUBSCRIBE",
                    "INDEX", "SINK"}
_META_OBJECT = re.compile(r"\\d[tvmisc]?\+?$")
_WORD = re.compile(r'"[^"]*"|[\w$]+|\S')


@dataclass
class Names:
    """What completion offers, read from one catalog snapshot."""

    relations: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)  # relations, indexes, sinks
    clusters: list[str] = field(default_factory=list)
    columns: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, snap: Snapshot) -> Names:
        rel = [i for i in snap.items if i.kind in RELATION_KINDS]
        columns = {i.name: [c.name for c in i.columns] for i in rel}
        # The catalog's own tables (mz_clusters, ...) are relations to complete too.
        columns |= {t.name: [c.name for c in t.all_columns] for t in system.every()}
        return cls(relations=sorted(columns), objects=sorted(i.name for i in snap.items),
                   clusters=sorted(c.name for c in snap.clusters), columns=columns)


class Completer:
    """``readline``'s completer: ``names()`` reads the catalog (cached until
    :meth:`forget`), ``pending()`` is the statement typed on earlier lines."""

    def __init__(self, names: Callable[[], Names], pending: Callable[[], str]):
        self._load = names
        self._names: Names | None = None
        self._pending = pending
        self._matches: list[str] = []

    def forget(self) -> None:
        """The catalog may have changed (a statement ran): read it again when needed."""
        self._names = None

    def complete(self, text: str, state: int) -> str | None:
        if state == 0:
            import readline

            line = readline.get_line_buffer()[: readline.get_begidx()]
            try:
                self._matches = self.candidates(self._pending(), line, text)
            except Exception:  # completion must never break the prompt
                self._matches = []
        return self._matches[state] if state < len(self._matches) else None

    def candidates(self, pending: str, line: str, text: str) -> list[str]:
        """What may replace ``text``, typed after ``line`` on this line and after the
        ``pending`` lines of the statement."""
        if self._names is None:
            self._names = self._load()
        names = self._names
        if line.lstrip().startswith("\\"):
            return self._meta(line.split(), text, names)
        words = _WORD.findall(pending + "\n" + line)
        upper = [w.upper() for w in words]
        if "." in text:
            rel, _, col = text.rpartition(".")
            return [f"{rel}.{c}" for c in names.columns.get(rel.strip('"'), [])
                    if c.startswith(col)]
        if upper[-2:] == ["IN", "CLUSTER"] or upper[-1:] == ["CLUSTER"] or (
                upper[-3:-1] == ["SET", "CLUSTER"]):
            pool = names.clusters
        elif upper and upper[-1] in _RELATION_BEFORE:
            pool = names.objects if upper[-1] in ("INDEX", "SINK") else names.relations
        else:
            mentioned = [w.strip('"') for w in words if w.strip('"') in names.columns]
            pool = [c for rel in dict.fromkeys(mentioned) for c in names.columns[rel]]
            pool += names.relations + _keywords(text)
        return sorted({p for p in pool if p.startswith(text)})

    def _meta(self, words: list[str], text: str, names: Names) -> list[str]:
        command = words[0]
        if _META_OBJECT.match(command):
            pool = names.clusters if command.startswith("\\dc") else names.objects
            return [n for n in pool if n.startswith(text)]
        if command in ("\\i", "\\o", "\\include", "\\out"):
            return sorted(p + "/" if Path(p).is_dir() else p for p in glob.glob(text + "*"))
        if command in ("\\h", "\\help"):
            from mzflow.shell.grammar import STATEMENTS

            heads = {n.split()[0] for n in STATEMENTS}
            return sorted(h for h in heads if h.startswith(text.upper()))
        return []


def _keywords(text: str) -> list[str]:
    """In the case the user types: ``sel`` completes to ``select``."""
    lower = text[:1].islower()
    return [k.lower() if lower else k for k in KEYWORDS]


class History:
    """Readline history in ``path``: whole statements, appended as they are entered."""

    def __init__(self, readline: Any, path: Path):
        self._rl = readline
        self.path = path

    def load(self) -> None:
        if not self.path.exists():
            return
        entries = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        entries = entries[-HISTORY_SIZE:]
        for entry in entries:
            self._rl.add_history(entry.replace(_NEWLINE, "\n"))
        if len(entries) == HISTORY_SIZE:  # keep the file bounded too
            self._write(entries)

    def add(self, entry: str) -> None:
        # A password typed in CREATE/ALTER ROLE is kept neither in memory nor on disk.
        entry = redact_passwords(entry.strip("\n"))
        if not entry.strip():
            return
        n = self._rl.get_current_history_length()
        if n and self._rl.get_history_item(n) == entry:
            return  # psql's HISTCONTROL=ignoredups
        self._rl.add_history(entry)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(entry.replace("\n", _NEWLINE) + "\n")
        except OSError:
            pass  # history is a convenience; a read-only home must not stop the shell

    def _write(self, entries: list[str]) -> None:
        try:
            self.path.write_text("".join(e + "\n" for e in entries), encoding="utf-8")
        except OSError:
            pass


def install(completer: Completer, history_path: Path) -> History | None:
    """Set up readline for an interactive shell; None when readline is missing."""
    try:
        import readline
    except ImportError:
        return None
    if hasattr(readline, "set_auto_history"):
        readline.set_auto_history(False)  # entries are added per statement, not per line
    readline.set_completer(completer.complete)
    # '.' stays in the word (relation.column); '\' too (\d), and ':' (file paths).
    readline.set_completer_delims(" \t\n(),;=<>+-*/|'")
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")
    history = History(readline, history_path)
    history.load()
    return history
