"""The documents name only what exists. Every tuning knob, SQL variable, configuration
key, ``MZFLOW_*`` variable, ``mzflow`` command and option, make target and relative link
that README.md, ARCHITECTURE.md and docs/*.md mention is checked against the code
(``config.Tuning``, ``SHOW ALL``, the CLI's argparse parser, the Makefile, the files).
README.md stays a map: at most 150 lines, naming no module path. Each package under
mzflow/ opens with a README.md of at most 30 lines, checked the same way; ARCHITECTURE.md
stays at most 150 lines and links every package's README. No Spark, no process."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import re
import shlex
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import mzflow
from mzflow import config
from mzflow.cli import build_parser
from mzflow.reasons import REASONS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
# The top-level packages of mzflow/ (catalog/ddl, maintain/tick… are parts of theirs).
PACKAGES = sorted(p for p in (ROOT / "mzflow").iterdir() if (p / "__init__.py").is_file())
PACKAGE_READMES = [p / "README.md" for p in PACKAGES if (p / "README.md").is_file()]
DOCS = [README, ARCHITECTURE, *sorted((ROOT / "docs").glob("*.md")), *PACKAGE_READMES]
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}


# -- what exists ---------------------------------------------------------------------------

TUNING = set(config.TUNING_FIELDS)
CONFIG_KEYS = set(tomllib.loads((Path(config.__file__).parent / "conf" / "defaults.toml")
                                .read_text()))


@cache
def variables() -> frozenset[str]:
    """What SHOW ALL lists (the session's variables and the tuning), on a fresh home."""
    import tempfile

    with tempfile.TemporaryDirectory() as home, mzflow.connect(home) as conn:
        return frozenset(r[0] for r in conn.execute("SHOW ALL").rows)


@cache
def environment() -> frozenset[str]:
    """``MZFLOW_*`` variables something reads: config.load maps one to every field of
    Config, config.tuning one to every tuning field; the rest are named in the code."""
    names = {f"MZFLOW_{f.name.upper()}" for f in dataclasses.fields(config.Config)}
    names |= {f"MZFLOW_{n.upper()}" for n in TUNING}
    me = Path(__file__).resolve()
    for folder in ("mzflow", "mzflow_dev", "tests", "scripts", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.resolve() != me:
                names |= set(re.findall(r"[\"'](MZFLOW_[A-Z0-9_]+)[\"']", path.read_text()))
    return frozenset(names)


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M))


# -- what a document names -----------------------------------------------------------------

def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, then ("span", code) of each inline code
    span outside them."""
    out: list[tuple[str, str]] = []
    for m in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
        out.append((m.group(1), m.group(2)))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    out += [("span", s) for s in re.findall(r"`([^`\n]+)`", prose)]
    return out


def _words(line: str) -> list[str]:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError:  # an unbalanced quote in an illustration
        return line.split("#")[0].split()


def _commands(text: str, program: str) -> Iterator[list[str]]:
    """Each invocation of ``program`` in shell code and inline spans: its arguments up
    to the end of the command (``&&``, ``;``, ``|``, a parenthesis)."""
    for lang, code in blocks(text):
        if lang not in SHELL_BLOCKS and lang != "span":
            continue
        for line in code.splitlines():
            words = _words(line)
            for i, w in enumerate(words):
                if w != program and not w.endswith("/" + program):
                    continue
                if i and words[i - 1] in ("import", "from"):
                    continue
                args = []
                for a in words[i + 1:]:
                    if a and a[0] in ";&|()<>":
                        break
                    args.append(a.strip("[]"))
                yield [a for a in args if a and a != "…"]


def _cli_problem(args: list[str]) -> str | None:
    parser: argparse.ArgumentParser = build_parser()
    chosen = False  # whether this parser's subcommand was named
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a.startswith("-"):
            opt = a.split("=", 1)[0]
            action = parser._option_string_actions.get(opt)
            if action is None:
                return f"mzflow {' '.join(args)}: {parser.prog} has no option {opt}"
            skip = action.nargs != 0 and "=" not in a
            continue
        subs = [x for x in parser._actions if isinstance(x, argparse._SubParsersAction)]
        if subs and not chosen:
            if a not in subs[0].choices:
                return (f"mzflow {' '.join(args)}: {parser.prog} has no command {a!r} "
                        f"(it has {', '.join(subs[0].choices)})")
            parser = subs[0].choices[a]
            continue
        chosen = True  # a positional argument
    return None


def problems(path: str, text: str) -> list[str]:
    """What ``text`` (the document ``path``) names that does not exist."""
    out = []
    for args in _commands(text, "mzflow"):
        why = _cli_problem(args)
        if why:
            out.append(why)
    for args in _commands(text, "make"):
        target = next((a for a in args if "=" not in a and not a.startswith("-")), None)
        if target and target not in make_targets():
            out.append(f"make {target}: no such target in the Makefile")
    for name in re.findall(r"\bMZFLOW_[A-Z0-9_]*[A-Z0-9]\b", text):
        if name not in environment():
            out.append(f"{name}: no code reads this variable")
    for lang, code in blocks(text):
        if lang == "sql":
            code = re.sub(r"--.*", "", code)  # comments are prose
        for m in re.finditer(r"\b(?:ALTER SYSTEM (?:SET|RESET)|SET|RESET|SHOW)[ \t]+"
                             r"([a-z_][a-z0-9_]*)", code):
            if m.group(1) not in variables():
                out.append(f"{m.group(0)}: SHOW ALL has no {m.group(1)!r}")
        if lang == "toml":
            data = tomllib.loads(code)
            out += [f"conf/mzflow.toml key {k!r} does not exist" for k in data
                    if k != "tuning" and k not in CONFIG_KEYS]
            out += [f"[tuning] {k!r} is not a Tuning field" for k in data.get("tuning", {})
                    if k not in TUNING]
    known = TUNING | CONFIG_KEYS | variables()
    # A near miss of a knob's name in code is a typo; system names (mz_…) are not knobs.
    for name in set(re.findall(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`", text)) - known:
        if name.startswith("mz_"):
            continue
        near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
        if near:
            out.append(f"`{name}` is no knob: did you mean `{near[0]}`?")
    out += _link_problems(path, text)
    return out


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _link_problems(path: str, text: str) -> list[str]:
    out = []
    here = (ROOT / path).parent
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (here / file).resolve() if file else (ROOT / path).resolve()
        if not dest.exists():
            out.append(f"link {target}: {os.path.relpath(dest, ROOT)} does not exist")
        elif anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+\s+(.*)$", dest.read_text(), re.M)
            if anchor not in {_slug(h) for h in headings}:
                out.append(f"link {target}: no heading #{anchor}")
    return out


# -- the tests -----------------------------------------------------------------------------

@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_document_names_only_what_exists(doc: Path) -> None:
    found = problems(str(doc.relative_to(ROOT)), doc.read_text())
    assert not found, "\n".join(found)


def test_the_checks_catch_what_does_not_exist() -> None:
    bad = """
