"""Checked claims: the lesson a machine-dependent measurement teaches, printed ``statement: yes`` (or ``NO``,
which fails nbval) beside the raw figures' volatile cell."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._checks import ArgumentTypeError, check_bool, check_instance
from .text import wrap

__all__ = ["Claim", "claim"]


@dataclass(frozen=True)
class Claim:
    """A statement and whether the measurement behind it bears it out."""

    statement: str
    holds: bool
    printed: bool = field(default=False, compare=False, repr=False)

    def __str__(self) -> str:
        return wrap(f"{self.statement}: {'yes' if self.holds else 'NO'}", indent="  ")

    def __bool__(self) -> bool:
        return self.holds

    def _ipython_display_(self) -> None:
        # a cell ending in claim(...) shows the line once: claim printed it, unless show=False
        if not self.printed:
            print(self)


def claim(statement: str, holds, *, show: bool = True) -> Claim:
    """Print (unless ``show=False``) and return ``statement`` with ``yes`` or ``NO``; ``holds`` is a bool (or a
    one-value NumPy/torch bool), never a number's truthiness."""
    if not check_instance("statement", statement, str, "a non-empty string").strip():
        raise ValueError(f"statement must be a non-empty string, got {statement!r}")
    show = check_bool("show", show)
    if not isinstance(holds, bool):
        shape = getattr(holds, "shape", None)
        if shape != () or "bool" not in str(getattr(holds, "dtype", "")):
            what = type(holds).__name__ + (f" of shape {tuple(shape)}" if shape not in ((), None) else "")
            raise ArgumentTypeError(
                f"holds must be a bool (the outcome of a comparison), got {what}: {holds!r:.60}"
            )
        holds = bool(holds.item())
    c = Claim(statement.strip(), holds, printed=show)
    if show:
        print(c)
    return c
