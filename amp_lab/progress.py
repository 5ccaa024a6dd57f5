"""Progress bars (tqdm.auto: a widget in JupyterLab, text in a terminal); ``AMP_LAB_PROGRESS=0`` turns them off."""

from __future__ import annotations

import os
from collections.abc import Iterable

from tqdm.auto import tqdm

from ._checks import check_instance, check_int, check_optional_str


def enabled() -> bool:
    return os.environ.get("AMP_LAB_PROGRESS", "1") not in ("0", "false", "no")


def progress(
    iterable=None, *, desc: str | None = None, total: int | None = None, leave: bool = True, **kwargs
):
    """A tqdm progress bar over ``iterable`` (a manual bar when None); ``desc`` a string or None, ``total`` a
    count >= 0 or None, ``leave`` True or False."""
    if iterable is not None:
        check_instance("iterable", iterable, Iterable, "something to loop over (e.g. range(n)) or None")
    check_optional_str("desc", desc)
    if total is not None:
        total = check_int("total", total, minimum=0)
    check_instance("leave", leave, bool, "True or False")
    off = kwargs.pop("disable", False) or not enabled()
    return tqdm(iterable, desc=desc, total=total, leave=leave, disable=off, **kwargs)
