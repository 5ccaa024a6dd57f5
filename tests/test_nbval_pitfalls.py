"""The nbval pitfalls the course solves deliberately (CONTRIBUTING.md, "Notebook outputs and nbval").

1. An ``ipywidgets.interactive`` cell saved by the notebook executor fails nbval on re-run ("Unexpected
   output fields"): the executor files the callback's output inside the widget, nbval's kernel as a
   plain cell output.  The course's rule (callbacks set widget values; plots go through FigurePane)
   gives the same outputs both ways.
2. A stderr warning that appears after the notebook was saved fails the cell.

Each case executes a tiny notebook with scripts/execute_notebooks.py, then runs nbval on it.

3. The machine matrix: `make test` re-runs nbval with the variables of two simulated machines (other
   kernels; one thread), which must really change what torch computes, or the matrix tests nothing.
"""

import json
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


def _make_variables(name):
    """The variables of one simulated machine, read from the Makefile (what `make test` really uses)."""
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith(name) and ":=" in line:
            return dict(pair.split("=", 1) for pair in line.split(":=", 1)[1].split())
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
    torch.randn differently, and the one-thread machine a large sum; a claim's line stays the same.  If
    torch or MKL stopped honouring a variable, the matrix would silently test nothing: this test fails.
    """
    native = _digests({})
    kernels = _digests(_make_variables("KERNELS_ENV"))
    one = _digests(_make_variables("ONE_THREAD_ENV"))
    assert native["claim"] == kernels["claim"] == one["claim"] == "a @ b agrees with float64 to float32 rounding: yes"
    if native["capability"] != "DEFAULT":  # on a CPU whose native kernels are the plain ones, nothing to change
        assert kernels["capability"] == "DEFAULT"
        assert kernels["softmax"] != native["softmax"] and kernels["randn"] != native["randn"]
    import torch

    if torch.backends.mkl.is_available():
        assert kernels["matmul"] != native["matmul"]  # MKL_CBWR / MKL_ENABLE_INSTRUCTIONS: another GEMM
    if native["threads"] > 1:
        assert one["threads"] == 1 and one["sum"] != native["sum"]
