"""amp_lab.fp8 against its oracles: torchao (float8 training, MX, NVFP4), torch's own dtype casts and
torch.finfo, and sequences traced by hand.

Identity is checked on raw bits (:func:`same_bits`: NaN matches NaN, -0.0 does not match 0.0), never
with a tolerance: every function here is claimed bit-identical to its oracle.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from torch import nn

from amp_lab import fp8, fp8_explorer, fp8_formats, gpus, mx
from amp_lab.data import load_digits
from amp_lab.exercises import nb08 as nb08_exercises
from amp_lab.models import make_mlp
from amp_lab.text import REASONS
from amp_lab.training import train_digits

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
DTYPES = {"fp8_e4m3": E4M3, "fp8_e5m2": E5M2}
FLOAT32_MAX = torch.finfo(torch.float32).max


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors (tests/conftest.py)


@pytest.fixture(scope="module")
def ao():
    """torchao's modules, imported quietly through amp_lab (the way the notebook imports them)."""
    fp8.import_torchao()
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_training_tensor import hp_tensor_and_scale_to_float8
    from torchao.float8.float8_utils import amax_to_scale, tensor_to_scale
    from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    class AO:
        pass

    for name, value in dict(
        convert_to_float8_training=convert_to_float8_training,
        hp_tensor_and_scale_to_float8=hp_tensor_and_scale_to_float8,
        amax_to_scale=amax_to_scale,
        tensor_to_scale=tensor_to_scale,
        to_mx=to_mx,
        to_dtype=to_dtype,
        NVFP4Tensor=NVFP4Tensor,
        per_tensor_amax_to_scale=per_tensor_amax_to_scale,
    ).items():
        setattr(AO, name, staticmethod(value) if callable(value) and not isinstance(value, type) else value)
    return AO


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical, except that any NaN matches any NaN (payloads are not part of any claim)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().contiguous(), b.detach().contiguous()
    int_dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    if a.dtype.is_floating_point and a.element_size() > 1:
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        if not torch.equal(nan_a, nan_b):
            return False
        a, b = torch.where(nan_a, 0, a), torch.where(nan_b, 0, b)
    return torch.equal(a.view(int_dtype), b.view(int_dtype))


# ------------------------------------------------------------------------------------------
# Value strategies: tiny, huge, zero, denormal
# ------------------------------------------------------------------------------------------

MAGNITUDES = st.one_of(
    st.just(0.0),
    st.floats(1e-45, 1e-38),  # float32 subnormals
    st.floats(1e-12, 1e-6),
    st.floats(1e-3, 1e3),
    st.floats(1e30, 3e38),
)


@st.composite
def tensors(draw, max_dim=3, max_side=8, dtypes=(torch.float32,)):
    """A small tensor whose values span float32's range (a common exponent per tensor plus spread)."""
    shape = tuple(draw(st.lists(st.integers(1, max_side), min_size=1, max_size=max_dim)))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    kind = draw(st.sampled_from(["gauss", "zeros", "outlier", "wide"]))
    base = draw(MAGNITUDES)
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * base
    if kind == "zeros":
        x = x * (torch.rand(shape, generator=gen) < 0.5)
    elif kind == "outlier":
        x.view(-1)[0] = base * 1e4 if base < 1e30 else 3e38
    elif kind == "wide":
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * 10.0 ** (
            torch.rand(shape, generator=gen, dtype=torch.float64) * 80 - 45
        )
    event(kind)
    return x.clamp(-FLOAT32_MAX, FLOAT32_MAX).to(draw(st.sampled_from(dtypes)))


# ------------------------------------------------------------------------------------------
# import_torchao
# ------------------------------------------------------------------------------------------


def test_import_torchao_prints_nothing_in_a_fresh_interpreter():
    """The notebook's import leaves stderr empty (a plain ``import torchao`` on this CPU machine prints
    "Failed to load ...so" twice and the pytree deprecation once; the next test checks that exactly those
    records are dropped)."""
    code = "from amp_lab.fp8 import import_torchao; m = import_torchao(); print(m.__version__)"
    ours = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr
    assert ours.stderr == ""
    assert ours.stdout.strip().startswith("0.")


def test_the_import_filter_drops_exactly_its_two_records():
    import logging

    noise = fp8_formats._torchao_import_noise

    def record(name, msg, *args):
        return logging.LogRecord(name, logging.WARNING, "f.py", 1, msg, args, None)

    assert not noise(record("torchao", "Failed to load %s: %s", "/x/_C.so", "no CUDA"))
    assert not noise(
        record(
            "torch.utils._pytree",
            "%s is an Enum subclass and is now natively supported by torch.compile as an opaque value type. "
            "Calling register_constant() on Enum subclasses is deprecated and will be an error.",
            "<enum 'X'>",
        )
    )
    assert noise(record("torchao", "Skipping import of cpp extensions due to incompatible torch"))
    assert noise(record("torch.utils._pytree", "something else"))
    assert noise(record("other", "Failed to load x.so"))
    # The filter is removed after the import.
    assert noise not in logging.getLogger("torchao").filters


def test_import_torchao_missing_gives_an_install_hint(monkeypatch):
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")] + ["torchao"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if never installed, even after an earlier import
    with pytest.raises(ImportError, match=r"make lab.*pip install \"torchao>=0\.18,<0\.19\""):
        fp8.import_torchao()


# ------------------------------------------------------------------------------------------
# tensorwise_scale, quantize, dequantize against torchao and torch's casts
# ------------------------------------------------------------------------------------------


@settings(max_examples=150)
@given(x=tensors(dtypes=(torch.float32, torch.bfloat16, torch.float16)), fmt=st.sampled_from(list(DTYPES)))
def test_tensorwise_scale_is_torchaos_tensor_to_scale(ao, x, fmt):
    ours = fp8.tensorwise_scale(x, fmt)
    theirs = ao.tensor_to_scale(x, DTYPES[fmt])
    assert ours.dtype == torch.float32 and ours.shape == ()
    assert same_bits(ours, theirs)


@settings(max_examples=60)
@given(x=tensors(), fmt=st.sampled_from(list(DTYPES)), margin=st.integers(0, 64))
def test_margin_divides_by_a_power_of_two_exactly_as_a_bigger_amax_would(ao, x, fmt, margin):
    """tensorwise_scale(x, margin=m) == torchao's scale of x * 2**m (exact in float64) wherever the amax
    clamp (1e-12) does not act."""
    amax = float(x.abs().max())
    assume(amax >= fp8.EPS)
    ours = fp8.tensorwise_scale(x, fmt, margin)
    assert same_bits(ours, ao.tensor_to_scale(x.double() * 2.0**margin, DTYPES[fmt]))


def test_tensorwise_scale_special_tensors(ao):
    zeros = torch.zeros(4, 4)
    assert float(fp8.tensorwise_scale(zeros)) == float(torch.tensor(448 / 1e-12, dtype=torch.float32))
    assert same_bits(fp8.tensorwise_scale(zeros), ao.tensor_to_scale(zeros, E4M3))
    with_inf = torch.tensor([1.0, math.inf])
    assert float(fp8.tensorwise_scale(with_inf)) == 0.0  # torchao: 448 / inf
    assert math.isnan(float(fp8.tensorwise_scale(torch.tensor([1.0, math.nan]))))
    assert float(fp8.tensorwise_scale(torch.tensor([2.0]), "fp8_e5m2", margin=3)) == 57344 / 2 / 8


