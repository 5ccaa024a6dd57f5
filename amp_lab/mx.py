"""Block-scaled formats from scratch, proven against torchao (notebook 08): MX and NVFP4.

* :func:`mx_quantize` (OCP MX: one power-of-two E8M0 scale per block of 32 or 16, elements in E4M3,
  E5M2 or FP4 E2M1; bit-identical to torchao's ``to_mx`` + ``to_dtype``);
* :func:`nvfp4_quantize` (NVFP4: 16-element blocks, E4M3 block scales, an FP32 per-tensor scale;
  bit-identical to torchao's ``NVFP4Tensor``);
* :class:`MXLinear` and :func:`convert_to_mx`: emulated MX training (operands quantize-dequantized in
  blocks along each GEMM's reduction dimension, the matmul in float32).
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Real

import torch
from torch import nn

from ._checks import ArgumentTypeError, check_callable, check_choice, check_instance, check_int, check_scale
from .fp8 import (
    ELEMENT_FORMATS,
    FP8_FORMATS,
    ConvertedLinear,
    ElementFormat,
    check_format,
    check_tensor,
    swap_linears,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "MX_BLOCK_SIZES",
    "MXLinear",
    "MXMatmul",
    "convert_to_mx",
    "mx_quantize",
    "nvfp4_quantize",
]

# MX block sizes: powers of two from 1 to 1024 (the MX spec fixes 32; NVFP4 uses 16; the notebook sweeps).
MX_BLOCK_SIZES = tuple(2**k for k in range(11))
DEFAULT_BLOCK_SIZE = 32
NVFP4_BLOCK_SIZE = 16
# E8M0: an 8-bit exponent with bias 127; 255 encodes NaN.
E8M0_BIAS = 127
E8M0_NAN = 255
F32_MIN_NORMAL = 2.0**-126


def _round_to_fp4(v: torch.Tensor) -> torch.Tensor:
    """Round float32 values to FP4 E2M1 (0, 0.5, 1, 1.5, 2, 3, 4, 6), ties to even, saturating at ±6;
    the sign of zero is kept and NaN stays NaN.  The grid's spacing is 0.5 below 2, 1 below 4 and 2 up
    to 6, so rounding ``|v| / spacing`` to the nearest even integer is rounding to the nearest even
    mantissa."""
    a = v.abs()
    spacing = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    q = torch.clamp(torch.round(a / spacing) * spacing, max=6.0)
    return torch.copysign(q, v)


def _check_block(elem, block_size, x: torch.Tensor) -> tuple[ElementFormat, int]:
    spec = check_format("elem", elem, ELEMENT_FORMATS)
    block_size = check_int("block_size", block_size, minimum=1)
    check_choice("block_size", block_size, MX_BLOCK_SIZES)
    if x.dim() < 1 or x.shape[-1] % block_size:
        raise ValueError(
            f"block_size={block_size} must divide x's last dimension, got shape {tuple(x.shape)}; "
            "pad the tensor or choose a block size that divides it"
        )
    return spec, block_size


def _mx_scale_exponent(amax: torch.Tensor, spec: ElementFormat) -> torch.Tensor:
    """The MX block scale's exponent, biased as E8M0 stores it (0..254; 255 = NaN), by the OCP MX rule
    torchao calls FLOOR: ``floor(log2(amax)) - emax`` — the block's largest power of two lands on the
    element format's largest power of two, and anything above it (up to ``max``) still fits."""
    # floor(log2(amax)) read straight from the float32 exponent field (subnormals and 0 read as -127).
    exponent = (torch.bitwise_right_shift(amax.view(torch.int32), 23) & 0xFF) - 127
    unbiased = torch.clamp(exponent - spec.emax, min=-E8M0_BIAS, max=E8M0_BIAS + 1)  # E8M0's range
    biased = unbiased + E8M0_BIAS
    return torch.where(torch.isnan(amax), E8M0_NAN, biased)


