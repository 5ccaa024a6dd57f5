"""amp_lab.fp8's frontier recipes against their oracles: torchao's rowwise recipes (bit for bit), tiles traced
by hand and a tile-by-tile loop for blockwise_quantize, hand-made tensors with known counts for
quantization_stats.  Identity is checked on raw bits (:func:`same_bits`), never with a tolerance."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st
from torch import nn

from amp_lab import fp8, mx
from amp_lab.data import load_digits
from amp_lab.models import make_mlp
from amp_lab.training import train_digits

ROWWISE = ("rowwise", "rowwise_with_gw_hp")


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors (tests/conftest.py)


@pytest.fixture(scope="module")
def ao():
    """torchao's float8 training entry points, imported quietly through amp_lab."""
    fp8.import_torchao()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    return SimpleNamespace(convert=convert_to_float8_training, config=Float8LinearConfig.from_recipe_name)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical, except that any NaN matches any NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().contiguous(), b.detach().contiguous()
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return False
    a, b = torch.where(nan_a, 0, a), torch.where(nan_b, 0, b)
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.view(ints), b.view(ints))


# ------------------------------------------------------------------------------------------
# Rowwise recipes against torchao, bit for bit
# ------------------------------------------------------------------------------------------


def _pair(ao, recipe, in_features, out_features, bias, seed, weight_kind="gauss"):
    """Our Float8Linear and torchao's for ``recipe``, built from copies of the same seeded nn.Linear; its rows
    or columns spread over 2**-20 .. 1 for a ``weight_kind`` of "row_spread" or "column_spread" (so that a
    scale per row, per column or per tensor puts different elements into E4M3's subnormals)."""
    gen = torch.Generator().manual_seed(seed)
    lin = nn.Linear(in_features, out_features, bias=bias)
    w = torch.randn(out_features, in_features, generator=gen) / math.sqrt(in_features)
    if weight_kind == "row_spread":
        w = w * torch.exp2(-20 * torch.rand(out_features, 1, generator=gen))
    elif weight_kind == "column_spread":
        w = w * torch.exp2(-20 * torch.rand(1, in_features, generator=gen))
    with torch.no_grad():
        lin.weight.copy_(w)
        if bias:
            lin.bias.copy_(torch.randn(out_features, generator=gen))
    theirs = ao.convert(nn.Sequential(copy.deepcopy(lin)), config=ao.config(recipe))[0]
    return fp8.Float8Linear.from_float(lin, recipe=recipe), theirs, gen


def _input(gen, shape, kind, scale):
    x = torch.randn(shape, generator=gen) * scale
    if kind == "zero_rows":
        x.reshape(-1, shape[-1])[::2] = 0.0
    elif kind == "zeros":
        x = x * (torch.rand(shape, generator=gen) < 0.3)
    elif kind == "outlier":
        x.reshape(-1)[int(torch.randint(0, x.numel(), (1,), generator=gen))] = scale * 1e4
    elif kind == "outlier_channel":  # one channel 1000x the rest in every row, as LLM activations have
        x[..., int(torch.randint(0, shape[-1], (1,), generator=gen))] *= 1e3
    elif kind == "token_spread":  # rows (tokens) of sizes 2**-20 .. 1
        x = x * torch.exp2(-20 * torch.rand(*shape[:-1], 1, generator=gen))
    elif kind == "all_zero":
        x = torch.zeros(shape)
    return x


