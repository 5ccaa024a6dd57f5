"""Exercises of notebook 02 (Tensor Cores: what they compute): expected values come from the emulation in
:mod:`amp_lab.tensor_cores` on the notebook's data; common wrong answers are recognised first, by name."""

from __future__ import annotations

import functools

import torch

from ..alignment import alignment_multiple
from ..check import check_tensor, check_value
from ..check_base import CheckResult
from ..check_items import check_set
from ..device import float64_on_cpu
from ..formats import FORMATS
from ..tensor_cores import ACCUMULATE_FORMATS, mma, running_sum
from . import answer_names, combine, exercise, finite_float

SUM_TERM, SUM_LENGTH = 0.1, 4096  # exercise 3: 4096 FP16 copies of 0.1, summed by a kernel
SUM_TOLERANCE = 0.01  # exercise 3: "within 1 % of the exact sum"


def _close_to(answer, target: torch.Tensor, atol: float) -> bool:
    """Does a tensor ``answer`` equal ``target`` within ``atol`` (shape and all)?"""
    if not isinstance(answer, torch.Tensor) or not answer.is_floating_point() or answer.shape != target.shape:
        return False
    a = float64_on_cpu(answer)
    return bool(torch.isfinite(a).all()) and bool(((a - float64_on_cpu(target)).abs() <= atol).all())


def _fp16_valued(answer) -> bool:
    """Is ``answer`` a non-zero tensor every value of which FP16 holds exactly (a result rounded to FP16)?"""
    if not isinstance(answer, torch.Tensor) or not answer.is_floating_point() or answer.numel() == 0:
        return False
    a = float64_on_cpu(answer)
    return bool(torch.isfinite(a).all()) and bool((a != 0).any()) and torch.equal(a.half().double(), a)


_EX1 = {
    "inputs not rounded to FP16": "the Tensor Core never sees A and B in float32: they are rounded to FP16 before the products",
    "sum rounded to FP16": "the products and the running sum stay in FP32; only the inputs A and B are FP16",
    "forgetting C": "the accumulator starts from C: D = A·B + C",
}


@exercise(1, "One Tensor Core operation, with plain torch", mistakes=_EX1)
def ex1(answer, A, B, C, *, show: bool = True) -> CheckResult:
    """``D = A·B + C`` as a Tensor Core with FP16 inputs and an FP32 accumulator computes it."""
    k = A.shape[1]
    A64, B64, C64 = (float64_on_cpu(t.float()) for t in (A, B, C))
    D = float64_on_cpu(mma(A64, B64, C64, inputs="fp16", accumulate="fp32", device="cpu"))
    # Two orders of adding K + 1 float32 terms differ by at most about (K + 1) eps sum|terms|: allowed.
    slack = (k + 1) * torch.finfo(torch.float32).eps * float((A64.abs() @ B64.abs() + C64.abs()).max())
    right = _close_to(answer, D, slack)
    hint = ex1.hint(
        "the inputs A and B are FP16; the products and the sum, starting from C, are FP32",
        not right and _close_to(answer, A64 @ B64 + C64, slack),
        not right and (_fp16_valued(answer) or _close_to(answer, D.half().double(), slack)),
        not right
        and any(_close_to(answer, P, slack) for P in (A64.half().double() @ B64.half().double(), A64 @ B64)),
    )
    return check_tensor(
        answer, D.float(), dtype=torch.float32, atol=slack, name="answer", hint=hint, show=show
    )


@functools.lru_cache(maxsize=16)
def _stall_value(term: float, fmt: str) -> float:
    """Where a running sum of ``term`` in ``fmt`` stops growing (from the emulated sum)."""
    length = min(2 ** (FORMATS[fmt].precision + 2), 1 << 16)
    sums = running_sum(torch.full((length,), term), fmt, device="cpu")
    same = torch.nonzero(sums[1:] == sums[:-1]).flatten()
    return float(sums[int(same[0]) + 1])


_EX2 = {
    "the FP16 stall": "that is where an FP16 sum stalls; BF16 keeps fewer significant bits, so it stalls earlier",
    "the stall for adding 1": "the sum stops where BF16's step is twice the increment, and the increment here is 0.5, not 1",
    "step equal to the increment": "while the step equals the increment, adding it is still exact: the sum stops only where adding 0.5 becomes a tie",
}


@exercise(2, "Where BF16 stalls", mistakes=_EX2)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """The value at which a BF16 running sum of 0.5s stops growing."""
    expected, a = _stall_value(0.5, "bf16"), finite_float(answer)
    hint = ex2.hint(
        "the sum stops when adding 0.5 becomes a tie: where BF16's step is twice the increment",
        a == _stall_value(0.5, "fp16"),
        a == _stall_value(1.0, "bf16"),
        a == expected / 2,
    )
    return check_value(answer, expected, dtype=torch.bfloat16, name="answer", hint=hint, show=show)


