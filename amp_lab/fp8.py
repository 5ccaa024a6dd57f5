"""FP8 from scratch, bit for bit torchao's (notebook 08): formats, tensorwise scaling (:func:`quantize`),
delayed scaling (:class:`DelayedScaling`), FP8 training (:class:`Float8Linear`); blocks: :mod:`amp_lab.mx`."""

from __future__ import annotations

import importlib
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from numbers import Real

import torch
from torch import nn

from ._checks import ArgumentTypeError, check_callable, check_choice, check_instance, check_int, check_scale
from .device import get_device
from .gpus import fp8_matmul_support
from .text import Reading


@dataclass(frozen=True)
class ElementFormat:
    """One element format: ``max`` its largest finite value, ``emax`` the exponent of its largest power
    of two, ``dtype`` torch's storage dtype (FP4's packed one cannot be cast to: it is emulated)."""

    name: str
    dtype: torch.dtype
    max: float
    emax: int
    mantissa_bits: int
    label: str

    @property
    def saturation_bound(self) -> float:
        """Where rounding starts to go past ``max``: ``max + ulp(max) / 2`` (464 for E4M3, 61440 for E5M2)."""
        return self.max + 2.0 ** (self.emax - self.mantissa_bits) / 2


FP8_FORMATS: dict[str, ElementFormat] = {
    "fp8_e4m3": ElementFormat("fp8_e4m3", torch.float8_e4m3fn, 448.0, 8, 3, "FP8 E4M3"),
    "fp8_e5m2": ElementFormat("fp8_e5m2", torch.float8_e5m2, 57344.0, 15, 2, "FP8 E5M2"),
}
ELEMENT_FORMATS: dict[str, ElementFormat] = {
    **FP8_FORMATS,
    "fp4_e2m1": ElementFormat("fp4_e2m1", torch.float4_e2m1fn_x2, 6.0, 2, 1, "FP4 E2M1"),
}

EPS = 1e-12  # torchao's floor under an amax, so an all-zero tensor gets a finite scale
MAX_ELEMENTS = 2**26  # the largest tensor a quantizer accepts (256 MiB of float32)
MAX_MARGIN = 64  # scales are divided by 2**margin; beyond 2**64 a scale only underflows
MAX_HISTORY = 1024  # Transformer Engine's delayed-scaling histories are 1 to 1024 long
FP8_GEMM_MULTIPLE = 16  # in/out features of linear layers that suit FP8 GEMMs
ALGOS = ("max", "most_recent")
SCALINGS = ("dynamic", "delayed")


def check_name(name: str, value, allowed) -> str:
    """A string from ``allowed`` (TypeError for a non-string, ValueError for another string)."""
    return check_choice(name, check_instance(name, value, str, f"one of {tuple(allowed)}"), list(allowed))


def check_format(name: str, value, allowed) -> ElementFormat:
    """A format name from ``allowed`` -> its :class:`ElementFormat`."""
    return ELEMENT_FORMATS[check_name(name, value, allowed)]


def check_tensor(name: str, x, *, min_dim: int = 0) -> torch.Tensor:
    """A floating-point tensor with values, of at most MAX_ELEMENTS elements and ``min_dim`` dimensions."""
    check_instance(name, x, torch.Tensor, "a torch.Tensor")
    if not x.is_floating_point():
        raise ArgumentTypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimension(s), got shape {tuple(x.shape)}")
    if x.numel() > MAX_ELEMENTS:
        raise ValueError(f"{name} has {x.numel():,} elements; at most {MAX_ELEMENTS:,} (2**26) are allowed")
    if x.is_meta:
        raise ValueError(f"{name} is on the meta device: it has a shape but no values to quantize")
    return x


def _torchao_import_noise(record: logging.LogRecord) -> bool:
    """A logging filter that drops exactly the two harmless records importing torchao logs on a CPU."""
    msg = record.getMessage()
    failed = record.name == "torchao" and msg.startswith("Failed to load ")
    enum = record.name == "torch.utils._pytree" and "Enum subclass" in msg and "register_constant()" in msg
    return not (failed or enum)


