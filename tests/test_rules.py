"""The incremental rules, one by one.

- Every IR node type has a rule; a node without one is refused by name.
- Each rule has a golden fixture ``golden/rules/<rule>.sql``: a catalog, a view that
  puts the rule to work, and a change batch. The expected EXPLAIN, how the batch's
  tick ran, and the view's output changes are kept in the same file
  (``MZFLOW_UPDATE_GOLDEN=1`` rewrites them; review the diff). The view after the
  batch must also equal DuckDB's answer: the golden changes are never taken on trust.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

import mzflow
from mzflow.errors import Unsupported
from mzflow.incremental.rules import RULES, rule_for
from mzflow.plan import ir

RULE_DIR = Path(__file__).parent / "golden" / "rules"
INPUTS = ("setup", "view", "batch")
OUTPUTS = ("explain", "tick", "changes")


def _node_types(cls: type[ir.Node]) -> set[type[ir.Node]]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _node_types(sub)
    return out


def test_every_ir_node_has_a_rule() -> None:
    missing = {t.__name__ for t in _node_types(ir.Node)} - {t.__name__ for t in RULES}
    assert not missing, f"IR nodes without an incremental rule: {sorted(missing)}"
    assert all(rule.node is t for t, rule in RULES.items())


def test_a_node_without_a_rule_is_refused_by_name() -> None:
    @dataclass(frozen=True)
    class Sample(ir.Node):
        pass

    with pytest.raises(Unsupported, match="no incremental rule for the Sample operator"):
        rule_for(Sample(columns=("x",)))


def test_every_rule_has_a_golden_fixture() -> None:
    modules = {type(rule).__module__.rsplit(".", 1)[-1] for rule in RULES.values()}
    fixtures = {p.stem for p in RULE_DIR.glob("*.sql")}
    assert modules <= fixtures, f"rules without a fixture: {sorted(modules - fixtures)}"


# -- golden fixtures ------------------------------------------------------------------------

def _sections(text: str) -> tuple[str, dict[str, str]]:
    """The file's leading comment and its ``-- <name>`` sections."""
    head, *rest = re.split(r"^-- (setup|view|batch|explain|tick|changes)\n", text, flags=re.M)
    return head, {rest[i]: rest[i + 1].strip("\n") for i in range(0, len(rest), 2)}


def _value(v: object) -> str:
    return "NULL" if v is None else str(v)


def _changes(before: list[tuple], after: list[tuple]) -> str:
    old, new = Counter(before), Counter(after)
    lines = []
    for row in set(old) | set(new):
        d = new[row] - old[row]
        if d:
            lines.append(f"{d:+d} {' | '.join(_value(v) for v in row)}")
    return "\n".join(sorted(lines, key=lambda s: (s[2:], s[0])))


def _statements(block: str) -> list[str]:
    return [s.strip() for s in block.split(";") if s.strip()]


def _normal(rows: list[tuple]) -> Counter:
    return Counter(tuple(float(v) if isinstance(v, int | float) and not isinstance(v, bool)
                         else v for v in r) for r in rows)


# The fixtures whose batch tick the in-process executor runs (incremental/local/);
# the others run on Spark, with the reason in the tick's line.
LOCAL = {"filter_map", "get", "join", "reduce", "reduce_state", "topk", "union"}


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("executor", ["spark", "local"])
@pytest.mark.parametrize("name", sorted(p.stem for p in RULE_DIR.glob("*.sql")))
def test_rule_golden(name: str, executor: str, tmp_path: Path) -> None:
    """Both executors give the same EXPLAIN, tick and changes: the golden ones."""
    path = RULE_DIR / f"{name}.sql"
    head, sections = _sections(path.read_text())
    setup, view, batch = (sections[k] for k in INPUTS)
    with mzflow.connect(str(tmp_path / "home")) as conn:
        conn.execute(f"ALTER SYSTEM SET tick_executor = '{executor}'")
        # Tiny tables make every batch "large": keep the switch from recomputing them.
        conn.execute("ALTER SYSTEM SET recompute_share = 1000")
        conn.execute("CREATE CLUSTER c")
        for s in _statements(setup):
            conn.execute(s)
        conn.execute(f"CREATE MATERIALIZED VIEW v IN CLUSTER c AS {view}")
        conn.tick(cluster="c")
        before = conn.execute("SET cluster = c; SELECT * FROM v").rows
        # Freshness names the wall-clock time (tests/test_freshness.py checks it).
        explained = "\n".join(
            line for line in conn.execute("EXPLAIN MATERIALIZED VIEW v").rows[0][0].split("\n")
            if not line.startswith(("Freshness: ", "Executor: ")))
        for s in _statements(batch):
            conn.execute(s)
        (report,) = conn.tick(cluster="c")
        after = conn.execute("SET cluster = c; SELECT * FROM v").rows
    got = {"explain": explained.strip("\n"), "tick": report.strategy,
           "changes": _changes(before, after)}

    if report.strategy.startswith("incremental"):
        ran = report.executor or ""
        assert ran.startswith(executor if name in LOCAL or executor == "spark" else "spark"), (
            name, ran)
    db = duckdb.connect()
    for s in _statements(setup) + _statements(batch):
        db.execute(s)
    assert _normal(after) == _normal(db.execute(view).fetchall()), "differs from DuckDB"

    if os.environ.get("MZFLOW_UPDATE_GOLDEN") and executor == "spark":
        body = "".join(f"-- {k}\n{sections[k]}\n" for k in INPUTS)
        body += "".join(f"-- {k}\n{got[k]}\n" for k in OUTPUTS)
        path.write_text(head + body)
        return
    for k in OUTPUTS:
        assert got[k] == sections.get(k), f"{name}: {k} differs (MZFLOW_UPDATE_GOLDEN=1)"
