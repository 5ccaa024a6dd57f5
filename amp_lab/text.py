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
    # --- tensor_cores ---
    # --- autocast_ops ---
    # --- fp8 ---
    "fp8.runs_on_gpu": "FP8 matmuls run on this GPU's Tensor Cores: {why}",
    "fp8.gpu_without_fp8": "FP8 matmuls run on the CPU, emulated, because {why}",
    "fp8.apple_gpu": "FP8 matmuls run on the CPU, emulated, because torch has no FP8 matmul for Apple GPUs (MPS)",
    "fp8.no_gpu": "FP8 matmuls run on the CPU, emulated, because there is no CUDA GPU here: {why}",
    "fp8.standard_recipe": "These spreads are the standard recipe's reason: inputs and weights in E4M3 (precision), "
    "gradients in E5M2 (range).",
    "fp8.recipe_not_forced": "These spreads do not force the standard recipe's split (inputs and weights in E4M3, "
    "gradients in E5M2).",
    "fp8.activations_fit_e4m3": "The activations spread over at most {narrow:.0f} binades: E4M3's {w4:.0f}-binade "
    "window holds them with room to spare, and its extra mantissa bit halves the rounding error.",
    "fp8.activations_fill_e4m3": "The activations spread over up to {narrow:.0f} binades: E4M3's {w4:.0f}-binade "
    "window holds them with little room.",
    "fp8.gradients_need_e5m2": "The hidden layers' gradients spread over up to {wide:.0f} binades: more than E4M3's "
    "window, within E5M2's {w5:.0f}.",
    "fp8.gradients_fit_e4m3": "The hidden layers' gradients spread over up to {wide:.0f} binades: within E4M3's "
    "window too.",
    "fp8.gradients_beyond_e5m2": "The hidden layers' gradients spread over up to {wide:.0f} binades: beyond E5M2's "
    "{w5:.0f} too.",
    "fp8.logits_beyond_e5m2": "The logits' gradients spread over {logits:.0f} binades (beyond any FP8 window): a "
    "confident softmax gives the wrong classes vanishing gradients, so the FP8 recipes below keep the 10-class "
    "output layer in FP32 (10 is not a multiple of 16, as FP8 GEMMs need).",
    "fp8.logits_within_e5m2": "The logits' gradients spread over {logits:.0f} binades, within E5M2's window.",
    "fp8.delayed_saturates": "Delayed scaling used the scale of earlier steps (2^{log2_scale_delayed:.1f}), made "
    "for an amax {amax_ratio:.0f} times smaller, so {saturated_delayed} element(s) landed beyond {max:g} and "
    "were clipped.",
    "fp8.delayed_holds": "Delayed scaling's scale from earlier steps (2^{log2_scale_delayed:.1f}) still held this "
    "step: no element landed beyond {max:g}.",
    "fp8.below_window": "The largest activation gradient is about 2^{log2_largest}, below {label}'s smallest normal "
    "2^{log2_min_normal:g}: unscaled, almost the whole histogram lies below {label}'s window.",
    "fp8.near_window": "The largest activation gradient is about 2^{log2_largest}, near {label}'s smallest normal "
    "2^{log2_min_normal:g}: unscaled, most of the histogram lies below {label}'s window.",
    "fp8.losses_identical": "{equal} of {total} losses are equal, bit for bit.",
    "fp8.losses_close": "{equal} of {total} losses are equal; the others differ.",
    "fp8.losses_different": "None of the {total} losses are equal.",
    "fp8.weights_identical": "The trained weights are identical: the same scales (448 / amax, in float64, rounded to "
    "float32), the same saturating casts and the same torch._scaled_mm calls give the same bits.",
    "fp8.weights_differ": "The trained weights differ.",
    "fp8.current_rescales": "Current scaling rescaled that very step (2^{log2_scale_current:.1f}) and clipped "
    "{saturated_current}.",
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
