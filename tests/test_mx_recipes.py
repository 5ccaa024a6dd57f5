"""amp_lab.mx's scale modes and NVFP4 training recipe against their oracles: torchao 0.18's ``to_mx`` +
``to_dtype`` under every ``ScaleCalculationMode`` and its NVFP4Tensor, scipy's Hadamard matrices, the FP4
grid's neighbours and the binomial spread of stochastic rounding, and the recipe's GEMMs rebuilt from
:func:`nvfp4_quantize` calls (which are themselves proven against torchao).

Identity is checked on raw bits (NaN matches NaN, -0.0 does not match 0.0)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st
from torch import nn

from amp_lab import fp8_formats, mx
from amp_lab.data import load_digits
from amp_lab.training import train_digits

ELEMS = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "fp4_e2m1": torch.float4_e2m1fn_x2}
FP4_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FLOAT32_MAX = torch.finfo(torch.float32).max


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors (tests/conftest.py)


@pytest.fixture(scope="module")
def ao():
    fp8_formats.import_torchao()
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

    def mx_reference(x, elem, block_size, mode):
        dtype = ELEMS[elem]
        scale, data = to_mx(x, dtype, block_size, scaling_mode=ScaleCalculationMode(mode))
        return to_dtype(data, scale, dtype, block_size, torch.float32)

    def nvfp4_reference(x):
        return NVFP4Tensor.to_nvfp4(x.contiguous(), per_tensor_scale=mx_g(x)).dequantize(torch.float32)

    return mx_reference, nvfp4_reference


def mx_g(x):
    """torchao's per-tensor NVFP4 scale (per_tensor_amax_to_scale), 1.0 for zeros as amp_lab's default."""
    g = x.abs().amax().to(torch.float32) / (448.0 * 6.0)
    return torch.where(g == 0, 1.0, g)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().contiguous().float(), b.detach().contiguous().float()
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(
        a[~nan].view(torch.int32), b[~nan].view(torch.int32)
    )


# ------------------------------------------------------------------------------------------
# The four MX scale modes, bit for bit torchao's
# ------------------------------------------------------------------------------------------

KINDS = ["gauss", "zero", "nan", "inf", "tiny", "denormal", "huge", "near_max"]
TOPS = [448.0, 449.0, 464.0, 480.0, 496.0, 511.0, 512.0, 57344.0, 6.0, 7.0, 5.5, 1.9375, 1.875]


@st.composite
def mx_blocks(draw, block_size):
    """Rows of blocks, each of its own kind, including each mode's edges: amaxes just below, at and above
    a power of two times the element's max (448 to 512 for E4M3), and FP4's and the EVEN mode's 1.9375."""
    rows, nblocks = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    blocks = []
    for _ in range(rows * nblocks):
        kind = draw(st.sampled_from(KINDS))
        event(kind)
        b = torch.randn(block_size, generator=gen, dtype=torch.float64) * 10.0 ** draw(st.integers(-6, 6))
        if kind == "zero":
            b.zero_()
        elif kind in ("nan", "inf"):  # beside huge values too: RCEIL multiplies an inf block by 2**-127
            b = b * draw(st.sampled_from([1.0, 2.0**120]))
            b[draw(st.integers(0, block_size - 1))] = math.nan if kind == "nan" else -math.inf
        elif kind == "tiny":  # below 2**(emax - 127): torchao's clamp of the divisor to 2**-126
            b = b / b.abs().max() * 2.0 ** draw(st.integers(-140, -110))
        elif kind == "denormal":
            b = b * 1e-42
        elif kind == "huge":
            b = b / b.abs().max() * 2.0 ** draw(st.integers(100, 127)) * draw(st.sampled_from([1.0, 1.99]))
        elif kind == "near_max":
            b = b / b.abs().max() * draw(st.sampled_from(TOPS)) * 2.0 ** draw(st.integers(-30, 30))
        blocks.append(b)
    x = torch.cat(blocks).reshape(rows, nblocks * block_size)
    finite = torch.isfinite(x)
    return torch.where(finite, x.clamp(-FLOAT32_MAX, FLOAT32_MAX), x).to(torch.float32)


