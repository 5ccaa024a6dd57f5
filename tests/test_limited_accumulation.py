"""amp_lab.tensor_cores' limited-precision accumulator (notebook 11) against its oracles: float64 summation in
k order (numpy's sequential ``add.accumulate``), ``math.frexp`` truncation, sums traced by hand, float32's
own summation error, and DeepSeek-V3's figures (about 2% at K = 4096 with about 14 bits, fixed by N_C = 128)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import tensor_cores as tc


def sequential_float64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact float64 products added in k order, each addition rounded to float64, then to float32."""
    p = a.double().numpy()[:, :, None] * b.double().numpy()[None, :, :]  # (M, K, N)
    return torch.from_numpy(np.add.accumulate(p, axis=1)[:, -1, :].astype(np.float32))


def truncated(x: float, bits: int) -> float:
    """``x`` chopped toward zero to ``bits`` fraction bits, from its frexp mantissa."""
    if not math.isfinite(x) or x == 0:
        return x
    m, e = math.frexp(x)  # |m| in [0.5, 1): 1 + bits significant bits are bits + 1 places after the point
    return math.ldexp(math.trunc(m * 2 ** (bits + 1)) / 2 ** (bits + 1), e)


@settings(max_examples=200)
@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(1, 52))
def test_round_accumulator_truncates_to_the_kept_fraction_bits(x, bits):
    r = tc.round_accumulator(torch.tensor([x], dtype=torch.float64), bits)
    assert r.dtype == torch.float64
    want = truncated(x, bits) if abs(x) >= 2.0**-1022 else float(r[0])  # (subnormals: not modelled)
    assert float(r[0]) == want
    assert abs(float(r[0])) <= abs(x) and math.copysign(1, float(r[0])) == math.copysign(1, x)


def test_round_accumulator_by_hand():
    r = tc.round_accumulator(torch.tensor([1.75, 2.125, -2.125, 1.0, math.inf, -math.inf]), 2)
    assert r[:6].tolist() == [1.75, 2.0, -2.0, 1.0, math.inf, -math.inf]
    assert tc.round_accumulator([1.75], 1).tolist() == [1.5]
    zero_d = tc.round_accumulator(torch.tensor(2.125, dtype=torch.float64), 2)
    assert zero_d.shape == () and zero_d.dtype == torch.float64 and float(zero_d) == 2.0
    assert bool(torch.isnan(tc.round_accumulator(torch.tensor([math.nan]), 1)).all())
    x = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tc.round_accumulator(x, 52), x)


def test_hand_traced_sum_with_a_two_bit_mantissa():
    a = torch.ones(1, 4)
    b = torch.tensor([[1.0], [0.75], [0.375], [0.25]])
    # 1 -> 1 + 0.75 = 1.75 (1.11b, kept) -> + 0.375 = 2.125 = 1.0001b * 2, chopped to 2.0 -> + 0.25 = 2.25
    # = 1.001b * 2, chopped to 2.0.  The exact sum is 2.375.
    assert tc.limited_accumulation_matmul(a, b, 2).tolist() == [[2.0]]
    # promoted every 2: 1.75, then 0.375 + 0.25 = 0.625 = 1.01b * 2**-1 (kept); 1.75 + 0.625 in float32
    assert tc.limited_accumulation_matmul(a, b, 2, promote_every=2).tolist() == [[2.375]]
    assert tc.limited_accumulation_matmul(a, b, 2, promote_every=3).tolist() == [[2.25]]  # 2.0 + 0.25
    # toward zero for negative sums too
    assert tc.limited_accumulation_matmul(-a, b, 2).tolist() == [[-2.0]]
    # with enough bits the sum is exact
    assert tc.limited_accumulation_matmul(a, b, 5).tolist() == [[2.375]]


@settings(max_examples=20)
@given(
    m=st.integers(1, 4),
    k=st.integers(1, 300),
    n=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-20, 1.0, 1e20]),
)
def test_52_bits_is_float64_summation_in_k_order(m, k, n, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=gen) * scale, torch.randn(k, n, generator=gen)
    out = tc.limited_accumulation_matmul(a, b, 52)
    assert out.dtype == torch.float32 and out.shape == (m, n)
    assert torch.equal(out, sequential_float64(a, b))
    # promotion at or past K changes nothing; every 1 is float32 summation of float64-exact products
    assert torch.equal(tc.limited_accumulation_matmul(a, b, 52, promote_every=k), out)
    every1 = tc.limited_accumulation_matmul(a, b, 52, promote_every=1)
    p = (a.double().numpy()[:, :, None] * b.double().numpy()[None, :, :]).astype(np.float32)
    assert torch.equal(every1, torch.from_numpy(np.add.accumulate(p, axis=1)[:, -1, :]))


def test_deepseeks_figure_and_its_fix():
    """DeepSeek-V3 (section 3.3): about 14 bits of accumulation give a max relative error near 2% at
    K = 4096; promoting to FP32 every N_C = 128 elements fixes it.  Inputs: uniform [0, 1) in E4M3."""
    e14, e14_promoted = tc.limited_accumulation_error(4096, 14), tc.limited_accumulation_error(4096, 14, 128)
    e13, e13_promoted = tc.limited_accumulation_error(4096, 13), tc.limited_accumulation_error(4096, 13, 128)
    assert 0.01 < e14 < 0.06 and 0.02 < e13 < 0.12 and e13 > 1.5 * e14  # one bit fewer: about twice
    assert e14_promoted < e14 / 10 and e13_promoted < e13 / 10
    # the error grows with K (truncations add up, always downward) and falls with every bit kept
    assert tc.limited_accumulation_error(512, 14) < e14 / 4
    assert tc.limited_accumulation_error(4096, 16) < e14 / 3
    assert tc.limited_accumulation_error(64, 14, size=4, seed=3) >= 0