@pytest.mark.parametrize("recipe", ROWWISE)
@settings(max_examples=100, deadline=None)
@given(
    k=st.sampled_from([16, 32, 48, 64]),
    n=st.sampled_from([16, 32, 48, 64]),
    rows=st.integers(1, 40),
    batch=st.sampled_from([None, 2, 3]),
    bias=st.booleans(),
    kind=st.sampled_from(
        ["gauss", "zero_rows", "zeros", "outlier", "outlier_channel", "token_spread", "all_zero"]
    ),
    log10_scale=st.integers(-4, 4),
    grad_kind=st.sampled_from(["gauss", "zeros", "outlier", "token_spread"]),
    weight_kind=st.sampled_from(["gauss", "row_spread", "column_spread"]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**31 - 1),
)
def test_rowwise_recipes_are_torchaos_bit_for_bit(
    ao, recipe, k, n, rows, batch, bias, kind, log10_scale, grad_kind, weight_kind, dtype, seed
):
    """Forward output and the input, weight and bias gradients are bit-identical to torchao's Float8Linear
    under ``Float8LinearConfig.from_recipe_name(recipe)``, on 2-D and 3-D inputs with zeros, zero rows,
    outliers and rows of very different sizes, weights of spread rows or columns, in float32, bfloat16 and
    float16."""
    ours, theirs, gen = _pair(ao, recipe, k, n, bias, seed, weight_kind)
    shape = (rows, k) if batch is None else (batch, rows, k)
    x = _input(gen, shape, kind, 10.0**log10_scale).to(dtype)
    grad = _input(gen, (*shape[:-1], n), grad_kind, 1e-3).to(dtype)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), theirs(xb)
    assert ya.dtype == dtype and same_bits(ya, yb)
    ya.backward(grad)
    yb.backward(grad)
    assert same_bits(xa.grad, xb.grad)
    assert same_bits(ours.weight.grad, theirs.weight.grad)
    if bias:
        assert same_bits(ours.bias.grad, theirs.bias.grad)
    event(f"{kind} / grad {grad_kind} / weight {weight_kind}")
    event(str(dtype))


def test_rowwise_is_not_tensorwise_and_follows_the_rows():
    """The identity above is not trivial: on activations with an outlier channel and rows (tokens) of very
    different sizes, rowwise's output differs from tensorwise's and keeps the small rows that tensorwise
    E4M3 rounds away; rowwise_with_gw_hp's weight gradient differs from rowwise's (it is not FP8)."""
    gen = torch.Generator().manual_seed(0)
    lin = nn.Linear(64, 32, bias=False)
    x = torch.randn(32, 64, generator=gen) * torch.exp2(-20 * torch.arange(32) / 31).unsqueeze(1)
    x[:, 7] *= 1e3  # the outlier channel, in every row
    grad = torch.randn(32, 32, generator=gen)
    ref = x @ lin.weight.detach().t()
    outs, wgrads = {}, {}
    for recipe in ("tensorwise", *ROWWISE):
        layer = fp8.Float8Linear.from_float(copy.deepcopy(lin), recipe=recipe)
        y = layer(x)
        y.backward(grad)
        outs[recipe], wgrads[recipe] = y.detach(), layer.weight.grad
    assert not same_bits(outs["tensorwise"], outs["rowwise"])
    assert same_bits(outs["rowwise"], outs["rowwise_with_gw_hp"])  # the same forward
    small = slice(30, 32)  # rows about 2**-20 the size of row 0: even their outlier is below E4M3's range
    err = {r: fp8.quantization_error(ref[small], outs[r][small]) for r in outs}
    assert err["tensorwise"] > 0.5 and err["rowwise"] < 0.1
    assert not same_bits(wgrads["rowwise"], wgrads["rowwise_with_gw_hp"])
    assert fp8.quantization_error(grad.t() @ x, wgrads["rowwise_with_gw_hp"]) < 1e-6  # high precision


@pytest.mark.parametrize("recipe", ROWWISE)
def test_training_with_a_rowwise_recipe_matches_torchao_step_for_step(ao, recipe):
    data = load_digits()
    kwargs = dict(dtype=None, depth=3, width=32, num_steps=6, data=data)
    ours = train_digits(None, convert=lambda m: fp8.convert_to_float8(m, recipe=recipe), **kwargs)
    theirs = train_digits(
        None,
        convert=lambda m: ao.convert(m, config=ao.config(recipe), module_filter_fn=fp8.float8_module_filter),
        **kwargs,
    )
    assert ours.losses == theirs.losses
    for a, b in zip(ours.model.parameters(), theirs.model.parameters(), strict=True):
        assert same_bits(a, b)


