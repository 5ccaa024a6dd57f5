"""The course map (amp_lab.course), the notebooks' own headers and README's table must agree."""

import re
from pathlib import Path

import nbformat
import pytest

from amp_lab.course import LESSONS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.file)
def test_notebook_exists_and_states_the_same_time(lesson):
    path = ROOT / "notebooks" / lesson.file
    assert path.exists(), f"{lesson.file} is on the course map but not in notebooks/"
    nb = nbformat.read(path, as_version=4)
    header = " ".join(c.source for c in nb.cells[:3] if c.cell_type == "markdown")
    minutes = re.search(r"\*\*Time:\*\*\s*about (\d+) minutes", header)
    assert minutes, f"{lesson.file}: no '**Time:** about N minutes' in its first cells"
    assert int(minutes.group(1)) == lesson.minutes


def test_readme_table_matches_course_map():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| \[`(\d\d_[a-z0-9_]+)`\]\(notebooks/\1\.ipynb\) \|[^|]*\| (\d+) min \|$", readme, re.M)
    assert [(f"{name}.ipynb", int(m)) for name, m in rows] == [(lesson.file, lesson.minutes) for lesson in LESSONS]


def test_every_numbered_notebook_is_on_the_map():
    on_disk = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert on_disk == sorted(lesson.file for lesson in LESSONS)


def test_every_notebook_with_exercises_has_executed_solutions():
    for lesson in LESSONS[1:]:
        nb = nbformat.read(ROOT / "notebooks" / lesson.file, as_version=4)
        assert any("## Exercises" in c.source for c in nb.cells if c.cell_type == "markdown"), lesson.file
        solution = ROOT / "notebooks" / "solutions" / lesson.file.replace(".ipynb", "_solutions.ipynb")
        assert solution.exists(), f"missing {solution.relative_to(ROOT)}"
        sol = nbformat.read(solution, as_version=4)
        assert all(c.execution_count is not None for c in sol.cells if c.cell_type == "code"), solution.name
