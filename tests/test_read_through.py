"""scripts/read_through.py counts what a learner reads, runs and does in a notebook: checked on a small
synthetic notebook whose every count is known."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("read_through", ROOT / "scripts" / "read_through.py")
rt = importlib.util.module_from_spec(_spec)
sys.modules["read_through"] = rt
_spec.loader.exec_module(rt)

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _model(name, **state):
    return {"model_name": name, "model_module": "@jupyter-widgets/controls", "state": state}


def synthetic() -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        # 7 words: "A", "Title", "See", "the", "docs", "for", "more"; the URL and the tag are not read.
        nbformat.v4.new_markdown_cell("# A Title\n\nSee <b>the</b> [docs](https://example.org/a/b) for more."),
        # 4 prose words + a fenced block of 2 code lines (the blank line in it is not counted).
        nbformat.v4.new_markdown_cell("Run this code first:\n\n```python\nx = 1\n\ny = 2\n```"),
        # 3 code lines: the NBVAL marker and blank lines are not.
        nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nimport torch\n\nprint(1)\nprint(2)\n"),
        # A prediction: its buttons are a widget, but not one a learner "plays with".
        nbformat.v4.new_code_cell('guess = predict.choice("Which?", ["a", "b"])\nguess'),
        nbformat.v4.new_code_cell('predict.reveal(guess, "a")\nmy_guess = None\npredict.reveal(my_guess, 3)'),
        nbformat.v4.new_markdown_cell("## Exercises"),
        nbformat.v4.new_markdown_cell("**Exercise 1 (warm-up).** Two words."),
        nbformat.v4.new_markdown_cell("Not an **Exercise 2** heading: it does not start the cell."),
        nbformat.v4.new_markdown_cell("**Exercise 2.** Another."),
        nbformat.v4.new_code_cell("explorer"),
        nbformat.v4.new_code_cell("bar"),
    ]
    code = [c for c in nb.cells if c.cell_type == "code"]
    # Outputs: 3 stream lines, a 100-line text table (capped), an HTML card of 4 words, a figure.
    code[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="1\n2\n3\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "\n".join(f"row {i}" for i in range(100))},
                               execution_count=1),
        nbformat.v4.new_output("display_data", data={"text/html": "<div><b>speedup</b> 1.5x faster here</div>",
                                                     "text/plain": "<Card>"}),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}),
    ]
    code[1].outputs = [nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "pred"},
                                                                      "text/plain": "VBox()"})]
    code[3].outputs = [nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "box"},
                                                                      "text/plain": "VBox()"})]
    code[4].outputs = [nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "progress"},
                                                                      "text/plain": "FloatProgress()"})]
    nb.metadata["widgets"] = {
        WIDGET_STATE: {
            "state": {
                "pred": _model("VBoxModel", children=["IPY_MODEL_predhtml", "IPY_MODEL_predbuttons"]),
                "predhtml": _model("HTMLModel"),
                "predbuttons": _model("ToggleButtonsModel"),
                # The explorer: a box holding a box holding a slider (interactive through its children).
                "box": _model("VBoxModel", children=["IPY_MODEL_inner", "IPY_MODEL_html"]),
                "inner": _model("HBoxModel", children=["IPY_MODEL_slider"]),
                "slider": _model("FloatLogSliderModel"),
                "html": _model("HTMLModel"),
                "progress": _model("FloatProgressModel"),
            },
            "version_major": 2,
            "version_minor": 0,
        }
    }
    # Stored timing on two cells: 1.5 s and 2.5 s.
    code[0].metadata["execution"] = {"iopub.execute_input": "2026-11-30T10:00:00.000000Z",
                                     "shell.execute_reply": "2026-11-30T10:00:01.500000Z"}
    code[3].metadata["execution"] = {"iopub.execute_input": "2026-11-30T10:00:05Z",
                                     "shell.execute_reply": "2026-11-30T10:00:07.5Z"}
    return json.loads(nbformat.writes(nb))


def test_counts_of_a_synthetic_notebook():
    e = rt.estimate(synthetic(), "synthetic")
    # title cell 7, "Run this code first" 4, "Exercises" 1, "Exercise 1 (warm-up) Two words" 5 ("warm-up" is
    # one word), the "Not an ..." cell 11, "Exercise 2 Another" 3
    md_words = 7 + 4 + 1 + 5 + 11 + 3
    assert e.words == md_words, e
    assert e.code_lines == 2 + 3 + 2 + 3 + 1 + 1
    assert e.output_lines == 3 + rt.OUTPUT_LINES_CAP
    assert e.output_words == 4  # "speedup 1.5x faster here": "1.5x" is one word
    assert e.figures == 1
    assert e.widgets == 1, "the explorer counts; the prediction's buttons and the progress bar do not"
    assert e.exercises == 2
    assert e.predicts == 2, "one choice, two reveals: two moments"
    assert e.run_seconds == pytest.approx(4.0) and e.run_source == "stored"


def test_total_is_the_sum_of_the_stated_model():
    e = rt.estimate(synthetic(), "synthetic")
    want = (
        e.words / rt.READING_WPM
        + e.code_lines / rt.CODE_LINES_PER_MIN
        + e.output_lines / rt.OUTPUT_LINES_PER_MIN
        + e.output_words / rt.OUTPUT_WPM
        + e.figures * rt.FIGURE_MIN
        + 4.0 / 60
        + 2 * rt.EXERCISE_MIN
        + 2 * rt.PREDICT_MIN
        + 1 * rt.WIDGET_MIN
    )
    assert e.total_min == pytest.approx(want)
    assert e.as_dict()["total_rounded_min"] == rt.round_to_5(want)


def test_no_timing_and_a_measured_timing():
    nb = synthetic()
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    e = rt.estimate(nb, "x")
    assert e.run_seconds is None and e.run_source == "none" and e.run_min == 0
    m = rt.estimate(nb, "x", run_seconds=90.0, run_source="measured")
    assert m.run_min == pytest.approx(1.5) and m.total_min == pytest.approx(e.total_min + 1.5)


@pytest.mark.parametrize("minutes, stated", [(0.1, 5), (5.0, 5), (5.01, 10), (23.9, 25), (40.0, 40)])
def test_round_to_5(minutes, stated):
    assert rt.round_to_5(minutes) == stated


def test_main_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "03_synthetic.ipynb"
    path.write_text(json.dumps(synthetic()))
    out_json = tmp_path / "times.json"
    assert rt.main([str(path), "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    header, row = printed.splitlines()[:2]
    assert header.split()[0] == "notebook" and header.split()[-1] == "stated"
    assert row.split()[0] == "03_synthetic"
    [saved] = json.loads(out_json.read_text())
    assert saved["notebook"] == "03_synthetic" and saved["exercises"] == 2
    assert row.split()[-1] == str(saved["total_rounded_min"])
    assert f"{rt.READING_WPM} words/min" in printed