def test_rowwise_input_checks_on_cuda_and_cpu():
    """On CUDA the FP8 grad_weight GEMM needs a batch of a multiple of 16 rows (rowwise_with_gw_hp's grad_weight
    is not FP8); float32 is taken there as torchao takes it (the rowwise kernel writes bfloat16, cast back)."""
    cuda = torch.device("cuda")  # a device description: nothing runs on it
    rowwise = fp8.Float8Linear.from_float(nn.Linear(16, 16), recipe="rowwise")
    gw_hp = fp8.Float8Linear.from_float(nn.Linear(16, 16), recipe="rowwise_with_gw_hp")
    rowwise._check_input(SimpleNamespace(dtype=torch.float32, device=cuda, numel=lambda: 256, shape=(16, 16)))
    with pytest.raises(ValueError, match="multiple of 16 rows; got 5"):
        rowwise._check_input(
            SimpleNamespace(dtype=torch.bfloat16, device=cuda, numel=lambda: 80, shape=(5, 16))
        )
    gw_hp._check_input(SimpleNamespace(dtype=torch.bfloat16, device=cuda, numel=lambda: 80, shape=(5, 16)))
    with pytest.raises(TypeError, match="input must be float32, bfloat16 or float16"):
        rowwise(torch.ones(4, 16, dtype=torch.float64))
    assert rowwise(torch.ones(5, 16)).shape == (5, 16)  # any rows on a CPU


# ------------------------------------------------------------------------------------------
# blockwise_quantize: tiles by hand, and a tile-by-tile oracle
# ------------------------------------------------------------------------------------------


def test_blockwise_quantize_by_hand():
    """Scales by hand, each a power of two: 448 / 3.5 = 128, 448 / 0.875 = 512, 448 / 0.4375 = 1024,
    448 / 14 = 32.  On E4M3's grid 1.1 * 128 = 140.8 rounds to 144 (1.125), 0.3 * 512 = 153.6 to 160
    (0.3125), 0.01 * 1024 = 10.24 to 10 (0.009765625).  The last row and column are partial tiles: their
    scales come from their own elements only (3.5 and 0.875 above them would give others)."""
    x = torch.tensor([[1.1, 2.0, 0.875], [3.5, -1.0, 0.3], [0.4375, 0.01, 14.0]])
    expected = torch.tensor([[1.125, 2.0, 0.875], [3.5, -1.0, 0.3125], [0.4375, 0.009765625, 14.0]])
    assert same_bits(fp8.blockwise_quantize(x, (2, 2)), expected)
    # 1 x 2 tiles: [1.1, 3.5] -> scale 128; [0.25, 0] -> 1792 (0.25 * 1792 = 448); [100, 0]; [0, 7] -> 64
    y = torch.tensor([[1.1, 3.5, 0.25, 0.0], [100.0, 0.0, 0.0, 7.0]])
    expected = torch.tensor([[1.125, 3.5, 0.25, 0.0], [100.0, 0.0, 0.0, 7.0]])
    assert same_bits(fp8.blockwise_quantize(y, (1, 2)), expected)
    # one tile for everything: the scale from 100, and 1.1 * 4.48 = 4.93 rounds to 5 on E4M3's grid
    assert fp8.blockwise_quantize(y, (1024, 1024))[0, 0] == torch.tensor(5.0) / torch.tensor(448 / 100.0)
    # E5M2: 1.1 * 128 * 128 (448 -> 57344 is 128 times more) = 18022 rounds to 16384 on E5M2's grid (4 steps
    # per binade): 1.0; the others here are exact
    assert same_bits(
        fp8.blockwise_quantize(x, (2, 2), "fp8_e5m2")[:2, :2], torch.tensor([[1.0, 2.0], [3.5, -1.0]])
    )


