"""FP8 training recipes from scratch (notebooks 08, 11): delayed scaling (:class:`DelayedScaling`), torchao's
tensorwise and rowwise recipes bit for bit (:class:`Float8Linear`, :func:`convert_to_float8`), DeepSeek-V3's
blockwise recipe emulated (:func:`blockwise_quantize`), per-tensor statistics of every quantizer
(:func:`quantization_stats`); and the one place the FP8 lessons import from: formats
(:mod:`amp_lab.fp8_formats`), blocks (:mod:`amp_lab.mx`)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from numbers import Real

import torch
from torch import nn

from . import mx
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
from .mx import (  # noqa: F401  (re-exported, as above)
    LOW_FLOATS,
    MX_BLOCK_SIZES,
    SCALE_MODES,
    NVFP4Linear,
    convert_to_mx,
    convert_to_nvfp4,
    e8m0_scales,
    mx_quantize,
    nvfp4_quantize,
    random_hadamard,
    stochastic_round_fp4,
)
from .tensor_cores import (  # noqa: F401  (re-exported: notebook 11's accumulator)
    limited_accumulation_error,
    limited_accumulation_matmul,
    round_accumulator,
)

MAX_HISTORY = 1024  # Transformer Engine's delayed-scaling histories are 1 to 1024 long
ALGOS = ("max", "most_recent")
SCALINGS = ("dynamic", "delayed")
RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp", "blockwise")
MAX_TILE = 1024  # the largest side of a blockwise_quantize tile
E4M3 = FP8_FORMATS["fp8_e4m3"]


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


def _pow2_scale(t: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """torchao's scale with ``round_scales_to_power_of_2``: ``E4M3.max / max(amax, EPS)`` (float64 division,
    then float32) rounded *down* to a power of two, so scaling and unscaling are exact; one scale per slice
    along ``dim`` (kept as a size-1 dimension), or one for the tensor when ``dim`` is None."""
    amax = torch.max(torch.abs(t)) if dim is None else torch.amax(torch.abs(t), dim=dim, keepdim=True)
    scale = (E4M3.max / torch.clamp(amax.to(torch.float64), min=EPS)).to(torch.float32)
    return torch.exp2(torch.floor(torch.log2(scale)))


def _rowwise_mm(a, b, scale_a, scale_b, out_dtype, fast_accum: bool) -> torch.Tensor:
    """``(a / scale_a) @ (b / scale_b)`` as torchao calls ``torch._scaled_mm`` with a scale per row of ``a``
    (M, 1) and per column of ``b`` (1, N): the rowwise kernel returns only bfloat16, cast back afterwards;
    without fast accumulation torchao runs the tensorwise kernel with unit scales and applies the scales to
    the bfloat16 product (the rowwise kernel is slow without it)."""
    inv_a, inv_b = scale_a.reciprocal(), scale_b.reciprocal()
    if fast_accum:
        out = torch._scaled_mm(
            a, b, scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16, use_fast_accum=True
        )
    else:
        one = inv_a.new_ones(())
        out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=False)
        out *= inv_a * inv_b  # (M, 1) * (1, N): every output element's two scales
    return out.to(out_dtype)


class RowwiseFloat8Matmul(torch.autograd.Function):
    """``x @ weight.T`` in torchao's rowwise recipes: every operand E4M3, with a scale per row (or column)
    *across the reduction dimension of the GEMM it enters*.  A scale may vary along M and N but not along K,
    since it must factor out of ``sum_k a[m, k] * b[k, n]``; so each tensor is cast again for each GEMM it
    enters, along that GEMM's reduction dimension.

    Forward:   output      = x   @ W.T   x: a scale per row (M, 1), W: per output channel (1, N); over K
    Backward:  grad_input  = dY  @ W     dY: per row (M, 1), W: per input channel (1, K); over N
                                         (rowwise_with_gw_hp: one tensorwise scale for W)
               grad_weight = dY.T @ x    dY: per output channel (N, 1), x: per input channel (1, K); over M
                                         (rowwise_with_gw_hp: a plain matmul in the input's precision)
    Scales are powers of two (:func:`_pow2_scale`); ``_scaled_mm`` gets their inverses (:func:`_rowwise_mm`).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, grad_weight_high_precision: bool):
        x2d = x.reshape(-1, x.shape[-1])  # (M, K)
        scale_x = _pow2_scale(x2d, dim=-1)  # (M, 1): one per row (token), its max over K
        scale_w = _pow2_scale(weight, dim=-1)  # (N, 1): one per output channel, its max over K
        x_fp8 = quantize(x2d, "fp8_e4m3", scale_x)
        w_fp8 = quantize(weight, "fp8_e4m3", scale_w)  # (N, K) row-major: w_fp8.t() is column-major
        output = _rowwise_mm(x_fp8, w_fp8.t(), scale_x, scale_w.t(), x.dtype, fast_accum=True)
        ctx.save_for_backward(x, weight)  # the backward casts both again, along other dimensions
        ctx.gw_hp = grad_weight_high_precision
        return output.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x, weight = ctx.saved_tensors
        x2d, go = x.reshape(-1, x.shape[-1]), grad_output.reshape(-1, grad_output.shape[-1])  # (M,K), (M,N)
        # grad_input = dY @ W: (M, N) @ (N, K), the reduction over N.
        scale_go = _pow2_scale(go, dim=-1)  # (M, 1): one per row of dY, its max over N
        if ctx.gw_hp:  # one scale for all of W, repeated along K as torchao does for a mixed pair
            scale_wt = _pow2_scale(weight).expand(1, weight.shape[1])
        else:
            scale_wt = _pow2_scale(weight, dim=0)  # (1, K): one per input channel, its max over N
        w_fp8 = column_major(quantize(weight, "fp8_e4m3", scale_wt))
        go_fp8 = quantize(go, "fp8_e4m3", scale_go)
        grad_x = _rowwise_mm(go_fp8, w_fp8, scale_go, scale_wt, grad_output.dtype, fast_accum=False)
        # grad_weight = dY.T @ x: (N, M) @ (M, K), the reduction over M (the batch).
        if ctx.gw_hp:
            grad_w = torch.mm(go.t(), x2d)  # in high precision: no cast at all
        else:
            scale_go_m = _pow2_scale(go, dim=0)  # (1, N): one per output channel, its max over M
            scale_x_m = _pow2_scale(x2d, dim=0)  # (1, K): one per input channel, its max over M
            go_fp8_m = quantize(go, "fp8_e4m3", scale_go_m).t().contiguous()  # (N, M) row-major
            x_fp8_m = column_major(quantize(x2d, "fp8_e4m3", scale_x_m))
            grad_w = _rowwise_mm(
                go_fp8_m, x_fp8_m, scale_go_m.t(), scale_x_m, grad_output.dtype, fast_accum=False
            )
        return grad_x.reshape(x.shape), grad_w, None


