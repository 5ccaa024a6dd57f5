"""Exercises of notebook 01 (floating-point formats, bit by bit): expected values come from
:mod:`amp_lab.formats`; the common wrong answers are recognised first, so their hints name the missed idea."""

from __future__ import annotations

import math
from numbers import Integral

from ..check import check_bits, check_value
from ..check_base import CheckResult
from ..check_items import check_set
from ..formats import FORMATS, decompose, round_to
from . import answer_names, combine, exercise, finite_float

BITS_VALUE = -6.5  # exercise 1: the value whose FP16 and BF16 bits the learner writes
TINY_VALUE = 1e-20  # exercise 4: which formats keep it non-zero


def _bits_hint(answer, fmt: str) -> str:
    """The hint for ``answer`` as the bits of BITS_VALUE in ``fmt``: the missed idea when it is a known slip."""
    f, d = FORMATS[fmt], decompose(BITS_VALUE, fmt)
    generic = f"split {abs(BITS_VALUE)} into (1 + fraction) × 2**power; the exponent field stores power + bias (bias {f.bias}); the mantissa holds the fraction in binary"
    bits = "".join(answer.split()) if isinstance(answer, str) else ""
    if len(bits) != f.total_bits or not set(bits) <= {"0", "1"}:
        return generic
    ne, power = f.exponent_bits, d.exponent - f.bias
    sign, exponent, mantissa = bits[0], bits[1 : 1 + ne], bits[1 + ne :]
    want_sign, want_exponent, want_mantissa = d.bits[0], d.bits[1 : 1 + ne], d.bits[1 + ne :]
    return ex1.hint(
        generic,
        exponent != want_exponent and power >= 0 and exponent == format(power, f"0{ne}b"),
        # the significand 1.fraction written whole: the leading 1, then the fraction, cut to M bits
        mantissa != want_mantissa and mantissa == ("1" + want_mantissa)[: f.mantissa_bits],
        sign != want_sign and exponent == want_exponent and mantissa == want_mantissa,
    )


_EX1 = {
    "exponent without the bias": "the exponent field stores the power of two plus the format's bias, not the power itself",
    "implicit 1 written out": "a normal number's leading 1 is implicit: the mantissa field holds only the fraction bits after the binary point",
    "sign of a negative value": "the sign bit is 1 for a negative value",
}


@exercise(1, "Predict the bits", mistakes=_EX1)
def ex1(answer_fp16, answer_bf16, *, show: bool = True) -> CheckResult:
    """The FP16 and BF16 bit patterns of -6.5, as strings "sign exponent mantissa"."""
    parts = [
        check_bits(answer, value=BITS_VALUE, fmt=fmt, name=name, hint=_bits_hint(answer, fmt), show=False)
        for answer, fmt, name in ((answer_fp16, "fp16", "answer_fp16"), (answer_bf16, "bf16", "answer_bf16"))
    ]
    return combine(parts, show=show)


_EX2 = {
    "forgetting the implicit 1": "count the implicit leading 1 too: it is a bit of precision the format does not store",
    "one below the power of two": "the power of two at the end of the run is itself exact: a power of two needs one significant bit",
    "the first integer lost": "give the last integer of the unbroken run, not the first one that is lost",
    "the number of bits for n": "give the integer n itself, not the number of bits it needs",
}


@exercise(2, "Integers in BF16", mistakes=_EX2)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """The largest n such that every integer from 0 to n is exactly representable in BF16."""
    expected = 1  # searched: the last n + 1 that survives a round trip through BF16
    while round_to(float(expected + 1), "bf16").item() == expected + 1:
        expected += 1
    stored, a = FORMATS["bf16"].mantissa_bits, finite_float(answer)
    hint = ex2.hint(
        f"BF16 stores {stored} mantissa bits; where does the gap between neighbouring values become 2?",
        a in (2.0**stored, 2.0**stored - 1),
        a == expected - 1,
        a == expected + 1,
        a in (stored + 1, stored),
    )
    return check_value(answer, expected, name="answer", hint=hint, show=show)


_EX3 = {
    "eps for the ulp": "eps is the spacing just above 1; the spacing grows with the power of two the value lies above",
    "the power of two above": "take the power of two just below the value: the value lies in [2**e, 2**(e + 1))",
    "the exponent for the gap": "give the gap itself, 2.0**j, not the exponent j",
    "half the gap": "the ulp is the whole gap to the next value; half of it is the largest rounding error",
}


@exercise(3, "FP16's spacing at 1000", mistakes=_EX3)
def ex3(answer, *, show: bool = True) -> CheckResult:
    """FP16's ulp (the gap to the next larger value) at 1000.0."""
    f, expected, a = FORMATS["fp16"], decompose(1000.0, "fp16").ulp, finite_float(answer)
    hint = ex3.hint(
        f"find the power of two just below 1000: FP16 splits the interval from it to the next power of two into 2**{f.mantissa_bits} equal steps",
        a == f.eps,
        a == 2 * 2.0 ** math.floor(math.log2(1000.0)) * f.eps,
        isinstance(answer, Integral) and a == math.log2(expected),
        a == expected / 2,
    )
    return check_value(answer, expected, dtype="fp16", name="answer", hint=hint, show=show)


_EX4 = {
    "listing an FP8 format": "compare the value with each FP8 format's smallest subnormal: FP8 covers only a few decades",
    "sorting by mantissa bits": "range comes from the exponent bits, not the mantissa bits: group the formats by exponent bits",
    "forgetting TF32": "a format torch cannot store still has a range: count every format whose exponent bits reach that far down, stored or not",
}


@exercise(4, "How far down?", mistakes=_EX4)
def ex4(answer, *, show: bool = True) -> CheckResult:
    """The set of format names (from ``FORMATS``) that keep 1e-20 non-zero."""
    expected = {name for name in FORMATS if decompose(TINY_VALUE, name).kind != "zero"}
    chosen = answer_names(answer) or set()
    hint = ex4.hint(
        f"the exponent bits set the range: compare {TINY_VALUE:g} with each format's smallest subnormal",
        bool((chosen - expected) & {"fp8_e4m3", "fp8_e5m2"}),
        "fp16" in chosen - expected,
        chosen == expected - {"tf32"},
    )
    sub = {n: FORMATS[n].min_subnormal for n in FORMATS if n not in expected}
    why = {n: f"its smallest subnormal is {v:.3g}: {TINY_VALUE:g} rounds to 0" for n, v in sub.items()}
    return check_set(answer, expected, options=list(FORMATS), explanations=why, hint=hint, show=show)
