"""Exercises of notebook 01 (floating-point formats, bit by bit).

Every expected value is computed here from :mod:`amp_lab.formats` (itself tested against torch's
casts and ``torch.finfo``), never typed in; the common wrong answers are diagnosed before the
generic comparison, so their hints point at the idea that was missed.
"""

from __future__ import annotations

import math
from numbers import Integral

from ..check import check_bits, check_value
from ..check_base import CheckResult
from ..check_items import check_set
from ..formats import FORMATS, decompose, round_to
from . import Mistake, answer_names, combine, exercise, finite_float

BITS_VALUE = -6.5  # exercise 1: the value whose FP16 and BF16 bits the learner writes
INTEGER_FORMAT = "bf16"  # exercise 2: the format whose integers are counted
ULP_VALUE, ULP_FORMAT = 1000.0, "fp16"  # exercise 3: the spacing of FP16 at 1000
TINY_VALUE = 1e-20  # exercise 4: which formats keep it non-zero


# Exercise 1: the bits of -6.5 in FP16 and BF16

_BIAS_HINT = "the exponent field stores the power of two plus the format's bias, not the power itself"
_IMPLICIT_HINT = "a normal number's leading 1 is implicit: the mantissa field holds only the fraction bits after the binary point"
_SIGN_HINT = "the sign bit is 1 for a negative value"
_GENERIC_BITS_HINT = (
    "split {v} into (1 + fraction) × 2**power; the exponent field stores power + bias (bias {bias}); "
    "the mantissa holds the fraction in binary"
)


def _bits_hint(answer, fmt: str) -> str:
    """The hint for ``answer`` as the bits of BITS_VALUE in ``fmt``: the missed idea when it is a known slip."""
    f = FORMATS[fmt]
    d = decompose(BITS_VALUE, fmt)
    generic = _GENERIC_BITS_HINT.format(v=abs(BITS_VALUE), bias=f.bias)
    bits = "".join(answer.split()) if isinstance(answer, str) else ""
    if len(bits) != f.total_bits or not set(bits) <= {"0", "1"}:
        return generic
    ne = f.exponent_bits
    sign, exponent, mantissa = bits[0], bits[1 : 1 + ne], bits[1 + ne :]
    want_sign, want_exponent, want_mantissa = d.bits[0], d.bits[1 : 1 + ne], d.bits[1 + ne :]
    power = d.exponent - f.bias
    if exponent != want_exponent and power >= 0 and exponent == format(power, f"0{ne}b"):
        return _BIAS_HINT
    # The significand 1.fraction written whole: the leading 1, then the fraction, cut to M bits.
    with_leading_one = ("1" + want_mantissa)[: f.mantissa_bits]
    if mantissa != want_mantissa and mantissa == with_leading_one:
        return _IMPLICIT_HINT
    if sign != want_sign and exponent == want_exponent and mantissa == want_mantissa:
        return _SIGN_HINT
    return generic


@exercise(
    1,
    "Predict the bits",
    mistakes=[
        Mistake("exponent without the bias", _BIAS_HINT),
        Mistake("implicit 1 written out", _IMPLICIT_HINT),
        Mistake("sign of a negative value", _SIGN_HINT),
    ],
)
def ex1(answer_fp16, answer_bf16, *, show: bool = True) -> CheckResult:
    """The FP16 and BF16 bit patterns of -6.5, as strings "sign exponent mantissa"."""
    parts = [
        check_bits(answer, value=BITS_VALUE, fmt=fmt, name=name, hint=_bits_hint(answer, fmt), show=False)
        for answer, fmt, name in ((answer_fp16, "fp16", "answer_fp16"), (answer_bf16, "bf16", "answer_bf16"))
    ]
    return combine(parts, show=show)


# Exercise 2: the largest n with every integer 0..n exact in BF16

_IMPLICIT_COUNT_HINT = "count the implicit leading 1 too: it is a bit of precision the format does not store"
_POWER_HINT = (
    "the power of two at the end of the run is itself exact: a power of two needs one significant bit"
)
_FIRST_LOST_HINT = "give the last integer of the unbroken run, not the first one that is lost"
_BITS_FOR_N_HINT = "give the integer n itself, not the number of bits it needs"


def _largest_exact_integer(fmt: str) -> int:
    """The largest n such that every integer 0..n survives a round trip through ``fmt`` (searched)."""
    n = 1
    while round_to(float(n + 1), fmt).item() == n + 1:
        n += 1
    return n