@pytest.mark.parametrize("mode", mx.SCALE_MODES)
@pytest.mark.parametrize("elem", list(ELEMS))
@settings(max_examples=25)
@given(data=st.data())
def test_every_scale_mode_is_torchaos(ao, elem, mode, data):
    mx_reference, _ = ao
    block_size = data.draw(st.sampled_from([16, 32]))
    x = data.draw(mx_blocks(block_size))
    ours = mx.mx_quantize(x, elem, block_size, scale_mode=mode)
    assert same_bits(ours, mx_reference(x, elem, block_size, mode))
    xb = x.to(torch.bfloat16)  # torchao takes bfloat16 too
    assert same_bits(mx.mx_quantize(xb, elem, block_size, mode), mx_reference(xb, elem, block_size, mode))
    elements, step = mx.mx_parts(x, elem, block_size, mode)
    assert same_bits(elements * step, ours)
    finite = torch.isfinite(step)
    assert bool((elements[finite].abs() <= fp8_formats.ELEMENT_FORMATS[elem].max).all())
    # the step is a power of two, one per block
    s = step.reshape(-1, block_size)
    assert torch.equal(s, s[:, :1].expand_as(s)) or bool(torch.isnan(s).any())
    assert bool((torch.frexp(step[finite]).mantissa == 0.5).all())


def test_floor_clips_a_block_max_between_448_and_512_and_rceil_does_not():
    """FLOOR's scale is 2**(floor(log2 amax) - 8): for an amax in [256, 512) that is 1, and E4M3 saturates
    at 448, so 448 < amax < 512 is clipped; RCEIL's 2**ceil(log2(amax / 448)) = 2 is not."""
    amaxes = torch.tensor([449.0, 464.0, 480.0, 500.0, 511.0])
    x = torch.zeros(len(amaxes), 32)
    x[:, 0] = amaxes
    x[:, 1] = 1.0
    floor, rceil = (mx.mx_quantize(x, "fp8_e4m3", 32, m) for m in ("floor", "rceil"))
    assert floor[:, 0].tolist() == [448.0] * 5
    # RCEIL: amax / 2 in [224, 256) on E4M3's grid of 16 there, times 2: the nearest multiple of 32
    assert rceil[:, 0].tolist() == [448.0, 448.0, 480.0, 512.0, 512.0]
    assert bool((rceil[:, 0] - amaxes).abs().le(16).all()) and bool((floor[:, 0] < amaxes).all())
    # CEIL scales by 2 as well; the 1.0 beside the max survives either step
    assert torch.equal(mx.mx_quantize(x, "fp8_e4m3", 32, "ceil")[:, 0], rceil[:, 0])
    assert floor[:, 1].tolist() == [1.0] * 5 and rceil[:, 1].tolist() == [1.0] * 5
    _, step = mx.mx_parts(x, "fp8_e4m3", 32, "rceil")
    assert step[:, 0].tolist() == [2.0] * 5


def test_even_rounds_the_amax_to_the_element_mantissa_first():
    # EVEN: amax rounded to E4M3's 3 mantissa bits; 480 = 1.875 * 256 stays in its binade (clipped to
    # 448 like FLOOR), 500 = 1.953 * 256 rounds to 512 and gets step 2 (like CEIL)
    x = torch.zeros(2, 32)
    x[:, 0] = torch.tensor([480.0, 500.0])
    _, step = mx.mx_parts(x, "fp8_e4m3", 32, "even")
    assert step[:, 0].tolist() == [1.0, 2.0]
    assert mx.mx_quantize(x, "fp8_e4m3", 32, "even")[:, 0].tolist() == [448.0, 512.0]


def test_scale_mode_floor_is_the_default_and_e8m0_scales_is_floor():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=gen) * 300
    assert same_bits(mx.mx_quantize(x, "fp8_e4m3", 32), mx.mx_quantize(x, "fp8_e4m3", 32, "floor"))
    _, step = mx.mx_parts(x, "fp8_e4m3", 32, "floor")
    assert torch.equal(mx.e8m0_scales(x.reshape(-1, 32), 8).reshape(-1), step.reshape(-1, 32)[:, 0])


# ------------------------------------------------------------------------------------------
# NVFP4: 2-D blocks, stochastic rounding
# ------------------------------------------------------------------------------------------