@settings(max_examples=150)
@given(
    x=tensors(dtypes=(torch.float32, torch.bfloat16)),
    fmt=st.sampled_from(list(DTYPES)),
    log2_scale=st.one_of(st.none(), st.integers(-120, 120), st.floats(-100, 100)),
)
def test_quantize_and_dequantize_are_torchaos_casts(ao, x, fmt, log2_scale):
    """quantize == torchao's hp_tensor_and_scale_to_float8(...)._data == torch's saturating cast;
    dequantize == torchao's to_original_precision()."""
    dtype = DTYPES[fmt]
    if log2_scale is None:
        scale = ao.tensor_to_scale(x, dtype)
    else:
        scale = torch.tensor(2.0**log2_scale, dtype=torch.float32)
        assume(0 < float(scale) < math.inf)
    q = fp8.quantize(x, fmt, scale)
    assert q.dtype == dtype
    t = ao.hp_tensor_and_scale_to_float8(x, scale, dtype)
    assert same_bits(q, t._data)
    finfo_max = torch.finfo(dtype).max
    assert same_bits(q, (x.float() * scale).clamp(-finfo_max, finfo_max).to(dtype))
    if x.dtype == torch.float32:  # to_original_precision returns x's own dtype
        assert same_bits(fp8.dequantize(q, scale), t.to_original_precision())
    assert torch.all(q.float().abs() <= finfo_max)  # saturating: E5M2 never overflows to inf


def test_tensorwise_scale_of_an_fp8_tensor_is_that_of_its_float32_values():
    q = fp8.quantize(torch.randn(64) * 10, "fp8_e4m3", 1.0)
    assert same_bits(fp8.tensorwise_scale(q, "fp8_e5m2"), fp8.tensorwise_scale(q.float(), "fp8_e5m2"))


def test_quantize_saturates_and_a_number_scale_is_its_float32():
    x = torch.tensor([1000.0, -1e30, math.inf, -math.inf, math.nan, 1.0])
    q = fp8.quantize(x, "fp8_e5m2", 100.0)
    assert q.float()[:4].tolist() == [57344.0, -57344.0, 57344.0, -57344.0]
    assert math.isnan(float(q.float()[4]))
    assert same_bits(fp8.quantize(x, "fp8_e4m3", 0.1), fp8.quantize(x, "fp8_e4m3", torch.tensor(0.1)))
    assert fp8.dequantize(fp8.quantize(torch.tensor([3.0]), "fp8_e4m3", 2.0), 2.0).item() == 3.0


def test_saturation_count_matches_torchs_own_overflow_for_e5m2_and_the_e4m3_bound_by_hand():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * 10.0 ** (torch.rand(4096, generator=gen) * 8)
    x = torch.cat([x, torch.tensor([57344.0, 61439.996, 61440.0, 61440.004, math.inf, -math.inf, math.nan])])
    # torch's E5M2 cast does not saturate: what it turns into inf is what saturates.
    expected = int((torch.isinf(x.to(E5M2).float()) & ~torch.isnan(x)).sum())
    assert fp8.saturation_count(x, "fp8_e5m2", 1.0) == expected > 2
    # E4M3: 448 = 1.110b x 2**8; 464 is the tie with the next step, which rounds to the even 448.
    e4m3 = torch.tensor([448.0, 463.99997, 464.0, 464.00003, 1e9, -math.inf, math.nan])
    assert fp8.saturation_count(e4m3, "fp8_e4m3", 1.0) == 3
    assert fp8.FP8_FORMATS["fp8_e4m3"].saturation_bound == 464.0
    assert fp8.FP8_FORMATS["fp8_e5m2"].saturation_bound == 61440.0
    # Current scaling never saturates, though scale * amax can land a hair above 448.
    for seed in range(20):
        t = torch.randn(1000, generator=torch.Generator().manual_seed(seed)) * 3.7
        s = fp8.tensorwise_scale(t)
        assert fp8.saturation_count(t, "fp8_e4m3", s) == 0


def test_format_table_agrees_with_torch_finfo():
    for name, spec in fp8.FP8_FORMATS.items():
        assert spec.dtype == DTYPES[name]
        assert spec.max == torch.finfo(spec.dtype).max
        assert 2.0**spec.emax <= spec.max < 2.0 ** (spec.emax + 1)
    assert fp8.ELEMENT_FORMATS["fp4_e2m1"].max == 6.0


def test_quantization_error_by_hand():
    # (3, 4) read as (3, 5): sqrt(1 / 25) = 0.2; as (-3, -4): sqrt(100 / 25) = 2
    x = torch.tensor([3.0, 4.0])
    assert fp8.quantization_error(x, torch.tensor([3.0, 5.0])) == pytest.approx(0.2, rel=1e-15)
    assert fp8.quantization_error(x, -x) == 2.0


def test_quantization_error_edges():
    assert fp8.quantization_error(torch.zeros(3), torch.zeros(3)) == 0.0
    assert fp8.quantization_error(torch.zeros(3), torch.ones(3)) == math.inf
    assert math.isnan(fp8.quantization_error(torch.tensor([1.0, math.nan]), torch.ones(2)))
    assert fp8.quantization_error(torch.tensor([3.0, 4.0]), torch.zeros(2)) == 1.0


# ------------------------------------------------------------------------------------------
# DelayedScaling: traced by hand
# ------------------------------------------------------------------------------------------

# (amax recorded, history after it oldest first, scale after it): E4M3, history_len 3, margin 0, "max".
MAX_TRACE = [
    (2.0, [2.0], 224.0),  # 448 / 2
    (4.0, [2.0, 4.0], 112.0),  # growth: the max grows, the scale halves
    (1.0, [2.0, 4.0, 1.0], 112.0),  # the max is still 4
    (64.0, [4.0, 1.0, 64.0], 7.0),  # an outlier; the history wraps (2 leaves)
    (1.0, [1.0, 64.0, 1.0], 7.0),  # the outlier keeps the scale low ...
    (1.0, [64.0, 1.0, 1.0], 7.0),
    (1.0, [1.0, 1.0, 1.0], 448.0),  # ... until it leaves the history
    (0.0, [1.0, 1.0, 0.0], 448.0),  # zeros do not matter while the max is positive
    (0.0, [1.0, 0.0, 0.0], 448.0),
    (0.0, [0.0, 0.0, 0.0], 448.0),  # max 0: the scale is kept
    (math.nan, [0.0, 0.0, math.nan], 448.0),  # NaN: kept
    (8.0, [0.0, math.nan, 8.0], 448.0),  # NaN in the history: the max is NaN, the scale frozen
    (8.0, [math.nan, 8.0, 8.0], 448.0),
    (8.0, [8.0, 8.0, 8.0], 56.0),  # the NaN has left: 448 / 8
    (math.inf, [8.0, 8.0, math.inf], 56.0),  # inf: kept
]
# The same amaxes, "most_recent", margin 1: scale = 448 / newest / 2.
MOST_RECENT_TRACE = [
    112.0,
    56.0,
    224.0,
    3.5,
    224.0,
    224.0,
    224.0,
    224.0,
    224.0,
    224.0,
    224.0,
    28.0,
    28.0,
    28.0,
    28.0,
]


def same_floats(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True)
    )