def test_blockwise_quantize_nan_and_inf_stay_in_their_tile():
    x = torch.ones(4, 256)
    x[0, 3] = math.nan
    x[2, 200] = math.inf
    q = fp8.blockwise_quantize(x, (1, 128))
    assert torch.isnan(q[0, :128]).all() and torch.isnan(q[2, 128:]).all()
    rest = torch.ones(4, 256, dtype=torch.bool)
    rest[0, :128] = rest[2, 128:] = False
    assert torch.equal(q[rest], torch.ones(int(rest.sum())))
    assert same_bits(fp8.blockwise_quantize(torch.zeros(3, 5)), torch.zeros(3, 5))


def _loop_oracle(x2d, r, c, dtype, fmax):
    out = torch.empty_like(x2d, dtype=torch.float32)
    for i in range(0, x2d.shape[0], r):
        for j in range(0, x2d.shape[1], c):
            tile = x2d[i : i + r, j : j + c].to(torch.float32)
            amax = float(tile.abs().max())
            scale = torch.tensor(fmax / max(amax, 1e-12), dtype=torch.float32)  # float64 division
            q = (tile * scale).clamp(-fmax, fmax).to(dtype)
            out[i : i + r, j : j + c] = q.to(torch.float32) / scale
    return out


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 300),
    cols=st.integers(1, 300),
    lead=st.sampled_from([None, 2]),
    block=st.sampled_from([(1, 128), (128, 128), (128, 1), (3, 7), (1024, 1), (5, 5)]),
    fmt=st.sampled_from(["fp8_e4m3", "fp8_e5m2"]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    spread=st.integers(0, 30),
    seed=st.integers(0, 2**31 - 1),
)
def test_blockwise_quantize_is_a_scale_per_tile(rows, cols, lead, block, fmt, dtype, spread, seed):
    """Bit-identical to quantizing tile by tile (partial tiles at the edges; leading dimensions are rows)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (rows, cols) if lead is None else (lead, rows, cols)
    x = (torch.randn(shape, generator=gen) * torch.exp2(spread * torch.rand(shape, generator=gen) - 15)).to(
        dtype
    )
    fmax = fp8.FP8_FORMATS[fmt].max
    expected = _loop_oracle(x.reshape(-1, cols), *block, fp8.FP8_FORMATS[fmt].dtype, fmax).reshape(shape)
    assert same_bits(fp8.blockwise_quantize(x, block, fmt), expected)


def test_square_blocks_commute_with_transposition_and_tiles_do_not():
    """Notebook 11's transposition point: a 128x128 block of W is a block of W.T (edge blocks too), so the
    forward's quantized W serves the backward; a 1x128 tile along K is not a tile along N."""
    w = torch.randn(200, 300, generator=torch.Generator().manual_seed(1))
    q = fp8.blockwise_quantize
    assert same_bits(q(w, (128, 128)).t(), q(w.t().contiguous(), (128, 128)))
    differ = q(w, (1, 128)).t() != q(w.t().contiguous(), (1, 128))
    assert differ.float().mean() > 0.1