def import_torchao():
    """Import torchao (its float8 and MX modules too) quietly and return it; ImportError with a hint."""
    loggers = [logging.getLogger("torchao"), logging.getLogger("torch.utils._pytree")]
    for logger in loggers:
        logger.addFilter(_torchao_import_noise)
    try:
        for name in ("float8_utils", "float8_training_tensor"):
            importlib.import_module(f"torchao.float8.{name}")
        for name in ("mx_tensor", "nvfp4_tensor"):
            importlib.import_module(f"torchao.prototype.mx_formats.{name}")
    except ImportError as err:
        raise ImportError(
            f"torchao is needed for this comparison but could not be imported ({err}); install it with "
            '`make lab` or `pip install "torchao>=0.18,<0.19"` (the release amp-lab\'s proofs ran against)'
        ) from err
    finally:
        for logger in loggers:
            logger.removeFilter(_torchao_import_noise)
    return importlib.import_module("torchao")


def fp8_device(device=None) -> tuple[torch.device, Reading]:
    """``(device, reading)``: where FP8 matmuls run here (FP8 Tensor Cores, else the CPU) and why."""
    dev = get_device(device)
    capability = arch_list = None
    if dev.type == "cuda":
        capability, arch_list = torch.cuda.get_device_capability(dev), torch.cuda.get_arch_list()
    return fp8_placement(dev, capability, arch_list)


def fp8_placement(device: torch.device, capability=None, arch_list=None) -> tuple[torch.device, Reading]:
    """:func:`fp8_device`'s decision from the facts; ``facts["why"]`` is ``gpus.fp8_matmul_support``'s."""
    cpu = torch.device("cpu")
    if device.type == "mps":
        return cpu, Reading("fp8.apple_gpu")
    support = fp8_matmul_support(capability if device.type == "cuda" else None, arch_list)
    if device.type != "cuda":
        return cpu, Reading("fp8.no_gpu", facts={"why": support.reason.removeprefix("no CUDA GPU: ")})
    code = "fp8.runs_on_gpu" if support.supported else "fp8.gpu_without_fp8"
    return device if support.supported else cpu, Reading(code, facts={"why": support.reason})


def tensorwise_scale(x: torch.Tensor, fmt: str = "fp8_e4m3", margin: int = 0) -> torch.Tensor:
    """``fmt.max / max(amax, EPS) / 2**margin`` as a float32 0-d tensor, computed as torchao's
    ``tensor_to_scale``: the amax in ``x``'s dtype, the division in float64.  inf gives 0, NaN gives NaN."""
    x = check_tensor("x", x)
    if x.numel() == 0:
        raise ValueError("x is empty: a scale needs at least one element")
    spec = check_format("fmt", fmt, FP8_FORMATS)
    margin = check_int("margin", margin, minimum=0, maximum=MAX_MARGIN)
    if x.element_size() == 1:  # an FP8 tensor: torch has no max for it; float32 holds it exactly
        x = x.to(torch.float32)
    scale = spec.max / torch.clamp(torch.max(torch.abs(x)).to(torch.float64), min=EPS)
    return (scale / 2.0**margin).to(torch.float32)


def _check_scale_arg(scale, x: torch.Tensor) -> torch.Tensor:
    """A scale: a positive number or a floating tensor broadcastable to ``x``, as float32."""
    if isinstance(scale, torch.Tensor):
        if not scale.is_floating_point():
            raise ArgumentTypeError(f"scale must be a floating tensor or a number, got dtype {scale.dtype}")
        try:
            torch.broadcast_shapes(scale.shape, x.shape)
        except RuntimeError:
            raise ValueError(
                f"scale's shape {tuple(scale.shape)} does not broadcast to {tuple(x.shape)}"
            ) from None
        if scale.numel() > 1 and scale.device != x.device:
            raise ValueError(f"scale is on {scale.device} but x is on {x.device}")
        return scale.to(torch.float32)
    return torch.tensor(check_scale("scale", scale), dtype=torch.float32, device=x.device)