def test_delayed_scaling_max_hand_trace():
    ds = fp8.DelayedScaling("fp8_e4m3", history_len=3, margin=0, algo="max")
    assert ds.scale == 1.0 and ds.history == []
    for amax, history, scale in MAX_TRACE:
        assert ds.update(amax) == scale
        assert ds.scale == scale, (amax, history, ds)
        assert same_floats(ds.history, history), (amax, ds.history)


def test_delayed_scaling_most_recent_hand_trace_with_margin():
    ds = fp8.DelayedScaling("fp8_e4m3", history_len=3, margin=1, algo="most_recent")
    for (amax, history, _), scale in zip(MAX_TRACE, MOST_RECENT_TRACE, strict=True):
        ds.update(amax)
        assert ds.scale == scale, (amax, ds)
        assert same_floats(ds.history, history)


def test_delayed_scaling_e5m2_float32_rounding_and_overflow():
    ds = fp8.DelayedScaling("fp8_e5m2", history_len=1)
    assert ds.update(7.0) == 8192.0  # 57344 / 7
    ds = fp8.DelayedScaling(history_len=2)
    assert ds.update(3.0) == float(torch.tensor(448 / 3, dtype=torch.float32))  # rounded to float32
    ds = fp8.DelayedScaling(history_len=1)
    assert ds.update(torch.tensor(1e-45)) == FLOAT32_MAX  # 448 / 1e-45 overflows float32: clamped
    ds = fp8.DelayedScaling(history_len=1)
    ds.update(2.0)
    with pytest.raises(ValueError, match="amax"):
        ds.update(-1.0)
    with pytest.raises(TypeError, match="amax"):
        ds.update("1")
    with pytest.raises(ValueError, match="amax"):
        ds.update(torch.ones(2))
    assert ds.history == [2.0] and ds.scale == 224.0  # validated before changed


@settings(max_examples=60)
@given(
    amaxes=st.lists(st.one_of(MAGNITUDES, st.just(math.nan), st.just(math.inf)), min_size=1, max_size=30),
    history_len=st.integers(1, 8),
    fmt=st.sampled_from(list(DTYPES)),
)
def test_delayed_scale_is_torchaos_amax_to_scale_of_the_reduced_history(ao, amaxes, history_len, fmt):
    ds = fp8.DelayedScaling(fmt, history_len=history_len)
    expected = 1.0
    for i, amax in enumerate(amaxes):
        ds.update(amax)
        window = amaxes[max(0, i + 1 - history_len) : i + 1]
        r = math.nan if any(math.isnan(a) for a in window) else max(window)
        if math.isfinite(r) and r > 0:
            expected = min(float(ao.amax_to_scale(torch.tensor(max(r, fp8.EPS)), DTYPES[fmt])), FLOAT32_MAX)
            if r < fp8.EPS:  # torchao clamps the amax at 1e-12; DelayedScaling does not
                expected = float(
                    torch.tensor(min(fp8.FP8_FORMATS[fmt].max / r, FLOAT32_MAX), dtype=torch.float32)
                )
        assert ds.scale == expected


# ------------------------------------------------------------------------------------------
# Float8Linear and convert_to_float8 against torchao, bit for bit
# ------------------------------------------------------------------------------------------

FEATURES = st.sampled_from([16, 32, 48, 64])


def _pair(ao, in_features, out_features, bias, seed):
    """Our Float8Linear and torchao's, built from copies of the same seeded nn.Linear."""
    gen = torch.Generator().manual_seed(seed)
    lin = nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(out_features, in_features, generator=gen) / math.sqrt(in_features))
        if bias:
            lin.bias.copy_(torch.randn(out_features, generator=gen))
    theirs = ao.convert_to_float8_training(nn.Sequential(copy.deepcopy(lin)))[0]
    ours = fp8.Float8Linear.from_float(lin)
    return ours, theirs, gen


def _input(gen, shape, kind, scale):
    x = torch.randn(shape, generator=gen) * scale
    if kind == "zero_rows":
        x.reshape(-1, shape[-1])[::2] = 0.0
    elif kind == "zeros":
        x = x * (torch.rand(shape, generator=gen) < 0.3)
    elif kind == "outlier":
        x.reshape(-1)[int(torch.randint(0, x.numel(), (1,), generator=gen))] = scale * 1e4
    elif kind == "all_zero":
        x = torch.zeros(shape)
    return x