@settings(max_examples=30)
@given(
    rows=st.integers(1, 3),
    cols=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-3, 1.0, 1e4]),
    batch=st.booleans(),
)
def test_16x16_blocks_commute_with_transposition(rows, cols, seed, scale, batch):
    gen = torch.Generator().manual_seed(seed)
    W = torch.randn(2 if batch else 1, 16 * rows, 16 * cols, generator=gen) * scale
    W = W if batch else W[0]
    W.view(-1)[0] = 50 * scale  # an outlier: its tile gets a coarser scale than the others
    q = mx.nvfp4_quantize(W, block=(16, 16))
    assert same_bits(q.transpose(-1, -2), mx.nvfp4_quantize(W.transpose(-1, -2).contiguous(), block=(16, 16)))
    elements, step = mx.nvfp4_parts(W, block=(16, 16))
    tiles = step.reshape(-1, rows, 16, cols, 16)
    assert torch.equal(tiles, tiles[:, :, :1, :, :1].expand_as(tiles))  # one scale per 16x16 tile
    assert same_bits(elements * step, q)
    assert all(float(v) in FP4_GRID for v in elements.abs().unique())


def test_16x16_block_is_torchaos_1x16_when_every_row_holds_the_tile_max(ao):
    """Oracle for 2-D blocks: if each row of a tile holds the tile's amax, its 1x16 blocks (torchao's) and
    the 16x16 tile share one scale, so both quantizations are the same."""
    _, nvfp4_reference = ao
    gen = torch.Generator().manual_seed(3)
    W = torch.randn(32, 48, generator=gen)
    for r in range(0, 32, 16):
        for c in range(0, 48, 16):
            tile = W[r : r + 16, c : c + 16]
            top = float(tile.abs().max()) * (1 + r + c)
            tile[torch.arange(16), torch.randperm(16, generator=gen)] = top * torch.sign(
                torch.randn(16, generator=gen)
            )
    assert same_bits(mx.nvfp4_quantize(W, block=(16, 16)), nvfp4_reference(W))
    assert same_bits(mx.nvfp4_quantize(W, block=[1, 16]), nvfp4_reference(W))
    # and for a plain random W, the two block shapes differ (1x16 is not transposable)
    plain = torch.randn(32, 48, generator=gen)
    assert not same_bits(mx.nvfp4_quantize(plain, block=(16, 16)), mx.nvfp4_quantize(plain))
    assert not same_bits(mx.nvfp4_quantize(plain).t(), mx.nvfp4_quantize(plain.t().contiguous()))


def fp4_neighbours(v: float) -> tuple[float, float]:
    a = min(abs(v), 6.0)
    below = max(g for g in FP4_GRID if g <= a)
    above = min(g for g in FP4_GRID if g >= a)
    return math.copysign(below, v), math.copysign(above, v)


@settings(max_examples=40)
@given(st.floats(-7.0, 7.0, width=32), st.integers(0, 2**32 - 1))
def test_stochastic_round_fp4_gives_one_of_the_two_neighbours(v, seed):
    r = mx.stochastic_round_fp4(torch.full((64,), v), torch.Generator().manual_seed(seed))
    down, up = fp4_neighbours(v)
    assert set(r.tolist()) <= {down, up}, (v, set(r.tolist()))
    if abs(v) in FP4_GRID or abs(v) >= 6:  # on the grid (or saturated): unchanged
        assert set(r.tolist()) == {down}


@settings(max_examples=12)
@given(st.floats(0.0, 6.0), st.sampled_from([1.0, -1.0]))
def test_stochastic_round_fp4_is_unbiased(magnitude, sign):
    v = float(torch.tensor(sign * magnitude, dtype=torch.float32))
    down, up = fp4_neighbours(v)
    n = 40_000
    r = mx.stochastic_round_fp4(torch.full((n,), v), torch.Generator().manual_seed(1)).double()
    if down == up:
        assert bool((r == v).all())
        return
    p_up = (v - down) / (up - down)
    se = abs(up - down) * math.sqrt(max(p_up * (1 - p_up), 1e-12) / n)
    assert abs(float(r.mean()) - v) <= 5 * se + 1e-12, (v, float(r.mean()), se)
    # rounding to nearest is biased for the same values: its mean is one grid point
    nearest = float(mx._round_to_fp4(torch.tensor(v)))
    if 0.1 < p_up < 0.9:
        assert abs(nearest - v) > 10 * se


