"""FP8 training recipes from scratch, bit for bit torchao's (notebooks 08, 11): delayed scaling
(:class:`DelayedScaling`), tensorwise FP8 training (:class:`Float8Linear`, :func:`convert_to_float8`); and the
one place the FP8 lessons import from: formats (:mod:`amp_lab.fp8_formats`), blocks (:mod:`amp_lab.mx`)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from functools import partial
from numbers import Real

import torch
from torch import nn

from ._checks import ArgumentTypeError, check_callable, check_instance, check_int
from .fp8_formats import (  # noqa: F401  (re-exported: the FP8 lessons import these from amp_lab.fp8)
    ELEMENT_FORMATS,
    EPS,
    FP8_FORMATS,
    FP8_GEMM_MULTIPLE,
    MAX_ELEMENTS,
    MAX_MARGIN,
    ConvertedLinear,
    ElementFormat,
    check_format,
    check_name,
    check_tensor,
    column_major,
    dequantize,
    float8_module_filter,
    fp8_device,
    fp8_placement,
    import_torchao,
    quantization_error,
    quantize,
    saturation_count,
    swap_linears,
    tensorwise_scale,
)
from .mx import MX_BLOCK_SIZES, convert_to_mx, e8m0_scales, mx_quantize, nvfp4_quantize  # noqa: F401

MAX_HISTORY = 1024  # Transformer Engine's delayed-scaling histories are 1 to 1024 long
ALGOS = ("max", "most_recent")
SCALINGS = ("dynamic", "delayed")


class DelayedScaling:
    """Transformer Engine's delayed scaling: ``scale`` (1.0 at first) is ``fmt.max / r / 2**margin`` in
    float32, ``r`` the last ``history_len`` amaxes reduced by ``algo`` (``"max"``, NaN-propagating)."""

    def __init__(self, fmt: str = "fp8_e4m3", history_len: int = 16, margin: int = 0, algo: str = "max"):
        self.fmt = check_format("fmt", fmt, FP8_FORMATS).name
        self.history_len = check_int("history_len", history_len, minimum=1, maximum=MAX_HISTORY)
        self.margin = check_int("margin", margin, minimum=0, maximum=MAX_MARGIN)
        self.algo = check_name("algo", algo, ALGOS)
        self._history: deque[float] = deque(maxlen=self.history_len)
        self.scale = 1.0

    @property
    def history(self) -> list[float]:
        """The remembered amaxes, oldest first."""
        return list(self._history)

    def update(self, amax) -> float:
        """Record this step's ``amax`` (a number >= 0, inf or NaN, or a 0-d tensor); return the next scale."""
        if isinstance(amax, torch.Tensor) and amax.numel() == 1 and amax.is_floating_point():
            amax = float(amax)
        if isinstance(amax, bool) or not isinstance(amax, Real):
            raise ArgumentTypeError(f"amax must be a number or a 0-d float tensor, got {type(amax).__name__}")
        try:
            amax = float(torch.tensor(float(amax), dtype=torch.float32))  # TE keeps its history in float32
        except OverflowError:
            raise ValueError("amax must fit a float, got a larger integer") from None
        if amax < 0:
            raise ValueError(f"amax is a largest magnitude and cannot be negative, got {amax}")
        self._history.append(amax)
        h = self._history
        r = h[-1] if self.algo == "most_recent" else math.nan if any(map(math.isnan, h)) else max(h)
        if math.isfinite(r) and r > 0:
            value = min(FP8_FORMATS[self.fmt].max / r / 2.0**self.margin, torch.finfo(torch.float32).max)
            self.scale = float(torch.tensor(value, dtype=torch.float32))
        return self.scale


class TensorwiseRecipe:
    """Where each operand's scale comes from: its own amax now ("dynamic", torchao's default) or its
    :class:`DelayedScaling` ("delayed": the scale is read *before* this step's amax is recorded)."""

    def __init__(self, scaling: str = "dynamic", history_len: int = 16, margin: int = 0, algo: str = "max"):
        self.scaling = scaling
        self.delayed: dict[str, DelayedScaling] = {}
        if scaling == "delayed":
            for role, fmt in (("input", "fp8_e4m3"), ("weight", "fp8_e4m3"), ("grad_output", "fp8_e5m2")):
                self.delayed[role] = DelayedScaling(fmt, history_len, margin, algo)

    def scale_for(self, role: str, t: torch.Tensor, fmt: str, record: bool) -> torch.Tensor:
        if self.scaling == "dynamic":
            return tensorwise_scale(t, fmt)
        history = self.delayed[role]
        scale = torch.tensor(history.scale, dtype=torch.float32, device=t.device)  # from earlier steps
        if record:
            history.update(float(torch.max(torch.abs(t))))  # this step's amax, for the next steps
        return scale