@settings(max_examples=120, deadline=None)
@given(
    k=FEATURES,
    n=FEATURES,
    rows=st.integers(1, 40),
    batch=st.sampled_from([None, 2, 3]),
    bias=st.booleans(),
    kind=st.sampled_from(["gauss", "zero_rows", "zeros", "outlier", "all_zero"]),
    log10_scale=st.integers(-4, 4),
    grad_kind=st.sampled_from(["gauss", "zeros", "outlier"]),
    dtype=st.sampled_from([torch.float32, torch.float32, torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**31 - 1),
)
def test_float8_linear_is_torchaos_bit_for_bit(
    ao, k, n, rows, batch, bias, kind, log10_scale, grad_kind, dtype, seed
):
    """Forward output and the input, weight and bias gradients are bit-identical to torchao's
    Float8Linear (default tensorwise recipe), on 2-D and 3-D inputs with zeros, zero rows and outliers,
    in float32, bfloat16 and float16 (the output comes back in the input's dtype)."""
    ours, theirs, gen = _pair(ao, k, n, bias, seed)
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
    event(f"{kind} / grad {grad_kind}")
    event(str(dtype))


def test_float8_linear_is_fp8_and_not_fp32():
    """The identity above is not trivial: the FP8 output differs from the FP32 one, by a bounded amount."""
    torch.manual_seed(0)
    lin = nn.Linear(64, 32)
    x = torch.randn(16, 64)
    ref = lin(x)
    out = fp8.Float8Linear.from_float(copy.deepcopy(lin))(x)
    rel = fp8.quantization_error(ref.detach(), out.detach())
    assert 1e-3 < rel < 0.1


def test_from_float_shares_parameters_and_refuses_odd_dims():
    lin = nn.Linear(32, 16)
    f = fp8.Float8Linear.from_float(lin)
    assert f.weight is lin.weight and f.bias is lin.bias
    with pytest.raises(ValueError, match="out_features=10"):
        fp8.Float8Linear.from_float(nn.Linear(32, 10))
    with pytest.raises(ValueError, match="in_features=20"):
        fp8.Float8Linear.from_float(nn.Linear(20, 16))


def test_float8_linear_calls_exactly_the_float8_matmul_the_notebook_shows(monkeypatch):
    """Notebook 08 prints fp8.Float8Matmul's source; the layer's forward must run that very class."""
    calls = []
    original = fp8.Float8Matmul.apply

    def spy(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(fp8.Float8Matmul, "apply", spy)
    layer = fp8.Float8Linear.from_float(nn.Linear(32, 16))
    x = torch.randn(4, 32, requires_grad=True)
    layer(x).sum().backward()
    assert (
        len(calls) == 1 and calls[0][0] is x and calls[0][1] is layer.weight and calls[0][2] is layer.recipe
    )
    assert x.grad is not None and layer.weight.grad is not None


def test_convert_to_float8_skips_the_10_class_head_like_torchaos_filter(ao):
    from amp_lab.models import make_mlp

    model = fp8.convert_to_float8(make_mlp(64, 10, hidden=32, depth=3))
    kinds = [type(m).__name__ for m in model if isinstance(m, nn.Linear)]
    assert kinds == ["Float8Linear", "Float8Linear", "Float8Linear", "Linear"]
    # torchao converts every Linear unless told otherwise (on a CPU its 10-wide GEMM even runs:
    # CPU _scaled_mm takes any shape; a GPU's does not); given our filter, it converts the same ones.
    plain = ao.convert_to_float8_training(make_mlp(64, 10, hidden=32, depth=3))
    assert sum(type(m).__name__ == "Float8Linear" for m in plain) == 4
    filtered = ao.convert_to_float8_training(
        make_mlp(64, 10, hidden=32, depth=3),
        module_filter_fn=fp8.float8_module_filter,
    )
    assert [type(m).__name__ for m in filtered if isinstance(m, nn.Linear)] == kinds
    # A root Linear comes back converted; a filter that picks an unsuitable layer changes nothing.
    assert isinstance(fp8.convert_to_float8(nn.Linear(16, 16)), fp8.Float8Linear)
    model = make_mlp(64, 10, hidden=32, depth=2)
    with pytest.raises(ValueError, match="out_features=10"):
        fp8.convert_to_float8(model, module_filter=lambda m, fqn: True)
    assert not any(isinstance(m, fp8.Float8Linear) for m in model)


def test_training_ours_and_torchaos_gives_identical_losses(ao):
    """The notebook's claim: train_digits with our convert_to_float8 and with torchao's (same filter)
    gives the same loss at every step, the same final weights and the same test accuracy."""
    data = load_digits()
    kwargs = dict(dtype=None, depth=4, width=32, num_steps=8, data=data)
    ours = train_digits(None, convert=lambda m: fp8.convert_to_float8(m), **kwargs)
    theirs = train_digits(
        None,
        convert=lambda m: ao.convert_to_float8_training(m, module_filter_fn=fp8.float8_module_filter),
        **kwargs,
    )
    fp32 = train_digits(None, **kwargs)
    assert ours.losses == theirs.losses
    assert ours.losses != fp32.losses  # FP8 really ran
    assert ours.test_accuracy == theirs.test_accuracy
    for a, b in zip(ours.model.parameters(), theirs.model.parameters(), strict=True):
        assert same_bits(a, b)


# ------------------------------------------------------------------------------------------
# Delayed-scaling Float8Linear
# ------------------------------------------------------------------------------------------


def _scaled_mm(a, b, sa, sb, fast):
    return torch._scaled_mm(
        a, b, scale_a=torch.tensor(sa).reciprocal(), scale_b=torch.tensor(sb).reciprocal(),
        out_dtype=torch.float32, use_fast_accum=fast,
    )  # fmt: skip


def test_delayed_float8_linear_uses_scale_one_then_earlier_amaxes(ao):
    gen = torch.Generator().manual_seed(3)
    lin = nn.Linear(32, 16)
    layer = fp8.Float8Linear.from_float(lin, scaling="delayed", history_len=4)
    xs = [torch.randn(8, 32, generator=gen) * s for s in (0.5, 3.0, 1.0)]
    gs = [torch.randn(8, 16, generator=gen) * 1e-2 for _ in range(3)]
    # The scales we expect, worked out from the earlier steps' amaxes (torchao's amax_to_scale).
    s_x, s_w, s_g = 1.0, 1.0, 1.0  # the first step: no history yet
    amax_x, amax_g = [], []
    for step, (x, g) in enumerate(zip(xs, gs, strict=True)):
        W = lin.weight.detach().clone()
        x_fp8 = fp8.quantize(x, "fp8_e4m3", s_x)
        w_fp8 = fp8.quantize(W, "fp8_e4m3", s_w)
        g_fp8 = fp8.quantize(g, "fp8_e5m2", s_g)
        expected_y = _scaled_mm(x_fp8, w_fp8.t(), s_x, s_w, True) + lin.bias
        expected_gw = _scaled_mm(g_fp8.t().contiguous(), x_fp8.t().contiguous().t(), s_g, s_x, False)
        xr = x.clone().requires_grad_()
        lin.weight.grad = None
        y = layer(xr)
        y.backward(g)
        assert same_bits(y, expected_y), step
        assert same_bits(lin.weight.grad, expected_gw), step
        amax_x.append(float(x.abs().max()))
        amax_g.append(float(g.abs().max()))
        s_x = float(ao.amax_to_scale(torch.tensor(max(amax_x)), E4M3))
        s_w = float(ao.amax_to_scale(W.abs().max(), E4M3))
        s_g = float(ao.amax_to_scale(torch.tensor(max(amax_g)), E5M2))
        assert layer.recipe.delayed["input"].scale == s_x and layer.recipe.delayed["grad_output"].scale == s_g
    assert layer.recipe.delayed["input"].history == amax_x
    # Under no_grad, or in eval mode, the histories stay as they are.
    with torch.no_grad():
        layer(torch.randn(8, 32) * 100)
    layer.eval()
    layer(torch.randn(8, 32) * 100)
    assert layer.recipe.delayed["input"].history == amax_x


def test_delayed_and_mx_training_on_digits_stays_finite_and_learns():
    data = load_digits()
    kwargs = dict(dtype=None, depth=4, width=32, num_steps=60, data=data)
    runs = {
        "delayed": train_digits(
            None, convert=lambda m: fp8.convert_to_float8(m, scaling="delayed"), **kwargs
        ),
        "mxfp8": train_digits(None, convert=mx.convert_to_mx, **kwargs),
        "mxfp4": train_digits(None, convert=lambda m: mx.convert_to_mx(m, "fp4_e2m1"), **kwargs),
    }
    for name, run in runs.items():
        assert run.finite, name
        assert all(math.isfinite(v) for v in run.losses), name
        assert run.recent_loss(10) < 0.5 * run.losses[0], name
        assert run.test_accuracy > 0.8, name


# ------------------------------------------------------------------------------------------
# MX and NVFP4 against torchao
# ------------------------------------------------------------------------------------------

MX_DTYPES = {"fp8_e4m3": E4M3, "fp8_e5m2": E5M2, "fp4_e2m1": torch.float4_e2m1fn_x2}


@st.composite
def mx_tensors(draw, block_size):
    """Rows of blocks, each block of its own kind: zero, one outlier, near the element max, denormal."""
    rows = draw(st.integers(1, 3))
    nblocks = draw(st.integers(1, 3))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    blocks = []
    for _ in range(rows * nblocks):
        kind = draw(st.sampled_from(["gauss", "zero", "outlier", "near_max", "denormal", "tiny", "huge"]))
        b = torch.randn(block_size, generator=gen, dtype=torch.float64) * draw(MAGNITUDES)
        if kind == "zero":
            b = torch.zeros(block_size, dtype=torch.float64)
        elif kind == "outlier":
            b[int(torch.randint(0, block_size, (1,), generator=gen))] = float(b.abs().max()) * 1e3 + 1.0
        elif kind == "near_max":  # the block amax just below/at/above a power of two times the element max
            top = draw(st.sampled_from([448.0, 57344.0, 6.0, 7.5, 480.0, 512.0]))
            b = b / (b.abs().max() + 1e-300) * top * 2.0 ** draw(st.integers(-20, 20))
        elif kind == "denormal":
            b = torch.randn(block_size, generator=gen, dtype=torch.float64) * 1e-40
        elif kind == "tiny":  # amax below 2**(emax - 127): torchao's halving case
            b = torch.randn(block_size, generator=gen, dtype=torch.float64) * 2.0**-122
        elif kind == "huge":
            b = torch.randn(block_size, generator=gen, dtype=torch.float64) * 1e37
        event(kind)
        blocks.append(b)
    x = torch.cat(blocks).reshape(rows, nblocks * block_size)
    return x.clamp(-FLOAT32_MAX, FLOAT32_MAX).to(torch.float32)


def _torchao_mx(ao, x, elem, block_size):
    scale, data = ao.to_mx(x, MX_DTYPES[elem], block_size)
    return ao.to_dtype(data, scale, MX_DTYPES[elem], block_size, torch.float32)


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("elem", list(MX_DTYPES))
@settings(max_examples=40)
@given(data=st.data())
def test_mx_quantize_is_torchaos_to_mx_and_to_dtype(ao, elem, block_size, data):
    x = data.draw(mx_tensors(block_size))
    assert same_bits(mx.mx_quantize(x, elem, block_size), _torchao_mx(ao, x, elem, block_size))
    xb = x.to(torch.bfloat16)  # torchao takes bfloat16 too; ours converts it to float32 first
    assert same_bits(mx.mx_quantize(xb, elem, block_size), _torchao_mx(ao, xb, elem, block_size))


@settings(max_examples=30)
@given(
    elem=st.sampled_from(list(MX_DTYPES)),
    block_size=st.sampled_from([1, 2, 8, 64, 128]),
    x=tensors(max_dim=2, max_side=4),
)
def test_mx_quantize_other_block_sizes_match_torchao_too(ao, elem, block_size, x):
    x = x.repeat_interleave(block_size, dim=-1) * torch.linspace(-1, 1, block_size).repeat(x.shape[-1])
    assume(elem != "fp4_e2m1" or x.shape[-1] % 2 == 0)  # torchao packs FP4 two to a byte
    assert same_bits(mx.mx_quantize(x, elem, block_size), _torchao_mx(ao, x.contiguous(), elem, block_size))


def test_mx_quantize_by_hand():
    """One block worked out by hand: amax 10 -> floor(log2 10) = 3, minus E4M3's emax 8: scale 2**-5."""
    x = torch.tensor([10.0, 1.0, -0.3, 0.0] + [0.0] * 28)
    q = mx.mx_quantize(x, "fp8_e4m3", 32)
    # x / 2**-5 = 320, 32, -9.6 -> E4M3 has steps of 1 between 8 and 16: 9.6 -> 10 -> times 2**-5
    assert q[:4].tolist() == [10.0, 1.0, -10 / 32, 0.0]
    # FP4: emax 2: scale 2**(3-2) = 2; 10/2 = 5 -> ties to 4 (even); 1/2 = 0.5; -0.15 -> -0
    q4 = mx.mx_quantize(x, "fp4_e2m1", 32)
    assert q4[:4].tolist() == [8.0, 1.0, -0.0, 0.0] and math.copysign(1, float(q4[2])) == -1
    # torchao's detail: a block with amax below 2**(emax - 127) comes back halved.
    tiny = torch.full((32,), 2.0**-125)
    assert mx.mx_quantize(tiny, "fp8_e4m3", 32)[0].item() == 2.0**-126
    # a NaN poisons its own block only, as torchao's E8M0 NaN scale does
    x = torch.ones(64)
    x[3] = math.nan
    out = mx.mx_quantize(x, "fp8_e4m3", 32)
    assert torch.isnan(out[:32]).all() and torch.equal(out[32:], torch.ones(32))


def test_fp4_rounding_is_ties_to_even_on_the_e2m1_grid():
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    v = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 1e9, math.inf, 0.24, 5.01])
    assert mx._round_to_fp4(v).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 6.0, 0.0, 6.0]
    assert all(float(mx._round_to_fp4(torch.tensor(g))) == g for g in grid)


