"""Block-scaled formats from scratch, bit for bit torchao's (notebooks 08, 11): MX in its four scale modes
(:func:`mx_quantize`), NVFP4 (:func:`nvfp4_quantize`), emulated MX training (:func:`convert_to_mx`: the matmul
in float32) and NVIDIA's NVFP4 training recipe (:func:`convert_to_nvfp4`), piece by piece."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from ._checks import (
    ArgumentTypeError,
    check_bool,
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_scale,
    check_seed,
)
from .fp8_formats import (
    ELEMENT_FORMATS,
    FP8_FORMATS,
    ConvertedLinear,
    check_format,
    check_name,
    check_tensor,
    swap_linears,
)

MX_BLOCK_SIZES = tuple(2**k for k in range(11))  # the MX spec fixes 32; NVFP4 uses 16; 08 sweeps
NVFP4_BLOCK_SIZE = 16
E8M0_BIAS, E8M0_NAN = 127, 255  # E8M0: an 8-bit exponent with bias 127; 255 encodes NaN
LOW_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
SCALE_MODES = ("floor", "rceil", "ceil", "even")  # torchao's ScaleCalculationMode, in its order
NVFP4_BLOCKS = ((1, 16), (16, 16))  # 1x16 along the last dimension; 16x16 tiles (weights, in NVIDIA's recipe)
ROUNDINGS = ("nearest", "stochastic")
MAX_HADAMARD = 4096
HADAMARD_SIZES = tuple(2**k for k in range(13))


def _round_to_fp4(v: torch.Tensor) -> torch.Tensor:
    """Round float32 values to FP4 E2M1 (0, 0.5, 1, 1.5, 2, 3, 4, 6), ties to even, saturating at ±6: the
    grid's spacing is 0.5 below 2, 1 below 4 and 2 above, so ``round(|v| / spacing)`` rounds the mantissa."""
    a = v.abs()
    spacing = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    return torch.copysign(torch.clamp(torch.round(a / spacing) * spacing, max=6.0), v)


def _check_block_size(block_size) -> int:
    return check_choice("block_size", check_int("block_size", block_size, minimum=1), MX_BLOCK_SIZES)


def mx_quantize(x: torch.Tensor, elem: str = "fp8_e4m3", block_size: int = 32, scale_mode: str = "floor"):
    """OCP MX along the last dimension, quantized and dequantized (torchao's ``to_mx`` + ``to_dtype``): a block
    (a power of two, 1 to 1024) shares an E8M0 scale, by ``scale_mode`` (one of :data:`SCALE_MODES`, torchao's
    ``ScaleCalculationMode``): "floor" ``2**(floor(log2(amax)) - emax)`` (the OCP spec's, which clips a block
    max above the element max's binade: 448 to 512 for E4M3), "ceil" rounds that exponent up, "even" rounds
    the amax to the element's mantissa first, "rceil" is NVIDIA's ``2**ceil(log2(amax / max))``.  NaN blocks
    stay NaN.  (Notebooks 08 and 11.)"""
    x = check_tensor("x", x, min_dim=1)
    check_format("elem", elem, ELEMENT_FORMATS)
    block_size = _check_block_size(block_size)
    check_name("scale_mode", scale_mode, SCALE_MODES)
    if x.shape[-1] % block_size:
        raise ValueError(f"block_size={block_size} must divide x's last dimension, got {tuple(x.shape)}")
    if x.dtype not in LOW_FLOATS:
        raise ArgumentTypeError(f"x must be float32, bfloat16 or float16 for MX, got dtype {x.dtype}")
    elements, step = mx_parts(x, elem, block_size, scale_mode)
    return elements * step  # dequantized with the E8M0 value itself (torchao's get_fp_scale)


