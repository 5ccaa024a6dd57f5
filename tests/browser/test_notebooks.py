"""Every course notebook, opened in JupyterLab in Chromium: Run All Cells must finish with every
code cell executed and no error in the page.  A screenshot of each lands in artifacts/browser/."""

from __future__ import annotations

import pytest
from labdriver import NOTEBOOKS

# Opening and running a notebook (once per notebook) plus the drive; a hung page fails, not blocks.
pytestmark = pytest.mark.timeout(360)

NOTEBOOK_NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def test_settings_overrides_reach_the_server(lab_server):
    """The test server renders every cell (windowing "none"): the widget tests rely on it."""
    tracker = lab_server.api("GET", "/lab/api/settings/@jupyterlab/notebook-extension:tracker")
    assert tracker["settings"]["windowingMode"] == "none"
    notifications = lab_server.api("GET", "/lab/api/settings/@jupyterlab/apputils-extension:notification")
    assert notifications["settings"]["fetchNews"] == "false"


@pytest.mark.parametrize(
    "notebook", [pytest.param(n, marks=pytest.mark.notebook(n, order=0)) for n in NOTEBOOK_NAMES]
)
def test_run_all_cells(notebook, runs):
    page, report = runs.get(notebook)
    attached = page.cell_state()["cells"]
    assert attached == page.expected_cells, f"only {attached} of {page.expected_cells} cells are in the page"
    errors = report.errors()
    assert not errors, f"{notebook} shows errors after Run All Cells:\n" + "\n".join(errors)
    assert not report.unexecuted(), (
        f"{notebook}: code cells {report.unexecuted()} did not run (prompts: {report.prompts})"
    )
    assert report.code_cells > 0


FAILING = "zz_run_all_must_catch_this.ipynb"


@pytest.mark.notebook(FAILING)
def test_run_all_check_catches_an_error(runs, lab_server):
    """The check above can fail: a notebook whose second cell raises is reported, and the cell
    after it counts as not executed (Run All stops at the error)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "name": "python3",
    }
    nb.cells = [
        nbformat.v4.new_code_cell('print("fine")'),
        nbformat.v4.new_code_cell("1 / 0"),
        nbformat.v4.new_code_cell('print("never runs")'),
    ]
    nbformat.write(nb, str(lab_server.root / FAILING))
    _, report = runs.get(FAILING)
    errors = report.errors()
    assert len(errors) == 1 and "ZeroDivisionError" in errors[0], errors
    assert report.unexecuted() == [2], report.prompts