class Float8Matmul(torch.autograd.Function):
    """``x @ weight.T`` with all three GEMMs of a linear layer in FP8, torchao's tensorwise recipe.

    Forward:   output      = x_e4m3  @ W_e4m3.T        (both scaled to E4M3: activations and weights
                                                         need precision more than range)
    Backward:  grad_input  = go_e5m2 @ W_e4m3          (gradients need range: E5M2)
               grad_weight = go_e5m2.T @ x_e4m3
    ``torch._scaled_mm(a, b, scale_a, scale_b)`` computes ``(a * scale_a) @ (b * scale_b)`` with float32
    accumulation, so it gets the *inverse* scales: the FP8 values are ``x * scale``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, recipe: TensorwiseRecipe, record: bool):
        x2d = x.reshape(-1, x.shape[-1])  # (M, K): every leading dimension is a row of the GEMM
        # One scale per tensor: x's from x, W's from W (torchao: hp_tensor_to_float8_dynamic).
        scale_x = recipe.scale_for("input", x, "fp8_e4m3", record)
        scale_w = recipe.scale_for("weight", weight, "fp8_e4m3", record)
        x_fp8 = quantize(x2d, "fp8_e4m3", scale_x)  # (M, K) row-major
        w_fp8 = quantize(weight, "fp8_e4m3", scale_w)  # (N, K) row-major, so w_fp8.t() is column-major
        output = torch._scaled_mm(
            x_fp8,
            w_fp8.t(),
            scale_a=scale_x.reciprocal(),
            scale_b=scale_w.reciprocal(),
            out_dtype=x.dtype,  # the output comes back in the input's precision (float32 here)
            use_fast_accum=True,  # torchao's default for the forward GEMM only (a CPU ignores it)
        )
        # Save the FP8 operands and their scales: the backward reuses the forward's casts.
        ctx.save_for_backward(x_fp8, w_fp8, scale_x, scale_w)
        ctx.recipe = recipe
        ctx.x_shape = x.shape
        return output.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x_fp8, w_fp8, scale_x, scale_w = ctx.saved_tensors
        go = grad_output.reshape(-1, grad_output.shape[-1])  # (M, N)
        # grad_output gets its own scale, in E5M2 (torchao: GemmInputRole.GRAD_OUTPUT).
        scale_go = ctx.recipe.scale_for("grad_output", go, "fp8_e5m2", True)
        go_fp8 = quantize(go, "fp8_e5m2", scale_go)
        # grad_input = grad_output @ W: (M, N) @ (N, K), the reduction over N (out_features).
        grad_x = torch._scaled_mm(
            go_fp8,
            column_major(w_fp8),
            scale_a=scale_go.reciprocal(),
            scale_b=scale_w.reciprocal(),
            out_dtype=grad_output.dtype,
            use_fast_accum=False,
        )
        # grad_weight = grad_output.T @ x: (N, M) @ (M, K), the reduction over M (the batch).
        grad_w = torch._scaled_mm(
            go_fp8.t().contiguous(),  # the first operand must be row-major
            column_major(x_fp8),
            scale_a=scale_go.reciprocal(),
            scale_b=scale_x.reciprocal(),
            out_dtype=grad_output.dtype,
            use_fast_accum=False,
        )
        return grad_x.reshape(ctx.x_shape), grad_w, None, None


class Float8Linear(ConvertedLinear):
    """An ``nn.Linear`` whose matmuls run in FP8 through :class:`Float8Matmul`: ``scaling="dynamic"`` is
    torchao's default recipe, ``"delayed"`` a :class:`DelayedScaling` per operand; the bias is added after.  On CUDA a training
    batch's rows must be a multiple of 16 too (the grad_weight GEMM reduces over them): checked before any
    scale records the step."""

    def __init__(self, in_features, out_features, bias=True, *, scaling="dynamic", **recipe):
        super().__init__(in_features, out_features, bias)
        self.recipe = TensorwiseRecipe(scaling, **recipe)

    @classmethod
    def from_float(cls, linear: nn.Linear, **options) -> Float8Linear:
        if linear.in_features % FP8_GEMM_MULTIPLE or linear.out_features % FP8_GEMM_MULTIPLE:
            raise ValueError(
                f"Float8Linear needs in_features and out_features that are multiples of {FP8_GEMM_MULTIPLE}, "
                f"got in_features={linear.in_features}, out_features={linear.out_features}; keep it in high precision"
            )
        return super().from_float(linear, **options)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input
        if torch.is_autocast_enabled(x.device.type):  # as torchao does for CUDA autocast
            x = x.to(torch.get_autocast_dtype(x.device.type))
        if x.device.type == "cuda" and torch.is_grad_enabled() and self.weight.requires_grad:
            rows = x.numel() // self.in_features  # checked here, before the scales record this step
            if rows % FP8_GEMM_MULTIPLE:
                raise ValueError(
                    "on CUDA the FP8 grad_weight GEMM reduces over the batch, so a training batch must "
                    f"have a multiple of {FP8_GEMM_MULTIPLE} rows; got {rows} (input shape {tuple(x.shape)})"
                )
        record = self.training and torch.is_grad_enabled()  # a training step, not an evaluation
        output = Float8Matmul.apply(x, self.weight, self.recipe, record)
        return output if self.bias is None else output + self.bias.to(output.dtype)  # bias after the GEMM


def convert_to_float8(
    model: nn.Module,
    *,
    scaling: str = "dynamic",
    module_filter: Callable[[nn.Module, str], bool] | None = None,
    history_len: int = 16,
    margin: int = 0,
    algo: str = "max",
) -> nn.Module:
    """Swap ``model``'s linear layers (default filter: :func:`float8_module_filter`) for :class:`Float8Linear`
    in place (torchao's ``convert_to_float8_training``); a chosen layer unfit for FP8 raises first."""
    check_instance("model", model, nn.Module, "an nn.Module")
    check_name("scaling", scaling, SCALINGS)
    DelayedScaling("fp8_e4m3", history_len, margin, algo)  # checks history_len, margin and algo
    module_filter = check_callable("module_filter", module_filter, optional=True) or float8_module_filter
    options = dict(scaling=scaling, history_len=history_len, margin=margin, algo=algo)
    return swap_linears(model, partial(Float8Linear.from_float, **options), module_filter)
