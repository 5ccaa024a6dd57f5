"""The nbval pitfalls the course solves deliberately (CONTRIBUTING.md, "Notebook outputs and nbval").

1. An ``ipywidgets.interactive`` cell saved by the notebook executor fails nbval on re-run ("Unexpected
   output fields"): the executor files the callback's output inside the widget, nbval's kernel as a
   plain cell output.  The course's rule (callbacks set widget values; plots go through FigurePane)
   gives the same outputs both ways.
2. A stderr warning that appears after the notebook was saved fails the cell.

The cases are tiny notebooks, saved by scripts/execute_notebooks.py and then checked by nbval, as the
course's own notebooks are.  Kernels are what cost time here, so all of them are saved by one run of the
script and checked by one run of nbval (the module's fixture); each test reads its notebooks' results.

3. The machine matrix: `make test` re-runs nbval with the variables of two simulated machines (other
   kernels; one thread), which must really change what torch computes, or the matrix tests nothing.
"""

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent

# A file next to the notebook that makes its cell warn: the warning case is saved in a folder without it
# and checked twice, there (no warning: passes) and in a copy of the saved notebook beside the file (the
# code now warns: fails).  nbval starts each notebook's kernel in the notebook's folder.
WARN_FLAG = "NEW_WARNING"
CASES = {
    "interactive": ["import ipywidgets as w\nw.interactive(lambda k: print(2 ** k), k=3)"],
    "course_rule": [
        "from amp_lab.widgets import smoke_test\nsmoke = smoke_test(k=3)\nsmoke.widget",
        "smoke.slider.value = 5\nprint(smoke.readout.value)",
    ],
    "warning": [
        "import os, warnings\n"
        f"if os.path.exists({WARN_FLAG!r}):\n"
        "    warnings.warn('new in this version')\n"
        "print('ok')"
    ],
}