def test_blockwise_recipe_is_its_three_gemms():
    """The blockwise layer's output and gradients are exactly DeepSeek's composition, written out here: 1x128
    tiles of x along K, 128x128 blocks of W, 1x128 tiles of dY along N for grad_input, 128x1 tiles of dY and
    x along M for grad_weight, float32 products.  Odd sizes (partial edge tiles) and 3-D inputs included."""
    q = fp8.blockwise_quantize
    gen = torch.Generator().manual_seed(2)
    lin = nn.Linear(200, 136)
    layer = fp8.Float8Linear.from_float(copy.deepcopy(lin), recipe="blockwise")
    x = torch.randn(2, 65, 200, generator=gen) * torch.exp2(torch.randint(-8, 8, (2, 65, 1), generator=gen))
    x = x.requires_grad_()
    grad = torch.randn(2, 65, 136, generator=gen) * 1e-3
    y = layer(x)
    y.backward(grad)
    x2d, g2d, w = x.detach().reshape(130, 200), grad.reshape(130, 136), lin.weight.detach()
    w_blocks = q(w, (128, 128))
    assert same_bits(y.detach(), (q(x2d, (1, 128)) @ w_blocks.t()).reshape(2, 65, 136) + lin.bias.detach())
    assert same_bits(x.grad, (q(g2d, (1, 128)) @ w_blocks).reshape(2, 65, 200))
    grad_w = q(g2d, (128, 1)).t() @ q(x2d, (128, 1))
    assert same_bits(layer.weight.grad, grad_w)
    assert same_bits(layer.bias.grad, g2d.sum(0))
    # the composition is specific: grad_weight from the forward's 1x128 tiles is another number
    assert not same_bits(grad_w, q(g2d.t().contiguous(), (1, 128)) @ q(x2d, (1, 128)))
    assert 1e-3 < fp8.quantization_error(x2d @ w.t(), y.detach().reshape(130, 136) - lin.bias.detach()) < 0.1


def test_blockwise_recipe_keeps_the_input_dtype_and_odd_layers():
    layer = fp8.Float8Linear.from_float(nn.Linear(20, 10), recipe="blockwise")  # 20 and 10: partial tiles
    x = torch.randn(3, 20, dtype=torch.bfloat16, requires_grad=True)
    layer(x).sum().backward()
    assert layer(x).dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16
    assert layer.weight.grad.dtype == torch.float32
    model = fp8.convert_to_float8(make_mlp(64, 10, hidden=32, depth=2), recipe="blockwise")
    assert [getattr(m, "recipe_name", None) for m in model if isinstance(m, nn.Linear)] == [
        "blockwise",
        "blockwise",
        None,  # the default filter keeps the 10-class head, whatever the recipe
    ]


# ------------------------------------------------------------------------------------------
# quantization_stats on hand-made tensors
# ------------------------------------------------------------------------------------------


def test_stats_tensorwise_rowwise_and_tiles_count_underflow_by_hand():
    """x = [1, 1e-9, 0, 2]: tensorwise E4M3's scale is 448 / 2 = 224, and 1e-9 * 224 lies far below E4M3's
    smallest subnormal 2**-9: one of the three nonzero values is lost.  E5M2 (scale 28672) keeps it: 2.9e-5
    rounds to 2**-15.  A scale per row (or per 1x128 tile) keeps a row of 1e-9 that tensorwise loses."""
    x = torch.tensor([1.0, 1e-9, 0.0, 2.0])
    e4m3 = fp8.quantization_stats(x, "tensorwise_e4m3")
    assert (e4m3.quantizer, e4m3.numel, e4m3.underflow, e4m3.saturated) == ("tensorwise_e4m3", 4, 1 / 3, 0.0)
    tiny = float(x[1])
    assert math.isclose(e4m3.error, tiny / math.sqrt(1 + tiny**2 + 4), rel_tol=1e-12)
    assert fp8.quantization_stats(x, "tensorwise_e5m2").underflow == 0.0
    rows = torch.tensor([[1.0] * 127 + [1e-9], [1e-9] * 128])
    assert fp8.quantization_stats(rows, "tensorwise_e4m3").underflow == 129 / 256
    assert fp8.quantization_stats(rows, "rowwise").underflow == 1 / 256
    assert fp8.quantization_stats(rows.reshape(1, 256), "blockwise_1x128").underflow == 1 / 256
    assert fp8.quantization_stats(rows.reshape(1, 256), "rowwise").underflow == 129 / 256
    assert fp8.quantization_stats(torch.zeros(2, 32), "rowwise").underflow == 0.0  # no nonzero values


