"""amp_lab.exercises.nb09 (09_pitfalls): the solutions pass, unfilled answers are not attempted, every
common wrong answer gets its hint, and no feedback says how far off a number is."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from amp_lab.exercises import nb09
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check


def test_ex1_eps():
    assert_passes(nb09.ex1, 1e-8)
    assert_passes(nb09.ex1, 10.0**-8)
    assert torch.tensor(1e-8, dtype=torch.float16).item() == 0.0  # the oracle: torch's own cast
    assert torch.tensor(1e-7, dtype=torch.float16).item() != 0.0
    assert_not_attempted(nb09.ex1, None)
    assert_not_attempted(nb09.ex1, ...)
    feed_mistake(nb09.ex1, "k for eps", 8)
    feed_mistake(nb09.ex1, "a power float16 keeps", 1e-7)
    feed_mistake(nb09.ex1, "the subnormal itself", 2.0**-24)
    feed_mistake(nb09.ex1, "the subnormal itself", 2.0**-25)
    feed_mistake(nb09.ex1, "not the largest lost", 1e-9)
    for wrong in ("1e-8", True, float("nan"), 0.0, 1e-8 * 1.5):
        assert run_check(nb09.ex1, wrong).status == "not yet"


def test_ex2_swamping_threshold():
    assert_passes(nb09.ex2, 1.0)
    assert_passes(nb09.ex2, torch.tensor(1.0))
    assert run_check(nb09.ex2, [1.0]).status == "not yet"
    w = torch.tensor(256.0, dtype=torch.bfloat16)
    assert (w.float() + 1.0).to(torch.bfloat16).item() == 256.0  # the oracle: the tie rounds to the even 256
    assert (w.float() + 1.0001).to(torch.bfloat16).item() == 258.0
    assert_not_attempted(nb09.ex2, None)
    feed_mistake(nb09.ex2, "the whole gap", 2.0)
    feed_mistake(nb09.ex2, "the spacing at 1.0", 2.0**-8)
    feed_mistake(nb09.ex2, "the spacing at 1.0", 2.0**-7)
    feed_mistake(nb09.ex2, "just below the tie", 0.999)
    for wrong in (3.0, -1.0, "1.0", 1.5):
        assert run_check(nb09.ex2, wrong).status == "not yet"


def test_a_wrong_number_is_not_told_how_far_off_it_is():
    # "too large by 50% (5e-09 off)" or "exactly 2 times the expected one" gives the passing value away
    for ex, wrong in (
        (nb09.ex1, 1.5e-8),
        (nb09.ex1, 2e-8),
        (nb09.ex2, 0.5),
        (nb09.ex2, 4.0),
        (nb09.ex2, 1.5),
    ):
        r = run_check(ex, wrong)
        assert r.status == "not yet" and "max_abs_error" not in r.details, (ex, wrong)
        assert not any(c.startswith("check.exponent") for c in r.reasons), (ex, wrong, r.reasons)
        assert " off" not in r.message and "times the expected" not in r.message, r.message


def scale_q_first(Q, K):
    return torch.softmax((Q / math.sqrt(Q.shape[-1])) @ K.T, dim=-1)


def scale_both(Q, K):
    r = Q.shape[-1] ** -0.25
    return torch.softmax((Q * r) @ (K * r).T, dim=-1)


def fused(Q, K):  # torch's own kernel, V the identity: its output is the probabilities
    seq, d = Q.shape
    return F.scaled_dot_product_attention(Q[None], K[None], torch.eye(seq, d, dtype=Q.dtype)[None])[
        0, :, :seq
    ]


def test_ex3_attention_in_float16():
    for fn in (scale_q_first, scale_both, fused):
        assert_passes(nb09.ex3, fn)
    for Q, K in nb09._attention_cases()[:3]:  # the oracle: plain float16 logits overflow on these inputs
        logits = (Q.double() @ K.double().T).abs().max()
        assert logits > torch.finfo(torch.float16).max > logits / math.sqrt(Q.shape[-1])
        top = (Q.double() @ K.double().T / math.sqrt(Q.shape[-1])).topk(2, dim=-1).values
        assert (top[:, 0] - top[:, 1]).min() > 40  # no row where float16's rounding of a logit picks the max
    assert_not_attempted(nb09.ex3, None)
    assert_not_attempted(nb09.ex3, ...)
    d = lambda Q: math.sqrt(Q.shape[-1])  # noqa: E731
    feed_mistake(nb09.ex3, "an upcast", lambda Q, K: torch.softmax(Q.float() @ K.float().T / d(Q), -1).half())
    feed_mistake(nb09.ex3, "an upcast", lambda Q, K: scale_q_first(Q.bfloat16(), K.bfloat16()).half())
    feed_mistake(nb09.ex3, "scaling after the matmul", lambda Q, K: torch.softmax(Q @ K.T / d(Q), -1))
    feed_mistake(nb09.ex3, "scaling after the matmul", lambda Q, K: torch.softmax((Q @ K.T) * (1 / d(Q)), -1))
    feed_mistake(nb09.ex3, "1/d for 1/sqrt(d)", lambda Q, K: torch.softmax((Q / Q.shape[-1]) @ K.T, -1))
    for wrong in (
        lambda Q, K: torch.softmax(Q @ K.T, -1),  # no scale at all
        lambda Q, K: scale_q_first(Q, K).T,  # softmax over the wrong axis, in effect
        lambda Q, K: None,
        lambda Q: Q,
        lambda Q, K: 1 / 0,
        3,
        "scale Q first",
    ):
        assert run_check(nb09.ex3, wrong).status == "not yet"


JUNK = [0, -1, 1.5, float("nan"), float("inf"), True, "", "bf16", "x" * 500, [], {}, set(), {"a": 1}, [[1]],
        torch.ones(2), object(), lambda: None, b"a", {"bf16", 3}, (None,), 2**2000, lambda Q, K: Q]  # fmt: skip


def test_no_answer_raises():
    for junk in JUNK:
        status = run_check(nb09.ex3, junk).status  # exercises 1 and 2: test_exercises_base
        assert status in ("not yet", "not attempted"), (junk, status)
