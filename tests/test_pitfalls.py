"""09_pitfalls' rooms (amp_lab.pitfalls, amp_lab.swamping, amp_lab.subnormals) against independent oracles:
torch's own autocast and casts, torch.finfo, float64 arithmetic and hand computations.  Readings are
checked by their codes and numbers, never their sentences."""

import inspect
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import pitfalls as P
from amp_lab import subnormals as N
from amp_lab import swamping as S
from amp_lab.device import seeded
from amp_lab.dtypes import dtype_name
from amp_lab.text import REASONS

BF16 = torch.finfo(torch.bfloat16)
FP16 = torch.finfo(torch.float16)
FP16_SUBNORMAL = FP16.tiny * FP16.eps  # the smallest float16 subnormal, 2**-24, from torch.finfo


def codes(result):
    """The reading's codes, each with a sentence in REASONS (and its str() fills every one, wrapped)."""
    reading = result.reading()
    assert set(reading.codes) <= set(REASONS)
    assert " ".join(str(result).split()).startswith(" ".join(str(reading).split()))
    return reading.codes


def test_printed_results_wrap_at_100_characters_between_words():
    # a line longer than a 1280 px window breaks where JupyterLab likes, "7.29|6e+04" (issue 24)
    att = P.attention_overflow(16, 64, magnitude=60.0, device="cpu")
    sub = N.subnormal_slowdown(64, repeats=1, min_sample_s=1e-4)
    for result in (att, sub):
        text = str(result)
        assert max(map(len, text.splitlines())) <= 100, text
        assert text.split()[: len(str(result.reading()).split())] == str(result.reading()).split()
    assert len(str(att.reading())) > 100  # so the wrapping is tested
    assert {line.split(":")[0] for line in str(sub).splitlines() if line.startswith("  ")} >= {
        f"  {label}" for label in sub.timings
    }


# ---------------------------------------------------------------------------------------------------
# 1. The weight-cast cache
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cast_cache_is_stale_inside_one_region_and_fixed_outside(dtype):
    r = P.weight_cast_cache("cpu", dtype=dtype)
    assert r.cache_enabled == torch.is_autocast_cache_enabled() is True
    assert r.weight_changed and r.stale_inside and r.cache_applies
    assert r.stale_error > 0
    assert r.matches_update_new_region and r.matches_update_cleared and r.matches_update_uncached
    assert r.dtype is dtype
    assert codes(r) == (
        "pitfalls.cache_stale",
        "pitfalls.cache_stale_error",
        "pitfalls.cache_new_region_matches",
        "pitfalls.cache_cleared_matches",
        "pitfalls.cache_uncached_matches",
    )
    assert r.reading().facts["stale_error"] == r.stale_error


def test_cast_cache_follows_torchs_global_switch():
    """With torch's autocast cache switched off, the same experiment sees the update: the result follows
    torch's behaviour, not a fixed story."""
    before = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        r = P.weight_cast_cache("cpu")
    finally:
        torch.set_autocast_cache_enabled(before)
    assert r.cache_enabled is False
    assert r.weight_changed and not r.stale_inside and not r.cache_applies
    assert codes(r)[:2] == ("pitfalls.cache_fresh", "pitfalls.cache_new_region_matches")