def test_stats_saturation_floor_against_rceil_by_hand():
    """MX E4M3 with FLOOR: a block whose max is 500 gets 2**(floor(log2 500) - 8) = 1, and 500 rounds past
    448 (beyond 464, halfway to the next step): clipped; 450 rounds to 448 anyway and is not counted; a block
    whose max is 448 fits.  RCEIL's scale 2**ceil(log2(500 / 448)) = 2 clips nothing.  FP4 (max 6, emax 2):
    a block max of 7.5 gets scale 1, so 7.5 and 7.0 (a tie, rounding up to 8) clip, 6.5 rounds to 6."""
    x = torch.ones(1, 64)
    x[0, 0], x[0, 1], x[0, 32] = 500.0, 450.0, 448.0
    assert fp8.quantization_stats(x, "mxfp8_floor").saturated == 1 / 64
    assert fp8.quantization_stats(x, "mxfp8_rceil").saturated == 0.0
    f = torch.ones(1, 32)
    f[0, :3] = torch.tensor([7.5, 7.0, 6.5])
    assert fp8.quantization_stats(f, "mxfp4_floor").saturated == 2 / 32
    assert fp8.quantization_stats(f, "mxfp4_rceil").saturated == 0.0
    for q in ("tensorwise_e4m3", "tensorwise_e5m2", "rowwise", "blockwise_1x128", "blockwise_128x128"):
        assert fp8.quantization_stats(x, q).saturated == 0.0  # a scale from the amax never clips


@pytest.mark.parametrize("quantizer", fp8.QUANTIZERS)
def test_stats_error_is_the_quantizers_own(quantizer):
    """Each quantizer's error is that of the course's public quantizer of the same name."""
    x = (
        torch.randn(32, 64, generator=torch.Generator().manual_seed(3))
        * torch.exp2(torch.arange(32.0) - 16)[:, None]
    )
    stats = fp8.quantization_stats(x, quantizer)
    public = {
        "tensorwise_e4m3": lambda: fp8.dequantize(*_tensorwise(x, "fp8_e4m3")),
        "tensorwise_e5m2": lambda: fp8.dequantize(*_tensorwise(x, "fp8_e5m2")),
        "rowwise": lambda: fp8.dequantize(fp8.quantize(x, "fp8_e4m3", _pow2_rows(x)), _pow2_rows(x)),
        "blockwise_1x128": lambda: fp8.blockwise_quantize(x, (1, 128)),
        "blockwise_128x128": lambda: fp8.blockwise_quantize(x, (128, 128)),
        "mxfp8_floor": lambda: mx.mx_quantize(x, "fp8_e4m3", 32, "floor"),
        "mxfp8_rceil": lambda: mx.mx_quantize(x, "fp8_e4m3", 32, "rceil"),
        "mxfp4_floor": lambda: mx.mx_quantize(x, "fp4_e2m1", 32, "floor"),
        "mxfp4_rceil": lambda: mx.mx_quantize(x, "fp4_e2m1", 32, "rceil"),
        "nvfp4": lambda: mx.nvfp4_quantize(x),
        "nvfp4_16x16": lambda: mx.nvfp4_quantize(x, block=(16, 16)),
    }[quantizer]()
    assert stats.error == fp8.quantization_error(x, public)
    assert stats.numel == 2048 and 0.0 <= stats.underflow < 1.0


def _pow2_rows(x):
    """torchao's rowwise scale, written out: 448 / amax per row (float64, then float32), rounded down to 2**n."""
    return torch.exp2(torch.floor(torch.log2((448.0 / x.abs().amax(1, keepdim=True).double()).float())))


def _tensorwise(x, fmt):
    scale = fp8.tensorwise_scale(x, fmt)
    return fp8.quantize(x, fmt, scale), scale


