"""Checked claims: the lesson a measurement teaches, stated so that it holds on every machine.

A training loss, a fraction of gradients that underflow, or a timing depends on the order in which
the CPU's kernels add numbers up, and that order changes with the instruction set (AVX2, AVX512,
plain C) and the thread count.  Stored as raw digits those numbers make a notebook true on one CPU
only.  The notebooks therefore print the raw figures in cells marked volatile and, next to them, the
*claim* the figures support, computed from them::

    >>> claim("FP16 without scaling zeroes more than a fifth of the activation gradients", 0.251 > 0.2)
    FP16 without scaling zeroes more than a fifth of the activation gradients: yes

The claim's line is what nbval compares.  If a machine ever contradicts the lesson, the line says
``NO`` and the notebook check fails, which is what should happen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._checks import ArgumentTypeError

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
        # A cell that ends in ``claim(...)`` would otherwise show the line a second time, as the cell's
        # value (``Claim(statement=..., holds=True)``); a claim made with ``show=False`` prints its line.
        if not self.printed:
            print(self)


def claim(statement: str, holds, *, show: bool = True) -> Claim:
    """Print (unless ``show=False``) and return ``statement`` with ``yes`` or ``NO``.

    A notebook cell may end with ``claim(...)``: the returned :class:`Claim` does not show its line a
    second time as the cell's value.

    ``holds`` must be a bool (numpy and torch booleans with one value are accepted); anything else is
    a ``TypeError`` (:class:`~amp_lab._checks.ArgumentTypeError`), so a claim cannot silently print
    the truthiness of a number or a tensor.  ``show`` must be True or False.
    """
    if not isinstance(statement, str):
        raise ArgumentTypeError(
            f"statement must be a non-empty string, got {type(statement).__name__}: {statement!r:.80}"
        )
    if not statement.strip():
        raise ValueError(f"statement must be a non-empty string, got {statement!r}")
    if not isinstance(show, bool) and type(show).__name__ != "bool_":
        raise ArgumentTypeError(f"show must be True or False, got {type(show).__name__}: {show!r:.80}")
    if not isinstance(holds, bool):
        item = getattr(holds, "item", None)
        shape = getattr(holds, "shape", None)
        dtype = str(getattr(holds, "dtype", ""))
        if item is None or shape not in ((), None) or "bool" not in dtype:
            what = (
                f"{type(holds).__name__} of shape {tuple(shape)}"
                if shape not in ((), None)
                else type(holds).__name__
            )
            raise ArgumentTypeError(
                f"holds must be a bool (the outcome of a comparison), got {what}: {holds!r:.60}"
            )
        holds = bool(item())
    show = bool(show)
    c = Claim(statement.strip(), holds, printed=show)
    if show:
        print(c)
    return c