@settings(max_examples=60)
@given(
    x=tensors(max_dim=2, max_side=4),
    cols=st.integers(1, 3),
    explicit=st.one_of(st.none(), st.floats(1e-30, 1e30)),
    three_d=st.booleans(),
)
def test_nvfp4_quantize_is_torchaos_nvfp4_tensor(ao, x, cols, explicit, three_d):
    x = x.reshape(-1, 1).repeat(1, 16 * cols) * torch.linspace(-1.5, 1.5, 16 * cols)
    if three_d:
        x = x.reshape(1, *x.shape)
    if explicit is None:
        g = ao.per_tensor_amax_to_scale(x.abs().amax())
        assume(float(g) > 0)
        ours = mx.nvfp4_quantize(x)
    else:
        g = torch.tensor(explicit, dtype=torch.float32)
        ours = mx.nvfp4_quantize(x, per_tensor_scale=explicit)
    theirs = ao.NVFP4Tensor.to_nvfp4(x.contiguous(), per_tensor_scale=g).dequantize(torch.float32)
    assert same_bits(ours, theirs)


def test_nvfp4_zero_tensor_uses_scale_one_where_torchao_returns_nan(ao):
    zeros = torch.zeros(2, 32)
    assert torch.equal(mx.nvfp4_quantize(zeros), zeros)
    g0 = ao.per_tensor_amax_to_scale(zeros.abs().amax())
    assert torch.isnan(ao.NVFP4Tensor.to_nvfp4(zeros, per_tensor_scale=g0).dequantize(torch.float32)).all()
    one = ao.NVFP4Tensor.to_nvfp4(zeros, per_tensor_scale=torch.tensor(1.0)).dequantize(torch.float32)
    assert same_bits(mx.nvfp4_quantize(zeros), one)


def test_mx_linear_is_mx_quantized_operands_in_fp32():
    gen = torch.Generator().manual_seed(1)
    lin = nn.Linear(64, 10)
    layer = mx.MXLinear.from_float(lin, elem="fp8_e4m3", block_size=32)
    x = torch.randn(32, 64, generator=gen).requires_grad_()
    y = layer(x)
    W = lin.weight.detach()
    assert same_bits(y, mx.mx_quantize(x.detach()) @ mx.mx_quantize(W).t() + lin.bias)
    g = torch.randn(32, 10, generator=gen)
    y.backward(g)
    # grad_weight = go.T @ x, both in blocks along the batch (32 rows: one block)
    assert same_bits(
        lin.weight.grad,
        mx.mx_quantize(g.t().contiguous()) @ mx.mx_quantize(x.detach().t().contiguous()).t(),
    )
    # grad_input = go @ W, blocks along out_features (10, zero-padded to 32)
    gp = nn.functional.pad(g, (0, 22))
    wp = nn.functional.pad(W.t(), (0, 22))
    assert same_bits(x.grad, (mx.mx_quantize(gp)[:, :10]) @ mx.mx_quantize(wp)[:, :10].t())


# ------------------------------------------------------------------------------------------
# Current versus delayed scaling: trajectory and widget
# ------------------------------------------------------------------------------------------


