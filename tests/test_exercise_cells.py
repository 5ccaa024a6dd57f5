"""Every exercise of notebooks 01-07 and 09 is checked by one call into amp_lab.exercises, out of sight.

Parses the notebooks (stored and solutions) and fails when a check cell
- is longer than three lines (comments and blank lines aside),
- does anything but ``from amp_lab.exercises import nbNN`` and ``result = nbNN.exK.check(...)`` whose
  arguments are plain names (an answer variable, a measurement): no literal, no computation, so no
  expected value, no rubric and no hint can sit in it;
or when an exercise section imports the comparison engine (amp_lab.check, check_items, check_base) itself, names an expected
value, or when the notebook's exercises and its module's disagree.  Also: the stored notebooks say
"not attempted" under every check, the solutions notebooks "passed", and every common wrong answer an
exercise declares is fed to it by a test.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from amp_lab.exercises import NOTEBOOK_MODULES, all_exercises, exercises_of

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
EXERCISE_HEADING = re.compile(r"^\*\*Exercise (\d+)\b", re.M)
FORBIDDEN_NAMES = {"expected", "right", "right_order", "solution", "correct", "reference", "kernel_update"}
MAX_LINES = 3


def _notebook(module: str, solutions: bool) -> Path:
    number = module.removeprefix("nb")
    folder = NOTEBOOKS / "solutions" if solutions else NOTEBOOKS
    found = sorted(folder.glob(f"{number}_*.ipynb"))
    assert len(found) == 1, f"expected one notebook {number}_*.ipynb in {folder}, found {found}"
    return found[0]


def _exercise_sections(path: Path) -> dict[int, list[dict]]:
    """{exercise number: its code cells}, from '## Exercises' (or the first exercise, where the lesson places
    one where its idea is taught, as 04 does) to the end of the notebook."""
    cells = json.loads(path.read_text())["cells"]
    start = next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
                  and (re.search(r"^## Exercises", "".join(c["source"]), re.M)
                       or EXERCISE_HEADING.search("".join(c["source"])))), None)
    assert start is not None, f"{path.name} has no '## Exercises' section"
    sections: dict[int, list[dict]] = {}
    current = None
    for cell in cells[start:]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            m = EXERCISE_HEADING.search(src)
            if m:
                current = int(m.group(1))
                assert current not in sections, f"{path.name}: exercise {current} appears twice"
                sections[current] = []
        elif current is not None:
            sections[current].append(cell)
    return sections


def _is_check_cell(src: str) -> bool:
    return "amp_lab.exercises" in src or re.search(r"\bnb\d\d\.ex\d+\.check\(", src) is not None


def _plain(node) -> bool:
    """A name, or an attribute of a name (``result``, ``record.activation_grads``)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _check_cell_problems(src: str, module: str, number: int) -> list[str]:
    problems = []
    lines = [ln for ln in src.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if len(lines) > MAX_LINES:
        problems.append(f"{len(lines)} lines (at most {MAX_LINES})")
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        return [f"does not parse: {e}"]
    calls = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "amp_lab.exercises":
            if [a.name for a in stmt.names] != [module] or any(a.asname for a in stmt.names):
                problems.append(f"imports {[a.name for a in stmt.names]} from amp_lab.exercises; only {module}")
            continue
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
        if isinstance(stmt, ast.Assign) and not (len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            problems.append("assigns to something other than one name")
        call = value if isinstance(value, ast.Call) else None
        target = call.func if call else None
        want = f"{module}.ex{number}.check"
        if target is None or ast.unparse(target) != want:
            problems.append(f"statement {ast.unparse(stmt)[:80]!r} is not `result = {want}(...)`")
            continue
        calls += 1
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if not _plain(arg):
                problems.append(f"argument {ast.unparse(arg)[:60]!r} is not a plain name (no literals, no computing)")
        for kw in call.keywords:
            if kw.arg is None:
                problems.append("passes **kwargs")
    if calls != 1:
        problems.append(f"{calls} calls of {module}.ex{number}.check (one wanted)")
    return problems


CASES = [(m, s) for m in NOTEBOOK_MODULES for s in (False, True)]


@pytest.mark.parametrize(("module", "solutions"), CASES, ids=[f"{m}{'-solutions' if s else ''}" for m, s in CASES])
def test_check_cells_are_one_call_with_no_answer_in_sight(module, solutions):
    path = _notebook(module, solutions)
    sections = _exercise_sections(path)
    numbers = [ex.number for ex in exercises_of(module)]
    assert sorted(sections) == numbers, f"{path.name} has exercises {sorted(sections)}; amp_lab.exercises.{module} has {numbers}"
    problems = []
    for number, cells in sections.items():
        checks = [c for c in cells if _is_check_cell("".join(c["source"]))]
        if len(checks) != 1:
            problems.append(f"exercise {number}: {len(checks)} check cells (one wanted)")
        for cell in checks:
            problems += [f"exercise {number}: {p}" for p in _check_cell_problems("".join(cell["source"]), module, number)]
        for cell in cells:
            src = "".join(cell["source"])
            if re.search(r"\bamp_lab\.check(_\w+)?\b|\bcheck_(value|tensor|bits|dtype|dtypes|choice|set|between|sequence|function)\(", src):
                problems.append(f"exercise {number}: a cell uses the comparison engine itself:\n{src[:200]}")
            try:
                names = {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}
            except SyntaxError:
                names = set()
            if names & FORBIDDEN_NAMES and not solutions:
                problems.append(f"exercise {number}: a cell names {sorted(names & FORBIDDEN_NAMES)}:\n{src[:200]}")
    assert not problems, f"{path.relative_to(ROOT)}:\n" + "\n".join(problems)


def _check_outputs(module: str, solutions: bool) -> dict[int, str]:
    out = {}
    for number, cells in _exercise_sections(_notebook(module, solutions)).items():
        for cell in cells:
            if _is_check_cell("".join(cell["source"])):
                out[number] = "".join(
                    "".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream"
                )
    return out


@pytest.mark.parametrize("module", NOTEBOOK_MODULES)
def test_stored_notebooks_are_not_attempted_and_solutions_pass(module):
    for number, text in _check_outputs(module, solutions=False).items():
        assert text.startswith("○ not attempted"), f"{module} exercise {number}, stored output:\n{text}"
    for number, text in _check_outputs(module, solutions=True).items():
        assert text.startswith("✓ passed"), f"{module} solutions, exercise {number}:\n{text}"


def test_every_exercise_declares_a_common_mistake_and_a_test_feeds_each():
    missing = []
    for ex in all_exercises():
        module = f"nb{ex.notebook}"
        if not ex.mistakes:
            missing.append(f"{module}.ex{ex.number} declares no common mistake")
            continue
        test_file = ROOT / "tests" / f"test_exercises_{module}.py"
        text = test_file.read_text() if test_file.exists() else ""
        for m in ex.mistakes:
            if not re.search(rf"feed_mistake\(\s*{module}\.ex{ex.number},\s*{re.escape(repr(m.name))}", text) and not re.search(
                rf'feed_mistake\(\s*{module}\.ex{ex.number},\s*"{re.escape(m.name)}"', text
            ):
                missing.append(f"{module}.ex{ex.number}: mistake {m.name!r} is fed by no test in {test_file.name}")
    assert not missing, "\n".join(missing)
