"""Re-execute course notebooks in place on the CPU so their stored outputs are current.

Used by ``make notebooks``.  Every notebook runs top to bottom in a fresh kernel of this
environment with ``AMP_LAB_DEVICE=cpu``, widget state is stored (so widgets render on
GitHub and in nbviewer), and per-cell timing metadata is not recorded (it would change on
every run).  Usage: ``python scripts/execute_notebooks.py [NOTEBOOK ...]`` (default: all).

On a GPU machine, ``--device cuda --out DIR`` runs the same notebooks on CUDA and writes the executed
copies to ``DIR`` instead (the committed notebooks keep their CPU outputs, which nbval compares).  Every
notebook is attempted; a failing one is reported with the cell that failed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
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