def test_the_curve_is_the_error_of_each_prefix():
    ks = [16, 100, 512]
    curve = tc.limited_accumulation_curve(ks, 12, 64, size=4, seed=2)
    g = torch.Generator().manual_seed(2)
    a, b = (torch.rand(s, generator=g).to(torch.float8_e4m3fn).float() for s in ((4, 512), (512, 4)))
    for k, err in zip(ks, curve, strict=True):
        exact = a[:, :k].double() @ b[:k].double()
        out = tc.limited_accumulation_matmul(a[:, :k], b[:k], 12, promote_every=64).double()
        assert err == float(((out - exact).abs() / exact).max())
    assert tc.limited_accumulation_curve([4096], 14, size=32) == [tc.limited_accumulation_error(4096, 14)]


def test_23_bits_is_of_float32s_error_order():
    gen = torch.Generator().manual_seed(0)
    K = 1024
    a, b = torch.rand(8, K, generator=gen), torch.rand(K, 8, generator=gen)
    exact = a.double() @ b.double()

    def error(c):
        return float(((c.double() - exact).abs() / exact).max())

    p = (a.double().numpy()[:, :, None] * b.double().numpy()[None, :, :]).astype(np.float32)
    float32_error = error(torch.from_numpy(np.add.accumulate(p, axis=1)[:, -1, :]))
    model = error(tc.limited_accumulation_matmul(a, b, 23))
    # truncation is biased (every addition loses, never gains), so it sits above float32's rounding to
    # nearest, within the worst-case bound K * 2**-23 of an accumulator with unit roundoff 2**-23
    assert float32_error < model < K * 2.0**-23 and model < 100 * float32_error
    assert error(tc.limited_accumulation_matmul(a, b, 23, promote_every=128)) < model / 4


def test_device_and_dtype_of_the_result():
    a = torch.ones(2, 3, dtype=torch.bfloat16)
    out = tc.limited_accumulation_matmul(a, [[1.0], [2.0], [3.0]], 10)
    assert out.dtype == torch.float32 and out.tolist() == [[6.0], [6.0]]


BAD = [
    (lambda: tc.limited_accumulation_matmul(torch.ones(2, 3), torch.ones(4, 2), 10), ValueError, "K"),
    (lambda: tc.limited_accumulation_matmul(torch.ones(3), torch.ones(3, 2), 10), ValueError, "a"),
    (lambda: tc.limited_accumulation_matmul(torch.ones(2, 3), "b", 10), TypeError, "b"),
    (
        lambda: tc.limited_accumulation_matmul(torch.ones(2, 3), torch.ones(3, 2), 0),
        ValueError,
        "mantissa_bits",
    ),
    (
        lambda: tc.limited_accumulation_matmul(torch.ones(2, 3), torch.ones(3, 2), 53),
        ValueError,
        "mantissa_bits",
    ),
    (
        lambda: tc.limited_accumulation_matmul(torch.ones(2, 3), torch.ones(3, 2), 10.0),
        TypeError,
        "mantissa_bits",
    ),
    (
        lambda: tc.limited_accumulation_matmul(torch.ones(2, 3), torch.ones(3, 2), True),
        TypeError,
        "mantissa_bits",
    ),
    (
        lambda: tc.limited_accumulation_matmul(torch.ones(2, 3), torch.ones(3, 2), 10, 0),
        ValueError,
        "promote_every",
    ),
    (
        lambda: tc.limited_accumulation_matmul(torch.ones(1, 2**16 + 1), torch.ones(2**16 + 1, 1), 10),
        ValueError,
        "K",
    ),
    (
        lambda: tc.limited_accumulation_matmul(torch.ones(64, 4096), torch.ones(4096, 128), 10),
        ValueError,
        "M\\*N\\*K",
    ),
    (lambda: tc.limited_accumulation_error(0, 14), ValueError, "k"),
    (lambda: tc.limited_accumulation_error(4096, 14, size=65), ValueError, "size"),
    (lambda: tc.limited_accumulation_error(2**16, 14, size=64), ValueError, "k \\* size"),
    (lambda: tc.limited_accumulation_error(64, 14, seed=-1), ValueError, "seed"),
    (lambda: tc.limited_accumulation_error(64, 60), ValueError, "mantissa_bits"),
    (lambda: tc.limited_accumulation_curve([64, 32], 14), ValueError, "ks must increase"),
    (lambda: tc.limited_accumulation_curve([], 14), ValueError, "ks"),
    (lambda: tc.limited_accumulation_curve(64, 14), TypeError, "ks"),
    (lambda: tc.limited_accumulation_curve([0, 64], 14), ValueError, "ks"),
    (lambda: tc.limited_accumulation_curve([64], 14, 0), ValueError, "promote_every"),
    (lambda: tc.round_accumulator(torch.ones(2), 0), ValueError, "mantissa_bits"),
    (lambda: tc.round_accumulator("1", 3), TypeError, "x"),
]


@pytest.mark.parametrize("call, error, word", BAD)
def test_bad_arguments_are_refused_by_name(call, error, word):
    with pytest.raises(error, match=word):
        call()
