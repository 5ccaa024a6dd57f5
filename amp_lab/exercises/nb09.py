"""Exercises of notebook 09 (pitfalls practitioners hit).

The expected values are computed here with torch's own casts (float16's rounding of powers of ten,
bfloat16's spacing and its tie rule) and from the attention experiment the learner's notebook ran
(``att``), never typed in; the common wrong answers are diagnosed before the generic comparison.
"""

from __future__ import annotations

import math
from numbers import Real

import torch

from .._checks import ArgumentTypeError
from ..check import check_value
from ..check_base import CheckResult, finish, is_placeholder
from ..check_items import check_set
from ..pitfalls import ATTENTION_VARIANTS, AttentionOverflowResult
from . import Mistake, exercise

__all__ = ["ex1", "ex2", "ex3", "SWAMP_WEIGHT", "MAX_POWER"]

MAX_POWER = 30  # exercise 1 looks at 10**-1 ... 10**-MAX_POWER
SWAMP_WEIGHT = 256.0  # exercise 2: the bfloat16 weight that receives the updates


def _is_number(x) -> bool:
    """A real number a float can hold (an integer beyond float64's range is left to the generic check)."""
    if not isinstance(x, Real) or isinstance(x, bool):
        return False
    try:
        float(x)
    except OverflowError:
        return False
    return True


def _diagnosed(answer, hint: str, show: bool) -> CheckResult:
    """ "Not yet" for a common wrong answer: the hint for the idea it missed, and nothing that would mislead."""
    return finish("wrong", f"`answer` = {answer!r} is not the right value yet.", [f"hint: {hint}"], show=show)


def _one_number(answer, show: bool) -> CheckResult | None:
    """ "Not yet" for a collection given where one number is asked for (a list [1.0] is not the number 1.0)."""
    if isinstance(answer, (list, tuple, set, frozenset, dict)) or (
        isinstance(answer, torch.Tensor) and answer.numel() != 1
    ):
        return finish(
            "wrong", f"`answer` is a {type(answer).__name__}; this exercise wants one number.", show=show
        )
    return None


def _fp16(x: float) -> float:
    return torch.tensor(x, dtype=torch.float16).item()


# --------------------------------------------------------------------------------------------
# Exercise 1: the largest power of ten float16 rounds to zero
# --------------------------------------------------------------------------------------------

_K_HINT = "give eps itself (a float such as 10.0**-k), not the exponent k"
_KEPT_HINT = "float16 still keeps that one, as a subnormal: compare each power of ten with half of the smallest subnormal"
_NOT_POWER_HINT = (
    "the answer is of the form 10**-k: which power of ten is the first below the rounding boundary?"
)
_NOT_LARGEST_HINT = "float16 loses that one too, but it is not the largest power of ten it loses"
_EPS_HINT = "half of float16's smallest subnormal (2**-24) is the rounding boundary; which power of ten is the first one below it?"


@exercise(
    1,
    "An eps float16 can hold",
    mistakes=[
        Mistake("k for eps", _K_HINT),
        Mistake("a power float16 keeps", _KEPT_HINT),
        Mistake("the subnormal itself", _NOT_POWER_HINT),
        Mistake("not the largest lost", _NOT_LARGEST_HINT),
    ],
)
def ex1(answer, *, show: bool = True) -> CheckResult:
    """The largest ``eps`` of the form ``10**-k`` that float16 rounds to zero."""
    if (odd := _one_number(answer, show)) is not None:
        return odd
    powers = [10.0**-k for k in range(1, MAX_POWER + 1)]
    largest_lost = next(e for e in powers if _fp16(e) == 0.0)
    hint = _EPS_HINT
    if _is_number(answer) and math.isfinite(float(answer)) and answer != largest_lost:
        a = float(answer)
        smallest_subnormal = torch.finfo(torch.float16).tiny * torch.finfo(torch.float16).eps
        is_power = a > 0 and any(math.isclose(a, p, rel_tol=1e-9) for p in powers)
        if float(a).is_integer() and 1 <= a <= MAX_POWER:
            hint = _K_HINT
        elif is_power and _fp16(a) != 0.0:
            hint = _KEPT_HINT
        elif is_power:
            hint = _NOT_LARGEST_HINT
        elif a > 0 and any(
            math.isclose(a, s, rel_tol=0.02) for s in (smallest_subnormal, smallest_subnormal / 2)
        ):
            hint = _NOT_POWER_HINT
        if hint != _EPS_HINT:  # a diagnosed slip: its hint alone (the generic ratio notes would mislead)
            return _diagnosed(answer, hint, show)
    return check_value(answer, largest_lost, rtol=1e-9, hint=hint, show=show)


# --------------------------------------------------------------------------------------------
# Exercise 2: the swamping threshold at 256
# --------------------------------------------------------------------------------------------

