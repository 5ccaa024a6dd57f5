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
    # the probe's evidence (autocast_probe): which test decided an op's policy
    "autocast.lowered": "float32 inputs: autocast cast {casts} tensor(s) to {low} and ran {kernels} in {low}.",
    "autocast.promoted_back": "The output is {dtype}: a later step promoted it back.",
    "autocast.upcast": "{low} inputs -> float32: autocast cast {casts} tensor(s) up to float32 first.",
    "autocast.plain_stays": "Without autocast the same call returns {plain}.",
    "autocast.plain_raises": "Without autocast {low} inputs raise ({error}).",
    "autocast.kernel_fp32": "Returns float32 from {low} inputs with or without autocast: the kernel's own choice.",
    "autocast.input_dtype": "Ran in its input dtype (float32 -> {dtype}, {low} -> {low_dtype}).",
    "autocast.mixed_raise": "Ran in its input dtype; mixed {low}+float32 inputs raise even under autocast ({error}).",
    "autocast.promote": "Mixed {low}+float32 inputs: autocast cast {casts} input(s) to float32 before the op.",
    "autocast.plain_no_cast": "The same call without autocast casts nothing extra.",
    "autocast.plain_mixed_raises": "Without autocast the same call raises ({error}).",
    "autocast.kernel_promotion": (
        "Ran in its input dtype; mixed inputs -> {mixed_dtype} by the kernel's own type promotion "
        "(autocast inserted no cast)."
    ),
    "autocast.unavailable": "Not available on {device} in torch {torch}: {error}.",
    "autocast.refused": "Refused by {device} autocast: {error}.",
    "autocast.low_inputs_fail": (
        "Float32 inputs run, but {low} inputs fail and autocast has no rule that upcasts them: {error}."
    ),
    # a probe against the docs (autocast_ops.compare)
    "autocast.compared": (
        "{device}: probed on torch {probed_torch}, docs of torch {documented_torch}; agree: {agree} ops, "
        "differ: {differ} ops."
    ),
    "autocast.differs": "Documented {documented}, probed {probed}.",
    "autocast.undocumented_lower": "Not on the docs' lists, yet autocast ran {kernels} in the low dtype.",
    "autocast.undocumented_fp32": "Not on the docs' lists, yet autocast ran {kernels} in float32.",
    "autocast.documented_no_cast": "On the docs' list, but no autocast cast happened here.",
    # docs, registered rules and a probe (autocast_ops.rule_groups): one group of ops each
    "autocast.rule_cuda_only": "A rule on CUDA, none on CPU ({n}): {ops}",
    "autocast.rule_cpu_only": "A rule on CPU, none on CUDA ({n}): {ops}",
    "autocast.rule_undocumented": "{device}: a rule registered, on no documented {device} list ({n}): {ops}",
    "autocast.documented_no_rule": "{device}: on a documented {device} list, no rule of its own ({n}): {ops}",
    "autocast.probed_lower_no_rule": "Probed 'lower' on {device} without a {device} rule of its own ({n}): {ops}",
    "autocast.probed_fp32_no_rule": "Probed 'fp32' on {device} without a {device} rule of its own ({n}): {ops}",
    "autocast.probed_promote_no_rule": (
        "Probed 'promote' on {device} without a {device} rule of its own ({n}): {ops}"
    ),
    # one call under autocast (autocast_ops.read_call)
    "autocast.call_lowered": "Autocast cast the {in_dtype} inputs to {dtype} before {op} ran, so the result is {dtype}.",
    "autocast.call_upcast": "Autocast cast the {in_dtype} input up to {dtype} before {op} ran.",
    "autocast.call_kept": "{op} ran in the dtype it was given: {dtype}.",
    "autocast.rule_here": "{device} registers an autocast rule for {op} (cpu: {rule_cpu}, cuda: {rule_cuda}).",
    "autocast.no_rule_here": "{device} registers no autocast rule for {op} (cpu: {rule_cpu}, cuda: {rule_cuda}).",
    "autocast.rule_decides": (
        "Where a device has a rule for {op}, the rule decides the dtype; where it has none, {op} runs in the "
        "dtype it is given."
    ),
    "autocast.plain_gives": "Without autocast the same call gives {plain}.",
    # the variance by moments (autocast_ops.read_variance)
    "autocast.variance_close": "Inside autocast the variance by moments stays within 1% of the float64 truth.",
    "autocast.variance_off": "Inside autocast the variance by moments is off by 1% to 50%.",
    "autocast.variance_lost": "Inside autocast the variance by moments is off by more than half of it.",
    "autocast.spacing_far": (
        "Both moments were computed from inputs rounded to {dtype}, whose spacing near E[x^2] = "
        "{mean_square:.0f} is {spacing:g}, far more than the variance itself."
    ),
    "autocast.spacing_comparable": (
        "Both moments were computed from inputs rounded to {dtype}, whose spacing near E[x^2] = "
        "{mean_square:.0f} is {spacing:g}, comparable to the variance itself."
    ),
    "autocast.protected_ok": "With autocast switched off, the same formula in float32 stays within 1e-3.",
    "autocast.protected_off": "With autocast switched off, the same formula in float32 still misses by more than 1e-3.",
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
