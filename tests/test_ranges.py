"""amp_lab.ranges against torch's casts, torch.finfo and float64 arithmetic."""

import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import formats as F
from amp_lab import range_counts
from amp_lab import range_counts as RC
from amp_lab import ranges as R

FMT_NAMES = list(F.FORMATS)


# ---------------------------------------------------------------------------------------------
# Independent oracles
# ---------------------------------------------------------------------------------------------


def fmt_limits(name):
    """(max, smallest normal) from torch.finfo where torch has the dtype, else from the bit widths."""
    f = F.FORMATS[name]
    if f.torch_dtype is not None:
        fi = torch.finfo(f.torch_dtype)
        return fi.max, fi.smallest_normal
    assert name == "tf32"
    return (2 - 2**-10) * 2.0**127, 2.0**-126


def rne_unbounded(a: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """|a| (float64, > 0) rounded to ``mantissa_bits`` with an unbounded exponent, ties to even."""
    e = torch.floor(torch.log2(a))
    # log2 may land on the wrong side of a power of two: fix the binade exactly.
    e = torch.where(torch.exp2(e) > a, e - 1, e)
    e = torch.where(torch.exp2(e + 1) <= a, e + 1, e)
    q = torch.exp2(e - mantissa_bits)
    return torch.round(a / q) * q  # torch.round is half-to-even


def oracle_counts(x: torch.Tensor, name: str, scale: float) -> dict:
    """Categories of the non-zero finite elements of x*scale, computed with torch's own cast
    (round_to only for TF32, which torch cannot store) and a float64 overflow test."""
    f = F.FORMATS[name]
    x = x.float().reshape(-1)
    x = x[torch.isfinite(x) & (x != 0)]
    y = x * torch.tensor(scale, dtype=torch.float32)
    r = y.to(f.torch_dtype).float() if f.torch_dtype is not None else F.round_to(y, "tf32")
    fmax, tiny = fmt_limits(name)
    a = y.double().abs()
    finite_a = torch.isfinite(a) & (a > 0)
    beyond = torch.zeros_like(a, dtype=torch.bool)
    beyond[finite_a] = rne_unbounded(a[finite_a], f.mantissa_bits) > fmax
    over = beyond | torch.isinf(a) | ~torch.isfinite(r)
    under = (r == 0) & ~over
    sub = (r != 0) & (r.abs() < tiny) & ~over
    normal = ~(over | under | sub)
    return {
        "underflow": int(under.sum()),
        "subnormal": int(sub.sum()),
        "normal": int(normal.sum()),
        "overflow": int(over.sum()),
    }


def log_uniform(seed: int, n: int, lo: float, hi: float, zero_frac: float = 0.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    expo = lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
    x = (sign * torch.exp2(expo)).float()  # exponents beyond float32 become 0 or inf here
    if zero_frac:
        x[torch.rand(n, generator=gen) < zero_frac] = 0.0
    return x


scales = st.one_of(
    st.integers(-30, 30).map(lambda k: 2.0**k),
    st.floats(1e-3, 1e6, allow_nan=False, allow_infinity=False),
)


# ---------------------------------------------------------------------------------------------
# range_report
# ---------------------------------------------------------------------------------------------


@settings(max_examples=120)
@given(
    name=st.sampled_from(FMT_NAMES),
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(0, 400),
    lo=st.floats(-170, 120),
    span=st.floats(0, 60),
    zero_frac=st.sampled_from([0.0, 0.3]),
    specials=st.booleans(),
    scale=scales,
)
def test_range_report_matches_torch_casts(name, seed, n, lo, span, zero_frac, specials, scale):
    x = log_uniform(seed, n, lo, lo + span, zero_frac)
    if specials:
        x = torch.cat([x, torch.tensor([math.inf, -math.inf, math.nan, 0.0])])
    rep = RC.range_report(x, name, scale)
    expected = oracle_counts(x, name, scale)
    assert rep.counts == expected
    nonzero_finite = int((torch.isfinite(x) & (x != 0)).sum())
    assert rep.total == nonzero_finite == sum(rep.counts.values())
    assert rep.zeros == int((x == 0).sum())
    assert rep.nonfinite == int((~torch.isfinite(x)).sum())
    for c in RC.CATEGORIES:
        frac = getattr(rep, c)
        assert 0.0 <= frac <= 1.0
        assert frac == (expected[c] / nonzero_finite if nonzero_finite else 0.0)
    if nonzero_finite:
        assert math.isclose(sum(map(rep.fraction, RC.CATEGORIES)), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("name", FMT_NAMES)
def test_range_report_at_the_boundaries(name):
    f = F.FORMATS[name]
    fmax, tiny = fmt_limits(name)
    sub = f.min_subnormal
    ulp_max = 2.0 ** (f.emax - f.mantissa_bits)
    candidates = [
        sub / 2,  # a tie between 0 and the smallest subnormal: rounds to even, i.e. 0
        sub / 2 * (1 + 2**-20),
        sub,
        tiny * (1 - 2**-20),
        tiny,
        fmax,
        fmax + ulp_max / 2,  # the tie above max
        (fmax + ulp_max / 2) * (1 - 2**-22),
        (fmax + ulp_max / 2) * (1 + 2**-22),
        fmax * 4,
    ]
    x = torch.tensor(candidates, dtype=torch.float64).float()
    x = torch.cat([x, -x])
    assert RC.range_report(x, name).counts == oracle_counts(x, name, 1.0)


def test_fp16_examples_by_hand():
    x = torch.tensor([2.0**-25, 2.0**-25 * 1.001, 2.0**-24, 2.0**-14, 65504.0, 65519.0, 65520.0, 1e6])
    rep = RC.range_report(x, "fp16")
    assert rep.counts == {"underflow": 1, "subnormal": 2, "normal": 3, "overflow": 2}
    assert RC.overflow_threshold("fp16") == (65520.0, True)
    # E4M3's max 448 ends in a 0 bit: the tie 464 rounds down to 448, anything above saturates
    assert RC.overflow_threshold("fp8_e4m3") == (464.0, False)
    e4m3 = RC.range_report(torch.tensor([448.0, 464.0, 465.0, 1e4]), "fp8_e4m3")
    assert e4m3.counts["overflow"] == 2 and e4m3.counts["normal"] == 2


def test_inputs_dicts_lists_and_records_flatten():
    a = torch.tensor([[1e-9, 1.0], [0.0, 2.0]])
    b = torch.tensor([1e-6, 7e4], dtype=torch.float16).float()
    whole = torch.cat([a.reshape(-1), b])
    ref = RC.range_report(whole, "fp16").counts
    assert RC.range_report({"a": a, "b": b}, "fp16").counts == ref
    assert RC.range_report([a, b], "fp16").counts == ref
    assert RC.range_report(whole.tolist(), "fp16").counts == ref
    half = RC.range_report(a.half(), "fp16")  # 1e-9 is already 0 in float16
    assert (half.total, half.zeros) == (2, 2)
    reports = RC.per_layer_reports({"a": a, "b": b}, "fp16")
    assert reports["a"].counts == RC.range_report(a, "fp16").counts


def test_empty_and_all_zero_give_zero_fractions():
    for x in (torch.empty(0), torch.zeros(5), [], torch.tensor([math.nan, 0.0])):
        rep = RC.range_report(x, "fp16")
        assert rep.total == 0
        assert [rep.fraction(c) for c in RC.CATEGORIES] == [0.0] * 4


@pytest.mark.parametrize("scale", [0.0, -1.0, -0.0, math.nan, math.inf, -math.inf, 1e-60, 1e60, "2", True, None])
def test_bad_scale_raises(scale):
    with pytest.raises(ValueError, match="scale"):
        RC.range_report(torch.ones(3), "fp16", scale)
    with pytest.raises(ValueError, match="scale"):
        RC.log2_histogram(torch.ones(3), scale=scale)


def test_bad_format_and_input_raise():
    with pytest.raises(ValueError, match="fmt"):
        RC.range_report(torch.ones(3), "fp12")
    with pytest.raises(ValueError, match="x must"):
        RC.range_report(object(), "fp16")
    with pytest.raises(ValueError, match="x must"):
        RC.range_report([torch.ones(2), "a"], "fp16")
    with pytest.raises(ValueError, match="tensors"):
        RC.per_layer_reports(torch.ones(3), "fp16")


# ---------------------------------------------------------------------------------------------
# suggest_scale
# ---------------------------------------------------------------------------------------------


def overflows_f64(amax: float, k: int, name: str) -> bool:
    """Does amax * 2**k overflow ``name``? float64 with an unbounded-exponent rounding."""
    fmax, _ = fmt_limits(name)
    v = torch.tensor([math.ldexp(amax, k)], dtype=torch.float64)
    if math.isinf(v.item()):
        return True
    return bool(rne_unbounded(v, F.FORMATS[name].mantissa_bits)[0] > fmax)


@settings(max_examples=100)
@given(
    name=st.sampled_from(FMT_NAMES),
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 300),
    lo=st.floats(-140, 100),
    span=st.floats(0, 40),
)
def test_suggest_scale_is_the_largest_safe_power_of_two(name, seed, n, lo, span):
    x = log_uniform(seed, n, lo, lo + span)
    nz = x[torch.isfinite(x) & (x != 0)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = RC.suggest_log2_scale(x, name)
        if nz.numel() == 0:
            assert k is None and RC.suggest_scale(x, name) == math.inf
            return
        assert RC.suggest_scale(x, name) == 2.0**k
    amax = float(nz.abs().max())
    assert not overflows_f64(amax, k, name)
    if k < 127:
        assert overflows_f64(amax, k + 1, name)
        assert not caught
    else:  # clamped to the largest float32 power of two, with a warning exactly when 2**128 would also fit
        assert k == 127
        assert bool(caught) == (not overflows_f64(amax, 128, name))
    f = F.FORMATS[name]
    # where both scales are float32 numbers, range_report and torch's cast agree
    if -126 <= k and k + 1 <= 127:
        assert RC.range_report(x, name, 2.0**k).counts["overflow"] == 0
        assert RC.range_report(x, name, 2.0 ** (k + 1)).counts["overflow"] > 0
        if f.torch_dtype is not None and not f.finite_only:
            assert not torch.isinf((x * 2.0**k).to(f.torch_dtype).float()).any()
            assert torch.isinf((x * 2.0 ** (k + 1)).to(f.torch_dtype).float()).any()


def test_suggest_scale_examples():
    assert RC.suggest_scale(torch.tensor([1.0]), "fp16") == 2.0**15  # 2^15 <= 65504 < 2^16
    assert RC.suggest_scale(torch.tensor([32760.0]), "fp16") == 1.0  # 65520 would round to inf
    assert RC.suggest_scale(torch.tensor([32759.0]), "fp16") == 2.0  # 65518 rounds to 65504
    assert RC.suggest_scale(torch.tensor([1e6]), "fp16") == 2.0**-4  # scale down: 62500 fits, 125000 does not
    assert RC.suggest_scale(torch.tensor([232.0]), "fp8_e4m3") == 2.0  # 464 -> 448, no saturation
    assert RC.suggest_scale(torch.tensor([0.0, math.inf]), "fp16") == math.inf


# ---------------------------------------------------------------------------------------------
# Histogram, swamping
# ---------------------------------------------------------------------------------------------


@settings(max_examples=40)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 300), lo=st.floats(-150, 100), span=st.floats(0, 50))
def test_log2_histogram_matches_numpy(seed, n, lo, span):
    x = log_uniform(seed, n, lo, lo + span, zero_frac=0.2)
    hist = RC.log2_histogram(x)
    v = x.double().numpy()
    v = np.abs(v[np.isfinite(v) & (v != 0)])
    e = np.floor(np.log2(v)).astype(int)
    assert hist.total == v.size
    assert hist.zeros == int((x == 0).sum())
    if v.size:
        assert hist.edges[0] == e.min() and hist.edges[-1] == e.max() + 1
        np.testing.assert_array_equal(hist.counts, np.bincount(e - e.min(), minlength=len(hist.counts)))
        # scaling by 2**k shifts the histogram by exactly k bins when nothing leaves float32
        k = 7
        if e.max() + k < 127:
            shifted = RC.log2_histogram(x, scale=2.0**k)
            np.testing.assert_array_equal(shifted.counts, hist.counts)
            np.testing.assert_array_equal(shifted.edges, hist.edges + k)


def test_log2_histogram_window_counts_outside():
    hist = RC.log2_histogram(torch.tensor([0.5, 1.0, 3.0, 1024.0]), lo=-1, hi=2)
    assert list(hist.counts) == [1, 1, 1] and hist.outside == 1 and hist.total == 4


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_lost_update_fraction_matches_torch_arithmetic(name):
    dtype = F.FORMATS[name].torch_dtype
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(2000, generator=gen)
    dw = torch.randn(2000, generator=gen) * torch.exp2(torch.empty(2000).uniform_(-20, 0, generator=gen))
    expected = ((w.to(dtype) + dw.to(dtype)) == w.to(dtype)).double().mean().item()
    assert RC.lost_update_fraction(w, dw, name) == pytest.approx(expected, abs=0)
    assert 0 < expected < 1


def test_swamping_rule():
    assert RC.lost_update_fraction(torch.tensor([2048.0]), torch.tensor([1.0]), "fp16") == 1.0
    assert RC.lost_update_fraction(torch.tensor([1.0]), torch.tensor([2.0**-12]), "fp16") == 1.0
    assert RC.lost_update_fraction(torch.tensor([1.0]), torch.tensor([2.0**-10]), "fp16") == 0.0
    assert RC.lost_update_fraction(torch.tensor([1.0]), torch.tensor([2.0**-12]), "fp32") == 0.0
    assert RC.lost_update_fraction(torch.ones(3), torch.zeros(3), "fp16") == 0.0
    with pytest.raises(ValueError, match="same number"):
        RC.lost_update_fraction(torch.ones(3), torch.ones(2), "fp16")


# ---------------------------------------------------------------------------------------------
# The slider, driven headlessly
# ---------------------------------------------------------------------------------------------

PCT = re.compile(r"(underflow|subnormal|normal|overflow): ([0-9]+\.[0-9]{3})% \(([0-9]+) of ([0-9]+)\)")


def parse_readout(html_text: str) -> dict:
    return {m[0]: (float(m[1]), int(m[2]), int(m[3])) for m in PCT.findall(html_text)}


def test_scale_explorer_readouts_follow_the_slider():
    x = {"a": log_uniform(1, 3000, -45, -5, zero_frac=0.2), "b": log_uniform(2, 1000, -20, 0)}
    ex = R.scale_explorer(x, "fp16")
    assert "amp-scale-slider" in ex.slider._dom_classes
    assert "amp-scale-readout" in ex.readout._dom_classes
    assert (ex.slider.min, ex.slider.max, ex.slider.value) == (0, ex.top_log2(), 0)
    assert ex.suggested_log2 == RC.suggest_log2_scale(x, "fp16")
    seen = []
    renders = ex.pane.renders
    first_png = ex.pane.image.value
    for k in (0, 8, 16, 24):
        ex.slider.value = k
        rep = RC.range_report(x, "fp16", 2.0**k)
        got = parse_readout(ex.readout.value)
        assert set(got) == set(RC.CATEGORIES)
        for c in RC.CATEGORIES:
            assert got[c] == (round(100 * rep.fraction(c), 3), rep.counts[c], rep.total)
        assert ex.report.counts == rep.counts
        seen.append(got["underflow"][0])
    assert seen[0] > seen[1] > seen[2]  # more scale, less underflow
    assert ex.pane.renders == renders + 3  # k=0 was already drawn: no event, no redraw
    assert ex.pane.image.value != first_png
    # the bars moved: the stairs' edges are the histogram's edges shifted by k
    patch = ex._stairs["normal"]
    np.testing.assert_array_equal(patch.get_data().edges, ex._hist.edges + 24)


@pytest.mark.parametrize("fmt", ["fp16", "fp8_e5m2", "fp8_e4m3"])
def test_scale_slider_ends_where_most_values_overflow(fmt):
    """03's slider stopped at 2^24, where almost nothing overflowed; its top is now the first scale at which
    more than half of the values overflow (oracle: range_report at the top and one step below)."""
    x = {"a": log_uniform(3, 4000, -45, -5, zero_frac=0.2), "b": log_uniform(4, 999, -30, 2)}
    ex = R.scale_explorer(x, fmt)
    top = ex.slider.max
    assert top > ex.suggested_log2
    assert RC.range_report(x, fmt, 2.0**top).overflow > 0.5 >= RC.range_report(x, fmt, 2.0 ** (top - 1)).overflow
    ex.slider.value = top
    assert ex.report.counts == RC.range_report(x, fmt, 2.0**top).counts
    assert R.scale_explorer(x, fmt, max_log2=12).slider.max == 12  # a chosen top is kept
    assert R.scale_explorer(x, fmt, log2_scale=top + 5).slider.max == top + 5  # and so is a start above it
    assert R.scale_explorer(torch.zeros(3), fmt).slider.max == 24  # nothing to overflow: the old default
    assert R.scale_explorer(x, "bf16").slider.max == R.MAX_SLIDER_LOG2  # BF16 needs more: the slider's end


def test_scale_explorer_shows_overflow_of_large_values():
    x = torch.tensor([1e-3, 1.0, 100.0])
    ex = R.scale_explorer(x, "fp16", log2_scale=3, max_log2=12)
    assert ex.suggested_log2 == 9  # 100 * 2^9 = 51200 < 65504
    ex.slider.value = 10
    assert parse_readout(ex.readout.value)["overflow"] == (33.333, 1, 3)
    assert "suggested scale: 2^9" in ex.readout.value
    with pytest.raises(ValueError, match="log2_scale"):
        R.scale_explorer(x, "fp16", log2_scale=30, max_log2=12)
    with pytest.raises(ValueError, match="log2_scale"):
        R.scale_explorer(x, "fp16", log2_scale=R.MAX_SLIDER_LOG2 + 1)


# ---------------------------------------------------------------------------------------------
# Without float64 (Apple GPUs have none): the overflow test in float32
# ---------------------------------------------------------------------------------------------

# Course formats, plus formats of one's own whose threshold float32 cannot hold: between two
# float32 values (E5M30, with an odd and an even max), beyond float32's range (E8M30, E11M52).
THRESHOLD_FORMATS = [F.FORMATS[n] for n in FMT_NAMES] + [
    F.FloatFormat("e5m30", 5, 30),
    F.FloatFormat("e5m30fn", 5, 30, finite_only=True, overflow="saturate"),
    F.FloatFormat("e8m30", 8, 30),
    F.FloatFormat("e11m52", 11, 52),
    F.FloatFormat("e3m2fn", 3, 2, finite_only=True, overflow="nan"),
]


def float32_neighbours(v: float, k: int = 3) -> list[float]:
    """The float32 values within ``k`` steps of ``v`` (rounded to float32), both ways."""
    with np.errstate(over="ignore"):
        c = np.float32(min(v, 3.4028234663852886e38))
        out, lo, hi = [float(c)], c, c
        for _ in range(k):
            lo, hi = np.nextafter(lo, np.float32(0)), np.nextafter(hi, np.float32(np.inf))
            out += [float(lo), float(hi)]
    return out


@pytest.mark.parametrize("f", THRESHOLD_FORMATS, ids=lambda f: f.name)
def test_overflow_test_needs_no_float64(f):
    thr, inclusive = RC.overflow_threshold(f)
    values = float32_neighbours(thr) + float32_neighbours(f.max) + float32_neighbours(thr / 2)
    values += [3.4028234663852886e38, float("inf"), 1.0, f.min_subnormal]
    y = torch.tensor(values, dtype=torch.float32)
    y = torch.cat([y, -y, log_uniform(7, 2000, -140, 128)])
    r = F.round_to(y, f)
    a = y.double().abs()  # the oracle: the float64 comparison with the exact threshold
    want = ((a >= thr) if inclusive else (a > thr)) | ~torch.isfinite(r)
    assert torch.equal(range_counts._categorize(y, f)["overflow"], want)
    t, _ = range_counts._float32_threshold(f)
    assert float(np.float32(t)) == t  # a float32 value: the comparison is exact in float32


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 97, 1000, 4099, 65537])
def test_lost_update_fraction_is_the_float64_mean_to_the_bit(n):
    gen = torch.Generator().manual_seed(n)
    w = torch.randn(n, generator=gen)
    dw = torch.randn(n, generator=gen) * torch.exp2(torch.empty(n).uniform_(-16, -4, generator=gen))
    w16, d16 = F.round_to(w, "fp16"), F.round_to(dw, "fp16")
    keep = dw != 0
    old = float((F.round_to(w16 + d16, "fp16")[keep] == w16[keep]).double().mean())  # the float64 mean it was
    assert RC.lost_update_fraction(w, dw, "fp16") == old