def test_trajectories_follow_their_definitions():
    tensors_ = fp8_explorer.make_tensor_sequence(40, size=256, spike_step=10, spike_size=1000.0, seed=1)
    current = fp8_explorer.scaling_trajectory(tensors_, recipe="current")
    delayed = fp8_explorer.scaling_trajectory(tensors_, recipe="delayed", history_len=8)
    ds = fp8.DelayedScaling(history_len=8)
    for i, t in enumerate(tensors_):
        assert current.scale[i] == float(fp8.tensorwise_scale(t))
        assert delayed.scale[i] == ds.scale
        ds.update(t.abs().max())
        assert current.amax[i] == delayed.amax[i] == float(t.abs().max())
        for traj in (current, delayed):
            s = traj.scale[i]
            q = fp8.dequantize(fp8.quantize(t, "fp8_e4m3", s), s)
            assert traj.error[i] == fp8.quantization_error(t, q)
            assert traj.saturated[i] == fp8.saturation_count(t, "fp8_e4m3", s)
            assert traj.underflow[i] == int(((q == 0) & (t != 0)).sum())
    # Current scaling never saturates; delayed saturates at the spike (the outlier alone).
    assert current.saturated_steps == []
    assert delayed.saturated[10] == 1
    assert delayed.error[10] > 0.9 > 100 * current.error[10]
    # ... while current scaling squeezes the rest: more values round to zero at the spike than before it.
    assert current.underflow[10] > max(current.underflow[:10])
    # After the spike, a max-history keeps the spike's scale for exactly history_len steps.
    spike_scale = float(torch.tensor(448.0 / delayed.amax[10], dtype=torch.float32))
    assert delayed.scale[11 : 11 + 8] == [spike_scale] * 8
    assert delayed.scale[19] > 100 * spike_scale
    recent = fp8_explorer.scaling_trajectory(tensors_, recipe="delayed", history_len=8, algo="most_recent")
    assert recent.scale[11] == spike_scale and recent.scale[12] > 100 * spike_scale
    # The reveal's reading: the same numbers, picked at the spike.
    reading = fp8_explorer.spike_reading(current, delayed, 10)
    assert reading.outcome == "fp8.delayed_saturates"
    assert reading.reasons == (
        "fp8.current_rescales",
        "fp8.error_hides_underflow",
        "fp8.delayed_rounds_after",
    )
    f = reading.facts
    # the window after the spike is the history_len steps the outlier stays in the history, as in the notebook
    assert (f["saturated_delayed"], f["saturated_current"], f["n_after"], f["max"]) == (1, 0, 8, 448.0)
    assert delayed.after_spike(10) == range(11, 19) and current.after_spike(10) == range(11, 27)
    assert f["amax_ratio"] == delayed.amax[10] / max(delayed.amax[:10])
    assert (
        f["after_current"] == sum(current.error[11:19]) / 8
        and f["log2_scale_delayed"] == delayed.log2_scale[10]
    )
    assert f["underflow_current"] == current.underflow[10] and f["underflow_run_delayed"] == sum(
        delayed.underflow
    )
    assert f["after_underflow_delayed"] == sum(delayed.underflow[11:19])
    assert delayed.after_spike(35) == range(36, 40)  # cut at the last step
    last = fp8_explorer.spike_reading(current, delayed, 39)  # a spike at the last step has no steps after it
    assert last.facts["n_after"] == 0 and math.isnan(last.facts["after_delayed"]) and str(last)
    assert "fp8.delayed_rounds_after" not in last.reasons


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("margin", [0, 7])
def test_rounded_to_zero_counts_match_torchs_own_cast_and_half_the_smallest_subnormal(fmt, margin):
    # A spike of 10**4 with a margin: current scaling rounds many values to zero at the spike while its
    # norm-based error, ruled by the outlier, drops; delayed scaling rounds them for the steps after it.
    tensors_ = fp8_explorer.make_tensor_sequence(30, size=512, spike_step=10, spike_size=1e4, seed=2)
    dtype = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[fmt]
    info = torch.finfo(dtype)
    half_smallest_subnormal = info.smallest_normal * info.eps / 2  # 2**-10 (E4M3), 2**-17 (E5M2)
    for recipe in ("current", "delayed"):
        traj = fp8_explorer.scaling_trajectory(tensors_, fmt=fmt, recipe=recipe, margin=margin, history_len=4)
        for i, t in enumerate(tensors_):
            scaled = t * torch.tensor(traj.scale[i], dtype=torch.float32)
            cast = scaled.to(dtype).to(torch.float32)  # torch's own cast, not fp8.quantize
            assert traj.underflow[i] == int(((cast == 0) & (t != 0)).sum())
            # round to nearest even: at or below half the smallest subnormal becomes zero
            assert traj.underflow[i] == int(((scaled.abs() <= half_smallest_subnormal) & (t != 0)).sum())
        if fmt == "fp8_e4m3" and recipe == "current":  # E5M2's window is 14 binades wider: nothing to see
            assert traj.underflow[10] > 0 and traj.error[10] < min(traj.error[:10])
        elif fmt == "fp8_e4m3":
            assert sum(traj.underflow[11:15]) > sum(traj.underflow[:10])
    if fmt == "fp8_e5m2":
        return
    current = fp8_explorer.scaling_trajectory(tensors_, recipe="current", margin=margin)
    delayed = fp8_explorer.scaling_trajectory(tensors_, recipe="delayed", margin=margin, history_len=4)
    reading = fp8_explorer.spike_reading(current, delayed, 10)
    assert "fp8.error_hides_underflow" in reading.reasons
    assert reading.facts["underflow_current"] == current.underflow[10] > 0


NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NB08 = [
    NOTEBOOKS / "08_fp8_and_block_scaling.ipynb",
    NOTEBOOKS / "solutions" / "08_fp8_and_block_scaling_solutions.ipynb",
]


