"""Exercises of notebook 09 (pitfalls): expected values come from torch's own casts (float16's rounding of
powers of ten, bfloat16's spacing and tie rule) and, for attention, from float64 on inputs kept hidden."""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from ..check import check_value
from ..check_base import CheckResult, finish
from ..check_items import check_function
from . import Mistake, exercise, finite_float, wrong

__all__ = ["ex1", "ex2", "ex3", "SWAMP_WEIGHT", "MAX_POWER"]

MAX_POWER = 30  # exercise 1 looks at 10**-1 ... 10**-MAX_POWER
SWAMP_WEIGHT = 256.0  # exercise 2: the bfloat16 weight that receives the updates


def _one_number(answer, expected: float, slip, hint: str, show: bool, **tolerance) -> CheckResult:
    """``answer`` against ``expected``: a collection is not one number; a wrong number gets the hint of the
    slip it makes (``slip(a)``) or ``hint``, never how far off it is (that would give the answer away)."""
    many = isinstance(answer, (list, tuple, set, frozenset, dict))
    if many or (isinstance(answer, torch.Tensor) and answer.numel() != 1):
        text = f"`answer` is a {type(answer).__name__}; this exercise wants one number."
        return finish("wrong", text, show=show)
    a = finite_float(answer)
    if a is not None and not check_value(answer, expected, show=False, **tolerance).ok:
        return wrong(f"`answer` = {answer!r} is not the right value yet.", slip(a) or hint, show=show)
    return check_value(answer, expected, hint=hint, show=show, **tolerance)


def _fp16(x: float) -> float:
    return torch.tensor(x, dtype=torch.float16).item()


# Exercise 1's common wrong answers: name -> hint.
_EX1 = {
    "k for eps": "give eps itself (a float such as 10.0**-k), not the exponent k",
    "a power float16 keeps": "float16 still keeps that one, as a subnormal: compare each power of ten with half of the smallest subnormal",
    "the subnormal itself": "the answer is of the form 10**-k: which power of ten is the first below the rounding boundary?",
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

    hint = "half of float16's smallest subnormal (2**-24) is the rounding boundary; which power of ten is the first one below it?"
    return _one_number(answer, largest_lost, slip, hint, show, rtol=1e-9)


def _bf16_gap_above(w: float) -> float:
    t = torch.tensor(w, dtype=torch.bfloat16)
    return (torch.nextafter(t, torch.tensor(math.inf, dtype=torch.bfloat16)) - t).item()


# Exercise 2's common wrong answers: name -> hint.
_EX2 = {
    "the whole gap": "an update of a whole gap lands exactly on the next bfloat16 value: it is not lost",
    "the spacing at 1.0": "the spacing of bfloat16 grows with the value: how far apart are its numbers between 256 and 512?",
    "just below the tie": "mind the tie: a sum exactly halfway between two bfloat16 numbers rounds to the one with an even last bit",
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


class _Dtypes(TorchFunctionMode):
    """Records in ``seen`` the float dtypes of the tensors (with a dimension) that torch calls under it return."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.seen |= {
            t.dtype for t in outs if isinstance(t, torch.Tensor) and t.dim() and t.is_floating_point()
        }
        return out


def _attention_cases():
    """Exercise 3's seeded inputs: entries up to 60 and 120, where float16 Q @ K.T overflows (each row's two largest
    scaled logits over 40 apart, beyond float16's rounding), and small ones, where the scale factor shows."""
    gen = torch.Generator().manual_seed(38)

    def draw(seq, d, magnitude, low=0.0):
        return tuple((low + (magnitude - low) * torch.rand(seq, d, generator=gen)).half() for _ in "QK")

    return [draw(16, 64, 60.0), draw(12, 128, 50.0), draw(8, 64, 120.0, low=-120.0), draw(10, 64, 1.0)]


def _attention_reference(Q, K):
    """torch in float64, rounded once to float16."""
    return torch.softmax(Q.double() @ K.double().T / math.sqrt(Q.shape[-1]), dim=-1).half()


# Exercise 3's common wrong answers: name -> hint; the last two are slips run beside the learner's function.
_EX3 = {
    "an upcast": "float32 or bfloat16 logits are a fix too, but here every tensor your function makes stays float16: keep the logits inside float16's range instead",
    "scaling after the matmul": "Q @ K.T is already inf in float16 when you scale it",
    "1/d for 1/sqrt(d)": "compare your factor with the one in softmax(Q K^T / sqrt(d))",
}
_ATTENTION_SLIPS = {
    "scaling after the matmul": lambda Q, K: torch.softmax((Q @ K.T) / math.sqrt(Q.shape[-1]), dim=-1),
    "1/d for 1/sqrt(d)": lambda Q, K: torch.softmax((Q / Q.shape[-1]) @ K.T, dim=-1),
}


def _diagnose(fn) -> str | None:
    """The hint of the mistake the learner's ``fn`` makes on every case, if one (None also when it raises:
    the generic check reports that)."""
    mode, cases = _Dtypes(), _attention_cases()
    mode.seen = set()
    try:
        with mode:
            outs = [fn(Q, K) for Q, K in cases]
        if mode.seen - {torch.float16}:
            return _EX3["an upcast"]
        for m, slip in _ATTENTION_SLIPS.items():
            same = (
                torch.allclose(o.double(), slip(Q, K).double(), atol=1e-3, equal_nan=True)
                for o, (Q, K) in zip(outs, cases, strict=True)
            )
            if all(same):
                return _EX3[m]
    except Exception:  # the learner's code: the generic check reports it
        return None
    return None


@exercise(3, "Attention probabilities in float16", mistakes=_EX3)
def ex3(answer, *, show: bool = True) -> CheckResult:
    """``answer`` is the learner's ``attention_probs(Q, K)``: ``softmax(Q K^T / sqrt(d))`` of float16
    ``(seq, d)`` tensors, every tensor it makes float16; compared with float64 on hidden inputs."""
    name = "attention_probs"
    if callable(answer) and (slip_hint := _diagnose(answer)):
        return wrong(f"{name} does not give softmax(Q K^T / sqrt(d)) in float16 yet.", slip_hint, show=show)
    hint = "the logits overflow float16 before softmax sees them: where can the 1/sqrt(d) act instead?"
    opts = dict(name=name, rtol=0.01, atol=1e-3, hint=hint, show=show)
    return check_function(answer, _attention_reference, _attention_cases(), **opts)
