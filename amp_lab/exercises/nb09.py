"""Exercises of notebook 09 (pitfalls practitioners hit): expected values come from torch's own casts
(float16's rounding of powers of ten, bfloat16's spacing and tie rule) and from the learner's ``att``."""

from __future__ import annotations

import math

import torch

from ..check import check_value
from ..check_base import CheckResult, finish, norm
from ..check_items import check_set
from ..pitfalls import ATTENTION_VARIANTS
from . import Mistake, exercise, finite_float

__all__ = ["ex1", "ex2", "ex3", "SWAMP_WEIGHT", "MAX_POWER"]

MAX_POWER = 30  # exercise 1 looks at 10**-1 ... 10**-MAX_POWER
SWAMP_WEIGHT = 256.0  # exercise 2: the bfloat16 weight that receives the updates


def _one_number(answer, expected: float, slip, hint: str, show: bool, **tolerance) -> CheckResult:
    """``answer`` against ``expected``: a collection is not one number; a slip (``slip(a)``, the hint of the
    mistake it recognises) gets its hint alone (the generic ratio notes would mislead); else check_value."""
    if isinstance(answer, (list, tuple, set, frozenset, dict)) or (
        isinstance(answer, torch.Tensor) and answer.numel() != 1
    ):
        text = f"`answer` is a {type(answer).__name__}; this exercise wants one number."
        return finish("wrong", text, show=show)
    a = finite_float(answer)
    if a is not None and a != expected and (slip_hint := slip(a)):
        text = f"`answer` = {answer!r} is not the right value yet."
        return finish("wrong", text, [f"hint: {slip_hint}"], show=show)
    return check_value(answer, expected, hint=hint, show=show, **tolerance)


def _fp16(x: float) -> float:
    return torch.tensor(x, dtype=torch.float16).item()


# Exercise 1's common wrong answers: name -> hint.
_EX1 = {
    "k for eps": "give eps itself (a float such as 10.0**-k), not the exponent k",
    "a power float16 keeps": "float16 still keeps that one, as a subnormal: compare each power of ten with half "
    "of the smallest subnormal",
    "the subnormal itself": "the answer is of the form 10**-k: which power of ten is the first below the "
    "rounding boundary?",
    "not the largest lost": "float16 loses that one too, but it is not the largest power of ten it loses",
}


@exercise(1, "An eps float16 can hold", mistakes=[Mistake(*m) for m in _EX1.items()])
def ex1(answer, *, show: bool = True) -> CheckResult:
    """The largest ``eps`` of the form ``10**-k`` that float16 rounds to zero."""
    powers = [10.0**-k for k in range(1, MAX_POWER + 1)]
    largest_lost = next(p for p in powers if _fp16(p) == 0.0)
    subnormal = torch.finfo(torch.float16).tiny * torch.finfo(torch.float16).eps

    def slip(a: float) -> str | None:
        if a.is_integer() and 1 <= a <= MAX_POWER:
            return _EX1["k for eps"]
        if a > 0 and any(math.isclose(a, p, rel_tol=1e-9) for p in powers):
            return _EX1["a power float16 keeps" if _fp16(a) != 0.0 else "not the largest lost"]
        if a > 0 and any(math.isclose(a, s, rel_tol=0.02) for s in (subnormal, subnormal / 2)):
            return _EX1["the subnormal itself"]
        return None

    hint = (
        "half of float16's smallest subnormal (2**-24) is the rounding boundary; which power of ten is the first "
        "one below it?"
    )
    return _one_number(answer, largest_lost, slip, hint, show, rtol=1e-9)


def _bf16_gap_above(w: float) -> float:
    t = torch.tensor(w, dtype=torch.bfloat16)
    return (torch.nextafter(t, torch.tensor(math.inf, dtype=torch.bfloat16)) - t).item()


# Exercise 2's common wrong answers: name -> hint.
_EX2 = {
    "the whole gap": "an update of a whole gap lands exactly on the next bfloat16 value: it is not lost",
    "the spacing at 1.0": "the spacing of bfloat16 grows with the value: how far apart are its numbers between "
    "256 and 512?",
    "just below the tie": "mind the tie: a sum exactly halfway between two bfloat16 numbers rounds to the one "
    "with an even last bit",
}


@exercise(2, "The swamping threshold", mistakes=[Mistake(*m) for m in _EX2.items()])
def ex2(answer, *, show: bool = True) -> CheckResult:
    """The largest update ``u > 0`` with ``bfloat16(SWAMP_WEIGHT + u) == SWAMP_WEIGHT``."""
    gap, at_one = _bf16_gap_above(SWAMP_WEIGHT), _bf16_gap_above(1.0)
    half = gap / 2
    # a tie goes to the neighbour with an even last bit: is an update of half the gap itself lost?
    tie_lost = (torch.tensor(SWAMP_WEIGHT) + half).to(torch.bfloat16).item() == SWAMP_WEIGHT
    largest_lost = half if tie_lost else math.nextafter(half, 0.0)

    def slip(a: float) -> str | None:
        if math.isclose(a, gap, rel_tol=1e-6):
            return _EX2["the whole gap"]
        if any(math.isclose(a, g, rel_tol=1e-6) for g in (at_one, at_one / 2, at_one / 4)):
            return _EX2["the spacing at 1.0"]
        return _EX2["just below the tie"] if half / 2 < a < largest_lost else None

    hint = "bfloat16 keeps 8 significant bits: how far apart are the bfloat16 numbers between 256 and 512?"
    return _one_number(answer, largest_lost, slip, hint, show)


_TOO_LATE_HINT = "the float16 logits are already inf: a float32 softmax of inf - inf is still nan"
_BF16_HINT = "bfloat16 has float32's range: is range or precision what overflowed here?"
_SCALE_HINT = "what does dividing Q by sqrt(d) before the matmul do to the size of the logits it produces?"
# (a variant, whether it is a fix or a non-fix when the mistake is made, the mistake of judging it wrong)
_VARIANT_MISTAKES = (
    ("fp16 logits, fp32 softmax", False, Mistake("fp32 softmax rescues it", _TOO_LATE_HINT)),
    ("bf16", True, Mistake("bf16 left out", _BF16_HINT)),
    ("fp16 with Q scaled first", True, Mistake("scaling first left out", _SCALE_HINT)),
)


@exercise(3, "Which fixes work?", mistakes=[m for *_, m in _VARIANT_MISTAKES])
def ex3(answer, att, *, show: bool = True) -> CheckResult:
    """Which of the attention variants other than plain "fp16" keep every probability finite for the inputs
    of ``att`` (:func:`amp_lab.pitfalls.attention_overflow`): a set of variant names."""
    options = [n for n in ATTENTION_VARIANTS if n != "fp16"]
    finite = {n for n in options if att.variants[n].ok}
    items = answer if isinstance(answer, (set, frozenset, list, tuple)) else [answer]
    picked = {norm(x) for x in items if isinstance(x, str)}
    hints = [
        m.hint for name, fix, m in _VARIANT_MISTAKES if (name in finite) == fix != (norm(name) in picked)
    ]
    hints.append("a fix has to act before or inside the matmul whose output overflows")
    return check_set(answer, sorted(finite), options=options, hint="; ".join(hints), show=show)
