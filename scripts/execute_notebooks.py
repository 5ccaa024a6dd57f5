"""Re-execute course notebooks in place on the CPU so their stored outputs are current.

Used by ``make notebooks``.  Every notebook runs top to bottom in a fresh kernel of this
environment with ``AMP_LAB_DEVICE=cpu``, widget state is stored (so widgets render on
GitHub and in nbviewer), per-cell timing metadata is not recorded (it would change on
every run), and the outputs from each prediction through its reveal are stored collapsed.  Usage: ``python scripts/execute_notebooks.py [NOTEBOOK ...]`` (default: all).

On a GPU machine, ``--device cuda --out DIR`` runs the same notebooks on CUDA and writes the executed
copies to ``DIR`` instead (the committed notebooks keep their CPU outputs, which nbval compares).  Every
notebook is attempted; a failing one is reported with the cell that failed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent


def notebooks(args: list[str]) -> list[Path]:
    if args:
        return [Path(a).resolve() for a in args]
    found = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    return [p for p in found if ".ipynb_checkpoints" not in p.parts]


REVEAL = re.compile(r"predict\.reveal\(\s*(\w+)")


def prediction_spans(cells) -> list[tuple[int, int]]:
    """``(i, j)`` for each ``predict.reveal(name, ...)`` in cell ``j``: ``i`` is the last code cell before it
    that assigns ``name`` (the prediction: ``name = predict.choice(...)``, or ``name = ...`` for a number)."""
    spans = []
    for j, cell in enumerate(cells):
        found = REVEAL.search(cell.source) if cell.cell_type == "code" else None
        if found:
            assigns = re.compile(rf"^{found.group(1)}\s*=", re.M)
            i = max(k for k in range(j) if cells[k].cell_type == "code" and assigns.search(cells[k].source))
            spans.append((i, j))
    return spans


def hide_until_revealed(nb) -> None:
    """Collapse the stored outputs from each prediction through its reveal (the cell that asks keeps
    its output), so a notebook opened as committed does not show the answer before the learner commits;
    JupyterLab expands a collapsed output when its cell runs."""
    for cell in nb.cells:
        cell.metadata.get("jupyter", {}).pop("outputs_hidden", None)
        if cell.metadata.get("jupyter") == {}:
            del cell.metadata["jupyter"]
    for i, j in prediction_spans(nb.cells):
        for cell in nb.cells[i + 1 : j + 1]:
            if cell.cell_type == "code" and cell.outputs:
                cell.metadata.setdefault("jupyter", {})["outputs_hidden"] = True


def execute(path: Path, out: Path | None = None) -> float:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    client = NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,
    )
    start = time.perf_counter()
    try:
        client.execute()
    finally:  # a copy elsewhere is written even when a cell failed: it shows where; in place, only on success
        hide_until_revealed(nb)
        if out is not None:
            nbformat.write(nb, out / path.name)
    if out is None:
        nbformat.write(nb, path)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to execute (default: every notebook)")
    parser.add_argument("--device", default="cpu", help="AMP_LAB_DEVICE for the kernels (default: cpu)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write executed copies here instead of in place (required unless --device cpu)")
    args = parser.parse_args(argv)
    if args.device != "cpu" and args.out is None:
        parser.error("--out is required with --device other than cpu: the committed notebooks keep CPU outputs")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    os.environ["AMP_LAB_DEVICE"] = args.device
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    failed = []
    for path in notebooks(args.notebooks):
        print(f"executing {path} on {args.device} ...", flush=True)
        try:
            seconds = execute(path, args.out)
        except CellExecutionError as exc:
            failed.append(path.name)
            print(f"  FAILED: {str(exc)[-2000:]}", flush=True)
            continue
        print(f"  done in {seconds:.1f} s", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
