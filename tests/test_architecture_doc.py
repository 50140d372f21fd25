"""docs/architecture.md gives every module its own sentence, so the map a newcomer reads cannot
fall behind.

A distribution's map is the tables headed ``| package | module | job |`` in its ``## `` section
(``## Runtime (`runtime/docparser_runtime/`)``, ``## Operator (...)``). A row names its package (a
row with an empty package cell continues the one above; ``top`` is the distribution's root), then
in its module cell one or more modules by their path inside that package in backticks
(``guards/auth.py`` under ``server/``; a parenthesis there is an aside, not a module), then in its
job cell what they do. A module's own sentence:

- it is named in the module cell of exactly one row, under its own package (a name that appears
  only in prose, a diagram or another module's sentence does not count);
- a row naming one module says what it does in at least three words;
- a row naming k > 1 modules says it in exactly k clauses, split at the top-level ``;`` (outside
  parentheses and backticks), the i-th clause about the i-th module, each of three words or more,
  so no two modules share one clause;
- every module the map names exists (a moved or deleted module leaves no row behind).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "architecture.md").read_text()
PACKAGES = {
    "operator": REPO / "operator" / "docparser_operator",
    "runtime": REPO / "runtime" / "docparser_runtime",
}
SECTIONS = {"operator": "`operator/docparser_operator/`", "runtime": "`runtime/docparser_runtime/`"}
HEADER = "| package | module | job |"
MIN_WORDS = 3


def _modules(root: Path) -> list[Path]:
    return sorted(
        p.relative_to(root)
        for p in root.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py") and "__pycache__" not in p.parts
    )


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` where it is outside backticks and parentheses."""
    parts, depth, code, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "`":
            code = not code
        elif not code and ch == "(":
            depth += 1
        elif not code and ch == ")":
            depth = max(0, depth - 1)
        elif not code and depth == 0 and ch == sep and text[i - 1 : i] != "\\":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def map_rows(doc: str, section: str) -> list[tuple[str, list[str], str]]:
    """The rows of the module tables in the doc's ``## `` section whose heading names
    ``section``: (package, module names, job)."""
    rows: list[tuple[str, list[str], str]] = []
    inside = in_table = False
    package = ""
    for line in doc.splitlines():
        if line.startswith("## "):
            inside, in_table = section in line, False
            continue
        if not inside:
            continue
        if line.strip() == HEADER:
            in_table, package = True, ""
            continue
        if not in_table or not line.startswith("|"):
            in_table = False
            continue
        cells = _split_top(line.strip().strip("|"), "|")
        if len(cells) != 3 or cells[0].startswith("---"):
            continue
        package = cells[0] or package
        names = re.findall(r"`([^`]+\.py)`", re.sub(r"\([^)]*\)", "", cells[1]))
        rows.append((package, names, cells[2]))
    return rows


def map_problems(doc: str, section: str, root: Path) -> list[str]:
    """What keeps the modules under ``root`` from each having their own sentence in the map of
    ``doc``'s ``section``."""
    problems: list[str] = []
    where: dict[str, int] = {}
    for index, (package, names, job) in enumerate(map_rows(doc, section)):
        prefix = "" if package == "top" else package.strip("`")
        for name in names:
            path = prefix + name
            if path in where:
                problems.append(f"{path}: named in two rows of the map")
            where[path] = index
            if not (root / path).is_file():
                problems.append(f"{path}: in the map, but there is no such module")
        clauses = [job] if len(names) == 1 else _split_top(job, ";")
        if len(names) > 1 and len(clauses) != len(names):
            problems.append(
                f"{', '.join(prefix + n for n in names)}: one row, {len(clauses)} clause(s) for "
                f"{len(names)} modules (give each its own `;` clause, in order, or its own row)"
            )
        for name, clause in zip(names, clauses, strict=False):
            if len(re.findall(r"[A-Za-z]+", clause)) < MIN_WORDS:
                problems.append(f"{prefix + name}: its sentence says too little: {clause!r}")
    for module in _modules(root):
        if module.as_posix() not in where:
            problems.append(f"{module.as_posix()}: no row of its own in the map")
    return problems


@pytest.mark.parametrize("distribution", sorted(PACKAGES))
def test_every_module_has_its_own_sentence_in_the_architecture_map(distribution: str) -> None:
    problems = map_problems(DOC, SECTIONS[distribution], PACKAGES[distribution])
    assert not problems, "docs/architecture.md's module map:\n" + "\n".join(problems)


@pytest.mark.parametrize("distribution", sorted(PACKAGES))
def test_the_check_sees_modules_and_rows(distribution: str) -> None:
    assert len(_modules(PACKAGES[distribution])) > 40
    rows = map_rows(DOC, SECTIONS[distribution])
    assert sum(len(names) for _, names, _ in rows) > 40


def _package(tmp_path: Path) -> Path:
    for name in ("cli.py", "j/s.py", "j/w.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    return tmp_path


GOOD = """## Runtime (`x/`)

  j/   s.py w.py   (a diagram names them too)

| package | module | job |
|---|---|---|
| top | `cli.py` | the verbs a person types |
| `j/` | `s.py`, `w.py` | a store's interface (`a; b`); one replica's claim loops |

## Other
"""


def test_a_map_where_each_module_has_its_own_sentence_passes(tmp_path: Path) -> None:
    assert map_problems(GOOD, "`x/`", _package(tmp_path)) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (  # named only in a list: the diagram and another row's prose
            "| `j/` | `s.py`, `w.py` | a store's interface (`a; b`); one replica's claim loops |",
            "| `j/` | `s.py` | a store's interface, beside `w.py`, its loops |",
            "j/w.py: no row of its own in the map",
        ),
        (  # two modules, one sentence
            "(`a; b`); one replica's claim loops",
            "(`a; b`) and one replica's claim loops",
            "j/s.py, j/w.py: one row, 1 clause(s) for 2 modules",
        ),
        (  # a clause that says nothing
            "one replica's claim loops",
            "loops",
            "j/w.py: its sentence says too little",
        ),
        (  # a second row for a module
            "| top | `cli.py` | the verbs a person types |",
            "| top | `cli.py` | the verbs a person types |\n| `j/` | `w.py` | its loops again |",
            "j/w.py: named in two rows of the map",
        ),
        (  # a row left behind by a move
            "| top | `cli.py` | the verbs a person types |",
            "| top | `cli.py` | the verbs a person types |\n| `j/` | `gone.py` | it moved away |",
            "j/gone.py: in the map, but there is no such module",
        ),
        (  # the right name under another package
            "| top | `cli.py` |",
            "| `j/` | `cli.py` |",
            "cli.py: no row of its own in the map",
        ),
    ],
    ids=["only-in-a-list", "one-clause-for-2", "too-little", "two-rows", "stale", "other-package"],
)
def test_a_module_without_its_own_sentence_fails(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    assert GOOD.count(old) == 1
    problems = map_problems(GOOD.replace(old, new), "`x/`", _package(tmp_path))
    assert any(p.startswith(problem) for p in problems), problems
