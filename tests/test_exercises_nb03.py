"""The exercises of notebook 03: the solutions pass, unfilled is not attempted, the common wrong
answers get their hints, and bad measurements are refused by name."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab.exercises import nb03
from amp_lab.range_counts import range_report, suggest_scale
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check


@pytest.fixture(scope="module")
def all_grads():
    # log2 |g| ~ N(-26, 3): about half underflow FP16 unscaled; the window of good scales is wide
    gen = torch.Generator().manual_seed(0)
    mags = torch.exp2(-26 + 3 * torch.randn(20_000, generator=gen))
    signs = torch.where(torch.rand(20_000, generator=gen) < 0.5, -1.0, 1.0)
    g = mags * signs
    return [g[:12_000].reshape(120, 100), g[12_000:].reshape(80, 100)]


@pytest.fixture(scope="module")
def window(all_grads):
    return nb03.scale_window(all_grads)


@pytest.fixture(scope="module")
def logits():
    # rows whose largest logit is far above ln(65504) (exp overflows FP16), and rows far below the
    # batch's largest (a single shift for the batch underflows them to all zeros)
    gen = torch.Generator().manual_seed(1)
    offsets = torch.linspace(-5.0, 25.0, 64).unsqueeze(1)
    return 3 * torch.randn(64, 10, generator=gen) + offsets


def stable(z):
    e = torch.exp(z - z.max(dim=1, keepdim=True).values)
    return e / e.sum(dim=1, keepdim=True)


# --- Exercise 1 ---------------------------------------------------------------------------------


def test_ex1_window_is_computed_from_the_gradients(all_grads, window):
    low, high = window
    assert low > 64 and high > 1000 * low  # the fixture makes k-for-S distinguishable and the window wide
    k_low = int(math.log2(low))
    from amp_lab.range_counts import range_report, suggest_scale

    assert (
        range_report(all_grads, "fp16", low).underflow
        < 0.01
        <= range_report(all_grads, "fp16", low / 2).underflow
    )
    assert high == suggest_scale(all_grads, "fp16")
    assert k_low == math.log2(low)


def test_ex1_solution_passes_and_reads_as_a_pass(all_grads, window):
    low, high = window
    for s in (low, high, 2.0 ** round(math.log2(math.sqrt(low * high)))):
        r = assert_passes(nb03.ex1, s, all_grads)
        assert r.message.startswith("✓ passed") and "exact" not in r.message


def test_ex1_unfilled(all_grads):
    assert_not_attempted(nb03.ex1, None, all_grads)
    assert_not_attempted(nb03.ex1, ..., all_grads)


def test_ex1_mistakes(all_grads, window):
    low, high = window
    k = round(math.log2(math.sqrt(low * high)))
    r = feed_mistake(nb03.ex1, "k for S", k, all_grads)
    assert low <= 2.0**k <= high  # the exponent of a passing scale: the hint must not name that scale
    assert f"2.0**{k}" not in r.message and "pass" not in r.message.split("hint:")[1]
    feed_mistake(nb03.ex1, "k for S", float(int(math.log2(high)) + 3), all_grads)
    feed_mistake(nb03.ex1, "too small", low / 2, all_grads)
    feed_mistake(nb03.ex1, "too large", high * 2, all_grads)
    assert run_check(nb03.ex1, -4.0, all_grads).status == "not yet"
    assert run_check(nb03.ex1, "2**10", all_grads).status == "not yet"


def test_ex1_refuses_gradients_no_scale_fits():
    with pytest.raises(ValueError, match="all_grads"):  # spread over too many binades: no scale fits
        nb03.ex1.check(2.0**10, [torch.tensor([2.0**-60, 1.0e4] * 10)], show=False)
    with pytest.raises(TypeError, match="show"):
        nb03.ex1.check(2.0**10, [torch.ones(3)], show="yes")


# --- Exercise 2 ---------------------------------------------------------------------------------


def _lost(g: float) -> bool:
    w = torch.tensor(0.75, dtype=torch.float16)
    return bool(w - torch.tensor(0.01 * g, dtype=torch.float16) == w)


def test_ex2_expected_agrees_with_torch_fp16_arithmetic():
    # an independent oracle: torch's FP16 subtraction, not lost_update_fraction
    g = 2.0**-6
    assert _lost(g) and not _lost(2 * g)
    assert_passes(nb03.ex2, g)
    assert assert_passes(nb03.ex2, 0.0156).verdict == "close"  # a decimal with 3 significant digits


def test_ex2_unfilled():
    assert_not_attempted(nb03.ex2, None)


def test_ex2_mistakes():
    expected = 2.0**-6  # the oracle above: torch's FP16 subtraction
    assert _lost(expected) and not _lost(2 * expected)
    r = feed_mistake(nb03.ex2, "j for g", -6)  # the right exponent: the hint must not convert it for them
    assert "wrong sign" not in r.message
    assert "2.0**-6" not in r.message and "0.015625" not in r.message
    feed_mistake(nb03.ex2, "j for g", -6.0)
    feed_mistake(nb03.ex2, "the whole spacing", 2.0**-5)
    feed_mistake(nb03.ex2, "lr left out", 2.0**-12)
    assert run_check(nb03.ex2, 2.0**-8).status == "not yet"
    assert run_check(nb03.ex2, -(2.0**-6)).status == "not yet"
    with pytest.raises(TypeError, match="show"):
        nb03.ex2.check(2.0**-6, show=1)


# --- Exercise 3 ---------------------------------------------------------------------------------


def test_ex3_fixture_overflows_both_ways(logits):
    z = logits.half()
    assert logits.max() > math.log(65504) and logits.max(dim=1).values.min() < logits.max() - 20
    assert not torch.isfinite(torch.exp(z)).all()


def test_ex3_stable_softmax_passes(logits):
    assert assert_passes(nb03.ex3, stable, logits).verdict == "close"
    assert_passes(nb03.ex3, lambda z: torch.softmax(z, dim=1), logits)


def test_ex3_unfilled_skeletons_are_not_attempted(logits):
    def skeleton_raises(z):
        raise NotImplementedError

    def skeleton_none(z):
        pass

    for fn in (None, ..., skeleton_raises, skeleton_none):
        assert_not_attempted(nb03.ex3, fn, logits)


def test_ex3_mistakes(logits):
    def naive(z):
        e = torch.exp(z)
        return e / e.sum(dim=1, keepdim=True)

    def one_shift(z):
        e = torch.exp(z - z.max())
        return e / e.sum(dim=1, keepdim=True)

    def over_batch(z):
        e = torch.exp(z - z.max(dim=0, keepdim=True).values)
        return e / e.sum(dim=0, keepdim=True)

    feed_mistake(nb03.ex3, "naive exp", naive, logits)
    feed_mistake(nb03.ex3, "one shift for the whole batch", one_shift, logits)
    feed_mistake(nb03.ex3, "normalised over the batch", over_batch, logits)
    feed_mistake(nb03.ex3, "left FP16", lambda z: torch.softmax(z.float(), dim=1), logits)


def test_ex3_other_wrong_answers_are_not_yet_never_raise(logits):
    def raises(z):
        raise RuntimeError("boom")

    for fn in (raises, lambda z: [1.0], lambda z: stable(z)[:, :5], lambda z: stable(z) * 0.95, 3):
        r = run_check(nb03.ex3, fn, logits)
        assert r.status == "not yet", r.message


def test_ex3_does_not_let_the_function_change_logits(logits):
    before = logits.clone()

    def in_place(z):
        z.zero_()
        return stable(z)

    run_check(nb03.ex3, in_place, logits)
    assert torch.equal(logits, before)


# --- Exercise 4 ---------------------------------------------------------------------------------


def test_ex4_solution_and_the_fp16_answer(all_grads):
    r = assert_passes(nb03.ex4, False, all_grads)
    assert "fewer than 0.1% of the non-zero activation gradients" in r.message
    feed_mistake(nb03.ex4, "the FP16 answer", True, all_grads)
    feed_mistake(nb03.ex4, "yes/no for True/False", "no", all_grads)
    assert_not_attempted(nb03.ex4, None, all_grads)
    assert run_check(nb03.ex4, "maybe", all_grads).status == "not yet"


def test_ex4_expected_follows_the_measurement():
    tiny = {"0": torch.full((100,), 2.0**-140)}  # below BF16's window: scaling would be needed
    assert_passes(nb03.ex4, True, tiny)
    assert run_check(nb03.ex4, False, tiny).status == "not yet"


@settings(max_examples=25, deadline=None)
@given(
    log2_center=st.integers(-40, 5),
    log2_spread=st.integers(0, 12),
    seed=st.integers(0, 2**16),
)
def test_scale_window_finds_the_smallest_scale_a_linear_scan_finds(log2_center, log2_spread, seed):
    """scale_window's binary search over k gives the k a scan of every k in [-24, 100) gives (range_report
    as the oracle): the underflowing share only falls as the scale grows."""
    gen = torch.Generator().manual_seed(seed)
    grads = (2.0 ** (log2_center + log2_spread * torch.randn(2000, generator=gen))) * torch.sign(
        torch.randn(2000, generator=gen)
    )
    scan = next(
        (k for k in range(-24, 100) if range_report(grads, "fp16", 2.0**k).underflow < nb03.MAX_ZERO_SHARE),
        None,
    )
    high = suggest_scale(grads, "fp16")
    if scan is None or 2.0**scan > high:
        with pytest.raises(ValueError, match="no loss scale"):
            nb03.scale_window([grads])
    else:
        assert nb03.scale_window([grads]) == (2.0**scan, high)