def _write_case(folder: Path, name: str, sources: list[str]) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _execute(paths: list[Path]) -> None:
    """Save the notebooks executed, as `make notebooks` does (one run of the script for all of them)."""
    # nbclient has been seen to stall, rarely, while routing an Output widget's messages (one more
    # reason the course avoids Output widgets): give the execution a bound and one more try.
    for attempt in range(2):
        try:
            subprocess.run([sys.executable, str(ROOT / "scripts" / "execute_notebooks.py"), *map(str, paths)],
                           check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
            return
        except subprocess.TimeoutExpired:
            if attempt == 1:
                raise


@dataclass
class NbvalResult:
    """What one nbval run said about one notebook: each cell's outcome and the failure reports."""

    outcomes: list[str]  # "passed" or "failed", one per cell nbval checked
    report: str  # every failure's text, for the assertion messages

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(o == "passed" for o in self.outcomes)


def _nbval(paths: list[Path], junit: Path, env=None) -> dict[Path, NbvalResult]:
    """One nbval run (one pytest process, a kernel per notebook) over ``paths``; per-notebook results from
    its JUnit report (the xunit1 flavour names each cell's file)."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", *map(str, paths), "-p", "no:cacheprovider", "-q",
         f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml"), f"--junitxml={junit}",
         "-o", "junit_family=xunit1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL, env=env,
    )
    assert junit.exists(), f"nbval wrote no report (exit {run.returncode}):\n{run.stdout[-3000:]}{run.stderr[-2000:]}"
    results = {p.resolve(): NbvalResult([], "") for p in paths}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = (ROOT / case.get("file", "")).resolve()
        assert path in results, f"nbval reported on {path}, which it was not given"
        problems = [el for el in case if el.tag in ("failure", "error")]
        results[path].outcomes.append("failed" if problems else "passed")
        for el in problems:
            results[path].report += f"{case.get('name')}: {el.get('message', '')}\n{el.text or ''}\n"
    return results


@pytest.fixture(scope="module")
def nbval_cases(tmp_path_factory) -> dict[str, NbvalResult]:
    saved = tmp_path_factory.mktemp("saved")
    paths = {name: _write_case(saved, name, sources) for name, sources in CASES.items()}
    _execute(list(paths.values()))
    warned = tmp_path_factory.mktemp("warned")
    paths["warning_now_warns"] = Path(shutil.copy(paths["warning"], warned / "warning.ipynb"))
    (warned / WARN_FLAG).touch()
    results = _nbval(list(paths.values()), tmp_path_factory.mktemp("junit") / "nbval.xml")
    return {name: results[path.resolve()] for name, path in paths.items()}


@pytest.mark.timeout(600)
def test_interactive_cell_fails_but_course_widget_passes(nbval_cases):
    bad = nbval_cases["interactive"]
    assert not bad.passed and "Unexpected output fields" in bad.report, bad
    good = nbval_cases["course_rule"]
    assert good.passed and len(good.outcomes) == len(CASES["course_rule"]), good


@pytest.mark.timeout(600)
def test_new_stderr_warning_fails_a_cell(nbval_cases):
    assert nbval_cases["warning"].passed, nbval_cases["warning"]
    warned = nbval_cases["warning_now_warns"]
    assert not warned.passed and "new in this version" in warned.report, warned


def _make_variables(name):
    """The variables of one simulated machine, read from the Makefile (what `make test` really uses); a
    ``$(OTHER)`` in the definition brings in that variable's pairs."""
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith(name + " ") and ":=" in line:
            pairs: dict[str, str] = {}
            for word in line.split(":=", 1)[1].split():
                if word.startswith("$(") and word.endswith(")"):
                    pairs.update(_make_variables(word[2:-1]))
                else:
                    key, value = word.split("=", 1)
                    pairs[key] = value
            return pairs
    raise AssertionError(f"{name} is not defined in the Makefile")


_DIGESTS = """
import hashlib, json
import numpy as np
import torch
from amp_lab.claims import claim
rng = np.random.default_rng(0)  # numpy's generator: the same inputs on every machine
a = torch.from_numpy(rng.standard_normal((257, 300), dtype=np.float32))
b = torch.from_numpy(rng.standard_normal((300, 129), dtype=np.float32))
v = torch.from_numpy(rng.standard_normal(1_000_003, dtype=np.float32))
digest = lambda t: hashlib.sha1(t.numpy().tobytes()).hexdigest()[:12]
err = ((a @ b).double() - a.double() @ b.double()).abs().max().item()
print(json.dumps({"matmul": digest(a @ b), "softmax": digest(torch.softmax(a, dim=1)), "sum": digest(v.sum()),
                  "randn": digest(torch.randn(64, generator=torch.Generator().manual_seed(0))),
                  "claim": str(claim("a @ b agrees with float64 to float32 rounding", err < 1e-3, show=False)),
                  "capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}))
"""


def _digests(env_vars):
    env = dict(os.environ, **env_vars)
    out = subprocess.run([sys.executable, "-c", _DIGESTS], capture_output=True, text=True, check=True, env=env,
                         timeout=120, stdin=subprocess.DEVNULL).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_simulated_machines_change_kernels_and_claims_survive_them():
    """The machine matrix of `make test` (CONTRIBUTING.md, "Every machine tells its own truth").

    With the Makefile's variables, the other-kernels machine must really compute a matmul, a softmax and
    torch.randn differently, and the one-thread machine a large sum; the other machine of the matrix
    (both at once) all four; a claim's line stays the same.  If torch or MKL stopped honouring a variable,
    the matrix would silently test nothing: this test fails.
    """
    native = _digests({})
    kernels = _digests(_make_variables("KERNELS_ENV"))
    one = _digests(_make_variables("ONE_THREAD_ENV"))
    other = _digests(_make_variables("OTHER_ENV"))
    assert _make_variables("OTHER_ENV") == {**_make_variables("KERNELS_ENV"), **_make_variables("ONE_THREAD_ENV")}
    claims = {native["claim"], kernels["claim"], one["claim"], other["claim"]}
    assert claims == {"a @ b agrees with float64 to float32 rounding: yes"}
    import torch

    for machine in (kernels, other):
        if native["capability"] != "DEFAULT":  # on a CPU whose native kernels are the plain ones, nothing to change
            assert machine["capability"] == "DEFAULT"
            assert machine["softmax"] != native["softmax"] and machine["randn"] != native["randn"]
        if torch.backends.mkl.is_available():
            assert machine["matmul"] != native["matmul"]  # MKL_CBWR / MKL_ENABLE_INSTRUCTIONS: another GEMM
    if native["threads"] > 1:
        for machine in (one, other):
            assert machine["threads"] == 1 and machine["sum"] != native["sum"]