# ---- every bad input gets a clear error; a suggested scale is always usable ----



def test_suggested_scale_is_a_usable_float32_loss_scale():
    from amp_lab._checks import check_scale

    with pytest.warns(UserWarning, match=r"2\*\*164.*suggesting 2\*\*127"):
        s = RC.suggest_scale([1e-45], "fp16")
    assert s == 2.0**127 == check_scale("scale", s)
    RC.range_report([1e-45], "fp16", s)  # accepted by the other scale checks
    with pytest.warns(UserWarning):
        assert RC.suggest_log2_scale(torch.tensor([1e-45]), "fp16") == RC.MAX_LOG2_SCALE == 127


@pytest.mark.parametrize(
    "x,err,words",
    [
        (torch.tensor([True, False]), TypeError, "bool"),
        ([True, False], TypeError, "bool"),
        (np.array([True]), TypeError, "bool"),
        (torch.tensor([1 + 1j]), TypeError, "complex"),
        ("1e-8", TypeError, "quotes"),
        (None, TypeError, "x must be"),
        ({"a": [1.0]}, TypeError, "only tensors"),
        ({"a": torch.tensor([True])}, TypeError, "bool"),
    ],
)
def test_range_report_refuses_what_is_not_real_numbers(x, err, words):
    with pytest.raises(err, match=words):
        RC.range_report(x, "fp16")


