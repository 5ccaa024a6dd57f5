"""Tables that fit (issue 16): every table a notebook shows fits a 1280×800 JupyterLab window with the
file browser open, JupyterLab's default layout, after Run All (the page the Run All test left: the stored
outputs' tables, with this machine's digits).

A table is an HTML ``<table>`` in an output area (``amp_lab.widgets.Table`` and any other HTML), or a text
output whose lines form aligned columns over three or more lines (``labdriver.text_table_blocks``).
An HTML table fails when its output area scrolls sideways (scrollWidth > clientWidth), the table is
wider than the area, or a cell breaks a word (a cell without spaces, such as ``1.17549e-38``, shown on
two lines: the issue's "never mid-word"); a text table fails when one of its lines, rendered on one line (white-space: pre),
is wider than the output area, i.e. when JupyterLab wraps it. Every table's output area is saved as
``artifacts/browser/tables/<notebook>-cell<N>-<k>.png``.
"""

from __future__ import annotations

import time

import pytest
from labdriver import ARTIFACTS, NOTEBOOKS, text_table_blocks

pytestmark = pytest.mark.timeout(240)

WINDOW = {"width": 1280, "height": 800}
SHOTS = ARTIFACTS / "tables"
# Sub-pixel rounding of widths measured by the browser.
SLACK_PX = 1.0

ALL_NOTEBOOKS = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
TABLE_NOTEBOOKS = sorted(
    p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_")
)


def tables_in(geometry: list[dict]) -> list[dict]:
    """The tables among the output areas, each with what makes it fail (``problem``, or None)."""
    found = []
    for o in geometry:
        if o["tables"]:
            width = max(o["scrollWidth"], o["tableWidth"])
            problems = []
            if width > o["clientWidth"] + SLACK_PX:
                problems.append(f"HTML table {width:.0f} px wide in an output area of {o['clientWidth']} px")
            broken = o.get("brokenWords") or []
            if broken:
                shown = ", ".join(repr(w) for w in broken[:4]) + (" ..." if len(broken) > 4 else "")
                problems.append(f"{len(broken)} cells break a word over two lines ({shown})")
            problem = "; ".join(problems) or None
            found.append({**o, "kind": "html", "width": width, "room": o["clientWidth"], "problem": problem})
        elif o["text"] is not None:
            lines = o["text"].split("\n")
            for start, end in text_table_blocks(o["text"]):
                widths = o["lineWidths"][start:end]
                widest = max(range(len(widths)), key=widths.__getitem__)
                width = widths[widest]
                problem = None
                if width > o["available"] + SLACK_PX:
                    problem = (
                        f"text table line {start + widest + 1} ({len(lines[start + widest])} characters) is "
                        f"{width:.0f} px wide, the output area {o['available']:.0f} px: it wraps"
                    )
                found.append(
                    {**o, "kind": "text", "lines": (start, end), "width": width, "room": o["available"],
                     "problem": problem}
                )
    return found


@pytest.mark.parametrize(
    # last of each notebook's tests: it reuses the page Run All left (the same tables as the stored outputs,
    # with this machine's digits), so no notebook is opened twice (about 7 s each)
    "notebook", [pytest.param(n, marks=pytest.mark.notebook(n, order=9)) for n in TABLE_NOTEBOOKS]
)
def test_tables_fit_1280_with_the_file_browser_open(notebook, runs):
    started = time.monotonic()
    nb, _ = runs.get(notebook)
    nb.page.set_viewport_size(dict(WINDOW))
    nb.viewport = dict(WINDOW)
    nb.show_file_browser()
    nb.wait_outputs_settled()
    opened = time.monotonic()
    stem = notebook.removesuffix(".ipynb")
    tables = tables_in(nb.output_geometry())
    failures = []
    shot_for: dict[tuple[int, int], str] = {}
    for t in tables:
        key = (t["cell"], t["index"])
        if key not in shot_for:
            suffix = f"-{t['index']}" if t["index"] else ""
            path = SHOTS / f"{stem}-cell{t['cell']}{suffix}.png"
            area = nb.cell(t["cell"]).locator(".jp-OutputArea-output").nth(t["index"])
            try:
                nb.screenshot_element(area, path)
                shot_for[key] = path.name
            except Exception as exc:  # the measurement stands without its picture
                shot_for[key] = f"(no screenshot: {type(exc).__name__})"
        if t["problem"]:
            failures.append(f"{notebook} cell {t['cell']}: {t['problem']} [{shot_for[key]}]")
    runs.timings.setdefault(f"stored/{notebook}", {}).update(
        view_s=round(opened - started, 1), tables=len(tables), tables_s=round(time.monotonic() - opened, 1)
    )
    assert tables or notebook.startswith("09_"), f"no table found in {notebook}: is the page rendered?"
    assert not failures, (
        f"{len(failures)} of the {len(tables)} tables in {notebook} do not fit a {WINDOW['width']}-px window "
        "with the file browser open (show them with amp_lab.widgets.Table, or narrow them):\n" + "\n".join(failures)
    )