def test_cast_cache_by_hand_agrees():
    """The oracle: torch.autocast on a leaf float32 weight, updated in place under no_grad.  Only the leaf
    itself is cached: ``w.T`` is a view, cast afresh each time."""
    w = torch.nn.Parameter(torch.ones(3, 3))
    x = torch.ones(2, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = torch.nn.functional.linear(x, w)
        view = x @ w.T
        with torch.no_grad():
            w.add_(1.0)
        b = torch.nn.functional.linear(x, w)
        view_after = x @ w.T
    assert torch.equal(a, b)  # torch itself: the stale copy
    assert not torch.equal(view, view_after)  # a view is not cached
    r = P.weight_cast_cache("cpu", dtype=torch.bfloat16)
    assert r.stale_inside == torch.equal(a, b)
    assert P.read_cast_cache(True, torch.equal(a, b)).outcome == "pitfalls.cache_stale"  # w.add_ changed w


@pytest.mark.parametrize(
    "changed, same, outcome",
    [
        (True, True, "pitfalls.cache_stale"),
        (True, False, "pitfalls.cache_fresh"),
        (False, True, "pitfalls.cache_no_change"),
        (False, False, "pitfalls.cache_no_change"),
    ],
)
def test_read_cast_cache_outcomes(changed, same, outcome):
    reading = P.read_cast_cache(changed, same)
    assert reading.outcome == outcome and reading.facts == {"weight_changed": changed, "stale_inside": same}
    assert outcome in REASONS


def test_read_cast_cache_refuses_non_bools():
    with pytest.raises(TypeError, match="weight_changed"):
        P.read_cast_cache(1, True)
    with pytest.raises(TypeError, match="stale_inside"):
        P.read_cast_cache(True, "yes")


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(dtype=torch.float32), ValueError),
        (dict(dtype="int8"), ValueError),
        (dict(lr=0), ValueError),
        (dict(lr="0.5"), TypeError),
        (dict(seed=-1), ValueError),
        (dict(device="cpu:3"), ValueError),
    ],
)
def test_cast_cache_refuses_bad_arguments(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs)).replace("device", "device")):
        P.weight_cast_cache(**kwargs)


# ---------------------------------------------------------------------------------------------------
# 2. Adam's eps in FP16
# ---------------------------------------------------------------------------------------------------


def test_adam_eps_rounds_to_zero_in_fp16_and_fp16_adam_blows_up():
    r = P.adam_eps_underflow("cpu")
    # torch.finfo: 1e-8 is below half the smallest float16 subnormal, so it rounds to 0
    assert 1e-8 < FP16_SUBNORMAL / 2
    assert float(torch.tensor(FP16_SUBNORMAL, dtype=torch.float16)) == FP16_SUBNORMAL == 2.0**-24
    assert r.eps_in_fp16 == float(torch.tensor(1e-8, dtype=torch.float16)) == 0.0
    # every first-step second moment (1 - beta2) * g**2 is below half the smallest subnormal: all 0
    assert (1 - 0.999) * r.grad_max**2 < FP16_SUBNORMAL / 2
    assert r.v_zero_fraction_fp16 == 1.0 and r.v_zero_fraction_fp32 == 0.0
    assert r.first_nonfinite_step_fp16 == 1
    assert r.first_nonfinite_step_fp32 is None
    assert r.distance_fp32[-1] < 0.05 * r.distance_fp32[0]
    assert math.isnan(r.distance_fp16[-1])
    assert len(r.distance_fp16) == len(r.distance_fp32) == 201
    assert codes(r) == (
        "pitfalls.fp16_adam_nonfinite",
        "pitfalls.eps_lost",
        "pitfalls.adam_v_zero",
        "pitfalls.fp32_adam_finite",
    )
    assert (
        r.reading().facts["first_nonfinite_step_fp16"] == 1
        and r.reading().facts["fp32_end"] == r.distance_fp32[-1]
    )


def test_adam_with_an_eps_fp16_can_hold_stays_finite():
    r = P.adam_eps_underflow("cpu", eps=1e-3, num_steps=50)
    assert r.eps_in_fp16 == float(torch.tensor(1e-3, dtype=torch.float16)) > 0
    assert r.first_nonfinite_step_fp16 is None
    assert all(math.isfinite(d) for d in r.distance_fp16)
    assert codes(r)[:2] == ("pitfalls.fp16_adam_finite", "pitfalls.eps_kept")


@pytest.mark.parametrize("eps", [1e-8, 2.0**-25, 2.0**-25 * 1.01, 2.0**-24, 1e-7, 1e-3, 0.0])
def test_read_fp16_eps_follows_torchs_cast(eps):
    """The oracle: torch's own float16 cast; at exactly half the smallest subnormal the tie goes to 0."""
    reading = P.read_fp16_eps(eps)
    stored = torch.tensor(eps, dtype=torch.float16).item()
    assert reading.facts["eps_in_fp16"] == stored
    assert reading.facts["half_subnormal"] == FP16_SUBNORMAL / 2
    assert reading.outcome == ("pitfalls.eps_lost" if stored == 0 else "pitfalls.eps_kept")