`ALTER SYSTEM SET measure_evry = 5` and `SHOW colect_limit`; `MZFLOW_NO_SUCH_THING=1`.
Raise `probe_evry` when ticks flap. See [gone](docs/no-such-page.md), [x](docs/sql.md#nope).

```sh
mzflow clusters start etl
mzflow tick --clustr etl
mzflow --home /tmp/h sql -c "SELECT 1" && make tests
mzflow sink launch s
```

```toml
homedir = "x"
[tuning]
recompute_shares = 0.5
```
"""
    found = "\n".join(problems("README.md", bad))
    for what in ("measure_evry", "colect_limit", "MZFLOW_NO_SUCH_THING", "`probe_evry`",
                 "no-such-page.md", "#nope", "no command 'clusters'", "no option --clustr",
                 "make tests", "no command 'launch'", "'homedir'", "'recompute_shares'"):
        assert what in found, (what, found)
    assert "sql -c" not in found  # a real command with options passes


def test_the_tuning_page_lists_every_knob_with_its_default() -> None:
    text = (ROOT / "docs" / "tuning.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| ([^|]+?) \| [^|]+ \|$", text, re.M))
    tuning_rows = {k: v for k, v in rows.items() if k in TUNING}
    assert set(tuning_rows) == TUNING
    for name, f in config.TUNING_FIELDS.items():
        assert tuning_rows[name] == str(f.default), name
    keys = set(re.findall(r"^\| `([a-z_]+)` \| `MZFLOW_([A-Z_]+)` \|", text, re.M))
    assert {k for k, _ in keys} == CONFIG_KEYS
    assert all(v == k.upper() for k, v in keys)


def test_every_reason_code_is_documented() -> None:
    text = "\n".join(p.read_text() for p in DOCS)
    for code, meaning in REASONS.items():
        assert f"| {code} | {meaning} |" in text, code


def test_readme_is_a_map() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert "make demo" in text and "make test" in text
    # The package layout changes; README points at docs/, which may name modules.
    assert not re.findall(r"(?<![\w./])mzflow/[a-z_]+|\bmzflow\.[a-z_]+\.[a-z_]+", text)


def test_every_package_opens_with_a_short_readme() -> None:
    """What it owns, what it may import, where to start: in at most 30 lines."""
    assert len(PACKAGES) >= 15, [p.name for p in PACKAGES]
    missing = [p.name for p in PACKAGES if not (p / "README.md").is_file()]
    assert not missing, f"packages without a README.md: {missing}"
    for path in PACKAGE_READMES:
        text = path.read_text()
        name = path.parent.name
        assert len(text.splitlines()) <= 30, f"{name}/README.md: {len(text.splitlines())} lines"
        for part in ("**Owns**", "**May import**", "**Start with**"):
            assert part in text, f"{name}/README.md says nothing under {part}"


def test_architecture_is_a_map_that_links_every_package() -> None:
    text = ARCHITECTURE.read_text()
    assert len(text.splitlines()) <= 150
    linked = {Path(t) for t in re.findall(r"\]\((mzflow/[a-z_]+/README\.md)\)", text)}
    assert all((ROOT / t).is_file() for t in linked), sorted(linked)
    assert {p.relative_to(ROOT) / "README.md" for p in PACKAGES} <= linked
