"""Notebook 05's exercises: the solutions pass, unfilled answers are not attempted, every common wrong
answer gets its hint.  Expected dtypes and policies are recomputed here by
running autocast itself (on the CPU), not read from amp_lab.exercises.nb05."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from amp_lab.exercises import nb05
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check

CPU = torch.device("cpu")
LOW = torch.bfloat16  # CPU autocast's default


@pytest.fixture(scope="module")
def truth():
    """The region of exercise 1, run here on independent tensors (dtypes do not depend on values)."""
    lin = torch.nn.Linear(8, 8)
    X = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=LOW):
        h = lin(X)
        out = {
            "h": h.dtype,
            "p": torch.softmax(h, dim=-1).dtype,
            "loss": F.mse_loss(h, X).dtype,
            "hX": torch.cat([h, X]).dtype,
            "hh": torch.cat([h, h]).dtype,
            "G": torch.mm(X.double(), X.double().T).dtype,
        }
    assert set(out) == set(nb05.REGION_NAMES)
    return out


def _with(truth, **changes):
    return {**truth, **changes}


def test_ex1_region(truth):
    assert truth["hX"] == torch.float32 and truth["hh"] == LOW and truth["G"] == torch.float64
    assert_passes(nb05.ex1, dict(truth), CPU)
    assert_passes(nb05.ex1, {k: str(v).removeprefix("torch.") for k, v in truth.items()}, "cpu")
    assert_not_attempted(nb05.ex1, None, CPU)
    assert_not_attempted(nb05.ex1, ..., CPU)
    assert_not_attempted(nb05.ex1, {}, CPU)
    feed_mistake(nb05.ex1, "float32 for a promote op", _with(truth, hh=torch.float32), CPU)
    feed_mistake(nb05.ex1, "low dtype for a mixed promote op", _with(truth, hX=LOW), CPU)
    feed_mistake(nb05.ex1, "float64 cast down", _with(truth, G=LOW), CPU)
    feed_mistake(nb05.ex1, "linear kept in float32", _with(truth, h=torch.float32), CPU)
    feed_mistake(nb05.ex1, "loss in the low dtype", _with(truth, loss=LOW), CPU)
    partial = run_check(nb05.ex1, {"h": truth["h"]}, CPU)
    assert partial.status == "not yet"
    assert partial.details == {"right": ["h"], "missing": [k for k in nb05.REGION_NAMES if k != "h"]}
    for wrong in ("bf16", [1, 2], {"h": "banana"}):
        assert run_check(nb05.ex1, wrong, CPU).status == "not yet"


def test_ex1_hints_never_name_the_dtype(truth):
    msg = run_check(nb05.ex1, _with(truth, hX=LOW, hh=torch.float32, G=LOW, loss=LOW), CPU).message
    assert "float64" not in msg.replace("float64 tensors", "")
    assert "32 bits" not in msg and "mantissa" not in msg and "expected dtype" not in msg


SPELLINGS = {  # every way a hint could name a dtype
    torch.float32: ("float32", "fp32", "torch.float", "single"),
    torch.float64: ("float64", "fp64", "double"),
    torch.bfloat16: ("bfloat16", "bf16"),
    torch.float16: ("float16", "fp16", "half"),
}


@pytest.mark.parametrize("key", nb05.REGION_NAMES)
def test_ex1_a_hint_never_names_the_right_dtype(truth, key):
    """Answer one result wrong (every other right): the feedback for it names the learner's dtype, never the
    right one (the hints for hX and G once said "float32" and "float64")."""
    right = truth[key]
    for wrong in (d for d in SPELLINGS if d != right):
        message = run_check(nb05.ex1, _with(truth, **{key: wrong}), CPU).message
        assert message.count("is not what the line gives") == 1, message
        feedback = message.split("is not what the line gives", 1)[1]
        for spelling in SPELLINGS[right]:
            assert spelling not in feedback, (key, wrong, spelling, feedback)


def test_ex3_the_hint_points_at_the_idea_not_the_code():
    """The hint for forgetting the protection names what goes wrong, not the line that fixes it."""
    result = feed_mistake(nb05.ex3, "forgetting enabled=False", _moments, CPU)
    assert "enabled=False" not in result.message and "autocast(" not in result.message


def _policy(fn, shapes):
    """The policy by experiment, independently of ao.classify: float32, low and mixed inputs."""
    x32 = [torch.rand(s) for s in shapes]
    xlo = [x.to(LOW) for x in x32]
    with torch.autocast("cpu", dtype=LOW):
        out32, outlo = fn(*x32).dtype, fn(*xlo).dtype
    plainlo = fn(*xlo).dtype
    if out32 == LOW:
        return "lower"
    if outlo == torch.float32 and plainlo != torch.float32:
        return "fp32"
    return "unchanged"  # neither op promotes through autocast on the CPU (checked by the tests below)


def test_ex2_outer():
    policy = _policy(torch.outer, [(4,), (3,)])
    assert_passes(nb05.ex2, policy, CPU)
    assert_passes(nb05.ex2, policy.upper(), CPU)
    assert_not_attempted(nb05.ex2, None, CPU)
    feed_mistake(nb05.ex2, "lower because it looks like a matmul", "lower", CPU)
    feed_mistake(nb05.ex2, "kernel promotion taken for promote", "promote", CPU)
    assert run_check(nb05.ex2, "matmul", CPU).status == "not yet"


def test_ex4_pairwise_distance():
    policy = _policy(F.pairwise_distance, [(3, 4), (3, 4)])
    assert_passes(nb05.ex4, policy, CPU)
    assert_not_attempted(nb05.ex4, None, CPU)
    feed_mistake(nb05.ex4, "guessed without the experiment", "fp32", CPU)
    feed_mistake(nb05.ex4, "kernel promotion taken for promote", "promote", CPU)


def _moments(x):
    ones = torch.full((1, x.shape[0]), 1.0 / x.shape[0], device=x.device)
    return torch.mm(ones, x * x) - torch.mm(ones, x) ** 2


def safe_variance(x):
    with torch.autocast(x.device.type, enabled=False):
        return _moments(x.float())


def test_ex3_safe_variance():
    assert_passes(nb05.ex3, safe_variance, CPU)
    assert_not_attempted(nb05.ex3, None, CPU)
    assert_not_attempted(nb05.ex3, lambda x: None, CPU)  # the skeleton

    def not_written(x):
        raise NotImplementedError

    assert_not_attempted(nb05.ex3, not_written, CPU)
    feed_mistake(nb05.ex3, "forgetting enabled=False", _moments, CPU)
    feed_mistake(nb05.ex3, "forgetting enabled=False", lambda x: _moments(x.float()), CPU)
    feed_mistake(nb05.ex3, "casting the result instead of the inputs", lambda x: _moments(x).float(), CPU)
    for wrong in (lambda x: x.sum() / 0, lambda x: 1 / 0, lambda x: torch.zeros(3), lambda x: torch.zeros(())):
        assert run_check(nb05.ex3, wrong, CPU).status == "not yet"
    assert run_check(nb05.ex3, 3.0, CPU).status == "not yet"