def test_08_says_round_to_zero_reads_its_window_and_its_mlp():
    # "flush to zero" is FTZ, a hardware mode for subnormals; a value at or below half the smallest subnormal
    # *rounds* to zero: 08, its explorer, its readings and its exercises say so
    sources = [c.source for path in NB08 for c in nbformat.read(path, as_version=4).cells]
    ex = fp8_explorer.scaling_explorer(num_steps=8, size=32, spike_step=4)
    for text in [
        *sources,
        ex.readout.value,
        *(v for k, v in REASONS.items() if k.startswith("fp8.")),
        *(Path(m.__file__).read_text() for m in (fp8, fp8_explorer, mx, nb08_exercises)),
    ]:
        assert "flush" not in text.lower(), text[:200]
    code = "\n".join(sources)
    # one window after the spike (ScalingTrajectory.after_spike), in the notebook as in the readout
    assert "after = delayed.after_spike(SPIKE_STEP)" in code and "SPIKE_STEP + 17" not in code
    assert "16 steps" not in code and "23 steps" not in code
    # the MLP's shape is read from the model: no typed "6 x 128"; what the cell prints is what make_mlp builds
    assert "6 `Linear` layers" not in code and "6×128" not in code
    linears = [m for m in make_mlp(hidden=128, depth=5).modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 6 and [m.out_features for m in linears] == [128] * 5 + [10]
    assert "linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]" in code
    # amax is defined where it is first used
    first = next(s for s in sources if "amax" in s)
    assert "**amax** is its largest magnitude" in first


# a phrase that answers each of 08's predictions: none may stand in a markdown cell before its question
SPOILERS = {
    "guess_zero": [r"\d+(\.\d+)?\s*%", r"almost (all|wholly)", r"most of the (activation )?gradients"],
    "guess_saturated": [r"only the outlier", r"one element", r"delayed scaling (saturates|clips)"],
    "guess_same": [r"(compare|check)[^.]*bit for bit", r"Float8Linear[^.]*(identical|bit for bit)"],
}


def test_08_no_markdown_before_a_prediction_answers_it():
    cells = nbformat.read(NB08[0], as_version=4).cells
    for guess, patterns in SPOILERS.items():
        at = next(i for i, c in enumerate(cells) if c.source.startswith(f"{guess} = predict.choice("))
        before = " ".join(c.source.replace("\n", " ") for c in cells[:at] if c.cell_type == "markdown")
        for pattern in patterns:
            assert not re.search(pattern, before, re.IGNORECASE), (guess, pattern)


def test_unscaled_and_identity_readings_by_hand():
    below = fp8_explorer.unscaled_reading(2.0**-9 * 1.5)  # E4M3's smallest normal is 2**-6
    assert below.outcome == "fp8.below_window" and below.facts["log2_largest"] == -9
    assert below.facts["log2_min_normal"] == -6.0
    assert fp8_explorer.unscaled_reading(2.0**-6).outcome == "fp8.near_window"
    assert fp8_explorer.unscaled_reading(2.0**-9, "fp8_e5m2").outcome == "fp8.near_window"  # E5M2's is 2**-14
    same = fp8_explorer.identity_reading([1.0, 0.5, 0.25], [1.0, 0.5, 0.25], True)
    assert (same.outcome, same.reasons, same.facts) == (
        "fp8.losses_identical",
        ("fp8.weights_identical",),
        {"equal": 3, "total": 3},
    )
    close = fp8_explorer.identity_reading([1.0, 0.5, 0.25], [1.0, 0.5, 0.3], False)
    assert (close.outcome, close.reasons, close.facts["equal"]) == (
        "fp8.losses_close",
        ("fp8.weights_differ",),
        2,
    )
    assert fp8_explorer.identity_reading([1.0], [2.0], False).outcome == "fp8.losses_different"
    with pytest.raises(ValueError, match="ours and theirs"):
        fp8_explorer.identity_reading([1.0], [1.0, 2.0], True)


@pytest.mark.parametrize(
    "acts, grads, outcome, reasons",
    [
        # notebook 08's digits MLP, rounded: activations fit E4M3, hidden gradients need E5M2, logits beyond it
        (
            [9.5, 9.0],
            [24.4, 23.7, 57.7],
            "fp8.standard_recipe",
            ("fp8.activations_fit_e4m3", "fp8.gradients_need_e5m2", "fp8.logits_beyond_e5m2"),
        ),
        # 16 binades leave under 4 of room in E4M3's 18.8; gradients of 17 binades would fit E4M3 too
        (
            [16.0],
            [17.0, 20.0],
            "fp8.recipe_not_forced",
            ("fp8.activations_fill_e4m3", "fp8.gradients_fit_e4m3", "fp8.logits_within_e5m2"),
        ),
        (
            [9.0],
            [40.0, 20.0],
            "fp8.recipe_not_forced",
            ("fp8.activations_fit_e4m3", "fp8.gradients_beyond_e5m2", "fp8.logits_within_e5m2"),
        ),
    ],
)
def test_spread_reading_by_hand(acts, grads, outcome, reasons):
    reading = fp8_explorer.spread_reading(acts, grads, 18.8, 32.8)
    assert (reading.outcome, reading.reasons) == (outcome, reasons)
    assert reading.facts == {
        "narrow": max(acts),
        "wide": max(grads[:-1]),
        "logits": grads[-1],
        "w4": 18.8,
        "w5": 32.8,
    }
    assert len(reading.sentences()) == 4


def test_explorer_sliders_recompute_both_recipes():
    ex = fp8_explorer.scaling_explorer(
        num_steps=30, size=256, spike_step=10, spike_size=1000.0, history_len=4
    )
    renders = ex.pane.renders
    assert ex.delayed.saturated[10] == 1 and ex.current.saturated[10] == 0
    assert (
        ex.delayed.scale[11:15] == [ex.delayed.scale[11]] * 4 and ex.delayed.scale[15] > ex.delayed.scale[14]
    )
    ex.history_len.value = 8
    assert ex.delayed.history_len == 8 and ex.delayed.scale[11:19] == [ex.delayed.scale[11]] * 8
    ex.spike_step.value = 20
    assert ex.delayed.saturated[20] == 1 and ex.delayed.saturated[10] == 0
    ex.algo.value = "most_recent"
    assert ex.delayed.algo == "most_recent" and ex.delayed.scale[22] > 100 * ex.delayed.scale[21]
    ex.margin.value = 2
    assert ex.current.scale[0] == float(
        fp8.tensorwise_scale(fp8_explorer.make_tensor_sequence(30, size=256)[0], margin=2)
    )
    ex.spike_size.value = 1.0  # no outlier: nothing saturates at step 20 any more
    assert ex.delayed.saturated[20] == 0
    assert ex.pane.renders == renders + 5
    reading = fp8_explorer.spike_reading(ex.current, ex.delayed, 20)
    assert reading.outcome == "fp8.delayed_holds" and reading.facts["error_delayed"] == ex.delayed.error[20]
    assert fp8_explorer.readout_html(reading) == ex.readout.value
    # the panels plot what the readout counts: the scale, the saturated and the rounded-to-zero elements, the error
    for ax, series in zip(ex.axes[:3], ("log2_scale", "saturated", "underflow"), strict=True):
        for recipe in ("current", "delayed"):
            assert list(ex._lines[ax, recipe].get_ydata()) == getattr(getattr(ex, recipe), series)
    # one window after the spike for the readout and the notebook: history_len steps, here 8
    assert "the 8 steps after it" in ex.readout.value and reading.facts["n_after"] == 8
    assert "all 30 steps" in ex.readout.value and "flush" not in ex.readout.value.lower()


# ------------------------------------------------------------------------------------------
# Bad inputs
# ------------------------------------------------------------------------------------------

X = torch.randn(4, 32)
TRAJ = fp8_explorer.scaling_trajectory([X, X, X], recipe="current")
BAD = [
    (lambda: fp8.tensorwise_scale(X, "fp8"), ValueError, "fmt"),
    (lambda: fp8.tensorwise_scale(X, 8), TypeError, "fmt"),
    (lambda: fp8.tensorwise_scale(X, "fp4_e2m1"), ValueError, "fmt"),
    (lambda: fp8.tensorwise_scale(X, margin=-1), ValueError, "margin"),
    (lambda: fp8.tensorwise_scale(X, margin=0.5), TypeError, "margin"),
    (lambda: fp8.tensorwise_scale(torch.ones(3, dtype=torch.int32)), TypeError, "x"),
    (lambda: fp8.tensorwise_scale([1.0]), TypeError, "x"),
    (lambda: fp8.tensorwise_scale(torch.ones(0)), ValueError, "x"),
    (lambda: fp8.quantize(X, "fp8_e4m3", 0.0), ValueError, "scale"),
    (lambda: fp8.quantize(X, "fp8_e4m3", -1.0), ValueError, "scale"),
    (lambda: fp8.quantize(X, "fp8_e4m3", "1"), TypeError, "scale"),
    (lambda: fp8.quantize(X, "fp8_e4m3", torch.ones(3)), ValueError, "scale"),
    (lambda: fp8.quantize(X, "fp8_e4m3", torch.ones(1, dtype=torch.int64)), TypeError, "scale"),
    (lambda: fp8.dequantize(torch.ones(3, dtype=torch.uint8), 1.0), TypeError, "q"),
    (lambda: fp8.saturation_count(X, "e4m3", 1.0), ValueError, "fmt"),
    (lambda: fp8.quantization_error(X, X[:2]), ValueError, "shape"),
    (lambda: fp8.DelayedScaling(history_len=0), ValueError, "history_len"),
    (lambda: fp8.DelayedScaling(margin=-1), ValueError, "margin"),
    (lambda: fp8.DelayedScaling(algo="mean"), ValueError, "algo"),
    (lambda: fp8.DelayedScaling(algo=None), TypeError, "algo"),
    (lambda: fp8.DelayedScaling(fmt="fp16"), ValueError, "fmt"),
    (lambda: fp8.convert_to_float8(nn.Linear(16, 16), scaling="static"), ValueError, "scaling"),
    (lambda: fp8.convert_to_float8(nn.Linear(16, 16), history_len=0), ValueError, "history_len"),
    (lambda: fp8.convert_to_float8("model"), TypeError, "model"),
    (lambda: fp8.convert_to_float8(nn.Linear(16, 16), module_filter=3), TypeError, "module_filter"),
    (lambda: mx.mx_quantize(X, "fp8", 32), ValueError, "elem"),
    (lambda: mx.mx_quantize(X, "fp8_e4m3", 24), ValueError, "block_size"),
    (lambda: mx.mx_quantize(X, "fp8_e4m3", 64), ValueError, "block_size"),
    (lambda: mx.mx_quantize(X, "fp8_e4m3", 32.0), TypeError, "block_size"),
    (lambda: mx.mx_quantize(torch.ones(4, 32, dtype=torch.float64)), TypeError, "x"),
    (lambda: mx.mx_quantize(torch.tensor(1.0)), ValueError, "x"),
    (lambda: mx.nvfp4_quantize(torch.ones(32)), ValueError, "x"),
    (lambda: mx.nvfp4_quantize(torch.ones(2, 24)), ValueError, "16"),
    (lambda: mx.nvfp4_quantize(X, per_tensor_scale=0.0), ValueError, "per_tensor_scale"),
    (lambda: mx.nvfp4_quantize(X, per_tensor_scale="1"), TypeError, "per_tensor_scale"),
    (lambda: mx.convert_to_mx(nn.Linear(16, 16), block_size=3), ValueError, "block_size"),
    (lambda: mx.convert_to_mx(nn.Linear(16, 16), elem="int8"), ValueError, "elem"),
    (lambda: fp8_explorer.make_tensor_sequence(0), ValueError, "num_steps"),
    (lambda: fp8_explorer.make_tensor_sequence(10, spike_step=10), ValueError, "spike_step"),
    (
        lambda: fp8_explorer.make_tensor_sequence(10, spike_step=None, spike_size=0.5),
        ValueError,
        "spike_size",
    ),
    (lambda: fp8_explorer.scaling_trajectory([], recipe="current"), ValueError, "tensors"),
    (lambda: fp8_explorer.scaling_trajectory([X], recipe="static"), ValueError, "recipe"),
    (lambda: fp8_explorer.scaling_trajectory("abc"), TypeError, "tensors"),
    (lambda: fp8_explorer.scaling_trajectory([X], history_len=0), ValueError, "history_len"),
    (lambda: fp8_explorer.scaling_explorer(history_len=65), ValueError, "history_len"),
    (lambda: fp8_explorer.scaling_explorer(spike_step=48), ValueError, "spike_step"),
    (lambda: fp8_explorer.scaling_explorer(spike_size=1e5), ValueError, "spike_size"),
    (lambda: fp8_explorer.scaling_explorer(size=5000), ValueError, "size"),
    (lambda: fp8_explorer.make_tensor_sequence(1000, size=65536), ValueError, "num_steps \\* size"),
    (lambda: fp8_explorer.spike_reading(TRAJ, "delayed", 1), TypeError, "delayed"),
    (lambda: fp8_explorer.spike_reading(TRAJ, TRAJ, 4), ValueError, "spike_step"),
    (lambda: fp8_explorer.spread_reading([9.0], [20.0], 18.8, 32.8), ValueError, "gradients"),
    (lambda: fp8_explorer.spread_reading([math.nan], [20.0, 50.0], 18.8, 32.8), ValueError, "activations"),
    (lambda: fp8_explorer.spread_reading([9.0], [20.0, 50.0], 0.0, 32.8), ValueError, "e4m3_window"),
    (lambda: fp8.DelayedScaling().update(2**2000), ValueError, "amax"),
    (lambda: fp8.quantize(torch.ones(2, device="meta"), "fp8_e4m3", 1.0), ValueError, "meta"),
]


@pytest.mark.parametrize("call, error, name", BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD)])
def test_bad_inputs_raise_naming_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_no_stderr_from_a_training_run_or_the_widget():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        fp8_explorer.scaling_explorer(num_steps=10, size=64, spike_step=5)
        train_digits(None, dtype=None, depth=3, width=16, num_steps=2, convert=fp8.convert_to_float8)
    assert err.getvalue() == ""