def test_stochastic_round_fp4_special_values_and_seeding():
    x = torch.tensor([math.inf, -math.inf, math.nan, 0.0, -0.0, 100.0, -6.0])
    r = mx.stochastic_round_fp4(x, torch.Generator().manual_seed(0))
    assert r[[0, 1, 5, 6]].tolist() == [6.0, -6.0, 6.0, -6.0] and bool(torch.isnan(r[2]))
    assert torch.signbit(r[3:5]).tolist() == [False, True]
    v = torch.rand(4096, generator=torch.Generator().manual_seed(5)) * 12 - 6
    a, b, c = (mx.stochastic_round_fp4(v, torch.Generator().manual_seed(s)) for s in (3, 3, 4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    # NVFP4 with stochastic rounding: elements on the grid, the same scales as rounding to nearest
    W = torch.randn(32, 32, generator=torch.Generator().manual_seed(6))
    e_sr, s_sr = mx.nvfp4_parts(W, rounding="stochastic", generator=torch.Generator().manual_seed(0))
    e_rn, s_rn = mx.nvfp4_parts(W)
    assert torch.equal(s_sr, s_rn) and not torch.equal(e_sr, e_rn)
    assert bool(((e_sr - e_rn).abs() <= 2).all()) and set(e_sr.abs().unique().tolist()) <= set(FP4_GRID)


# ------------------------------------------------------------------------------------------
# The random Hadamard transform
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 8, 16, 128, 1024])
def test_random_hadamard_is_orthogonal_sylvester_with_random_signs(n):
    H = mx.random_hadamard(n, seed=7)
    assert H.dtype == torch.float32 and H.shape == (n, n)
    assert float((H.double() @ H.double().T - torch.eye(n, dtype=torch.float64)).abs().max()) < 1e-6
    signs = torch.sign(H[0])  # Sylvester's first row is all ones: row 0 shows the random signs
    sylvester = torch.from_numpy(scipy.linalg.hadamard(n).astype(np.float32))
    assert torch.equal(torch.sign(H), sylvester * signs)
    assert bool((H.abs() == float(torch.tensor(1 / math.sqrt(n)))).all())
    assert torch.equal(H, mx.random_hadamard(n, seed=7))
    if n >= 16:
        assert not torch.equal(H, mx.random_hadamard(n, seed=8))


def test_random_hadamard_cancels_in_a_gemm_and_spreads_an_outlier():
    gen = torch.Generator().manual_seed(2)
    A, B = (
        torch.randn(8, 64, generator=gen, dtype=torch.float64),
        torch.randn(64, 5, generator=gen, dtype=torch.float64),
    )
    H = mx.random_hadamard(64, seed=1).double()
    assert torch.allclose((A @ H) @ (H.T @ B), A @ B, rtol=0, atol=1e-5)
    row = torch.zeros(64)
    row[3] = 64.0
    spread = row @ mx.random_hadamard(64, 1)
    assert bool((spread.abs() == 8.0).all())  # one outlier of 64 becomes 64 entries of magnitude 64 / 8


# ------------------------------------------------------------------------------------------
# NVFP4Linear and convert_to_nvfp4
# ------------------------------------------------------------------------------------------


def mlp(widths=(32, 48, 64, 32, 16)) -> nn.Sequential:
    torch.manual_seed(0)
    layers = []
    for a, b in zip(widths, widths[1:], strict=False):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def grads(model: nn.Module, X: torch.Tensor, G: torch.Tensor):
    X = X.clone().requires_grad_()
    Y = model(X)
    Y.backward(G)
    return Y.detach(), X.grad, [p.grad.clone() for p in model.parameters()]


