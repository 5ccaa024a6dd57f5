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
    # --- predict ---
    "predict.uncommitted": "○ no prediction committed ({how}, then run this cell again to compare). The result: {actual}.",
    "predict.right": "✓ you predicted {predicted}, and the result is {actual}.",
    "predict.wrong": "✗ you predicted {predicted}; the result is {actual}.",
    # --- check ---
    "check.complex_answer": "`{name}` is a complex tensor; the answer is real",
    "check.bool_tensor_answer": "`{name}` is a bool tensor (True/False values); this exercise wants numbers",
    "check.text_answer": "`{name}` is text ({text!r:.60}); write it as a number, without quotes",
    "check.bool_answer": "`{name}` is {value}, a yes/no value; this exercise wants a number",
    "check.huge_int_answer": "`{name}` is an integer of {bits} bits, too large for any float (float64 ends near "
    "1.8e308)",
    "check.not_a_number": "`{name}` is a {kind}, which is not a number or a tensor",
    "check.bools_answer": "`{name}` holds True/False values; this exercise wants numbers",
    "check.not_finite": "{where}{kinds} where the expected answer is finite: did something overflow (beyond "
    "{precision}'s largest value) or divide 0 by 0?",
    "check.some_zeros": "{count} {values} 0 where the expected is not: an underflow (too small for the format) or "
    "a missing term?",
    "check.all_zeros": "your answer is all zeros: did every value underflow, or is the computation not filled in yet?",
    "check.sign_flipped": "every value has the right size but the opposite sign: a sign flipped?",
    "check.exponent_too_large": "{what} {exactly} {sign}2**{k} = {sign}{factor} times the expected one: off by a "
    "power of two, as if an exponent were {k} too large",
    "check.exponent_too_small": "{what} {exactly} {sign}2**{k} times the expected one: off by a power of two, as if "
    "an exponent were {off} too small",
    "check.constant_factor": "every value is {ratio:.4g} times the expected one: a constant factor is off",
    "check.rounded_to_other": "your answer is the expected value rounded to {other}: this exercise is about "
    "{precision}",
    "check.unrounded_in_other": "rounded to {other}, your answer becomes the expected value: the exercise asks for "
    "the value {other} actually stores",
    "check.not_rounded": "your answer is not a {precision} number (it changes when rounded to {precision}): round "
    "it to {precision} first?",
    "check.sign_of_zero": "+0.0 == -0.0 is True, but their bit patterns differ in the sign bit.",
    "check.transposed": "it has the transposed shape: is a matrix transposed, or are A and B swapped in A @ B?",
    "check.reshaped": "the same number of elements: a reshape or flatten too many (or too few)?",
    "check.reduced": "a single number: did a reduction (sum/mean) run over everything?",
    "check.sign_bit": "sign: 0 means positive, 1 means negative.",
    "check.exponent_field": "exponent: your field {field} is {meaning}; the value needs a {direction} exponent "
    "(remember the bias, {bias}: stored field = power of two + {bias}).",
    "check.mantissa_bits": "mantissa: {differ} of {bits} bits differ.",
    "check.mantissa_last_place": "mantissa: {differ} of {bits} bits differ; off by one in the last place: round to "
    "nearest (ties to even) by looking at the first bit you drop, not truncate.",
    "check.nan_patterns": "every pattern with an all-ones exponent and a non-zero mantissa is NaN in IEEE formats",
    "check.dtype_layout": "{dtype} has {layout}.",
    "check.which_16_bit": "both are 16-bit: which one did this autocast region ask for? (autocast's own default is "
    "float16 on CUDA and bfloat16 on CPU; the course picks bfloat16 on Ampere and later GPUs, see amp_dtype)",
    "check.kept_in_float32": "is this an op autocast keeps in float32 for accuracy, one that promotes mixed inputs "
    "to the widest, or one outside the autocast region?",
    "check.runs_low_precision": "inside an autocast region, an op on autocast's lower-precision list (matmul, "
    "linear, conv, ...) runs in the low-precision dtype, and an op on no list (relu, max_pool2d, view, ...) keeps "
    "its input's dtype, so a low-precision input gives a low-precision output.",
    "check.reread": "re-read the cell above this exercise: the measured numbers decide it.",
    "check.comes_later": "position {position}: {item!r} must come later: something else has to happen first.",
    "check.raised": "{function} raised {error}: {text}",
    "check.no_return": "{function} returned None: is a `return` missing?",
    "check.not_in_place": "{function} returned a value, but the reference changes its arguments in place and "
    "returns None (a trailing _ in a name, as in unscale_, means in place): modify the tensors, e.g. with "
    "g.mul_(...)",
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