# ------------------------------------------------------------------------------------------
# Where FP8 matmuls run: a pure decision, tested with real GPUs' facts
# ------------------------------------------------------------------------------------------

CU130_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize(
    "gpu, capability, arch_list, runs_on",
    [
        ("H100 / H200", (9, 0), CU130_ARCHS, "cuda"),
        ("L4 / RTX 4090 (Ada)", (8, 9), CU130_ARCHS, "cuda"),
        ("B200", (10, 0), CU130_ARCHS, "cuda"),
        ("RTX 5090", (12, 0), CU130_ARCHS, "cuda"),
        ("A100", (8, 0), CU130_ARCHS, "cpu"),
        ("A10", (8, 6), CU130_ARCHS, "cpu"),
        ("T4", (7, 5), CU130_ARCHS, "cpu"),
        ("V100 on a build without sm_70", (7, 0), CU130_ARCHS, "cpu"),
        ("H100 on a build without Hopper kernels", (9, 0), ["sm_75", "sm_80"], "cpu"),
    ],
)
def test_fp8_placement_follows_the_gpu_facts(gpu, capability, arch_list, runs_on):
    device, reading = fp8.fp8_placement(torch.device("cuda"), capability, arch_list)
    assert device.type == runs_on, (gpu, str(reading))
    want = "fp8.runs_on_gpu" if runs_on == "cuda" else "fp8.gpu_without_fp8"
    assert reading.outcome == want
    assert reading.facts["why"] == gpus.fp8_matmul_support(capability, arch_list).reason


def test_fp8_placement_of_a_cpu_and_an_apple_gpu():
    device, reading = fp8.fp8_placement(torch.device("cpu"))
    assert device == torch.device("cpu") and reading.outcome == "fp8.no_gpu"
    device, reading = fp8.fp8_placement(torch.device("mps"))
    assert device == torch.device("cpu") and reading.outcome == "fp8.apple_gpu"
    device, reading = fp8.fp8_device("cpu")
    assert device == torch.device("cpu") and reading.outcome == "fp8.no_gpu" and str(reading)