def mx_quantize(
    x: torch.Tensor, elem: str = "fp8_e4m3", block_size: int = DEFAULT_BLOCK_SIZE
) -> torch.Tensor:
    """OCP MX block scaling along the last dimension: quantize and dequantize, returning float32.

    Each block of ``block_size`` consecutive elements shares one power-of-two scale, stored as E8M0 (an
    8-bit exponent), chosen from the block's amax by the FLOOR rule (:func:`_mx_scale_exponent`); the
    elements are ``x / scale`` cast, saturating, to ``elem`` ("fp8_e4m3", "fp8_e5m2" or "fp4_e2m1",
    round-to-nearest-even), and the result is ``element * scale``.  Bit-identical to torchao's
    ``to_mx(x, elem, block_size)`` followed by ``to_dtype(..., torch.float32)``, including two of its
    details: the scale is clamped to float32's smallest normal (2**-126) for the division but the E8M0
    value (down to 2**-127) is used for the multiplication, so a block whose amax is below
    ``2**(emax - 127)`` comes back halved; and a block holding NaN comes back all NaN.
    ``block_size`` is a power of two from 1 to 1024 dividing the last dimension (MX uses 32).
    Inputs of float32, bfloat16 or float16 are converted to float32 first (exactly).  (Notebook 08.)
    """
    x = check_tensor("x", x, min_dim=1)
    spec, block_size = _check_block(elem, block_size, x)
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ArgumentTypeError(f"x must be float32, bfloat16 or float16 for MX, got dtype {x.dtype}")
    shape = x.shape
    blocks = x.detach().to(torch.float32).contiguous().reshape(-1, block_size)
    amax = blocks.abs().amax(dim=-1, keepdim=True)  # NaN if the block holds a NaN
    biased = _mx_scale_exponent(amax, spec)
    # The scale as float32 bits: the E8M0 byte becomes a float32 exponent field (mantissa 0).
    scale = torch.bitwise_left_shift(biased.to(torch.int32), 23).view(torch.float32)
    scale = torch.clamp(scale, min=F32_MIN_NORMAL)  # torchao: avoid dividing by the subnormal 2**-127
    scaled = blocks / scale
    if spec.name == "fp4_e2m1":
        elements = _round_to_fp4(scaled)
    else:
        elements = scaled.clamp(min=-spec.max, max=spec.max).to(spec.dtype).to(torch.float32)
    # Dequantize with the E8M0 value itself: 2**(biased - 127), NaN for the NaN code (torchao's get_fp_scale).
    two = torch.full_like(amax, 2.0)
    scale_back = torch.pow(two, (biased - E8M0_BIAS).to(torch.float32))
    scale_back = torch.where(biased == E8M0_NAN, torch.nan, scale_back)
    return (elements * scale_back).reshape(shape)


def nvfp4_quantize(x: torch.Tensor, per_tensor_scale=None) -> torch.Tensor:
    """NVFP4 (Blackwell's FP4): quantize and dequantize ``x`` along its last dimension, returning float32.

    Rules (bit-identical to torchao's ``NVFP4Tensor.to_nvfp4(x, per_tensor_scale=...).dequantize()``):

    1. A per-tensor FP32 scale ``g``: by default ``amax(x) / (448 * 6)``, so the largest block scale
       lands on E4M3's max (torchao's ``per_tensor_amax_to_scale``); or ``per_tensor_scale`` as given.
       When the default comes out 0 (an all-zero tensor, or all values below about 4e-42) ``g = 1.0`` is
       used instead: with ``g = 0`` torchao divides 0 by 0 and returns NaN.
    2. Blocks of 16 elements.  Each block's scale is ``amax / 6 / g`` rounded to E4M3 (clamped to
       [2**-6, 448] first: E4M3's smallest normal, as torchao): unlike MX's power of two, it keeps
       3 mantissa bits.
    3. Elements: ``x * ((1 / g) / block_scale)`` clamped to ±6 and rounded to FP4 E2M1 (ties to even).
    4. Dequantized: ``element * (g * block_scale)``.

    ``x`` needs at least 2 dimensions (as torchao's), the last a multiple of 16; float32 or bfloat16
    (float16 is converted to float32 first).  (Notebook 08.)
    """
    x = check_tensor("x", x, min_dim=2)
    if x.shape[-1] % NVFP4_BLOCK_SIZE:
        raise ValueError(
            f"x's last dimension must be a multiple of {NVFP4_BLOCK_SIZE} for NVFP4, got {tuple(x.shape)}"
        )
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ArgumentTypeError(f"x must be float32, bfloat16 or float16 for NVFP4, got dtype {x.dtype}")
    data = x.detach().to(torch.float32).contiguous()
    if per_tensor_scale is not None:
        if isinstance(per_tensor_scale, torch.Tensor):
            if per_tensor_scale.numel() != 1:
                raise ValueError(
                    "per_tensor_scale must be one number, got a tensor of shape "
                    f"{tuple(per_tensor_scale.shape)}"
                )
            per_tensor_scale = float(per_tensor_scale)
        if isinstance(per_tensor_scale, bool) or not isinstance(per_tensor_scale, Real):
            raise ArgumentTypeError(
                f"per_tensor_scale must be a positive number or None, got {type(per_tensor_scale).__name__}"
            )
        g = torch.tensor(check_scale("per_tensor_scale", per_tensor_scale), dtype=torch.float32)
    elif data.numel() == 0:
        return data
    else:
        g = data.abs().amax() / (448.0 * 6.0)  # torchao: amax.to(float32) / (F8E4M3_MAX * F4_E2M1_MAX)
        if float(g) == 0.0:
            g = torch.tensor(1.0)
    g = g.to(torch.float32).to(data.device)
    blocks = data.reshape(-1, NVFP4_BLOCK_SIZE)
    block_scale = blocks.abs().amax(dim=-1) / 6.0 / g
    e4m3 = FP8_FORMATS["fp8_e4m3"]
    tiny = torch.finfo(torch.float8_e4m3fn).tiny  # 2**-6 is E4M3's smallest normal; torchao clamps to it
    block_scale = torch.clamp(block_scale, min=tiny, max=e4m3.max).to(e4m3.dtype).to(torch.float32)
    reciprocal = (1.0 / g) / block_scale  # torchao multiplies by this, to match its Triton kernel
    elements = _round_to_fp4(torch.clamp(blocks * reciprocal.unsqueeze(-1), -6.0, 6.0))
    return (elements * (g * block_scale).unsqueeze(-1)).reshape(x.shape)


