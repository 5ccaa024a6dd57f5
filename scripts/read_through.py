"""Estimate how long a learner needs for each course notebook, from the notebook itself.

The estimate is a sum of components, each counted in the notebook and converted to minutes with one of the
constants below (each stated with its reason, so a reader can disagree with a number, not a formula):

- prose: words of markdown (links count their text, not their address; HTML tags are dropped) at a
  technical reading speed;
- code: non-blank lines of code cells (and of code blocks in markdown) read, not typed;
- outputs: lines of text output, words of HTML output, and figures, each at a scanning rate; a long
  output counts at most ``OUTPUT_LINES_CAP`` lines (a learner scans a 100-row table, not reads it);
- run: the time the cells take to execute, from the timing metadata stored in the notebook
  (``metadata.execution``, written by nbclient/JupyterLab with timing recorded), or measured by
  executing a copy with nbclient when asked (``--execute``); "none" when neither is available;
- allowances: per exercise (a markdown cell starting ``**Exercise N``), per predict moment (the larger of
  the counts of ``predict.choice(`` and ``predict.reveal(`` calls), and per interactive widget shown in a
  stored output (a slider, text box, dropdown, button... not a prediction's buttons, not a progress bar).

Usage::

    python scripts/read_through.py                     # every notebooks/NN_*.ipynb (not the solutions)
    python scripts/read_through.py notebooks/03_*.ipynb --execute
    python scripts/read_through.py --json times.json   # also write the numbers

The coordinator sets the minutes in ``amp_lab/course.py``, README and the guide from the "total" column.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# ---- the model's constants, each with its reason ---------------------------------------------------------
READING_WPM = 150  # technical prose with formulas, read to understand: about 60% of the ~240 wpm of plain prose
CODE_LINES_PER_MIN = 15  # a code line read to see what it does, not typed; plotting and printing lines skimmed: 4 s
OUTPUT_LINES_PER_MIN = 20  # a line of printed numbers scanned for the point the text makes: about 3 s
OUTPUT_WPM = 200  # words in an HTML output (a table, a card) are labels and numbers, scanned faster than prose
OUTPUT_LINES_CAP = 30  # of a long output a learner scans the rows the text points at, not all of them
FIGURE_MIN = 0.5  # a plot: find the axes, the curve or band the text talks about, the point it makes
EXERCISE_MIN = 4.0  # read the task, think, type an answer, run the check, one retry after a hint
PREDICT_MIN = 1.5  # read the question, commit a prediction, run the reveal and read why
WIDGET_MIN = 2.0  # move a slider / type values / press the button a few times and read what changes
RUN_OVERHEAD_S = 0.0  # stored execution times already include the kernel's work; nothing added per cell

# Widget models a learner interacts with (ipywidgets' model names); layout, style, HTML and progress are not.
INTERACTIVE_MODELS = re.compile(
    r"^(Int|Float|FloatLog)(Slider|RangeSlider|Text)Model$|^(Text|Textarea|Dropdown|Button|ToggleButton|"
    r"ToggleButtons|Checkbox|RadioButtons|Select|SelectMultiple|SelectionSlider|SelectionRangeSlider|"
    r"BoundedIntText|BoundedFloatText|Play|Combobox)Model$"
)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
EXERCISE = re.compile(r"^\s*\*\*Exercise\s+\d+")
PREDICT_CHOICE = re.compile(r"\bpredict\.choice\(")
PREDICT_REVEAL = re.compile(r"\bpredict\.reveal\(")
WORD = re.compile(r"[A-Za-z0-9_]+(?:['’.-][A-Za-z0-9_]+)*")
FENCE = re.compile(r"^(```|~~~)")


@dataclass
class Estimate:
    notebook: str
    words: int
    code_lines: int
    output_lines: int
    output_words: int
    figures: int
    run_seconds: float | None
    run_source: str  # "stored", "measured" or "none"
    exercises: int
    predicts: int
    widgets: int

    # minutes per component
    @property
    def prose_min(self) -> float:
        return self.words / READING_WPM

    @property
    def code_min(self) -> float:
        return self.code_lines / CODE_LINES_PER_MIN

    @property
    def output_min(self) -> float:
        return self.output_lines / OUTPUT_LINES_PER_MIN + self.output_words / OUTPUT_WPM + self.figures * FIGURE_MIN

    @property
    def run_min(self) -> float:
        return (self.run_seconds or 0.0) / 60

    @property
    def allowance_min(self) -> float:
        return self.exercises * EXERCISE_MIN + self.predicts * PREDICT_MIN + self.widgets * WIDGET_MIN

    @property
    def total_min(self) -> float:
        return self.prose_min + self.code_min + self.output_min + self.run_min + self.allowance_min

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("prose_min", "code_min", "output_min", "run_min", "allowance_min", "total_min"):
            d[k] = round(getattr(self, k), 2)
        d["total_rounded_min"] = round_to_5(self.total_min)
        return d


def round_to_5(minutes: float) -> int:
    """The minutes a course page states: the estimate rounded up to the next multiple of 5 (at least 5)."""
    return max(5, int(math.ceil(minutes / 5 - 1e-9)) * 5)


# ---- counting ---------------------------------------------------------------------------------------------


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _text(data) -> str:
    return "".join(data) if isinstance(data, list) else str(data)


def strip_markup(markdown: str) -> str:
    """The words a reader reads in a markdown text: link text without the address, no HTML tags, no
    emphasis or heading marks."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", markdown)  # images: their alt text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", " ", text)
    return html.unescape(text)


