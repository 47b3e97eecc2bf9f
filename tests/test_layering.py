"""The house's layering rules, over the import graph of every module under mzflow/
(issue 33). Every import counts, a function's lazy one included: a lazy import is how a
layer rule was broken quietly before (read/ reached into maintain/, clusters/ and
projections/ inside a function).

1. The core never imports a feature wing, nor session/, maintain/ or the CLI. The core is
   sql, catalog, plan, incremental, engine, storage and read, with the modules at the top
   (errors, config, reasons, values); the wings plug into it through the session's two
   lists (catalog/hooks.py: write hooks; read/sources.py: read sources), which
   session/wiring.py fills.
2. The packages form no cycle: an import from one package to another is never answered
   by one back, directly or around a longer loop.
3. No module imports itself back while it is being imported: a cycle through imports at
   a module's top (those under ``if TYPE_CHECKING`` do not run) fails or half-initialises
   depending on which module a caller imports first.

No exemptions: a rule that needs one gets a hook instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import mzflow

CORE = frozenset({"sql", "catalog", "plan", "incremental", "engine", "storage", "read",
                  "errors", "config", "reasons", "values"})
WINGS = frozenset({"projections", "quality", "sinks", "sources", "clusters", "airflow", "shell",
                   "server", "deploy"})
HIGHER = WINGS | {"session", "maintain", "cli"}
ROOT = "mzflow"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module (or the package whose name it imports)
    where: str  # path:line
    at_import_time: bool  # runs when the importing module is imported

    @property
    def packages(self) -> tuple[str, str]:
        return package(self.source), package(self.target)


def package(module: str) -> str:
    """``mzflow.read.reads`` → ``read``; ``mzflow.errors`` → ``errors``; ``mzflow`` →
    ``mzflow``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, and whether it runs at import time (at the top level, or
    in a top-level ``if``/``try``/``with`` other than ``if TYPE_CHECKING``)."""
    top: set[int] = set()

    def visit_top(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                top.add(id(stmt))
            elif isinstance(stmt, ast.If) and not _is_type_checking(stmt):
                visit_top(stmt.body)
                visit_top(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                for block in (stmt.body, stmt.orelse, stmt.finalbody,
                              *[h.body for h in stmt.handlers]):
                    visit_top(block)
            elif isinstance(stmt, ast.With):
                visit_top(stmt.body)

    visit_top(tree.body)
    return [(node, id(node) in top) for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)]


def imports(root: Path) -> list[Import]:
    """Every import of a module of the package at ``root`` by another of its modules."""
    modules = _modules(root)

    def resolve(name: str) -> str:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    out = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node, at_import_time in _import_nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = module.split(".") if is_package else module.split(".")[:-1]
                    here = here[:len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                if target != ROOT and not target.startswith(ROOT + "."):
                    continue
                found = resolve(target)
                if found != module:
                    out.append(Import(module, found, f"{path.relative_to(root.parent)}:"
                                                     f"{node.lineno}", at_import_time))
    return out


def core_violations(found: list[Import]) -> list[str]:
    return sorted(f"{i.where}: {i.source} imports {i.target}" for i in found
                  if i.packages[0] in CORE and i.packages[1] in HIGHER)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return out


def _describe(found: list[Import], key: str) -> list[tuple[list[str], str]]:
    """Each cycle of packages (or modules), and the imports that make it up."""
    def node(i: Import, end: int) -> str:
        return i.packages[end] if key == "package" else (i.source, i.target)[end]

    edges: dict[str, set[str]] = {}
    for i in found:
        a, b = node(i, 0), node(i, 1)
        if a != b:
            edges.setdefault(a, set()).add(b)
    out = []
    for component in _cycles(edges):
        members = set(component)
        lines = sorted({f"  {i.where}: {i.source} imports {i.target}" for i in found
                        if node(i, 0) in members and node(i, 1) in members
                        and node(i, 0) != node(i, 1)})
        out.append((component, f"{key}s {' ↔ '.join(component)}:\n" + "\n".join(lines)))
    return out


def package_cycles(found: list[Import]) -> list[str]:
    """Cycles of packages, then the cycles of modules in them that cross a package's
    border (where to cut)."""
    return [text for _, text in _describe(found, "package")] + [
        text for modules, text in _describe(found, "module")
        if len({package(m) for m in modules}) > 1]


def import_time_cycles(found: list[Import]) -> list[str]:
    return [text for _, text in _describe([i for i in found if i.at_import_time], "module")]


@cache
def _mzflow() -> list[Import]:
    return imports(Path(mzflow.__file__).parent)


def test_the_core_imports_no_wing_nor_session_maintain_or_cli() -> None:
    bad = core_violations(_mzflow())
    assert not bad, "the core imports a layer above it (register through a hook list " \
                    "instead):\n" + "\n".join(bad)


def test_packages_import_each_other_in_one_direction() -> None:
    bad = package_cycles(_mzflow())
    assert not bad, "import cycles between packages:\n" + "\n".join(bad)


def test_no_module_imports_itself_back_at_import_time() -> None:
    bad = import_time_cycles(_mzflow())
    assert not bad, "import cycles at import time:\n" + "\n".join(bad)


def test_the_checks_see_lazy_relative_and_import_time_imports(tmp_path: Path) -> None:
    """The checks themselves, on a package made to break each rule once."""
    root = tmp_path / "mzflow"
    files = {
        "__init__.py": "",
        "read/__init__.py": "",
        # a lazy import of a wing, inside a function
        "read/reads.py": "def f():\n    from mzflow.projections import route\n",
        "projections/__init__.py": "",
        "projections/route.py": "from ..read import reads\n",  # relative
        "session/__init__.py": "",
        "session/a.py": "from typing import TYPE_CHECKING\nfrom mzflow.session import b\n"
                        "if TYPE_CHECKING:\n    from mzflow.maintain import c\n",
        "session/b.py": "import mzflow.session.a\n",
        "maintain/__init__.py": "",
        "maintain/c.py": "def g():\n    from mzflow.session import a\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = imports(root)
    assert core_violations(found) == [
        "mzflow/read/reads.py:2: mzflow.read.reads imports mzflow.projections.route"]
    cycles = package_cycles(found)
    assert [c.splitlines()[0] for c in cycles] == [
        "packages maintain ↔ session:", "packages projections ↔ read:",
        "modules mzflow.maintain.c ↔ mzflow.session.a ↔ mzflow.session.b:",
        "modules mzflow.projections.route ↔ mzflow.read.reads:"]
    assert "mzflow/projections/route.py:1: mzflow.projections.route imports " \
           "mzflow.read.reads" in cycles[1]
    # session.a ↔ session.b runs at import time; a ↔ maintain.c does not (a function's,
    # and TYPE_CHECKING's)
    assert [c.splitlines()[0] for c in import_time_cycles(found)] == [
        "modules mzflow.session.a ↔ mzflow.session.b:"]
