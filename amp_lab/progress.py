"""Progress bars (tqdm.auto: a widget in JupyterLab, text in a terminal); ``AMP_LAB_PROGRESS=0`` turns them off."""

from __future__ import annotations

import os
from collections.abc import Iterable

from tqdm.auto import tqdm

from ._checks import ArgumentTypeError, check_instance, check_int


def enabled() -> bool:
    return os.environ.get("AMP_LAB_PROGRESS", "1") not in ("0", "false", "no")


def progress(
    iterable=None, *, desc: str | None = None, total: int | None = None, leave: bool = True, **kwargs
):
    """A tqdm progress bar over ``iterable`` (or a manual bar when ``iterable`` is None).

    ``desc`` is a string or None, ``total`` a count >= 0 or None, ``leave`` True or False."""
    if iterable is not None and not isinstance(iterable, Iterable):
        raise ArgumentTypeError(
            f"iterable must be something to loop over (e.g. range(n)) or None, got {type(iterable).__name__}: "
            f"{iterable!r:.80}"
        )
    if desc is not None:
        check_instance("desc", desc, str, "a string or None")
    if total is not None:
        total = check_int("total", total, minimum=0)
    check_instance("leave", leave, bool, "True or False")
    return tqdm(iterable, desc=desc, total=total, leave=leave, disable=not enabled(), **kwargs)
