"""A sqllogictest runner for Materialize's .slt files (see shared/conformance/README.md).

Runs each record through a real ``mzflow.Connection`` and counts passed, failed
and skipped records. Skips are listed by line with their reason, so the list
can only shrink. Run one file by hand with ``python tests/slt.py FILE``.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import mzflow

SPACE = "␠"


@dataclass
class Record:
    line: int
    kind: str  # statement | query | simple | reset-server | mode
    sql: str = ""
    expect_error: str | None = None
    types: str = ""
    options: tuple[str, ...] = ()
    expected: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    passed: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.passed} passed, {len(self.failed)} failed, {len(self.skipped)} skipped"


def parse_file(text: str) -> list[Record]:
    lines = text.splitlines()
    records: list[Record] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        start = i + 1
        words = stripped.split()
        head = words[0]
        if head in ("mode", "reset-server", "halt"):
            records.append(Record(start, head, sql=" ".join(words[1:])))
            i += 1
            continue
        body: list[str] = []
        expected: list[str] = []
        i += 1
        in_expected = False
        multiline = head == "query" and "multiline" in words
        while i < len(lines):
            cur = lines[i]
            if multiline and in_expected:
                if cur.strip() == "EOF":
                    i += 1
                    break
                expected.append(cur)
            elif not cur.strip() and not (multiline and in_expected):
                break
            elif cur.strip() == "----":
                in_expected = True
            elif in_expected:
                expected.append(cur)
            else:
                body.append(cur)
            i += 1
        rec = Record(start, head, sql="\n".join(body), expected=expected)
        if head == "statement":
            rec.expect_error = _error_pattern(stripped, "statement error") if (
                len(words) > 1 and words[1] == "error") else None
        elif head == "query":
            if len(words) > 1 and words[1] == "error":
                rec.expect_error = _error_pattern(stripped, "query error")
            else:
                rec.types = words[1] if len(words) > 1 else ""
                rec.options = tuple(o for w in words[2:] for o in w.split(","))
        elif head == "simple":
            rec.options = tuple(words[1:])
        records.append(rec)
    return records


def _error_pattern(line: str, prefix: str) -> str:
    pattern = line[len(prefix):].strip()
    # Older files prefix the message with the pgwire framing; accept it either way.
    return re.sub(r"^db error: ERROR: ", "", pattern)


def format_value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float | Decimal):
        return format(value, "f") if isinstance(value, Decimal) else repr(value)
    text = str(value)
    return "(empty)" if text == "" else text.replace(" ", SPACE)


def _adapt(sql: str) -> str:
    # The cluster design has no replicas: read `CREATE CLUSTER x REPLICAS (...)` as
    # `CREATE CLUSTER x`, as the corpus README allows.
    return re.sub(r"(CREATE\s+CLUSTER\s+\w+)\s+REPLICAS\s*\((?:[^()]|\([^()]*\))*\)", r"\1",
                  sql, flags=re.IGNORECASE)


def _skip_reason(rec: Record) -> str | None:
    if rec.kind == "query" and rec.sql.lstrip().upper().startswith("EXPLAIN") and (
        rec.expect_error is None
    ):
        return "EXPLAIN with Materialize's own plan rendering"
    if re.search(r"\bREPLICA(S)?\b", _adapt(rec.sql), flags=re.IGNORECASE):
        return "depends on cluster replicas, outside the cluster design"
    return None


class Runner:
    def __init__(self, make_conn: Callable[[], mzflow.Connection]):
        self.make_conn = make_conn
        self.conn = make_conn()

    def run(self, records: list[Record]) -> Outcome:
        out = Outcome()
        for rec in records:
            if rec.kind == "halt":
                break
            if rec.kind == "mode":
                continue
            if rec.kind == "reset-server":
                self.conn.close()
                self.conn = self.make_conn()
                continue
            reason = _skip_reason(rec)
            if reason:
                out.skipped.append((rec.line, reason))
                continue
            problem = self._check(rec)
            if problem is None:
                out.passed += 1
            else:
                out.failed.append((rec.line, problem))
        self.conn.close()
        return out

    def _check(self, rec: Record) -> str | None:
        if rec.kind == "simple":
            # Feature flags: mzflow has every feature on, so these are no-ops.
            if re.match(r"\s*ALTER\s+SYSTEM\s+SET\s+enable_\w+", rec.sql, re.IGNORECASE):
                return None
            return f"unsupported simple record: {rec.sql!r}"
        try:
            result = self.conn.execute(_adapt(rec.sql))
        except mzflow.Error as e:
            if rec.expect_error is None:
                return f"unexpected error: {e}"
            if re.search(rec.expect_error, str(e)):
                return None
            return f"error {str(e)!r} does not match {rec.expect_error!r}"
        except Exception as e:  # an internal error is a failure, never a crash of the run
            return f"internal error {type(e).__name__}: {e}"
        if rec.expect_error is not None:
            return f"expected error matching {rec.expect_error!r}, statement succeeded"
        if rec.kind == "statement":
            return None
        return self._compare(rec, result)

    def _compare(self, rec: Record, result: mzflow.Result) -> str | None:
        expected = list(rec.expected)
        if "colnames" in rec.options:
            if not expected:
                return "missing column names"
            want_cols = expected.pop(0).split()
            got_cols = [c.replace(" ", SPACE) for c in result.columns]
            if want_cols != got_cols:
                return f"columns {got_cols} != expected {want_cols}"
        got = [[format_value(v) for v in row] for row in result.rows]
        want = [line.split() for line in expected]
        if "valuesort" in rec.options:
            return None if sorted(sum(got, [])) == sorted(sum(want, [])) else (
                f"values {got} != expected {want}")
        if "rowsort" in rec.options or not _has_order_by(rec.sql):
            # Without ORDER BY a result has no defined order (Materialize's own output
            # order is that of its arrangements), so compare it as a multiset.
            got, want = sorted(got), sorted(want)
        return None if got == want else f"rows {got} != expected {want}"


def _has_order_by(sql: str) -> bool:
    return re.search(r"\bORDER\s+BY\b", sql, flags=re.IGNORECASE) is not None


def run_file(path: Path, make_conn: Callable[[], mzflow.Connection] | None = None) -> Outcome:
    if make_conn is None:
        def make_conn() -> mzflow.Connection:
            return mzflow.connect(tempfile.mkdtemp(prefix="mzflow-slt-"))
    return Runner(make_conn).run(parse_file(path.read_text()))


def main(argv: list[str]) -> int:
    worst = 0
    for name in argv:
        outcome = run_file(Path(name))
        print(f"{name}: {outcome.summary()}")
        for line, why in outcome.skipped:
            print(f"  skipped line {line}: {why}")
        for line, why in outcome.failed:
            print(f"  FAILED line {line}: {why}")
        worst = max(worst, 1 if outcome.failed else 0)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
