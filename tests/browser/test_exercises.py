"""An exercise answered in JupyterLab as a learner does it (issue 16): type a wrong answer into the
answer cell, run it and the check cell, read "✗ not yet" and a hint from the page; then the right
answer, read "✓ passed".  And a prediction: click an option of a ``predict.choice`` widget, run the
reveal cell, read "you predicted ..." from the page.

The notebooks' exercises are being rewritten, so nothing about them is copied here: the exercise is
found by parsing notebook 01 (the first whose answer cell is the single line ``answer = None``), and
its right answer is computed by running the solutions notebook's cells up to that exercise's check in a
fresh kernel (the solutions notebook is the oracle, as ``amp_lab`` is for the widget tests).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from labdriver import ARTIFACTS, NOTEBOOKS

pytestmark = pytest.mark.timeout(360)

NOTEBOOK = "01_float_formats.ipynb"
MODULE = "nb01"
SOLUTIONS = NOTEBOOKS / "solutions" / "01_float_formats_solutions.ipynb"

# The verdicts amp_lab.check prints (its _MARK); the test reads them from the page.
PASSED, NOT_YET, NOT_ATTEMPTED = "✓ passed", "✗ not yet", "○ not attempted"

EXERCISE_HEADING = re.compile(r"^\*\*Exercise (\d+)\b")
ANSWER_NONE = re.compile(r"^answer\s*=\s*None\s*(#.*)?$")
CHOICE = re.compile(r"^\s*(\w+)\s*=\s*(?:amp_lab\.)?predict\.choice\(", re.M)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _code_lines(src: str) -> list[str]:
    return [ln.strip() for ln in src.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def is_check_cell(src: str, number: int) -> bool:
    """The cell that checks exercise ``number``: one calling ``nb01.exN.check(`` (or, before a
    notebook is converted to amp_lab.exercises, one using the comparison engine amp_lab.check)."""
    return re.search(rf"\b{MODULE}\.ex{number}\.check\(", src) is not None or "amp_lab.check" in src


def exercise_sections(cells: list[dict], *, after: str | None = "## Exercises") -> dict[int, list[int]]:
    """{exercise number: indices of the cells of its section}; a section starts at a markdown cell
    beginning ``**Exercise N`` (after the ``after`` heading, when given) and ends at the next one."""
    start = 0
    if after is not None:
        start = next(
            (i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and _source(c).lstrip().startswith(after)),
            len(cells),
        )
    sections: dict[int, list[int]] = {}
    current = None
    for i in range(start, len(cells)):
        m = EXERCISE_HEADING.match(_source(cells[i]).lstrip()) if cells[i]["cell_type"] == "markdown" else None
        if m:
            current = int(m.group(1))
            sections[current] = []
        elif current is not None:
            sections[current].append(i)
    return sections


def _single_answer_none(src: str) -> bool:
    lines = _code_lines(src)
    return len(lines) == 1 and ANSWER_NONE.match(lines[0]) is not None


@dataclass
class Picked:
    number: int
    answer_cell: int  # cell indices in the stored notebook
    check_cell: int


def pick_exercise(cells: list[dict]) -> Picked | None:
    """The first exercise whose answer cell is the single line ``answer = None`` (comment allowed),
    with its check cell after it."""
    for number, indices in sorted(exercise_sections(cells).items()):
        code = [i for i in indices if cells[i]["cell_type"] == "code"]
        checks = [i for i in code if is_check_cell(_source(cells[i]), number)]
        answers = [i for i in code if _single_answer_none(_source(cells[i]))]
        if len(checks) == 1 and answers and answers[0] < checks[0]:
            return Picked(number, answers[0], checks[0])
    return None


# Run in a fresh kernel after the solutions' cells: the right answer, and one surely wrong, as literals.
REPORT_ANSWER = r'''
import json as _json
_v = answer
if isinstance(_v, bool):
    _w = not _v
elif isinstance(_v, int):
    _w = _v + 1
elif isinstance(_v, float):
    _w = _v * 2 + 1
else:
    _w = "surely wrong"
try:
    _round_trips = eval(repr(_v)) == _v and eval(repr(_w)) == _w
except Exception:
    _round_trips = False
print("ANSWER:" + _json.dumps({"right": repr(_v), "wrong": repr(_w), "round_trips": bool(_round_trips)}))
'''


def solution_answer(number: int, tmp_path: Path) -> dict:
    """Run the solutions notebook's code cells before exercise ``number``'s check (other exercises'
    checks left out) in a fresh kernel; return the right and a wrong answer as Python literals."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(SOLUTIONS, as_version=4)
    sections = exercise_sections(nb.cells, after=None)
    assert number in sections, f"{SOLUTIONS.name} has no **Exercise {number}"
    check = next((i for i in sections[number] if nb.cells[i].cell_type == "code"
                  and is_check_cell(nb.cells[i].source, number)), None)
    assert check is not None, f"{SOLUTIONS.name}: no check cell for exercise {number}"
    checks = {i for n, idx in sections.items() for i in idx
              if nb.cells[i].cell_type == "code" and is_check_cell(nb.cells[i].source, n)}
    kept = [c for i, c in enumerate(nb.cells[:check]) if c.cell_type == "code" and i not in checks]
    run = nbformat.v4.new_notebook(metadata=nb.metadata)
    run.cells = [nbformat.v4.new_code_cell(c.source) for c in kept] + [nbformat.v4.new_code_cell(REPORT_ANSWER)]
    env_before = os.environ.get("AMP_LAB_DEVICE")
    os.environ["AMP_LAB_DEVICE"] = "cpu"  # as the test's JupyterLab server runs the notebook
    try:
        NotebookClient(run, timeout=180, kernel_name="python3",
                       resources={"metadata": {"path": str(SOLUTIONS.parent)}}).execute()
    finally:
        if env_before is None:
            os.environ.pop("AMP_LAB_DEVICE", None)
        else:
            os.environ["AMP_LAB_DEVICE"] = env_before
    text = "".join(o.get("text", "") for o in run.cells[-1].outputs if o.get("output_type") == "stream")
    line = next(ln for ln in text.splitlines() if ln.startswith("ANSWER:"))
    return json.loads(line[len("ANSWER:"):])


def _verdict_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.mark.notebook(NOTEBOOK, order=3)
def test_an_exercise_answered_wrong_then_right(runs, tmp_path):
    if not (NOTEBOOKS / NOTEBOOK).exists() or not SOLUTIONS.exists():
        pytest.skip(f"notebooks/{NOTEBOOK} or its solutions notebook does not exist yet")
    cells = json.loads((NOTEBOOKS / NOTEBOOK).read_text(encoding="utf-8"))["cells"]
    picked = pick_exercise(cells)
    if picked is None:
        pytest.skip(f"{NOTEBOOK} has no exercise whose answer cell is the single line `answer = None`")
    answers = solution_answer(picked.number, tmp_path)
    if not answers["round_trips"]:
        pytest.skip(f"exercise {picked.number}'s answer {answers['right']} cannot be typed as a literal")

    nb, _ = runs.get_clean(NOTEBOOK)
    shot = ARTIFACTS / f"{NOTEBOOK.removesuffix('.ipynb')}-exercise{picked.number}"
    try:
        # After Run All the answer is unfilled: the check says so.
        first = nb.output_text(picked.check_cell)
        assert first.lstrip().startswith(NOT_ATTEMPTED), (
            f"exercise {picked.number} before any answer: expected {NOT_ATTEMPTED!r}, the page shows {first!r}"
        )
        seen = {}
        for label, literal, verdict in (("wrong", answers["wrong"], NOT_YET), ("right", answers["right"], PASSED)):
            nb.set_cell_source(picked.answer_cell, f"answer = {literal}")
            nb.run_cell(picked.answer_cell)
            nb.run_cell(picked.check_cell)
            text = nb.output_text(picked.check_cell)
            seen[label] = text
            lines = _verdict_lines(text)
            assert lines and lines[0].startswith(verdict), (
                f"exercise {picked.number} answered {literal} ({label}): expected {verdict!r}, the page shows {text!r}"
            )
            nb.screenshot_element(nb.cell(picked.check_cell), Path(f"{shot}-{label}.png"))
        # A wrong answer gets a hint: a line after the verdict that points somewhere.
        wrong = _verdict_lines(seen["wrong"])
        assert len(wrong) >= 2 and any("hint" in ln for ln in wrong[1:]), (
            f"exercise {picked.number}: the 'not yet' for {answers['wrong']} has no hint line: {seen['wrong']!r}"
        )
    finally:
        # Leave the answer cell as the notebook had it, for any later test of this page.
        try:
            nb.set_cell_source(picked.answer_cell, _source(cells[picked.answer_cell]).rstrip("\n"))
        except Exception:
            pass


def find_prediction(cells: list[dict]) -> tuple[int, int] | None:
    """(cell of the first ``x = predict.choice(...)``, cell of the first later ``predict.reveal(x, ...)``)."""
    for i, cell in enumerate(cells):
        m = CHOICE.search(_source(cell)) if cell["cell_type"] == "code" else None
        if m:
            reveal = next(
                (j for j in range(i + 1, len(cells)) if cells[j]["cell_type"] == "code"
                 and re.search(rf"predict\.reveal\(\s*{m.group(1)}\b", _source(cells[j]))),
                None,
            )
            if reveal is not None:
                return i, reveal
    return None


def drive_prediction(nb, choice_cell: int, reveal_cell: int, shot: Path) -> str:
    """Click the prediction's first option, run the reveal cell, read "you predicted <option>" from
    the page and see the buttons locked; returns the reveal's text."""
    from playwright.sync_api import expect

    box = nb.cell(choice_cell).locator(".amp-lab-prediction")
    box.scroll_into_view_if_needed()
    buttons = box.locator("button")
    assert buttons.count() >= 2, f"cell {choice_cell}: the prediction shows {buttons.count()} buttons"
    before = nb.output_text(reveal_cell)
    assert "no prediction committed" in before, f"the reveal before any click: {before!r}"
    option = buttons.first
    label = option.inner_text().strip()
    option.click()
    expect(option).to_have_class(re.compile(r"mod-active"), timeout=10_000)
    nb.run_cell(reveal_cell)
    text = nb.output_text(reveal_cell)
    assert f"you predicted {label}" in text, f"clicked {label!r}; the reveal shows {text!r}"
    assert text.lstrip()[:1] in ("✓", "✗"), text
    # A prediction is not changed after the reveal: the buttons are locked.
    expect(option).to_be_disabled(timeout=10_000)
    nb.screenshot_element(nb.cell(reveal_cell), shot)
    return text


@pytest.mark.notebook(NOTEBOOK, order=4)
def test_a_prediction_clicked_then_revealed(runs):
    if not (NOTEBOOKS / NOTEBOOK).exists():
        pytest.skip(f"notebooks/{NOTEBOOK} does not exist yet")
    cells = json.loads((NOTEBOOKS / NOTEBOOK).read_text(encoding="utf-8"))["cells"]
    found = find_prediction(cells)
    if found is None:
        pytest.skip(
            f"{NOTEBOOK} has no `x = predict.choice(...)` with a later `predict.reveal(x, ...)` yet "
            "(its predict moments are being written; re-run when they are in)"
        )
    nb, _ = runs.get_clean(NOTEBOOK)
    drive_prediction(nb, *found, ARTIFACTS / f"{NOTEBOOK.removesuffix('.ipynb')}-prediction.png")


PREDICT_DRIVE = "zz_predict_drive.ipynb"


@pytest.mark.notebook(PREDICT_DRIVE)
def test_the_prediction_drive_reads_the_page(runs, lab_server):
    """The drive above on a notebook of our own, so it is exercised whatever the course's notebooks
    hold today: a wrong reveal says so ("✗ you predicted ..."), and with a right one it says "✓"."""
    import nbformat

    nb_file = nbformat.v4.new_notebook()
    nb_file.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb_file.cells = [
        nbformat.v4.new_code_cell(
            "import torch\nfrom amp_lab import predict\n"
            "guess = predict.choice('Which dtype does a + b give for float16 a and float32 b?', "
            "[torch.float16, torch.float32])\nguess"
        ),
        nbformat.v4.new_code_cell(
            "a, b = torch.ones(2, dtype=torch.float16), torch.ones(2)\n"
            "outcome = predict.reveal(guess, (a + b).dtype, explain=f'promotion gives {(a + b).dtype}')"
        ),
    ]
    nbformat.write(nb_file, str(lab_server.root / PREDICT_DRIVE))
    cells = json.loads((lab_server.root / PREDICT_DRIVE).read_text())["cells"]
    assert find_prediction(cells) == (0, 1)
    nb, _ = runs.get_clean(PREDICT_DRIVE)
    text = drive_prediction(nb, 0, 1, ARTIFACTS / "zz_predict_drive.png")
    # The first option (float16) is wrong: the page must say so, with the measured dtype.
    assert text.startswith("✗ you predicted float16; the result is float32"), text


# ---- the parsing above, on cells of our own (no browser needed) ---------------------------------------


def _md(text):
    return {"cell_type": "markdown", "source": text}


def _code(text):
    return {"cell_type": "code", "source": text}


def test_pick_exercise_takes_the_first_single_answer_none():
    cells = [
        _md("# 01"),
        _code("answer = None  # not in an exercise section"),
        _md("## Exercises"),
        _md("**Exercise 1 · Bits.** ..."),
        _code('answer_fp16 = None  # a string\nanswer_bf16 = None'),  # two answers: not this one
        _code("from amp_lab.exercises import nb01\nresult = nb01.ex1.check(answer_fp16, answer_bf16)"),
        _md("**Exercise 2 · Integers.** ..."),
        _code("# the largest integer\nanswer = None  # an int"),
        _code("from amp_lab.exercises import nb01\nresult = nb01.ex2.check(answer)"),
        _md("**Exercise 3.** ..."),
        _code("answer = None"),
        _code("from amp_lab.exercises import nb01\nresult = nb01.ex3.check(answer)"),
    ]
    assert exercise_sections(cells) == {1: [4, 5], 2: [7, 8], 3: [10, 11]}
    assert pick_exercise(cells) == Picked(2, 7, 8)
    # Without a check cell after it an exercise is not picked; with none left, nothing is.
    assert pick_exercise(cells[:8] + cells[9:]) == Picked(3, 9, 10)
    assert pick_exercise(cells[:6]) is None


def test_find_prediction_pairs_a_choice_with_its_reveal():
    cells = [
        _code("from amp_lab import predict\nguess_a = predict.choice('Q?', ['x', 'y'])\nguess_a"),
        _code("predict.reveal(other, 1)"),
        _md("text"),
        _code("outcome = predict.reveal(guess_a, 'x', explain='...')"),
    ]
    assert find_prediction(cells) == (0, 3)
    assert find_prediction(cells[:3]) is None