def test_read_fp16_eps_refuses_bad_eps():
    for bad, error in ((-1.0, ValueError), (math.nan, ValueError), ("1e-8", TypeError)):
        with pytest.raises(error, match="eps"):
            P.read_fp16_eps(bad)


def test_adam_large_gradients_keep_second_moments():
    """grad_size 1: (1 - beta2) g**2 is a normal float16 for gradients above about 0.25; fewer zeros."""
    r = P.adam_eps_underflow("cpu", grad_size=1.0, num_steps=5)
    assert r.v_zero_fraction_fp16 < 0.5


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(num_steps=0), ValueError),
        (dict(num_steps=P.MAX_STEPS + 1), ValueError),
        (dict(num_steps=2.5), TypeError),
        (dict(grad_size=0.0), ValueError),
        (dict(grad_size=math.nan), ValueError),
        (dict(eps=-1.0), ValueError),
        (dict(numel=P.MAX_NUMEL + 1), ValueError),
        (dict(lr=True), TypeError),
        (dict(numel=P.MAX_NUMEL, num_steps=P.MAX_STEPS), ValueError),
    ],
)
def test_adam_refuses_bad_arguments(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        P.adam_eps_underflow("cpu", **kwargs)


# ---------------------------------------------------------------------------------------------------
# 3. Stochastic rounding, Kahan, swamping
# ---------------------------------------------------------------------------------------------------


def bf16_neighbours(x: float) -> tuple[float, float]:
    """The bfloat16 values around ``x``, by hand in float64: (towards zero, away from zero)."""
    if x == 0:
        return 0.0, 0.0
    _, e = math.frexp(abs(x))  # |x| = m * 2**e, m in [0.5, 1)
    ulp = 2.0 ** max(e - 8, -133)  # 8 significant bits; subnormals are spaced 2**-133
    down = math.floor(abs(x) / ulp) * ulp
    up = down + ulp
    if up > BF16.max:
        up = math.inf
    return math.copysign(down, x), math.copysign(up, x)


finite_f32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=300, deadline=None)
@given(finite_f32, st.integers(0, 2**32 - 1))
def test_stochastic_round_gives_one_of_the_two_neighbours(x, seed):
    g = torch.Generator().manual_seed(seed)
    r = float(S.stochastic_round(torch.tensor([x], dtype=torch.float32), generator=g)[0])
    down, up = bf16_neighbours(x)
    assert r in (down, up), (x, r, down, up)
    if float(torch.tensor(x).to(torch.bfloat16)) == x:  # already a bfloat16 value: unchanged
        assert r == x


@settings(max_examples=12, deadline=None)
@given(
    st.floats(min_value=2.0**-120, max_value=2.0**120, allow_nan=False),
    st.sampled_from([1.0, -1.0]),
)
def test_stochastic_round_is_unbiased(magnitude, sign):
    x = float(torch.tensor(sign * magnitude, dtype=torch.float32))
    down, up = bf16_neighbours(x)
    n = 40_000
    g = torch.Generator().manual_seed(1)
    r = S.stochastic_round(torch.full((n,), x, dtype=torch.float32), generator=g).double()
    if down == up or not math.isfinite(up):
        return
    p_up = (x - down) / (up - down)
    se = abs(up - down) * math.sqrt(max(p_up * (1 - p_up), 1e-12) / n)
    assert abs(float(r.mean()) - x) <= 5 * se + 1e-300, (x, float(r.mean()), se)
    assert (
        abs(float((r == up).double().mean()) - p_up)
        <= 5 * math.sqrt(max(p_up * (1 - p_up), 1e-12) / n) + 1e-9
    )