@exercise(
    2,
    "Integers in BF16",
    mistakes=[
        Mistake("forgetting the implicit 1", _IMPLICIT_COUNT_HINT),
        Mistake("one below the power of two", _POWER_HINT),
        Mistake("the first integer lost", _FIRST_LOST_HINT),
        Mistake("the number of bits for n", _BITS_FOR_N_HINT),
    ],
)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """The largest n such that every integer from 0 to n is exactly representable in BF16."""
    expected = _largest_exact_integer(INTEGER_FORMAT)
    stored = FORMATS[INTEGER_FORMAT].mantissa_bits
    hint = f"BF16 stores {stored} mantissa bits; where does the gap between neighbouring values become 2?"
    a = finite_float(answer)
    if a is not None and a != expected:
        if a in (2.0**stored, 2.0**stored - 1):
            hint = _IMPLICIT_COUNT_HINT
        elif a == expected - 1:
            hint = _POWER_HINT
        elif a == expected + 1:
            hint = _FIRST_LOST_HINT
        elif a in (stored + 1, stored):
            hint = _BITS_FOR_N_HINT
    return check_value(answer, expected, name="answer", hint=hint, show=show)


# Exercise 3: FP16's ulp at 1000

_EPS_HINT = "eps is the spacing just above 1; the spacing grows with the power of two the value lies above"
_POWER_ABOVE_HINT = "take the power of two just below the value: the value lies in [2**e, 2**(e + 1))"
_EXPONENT_HINT = "give the gap itself, 2.0**j, not the exponent j"
_HALF_HINT = "the ulp is the whole gap to the next value; half of it is the largest rounding error"


@exercise(
    3,
    "FP16's spacing at 1000",
    mistakes=[
        Mistake("eps for the ulp", _EPS_HINT),
        Mistake("the power of two above", _POWER_ABOVE_HINT),
        Mistake("the exponent for the gap", _EXPONENT_HINT),
        Mistake("half the gap", _HALF_HINT),
    ],
)
def ex3(answer, *, show: bool = True) -> CheckResult:
    """FP16's ulp (the gap to the next larger value) at 1000.0."""
    f = FORMATS[ULP_FORMAT]
    expected = decompose(ULP_VALUE, ULP_FORMAT).ulp
    hint = (
        f"find the power of two just below {ULP_VALUE:g}: FP16 splits the interval from it to the next power "
        f"of two into 2**{f.mantissa_bits} equal steps"
    )
    a = finite_float(answer)
    if a is not None and a != expected:
        below = 2.0 ** math.floor(math.log2(ULP_VALUE))
        if a == f.eps:
            hint = _EPS_HINT
        elif a == 2 * below * f.eps:
            hint = _POWER_ABOVE_HINT
        elif isinstance(answer, Integral) and a == math.log2(expected):
            hint = _EXPONENT_HINT
        elif a == expected / 2:
            hint = _HALF_HINT
    return check_value(answer, expected, dtype=ULP_FORMAT, name="answer", hint=hint, show=show)


# Exercise 4: which formats keep 1e-20 non-zero

_FP8_HINT = "compare the value with each FP8 format's smallest subnormal: FP8 covers only a few decades"
_MANTISSA_HINT = (
    "range comes from the exponent bits, not the mantissa bits: group the formats by exponent bits"
)
_TF32_HINT = "TF32 has no storage type, but it keeps FP32's exponent bits and so its range"


@exercise(
    4,
    "How far down?",
    mistakes=[
        Mistake("listing an FP8 format", _FP8_HINT),
        Mistake("sorting by mantissa bits", _MANTISSA_HINT),
        Mistake("forgetting TF32", _TF32_HINT),
    ],
)
def ex4(answer, *, show: bool = True) -> CheckResult:
    """The set of format names (from ``FORMATS``) that keep 1e-20 non-zero."""
    expected = {name for name in FORMATS if decompose(TINY_VALUE, name).kind != "zero"}
    hint = f"the exponent bits set the range: compare {TINY_VALUE:g} with each format's smallest subnormal"
    chosen = answer_names(answer)
    if chosen is not None:
        wrongly_kept = chosen - expected
        if wrongly_kept & {"fp8_e4m3", "fp8_e5m2"}:
            hint = _FP8_HINT
        elif "fp16" in wrongly_kept:
            hint = _MANTISSA_HINT
        elif chosen == expected - {"tf32"}:
            hint = _TF32_HINT
    explanations = {
        name: f"its smallest subnormal is {FORMATS[name].min_subnormal:.3g}: {TINY_VALUE:g} rounds to 0"
        for name in FORMATS
        if name not in expected
    }
    return check_set(answer, expected, options=list(FORMATS), explanations=explanations, hint=hint, show=show)