def hadamard_rows(t: torch.Tensor, seed: int) -> torch.Tensor:
    """``t @ blockdiag(H, H, ...)``: the 16-point Hadamard on each group of 16 along the last dimension, in
    float64, where its sums of 16 float32 values times ±1/4 are exact, then rounded once to float32."""
    H = torch.block_diag(*[mx.random_hadamard(16, seed)] * (t.shape[-1] // 16))
    return (t.double() @ H.double()).float()


@pytest.mark.parametrize("weights_2d", [True, False])
@pytest.mark.parametrize("hadamard", [True, False])
def test_nvfp4_linear_is_its_three_quantized_gemms(weights_2d, hadamard):
    gen = torch.Generator().manual_seed(4)
    lin = nn.Linear(48, 32)
    layer = mx.NVFP4Linear.from_float(lin, hadamard=hadamard, stochastic=False, weights_2d=weights_2d, seed=5)
    X, G = torch.randn(64, 48, generator=gen), torch.randn(64, 32, generator=gen)
    Y, dX, (dW, db) = grads(layer, X, G)
    W = lin.weight.detach()
    Wq = mx.nvfp4_quantize(W, block=(16, 16) if weights_2d else (1, 16))
    assert same_bits(Y, mx.nvfp4_quantize(X) @ Wq.t() + lin.bias.detach())
    W_n = Wq if weights_2d else mx.nvfp4_quantize(W.t().contiguous()).t()
    assert same_bits(dX, mx.nvfp4_quantize(G) @ W_n)
    a, b = G.t(), X.t()
    if hadamard:
        a, b = hadamard_rows(a, 5), hadamard_rows(b, 5)
    assert same_bits(dW, mx.nvfp4_quantize(a.contiguous()) @ mx.nvfp4_quantize(b.contiguous()).t())
    assert torch.equal(db, G.sum(0))
    exact = G.t() @ X
    assert float((dW - exact).norm() / exact.norm()) < 0.25  # FP4: a coarse, but faithful, gradient


def test_each_switch_changes_what_it_should():
    gen = torch.Generator().manual_seed(8)
    X, G = torch.randn(64, 32, generator=gen), torch.randn(64, 16, generator=gen)
    X[:, 5] *= 30  # an outlier channel, the case the Hadamard transform is for
    base = dict(hadamard=True, stochastic=True, weights_2d=True, keep_first_last=False, seed=0)

    def run(**switch):
        return grads(mx.convert_to_nvfp4(mlp(), **{**base, **switch}), X, G)

    ref = run()
    for switch, same_forward in [("hadamard", True), ("stochastic", True), ("weights_2d", False)]:
        other = run(**{switch: False})
        assert torch.equal(other[0], ref[0]) == same_forward, switch
        assert not torch.equal(other[2][0], ref[2][0]), switch  # the first layer's weight gradient
    # Hadamard and stochastic rounding act in backward only: dX of the first layer is untouched by the
    # transform (it is on grad_weight's inputs), but stochastic rounding reaches it
    assert torch.equal(run(hadamard=False)[1], ref[1])
    assert not torch.equal(run(stochastic=False)[1], ref[1])
    assert torch.equal(run()[2][0], ref[2][0])  # seeded: the same draws again
    assert not torch.equal(run(seed=1)[2][0], ref[2][0])
    deterministic = [run(stochastic=False, hadamard=h) for h in (False, False)]
    assert torch.equal(deterministic[0][2][0], deterministic[1][2][0])


def test_keep_first_last_leaves_the_ends_in_bf16():
    model = mx.convert_to_nvfp4(mlp(), seed=10)
    layers = [m for m in model if isinstance(m, nn.Linear)]
    assert all(isinstance(m, mx.NVFP4Linear) for m in layers)
    assert [m.bf16 for m in layers] == [True, False, False, True]
    assert [m.seed for m in layers] == [10, 11, 12, 13]
    first = layers[0]
    X = torch.randn(8, 32, generator=torch.Generator().manual_seed(0))
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    assert same_bits(first(X), bf(X) @ bf(first.weight.detach()).t() + first.bias.detach())
    plain = mx.convert_to_nvfp4(mlp(), keep_first_last=False)
    assert not any(m.bf16 for m in plain if isinstance(m, nn.Linear))
    # a filter picks the layers; the first and last of those are the BF16 ones
    picked = mx.convert_to_nvfp4(mlp(), module_filter=lambda m, fqn: fqn != "0")
    assert isinstance(picked[0], nn.Linear) and not isinstance(picked[0], mx.NVFP4Linear)
    assert [m.bf16 for m in list(picked)[2::2]] == [True, False, True]
    before = list(picked)
    assert mx.convert_to_nvfp4(picked) is picked  # converted layers are never converted again
    assert all(picked[i] is before[i] for i in (2, 4, 6)) and picked[0].bf16  # the one left: first and last


def test_odd_sizes_are_zero_padded_and_3d_inputs_work():
    layer = mx.convert_to_nvfp4(nn.Linear(20, 10), keep_first_last=False)
    X = torch.randn(3, 7, 20, generator=torch.Generator().manual_seed(1), requires_grad=True)
    Y = layer(X)
    Y.sum().backward()
    assert Y.shape == (3, 7, 10) and X.grad.shape == X.shape and layer.weight.grad.shape == (10, 20)
    assert bool(torch.isfinite(X.grad).all() and torch.isfinite(layer.weight.grad).all())
    # zero padding changes no amax: the forward is that of the padded quantization, sliced
    Xp = nn.functional.pad(X.detach().reshape(21, 20), (0, 12, 0, 11))
    Wp = nn.functional.pad(layer.weight.detach(), (0, 12, 0, 6))
    want = (mx.nvfp4_quantize(Xp) @ mx.nvfp4_quantize(Wp, block=(16, 16)).t())[:21, :10]
    assert same_bits(Y.detach(), (want + layer.bias.detach()).reshape(3, 7, 10))


def test_nvfp4_training_on_digits_stays_finite_and_learns():
    kwargs = dict(dtype=None, depth=4, width=32, num_steps=60, data=load_digits())
    for convert in (
        mx.convert_to_nvfp4,
        lambda m: mx.convert_to_nvfp4(m, keep_first_last=False, hadamard=False),
    ):
        run = train_digits(None, convert=convert, **kwargs)
        assert run.finite and all(math.isfinite(v) for v in run.losses)
        assert run.recent_loss(10) < 0.5 * run.losses[0]
        assert run.test_accuracy > 0.8


# ------------------------------------------------------------------------------------------
# Bad arguments
# ------------------------------------------------------------------------------------------

X = torch.ones(2, 32)
BAD = [
    (lambda: mx.mx_quantize(X, scale_mode="round"), ValueError, "scale_mode"),
    (lambda: mx.mx_quantize(X, scale_mode=1), TypeError, "scale_mode"),
    (lambda: mx.nvfp4_quantize(X, block=(8, 8)), ValueError, "block"),
    (lambda: mx.nvfp4_quantize(X, block=(16, 16)), ValueError, "16"),
    (lambda: mx.nvfp4_quantize(X, block=16), TypeError, "block"),
    (lambda: mx.nvfp4_quantize(X, block=(True, 16)), TypeError, "block"),
    (lambda: mx.nvfp4_quantize(X, rounding="up"), ValueError, "rounding"),
    (lambda: mx.nvfp4_quantize(X, rounding="stochastic", generator=3), TypeError, "generator"),
    (lambda: mx.nvfp4_parts(torch.ones(32)), ValueError, "x"),
    (lambda: mx.stochastic_round_fp4(torch.ones(3, dtype=torch.float64)), TypeError, "v"),
    (lambda: mx.stochastic_round_fp4([1.0]), TypeError, "v"),
    (lambda: mx.stochastic_round_fp4(torch.ones(3), generator="0"), TypeError, "generator"),
    (lambda: mx.random_hadamard(12), ValueError, "n"),
    (lambda: mx.random_hadamard(0), ValueError, "n"),
    (lambda: mx.random_hadamard(8192), ValueError, "n"),
    (lambda: mx.random_hadamard(16.0), TypeError, "n"),
    (lambda: mx.random_hadamard(16, seed=-1), ValueError, "seed"),
    (lambda: mx.convert_to_nvfp4(3), TypeError, "model"),
    (lambda: mx.convert_to_nvfp4(nn.Linear(16, 16), hadamard="yes"), TypeError, "hadamard"),
    (lambda: mx.convert_to_nvfp4(nn.Linear(16, 16), keep_first_last=1), TypeError, "keep_first_last"),
    (lambda: mx.convert_to_nvfp4(nn.Linear(16, 16), seed=2**40), ValueError, "seed"),
    (lambda: mx.convert_to_nvfp4(nn.Linear(16, 16), module_filter=1), TypeError, "module_filter"),
]


@pytest.mark.parametrize("call, error, word", BAD)
def test_bad_arguments_are_refused_by_name(call, error, word):
    with pytest.raises(error, match=word):
        call()
