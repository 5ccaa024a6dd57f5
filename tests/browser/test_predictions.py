"""A prediction as a learner meets it (issue 24): notebook 01 opened as committed (stored outputs,
nothing run) shows the question and its options, not the widgets' repr and not the answer; every
stored output from the question through its reveal is collapsed. Then the learner runs the notebook up
to the question, clicks an option, runs the cells through the reveal and reads the comparison.

Which cells ask and reveal comes from ``scripts/execute_notebooks.py``'s ``prediction_spans`` (the
rule that collapsed them), and the expected verdict from the option clicked: nothing is copied here."""

from __future__ import annotations

import importlib.util
import re

import pytest
from labdriver import ARTIFACTS, NOTEBOOKS, REPO

pytestmark = pytest.mark.timeout(360)

NOTEBOOK = "01_float_formats.ipynb"

_spec = importlib.util.spec_from_file_location("execute_notebooks", REPO / "scripts" / "execute_notebooks.py")
executor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(executor)


def first_choice_span(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for i, j in executor.prediction_spans(nb.cells):
        if "predict.choice(" in nb.cells[i].source:
            return nb, i, j
    return nb, None, None


@pytest.mark.notebook(f"stored/{NOTEBOOK}", order=0)
def test_a_prediction_opened_as_committed_gives_nothing_away_then_compares(runs):
    from playwright.sync_api import expect

    nb_file, ask, reveal = first_choice_span(NOTEBOOKS / NOTEBOOK)
    if ask is None:
        pytest.skip(f"{NOTEBOOK} has no predict.choice with a reveal")
    page = runs.view(NOTEBOOK)
    # Opened: the question and its options as a plain line (an untrusted notebook renders no widgets),
    # or the buttons themselves where the stored widget state renders; never the widgets' repr.
    shown = page.output_text(ask)
    buttons = page.cell(ask).locator(".amp-lab-prediction button")
    assert "VBox(" not in shown and "ToggleButtons(" not in shown, shown
    assert buttons.count() >= 2 or (shown.startswith("Predict: ") and "run this cell" in shown), shown
    # Everything stored after it, through the reveal, is collapsed: none of it is on screen.
    for k in range(ask + 1, reveal + 1):
        cell = nb_file.cells[k]
        if cell.cell_type != "code" or not cell.outputs:
            continue
        outputs = page.cell(k).locator(".jp-OutputArea-output")
        visible = [outputs.nth(n).is_visible() for n in range(outputs.count())]
        assert not any(visible), f"cell {k}'s stored output is on screen before the learner predicts"
    page.screenshot_element(page.cell(ask), ARTIFACTS / "01_float_formats-prediction-as-committed.png")

    # The learner clears the stored outputs (Edit > Clear Outputs of All Cells: its prompts start again
    # from [1], as a fresh kernel's do), runs the notebook down to the question, clicks an option...
    page.wait_kernel_ready()
    page.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Edit$")).click()
    page.page.locator(".lm-Menu-item[data-command='editmenu:clear-all']").click()
    expect(page.cell(ask).locator(".jp-OutputArea-output")).to_have_count(0, timeout=10_000)
    for k in range(ask + 1):
        if nb_file.cells[k].cell_type == "code":
            page.run_cell(k, timeout=120)
    box = page.cell(ask).locator(".amp-lab-prediction")
    box.scroll_into_view_if_needed()
    buttons = box.locator("button")
    assert buttons.count() >= 2, f"cell {ask}: the prediction shows {buttons.count()} buttons once run"
    option = buttons.last
    label = option.inner_text().strip()
    option.click()
    expect(option).to_have_class(re.compile(r"mod-active"), timeout=10_000)
    # ... and runs the cells through the reveal: each expands, and the reveal compares.
    for k in range(ask + 1, reveal + 1):
        if nb_file.cells[k].cell_type == "code":
            page.run_cell(k, timeout=120)
    outputs = page.cell(reveal).locator(".jp-OutputArea-output")
    expect(outputs.first).to_be_visible(timeout=10_000)
    text = page.output_text(reveal)
    assert re.match(rf"[✓✗] you predicted {re.escape(label)}[,;] ", text.lstrip()), text
    assert "why:" in text, text  # the explanation comes with the comparison
    expect(option).to_be_disabled(timeout=10_000)
    page.screenshot_element(page.cell(reveal), ARTIFACTS / "01_float_formats-prediction-revealed.png")