def test_stochastic_round_special_values_and_seeding():
    x = torch.tensor([math.inf, -math.inf, math.nan, 0.0, -0.0, 1.0])
    r = S.stochastic_round(x, generator=torch.Generator().manual_seed(0))
    assert r.dtype == torch.bfloat16
    assert torch.equal(r[:2], x[:2].to(torch.bfloat16)) and torch.isnan(r[2]) and r[5] == 1
    assert torch.equal(torch.signbit(r[3:5]), torch.tensor([False, True]))
    big = torch.rand(4096) + 1
    a = S.stochastic_round(big, generator=torch.Generator().manual_seed(3))
    b = S.stochastic_round(big, generator=torch.Generator().manual_seed(3))
    c = S.stochastic_round(big, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_stochastic_round_refuses_bad_arguments():
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        S.stochastic_round([1.0])
    with pytest.raises(ValueError, match="x must be a float32"):
        S.stochastic_round(torch.ones(2, dtype=torch.float16))
    with pytest.raises(TypeError, match="generator"):
        S.stochastic_round(torch.ones(2), generator=3)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.25, 1000.0), st.floats(1e-6, 1e-3), st.integers(10, 300))
def test_kahan_add_keeps_tiny_updates_that_plain_bf16_loses(start, rel, n):
    w0 = torch.tensor([start]).to(torch.bfloat16)
    update = -rel * float(w0) / 4  # at most a quarter of a bf16 ulp's worth of relative size... or less
    w, c = w0.clone(), torch.zeros_like(w0)
    plain = w0.clone()
    for _ in range(n):
        S.kahan_add_(w, c, update)
        plain.add_(update)
    exact = float(w0) + n * update
    ulp = BF16.eps * 2.0 ** math.floor(math.log2(abs(exact)))  # spacing around the exact value
    assert abs(float(w) - exact) <= ulp  # within one bf16 ulp of the float64 sum
    if abs(update) < ulp / 4:  # each update below half the gap below w0: plain bf16 never moves
        assert float(plain) == float(w0)


def test_swamping_run_against_float64_and_finfo():
    r = S.swamping_run(400, update=-1e-3, start=1.0, numel=32, seed=0, device="cpu")
    # torch.finfo: below 1.0 bf16 values are spaced eps / 2, so half that gap is eps / 4
    assert r.half_ulp == BF16.eps / 4 and r.lost
    assert S.swamping_run(2, update=1e-3, start=1.0, device="cpu").half_ulp == BF16.eps / 2
    exact = 1.0 + 400 * -1e-3
    assert r.exact == pytest.approx(exact, abs=1e-12)
    assert r.final["bf16"] == 1.0  # every update lost: (bf16(1) - 1e-3) rounds back to 1
    assert float((torch.tensor(1.0, dtype=torch.bfloat16) - 1e-3).to(torch.bfloat16)) == 1.0
    ulp = BF16.eps * 2.0 ** math.floor(math.log2(exact))
    assert abs(r.final["fp32 master"] - exact) <= ulp / 2 + 1e-7  # float32 sum, then rounded to bf16
    assert abs(r.final["kahan"] - exact) <= ulp
    assert abs(r.final["stochastic"] - exact) < 0.05 * abs(exact - 1.0)
    assert r.stochastic_spread > 0
    assert all(len(h) == 401 for h in r.history.values())
    assert r.progress("bf16") == 0 and r.progress("kahan") == pytest.approx(1, abs=0.02)
    assert codes(r) == ("swamping.bf16_stuck", "swamping.update_lost", "swamping.remedies")
    facts = r.reading().facts
    assert facts["progress_bf16"] == "0%" and r.percent("kahan") == "100%"
    assert facts["final_stochastic"] == r.final["stochastic"] and facts["numel"] == 32
    assert r.reading(remedies=False).codes == ("swamping.bf16_stuck", "swamping.update_lost")


def test_percent_is_never_negative_zero():
    r = S.swamping_run(10, update=-1e-3, start=1.0, numel=2, device="cpu")
    history = dict(r.history, bf16=(1.0, 1.00004))  # moved 0.4% the wrong way
    back = S.SwampingResult(**{**vars(r), "history": history})
    assert back.progress("bf16") < 0 and f"{back.progress('bf16'):.0%}" == "-0%"  # what the format gives
    assert back.percent("bf16") == "0%" and back.reading().facts["progress_bf16"] == "0%"
    assert (
        S.SwampingResult(**{**vars(r), "history": dict(r.history, bf16=(1.0, 0.9999))}).percent("bf16")
        == "1%"
    )


def test_a_timing_says_1_thread_not_1_threads():
    from amp_lab.intervals import Timing

    assert str(Timing("x", (1e-3,), 1, 0, {"threads": 1})).endswith(", 1 thread")
    assert str(Timing("x", (1e-3,), 1, 0, {"threads": 2})).endswith(", 2 threads")


