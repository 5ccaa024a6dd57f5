"""Reference results from real GPUs (``docs/results/``, written by ``scripts/gpu_check.py``), read back
beside the learner's own sweep.  (``06_timing_race``)"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from ._checks import ArgumentTypeError, check_instance
from .dtypes import dtype_name
from .sweeps import SweepResult, check_sweep
from .widgets import table_html

RESULTS_SCHEMA = "amp-lab/gpu-check/1"
RESULTS_DIR = Path(__file__).resolve().parent.parent / "docs" / "results"


def load_reference_results(directory=None) -> list[dict]:
    """Committed GPU check results (``docs/results/*.json``), newest first; [] when there are none.
    ``directory`` (default: the course's ``docs/results``, which may be missing) must be a folder that exists."""
    if directory is None:
        directory = RESULTS_DIR
        if not directory.is_dir():
            return []
    elif not isinstance(directory, (str, os.PathLike)):
        raise ArgumentTypeError(
            f"directory must be a folder path (a string or pathlib.Path) or None, got {type(directory).__name__}: "
            f"{directory!r:.80}"
        )
    elif not Path(directory).is_dir():
        what = "is a file, not a folder" if Path(directory).exists() else "does not exist"
        raise ValueError(
            f"directory={str(directory)!r} {what}; give the folder that holds the *.json results"
        )
    found = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == RESULTS_SCHEMA:
            data["_file"] = path.name
            found.append(data)
    found.sort(key=lambda d: str(d.get("date", "")), reverse=True)
    return found


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def describe_reference(reference: dict) -> str:
    """One line naming where a reference file was measured: GPU, driver, CUDA, torch, date."""
    check_instance("reference", reference, dict, "a reference result dict (from load_reference_results())")
    m = reference.get("machine", {})
    if not isinstance(m, dict):
        raise ValueError(f"reference['machine'] must be a dict, got {type(m).__name__}")
    return (
        f"{m.get('gpu_name') or m.get('device', '?')} (driver {m.get('driver')}, CUDA {m.get('cuda_runtime')}, "
        f"torch {m.get('torch')}), measured {str(reference.get('date', '?'))[:10]}"
        + (" [quick sizes]" if reference.get("quick") else "")
    )


def reference_table_html(references: Sequence[dict], mine: SweepResult | None = None) -> str:
    """Matmul speedups from committed reference files next to the learner's own sweep, by size."""
    if not isinstance(references, (list, tuple)):
        raise ArgumentTypeError(
            f"references must be a list of reference dicts (load_reference_results()), got {type(references).__name__}"
        )
    for i, ref in enumerate(references):
        check_instance(f"references[{i}]", ref, dict, "a reference result dict")
    if mine is not None:
        check_sweep("mine", mine)
    columns: list[tuple[str, dict]] = []
    wanted = None if mine is None else f"matmul_{dtype_name(mine.results[0].dtype)}"
    for ref in references:
        sweeps = {k: v for k, v in ref.get("sweeps", {}).items() if k.startswith("matmul_")}
        if sweeps:
            key = wanted if wanted in sweeps else sorted(sweeps)[0]
            gpu = ref.get("machine", {}).get("gpu_name") or ref.get("machine", {}).get("device", "?")
            by_size = dict(zip(sweeps[key]["sizes"], sweeps[key]["speedups"], strict=True))
            columns.append((f"{gpu} ({key.removeprefix('matmul_')})", by_size))
    if mine is not None:
        yours = f"yours: {mine.context['device']} ({dtype_name(mine.results[0].dtype)})"
        columns.append((yours, dict(zip(mine.sizes, mine.speedups, strict=True))))
    sizes = sorted({size for _, values in columns for size in values})
    rows = [[n, *(f"{values[n]:.2f}x" if n in values else "-" for _, values in columns)] for n in sizes]
    return table_html(
        rows, ["n", *(name for name, _ in columns)], caption="AMP speedup over FP32, n x n matmul"
    )
