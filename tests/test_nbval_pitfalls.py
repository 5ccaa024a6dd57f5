"""The two nbval pitfalls the course solves deliberately (CONTRIBUTING.md, "Notebook outputs and nbval").

1. An ``ipywidgets.interactive`` cell saved by the notebook executor fails nbval on re-run ("Unexpected
   output fields"): the executor files the callback's output inside the widget, nbval's kernel as a
   plain cell output.  The course's rule (callbacks set widget values; plots go through FigurePane)
   gives the same outputs both ways.
2. A stderr warning that appears after the notebook was saved fails the cell.

Each case executes a tiny notebook with scripts/execute_notebooks.py, then runs nbval on it.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_case(tmp_path, name, sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    # nbclient has been seen to stall, rarely, while routing an Output widget's messages (one more
    # reason the course avoids Output widgets): give each execution a bound and one more try.
    for attempt in range(2):
        try:
            subprocess.run([sys.executable, str(ROOT / "scripts" / "execute_notebooks.py"), str(path)],
                           check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=150)
            return path
        except subprocess.TimeoutExpired:
            if attempt == 1:
                raise
    return path


def _nbval(path, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", str(path), "-p", "no:cacheprovider", "-q",
         f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml")],
        capture_output=True, text=True, timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL, env=env,
    )


@pytest.mark.timeout(600)
def test_interactive_cell_fails_but_course_widget_passes(tmp_path):
    bad = _run_case(tmp_path, "interactive", [
        "import ipywidgets as w\nw.interactive(lambda k: print(2 ** k), k=3)",
    ])
    result = _nbval(bad)
    assert result.returncode != 0 and "Unexpected output fields" in result.stdout, result.stdout[-2000:]

    good = _run_case(tmp_path, "course_rule", [
        "from amp_lab.widgets import smoke_test\nsmoke = smoke_test(k=3)\nsmoke.widget",
        "smoke.slider.value = 5\nprint(smoke.readout.value)",
    ])
    result = _nbval(good)
    assert result.returncode == 0, result.stdout[-2000:]


@pytest.mark.timeout(600)
def test_new_stderr_warning_fails_a_cell(tmp_path):
    path = _run_case(tmp_path, "warning", ["import os, warnings\n"
                                           "if os.environ.get('AMP_LAB_TEST_WARN'):\n"
                                           "    warnings.warn('new in this version')\n"
                                           "print('ok')"])
    assert _nbval(path).returncode == 0
    warned = _nbval(path, env=dict(os.environ, AMP_LAB_TEST_WARN="1"))
    assert warned.returncode != 0 and "new in this version" in warned.stdout, warned.stdout[-2000:]