class BlockwiseFloat8Matmul(torch.autograd.Function):
    """``x @ weight.T`` in DeepSeek-V3's fine-grained FP8 (its report, section 3.3), emulated: every operand
    E4M3 with an FP32 scale per tile (:func:`blockwise_quantize`), dequantized and multiplied in float32.

    Forward:   output      = x[1x128 tiles along K]  @ W[128x128 blocks].T
    Backward:  grad_input  = dY[1x128 along N]       @ W[the same 128x128 blocks]
               grad_weight = dY[128x1 along M].T     @ x[128x1 along M]
    A 128x128 block of W is a 128x128 block of W.T, so the forward's quantized W serves grad_input too; a 1x128
    tile along K is not a tile along M, so x and dY are quantized again for grad_weight.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor):
        x2d = x.reshape(-1, x.shape[-1])
        w_q = blockwise_quantize(weight, (128, 128))
        output = blockwise_quantize(x2d, (1, 128)) @ w_q.t()
        ctx.save_for_backward(x2d, w_q)
        ctx.x_shape, ctx.x_dtype, ctx.w_dtype = x.shape, x.dtype, weight.dtype
        return output.reshape(*x.shape[:-1], weight.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        x2d, w_q = ctx.saved_tensors
        go = grad_output.reshape(-1, grad_output.shape[-1])
        grad_x = blockwise_quantize(go, (1, 128)) @ w_q
        grad_w = blockwise_quantize(go, (128, 1)).t() @ blockwise_quantize(x2d, (128, 1))
        return grad_x.reshape(ctx.x_shape).to(ctx.x_dtype), grad_w.to(ctx.w_dtype)


def _check_recipe(recipe, scaling) -> None:
    check_name("recipe", recipe, RECIPES)
    if check_name("scaling", scaling, SCALINGS) == "delayed" and recipe != "tensorwise":
        raise ValueError(f"scaling='delayed' works with recipe='tensorwise' only, got recipe={recipe!r}")


class Float8Linear(ConvertedLinear):
    """An ``nn.Linear`` whose matmuls run in FP8 by ``recipe``: "tensorwise" (:class:`Float8Matmul`;
    ``scaling="dynamic"`` is torchao's default recipe, ``"delayed"`` a :class:`DelayedScaling` per operand),
    "rowwise" and "rowwise_with_gw_hp" (:class:`RowwiseFloat8Matmul`, torchao's recipes of those names) or
    "blockwise" (:class:`BlockwiseFloat8Matmul`, emulated); the bias is added after.  On CUDA a training
    batch's rows must be a multiple of 16 where grad_weight is an FP8 GEMM (it reduces over them; checked before
    any scale records the step).  The rowwise GEMMs write bfloat16 (torch's rowwise kernel's only output), cast
    to the input's dtype after, as torchao's."""

    def __init__(
        self, in_features, out_features, bias=True, *, recipe="tensorwise", scaling="dynamic", **delayed
    ):
        super().__init__(in_features, out_features, bias)
        _check_recipe(recipe, scaling)
        self.recipe_name = recipe
        self.recipe = TensorwiseRecipe(scaling, **delayed)

    @classmethod
    def from_float(cls, linear: nn.Linear, **options) -> Float8Linear:
        check_instance("linear", linear, nn.Linear, "an nn.Linear")
        odd = linear.in_features % FP8_GEMM_MULTIPLE or linear.out_features % FP8_GEMM_MULTIPLE
        if odd and options.get("recipe", "tensorwise") != "blockwise":  # blockwise tiles have partial edges
            raise ValueError(
                f"Float8Linear needs in_features and out_features that are multiples of {FP8_GEMM_MULTIPLE}, "
                f"got in_features={linear.in_features}, out_features={linear.out_features}; keep it in high precision"
            )
        return super().from_float(linear, **options)

    def _check_input(self, x: torch.Tensor) -> None:
        rowwise = self.recipe_name.startswith("rowwise")
        if rowwise and x.dtype not in LOW_FLOATS:
            raise ArgumentTypeError(
                f"input must be float32, bfloat16 or float16 for rowwise FP8, got {x.dtype}"
            )
        if x.device.type != "cuda":
            return
        fp8_grad_weight = self.recipe_name in ("tensorwise", "rowwise")
        if fp8_grad_weight and torch.is_grad_enabled() and self.weight.requires_grad:
            rows = x.numel() // self.in_features  # checked here, before the scales record this step
            if rows % FP8_GEMM_MULTIPLE:
                raise ValueError(
                    "on CUDA the FP8 grad_weight GEMM reduces over the batch, so a training batch must "
                    f"have a multiple of {FP8_GEMM_MULTIPLE} rows; got {rows} (input shape {tuple(x.shape)})"
                )

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input
        if torch.is_autocast_enabled(x.device.type):  # as torchao does for CUDA autocast
            x = x.to(torch.get_autocast_dtype(x.device.type))
        self._check_input(x)
        if self.recipe_name == "tensorwise":
            record = self.training and torch.is_grad_enabled()  # a training step, not an evaluation
            output = Float8Matmul.apply(x, self.weight, self.recipe, record)
        elif self.recipe_name == "blockwise":
            output = BlockwiseFloat8Matmul.apply(x, self.weight)
        else:
            output = RowwiseFloat8Matmul.apply(x, self.weight, self.recipe_name == "rowwise_with_gw_hp")
        return output if self.bias is None else output + self.bias.to(output.dtype)  # bias after the GEMM


def convert_to_float8(
    model: nn.Module,
    *,
    recipe: str = "tensorwise",
    scaling: str = "dynamic",
    module_filter: Callable[[nn.Module, str], bool] | None = None,
    history_len: int = 16,
    margin: int = 0,
    algo: str = "max",
) -> nn.Module:
    """Swap ``model``'s linear layers (default filter: :func:`float8_module_filter`) for :class:`Float8Linear`
    with ``recipe`` (one of :data:`RECIPES`) in place (torchao's ``convert_to_float8_training`` with
    ``Float8LinearConfig.from_recipe_name(recipe)``); a chosen layer unfit for FP8 raises first."""
    check_instance("model", model, nn.Module, "an nn.Module")
    _check_recipe(recipe, scaling)
    DelayedScaling("fp8_e4m3", history_len, margin, algo)  # checks history_len, margin and algo
    module_filter = check_callable("module_filter", module_filter, optional=True) or float8_module_filter
    options = dict(recipe=recipe, scaling=scaling, history_len=history_len, margin=margin, algo=algo)
    return swap_linears(model, partial(Float8Linear.from_float, **options), module_filter)


# ------------------------------------------------------------------------------------------
# Blocks of DeepSeek-V3, and every quantizer's statistics
# ------------------------------------------------------------------------------------------


def _check_block(block) -> tuple[int, int]:
    if not isinstance(block, (tuple, list)) or len(block) != 2:
        raise ArgumentTypeError(f"block must be a pair (rows, columns) such as (1, 128), got {block!r:.80}")
    return tuple(check_int(f"block[{i}]", b, minimum=1, maximum=MAX_TILE) for i, b in enumerate(block))


def _tile_scales(a: torch.Tensor, rows: int, cols: int, spec: ElementFormat) -> torch.Tensor:
    """Each element's tile scale for a 2-D float32 ``a``, as torchao's ``amax_to_scale`` computes a scale.
    Edge tiles are partial: the zeros padding them to whole tiles cannot raise an amax of ``|a|``."""
    m, k = a.shape
    rows, cols = min(rows, m), min(cols, k)  # a tile larger than the matrix is the whole matrix
    amax = nn.functional.pad(a.abs(), (0, -k % cols)).reshape(m, -1, cols).amax(dim=-1)  # (m, tiles along k)
    amax = nn.functional.pad(amax, (0, 0, 0, -m % rows)).reshape(-1, rows, amax.shape[1]).amax(dim=1)
    scale = (spec.max / torch.clamp(amax.to(torch.float64), min=EPS)).to(torch.float32)  # NaN tile: NaN
    return scale.repeat_interleave(rows, dim=0)[:m].repeat_interleave(cols, dim=1)[:, :k]


def blockwise_quantize(x: torch.Tensor, block=(1, 128), fmt: str = "fp8_e4m3") -> torch.Tensor:
    """DeepSeek-V3's fine-grained quantization, quantized and dequantized (notebook 11): ``x``'s rows (leading
    dimensions are rows) and columns cut into ``block = (r, c)`` tiles (1 to 1024 each; partial at the edges),
    each with its own FP32 scale ``fmt.max / max(amax, EPS)``, a saturating cast (:func:`quantize`) and a
    division back.  (1, 128): its activation and gradient tiles; (128, 128): its weight blocks.  Returns
    float32 of ``x``'s shape; a tile holding a NaN comes back NaN (one holding inf: NaN, as its scale is 0)."""
    x = check_tensor("x", x, min_dim=2)
    rows, cols = _check_block(block)
    spec = check_format("fmt", fmt, FP8_FORMATS)
    if x.numel() == 0:
        return x.detach().to(torch.float32)
    a = x.detach().reshape(-1, x.shape[-1]).to(torch.float32)
    scale = _tile_scales(a, rows, cols, spec)
    return dequantize(quantize(a, spec.name, scale), scale).reshape(x.shape)


_SCALED = ("tensorwise_e4m3", "tensorwise_e5m2", "rowwise", "blockwise_1x128", "blockwise_128x128")
_BLOCKED = ("mxfp8_floor", "mxfp8_rceil", "mxfp4_floor", "mxfp4_rceil", "nvfp4", "nvfp4_16x16")
QUANTIZERS = _SCALED + _BLOCKED  # FP32 scales (FP8 recipes) and E8M0 or E4M3 scales (block formats, mx)


@dataclass(frozen=True)
class QuantStats:
    """One tensor under one quantizer, as Transformer Engine's debug tools log it (notebook 11): ``underflow``
    the fraction of the nonzero elements that quantize to 0, ``saturated`` the fraction of all elements
    beyond what their scale can represent (they round past the element format's max, so the saturating cast
    clips them), ``error`` the relative RMS error (:func:`quantization_error`)."""

    quantizer: str
    numel: int
    underflow: float
    saturated: float
    error: float


def _quantized_and_magnitude(
    x: torch.Tensor, quantizer: str
) -> tuple[torch.Tensor, torch.Tensor, ElementFormat]:
    """``(dequantized, |x| in units of its step, element format)``: the magnitude is what the cast rounds."""
    a = x.reshape(-1, x.shape[-1]).to(torch.float32)
    if quantizer in _SCALED:
        spec = FP8_FORMATS["fp8_e5m2" if quantizer.endswith("e5m2") else "fp8_e4m3"]
        if quantizer.startswith("tensorwise"):
            scale = tensorwise_scale(x, spec.name)  # as the tensorwise recipe scales
        elif quantizer == "rowwise":
            scale = _pow2_scale(x.reshape(-1, x.shape[-1]), dim=-1)  # as the rowwise recipe scales x
        else:
            scale = _tile_scales(a, *map(int, quantizer.removeprefix("blockwise_").split("x")), spec)
        dq = dequantize(quantize(a, spec.name, scale), scale)
        return dq.reshape(x.shape), (a * scale).abs().reshape(x.shape), spec
    if quantizer.startswith("mx"):
        elem = "fp8_e4m3" if quantizer.startswith("mxfp8") else "fp4_e2m1"
        elements, step = mx.mx_parts(x, elem, 32, quantizer.rpartition("_")[2])
    else:
        elements, step = mx.nvfp4_parts(x, block=(16, 16) if quantizer == "nvfp4_16x16" else (1, 16))
        elem = "fp4_e2m1"
    magnitude = x.detach().to(torch.float64).abs() / step.to(torch.float64)
    return elements * step, magnitude, ELEMENT_FORMATS[elem]


def quantization_stats(x: torch.Tensor, quantizer: str) -> QuantStats:
    """``x`` (float32, bfloat16 or float16) through ``quantizer`` (one of :data:`QUANTIZERS`): its
    :class:`QuantStats`.  MX blocks need a last dimension divisible by 32, NVFP4's 1x16 blocks by 16 and its
    16x16 blocks last two dimensions divisible by 16.  (Notebook 11.)"""
    x = check_tensor("x", x, min_dim=1)
    quantizer = check_name("quantizer", quantizer, QUANTIZERS)
    if x.dtype not in LOW_FLOATS:
        raise ArgumentTypeError(f"x must be float32, bfloat16 or float16, got dtype {x.dtype}")
    if x.numel() == 0:
        raise ValueError(f"x is empty (shape {tuple(x.shape)}): statistics need at least one element")
    side, shape = {"mx": 32, "nv": 16}.get(quantizer[:2]), tuple(x.shape)
    if side and x.shape[-1] % side:
        raise ValueError(f"quantizer={quantizer!r} needs x's last dimension divisible by {side}, got {shape}")
    if quantizer == "nvfp4_16x16" and (x.dim() < 2 or x.shape[-2] % 16):
        raise ValueError(
            f"quantizer='nvfp4_16x16' needs x's last two dimensions divisible by 16, got {shape}"
        )
    x = x.detach()
    dq, magnitude, spec = _quantized_and_magnitude(x, quantizer)
    # past the saturation bound, or at it where the tie rounds up (an odd max mantissa): as saturation_count
    tie_up = int(spec.max / 2.0 ** (spec.emax - spec.mantissa_bits)) % 2 == 1
    beyond = magnitude >= spec.saturation_bound if tie_up else magnitude > spec.saturation_bound
    nonzero = x != 0
    lost = int((nonzero & (dq == 0)).sum())
    underflow, saturated = lost / max(int(nonzero.sum()), 1), int(beyond.sum()) / x.numel()
    return QuantStats(quantizer, x.numel(), underflow, saturated, quantization_error(x, dq))