_GAP_HINT = "an update of a whole gap lands exactly on the next bfloat16 value: it is not lost"
_SPACING_HINT = (
    "the spacing of bfloat16 grows with the value: how far apart are its numbers between 256 and 512?"
)
_TIE_HINT = (
    "mind the tie: a sum exactly halfway between two bfloat16 numbers rounds to the one with an even last bit"
)
_SWAMP_HINT = "bfloat16 keeps 8 significant bits: how far apart are the bfloat16 numbers between 256 and 512?"


def _bf16_gap_above(w: float) -> float:
    t = torch.tensor(w, dtype=torch.bfloat16)
    return (torch.nextafter(t, torch.tensor(math.inf, dtype=torch.bfloat16)) - t).item()


@exercise(
    2,
    "The swamping threshold",
    mistakes=[
        Mistake("the whole gap", _GAP_HINT),
        Mistake("the spacing at 1.0", _SPACING_HINT),
        Mistake("just below the tie", _TIE_HINT),
    ],
)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """The largest update ``u > 0`` with ``bfloat16(SWAMP_WEIGHT + u) == SWAMP_WEIGHT``."""
    if (odd := _one_number(answer, show)) is not None:
        return odd
    w = torch.tensor(SWAMP_WEIGHT, dtype=torch.bfloat16)
    gap = _bf16_gap_above(SWAMP_WEIGHT)
    half_gap = gap / 2
    lost_at_half = (w.float() + half_gap).to(
        torch.bfloat16
    ).item() == SWAMP_WEIGHT  # the tie goes to the even one
    largest_lost = (
        half_gap if lost_at_half else float(torch.nextafter(torch.tensor(half_gap), torch.tensor(0.0)))
    )
    hint = _SWAMP_HINT
    if _is_number(answer) and math.isfinite(float(answer)) and answer != largest_lost:
        a = float(answer)
        gap_at_one = _bf16_gap_above(1.0)
        if math.isclose(a, gap, rel_tol=1e-6):
            hint = _GAP_HINT
        elif any(math.isclose(a, g, rel_tol=1e-6) for g in (gap_at_one, gap_at_one / 2, gap_at_one / 4)):
            hint = _SPACING_HINT
        elif half_gap / 2 < a < largest_lost:
            hint = _TIE_HINT
        if hint != _SWAMP_HINT:
            return _diagnosed(answer, hint, show)
    return check_value(answer, largest_lost, hint=hint, show=show)


# --------------------------------------------------------------------------------------------
# Exercise 3: which fixes of the attention overflow work?
# --------------------------------------------------------------------------------------------

_TOO_LATE_HINT = "the float16 logits are already inf: a float32 softmax of inf - inf is still nan"
_BF16_HINT = "bfloat16 has float32's range: is range or precision what overflowed here?"
_SCALE_HINT = "what does dividing Q by sqrt(d) before the matmul do to the size of the logits it produces?"
_ACT_BEFORE_HINT = "a fix has to act before or inside the matmul whose output overflows"


@exercise(
    3,
    "Which fixes work?",
    mistakes=[
        Mistake("fp32 softmax rescues it", _TOO_LATE_HINT),
        Mistake("bf16 left out", _BF16_HINT),
        Mistake("scaling first left out", _SCALE_HINT),
    ],
)
def ex3(answer, att, *, show: bool = True) -> CheckResult:
    """Which of the attention variants other than plain "fp16" keep every probability finite for the inputs
    of ``att`` (:func:`amp_lab.pitfalls.attention_overflow`): a set of variant names."""
    if not isinstance(att, AttentionOverflowResult):
        raise ArgumentTypeError(
            f"att must be the result of pitfalls.attention_overflow, got {type(att).__name__}"
        )
    options = [n for n in ATTENTION_VARIANTS if n != "fp16"]
    finite = {n for n in options if att.variants[n].ok}
    if not finite:  # every variant overflowed: these inputs cannot tell the fixes apart
        raise ValueError(
            "att has no variant that stays finite: run pitfalls.attention_overflow with the notebook's inputs"
        )
    hints = []
    if not is_placeholder(answer):
        picked = {
            " ".join(str(x).split()).lower()
            for x in (answer if isinstance(answer, (set, frozenset, list, tuple)) else [answer])
        }
        too_late = "fp16 logits, fp32 softmax"
        if too_late not in finite and too_late in picked:
            hints.append(_TOO_LATE_HINT)
        if "bf16" in finite and "bf16" not in picked:
            hints.append(_BF16_HINT)
        if "fp16 with Q scaled first" in finite and "fp16 with q scaled first" not in picked:
            hints.append(_SCALE_HINT)
    hints.append(_ACT_BEFORE_HINT)
    return check_set(answer, sorted(finite), options=options, hint="; ".join(hints), show=show)
