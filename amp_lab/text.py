"""How numbers print, and :data:`REASONS`: the one table from a readout's reason codes to sentences, filled
from its facts (the place a translation replaces).  Tests assert a :class:`Reading`'s codes and numbers."""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass, field
from importlib import resources
from numbers import Real

from ._checks import ArgumentTypeError, check_int

# code -> sentence template, filled by ``str.format(**facts)``, from ``reasons.json`` (one object per topic).
REASONS: dict[str, str] = {
    code: template
    for section in json.loads(
        resources.files(__package__).joinpath("reasons.json").read_text(encoding="utf-8")
    ).values()
    for code, template in section.items()
}


def say(code: str, **facts) -> str:
    """The sentence for reason ``code``, filled from ``facts``."""
    return REASONS[code].format(**facts)


WIDTH = 100  # characters: a printed line at most this long fits an output area at 1280 px, file browser open


def wrap(value, indent: str | None = None) -> str:
    """``str(value)`` (a reading, a race, a sentence) with each line longer than :data:`WIDTH` broken between
    words, never inside one or at a hyphen (JupyterLab breaks a line too long for its output area mid-word);
    a continuation starts with ``indent``, by default its line's own indent and two spaces."""
    if indent is not None and not isinstance(indent, str):
        raise ArgumentTypeError(f"indent must be a string or None, got {type(indent).__name__}")
    keep = dict(break_long_words=False, break_on_hyphens=False)
    return "\n".join(
        textwrap.fill(
            line, WIDTH, subsequent_indent=indent or " " * (len(line) - len(line.lstrip(" ")) + 2), **keep
        )
        if len(line) > WIDTH
        else line
        for line in str(value).split("\n")
    )


@dataclass(frozen=True)
class Reading:
    """What a readout found: its ``outcome`` (a code of :data:`REASONS`, or a plain label such as ``"faster"``),
    the ``reasons`` behind it (codes, in reading order) and the ``facts`` they are filled from.  ``str()`` is
    their sentences (a reason without one raises ``KeyError``), wrapped at :data:`WIDTH`."""

    outcome: str
    reasons: tuple[str, ...] = ()
    facts: dict = field(default_factory=dict)

    @property
    def codes(self) -> tuple[str, ...]:
        return (self.outcome, *self.reasons)

    def sentences(self) -> list[str]:
        head = [self.outcome] if self.outcome in REASONS else []
        return [say(code, **self.facts) for code in (*head, *self.reasons)]

    @property
    def text(self) -> str:
        """The sentences on one line (for a table cell or a longer sentence); ``str()`` wraps them."""
        return " ".join(self.sentences())

    def __str__(self) -> str:
        return wrap(self.text)


def _number(name: str, value, *, optional: bool = False):
    """``value`` as a float if it is a real number (not a bool, nor an integer beyond float64's range)."""
    if optional and value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        allowed = "a number or None" if optional else "a number"
        raise ArgumentTypeError(f"{name} must be {allowed}, got {type(value).__name__}: {value!r:.80}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"{name} must be within float64's range (about 1.8e308), got an integer of {int(value).bit_length()} bits"
        ) from None


def format_seconds(seconds: float) -> str:
    """``0.00123`` -> ``'1.23 ms'``: three significant figures in s, ms, µs or ns."""
    s = _number("seconds", seconds)
    if not math.isfinite(s):
        return str(s)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def format_bytes(nbytes: float | None) -> str:
    """``3 * 2**20`` -> ``'3.00 MiB'``; None -> ``'n/a'``, inf and nan as ``'inf'`` and ``'nan'``."""
    b = _number("nbytes", nbytes, optional=True)
    if b is None:
        return "n/a"
    if not math.isfinite(b):
        return str(b)
    for unit, scale in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(b) >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{int(b)} B"


def format_ratio(x: float, digits: int = 2) -> str:
    """``1.3217`` -> ``'1.32x'``; below 0.1, ``digits + 1`` significant figures (``0.01234`` -> ``'0.0123x'``)."""
    x = _number("x", x)
    digits = check_int("digits", digits, minimum=0, maximum=17)
    if not math.isfinite(x):
        return f"{x}x"
    if 0 < abs(x) < 0.1:
        return f"{x:.{digits + 1}g}x"
    return f"{x:.{digits}f}x"