def _mx_along_last(t: torch.Tensor, elem: str, block_size: int) -> torch.Tensor:
    """:func:`mx_quantize` along the last dimension of a 2-D tensor, zero-padding it to a multiple of
    ``block_size`` first (zeros change no block's amax; the last block is just partial)."""
    pad = (-t.shape[-1]) % block_size
    if pad:
        t = nn.functional.pad(t, (0, pad))
    q = mx_quantize(t.contiguous(), elem, block_size)
    return q[..., : q.shape[-1] - pad] if pad else q


class MXMatmul(torch.autograd.Function):
    """``x @ weight.T`` with every GEMM operand quantize-dequantized in MX blocks along that GEMM's
    reduction dimension (what MX hardware scales along), the products then summed in float32.

    Forward:   x (M, K) and W (N, K) in blocks along K.
    Backward:  grad_input  = go @ W:   go (M, N) and W.T (K, N) in blocks along N;
               grad_weight = go.T @ x: go.T (N, M) and x.T (K, M) in blocks along M.
    Each operand is quantized again along the other axis, so the high-precision x and W are saved.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, elem: str, block_size: int):
        x2d = x.reshape(-1, x.shape[-1]).to(torch.float32)
        w = weight.to(torch.float32)
        ctx.save_for_backward(x2d, w)
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
    """An ``nn.Linear`` trained with emulated MX block scaling (notebook 08): every GEMM operand is
    quantize-dequantized with :func:`mx_quantize` in blocks along the GEMM's reduction dimension and the
    matmul runs in float32 (CPUs and pre-Blackwell GPUs have no MX GEMM; the numerics are the same).
    A dimension that is not a multiple of ``block_size`` is zero-padded to one.  The bias stays in FP32."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        elem: str = "fp8_e4m3",
        block_size: int = DEFAULT_BLOCK_SIZE,
    ):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.elem = elem
        self.block_size = block_size

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        output = MXMatmul.apply(input, self.weight, self.elem, self.block_size)
        if self.bias is not None:
            output = output + self.bias.to(output.dtype)
        return output

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, elem={self.elem!r}, block_size={self.block_size}"


def convert_to_mx(
    model: nn.Module,
    elem: str = "fp8_e4m3",
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    module_filter: Callable[[nn.Module, str], bool] | None = None,
) -> nn.Module:
    """Swap ``model``'s linear layers for :class:`MXLinear` in place (emulated MX training) and return the
    model.  Every ``nn.Linear`` is converted unless ``module_filter(module, fqn)`` says False; MX needs no
    multiple of 16 here, since odd dimensions are zero-padded.  (Notebook 08.)"""
    check_instance("model", model, nn.Module, "an nn.Module")
    elem = check_format("elem", elem, ELEMENT_FORMATS).name
    block_size = check_choice("block_size", check_int("block_size", block_size, minimum=1), MX_BLOCK_SIZES)
    module_filter = check_callable("module_filter", module_filter, optional=True) or (lambda m, fqn: True)
    return swap_linears(
        model, lambda m: MXLinear.from_float(m, elem=elem, block_size=block_size), module_filter
    )