def mx_parts(x: torch.Tensor, elem: str, block_size: int, scale_mode: str = "floor"):
    """``(elements, step)``, float32 tensors of ``x``'s shape: the elements in ``elem`` and each block's E8M0
    value, so that ``elements * step`` is :func:`mx_quantize`'s result.  Internal: arguments are trusted."""
    spec = ELEMENT_FORMATS[elem]
    blocks = x.detach().to(torch.float32).contiguous().reshape(-1, block_size)
    amax = blocks.abs().amax(dim=-1, keepdim=True)  # NaN if the block holds a NaN
    if scale_mode == "rceil":  # torchao's _to_mx_rceil: the exponent of amax / max, rounded up
        exponent = torch.ceil(torch.log2(amax / spec.max))
        biased = torch.clamp(exponent, min=-E8M0_BIAS, max=E8M0_BIAS) + E8M0_BIAS
    else:
        biased = _biased_exponent(amax, spec.emax, spec.mantissa_bits, scale_mode).to(torch.float32)
    step = torch.pow(torch.full_like(amax, 2.0), biased - E8M0_BIAS)
    step = torch.where(torch.isnan(amax), torch.nan, step)
    if scale_mode == "rceil":  # a multiplication by 2**(127 - exponent), and by 1.0 at exponent 0 (its quirk)
        rcp = torch.where(biased == 0, 1.0, torch.exp2(E8M0_BIAS - biased))
        scaled = torch.clamp(blocks * rcp, -spec.max, spec.max)
    else:
        scaled = blocks / torch.clamp(step, min=2.0**-126)  # torchao never divides by the subnormal 2**-127
    if spec.name == "fp4_e2m1":
        elements = _round_to_fp4(scaled)
    else:
        elements = scaled.clamp(min=-spec.max, max=spec.max).to(spec.dtype).to(torch.float32)
    return elements.reshape(x.shape), step.expand_as(blocks).reshape(x.shape)


def _biased_exponent(amax: torch.Tensor, emax: int, mbits: int, scale_mode: str) -> torch.Tensor:
    """The biased E8M0 exponent (int32) of each block for "floor", "ceil" and "even", as torchao computes it:
    from the float32 bits of the amax (for "even" first rounded to ``mbits`` mantissa bits), minus ``emax``."""
    bits = amax.view(torch.int32)
    if scale_mode == "even":  # round the amax half up at the element's mantissa width, keep sign and exponent
        bits = (bits + (1 << (22 - mbits))) & -(1 << 23)
    exponent = (torch.bitwise_right_shift(bits, 23) & 0xFF) - 127  # floor(log2(amax))
    if scale_mode == "ceil":
        exponent = exponent + ((bits & 0x7FFFFF) > 0).to(torch.int32)  # round up unless a power of two
    biased = torch.clamp(exponent - emax, min=-E8M0_BIAS, max=E8M0_BIAS + 1) + E8M0_BIAS
    return torch.where(torch.isnan(amax), E8M0_NAN, biased)


def e8m0_scales(blocks: torch.Tensor, emax: int) -> torch.Tensor:
    """Each row's MX scale (float32 rows of a block each), as its E8M0 value: ``2**(floor(log2(amax)) -
    emax)`` (torchao's FLOOR rule), clamped to E8M0's 2**-127 to 2**127 and NaN for a block holding a NaN."""
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    biased = _biased_exponent(amax, emax, 0, "floor")
    scale = torch.pow(torch.full_like(amax, 2.0), (biased - E8M0_BIAS).to(torch.float32))
    return torch.where(torch.isnan(amax), torch.nan, scale)


def nvfp4_quantize(
    x: torch.Tensor, per_tensor_scale=None, *, block=(1, 16), rounding="nearest", generator=None
):
    """NVFP4, quantized and dequantized (torchao's NVFP4Tensor for ``block=(1, 16)``: 16 along the last
    dimension): a per-tensor scale ``g`` (default ``amax / (448 * 6)``, 1.0 for zeros), an E4M3 scale per
    block, FP4 elements.  ``block=(16, 16)``: 2-D blocks of the last two dimensions (multiples of 16), which
    commute with transposition; ``rounding="stochastic"`` rounds the elements with :func:`stochastic_round_fp4`
    (drawing from ``generator``).  (Notebooks 08 and 11.)"""
    elements, step = nvfp4_parts(x, per_tensor_scale, block=block, rounding=rounding, generator=generator)
    return elements * step