def test_stats_nvfp4_by_hand():
    """NVFP4: a block of 16 holding 6 and 0.1 (g = 6 / 2688, the block scale 448 in E4M3, so the step is
    g * 448 = 1.0): 0.1 is below FP4's smallest step 0.5 / 2 and is lost; 6 lands on FP4's max exactly."""
    x = torch.zeros(16, 16)
    x[:, 0], x[:, 1] = 6.0, 0.1
    for q in ("nvfp4", "nvfp4_16x16"):
        s = fp8.quantization_stats(x, q)
        assert (s.underflow, s.saturated, s.numel) == (0.5, 0.0, 256)


# ------------------------------------------------------------------------------------------
# Bad inputs
# ------------------------------------------------------------------------------------------

X = torch.ones(4, 32)
BAD = [
    (lambda: fp8.convert_to_float8(nn.Linear(16, 16), recipe="colwise"), ValueError, "recipe"),
    (lambda: fp8.convert_to_float8(nn.Linear(16, 16), recipe=3), TypeError, "recipe"),
    (
        lambda: fp8.convert_to_float8(nn.Linear(16, 16), recipe="rowwise", scaling="delayed"),
        ValueError,
        "scaling",
    ),
    (
        lambda: fp8.convert_to_float8(nn.Linear(16, 16), recipe="blockwise", scaling="now"),
        ValueError,
        "scaling",
    ),
    (lambda: fp8.convert_to_float8("model", recipe="rowwise"), TypeError, "model"),
    (lambda: fp8.Float8Linear.from_float(nn.Linear(20, 16), recipe="rowwise"), ValueError, "in_features=20"),
    (lambda: fp8.Float8Linear.from_float(nn.Linear(16, 16), recipe="row"), ValueError, "recipe"),
    (lambda: fp8.Float8Linear.from_float("linear"), TypeError, "linear"),
    (lambda: fp8.blockwise_quantize(X, (0, 128)), ValueError, r"block\[0\]"),
    (lambda: fp8.blockwise_quantize(X, (1, 2048)), ValueError, r"block\[1\]"),
    (lambda: fp8.blockwise_quantize(X, "1x128"), TypeError, "block"),
    (lambda: fp8.blockwise_quantize(X, (1, 128, 1)), ValueError, "block"),
    (lambda: fp8.blockwise_quantize(X, (1, 1.5)), TypeError, r"block\[1\]"),
    (lambda: fp8.blockwise_quantize(X, fmt="fp4_e2m1"), ValueError, "fmt"),
    (lambda: fp8.blockwise_quantize(torch.ones(32)), ValueError, "x must have at least 2"),
    (lambda: fp8.blockwise_quantize(torch.ones(4, 4, dtype=torch.int32)), TypeError, "x must be a floating"),
    (lambda: fp8.quantization_stats(X, "int8"), ValueError, "quantizer"),
    (lambda: fp8.quantization_stats(X, None), TypeError, "quantizer"),
    (lambda: fp8.quantization_stats(X.double(), "rowwise"), TypeError, "x must be float32"),
    (lambda: fp8.quantization_stats(torch.ones(0, 32), "rowwise"), ValueError, "x is empty"),
    (lambda: fp8.quantization_stats(torch.ones(4, 30), "mxfp8_floor"), ValueError, "x's last dimension"),
    (lambda: fp8.quantization_stats(torch.ones(4, 24), "nvfp4"), ValueError, "x's last dimension"),
    (lambda: fp8.quantization_stats(torch.ones(8, 32), "nvfp4_16x16"), ValueError, "x's last two"),
    (lambda: fp8.quantization_stats(torch.ones(()), "rowwise"), ValueError, "x must have at least 1"),
]


@pytest.mark.parametrize("call, error, name", BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD)])
def test_bad_inputs_raise_naming_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_a_refused_recipe_changes_nothing():
    model = make_mlp(64, 10, hidden=32, depth=2)
    with pytest.raises(ValueError, match="scaling"):
        fp8.convert_to_float8(model, recipe="blockwise", scaling="delayed")
    assert not any(isinstance(m, fp8.Float8Linear) for m in model)
