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
    # --- scaling ---
    # --- ranges ---
    # --- formats ---
    "formats.stored_as": "{label} stores {x:g} as {stored:g}.",
    "formats.exact": "{x:g} is a {label} value: it is stored exactly.",
    "formats.step_in_binade": "{label} has {precision} significant bits, so between {low:g} and {high:g} its step is {step:g}.",
    "formats.step_subnormal": "Below {high:g}, {label}'s smallest normal, its values are subnormal, evenly spaced by {step:g}.",
    "formats.tie_to_even": (
        "{x:g} lies exactly halfway between {below:g} and {above:g}, and round to nearest even picks {stored:g}, "
        "the neighbour whose last mantissa bit is {last_bit}."
    ),
    "formats.to_nearest": "{x:g} lies between {below:g} and {above:g}, and round to nearest picks {stored:g}, the closer one.",
    "formats.saturates": "{label} has no infinity: {x:g} is beyond its max {max:g}, so this torch's cast saturates at {stored:g}.",
    "formats.overflows_to_inf": "{label} has infinities: {x:g} is beyond its max {max:g}, so the cast gives {stored:g}.",
    "formats.overflows_to_nan": "{label} has no infinity: {x:g} is beyond its max {max:g}, and this torch's cast gives {stored:g}.",
    "formats.nan_in": "NaN rounds to NaN in {label}.",
    # --- tensor_cores ---
    "tc.stalls": (
        "{label} has {precision} significant bits, so from 2**{precision} = {start} on its step is 2; adding 1 there "
        "is a tie, which rounds back to the even neighbour, so addition #{index} leaves the sum at {stalled:g} for good."
    ),
    "tc.no_stall": "{label} adds 1.0 {n} times without a stall: the sum is {final:g}.",
    "tc.accumulator_ratio": (
        "At K = {k} the {low} accumulator's median error is {e_low:.1e}, {in_u_low:.0f} times {low}'s unit roundoff; "
        "the {high} one's is {e_high:.1e}, {in_u_high:.0f} times {high}'s."
    ),
    "tc.accumulator_why": (
        "{low}'s unit roundoff alone is {u_ratio:.0f} times {high}'s, and the {low} sum's step grows with the sum "
        "while the terms stay small, so its error grows faster with K: the ratio is {ratio:.2g}."
    ),
    "tc.padding_small_gain": (
        "Padding to a multiple of {tile_n} instead of 8 fills the last tile and gains {gain:.3%} of the work: little "
        "at this width; tile quantization matters when a dimension is only a few tiles wide."
    ),
    "tc.padding_worth_it": (
        "Padding to a multiple of {tile_n} instead of 8 fills the last tile and gains {gain:.3%} of the work: "
        "worth it at this width."
    ),
    "tc.alignment_skipped": "No CUDA GPU here (device: {device}), so this cell is skipped: it needs a CUDA GPU.",
    "tc.alignment_would_show": (
        "On one it times a {n}x{n} {dtype} matmul against {n1}x{n1} with CUDA events (warm-up, {repeats} samples, "
        "median) and prints milliseconds and TFLOP/s for each. {n} is a multiple of {multiple}, {n1} is not: cuBLAS "
        "must fall back to slower kernels for the unaligned size (on old cuBLAS, to no Tensor Cores at all), so the "
        "smaller matrix usually takes longer and delivers fewer TFLOP/s. Timing CPU matmuls instead would say "
        "nothing about Tensor Cores."
    ),
    "tc.alignment_measured": "{gpu}: {dtype} matmuls, CUDA events, median of {repeats}.",
    "tc.alignment_ratio": "n = {n1} does {work:.4f}x the work of n = {n} and takes {time:.2f}x the time.",
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
