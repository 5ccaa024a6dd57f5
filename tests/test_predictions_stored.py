"""Predictions stay predictions in the notebooks as committed: the cell that asks stores a plain line (not
the widgets' repr), every stored output after it through its reveal is collapsed, and the stored reveal
asks for a prediction instead of giving the result (Run All commits nothing)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

from amp_lab.text import REASONS

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

_spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "scripts" / "execute_notebooks.py")
executor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(executor)


def _texts(cell) -> list[str]:
    found = []
    for out in cell.get("outputs", []):
        if "text" in out:
            found.append(out["text"])
        found.extend(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return found


def test_the_spans_are_each_prediction_through_its_reveal():
    cells = [nbformat.v4.new_markdown_cell("Predict first.")] + [
        nbformat.v4.new_code_cell(src)
        for src in (
            'guess = predict.choice("dtype?", ["a", "b"])\nguess',
            "x = compute()",
            "my_n = ...  # your prediction",
            "predict.reveal(guess, x)",
            'predict.reveal(my_n, 3, name="my_n")',
        )
    ]
    assert executor.prediction_spans(cells) == [(1, 4), (3, 5)]
    nb = nbformat.v4.new_notebook(cells=cells)
    for cell in cells[1:]:
        cell.outputs = [nbformat.v4.new_output("stream", text="out\n")]
    cells[1].metadata["jupyter"] = {"outputs_hidden": True}  # stale: the asking cell stays open
    executor.hide_until_revealed(nb)
    hidden = [c.metadata.get("jupyter", {}).get("outputs_hidden", False) for c in cells]
    assert hidden == [False, False, True, True, True, True]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_a_committed_notebook_hides_every_answer_until_its_reveal(path):
    nb = nbformat.read(path, as_version=4)
    spans = executor.prediction_spans(nb.cells)
    reveals = sum(c.source.count("predict.reveal(") for c in nb.cells if c.cell_type == "code")
    assert len(spans) == reveals
    asks = REASONS["predict.uncommitted"].split(":")[0]
    for i, j in spans:
        texts = _texts(nb.cells[i])
        assert not any("VBox(" in t or "ToggleButtons(" in t for t in texts), f"cell {i} stores a widget repr"
        if "predict.choice(" in nb.cells[i].source:
            assert any(t.startswith("Predict: ") for t in texts), f"cell {i}: no plain line asking to run it"
        for k in range(i + 1, j + 1):
            cell = nb.cells[k]
            if cell.cell_type == "code" and cell.outputs:
                assert cell.metadata.get("jupyter", {}).get("outputs_hidden") is True, (
                    f"cell {k} shows its output"
                )
        reveal = "".join(_texts(nb.cells[j]))
        assert asks in reveal, f"cell {j}: the stored reveal does not ask for a prediction"
        assert not re.search(r"\bwhy:|the result is|The result:", reveal), f"cell {j} stores the result"
