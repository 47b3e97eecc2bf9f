"""SQLite's sqllogictest corpus as a standing test: a fixed sample of every file.

Each file runs all of its statements and every N-th query (``slt.SAMPLE_EVERY``, which
leaves the two INSERT-heavy files out).
No record may give a wrong answer or end in an internal exception. The records that
still fail with a typed mzflow error are listed, with the error, in
``golden/sqlite_expected_failures.json``; the list can only shrink: a record that
starts to pass fails this test until it is removed (``python tests/slt.py --sample
--write-expected ../shared/conformance/sqlite/*.test`` rewrites the list).
``make slt`` runs every record of every file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from slt import (
    EXPECTED_FAILURES,
    SQLITE_CORPUS,
    _compare_sqlite,
    category,
    format_sqlite,
    parse_file,
    run_file,
    sample_every,
)

import mzflow

FILES = sorted(p.name for p in SQLITE_CORPUS.glob("*.test") if sample_every(p.name))


def test_values_print_as_sqlite_prints_them() -> None:
    assert [format_sqlite(v, "I") for v in (True, False, None, 7, -2.9, "12abc")] == [
        "1", "0", "NULL", "7", "-2", "12"]
    assert [format_sqlite(v, "R") for v in (1, 2.5, None)] == ["1.000", "2.500", "NULL"]
    assert [format_sqlite(v, "T") for v in ("", "a b", "é")] == ["(empty)", "a b", "@"]


def test_records_parse_with_conditions_and_hashes_compare() -> None:
    values = ["1", "2", "3", "NULL"]
    digest = hashlib.md5("".join(v + "\n" for v in values).encode()).hexdigest()
    (rec,) = parse_file(f"skipif mysql # note\nonlyif postgresql\nquery II rowsort label-1\n"
                        f"SELECT 1\n----\n4 values hashing to {digest}\n")
    assert rec.conditions == (("skipif", "mysql"), ("onlyif", "postgresql"))
    assert rec.options == ("rowsort",)
    rows = [(3, None), (1, 2)]
    assert _compare_sqlite(rec, mzflow.Result(columns=["a", "b"], rows=rows)) is None
    wrong = _compare_sqlite(rec, mzflow.Result(columns=["a", "b"], rows=[(3, 0), (1, 2)]))
    assert wrong is not None and category(wrong) == "wrong"


@pytest.mark.slow
@pytest.mark.skipif(not FILES, reason=f"SQLite corpus not found at {SQLITE_CORPUS}")
@pytest.mark.parametrize("name", FILES or ["(none)"])
@pytest.mark.spark
def test_sqlite_sample(name: str) -> None:
    outcome = run_file(SQLITE_CORPUS / name, every=sample_every(name))
    print(f"{name}: {outcome.summary()}")
    bad = [f"line {line}: {why}" for line, why in outcome.failed if category(why) != "error"]
    assert not bad, "wrong answers or internal errors:\n" + "\n".join(bad)
    expected = {int(line): why for line, why in json.loads(
        Path(EXPECTED_FAILURES).read_text()).get(name, {}).items()}
    failing = dict(outcome.failed)
    new = {line: why for line, why in failing.items() if line not in expected}
    fixed = sorted(set(expected) - set(failing))
    assert not new, f"records that newly fail: {new}"
    assert not fixed, f"records that now pass: remove lines {fixed} from {EXPECTED_FAILURES}"
    assert outcome.passed > 0 or not outcome.failed
