"""Words the course composes: how numbers print, and every sentence that interprets a measurement.

A readout (the race's verdict, a sweep's trend, a comparison's reading, a reveal) returns facts: an
outcome code, reason codes and the numbers.  :data:`REASONS` is the one table that turns a code into its
sentence, filled from the facts: the one place a translation would replace.  Notebooks print
:class:`Reading` (its sentences) or show its numbers in a table; tests assert its codes and numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real

from ._checks import ArgumentTypeError, check_int

# code -> sentence template, filled by ``str.format(**facts)``.  One section per topic module.
REASONS: dict[str, str] = {
    # --- hardware ---
    # --- timing ---
    # --- race ---
    # --- recipe ---
    # --- training ---
    "training.static_some_lost": "{survivors} kept the weights finite to the end.",
    "training.static_none_lost": "Every static scale kept the weights finite: no scale overflowed.",
    "training.static_lost_early": "{lost_early} turned the weights into NaN within the first 5 steps.",
    "training.static_lost_mid": "{lost_mid} turned the weights into NaN between steps 5 and 9.",
    "training.static_lost_later": "{lost_later} turned the weights into NaN after the first 10 steps: a scale that "
    "is safe for the first batch is not safe for the whole run, because the gradients grow as the network learns.",
    # --- scaling ---
    "scaling.schedule_end": "GradScaler's scale ends at {final}.",
    "scaling.schedule_skips": "{num_skipped} steps with an inf/NaN gradient (steps {skipped}) were skipped, each "
    "multiplying the scale by {backoff_factor:g}.",
    "scaling.schedule_growth": "The scale grew {grew} times, each after {growth_interval} clean steps in a row.",
    "scaling.backoff_reaches_zero": "Halving a float32 walks through the subnormals: 2^{last_normal_log2:g} is the "
    "last normal scale, and {to_zero} more halvings reach exactly 0, where 1/S is inf and the unscaled gradients "
    "turn into NaN.",
    "scaling.backoff_stops": "GradScaler's scale stopped at 2^{last_log2:g} after {num_backoffs} backoffs.",
    "scaling.ours_refuses": "Our DynamicLossScaler matches it down to 2^{last_normal_log2:g} and then raises "
    "ScaleUnderflowError instead, naming the likely culprit: an inf/NaN loss.",
    "scaling.ours_carries_on": "Our DynamicLossScaler carries on too.",
    "scaling.runs_use_yours": "The runs below use your {mine}: it passed its check.",
    "scaling.runs_use_package": "Your {mine} has not passed its check yet, so the runs below use the package's "
    "{package} (the same algorithm); run them again once your check passes.",
    # --- ranges ---
    # --- formats ---
    # --- tensor_cores ---
    # --- autocast_ops ---
    # --- fp8 ---
    # --- pitfalls ---
    # --- predict ---
    # --- check ---
    # --- course ---
}


def say(code: str, **facts) -> str:
    """The sentence for reason ``code``, filled from ``facts``."""
    return REASONS[code].format(**facts)


@dataclass(frozen=True)
class Reading:
    """What a readout found: an ``outcome`` code, the ``reasons`` behind it (codes, in reading order) and
    the numbers they are filled from.  ``str(reading)`` is its sentences, from :data:`REASONS`."""

    outcome: str
    reasons: tuple[str, ...] = ()
    facts: dict = field(default_factory=dict)

    @property
    def codes(self) -> tuple[str, ...]:
        return (self.outcome, *self.reasons)

    def sentences(self) -> list[str]:
        return [say(code, **self.facts) for code in self.codes if REASONS.get(code)]

    def __str__(self) -> str:
        return " ".join(self.sentences())


def _number(name: str, value, *, optional: bool = False):
    """``value`` as a float if it is a real number (NumPy's too; not a bool), for the formatters, which
    print inf and nan as ``'inf'`` and ``'nan'``.  An integer beyond float64's range (``2**2000``) is no
    measurement: a ValueError, not an OverflowError from ``float()``."""
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
    """``1.3217`` -> ``'1.32x'``; below 0.1, ``digits + 1`` significant figures (``0.01234`` -> ``'0.0123x'``).
    How every speedup in ``06_timing_race`` is printed."""
    x = _number("x", x)
    digits = check_int("digits", digits, minimum=0, maximum=17)
    if not math.isfinite(x):
        return f"{x}x"
    if 0 < abs(x) < 0.1:
        return f"{x:.{digits + 1}g}x"
    return f"{x:.{digits}f}x"