def test_range_report_accepts_numpy():
    expect = RC.range_report(torch.tensor([1e-8, 1.0]), "fp16")
    assert RC.range_report(np.array([1e-8, 1.0], dtype=np.float32), "fp16") == expect
    assert RC.range_report(np.float32(1e-8), "fp16").counts["underflow"] == 1
    assert RC.range_report(torch.tensor([1.0]), "fp16", np.float32(2.0)).scale == 2.0


@pytest.mark.parametrize("scale", [2.0**-130, 2.0**128, True])
def test_scales_follow_the_float32_loss_scale_rule(scale):
    for fn in (lambda s: RC.range_report([1.0], "fp16", s), lambda s: RC.log2_histogram([1.0], scale=s)):
        with pytest.raises(ValueError, match="scale"):
            fn(scale)


def test_per_layer_reports_checks_fmt_and_scale_even_when_empty():
    with pytest.raises(ValueError, match="fmt"):
        RC.per_layer_reports({}, "fp12")
    with pytest.raises(ValueError, match="scale"):
        RC.per_layer_reports({}, "fp16", -1.0)
    with pytest.raises(TypeError, match="dict"):
        RC.per_layer_reports([torch.ones(2)], "fp16")


@pytest.mark.parametrize(
    "kwargs,err,words",
    [
        ({"xlim": (1,)}, TypeError, "xlim"),
        ({"xlim": (5, 1)}, ValueError, "hi > lo"),
        ({"xlim": (0, math.nan)}, ValueError, "xlim"),
        ({"fmts": []}, ValueError, "at least one"),
        ({"fmts": 5}, TypeError, "fmts"),
        ({"rulers": "yes"}, TypeError, "rulers"),
        ({"title": 5}, TypeError, "title"),
        ({"ax": "ax"}, TypeError, "ax"),
        ({"scale": 0.0}, ValueError, "scale"),
    ],
)
def test_plot_log2_histogram_checks_before_making_a_figure(kwargs, err, words):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    with pytest.raises(err, match=words):
        R.plot_log2_histogram(torch.tensor([1.0, 2.0]), **kwargs)
    assert plt.get_fignums() == before  # no half-made figure left behind


