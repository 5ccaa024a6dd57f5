"""Notebook 07's exercises: the solutions pass, unfilled answers are not attempted, every common wrong
answer gets its hint.  The right answers are written here from the recipe's
rules and checked against torch (GradScaler, clip_grad_norm_), not read from amp_lab.exercises.nb07."""

from __future__ import annotations

import pytest
import torch

from amp_lab.exercises import nb07
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check

ORDER = [
    "opt.zero_grad()",
    "for each micro-batch: forward and loss under autocast, then scaler.scale(loss).backward()",
    "scaler.unscale_(opt)",
    "clip_grad_norm_(model.parameters(), max_norm)",
    "scaler.step(opt)",
    "scaler.update()",
]


def _swap(seq, i, j):
    seq = list(seq)
    seq[i], seq[j] = seq[j], seq[i]
    return seq


def test_ex1_order():
    assert sorted(nb07.STEP_PIECES) == sorted(ORDER)
    assert list(nb07.STEP_PIECES) != ORDER  # the pieces the notebook shows do not give the order away
    assert_passes(nb07.ex1, ORDER)
    assert_passes(nb07.ex1, [s.upper() for s in ORDER])
    assert_not_attempted(nb07.ex1, None)
    feed_mistake(nb07.ex1, "clip before unscale_", _swap(ORDER, 2, 3))
    feed_mistake(nb07.ex1, "update before step", _swap(ORDER, 4, 5))
    feed_mistake(nb07.ex1, "zero_grad after the backwards", _swap(ORDER, 0, 1))
    feed_mistake(nb07.ex1, "unscale_ before the backwards", _swap(ORDER, 1, 2))
    for wrong in (ORDER[:-1], ORDER + ORDER[:1], "opt.zero_grad()", list(reversed(ORDER)), [[1], {2}]):
        assert run_check(nb07.ex1, wrong).status == "not yet"


def test_ex2_l4():
    # Ada (8.9) is after Ampere (8.0): bf16 Tensor Cores, FP32's exponent range, no loss scaling.
    assert torch.finfo(torch.bfloat16).max == pytest.approx(torch.finfo(torch.float32).max, rel=1e-2)
    assert_passes(nb07.ex2, torch.bfloat16, False)
    assert_passes(nb07.ex2, "bf16", False)
    assert_not_attempted(nb07.ex2, None, None)
    half = run_check(nb07.ex2, torch.bfloat16, None)
    assert half.status == "not yet"
    assert [p.status for p in half.details["parts"]] == ["passed", "not attempted"]
    r = feed_mistake(nb07.ex2, "float16 from the datasheet", torch.float16, False)
    assert "mantissa" not in r.message and "exponent bits" not in r.message.split("hint")[0]
    feed_mistake(nb07.ex2, "a GradScaler for bfloat16", torch.bfloat16, True)
    assert run_check(nb07.ex2, "banana", False).status == "not yet"
    assert run_check(nb07.ex2, torch.float32, "no").status == "not yet"


def _torch_clip(grads, scale, max_norm):
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g / scale
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    for p, g in zip(params, grads, strict=True):
        g.copy_(p.grad)


def unscale_and_clip_(grads, scale, max_norm):
    for g in grads:
        g.mul_(1.0 / scale)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in grads:
            g.mul_(coef)


def clip_scaled_then_unscale(grads, scale, max_norm):
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = max_norm / (total + 1e-6)
    for g in grads:
        if coef < 1:
            g.mul_(coef)
        g.div_(scale)


def per_tensor(grads, scale, max_norm):
    for g in grads:
        g.div_(scale)
        n = torch.linalg.vector_norm(g)
        if n > max_norm:
            g.mul_(max_norm / (n + 1e-6))


def test_ex3_unscale_and_clip():
    assert_passes(nb07.ex3, unscale_and_clip_)
    assert_passes(nb07.ex3, _torch_clip)
    assert_not_attempted(nb07.ex3, None)
    assert_not_attempted(nb07.ex3, ...)
    feed_mistake(nb07.ex3, "clip before unscaling", clip_scaled_then_unscale)
    feed_mistake(nb07.ex3, "a norm per tensor", per_tensor)

    def skeleton(grads, scale, max_norm):
        ...

    def raises(grads, scale, max_norm):
        raise NotImplementedError

    def returns_new(grads, scale, max_norm):
        return [g / scale for g in grads]

    feed_mistake(nb07.ex3, "rebinding instead of in place", returns_new)
    for wrong in (skeleton, raises, 3.0, lambda g, s, m: None):
        assert run_check(nb07.ex3, wrong).status == "not yet", wrong


def test_ex4_checkpoint():
    must = {"model weights", "optimizer state", "scaler state", "lr scheduler state", "step number"}
    assert must < set(nb07.CHECKPOINT_OPTIONS)
    assert_passes(nb07.ex4, must)
    assert_passes(nb07.ex4, list(must))
    assert_not_attempted(nb07.ex4, None)
    feed_mistake(nb07.ex4, "forgetting the scaler state", must - {"scaler state"})
    feed_mistake(nb07.ex4, "autocast state", must | {"autocast state"})
    for wrong in (set(nb07.CHECKPOINT_OPTIONS), {"model weights"}, "model weights", 3, [[1]]):
        assert run_check(nb07.ex4, wrong).status == "not yet"


def test_hints_point_at_the_idea_not_at_a_passing_answer():
    """Issue 24: ex2's float16 hint named the threshold (8.0) and asked what those Tensor Cores multiply as
    fast as float16, which is the answer; ex4's told the learner that the loss scale changes, which names the
    missing item.  Each hint may send the learner back to the flow or the runs, not to the answer."""
    dtype_hint = nb07.ex2.mistake("float16 from the datasheet").hint
    assert not any(word in dtype_hint for word in ("8.0", "Ampere", "bfloat16", "bf16", "as fast as"))
    for hint in (m.hint for m in nb07.ex2.mistakes):
        assert "bfloat16" not in hint and "bf16" not in hint
    scaler_hint = nb07.ex4.mistake("forgetting the scaler state").hint
    assert "scale" not in scaler_hint.lower()