def count_words(text: str) -> int:
    return len(WORD.findall(text))


def markdown_counts(markdown: str) -> tuple[int, int]:
    """(words of prose, lines of code in fenced blocks) of one markdown cell."""
    prose, code, in_fence = [], 0, False
    for line in markdown.splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if in_fence:
            code += bool(line.strip())
        else:
            prose.append(line)
    return count_words(strip_markup("\n".join(prose))), code


def code_line_count(source: str) -> int:
    """Non-blank lines a learner reads; nbval's markers are test plumbing, not course code."""
    return sum(1 for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("# NBVAL_"))


def _interactive_models(nb: dict) -> dict[str, bool]:
    """model id -> whether it or a widget inside it is interactive, from the stored widget state."""
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    memo: dict[str, bool] = {}

    def interactive(mid: str, depth: int = 0) -> bool:
        if mid in memo:
            return memo[mid]
        model = state.get(mid)
        if model is None or depth > 50:
            return False
        memo[mid] = False  # a cycle counts as not interactive
        found = bool(INTERACTIVE_MODELS.match(model.get("model_name", "")))
        children = model.get("state", {}).get("children") or []
        for child in children:
            if isinstance(child, str) and child.startswith("IPY_MODEL_"):
                found = interactive(child[len("IPY_MODEL_") :], depth + 1) or found
        memo[mid] = found
        return found

    return {mid: interactive(mid) for mid in state}


def output_counts(nb: dict) -> tuple[int, int, int, int]:
    """(text lines, HTML words, figures, interactive widgets) of the stored outputs."""
    lines = words = figures = widgets = 0
    interactive = _interactive_models(nb)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        is_prediction = bool(PREDICT_CHOICE.search(_source(cell)))
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "stream":
                lines += min(len(_text(out.get("text", "")).splitlines()), OUTPUT_LINES_CAP)
                continue
            if kind == "error":
                lines += min(len(out.get("traceback", [])), OUTPUT_LINES_CAP)
                continue
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                mid = data[WIDGET_VIEW].get("model_id", "")
                if interactive.get(mid) and not is_prediction:
                    widgets += 1
                continue  # its text/plain is a fallback repr nobody sees
            if any(k.startswith("image/") for k in data):
                figures += 1
            elif "text/html" in data:
                shown = strip_markup(_text(data["text/html"]))
                words += count_words(" ".join(shown.split()[: OUTPUT_LINES_CAP * 12]))
            elif "text/markdown" in data:
                words += count_words(strip_markup(_text(data["text/markdown"])))
            elif "text/plain" in data:
                lines += min(len(_text(data["text/plain"]).splitlines()), OUTPUT_LINES_CAP)
    return lines, words, figures, widgets


def _stamp(value) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def stored_run_seconds(nb: dict) -> float | None:
    """Sum of the cells' execution times recorded in ``metadata.execution`` (None if no cell has them)."""
    total, found = 0.0, False
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        ex = cell.get("metadata", {}).get("execution", {})
        start = _stamp(ex.get("iopub.execute_input") or ex.get("shell.execute_reply.started") or "")
        end = _stamp(ex.get("shell.execute_reply") or "")
        if start is not None and end is not None and end >= start:
            total += (end - start).total_seconds() + RUN_OVERHEAD_S
            found = True
    return total if found else None