def nvfp4_parts(x: torch.Tensor, per_tensor_scale=None, *, block=(1, 16), rounding="nearest", generator=None):
    """``(elements, step)``: float32 tensors of ``x``'s shape with ``elements * step ==``
    :func:`nvfp4_quantize`'s result (``step`` = ``g`` times the block's E4M3 scale); arguments as there."""
    x = check_tensor("x", x, min_dim=2)
    check_instance("block", block, (tuple, list), "(1, 16) or (16, 16)")
    block = check_choice("block", tuple(check_int("block", v) for v in block), NVFP4_BLOCKS)
    rows = block[0]
    if x.shape[-1] % NVFP4_BLOCK_SIZE or x.shape[-2] % rows:
        sides = "two dimensions" if rows > 1 else "dimension"
        raise ValueError(f"x's last {sides} must be multiples of 16 for blocks {block}, got {tuple(x.shape)}")
    if x.dtype not in LOW_FLOATS:
        raise ArgumentTypeError(f"x must be float32, bfloat16 or float16 for NVFP4, got dtype {x.dtype}")
    check_name("rounding", rounding, ROUNDINGS)
    generator = _check_generator(generator, x, "x")
    data = x.detach().to(torch.float32).contiguous()
    if per_tensor_scale is not None:
        if isinstance(per_tensor_scale, torch.Tensor) and per_tensor_scale.numel() == 1:
            per_tensor_scale = float(per_tensor_scale)
        g = torch.tensor(check_scale("per_tensor_scale", per_tensor_scale), dtype=torch.float32)
    if data.numel() == 0:
        return data, torch.ones_like(data)
    if per_tensor_scale is None:
        g = data.abs().amax() / (448.0 * 6.0)  # torchao's per_tensor_amax_to_scale
        g = torch.where(g == 0, 1.0, g)
    g = g.to(torch.float32).to(data.device)
    # one row per block: 16 along the last dimension, or a 16x16 tile of the last two gathered into a row
    R, C = data.shape[-2], data.shape[-1]
    tiles = data.reshape(-1, R // rows, rows, C // 16, 16).transpose(2, 3)
    blocks = tiles.reshape(-1, rows * 16)
    e4m3 = FP8_FORMATS["fp8_e4m3"]
    block_scale = torch.clamp(blocks.abs().amax(dim=-1) / 6.0 / g, min=2.0**-6, max=e4m3.max)
    block_scale = block_scale.to(e4m3.dtype).to(torch.float32)
    reciprocal = (1.0 / g) / block_scale  # torchao multiplies by this, to match its Triton kernel
    scaled = torch.clamp(blocks * reciprocal.unsqueeze(-1), -6.0, 6.0)
    if rounding == "stochastic":
        elements = stochastic_round_fp4(scaled, generator)
    else:
        elements = _round_to_fp4(scaled)
    step = (g * block_scale).unsqueeze(-1).expand_as(blocks)
    return tuple(t.reshape(tiles.shape).transpose(2, 3).reshape(x.shape) for t in (elements, step))


def _check_generator(generator, t: torch.Tensor, name: str):
    """None, or a torch.Generator on the kind of device tensor ``t`` (the argument ``name``) is on."""
    if generator is not None:
        check_instance("generator", generator, torch.Generator, "a torch.Generator or None")
        if generator.device.type != t.device.type:
            raise ValueError(f"generator is on {generator.device} but {name} is on {t.device}: make it there")
    return generator


def stochastic_round_fp4(v: torch.Tensor, generator=None) -> torch.Tensor:
    """Float32 ``v`` rounded to the FP4 E2M1 grid stochastically: up to the next grid point with probability
    (distance from the one below) / (their spacing), so ``E[result] == v`` for ``|v| <= 6``; saturating at
    ±6, NaN stays NaN.  NVFP4 training rounds gradients so: rounding to nearest biases a sum of many small
    gradients, stochastic rounding does not.  (Notebook 11.)"""
    v = check_tensor("v", v).detach()
    if v.dtype != torch.float32:
        raise ArgumentTypeError(f"v must be a float32 tensor, got dtype {v.dtype}")
    generator = _check_generator(generator, v, "v")
    a = v.abs().clamp(max=6.0)
    spacing = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    below = torch.floor(a / spacing) * spacing  # exact: the spacing is a power of two
    u = torch.rand(v.shape, generator=generator, device=v.device)
    return torch.copysign(below + spacing * (u < (a - below) / spacing), v)


def random_hadamard(n: int, seed: int = 0) -> torch.Tensor:
    """The float32 ``n x n`` orthogonal matrix ``H_n / sqrt(n) @ diag(s)``: Sylvester's Hadamard matrix (entries
    ±1, ``H_2n = [[H, H], [H, -H]]``) times random signs ``s`` drawn from ``seed``; ``n`` a power of two up
    to 4096.  ``(A @ H) @ (H.T @ B) == A @ B``: it spreads an outlier over ``n`` entries and cancels in a GEMM
    that applies it to both operands.  (Notebook 11.)"""
    n = check_choice("n", check_int("n", n, minimum=1, maximum=MAX_HADAMARD), HADAMARD_SIZES)
    gen = torch.Generator().manual_seed(check_seed("seed", seed))
    signs = torch.randint(0, 2, (n,), generator=gen).to(torch.float32) * 2 - 1
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
    return h * (signs * float(torch.tensor(1 / math.sqrt(n))))  # every entry ±(1/sqrt(n) in float32)


def _mx_along_last(t: torch.Tensor, elem: str, block_size: int) -> torch.Tensor:
    """:func:`mx_quantize` along the last dimension, zero-padded to a multiple of the block."""
    pad = (-t.shape[-1]) % block_size
    q = mx_quantize(nn.functional.pad(t, (0, pad)).contiguous(), elem, block_size)
    return q[..., : q.shape[-1] - pad]


class MXMatmul(torch.autograd.Function):
    """``x @ weight.T`` with every GEMM operand quantize-dequantized in MX blocks along that GEMM's
    reduction dimension (K forward, N for grad_input, M for grad_weight), multiplied in float32."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, elem: str, block_size: int):
        x2d = x.reshape(-1, x.shape[-1]).to(torch.float32)
        w = weight.to(torch.float32)
        ctx.save_for_backward(x2d, w)  # each operand is quantized again along the other axis
        ctx.elem, ctx.block_size, ctx.x_shape, ctx.x_dtype = elem, block_size, x.shape, x.dtype
        out = _mx_along_last(x2d, elem, block_size) @ _mx_along_last(w, elem, block_size).t()
        return out.reshape(*x.shape[:-1], weight.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x2d, w = ctx.saved_tensors
        elem, bs = ctx.elem, ctx.block_size
        go = grad_output.reshape(-1, grad_output.shape[-1]).to(torch.float32)
        grad_x = _mx_along_last(go, elem, bs) @ _mx_along_last(w.t(), elem, bs).t()
        grad_w = _mx_along_last(go.t(), elem, bs) @ _mx_along_last(x2d.t(), elem, bs).t()
        return grad_x.reshape(ctx.x_shape).to(ctx.x_dtype), grad_w.to(w.dtype), None, None


class MXLinear(ConvertedLinear):
    """An ``nn.Linear`` trained with emulated MX block scaling through :class:`MXMatmul`; bias in FP32."""

    def __init__(self, in_features, out_features, bias=True, *, elem="fp8_e4m3", block_size=32):
        super().__init__(in_features, out_features, bias)
        self.elem, self.block_size = elem, block_size

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        output = MXMatmul.apply(input, self.weight, self.elem, self.block_size)
        return output if self.bias is None else output + self.bias.to(output.dtype)


def convert_to_mx(
    model: nn.Module,
    elem: str = "fp8_e4m3",
    block_size: int = 32,
    *,
    module_filter: Callable[[nn.Module, str], bool] | None = None,
) -> nn.Module:
    """Swap ``model``'s linear layers (those ``module_filter(module, fqn)`` accepts; default all) for
    :class:`MXLinear` in place and return the model; odd dimensions are zero-padded.  (Notebook 08.)"""
    check_instance("model", model, nn.Module, "an nn.Module")
    elem = check_format("elem", elem, ELEMENT_FORMATS).name
    block_size = _check_block_size(block_size)
    module_filter = check_callable("module_filter", module_filter, optional=True) or (lambda m, fqn: True)
    return swap_linears(model, partial(MXLinear.from_float, elem=elem, block_size=block_size), module_filter)


def _nvfp4_operand(t: torch.Tensor, layer: NVFP4Linear, *, grad=False, weight=False) -> torch.Tensor:
    """One GEMM operand (2-D, sides multiples of 16) quantize-dequantized along its LAST dimension, which
    the caller makes the GEMM's reduction dimension: in BF16 for a kept layer, else in NVFP4 by the recipe."""
    if layer.bf16:
        return t.to(torch.bfloat16).to(torch.float32)
    block = (16, 16) if weight and layer.weights_2d else (1, 16)
    rounding = "stochastic" if grad and layer.stochastic else "nearest"  # gradients only: unbiased sums
    return nvfp4_quantize(t, block=block, rounding=rounding, generator=layer.generator)


def _padded(t: torch.Tensor) -> torch.Tensor:
    """A 2-D float32 copy zero-padded to multiples of 16 (zeros change no amax and add nothing to a GEMM)."""
    return nn.functional.pad(t.to(torch.float32), (0, -t.shape[1] % 16, 0, -t.shape[0] % 16))


class NVFP4Matmul(torch.autograd.Function):
    """``x @ weight.T`` under NVIDIA's NVFP4 training recipe (arXiv 2509.25149), emulated: every operand of
    the three GEMMs quantize-dequantized along that GEMM's reduction dimension, products in float32."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, layer: NVFP4Linear):
        M, (N, K) = x.numel() // x.shape[-1], weight.shape
        x2d, w = _padded(x.reshape(M, K)), _padded(weight)
        # forward GEMM (M,K)@(K,N) reduces over K: x in 1x16 blocks along K; W (N, K) in 16x16 tiles (or
        # 1x16 along K).  A tile's quantization is the same read along either axis, so backward reuses it.
        wq = _nvfp4_operand(w, layer, weight=True)
        ctx.save_for_backward(x2d, w, wq)
        ctx.layer, ctx.shape, ctx.dtypes, ctx.x_shape = layer, (M, N, K), (x.dtype, weight.dtype), x.shape
        out = _nvfp4_operand(x2d, layer) @ wq.t()
        return out[:M, :N].reshape(*x.shape[:-1], N).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x2d, w, wq = ctx.saved_tensors
        layer, (M, N, K) = ctx.layer, ctx.shape
        go = _padded(grad_output.reshape(M, N))
        # grad_input = dY @ W reduces over N: dY in 1x16 blocks along N (stochastically rounded), and W
        # along N: its 16x16 tiles as they are, or W.T in 1x16 blocks along N.
        w_n = wq if layer.weights_2d or layer.bf16 else _nvfp4_operand(w.t().contiguous(), layer).t()
        grad_x = _nvfp4_operand(go, layer, grad=True) @ w_n
        # grad_weight = dY.T @ X reduces over M (the batch): both in 1x16 blocks along M, after the same
        # 16-point Hadamard H on each group of 16 batch rows: (dY.T H)(X.T H).T = dY.T (H H.T) X = dY.T X,
        # H being orthogonal; only the quantization sees the rotated values, whose outliers H spreads out.
        a, b = go.t(), x2d.t()
        if layer.hadamard and not layer.bf16:  # in float64 (H's entries are ±1/4: exact sums), but not on MPS
            wide = torch.float32 if go.device.type == "mps" else torch.float64
            H = random_hadamard(16, layer.seed).to(go.device, wide)
            a, b = ((t.to(wide).reshape(t.shape[0], -1, 16) @ H).reshape(t.shape).float() for t in (a, b))
        grad_w = _nvfp4_operand(a.contiguous(), layer, grad=True) @ _nvfp4_operand(b.contiguous(), layer).t()
        grad_x = grad_x[:M, :K].reshape(ctx.x_shape).to(ctx.dtypes[0])
        return grad_x, grad_w[:N, :K].to(ctx.dtypes[1]), None


class NVFP4Linear(ConvertedLinear):
    """An ``nn.Linear`` trained with emulated NVFP4 through :class:`NVFP4Matmul`, each piece of the recipe
    switchable; ``bf16=True`` keeps it in BF16 (operands rounded to bfloat16); bias in FP32."""

    def __init__(self, in_features, out_features, bias=True, *, hadamard=True, stochastic=True,
                 weights_2d=True, bf16=False, seed=0):  # fmt: skip
        super().__init__(in_features, out_features, bias)
        self.hadamard, self.stochastic, self.weights_2d, self.bf16 = hadamard, stochastic, weights_2d, bf16
        self.seed, self.generator = seed, torch.Generator().manual_seed(seed)  # stochastic rounding's draws

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.generator.device.type != input.device.type:
            self.generator = torch.Generator(device=input.device).manual_seed(self.seed)
        output = NVFP4Matmul.apply(input, self.weight, self)
        return output if self.bias is None else output + self.bias.to(output.dtype)


def convert_to_nvfp4(
    model: nn.Module,
    *,
    hadamard: bool = True,
    stochastic: bool = True,
    weights_2d: bool = True,
    keep_first_last: bool = True,
    seed: int = 0,
    module_filter: Callable[[nn.Module, str], bool] | None = None,
) -> nn.Module:
    """Swap ``model``'s linear layers (those ``module_filter(module, fqn)`` accepts; default all) for
    :class:`NVFP4Linear` in place, NVIDIA's NVFP4 recipe with each piece switchable: 16x16 weight tiles
    (``weights_2d``), a Hadamard transform on the weight-gradient GEMM's inputs, stochastic rounding of
    gradients, the first and last layers kept in BF16 (``keep_first_last``); layer ``i`` draws from
    ``seed + i``.  Returns the model.  (Notebook 11.)"""
    check_instance("model", model, nn.Module, "an nn.Module")
    flags = dict(hadamard=hadamard, stochastic=stochastic, weights_2d=weights_2d)
    flags = {name: check_bool(name, value) for name, value in flags.items()}
    keep_first_last, seed = check_bool("keep_first_last", keep_first_last), check_seed("seed", seed)
    module_filter = check_callable("module_filter", module_filter, optional=True) or (lambda m, fqn: True)
    chosen = {}  # id of each linear layer to convert -> its position, in the model's order
    for fqn, m in model.named_modules():
        if isinstance(m, nn.Linear) and not isinstance(m, ConvertedLinear) and module_filter(m, fqn):
            chosen[id(m)] = len(chosen)

    def make(linear: nn.Linear) -> NVFP4Linear:
        i = chosen[id(linear)]
        bf16 = keep_first_last and i in (0, len(chosen) - 1)  # a BF16 layer ignores the other switches
        return NVFP4Linear.from_float(linear, **flags, bf16=bf16, seed=(seed + i) % 2**32)

    return swap_linears(model, make, lambda m, fqn: id(m) in chosen)