@pytest.mark.parametrize("kwargs", [{"lo": True}, {"lo": 1.5}, {"hi": "3"}])
def test_log2_histogram_bounds_are_integers(kwargs):
    with pytest.raises(TypeError):
        RC.log2_histogram([1.0], **kwargs)


def test_learner_facing_range_functions_check_their_arguments():
    with pytest.raises(TypeError, match="bool"):
        RC.lost_update_fraction([1.0], [True], "fp16")
    ex = R.scale_explorer(torch.tensor([1e-6, 1.0]), "fp16")
    with pytest.raises(ValueError, match="log2_scale"):
        ex.update(200)
    with pytest.raises(TypeError, match="log2_scale"):
        ex.update(True)
    assert ex.report == RC.range_report(torch.tensor([1e-6, 1.0]), "fp16")  # unchanged by the refused calls
    with pytest.raises(TypeError, match="title"):
        R.scale_explorer(torch.tensor([1.0]), "fp16", title=5)


def test_range_report_reads_float64_from_its_own_values():
    """1e-50 and 1e300 are beyond float32: read through float32 they were a zero and an inf, left out."""
    r = RC.range_report(torch.tensor([1e-50, 1e300, 1.0], dtype=torch.float64), "bf16")
    assert (r.total, r.zeros, r.nonfinite) == (3, 0, 0)
    assert r.counts == {"underflow": 1, "subnormal": 0, "normal": 1, "overflow": 1}


