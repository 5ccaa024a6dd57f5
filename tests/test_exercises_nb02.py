"""Notebook 02's exercises: the solutions pass, unfilled answers are not attempted, every common wrong
answer gets its hint.  Expected values are recomputed here independently
(torch's own float16/bfloat16 arithmetic, float64 products), not read from amp_lab.exercises.nb02."""

from __future__ import annotations

import inspect

import pytest
import torch

from amp_lab.exercises import nb02
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check

SHAPES = {
    "qkv": (4096, 2304, 768),
    "lm_head": (4096, 50257, 768),
    "mlp": (1000, 4000, 1000),
    "proj": (2048, 1024, 1020),
    "small": (512, 1016, 512),
}


@pytest.fixture(scope="module")
def abc():
    gen = torch.Generator().manual_seed(0)
    return (
        torch.randn(4, 8, generator=gen),
        torch.randn(8, 4, generator=gen),
        torch.randn(4, 4, generator=gen),
    )


def _tensor_core(A, B, C):
    """FP16 inputs, exact products, an FP32 sum starting from C: independent of tc.mma."""
    Ah, Bh = A.half().double(), B.half().double()
    D = C.double().clone()
    for k in range(A.shape[1]):
        D = (
            (D + Ah[:, k : k + 1] * Bh[k : k + 1, :]).float().double()
        )  # products exact, each sum rounded to FP32
    return D.float()


def test_ex1_one_tensor_core_operation(abc):
    A, B, C = abc
    assert_passes(nb02.ex1, _tensor_core(A, B, C), A, B, C)
    assert_passes(nb02.ex1, A.half().float() @ B.half().float() + C, A, B, C)  # another order of FP32 sums
    assert_not_attempted(nb02.ex1, None, A, B, C)
    feed_mistake(nb02.ex1, "inputs not rounded to FP16", A @ B + C, A, B, C)
    feed_mistake(nb02.ex1, "sum rounded to FP16", _tensor_core(A, B, C).half().float(), A, B, C)
    feed_mistake(nb02.ex1, "sum rounded to FP16", (A.half() @ B.half() + C.half()).float(), A, B, C)
    feed_mistake(nb02.ex1, "forgetting C", A.half().float() @ B.half().float(), A, B, C)
    for wrong in (torch.zeros(4, 4), torch.zeros(3, 3), 1.0, "D"):
        assert run_check(nb02.ex1, wrong, A, B, C).status == "not yet"


def _stall(term, dtype):
    s = torch.tensor(0.0, dtype=dtype)
    while True:
        nxt = s + torch.tensor(term, dtype=dtype)
        if nxt == s:
            return s.item()
        s = nxt


def test_ex2_where_bf16_stalls():
    stall = _stall(0.5, torch.bfloat16)
    assert stall == 128.0
    assert_passes(nb02.ex2, stall)
    assert_not_attempted(nb02.ex2, None)
    feed_mistake(nb02.ex2, "the FP16 stall", _stall(0.5, torch.float16))
    feed_mistake(nb02.ex2, "the stall for adding 1", _stall(1.0, torch.bfloat16))
    feed_mistake(nb02.ex2, "step equal to the increment", stall / 2)
    for wrong in (100.0, "128", True):
        assert run_check(nb02.ex2, wrong).status == "not yet"


def test_ex2_hints_never_hand_over_the_stall():
    """No hint of exercise 2 names the right value, or a step that turns the wrong answer into it (it once said
    "the sum stops one binade later" to the learner who answered half of it).  The hint lines only: how far off
    an answer is comes from the comparison engine (amp_lab.check), the same for every exercise."""
    stall = _stall(0.5, torch.bfloat16)  # torch's own BF16 additions
    wrongs = {"the FP16 stall": _stall(0.5, torch.float16), "the stall for adding 1": _stall(1.0, torch.bfloat16),
              "step equal to the increment": stall / 2, "generic": 100.0}  # fmt: skip
    for name, wrong in wrongs.items():
        hints = "\n".join(line for line in run_check(nb02.ex2, wrong).message.splitlines() if "hint:" in line)
        assert hints and f"{stall:g}" not in hints and "2**7" not in hints, (name, hints)
        for step in ("binade later", "binade up", "double it", "twice your", "next power of two"):
            assert step not in hints, (name, hints)


def test_ex3_what_the_fp16_kernel_returns():
    term = torch.tensor(0.1, dtype=torch.float16)
    s = torch.tensor(0.0, dtype=torch.float16)
    for _ in range(4096):
        s = s + term  # torch's FP16 addition rounds each partial sum, as an FP16 accumulator does
    value = s.item()
    assert value == 256.0
    assert_passes(nb02.ex3, value, {"fp32"})
    assert_passes(nb02.ex3, value, ["fp32"])
    assert_not_attempted(nb02.ex3, None, None)
    assert run_check(nb02.ex3, value, None).status == "not yet"
    exact = 4096 * term.item()
    feed_mistake(nb02.ex3, "the exact sum", exact, {"fp32"})
    feed_mistake(nb02.ex3, "the exact sum", 409.6, {"fp32"})
    feed_mistake(nb02.ex3, "stalls where the step passes the term", value / 2, {"fp32"})
    feed_mistake(nb02.ex3, "the stall of a sum of ones", _stall(1.0, torch.float16), {"fp32"})
    feed_mistake(nb02.ex3, "bf16 for its range", value, {"fp32", "bf16"})
    assert run_check(nb02.ex3, value, {"fp16", "fp32"}).status == "not yet"


def test_ex4_which_gemms_need_padding():
    def unaligned(multiple):
        return {n for n, s in SHAPES.items() if any(d % multiple for d in s)}

    fp16, fp8 = unaligned(8), unaligned(16)
    assert fp16 == {"lm_head", "proj"} and fp8 == {"lm_head", "proj", "mlp", "small"}
    assert_passes(nb02.ex4, fp16, fp8, SHAPES)
    assert_not_attempted(nb02.ex4, None, None, SHAPES)
    feed_mistake(nb02.ex4, "round numbers look aligned", fp16 | {"mlp"}, fp8, SHAPES)
    feed_mistake(nb02.ex4, "the FP16 rule for FP8", fp16, fp16, SHAPES)
    feed_mistake(nb02.ex4, "ignoring K", {"lm_head"}, fp8, SHAPES)
    assert run_check(nb02.ex4, set(SHAPES), fp8, SHAPES).status == "not yet"


@pytest.mark.parametrize("ex", [nb02.ex2, nb02.ex3])
def test_show_must_be_a_bool(ex):
    args = (None,) * (len(inspect.signature(ex.check).parameters) - 1)
    with pytest.raises((TypeError, ValueError), match="show"):
        ex.check(*args, show="yes")