@functools.lru_cache(maxsize=8)
def _summed(fmt: str) -> float:
    terms = torch.full((SUM_LENGTH,), SUM_TERM).half().float()  # the FP16 inputs the kernel reads
    return float(running_sum(terms, fmt, device="cpu")[-1])


_EX3 = {
    "the exact sum": "that is the exact sum; the kernel rounds every partial sum to FP16, so follow the step of the running sum",
    "stalls where the step passes the term": "a term larger than half the step still moves the sum by a whole step (it rounds up): the sum stops only where the term is at most half the step",
    "the stall of a sum of ones": "that is where a sum of 1.0s stops; a smaller term stops the sum where the step is about twice the term",
    "bf16 for its range": "BF16 has FP32's range but fewer significant bits than FP16: range does not help a long sum, precision does",
}


@exercise(3, "What the FP16 kernel returns", mistakes=_EX3)
def ex3(answer, answer_acc, *, show: bool = True) -> CheckResult:
    """The FP16-accumulated sum of 4096 FP16 copies of 0.1, and the accumulators that get it within 1 %."""
    expected, a = _summed("fp16"), finite_float(answer)
    exact = SUM_LENGTH * float(torch.tensor(SUM_TERM).half())
    hint = ex3.hint(
        "follow the running sum through the binades: where does the step become more than twice the term?",
        a not in (None, expected) and min(abs(a - exact), abs(a - SUM_LENGTH * SUM_TERM)) <= 0.01 * exact,
        a == expected / 2,
        a == _stall_value(1.0, "fp16"),
    )
    value_part = check_value(answer, expected, dtype=torch.float16, name="answer", hint=hint, show=False)
    good = {acc for acc in ACCUMULATE_FORMATS if abs(_summed(acc) - exact) <= SUM_TOLERANCE * exact}
    acc_hint = "compare each accumulator's step near the final sum with the term it keeps adding"
    if "bf16" in (answer_names(answer_acc) or ()):
        acc_hint = ex3.mistake("bf16 for its range").hint
    stalls = f"its running sum stalls more than {SUM_TOLERANCE:.0%} short of the exact sum"
    why = {acc: stalls for acc in ACCUMULATE_FORMATS if acc not in good}
    opts = dict(options=list(ACCUMULATE_FORMATS), explanations=why, hint=acc_hint, show=False)
    acc_part = check_set(answer_acc, good, name="answer_acc", **opts)
    return combine([value_part, acc_part], show=show)


def _unaligned(shapes: dict[str, tuple[int, int, int]], fmt: str, dims=(0, 1, 2)) -> set[str]:
    multiple = alignment_multiple(fmt)
    return {name for name, shape in shapes.items() if any(shape[i] % multiple for i in dims)}


_EX4 = {
    "the FP16 rule for FP8": "an FP8 element is one byte, so a 16-byte row holds twice as many elements as in FP16",
    "round numbers look aligned": "alignment is about how many elements fill a 16-byte row, not about round decimal numbers: divide, don't eyeball",
    "ignoring K": "K counts too: the kernel loads rows of A and columns of B along K, so all of M, N and K must be aligned",
}


@exercise(4, "Which GEMMs need padding?", mistakes=_EX4)
def ex4(answer_fp16, answer_fp8, shapes, *, show: bool = True) -> CheckResult:
    """The names of the GEMMs in ``shapes`` (name -> (M, N, K)) that need padding in FP16, and in FP8 E4M3."""
    shapes = {name: tuple(shape) for name, shape in shapes.items()}
    parts = []
    for answer, fmt, name in ((answer_fp16, "fp16", "answer_fp16"), (answer_fp8, "fp8_e4m3", "answer_fp8")):
        expected, unaligned_mn = _unaligned(shapes, fmt), _unaligned(shapes, fmt, dims=(0, 1))
        chosen = set(answer) if answer_names(answer) is not None else expected
        # a "round" size: a multiple of 10 that the format's row width divides
        round_ok = {n for n, s in shapes.items() if any(d % 10 == 0 for d in s)} - expected
        hint = ex4.hint(
            f"for {FORMATS[fmt].label}, check M, N and K against the number of elements in a 16-byte row",
            fmt == "fp8_e4m3" and chosen == _unaligned(shapes, "fp16") != expected,
            bool(chosen & round_ok),
            chosen == unaligned_mn != expected,
        )
        rows = f"in {FORMATS[fmt].label} every dimension fills whole 16-byte rows"
        why = {n: f"{'x'.join(map(str, s))}: {rows}" for n, s in shapes.items() if n not in expected}
        opts = dict(options=list(shapes), explanations=why, name=name, hint=hint, show=False)
        parts.append(check_set(answer, expected, **opts))
    return combine(parts, show=show)