def measure_run_seconds(path: Path, *, timeout: int = 900) -> float:
    """Execute a copy of the notebook with nbclient, timing recorded; the notebook itself is untouched."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
        record_timing=True,
    )
    client.execute()
    seconds = stored_run_seconds(nb)
    return 0.0 if seconds is None else seconds


def estimate(nb: dict, name: str, *, run_seconds: float | None = None, run_source: str | None = None) -> Estimate:
    """Count one notebook (a dict as read from .ipynb JSON).  ``run_seconds`` overrides the stored timing."""
    words = code = exercises = choices = reveals = 0
    for cell in nb.get("cells", []):
        src = _source(cell)
        if cell.get("cell_type") == "markdown":
            w, c = markdown_counts(src)
            words, code = words + w, code + c
            exercises += bool(EXERCISE.match(src))
        elif cell.get("cell_type") == "code":
            code += code_line_count(src)
            choices += len(PREDICT_CHOICE.findall(src))
            reveals += len(PREDICT_REVEAL.findall(src))
    out_lines, out_words, figures, widgets = output_counts(nb)
    if run_seconds is None:
        run_seconds = stored_run_seconds(nb)
        run_source = "stored" if run_seconds is not None else "none"
    return Estimate(
        notebook=name,
        words=words,
        code_lines=code,
        output_lines=out_lines,
        output_words=out_words,
        figures=figures,
        run_seconds=run_seconds,
        run_source=run_source or "measured",
        exercises=exercises,
        predicts=max(choices, reveals),
        widgets=widgets,
    )


# ---- report -----------------------------------------------------------------------------------------------

COLUMNS = [
    ("notebook", "notebook"),
    ("words", "words"),
    ("prose", "prose_min"),
    ("code ln", "code_lines"),
    ("code", "code_min"),
    ("outputs", "output_min"),
    ("run", "run_min"),
    ("ex", "exercises"),
    ("predict", "predicts"),
    ("widgets", "widgets"),
    ("allow", "allowance_min"),
    ("total", "total_min"),
    ("stated", "total_rounded_min"),
]


def table(estimates: list[Estimate]) -> str:
    rows = []
    for e in estimates:
        d = e.as_dict()
        row = []
        for _, key in COLUMNS:
            v = d[key]
            if key == "run_min" and e.run_source == "none":
                row.append("n/a")
            elif isinstance(v, float):
                row.append(f"{v:.1f}")
            else:
                row.append(str(v))
        rows.append(row)
    header = [h for h, _ in COLUMNS]
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))] if rows else []
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*header)] + [fmt.format(*r) for r in rows]
    return "\n".join(lines)


def constants_text() -> str:
    return (
        f"model: prose {READING_WPM} words/min, code {CODE_LINES_PER_MIN} lines/min, outputs "
        f"{OUTPUT_LINES_PER_MIN} lines/min + {OUTPUT_WPM} words/min (at most {OUTPUT_LINES_CAP} lines each) + "
        f"{FIGURE_MIN} min per figure, run time as stored or measured, {EXERCISE_MIN} min per exercise, "
        f"{PREDICT_MIN} min per prediction, {WIDGET_MIN} min per interactive widget; all columns in minutes "
        f"but words, code lines and counts; 'stated' = total rounded up to 5 min"
    )


def default_notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/NN_*.ipynb")
    parser.add_argument("--execute", action="store_true", help="measure run time by executing a copy (nbclient)")
    parser.add_argument("--json", type=Path, help="also write the estimates to this JSON file")
    args = parser.parse_args(argv)
    paths = args.notebooks or default_notebooks()
    estimates = []
    for path in paths:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        run, source = None, None
        if args.execute:
            print(f"executing {path.name} ...", file=sys.stderr, flush=True)
            started = time.perf_counter()
            run, source = measure_run_seconds(Path(path)), "measured"
            print(f"  {run:.1f} s of cell time ({time.perf_counter() - started:.0f} s with kernel start)",
                  file=sys.stderr)
        estimates.append(estimate(nb, Path(path).stem, run_seconds=run, run_source=source))
    print(table(estimates))
    print(constants_text())
    if any(e.run_source == "none" for e in estimates):
        print("run n/a: no timing stored in the notebook; --execute measures it (counted as 0 in the total)")
    if args.json:
        args.json.write_text(json.dumps([e.as_dict() for e in estimates], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
