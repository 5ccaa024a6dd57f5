"""amp_lab.exercises.nb09 (09_pitfalls): the solutions pass, unfilled answers are not attempted, every
common wrong answer gets its hint, and the fixes follow the learner's own measurement."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from amp_lab import pitfalls
from amp_lab.exercises import nb09
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check


@pytest.fixture(scope="module")
def att():
    return pitfalls.attention_overflow(16, 64, magnitude=60.0, device="cpu")


FIXES = {"fp16 with Q scaled first", "bf16", "fp32 logits"}


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


def test_ex3_fixes(att):
    assert_passes(nb09.ex3, FIXES, att)
    assert_passes(nb09.ex3, list(FIXES), att)
    assert_not_attempted(nb09.ex3, None, att)
    feed_mistake(nb09.ex3, "fp32 softmax rescues it", FIXES | {"fp16 logits, fp32 softmax"}, att)
    feed_mistake(nb09.ex3, "bf16 left out", FIXES - {"bf16"}, att)
    feed_mistake(nb09.ex3, "scaling first left out", FIXES - {"fp16 with Q scaled first"}, att)
    assert run_check(nb09.ex3, "bf16", att).status == "not yet"
    assert run_check(nb09.ex3, {"nonsense"}, att).status == "not yet"


def test_ex3_follows_the_measurement(att):
    # The right set is read from att: a variant that overflowed on these inputs is not a fix.
    broken = dict(att.variants)
    broken["bf16"] = dataclasses.replace(broken["bf16"], inf_logits=3, nan_rows=1)
    other = dataclasses.replace(att, variants=broken)
    assert_passes(nb09.ex3, FIXES - {"bf16"}, other)
    assert run_check(nb09.ex3, FIXES, other).status == "not yet"


JUNK = [0, -1, 1.5, float("nan"), float("inf"), True, "", "bf16", "x" * 500, [], {}, set(), {"a": 1}, [[1]],
        torch.ones(2), object(), lambda: None, b"a", {"bf16", 3}, (None,), 2**2000]  # fmt: skip


def test_no_answer_raises(att):
    for junk in JUNK:
        for ex, args in ((nb09.ex3, (att,)),):  # exercises 1 and 2: test_exercises_base
            status = run_check(ex, junk, *args).status
            assert status in ("not yet", "not attempted"), (ex, junk, status)