@pytest.mark.parametrize("fmt, below, at, inclusive", [("fp16", 65519.99, 65520.0, True), ("fp8_e4m3", 463.99, 464.0, False)])
def test_a_float64_meets_the_overflow_threshold_exactly(fmt, below, at, inclusive):
    r = RC.range_report(torch.tensor([below, at, math.nextafter(at, math.inf)], dtype=torch.float64), fmt)
    assert r.counts["overflow"] == (2 if inclusive else 1) and r.counts["normal"] == (1 if inclusive else 2)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), log2_scale=st.integers(-20, 20), fmt=st.sampled_from(["fp16", "bf16", "fp8_e4m3"]))
def test_float32_values_count_the_same_as_float32_or_as_float64(seed, log2_scale, fmt):
    x = torch.randn(2000, generator=torch.Generator().manual_seed(seed)) * 2.0 ** torch.randint(-40, 40, (2000,))
    assert RC.range_report(x.double(), fmt, 2.0**log2_scale).counts == RC.range_report(x, fmt, 2.0**log2_scale).counts


def test_log2_histogram_bins_float64_from_its_own_values():
    h = RC.log2_histogram(torch.tensor([1e-50, 1e300, 1.0], dtype=torch.float64))
    assert (h.zeros, h.nonfinite, h.outside) == (0, 0, 0)
    assert [int(k) for k, n in zip(h.lefts, h.counts, strict=True) if n] == [-167, 0, 996]  # 2**-167 <= 1e-50 < 2**-166
    assert RC.bin_categories(np.array([-167, 0, 996]), F.FORMATS["bf16"]) == ["underflow", "normal", "overflow"]
