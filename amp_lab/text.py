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
    "recipe.faster": "AMP ({name}) was faster than FP32 here: speed-up {speedup}, from {pairs} pairs of FP32 and "
    "{name} steps taken in turn.",
    "recipe.slower": "AMP ({name}) was slower than FP32 here: speed-up {speedup}, from {pairs} pairs of FP32 and "
    "{name} steps taken in turn; a {name} step took {slowdown:.2f}x as long as an FP32 step.",
    "recipe.too_close": "AMP ({name}) and FP32 were too close to call here: speed-up {speedup}, from {pairs} pairs "
    "of FP32 and {name} steps taken in turn.",
    "recipe.unpredicted": "The decision flow could not predict the speed here{basis}: this measurement is the answer.",
    "recipe.advice_pays": "AMP pays here at this size.",
    "recipe.advice_fp32": "For speed at this size, train in FP32 here; AMP still saves memory.",
    "recipe.advice_memory": "At this size, decide by memory, not speed.",
    "recipe.matches_fast": "That matches the decision flow, which expected AMP to pay here{basis}.",
    "recipe.matches_slow": "That matches the decision flow, which expected no speed-up here{basis}. For speed on "
    "this machine train in FP32; use AMP to learn the recipe or to save memory.",
    "recipe.contradicts_fast": "The decision flow expected AMP to pay here{basis}, on large matmuls, and this model "
    "is small: the measurement does not match.",
    "recipe.contradicts_slow": "The decision flow expected no speed-up here{basis}, yet AMP was faster: the "
    "measurement does not match. What to do: run the comparison again; if AMP stays faster, trust the measurement "
    "(the flow's facts about this machine may be incomplete) and confirm it at larger sizes in notebook 06.",
    "recipe.trust_measurement": "What to do: trust the measurement for this model (train it in FP32, or keep AMP "
    "for the memory it saves), and race larger sizes.",
    "recipe.undecided_fast": "The decision flow expected AMP to pay here{basis}, on large matmuls; at this size the "
    "measurement cannot tell, so it neither confirms nor contradicts the flow.",
    "recipe.undecided_slow": "The decision flow expected no speed-up here{basis}; at this size the measurement "
    "neither confirms nor contradicts the flow.",
    "recipe.within_noise": "The difference is within the noise.",
    "recipe.within_interval": "The difference is within the interval of the paired steps.",
    "recipe.regime": "{regime_text}.",
    "recipe.small_cuda": "A model this small is bound by kernel launches and Python, not by arithmetic, so faster "
    "matmuls change little while autocast's casts still cost time.",
    "recipe.small_cpu": "Matrices this small keep the CPU's 16-bit units busy only briefly, so the casts autocast "
    "adds cost about as much as the faster multiply saves.",
    "recipe.small_other": "A model this small is bound by per-op overhead, not by arithmetic.",
    "recipe.see_race": "Notebook 06's race, at larger sizes, shows where AMP starts to pay on this machine.",
    "recipe.memory_half": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), about half: most of the tensors kept for "
    "backward are 16-bit now.",
    "recipe.memory_less": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), less, but not half: some of the tensors kept "
    "for backward stayed float32.",
    "recipe.memory_same": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), about the same: the tensors kept for backward "
    "stayed float32.",
    "recipe.memory_more": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), more: autocast kept 16-bit copies next to "
    "float32 tensors.",
    "recipe.weights_stay": "The float32 weights, their gradients and the optimizer state do not shrink.",
    "recipe.peak": "Peak CUDA memory per step (what one training step allocated on top of the data, weights, "
    "gradients and Adam's state already allocated): {amp_peak} under {name} against {base_peak} in FP32 "
    "({peak_ratio:.2f}x).",
    "recipe.accuracy_within": "Test accuracy under {name} is within {points:g} points of FP32's.",
    "recipe.accuracy_beyond": "Test accuracy under {name} is more than {points:g} points from FP32's.",
    "recipe.scaled_norm": "scaler.scale(loss) multiplied the loss by {scale:g} = 2**{log2:g}, and backward is "
    "linear, so every gradient, and with them their norm, came out {scale:g} times too large; unscale_ divides "
    "by it again.",
    "recipe.scale_grew": "grow it",
    "recipe.scale_kept": "keep it",
    "recipe.scale_halved_once": "halve it once, then hold",
    "recipe.scale_halved_each_step": "halve it at every step",
    "recipe.scale_backoff": "{num_skipped} of {num_steps} steps found inf or NaN gradients, and GradScaler halves "
    "its scale after every such step (backoff factor 0.5), from 2**{first_log2:g} to 2**{last_log2:g}.",
    "recipe.tf32_on": "This GPU has TF32 Tensor Cores and TF32 is on: 'FP32' matmuls use them. Report it with "
    "your timings.",
    "recipe.tf32_off": "This GPU has TF32 Tensor Cores, but TF32 is off: FP32 matmuls are true FP32.",
    "recipe.tf32_none": "No TF32 Tensor Cores in use here: FP32 matmuls are true FP32.",
    "clip.threshold": "Clipping the scaled gradients at max_norm = {max_norm:g} clips the true gradients at "
    "max_norm / scale = {max_norm:g} / {scale:g} = {effective:.3g}. Adam: {adam_scaled_clipped} of {num_steps} "
    "steps clipped with the scaled gradients, {adam_true_clipped} after unscale_; SGD: {sgd_scaled_clipped} of "
    "{num_steps} steps clipped with the scaled gradients, {sgd_true_clipped} after unscale_.",
    "clip.adam_little": "Adam: with the scaled gradients clipped, the updates changed little ({adam_ratio:.2f}x "
    "the correct run's size).",
    "clip.adam_shrank": "Adam: with the scaled gradients clipped, the updates shrank to {adam_ratio:.3g}x the "
    "correct run's.",
    "clip.adam_grew": "Adam: with the scaled gradients clipped, the updates grew to {adam_ratio:.3g}x the correct "
    "run's.",
    "clip.adam_why": "Adam divides each gradient by its running RMS, so a uniformly smaller gradient gives nearly "
    "the same step (only its eps, added to that RMS, makes tiny gradients take smaller steps).",
    "clip.sgd_little": "SGD: with the scaled gradients clipped, the updates changed little ({sgd_ratio:.2f}x the "
    "correct run's size).",
    "clip.sgd_shrank": "SGD: with the scaled gradients clipped, the updates shrank to {sgd_ratio:.3g}x the correct "
    "run's.",
    "clip.sgd_grew": "SGD: with the scaled gradients clipped, the updates grew to {sgd_ratio:.3g}x the correct "
    "run's.",
    "clip.sgd_why": "SGD's step is the learning rate times the gradient, so a clipped gradient is a shrunken step.",
    # --- training ---
    # --- scaling ---
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