def test_swamping_run_is_seeded():
    a = S.swamping_run(50, numel=8, seed=1, device="cpu")
    b = S.swamping_run(50, numel=8, seed=1, device="cpu")
    c = S.swamping_run(50, numel=8, seed=2, device="cpu")
    assert a.history == b.history and a.history["stochastic"] != c.history["stochastic"]


def test_update_above_half_an_ulp_is_not_lost():
    r = S.swamping_run(20, update=-0.01, start=1.0, device="cpu")
    assert not r.lost and r.final["bf16"] < 1.0
    assert codes(r)[:2] in (
        ("swamping.bf16_partway", "swamping.update_kept"),
        ("swamping.bf16_exact", "swamping.update_kept"),
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_steps=0), "num_steps"),
        (dict(num_steps=P.MAX_STEPS + 1), "num_steps"),
        (dict(update=0.0), "update"),
        (dict(update=math.inf), "update"),
        (dict(start=1e39), "start"),
        (dict(numel=0), "numel"),
        (dict(seed=2**40), "seed"),
        (dict(numel=1 << 16, num_steps=P.MAX_STEPS), "element-steps"),
    ],
)
def test_swamping_run_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.swamping_run(**{"num_steps": 10, **kwargs})


def test_plot_swamping_draws_five_lines():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = S.swamping_run(20, device="cpu")
    ax = S.plot_swamping(r)
    assert len(ax.lines) == 5
    plt.close("all")
    with pytest.raises(TypeError, match="result"):
        S.plot_swamping("r")
    with pytest.raises(TypeError, match="ax"):
        S.plot_swamping(r, ax=3)


# ---------------------------------------------------------------------------------------------------
# 4. Subnormals
# ---------------------------------------------------------------------------------------------------


def test_flush_denormal_restores_the_setting_it_found():
    supported = torch.set_flush_denormal(True)
    try:
        if not supported:
            pytest.skip("torch.set_flush_denormal is not supported on this CPU")
        assert N.flush_denormal_enabled()
        assert torch.tensor([1e-39]).mul(1.0).item() == 0.0  # torch's own flush: the subnormal reads as 0
        with N.flush_denormal(False):
            assert not N.flush_denormal_enabled()
            assert torch.tensor([1e-39]).mul(1.0).item() > 0
        assert N.flush_denormal_enabled()
        with pytest.raises(RuntimeError), N.flush_denormal(False):
            raise RuntimeError("boom")
        assert N.flush_denormal_enabled()  # restored after an error too
    finally:
        torch.set_flush_denormal(False)
    assert not N.flush_denormal_enabled()


def test_subnormal_slowdown_measures_and_restores():
    r = N.subnormal_slowdown(1 << 12, repeats=3, min_sample_s=1e-3)
    assert r.restored and not N.flush_denormal_enabled()
    assert set(r.timings) >= {"normal", "subnormal"}
    assert r.flush_supported == ("subnormal, flush-to-zero" in r.timings)
    if r.flush_supported:
        assert r.flushes_to_zero and r.flushed_slowdown > 0
    assert r.slowdown > 0 and all(len(t.samples) == 3 for t in r.timings.values())
    assert r.timings["normal"].context["threads"] == 1
    outcome = "subnormals.slow" if r.slowdown >= 1.2 else "subnormals.no_penalty"
    ftz = (
        ("subnormals.ftz_zeros", "subnormals.ftz_formats")
        if r.flush_supported
        else ("subnormals.ftz_unsupported",)
    )
    assert codes(r) == (outcome, *ftz) and r.reading().facts["slowdown"] == r.slowdown


