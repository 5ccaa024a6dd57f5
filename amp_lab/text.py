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
    # --- pitfalls ---
    "pitfalls.cache_stale": (
        "After opt.step() inside the autocast region, the next forward pass in the same region still used the "
        "old low-precision copy of the weight: autocast caches the cast until the region ends."
    ),
    "pitfalls.cache_fresh": (
        "After opt.step() inside the autocast region, the next forward pass cast the updated weight afresh: "
        "no stale copy was used."
    ),
    "pitfalls.cache_no_change": "opt.step() did not change the float32 weight, so this run shows nothing.",
    "pitfalls.cache_stale_error": (
        "On {device_type} with {dtype} autocast, that output was off by up to {stale_error:.4g} from the "
        "updated weight's."
    ),
    "pitfalls.cache_new_region_matches": (
        "A new autocast region after the step (the step outside the region) matches the updated weight bit for bit."
    ),
    "pitfalls.cache_new_region_stale": "A new autocast region after the step does not match the updated weight.",
    "pitfalls.cache_cleared_matches": "torch.clear_autocast_cache() after the step matches it bit for bit.",
    "pitfalls.cache_cleared_stale": "torch.clear_autocast_cache() after the step does not match it.",
    "pitfalls.cache_uncached_matches": "A region opened with cache_enabled=False matches it bit for bit.",
    "pitfalls.cache_uncached_stale": "A region opened with cache_enabled=False does not match it.",
    "pitfalls.eps_lost": (
        "eps={eps:g} is below half of float16's smallest subnormal ({half_subnormal:.3g}), so round-to-nearest "
        "stores 0."
    ),
    "pitfalls.eps_kept": (
        "eps={eps:g} is not below half of float16's smallest subnormal ({half_subnormal:.3g}), so "
        "round-to-nearest stores {eps_in_fp16:.4g}."
    ),
    "pitfalls.adam_v_zero": (
        "After one step {v_zero_fp16:.0%} of the float16 second moments are exactly 0 (gradients up to "
        "{grad_max:.4g}; float32 state: {v_zero_fp32:.0%})."
    ),
    "pitfalls.fp16_adam_nonfinite": (
        "On {device_type}, Adam with float16 weights and state turned the weights inf or nan at step "
        "{fp16_bad_step} of {num_steps}."
    ),
    "pitfalls.fp16_adam_finite": (
        "On {device_type}, Adam with float16 weights and state ended {fp16_end:.4g} from the target after "
        "{num_steps} steps (it started {fp16_start:.4g} away)."
    ),
    "pitfalls.fp32_adam_nonfinite": "The FP32 master weights became inf or nan at step {fp32_bad_step}.",
    "pitfalls.fp32_adam_finite": (
        "The FP32 master weights and state ended {fp32_end:.4g} from the target (from {fp32_start:.4g})."
    ),
    "pitfalls.attention_overflows": (
        "Every entry of Q and K is at most {largest_input:.4g} (float16 holds up to {fp16_max:.4g}), yet the "
        "largest logit of Q K^T is {largest_logit:.4g}: in float16 {inf_logits} of {num_logits} logits "
        "overflow to inf and {nan_rows} of {seq} rows of softmax are nan."
    ),
    "pitfalls.attention_fits": (
        "Every entry of Q and K is at most {largest_input:.4g} and the largest logit of Q K^T is "
        "{largest_logit:.4g}: float16 (up to {fp16_max:.4g}) holds every logit."
    ),
    "pitfalls.attention_finite_variants": (
        "{num_finite} of the {num_variants} ways of computing the probabilities keep every one finite."
    ),
    "pitfalls.compile_unavailable": "torch.compile could not run here: {reason}",
    "pitfalls.compile_casts": (
        "On {device_type}, Dynamo's graph kept the autocast region ({autocast_regions} enter/exit pair), and "
        "AOTAutograd turned it into {casts} explicit casts to {dtype}; the compiled function returned "
        "{compiled_dtype} like eager ({eager_dtype})."
    ),
    "pitfalls.compile_bitwise": "Compiled and eager outputs are equal bit for bit.",
    "pitfalls.compile_close": "Compiled and eager outputs agree to within {max_abs_diff:.4g}.",
    "pitfalls.compile_sees_update": (
        "The compiled function saw a weight updated in place inside the region (its graph casts the weight "
        "on every call)."
    ),
    "pitfalls.compile_stale": "The compiled function did not see a weight updated in place inside the region.",
    "pitfalls.compile_guard": (
        "A function without a region of its own, called outside and then inside an autocast region, was "
        "compiled {graphs} times and returned {dtype_outside} then {dtype_inside}: the autocast state is a guard."
    ),
    # --- swamping ---
    "swamping.bf16_stuck": (
        "After {num_steps} updates plain bfloat16 weights had not moved from {start:g}, though the exact "
        "weight is {exact:.4g}."
    ),
    "swamping.bf16_exact": "After {num_steps} updates plain bfloat16 weights reached the exact {exact:.4g}.",
    "swamping.bf16_partway": (
        "After {num_steps} updates plain bfloat16 weights got {progress_bf16:.0%} of the way to the exact "
        "{exact:.4g} (they ended at {final_bf16:.4g})."
    ),
    "swamping.update_lost": (
        "Each update of {update:g} is smaller than half the bfloat16 gap at {start:g} ({half_ulp:g}): "
        "rounding to nearest drops it."
    ),
    "swamping.update_kept": (
        "Each update of {update:g} is not smaller than half the bfloat16 gap at {start:g} ({half_ulp:g})."
    ),
    "swamping.remedies": (
        "FP32 master weights got {progress_fp32:.0%} of the way ({final_fp32:.4g}), Kahan-compensated "
        "bfloat16 {progress_kahan:.0%} ({final_kahan:.4g}), stochastic rounding {progress_stochastic:.0%} on "
        "average over {numel} weights ({final_stochastic:.4g}, spread {spread:.4g})."
    ),
    # --- subnormals ---
    "subnormals.slow": (
        "On this CPU, {op} of {numel:,} float32 numbers took {subnormal_time} on subnormal inputs against "
        "{normal_time} on normal ones: {slowdown_ratio} as long."
    ),
    "subnormals.no_penalty": (
        "On this CPU, {op} of {numel:,} float32 numbers took {subnormal_time} on subnormal inputs against "
        "{normal_time} on normal ones: {slowdown_ratio} as long, little or no penalty."
    ),
    "subnormals.ftz_unsupported": "torch.set_flush_denormal is not supported here (it returned False).",
    "subnormals.ftz_zeros": (
        "With flush-to-zero on, the subnormal inputs read as zero and took {flushed_time} ({flushed_ratio} "
        "the normal time)."
    ),
    "subnormals.ftz_kept": (
        "With flush-to-zero on, the subnormal inputs were NOT flushed and took {flushed_time} "
        "({flushed_ratio} the normal time)."
    ),
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
