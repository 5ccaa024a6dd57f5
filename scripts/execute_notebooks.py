"""Re-execute course notebooks in place on the CPU so their stored outputs are current.

Used by ``make notebooks``.  Every notebook runs top to bottom in a fresh kernel of this
environment with ``AMP_LAB_DEVICE=cpu``, widget state is stored (so widgets render on
GitHub and in nbviewer), and per-cell timing metadata is not recorded (it would change on
every run).  Usage: ``python scripts/execute_notebooks.py [NOTEBOOK ...]`` (default: all).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def notebooks(args: list[str]) -> list[Path]:
    if args:
        return [Path(a).resolve() for a in args]
    found = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    return [p for p in found if ".ipynb_checkpoints" not in p.parts]


def execute(path: Path) -> float:
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
    client.execute()
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    os.environ["AMP_LAB_DEVICE"] = "cpu"
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for path in notebooks(argv):
        print(f"executing {path} ...", flush=True)
        seconds = execute(path)
        print(f"  done in {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