def test_subnormal_slowdown_says_which_formats_flush_to_zero_zeroes():
    r = N.subnormal_slowdown(64, repeats=1, min_sample_s=1e-4)
    if not r.flush_supported:
        assert r.flushed == ()
        pytest.skip("torch.set_flush_denormal is not supported on this CPU")
    expected = []
    try:  # the oracle: torch's own switch, and each format's smallest subnormal from torch.finfo
        torch.set_flush_denormal(True)
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            tiny = torch.tensor(torch.finfo(dt).tiny * torch.finfo(dt).eps, dtype=dt)
            if float(tiny * 1.0) == 0:
                expected.append(dtype_name(dt))
    finally:
        torch.set_flush_denormal(False)
    assert list(r.flushed) == expected and "float32" in expected
    facts = r.reading().facts
    assert facts["flushed_formats"] == ", ".join(expected)
    kept = [n for n in ("float32", "bfloat16", "float16") if n not in expected]
    assert facts["kept_formats"] == (", ".join(kept) or "none")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(numel=0), "numel"),
        (dict(numel=P.MAX_NUMEL + 1), "numel"),
        (dict(op="sqrt"), "op"),
        (dict(repeats=N.MAX_TIMING_REPEATS + 1), "repeats"),
        (dict(min_sample_s=5.0), "min_sample_s"),
    ],
)
def test_subnormal_slowdown_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        N.subnormal_slowdown(**kwargs)


# ---------------------------------------------------------------------------------------------------
# 5. Attention logits
# ---------------------------------------------------------------------------------------------------


def _logits64(seq, head_dim, magnitude, seed):
    with seeded(seed):
        Q = (magnitude * torch.rand(seq, head_dim)).to(torch.float16).double()
        K = (magnitude * torch.rand(seq, head_dim)).to(torch.float16).double()
    return Q, K, Q @ K.T


def test_attention_overflow_rows_follow_float64_logits():
    r = P.attention_overflow(16, 64, magnitude=60.0, device="cpu", seed=0)
    Q, K, logits = _logits64(16, 64, 60.0, 0)
    assert r.largest_input == float(torch.maximum(Q.max(), K.max())) < FP16.max / 1000
    assert r.largest_logit == float(logits.max()) > FP16.max
    row_max = logits.max(dim=1).values
    sure_inf = int((row_max > 65520 * 1.01).sum())
    sure_finite = int((row_max < FP16.max * 0.99).sum())
    fp16 = r.variants["fp16"]
    assert sure_inf <= fp16.nan_rows <= 16 - sure_finite and fp16.nan_rows > 0
    assert r.variants["fp16 logits, fp32 softmax"].nan_rows == fp16.nan_rows  # too late: inf is inf
    assert fp16.inf_logits >= int((logits > 65520 * 1.01).sum()) > 0
    for name in ("fp16 with Q scaled first", "bf16", "fp32 logits"):
        assert r.variants[name].ok, name
    assert r.variants["fp32 logits"].max_error < 1e-5
    assert r.variants["bf16"].max_error > r.variants["fp32 logits"].max_error  # fewer digits, same range
    assert math.isnan(fp16.max_error)
    attention = ("pitfalls.attention_finite_variants", "pitfalls.sdpa_backend", "pitfalls.sdpa_math_by_hand")
    assert codes(r) == ("pitfalls.attention_overflows", *attention)
    facts = r.reading().facts
    assert (facts["inf_logits"], facts["num_logits"], facts["num_finite"]) == (fp16.inf_logits, 256, 5)


def _sdpa_by_torch(Q, K, **kw):
    seq, d = Q.shape
    eye = torch.eye(seq, d, dtype=Q.dtype)[None, None]
    return torch.nn.functional.scaled_dot_product_attention(Q[None, None], K[None, None], eye, **kw)[
        0, 0, :, :seq
    ]