def quantize(x: torch.Tensor, fmt: str, scale) -> torch.Tensor:
    """``x * scale`` in float32, clamped to ``±fmt.max`` and cast to ``fmt``'s FP8 dtype (torchao's
    saturating cast; NaN stays NaN).  ``scale``: a positive number or a float tensor broadcastable to ``x``."""
    x = check_tensor("x", x)
    spec = check_format("fmt", fmt, FP8_FORMATS)
    scaled = x.to(torch.float32) * _check_scale_arg(scale, x)
    return scaled.clamp(min=-spec.max, max=spec.max).to(spec.dtype)


def dequantize(q: torch.Tensor, scale) -> torch.Tensor:
    """Undo :func:`quantize`: ``q`` as float32 divided by ``scale`` (a division, as torchao's)."""
    q = check_tensor("q", q)
    return q.to(torch.float32) / _check_scale_arg(scale, q)


def saturation_count(x: torch.Tensor, fmt: str, scale) -> int:
    """How many elements of ``x * scale`` (in float32) round past ``fmt``'s max, so :func:`quantize` clips
    them: beyond :attr:`ElementFormat.saturation_bound` (at it, only where the tie rounds up).  inf counts."""
    x = check_tensor("x", x)
    spec = check_format("fmt", fmt, FP8_FORMATS)
    magnitude = (x.to(torch.float32) * _check_scale_arg(scale, x)).abs()
    tie_up = int(spec.max / 2.0 ** (spec.emax - spec.mantissa_bits)) % 2 == 1  # an odd max mantissa: E5M2
    return int((magnitude >= spec.saturation_bound if tie_up else magnitude > spec.saturation_bound).sum())


def quantization_error(x: torch.Tensor, xq: torch.Tensor) -> float:
    """Relative RMS error ``sqrt(sum((xq - x)**2) / sum(x**2))`` in float64 (0 for two all-zero tensors,
    inf when only ``x`` is all zeros, NaN when either holds NaN)."""
    x, xq = check_tensor("x", x), check_tensor("xq", xq)
    if x.shape != xq.shape:
        raise ValueError(f"x and xq must have the same shape, got {tuple(x.shape)} and {tuple(xq.shape)}")
    a, b = x.detach().to(torch.float64), xq.detach().to(torch.float64)
    num, den = float(((b - a) ** 2).sum()), float((a**2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf if num > 0 else math.nan
    return math.sqrt(num / den)


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


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column by column: the layout ``_scaled_mm`` wants for its second operand."""
    return t.t().contiguous().t()


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


class ConvertedLinear(nn.Linear):
    """A converted ``nn.Linear``: :meth:`from_float` shares the float layer's weight and bias (as torchao's
    ``from_float``), so an optimizer built later trains them; it is never converted again."""

    @classmethod
    def from_float(cls, linear: nn.Linear, **options):
        with torch.device("meta"):  # build without allocating or drawing random numbers
            new = cls(linear.in_features, linear.out_features, bias=False, **options)
        new.weight, new.bias = linear.weight, linear.bias
        new.train(linear.training)
        return new


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


def float8_module_filter(module: nn.Module, fqn: str = "") -> bool:
    """:func:`convert_to_float8`'s default (torchao's ``module_filter_fn`` signature): True for an unconverted
    ``nn.Linear`` whose in and out features are multiples of 16 (so a 10-class output layer stays)."""
    linear = isinstance(module, nn.Linear) and not isinstance(module, ConvertedLinear)
    return linear and not (module.in_features % FP8_GEMM_MULTIPLE or module.out_features % FP8_GEMM_MULTIPLE)


def swap_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module], module_filter) -> nn.Module:
    """Swap every unconverted nn.Linear that ``module_filter(module, fqn)`` accepts for ``make(linear)``;
    all replacements are built before the first swap, so a refused layer leaves the model unchanged."""
    todo = [
        (fqn, make(m))
        for fqn, m in model.named_modules()
        if isinstance(m, nn.Linear) and not isinstance(m, ConvertedLinear) and module_filter(m, fqn)
    ]
    for fqn, new in todo:
        if fqn == "":
            return new
        parent, _, child = fqn.rpartition(".")
        setattr(model.get_submodule(parent), child, new)
    return model


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