def wrapped_lines(geometry: list[dict]) -> list[str]:
    """Every printed line (a text output's) wider than its output area: JupyterLab wraps it, mid-word."""
    found = []
    for o in geometry:
        if o["text"] is None:
            continue
        for i, (line, width) in enumerate(zip(o["text"].split("\n"), o["lineWidths"], strict=True)):
            if width > o["available"] + SLACK_PX:
                found.append(
                    f"cell {o['cell']}, line {i + 1}: {len(line)} characters, {width:.0f} px in "
                    f"{o['available']:.0f} px: {line[:70]!r}..."
                )
    return found


@pytest.mark.parametrize(
    "notebook", [pytest.param(n, marks=pytest.mark.notebook(n, order=10)) for n in ALL_NOTEBOOKS]
)
def test_no_printed_line_wraps_at_1280_with_the_file_browser_open(notebook, runs):
    """Printed prose, readouts and printed source fit the output area (text.wrap breaks readings between
    words at text.WIDTH): a line JupyterLab has to wrap breaks inside a word ("Ad|am", "7.29|6e+04")."""
    nb, _ = runs.get(notebook)
    nb.page.set_viewport_size(dict(WINDOW))
    nb.viewport = dict(WINDOW)
    nb.show_file_browser()
    nb.wait_outputs_settled()
    wrapped = wrapped_lines(nb.output_geometry())
    assert not wrapped, f"{len(wrapped)} printed lines of {notebook} wrap at 1280 px:\n" + "\n".join(wrapped)


def test_a_wrapping_line_is_caught():
    fits = {"cell": 1, "text": "short\nlines", "lineWidths": [40.0, 40.0], "available": 880.0}
    wraps = {"cell": 2, "text": "ok\n" + "Adam " * 40, "lineWidths": [16.0, 1600.0], "available": 880.0}
    html = {"cell": 3, "text": None, "lineWidths": None, "available": None}
    (only,) = wrapped_lines([fits, wraps, html])
    assert only.startswith("cell 2, line 2: 200 characters")


def test_text_table_detection():
    """What counts as a text table (and so is checked above): aligned columns over three or more lines."""
    table = "format  bits  largest\nfp32      32  3.4e+38\nfp16      16    65504\n"
    assert text_table_blocks(table) == [(0, 3)]
    ruled = "op       | dtype\n---------+--------\nmatmul   | bf16\nsoftmax  | fp32"
    assert text_table_blocks(ruled) == [(0, 4)]
    prose = "FP16 keeps 10 mantissa bits.\nIts largest value is 65504.\nBelow 6e-8 it flushes to zero."
    assert text_table_blocks(prose) == []
    two_lines = "a    b\nc    d"
    assert text_table_blocks(two_lines) == []
    unaligned = "x  1\nlonger name  2\nmid   3"
    assert text_table_blocks(unaligned) == []


def test_a_wide_table_is_caught():
    """The geometry check above can fail: a text table wider than its area, and an HTML table that
    scrolls, are both reported; ones that fit are not."""
    text = "name  value\n" + "\n".join(f"row{i}  {'x' * 200}" for i in range(3))
    narrow = {"cell": 1, "index": 0, "tables": 0, "tableWidth": 0, "scrollWidth": 900, "clientWidth": 900,
              "text": text, "lineWidths": [80.0, 1600.0, 1600.0, 1600.0], "available": 880.0}
    wide_html = {"cell": 2, "index": 0, "tables": 1, "tableWidth": 1200.0, "scrollWidth": 1200,
                 "clientWidth": 900, "text": None, "lineWidths": None, "available": None}
    fitting = {**wide_html, "cell": 3, "tableWidth": 600.0, "scrollWidth": 900}
    broken = {**fitting, "cell": 4, "brokenWords": ["1.17549e-38"]}
    found = tables_in([narrow, wide_html, fitting, broken])
    assert [(t["cell"], t["kind"], t["problem"] is not None) for t in found] == [
        (1, "text", True), (2, "html", True), (3, "html", False), (4, "html", True)
    ]
    assert "1.17549e-38" in found[3]["problem"]