def test_sdpa_keeps_the_logits_that_float16_overflows():
    """F.scaled_dot_product_attention on the inputs whose float16 logits overflow: every probability finite,
    the backend the one torch picks, and the math backend is Q and K times d**-1/4 before the matmul."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    r = P.attention_overflow(16, 64, magnitude=60.0, device="cpu", seed=0)
    Q, K, _ = _logits64(16, 64, 60.0, 0)
    Q, K = Q.half(), K.half()
    assert (
        r.sdpa_backend
        == SDPBackend(torch._fused_sdp_choice(Q[None, None], K[None, None], Q[None, None])).name
    )
    assert r.variants["sdpa"].ok and r.variants["sdpa math"].ok and r.variants["sdpa"].max_error < 1e-3
    assert torch.isinf(Q @ K.T).any()  # the oracle: plain float16 logits overflow here
    with sdpa_kernel(SDPBackend.MATH):
        math_probs = _sdpa_by_torch(Q, K)
    s = math.sqrt(1 / math.sqrt(64))
    by_hand = torch.softmax((Q.float()[None, None] * s) @ (K.float()[None, None] * s).transpose(-2, -1), -1)
    assert torch.equal(math_probs, by_hand[0, 0].half()) and r.math_by_hand and r.math_dtype == "float32"
    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    try:  # torch's flag: the math backend in float16 itself, pre-scaled still
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
        r16 = P.attention_overflow(16, 64, magnitude=60.0, device="cpu", seed=0)
        assert r16.math_dtype == "float16" and r16.math_by_hand and r16.variants["sdpa math"].ok
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)


@pytest.mark.parametrize("seq, head_dim", [(5, 64), (40, 7), (16, 100)])
def test_sdpa_probabilities_for_any_shape(seq, head_dim):
    r = P.attention_overflow(seq, head_dim, magnitude=3.0, device="cpu", seed=1)
    assert r.math_by_hand and all(r.variants[n].max_error < 2e-3 for n in ("sdpa", "sdpa math"))


def test_attention_without_overflow_is_fine_everywhere():
    r = P.attention_overflow(8, 16, magnitude=4.0, device="cpu")
    assert all(v.ok for v in r.variants.values())
    assert codes(r)[:2] == ("pitfalls.attention_fits", "pitfalls.attention_finite_variants")
    assert r.reading().facts["num_finite"] == 7


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(seq=0), "seq"),
        (dict(head_dim=P.MAX_HEAD_DIM + 1), "head_dim"),
        (dict(magnitude=1e6), "magnitude"),
        (dict(magnitude=-1.0), "magnitude"),
    ],
)
def test_attention_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        P.attention_overflow(**kwargs)


# ---------------------------------------------------------------------------------------------------
# 6. torch.compile with autocast
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_compile_autocast_records_the_casts(dtype):
    r = P.compile_autocast("cpu", dtype=dtype)
    assert r.available, r.reason
    assert r.autocast_regions == 1
    assert r.casts == 3  # input, weight and bias of the Linear
    assert r.aten_graph.count("_to_copy") >= 3 and str(dtype) in r.aten_graph
    assert r.eager_dtype == r.compiled_dtype == dtype_name(dtype)
    assert r.bitwise_equal and r.max_abs_diff == 0
    assert r.sees_in_place_update
    assert r.graphs_outside_then_inside == 2 and r.dtypes_outside_then_inside == (
        "float32",
        dtype_name(dtype),
    )
    assert codes(r) == (
        "pitfalls.compile_casts",
        "pitfalls.compile_bitwise",
        "pitfalls.compile_sees_update",
        "pitfalls.compile_guard",
    )
    assert r.reading().facts["graphs_outside_then_inside"] == 2


def test_compile_autocast_says_why_when_compile_fails(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here\nmore text")

    monkeypatch.setattr(torch, "compile", broken)
    r = P.compile_autocast("cpu")
    assert not r.available and r.reason == "RuntimeError: no compiler here"
    assert codes(r) == ("pitfalls.compile_unavailable",)


def test_compile_autocast_refuses_bad_arguments():
    with pytest.raises(ValueError, match="dtype"):
        P.compile_autocast("cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="seed"):
        P.compile_autocast("cpu", seed=-3)


def test_float64_goes_through_the_cpu_helpers():
    """Apple GPUs have no float64: the static check of tests/test_mps_paths.py holds for these rooms too."""
    from test_mps_paths import float64_hazards

    for module in (P, S, N):
        assert float64_hazards(inspect.getsource(module)) == [], module.__name__


def test_every_reason_of_these_rooms_is_one_a_reading_can_give():
    """REASONS holds no dead sentence: each pitfalls, swamping and subnormals code is spelled out in its room."""
    for prefix, module in (("pitfalls.", P), ("swamping.", S), ("subnormals.", N)):
        source = inspect.getsource(module)
        assert [c for c in REASONS if c.startswith(prefix) and f'"{c}"' not in source] == [], prefix
