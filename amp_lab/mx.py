"""Block-scaled formats from scratch, bit for bit torchao's (notebook 08): MX (:func:`mx_quantize`), NVFP4
(:func:`nvfp4_quantize`) and emulated MX training (:func:`convert_to_mx`: the matmul in float32)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from ._checks import ArgumentTypeError, check_callable, check_choice, check_instance, check_int, check_scale
from .fp8_formats import (
    ELEMENT_FORMATS,
    FP8_FORMATS,
    ConvertedLinear,
    check_format,
    check_tensor,
    swap_linears,
)

MX_BLOCK_SIZES = tuple(2**k for k in range(11))  # the MX spec fixes 32; NVFP4 uses 16; 08 sweeps
NVFP4_BLOCK_SIZE = 16
E8M0_BIAS, E8M0_NAN = 127, 255  # E8M0: an 8-bit exponent with bias 127; 255 encodes NaN
LOW_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _round_to_fp4(v: torch.Tensor) -> torch.Tensor:
    """Round float32 values to FP4 E2M1 (0, 0.5, 1, 1.5, 2, 3, 4, 6), ties to even, saturating at ±6: the
    grid's spacing is 0.5 below 2, 1 below 4 and 2 above, so ``round(|v| / spacing)`` rounds the mantissa."""
    a = v.abs()
    spacing = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    return torch.copysign(torch.clamp(torch.round(a / spacing) * spacing, max=6.0), v)


def _check_block_size(block_size) -> int:
    return check_choice("block_size", check_int("block_size", block_size, minimum=1), MX_BLOCK_SIZES)


def mx_quantize(x: torch.Tensor, elem: str = "fp8_e4m3", block_size: int = 32) -> torch.Tensor:
    """OCP MX along the last dimension, quantized and dequantized (torchao's ``to_mx``): a block (a power
    of two, 1 to 1024) shares an E8M0 scale ``2**(floor(log2(amax)) - emax)``; NaN blocks stay NaN."""
    x = check_tensor("x", x, min_dim=1)
    spec = check_format("elem", elem, ELEMENT_FORMATS)
    block_size = _check_block_size(block_size)
    if x.shape[-1] % block_size:
        raise ValueError(f"block_size={block_size} must divide x's last dimension, got {tuple(x.shape)}")
    if x.dtype not in LOW_FLOATS:
        raise ArgumentTypeError(f"x must be float32, bfloat16 or float16 for MX, got dtype {x.dtype}")
    blocks = x.detach().to(torch.float32).contiguous().reshape(-1, block_size)
    scale = e8m0_scales(blocks, spec.emax)
    scaled = blocks / torch.clamp(scale, min=2.0**-126)  # torchao: never divide by the subnormal 2**-127
    if spec.name == "fp4_e2m1":
        elements = _round_to_fp4(scaled)
    else:
        elements = scaled.clamp(min=-spec.max, max=spec.max).to(spec.dtype).to(torch.float32)
    return (elements * scale).reshape(x.shape)  # dequantized with the E8M0 value itself (get_fp_scale)


def e8m0_scales(blocks: torch.Tensor, emax: int) -> torch.Tensor:
    """Each row's MX scale (float32 rows of a block each), as its E8M0 value: ``2**(floor(log2(amax)) -
    emax)`` (torchao's FLOOR rule), clamped to E8M0's 2**-127 to 2**127 and NaN for a block holding a NaN."""
    amax = blocks.abs().amax(dim=-1, keepdim=True)  # NaN if the block holds a NaN
    # floor(log2(amax)) read from the float32 exponent field, minus emax, in E8M0's range and biased
    exponent = (torch.bitwise_right_shift(amax.view(torch.int32), 23) & 0xFF) - 127
    biased = torch.clamp(exponent - emax, min=-E8M0_BIAS, max=E8M0_BIAS + 1) + E8M0_BIAS
    scale = torch.pow(torch.full_like(amax, 2.0), (biased - E8M0_BIAS).to(torch.float32))
    return torch.where(torch.isnan(amax), torch.nan, scale)


def nvfp4_quantize(x: torch.Tensor, per_tensor_scale=None) -> torch.Tensor:
    """NVFP4 along the last dimension (a multiple of 16), quantized and dequantized (torchao's NVFP4Tensor): a
    per-tensor scale ``g`` (default ``amax / (448 * 6)``, 1.0 for zeros), E4M3 scales per 16, FP4 elements."""
    x = check_tensor("x", x, min_dim=2)
    if x.shape[-1] % NVFP4_BLOCK_SIZE:
        raise ValueError(f"x's last dimension must be a multiple of 16 for NVFP4, got {tuple(x.shape)}")
    if x.dtype not in LOW_FLOATS:
        raise ArgumentTypeError(f"x must be float32, bfloat16 or float16 for NVFP4, got dtype {x.dtype}")
    data = x.detach().to(torch.float32).contiguous()
    if per_tensor_scale is not None:
        if isinstance(per_tensor_scale, torch.Tensor) and per_tensor_scale.numel() == 1:
            per_tensor_scale = float(per_tensor_scale)
        g = torch.tensor(check_scale("per_tensor_scale", per_tensor_scale), dtype=torch.float32)
    elif data.numel() == 0:
        return data
    else:
        g = data.abs().amax() / (448.0 * 6.0)  # torchao's per_tensor_amax_to_scale
        g = torch.where(g == 0, 1.0, g)
    g = g.to(torch.float32).to(data.device)
    blocks = data.reshape(-1, NVFP4_BLOCK_SIZE)
    e4m3 = FP8_FORMATS["fp8_e4m3"]
    block_scale = torch.clamp(blocks.abs().amax(dim=-1) / 6.0 / g, min=2.0**-6, max=e4m3.max)
    block_scale = block_scale.to(e4m3.dtype).to(torch.float32)
    reciprocal = (1.0 / g) / block_scale  # torchao multiplies by this, to match its Triton kernel
    elements = _round_to_fp4(torch.clamp(blocks * reciprocal.unsqueeze(-1), -6.0, 6.0))
    return (elements * (g * block_scale).unsqueeze(-1)).reshape(x.shape)


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
