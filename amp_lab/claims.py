"""Checked claims: the lesson a measurement teaches, stated so that it holds on every machine.

A loss, a fraction of underflowed gradients or a timing depends on the CPU's instruction set and thread
count, so notebooks print the raw figures in volatile cells and, beside them, the claim they support::

    >>> claim("FP16 without scaling zeroes more than a fifth of the activation gradients", 0.251 > 0.2)
    FP16 without scaling zeroes more than a fifth of the activation gradients: yes

nbval compares the claim's line: a machine that contradicts the lesson prints ``NO`` and fails the check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._checks import ArgumentTypeError, check_bool

__all__ = ["Claim", "claim"]


@dataclass(frozen=True)
class Claim:
    """A statement and whether the measurement behind it bears it out."""

    statement: str
    holds: bool
    printed: bool = field(default=False, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.statement}: {'yes' if self.holds else 'NO'}"

    def __bool__(self) -> bool:
        return self.holds

    def _ipython_display_(self) -> None:
        # a cell ending in claim(...) shows the line once: claim printed it, unless show=False
        if not self.printed:
            print(self)


def claim(statement: str, holds, *, show: bool = True) -> Claim:
    """Print (unless ``show=False``) and return ``statement`` with ``yes`` or ``NO``.

    ``holds`` must be a bool (or a NumPy or torch bool of one value): a number or a tensor of many is a
    ``TypeError``, so a claim cannot print the truthiness of a number.
    """
    if not isinstance(statement, str) or not statement.strip():
        error = ValueError if isinstance(statement, str) else ArgumentTypeError
        raise error(
            f"statement must be a non-empty string, got {type(statement).__name__}: {statement!r:.80}"
        )
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
