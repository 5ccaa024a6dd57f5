"""Progress bars for anything that takes more than a couple of seconds.

``progress(iterable, desc=...)`` is tqdm.auto: a widget bar in JupyterLab, a text bar in a
terminal.  ``AMP_LAB_PROGRESS=0`` turns bars off (used by benchmarks so bars do not
disturb timings).
"""

from __future__ import annotations

import os

from tqdm.auto import tqdm


def enabled() -> bool:
    return os.environ.get("AMP_LAB_PROGRESS", "1") not in ("0", "false", "no")


def progress(iterable=None, *, desc: str | None = None, total: int | None = None, leave: bool = True, **kwargs):
    """A tqdm progress bar over ``iterable`` (or a manual bar when ``iterable`` is None)."""
    return tqdm(iterable, desc=desc, total=total, leave=leave, disable=not enabled(), **kwargs)
