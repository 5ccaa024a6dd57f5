"""FP8 from scratch, proven against torchao (notebook 08): formats, tensorwise and delayed scaling, FP8 layers.

FP8 has too little range to hold a tensor as it is (E4M3: 448 down to 2**-9), so every FP8 recipe
multiplies a tensor by a *scale* before the cast and divides it out after the matmul:

* **Tensorwise current ("dynamic") scaling**: :func:`tensorwise_scale` (``fmt.max / amax``, as
  torchao computes it), :func:`quantize` (saturating cast of ``x * scale``) and :func:`dequantize`;
  measured by :func:`quantization_error` and :func:`saturation_count`.
* **Delayed scaling** (Transformer Engine): :class:`DelayedScaling` picks this step's scale from the
  amaxes of *earlier* steps (its cost on an outlier: :mod:`amp_lab.fp8_explorer`).
* **FP8 training**: :class:`Float8Matmul`, the autograd function whose three GEMMs run in FP8 through
  ``torch._scaled_mm`` (E4M3 forward, E5M2 gradients), notebook 08 shows it; :class:`Float8Linear`
  calls it, and :func:`convert_to_float8` swaps a model's linear layers.  The tests prove the dynamic
  recipe bit for bit identical to torchao's ``convert_to_float8_training`` (forward and all gradients).

Block scaling (MX, NVFP4) is :mod:`amp_lab.mx`.  torchao is imported only through
:func:`import_torchao`, which silences exactly the two harmless records its import logs here.
"""

from __future__ import annotations

import importlib
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real

import torch
from torch import nn

from ._checks import (
    ArgumentTypeError,
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_scale,
)
from .device import get_device
from .gpus import fp8_matmul_support
from .text import Reading

__all__ = [
    "ELEMENT_FORMATS",
    "EPS",
    "FP8_FORMATS",
    "FP8_GEMM_MULTIPLE",
    "ConvertedLinear",
    "DelayedScaling",
    "ElementFormat",
    "Float8Linear",
    "Float8Matmul",
    "TensorwiseRecipe",
    "convert_to_float8",
    "dequantize",
    "float8_module_filter",
    "fp8_device",
    "fp8_placement",
    "import_torchao",
    "quantization_error",
    "quantize",
    "saturation_count",
    "swap_linears",
    "tensorwise_scale",
]


# ------------------------------------------------------------------------------------------
# Formats and constants
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElementFormat:
    """One element format of FP8 or block-scaled training.

    ``max`` is the largest finite value; ``emax`` the exponent of the largest power of two in the
    format (``2**emax <= max``), which the MX scale rule subtracts; ``dtype`` is torch's storage dtype
    (FP4 has only a packed one, ``float4_e2m1fn_x2``, which cannot be cast to, so it is emulated here).
    """

    name: str
    dtype: torch.dtype
    max: float
    emax: int
    mantissa_bits: int
    label: str

    @property
    def saturation_bound(self) -> float:
        """Where rounding starts to go past ``max``: halfway to the next step, ``max + ulp(max) / 2``
        (464 for E4M3, 61440 for E5M2).  Values between ``max`` and this bound round to ``max`` anyway."""
        return self.max + 2.0 ** (self.emax - self.mantissa_bits) / 2

    @property
    def tie_saturates(self) -> bool:
        """Whether a value exactly at :attr:`saturation_bound` rounds past ``max`` (ties go to the even
        mantissa: E5M2's max 1.11b x 2**15 is odd, so its tie rounds up; E4M3's 1.110b x 2**8 does not)."""
        return int(self.max / 2.0 ** (self.emax - self.mantissa_bits)) % 2 == 1


FP8_FORMATS: dict[str, ElementFormat] = {
    "fp8_e4m3": ElementFormat("fp8_e4m3", torch.float8_e4m3fn, 448.0, 8, 3, "FP8 E4M3"),
    "fp8_e5m2": ElementFormat("fp8_e5m2", torch.float8_e5m2, 57344.0, 15, 2, "FP8 E5M2"),
}
ELEMENT_FORMATS: dict[str, ElementFormat] = {
    **FP8_FORMATS,
    "fp4_e2m1": ElementFormat("fp4_e2m1", torch.float4_e2m1fn_x2, 6.0, 2, 1, "FP4 E2M1"),
}

# torchao's floor under a tensor's amax (torchao.float8.float8_utils.EPS), so an all-zero tensor gets
# a finite scale (448 / 1e-12) instead of a division by zero.
EPS = 1e-12
# The largest tensor a quantizer here accepts: 2**26 elements (256 MiB of float32); each makes a few
# float32 copies, so this bounds the work and the memory of one call.
MAX_ELEMENTS = 2**26
# Scales are divided by 2**margin; beyond 2**64 a scale only underflows.
MAX_MARGIN = 64
# A delayed-scaling history longer than this remembers nothing useful (Transformer Engine uses 1 to 1024).
MAX_HISTORY = 1024
# Linear layers whose in/out features are multiples of this suit FP8 GEMMs (cuBLAS's FP8 kernels).
FP8_GEMM_MULTIPLE = 16
_FLOAT32_MAX = torch.finfo(torch.float32).max
ALGOS = ("max", "most_recent")
SCALINGS = ("dynamic", "delayed")


def check_format(name: str, value, allowed) -> ElementFormat:
    """A format name (a string from ``allowed``) -> its :class:`ElementFormat`."""
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{name} must be a format name such as 'fp8_e4m3' ({', '.join(allowed)}), "
            f"got {type(value).__name__}: {value!r:.80}"
        )
    check_choice(name, value, list(allowed))
    return ELEMENT_FORMATS[value]


def check_tensor(name: str, x, *, min_dim: int = 0) -> torch.Tensor:
    """A floating-point tensor of at most MAX_ELEMENTS elements (and at least ``min_dim`` dimensions)."""
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


# ------------------------------------------------------------------------------------------
# torchao, imported quietly
# ------------------------------------------------------------------------------------------


class _TorchaoImportNoise(logging.Filter):
    """Drops exactly the two harmless records importing torchao logs on a CPU-only machine: "Failed to
    load ...so" (logger ``torchao``: its CUDA kernels) and "... is an Enum subclass ... register_constant()
    ... deprecated" (logger ``torch.utils._pytree``).  Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if record.name == "torchao" and msg.startswith("Failed to load "):
            return False
        if (
            record.name == "torch.utils._pytree"
            and "is an Enum subclass" in msg
            and "register_constant()" in msg
        ):
            return False
        return True


_TORCHAO_MODULES = (
    "torchao",
    "torchao.float8",
    "torchao.float8.float8_utils",
    "torchao.float8.float8_training_tensor",
    "torchao.prototype.mx_formats.mx_tensor",
    "torchao.prototype.mx_formats.nvfp4_tensor",
)


def import_torchao():
    """Import torchao (and the float8 and MX modules the course uses) and return the ``torchao`` module.

    During the import a logging filter drops exactly two kinds of records (see
    :class:`_TorchaoImportNoise`), so neither nbval nor a learner sees them; any other warning still
    shows.  Raises ``ImportError`` with an install hint when torchao is missing.  (Notebook 08, tests.)
    """
    noise = _TorchaoImportNoise()
    loggers = [logging.getLogger("torchao"), logging.getLogger("torch.utils._pytree")]
    for logger in loggers:
        logger.addFilter(noise)
    try:
        for name in _TORCHAO_MODULES:
            importlib.import_module(name)
    except ImportError as err:
        raise ImportError(
            f"torchao is needed for this comparison but could not be imported ({err}); install it with "
            '`make lab` (which installs the course\'s requirements) or `pip install "torchao>=0.18,<0.19"` '
            "(the release amp-lab's proofs ran against)"
        ) from err
    finally:
        for logger in loggers:
            logger.removeFilter(noise)
    return importlib.import_module("torchao")


# ------------------------------------------------------------------------------------------
# Tensorwise scaling: scale, quantize, dequantize, measure
# ------------------------------------------------------------------------------------------


def fp8_device(device=None) -> tuple[torch.device, Reading]:
    """Where this machine runs FP8 matmuls (``torch._scaled_mm``), and why: ``(device, reading)``.

    A CUDA GPU that :func:`amp_lab.gpus.fp8_matmul_support` accepts (FP8 Tensor Cores, compute capability
    8.9 and later, and kernels in this torch build) runs them itself; any other device (an older GPU, an
    Apple GPU, the CPU) hands them to the CPU, whose ``_scaled_mm`` computes the same scaled products in
    software.  Notebook 08 runs its FP8 cells there, so they work on every machine and say which one did
    the work.  The decision is :func:`fp8_placement`, a pure function of the facts.
    """
    dev = get_device(device)
    capability = arch_list = None
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        capability, arch_list = torch.cuda.get_device_capability(index), torch.cuda.get_arch_list()
    return fp8_placement(dev, capability, arch_list)


def fp8_placement(device: torch.device, capability=None, arch_list=None) -> tuple[torch.device, Reading]:
    """:func:`fp8_device`'s decision from facts: the ``device``, a CUDA GPU's compute ``capability`` and the
    build's ``arch_list``.  Whether a GPU runs FP8 is :func:`amp_lab.gpus.fp8_matmul_support`'s answer; the
    reading's outcome says where the matmuls run (``fp8.runs_on_gpu``, ``fp8.gpu_without_fp8``,
    ``fp8.apple_gpu``, ``fp8.no_gpu``) and ``facts["why"]`` carries that answer's reason."""
    cpu = torch.device("cpu")
    if device.type == "mps":
        return cpu, Reading("fp8.apple_gpu")
    support = fp8_matmul_support(capability if device.type == "cuda" else None, arch_list)
    if device.type != "cuda":
        return cpu, Reading("fp8.no_gpu", facts={"why": support.reason.removeprefix("no CUDA GPU: ")})
    if support.supported:
        return device, Reading("fp8.runs_on_gpu", facts={"why": support.reason})
    return cpu, Reading("fp8.gpu_without_fp8", facts={"why": support.reason})


def tensorwise_scale(x: torch.Tensor, fmt: str = "fp8_e4m3", margin: int = 0) -> torch.Tensor:
    """The scale that maps ``x``'s largest magnitude onto ``fmt``'s largest value: a float32 0-d tensor
    ``fmt.max / max(amax, EPS) / 2**margin``.

    Computed as torchao computes it (``torchao.float8.float8_utils.tensor_to_scale``, equal for
    ``margin=0``): ``amax = max(|x|)`` in ``x``'s dtype, then the division in float64, rounded once to
    float32.  The amax is clamped to at least :data:`EPS` (1e-12), so an all-zero tensor gets a finite
    scale.  A tensor holding inf gets scale 0 and one holding NaN scale NaN, as in torchao.  ``margin``
    (an integer from 0 to 64) leaves ``2**margin`` of headroom above today's amax.  (Notebook 08.)
    """
    x = check_tensor("x", x)
    if x.numel() == 0:
        raise ValueError("x is empty: a scale needs at least one element")
    spec = check_format("fmt", fmt, FP8_FORMATS)
    margin = check_int("margin", margin, minimum=0, maximum=MAX_MARGIN)
    if x.element_size() == 1:  # an FP8 tensor: torch has no max for it; float32 holds it exactly
        x = x.to(torch.float32)
    amax = torch.max(torch.abs(x)).to(torch.float64)  # amax in x's dtype, then float64 as torchao
    scale = spec.max / torch.clamp(amax, min=EPS)
    if margin:
        scale = scale / 2.0**margin
    return scale.to(torch.float32)


def _check_scale_arg(scale, x: torch.Tensor | None = None) -> torch.Tensor:
    """A scale: a positive number (used as the float32 it becomes) or a floating tensor broadcastable to
    ``x`` (used as float32, whatever its values: a scale computed from a tensor with inf is 0)."""
    if isinstance(scale, torch.Tensor):
        if not scale.is_floating_point():
            raise ArgumentTypeError(
                f"scale must be a floating-point tensor or a number, got dtype {scale.dtype}"
            )
        if x is not None:
            try:
                torch.broadcast_shapes(scale.shape, x.shape)
            except RuntimeError:
                raise ValueError(
                    f"scale of shape {tuple(scale.shape)} does not broadcast to x of shape {tuple(x.shape)}"
                ) from None
            if scale.numel() > 1 and scale.device != x.device:
                raise ValueError(f"scale is on {scale.device} but x is on {x.device}")
        return scale.to(torch.float32)
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise ArgumentTypeError(
            f"scale must be a positive number or a float32 tensor, got {type(scale).__name__}"
        )
    value = check_scale("scale", scale)
    device = x.device if x is not None else None
    return torch.tensor(value, dtype=torch.float32, device=device)


def quantize(x: torch.Tensor, fmt: str, scale) -> torch.Tensor:
    """``x * scale`` cast to ``fmt``'s FP8 dtype, saturating: values beyond ``fmt.max`` become ``±max``.

    Exactly torchao's cast (``_ToFloat8ConstrFunc``): ``x`` is converted to float32, multiplied by the
    float32 ``scale``, clamped to ``[-max, max]`` (so E5M2 saturates too instead of overflowing to inf)
    and cast with round-to-nearest-even; NaN stays NaN.  ``scale`` is a positive number (used as the
    float32 it becomes) or a float32 tensor broadcastable to ``x`` (e.g. :func:`tensorwise_scale`'s).
    Returns a tensor of dtype ``float8_e4m3fn`` or ``float8_e5m2``.  (Notebook 08.)
    """
    x = check_tensor("x", x)
    spec = check_format("fmt", fmt, FP8_FORMATS)
    s = _check_scale_arg(scale, x)
    scaled = x.to(torch.float32) * s
    return scaled.clamp(min=-spec.max, max=spec.max).to(spec.dtype)


def dequantize(q: torch.Tensor, scale) -> torch.Tensor:
    """Undo :func:`quantize`: ``q`` as float32 divided by ``scale`` (a division, as torchao's
    ``Float8TrainingTensor.to_original_precision`` does it, not a multiplication by the reciprocal).
    (Notebook 08.)"""
    q = check_tensor("q", q)
    s = _check_scale_arg(scale, q)
    return q.to(torch.float32) / s


def saturation_count(x: torch.Tensor, fmt: str, scale) -> int:
    """How many elements of ``x * scale`` (computed in float32, as :func:`quantize` does) saturate: they
    would round past ``fmt``'s max (to E5M2's inf, or beyond E4M3's 448), so :func:`quantize` clips them
    to ``±max``.  That is ``|x * scale|`` beyond :attr:`ElementFormat.saturation_bound` (464 for E4M3,
    61440 for E5M2; at exactly the bound, E5M2's tie rounds up and counts, E4M3's does not): a value
    a hair above 448, as current scaling's float32 rounding can make the amax, rounds to 448 anyway and
    is not counted.  ±inf counts, NaN does not.  (Notebook 08.)"""
    x = check_tensor("x", x)
    spec = check_format("fmt", fmt, FP8_FORMATS)
    s = _check_scale_arg(scale, x)
    magnitude = (x.to(torch.float32) * s).abs()
    beyond = magnitude >= spec.saturation_bound if spec.tie_saturates else magnitude > spec.saturation_bound
    return int(beyond.sum())


def quantization_error(x: torch.Tensor, xq: torch.Tensor) -> float:
    """Relative RMS error of ``xq`` as an approximation of ``x``:
    ``sqrt(sum((xq - x)**2) / sum(x**2))``, in float64.

    0.0 means exact; 1.0 is the error of answering all zeros.  When ``x`` is all zeros the result is 0.0
    if ``xq`` is too and ``inf`` otherwise; NaN anywhere gives NaN (and inf in ``x`` gives NaN).
    (Notebook 08.)"""
    x = check_tensor("x", x)
    xq = check_tensor("xq", xq)
    if x.shape != xq.shape:
        raise ValueError(f"x and xq must have the same shape, got {tuple(x.shape)} and {tuple(xq.shape)}")
    a, b = x.detach().to(torch.float64), xq.detach().to(torch.float64)
    num = float(((b - a) ** 2).sum())
    den = float((a**2).sum())
    if math.isnan(num) or math.isnan(den):
        return math.nan
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)


# ------------------------------------------------------------------------------------------
# Delayed scaling (Transformer Engine)
# ------------------------------------------------------------------------------------------


def _check_amax(amax) -> float:
    """One amax: a number >= 0 (inf and NaN allowed: they are what a broken step reports) or a 0-d tensor."""
    if isinstance(amax, torch.Tensor):
        if amax.numel() != 1 or not amax.is_floating_point():
            raise ValueError(
                f"amax must be one number (a 0-d floating tensor), got shape {tuple(amax.shape)}"
            )
        amax = float(amax)
    elif isinstance(amax, bool) or not isinstance(amax, Real):
        raise ArgumentTypeError(f"amax must be a number, got {type(amax).__name__}: {amax!r:.80}")
    try:
        amax = float(amax)
    except OverflowError:  # an integer beyond float64
        raise ValueError(f"amax must fit a float, got an integer of {int(amax).bit_length()} bits") from None
    if amax < 0:
        raise ValueError(f"amax is a largest magnitude and cannot be negative, got {amax}")
    return amax


def _float32(value: float) -> float:
    """``value`` rounded to float32 (overflow clamped to float32's max), as a Python float."""
    value = min(value, _FLOAT32_MAX)
    return float(torch.tensor(value, dtype=torch.float32))


class DelayedScaling:
    """Transformer Engine's delayed scaling: this step's scale comes from *earlier* steps' amaxes.

    ``scale`` is the scale to use now: a Python float holding a float32 value, 1.0 before any
    :meth:`update`.  ``update(amax)`` appends this step's amax, whatever it is, rounded to float32 (as
    Transformer Engine's amax history stores it), to ``history`` (the last ``history_len`` amaxes, oldest
    first), reduces the history to ``r`` (``algo="max"``: its largest
    value, NaN if any entry is NaN; ``"most_recent"``: the newest) and, if ``r`` is finite and > 0, sets
    ``scale = fmt.max / r / 2**margin`` (computed in float64, rounded to float32; an overflow becomes
    float32's max, as Transformer Engine's kernel clamps it).  Otherwise the scale is unchanged: a zero
    amax keeps it, and a NaN freezes it until the NaN leaves the history.

    Why delayed: the amax of a tensor is known only after the tensor exists, and on a GPU reading it
    before the cast costs a pass over memory.  The price is visible in notebook 08's widget: a step
    whose amax jumps saturates, and with ``algo="max"`` the low scale lingers ``history_len`` steps.
    """

    def __init__(self, fmt: str = "fp8_e4m3", history_len: int = 16, margin: int = 0, algo: str = "max"):
        self.fmt = check_format("fmt", fmt, FP8_FORMATS).name
        self.history_len = check_int("history_len", history_len, minimum=1, maximum=MAX_HISTORY)
        self.margin = check_int("margin", margin, minimum=0, maximum=MAX_MARGIN)
        if not isinstance(algo, str):
            raise ArgumentTypeError(f"algo must be one of {ALGOS}, got {type(algo).__name__}: {algo!r:.80}")
        self.algo = check_choice("algo", algo, ALGOS)
        self._history: deque[float] = deque(maxlen=self.history_len)
        self.scale = 1.0

    @property
    def history(self) -> list[float]:
        """The remembered amaxes, oldest first (at most ``history_len``)."""
        return list(self._history)

    @property
    def max(self) -> float:
        """The format's largest value (448 for E4M3, 57344 for E5M2)."""
        return FP8_FORMATS[self.fmt].max

    def reduced_amax(self) -> float:
        """The history reduced to one amax by ``algo`` (NaN for an empty history)."""
        if not self._history:
            return math.nan
        if self.algo == "most_recent":
            return self._history[-1]
        if any(math.isnan(a) for a in self._history):
            return math.nan  # NaN propagates through a max, as torch.amax does
        return max(self._history)

    def update(self, amax) -> float:
        """Record this step's ``amax`` (a number >= 0, inf or NaN, or a 0-d tensor) and compute the
        scale for the next step; returns it."""
        amax = float(torch.tensor(_check_amax(amax), dtype=torch.float32))  # kept as float32, as TE keeps it
        self._history.append(amax)
        r = self.reduced_amax()
        if math.isfinite(r) and r > 0:
            self.scale = _float32(self.max / r / 2.0**self.margin)
        return self.scale

    def __repr__(self) -> str:
        return (
            f"DelayedScaling(fmt={self.fmt!r}, history_len={self.history_len}, margin={self.margin}, "
            f"algo={self.algo!r}, scale={self.scale!r}, steps_seen={len(self._history)})"
        )


# ------------------------------------------------------------------------------------------
# FP8 linear layers
# ------------------------------------------------------------------------------------------


class TensorwiseRecipe:
    """Where each operand's scale comes from: its own amax now ("dynamic", torchao's default recipe) or
    its :class:`DelayedScaling` ("delayed": the scale is read *before* this step's amax is recorded)."""

    def __init__(self, scaling: str = "dynamic", history_len: int = 16, margin: int = 0, algo: str = "max"):
        self.scaling = scaling
        self.delayed: dict[str, DelayedScaling] = {}
        if scaling == "delayed":
            self.delayed = {
                "input": DelayedScaling("fp8_e4m3", history_len, margin, algo),
                "weight": DelayedScaling("fp8_e4m3", history_len, margin, algo),
                "grad_output": DelayedScaling("fp8_e5m2", history_len, margin, algo),
            }

    def scale_for(self, role: str, t: torch.Tensor, fmt: str, record: bool) -> torch.Tensor:
        if self.scaling == "dynamic":
            return tensorwise_scale(t, fmt)
        history = self.delayed[role]
        scale = torch.tensor(history.scale, dtype=torch.float32, device=t.device)  # from earlier steps
        if record:
            history.update(float(torch.max(torch.abs(t))))  # this step's amax, for the next steps
        return scale


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column by column: the layout ``_scaled_mm`` wants for its second operand
    (cuBLAS's FP8 kernels take it as a transposed row-major matrix; torchao makes it the same way)."""
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
    """What :func:`convert_to_float8` and :func:`amp_lab.mx.convert_to_mx` swap in for an ``nn.Linear``:
    :meth:`from_float` shares the float layer's weight and bias (the same ``Parameter`` objects, as
    torchao's ``from_float``), so an optimizer built later trains them; a converted layer is never
    converted again."""

    @classmethod
    def from_float(cls, linear: nn.Linear, **options):
        with torch.device("meta"):  # build without allocating or drawing random numbers
            new = cls(linear.in_features, linear.out_features, bias=False, **options)
        new.weight = linear.weight
        new.bias = linear.bias
        new.train(linear.training)
        return new


class Float8Linear(ConvertedLinear):
    """An ``nn.Linear`` whose matmuls run in FP8 with tensorwise scaling: its forward is
    :class:`Float8Matmul` (notebook 08).

    ``scaling="dynamic"`` (default) is torchao's default recipe: each step scales input and weight to
    E4M3 and grad_output to E5M2 by their own amax (:func:`tensorwise_scale`); the tests prove it bit for
    bit equal to torchao's ``Float8Linear``, forward and all gradients.  ``scaling="delayed"`` keeps one
    :class:`DelayedScaling` per tensor (``delayed["input"]``, ``["weight"]``, ``["grad_output"]``) whose
    scale comes from earlier steps (1.0 at the first); the histories move only in training mode with
    gradients enabled, so evaluating does not move them (they are Python state, not in ``state_dict()``).
    The bias is added in high precision after the FP8 GEMM, as torchao does.  In and out features must be
    multiples of 16 (what GPU FP8 GEMMs require); on CUDA so must the rows of a training batch.  Under
    autocast the input is first cast to the autocast dtype (torchao does this for CUDA autocast only).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
        *,
        scaling: str = "dynamic",
        history_len: int = 16,
        margin: int = 0,
        algo: str = "max",
    ):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.scaling = scaling
        self.recipe = TensorwiseRecipe(scaling, history_len, margin, algo)

    @property
    def delayed(self) -> dict[str, DelayedScaling]:
        """The :class:`DelayedScaling` of each operand (empty for dynamic scaling)."""
        return self.recipe.delayed

    @classmethod
    def from_float(cls, linear: nn.Linear, **options) -> Float8Linear:
        if linear.in_features % FP8_GEMM_MULTIPLE or linear.out_features % FP8_GEMM_MULTIPLE:
            raise ValueError(
                f"Float8Linear needs in_features and out_features that are multiples of {FP8_GEMM_MULTIPLE} "
                f"(FP8 GEMMs on GPUs require it), got in_features={linear.in_features}, "
                f"out_features={linear.out_features}; leave this layer in high precision "
                "(convert_to_float8 skips it by default)"
            )
        return super().from_float(linear, **options)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input
        if torch.is_autocast_enabled(x.device.type):
            x = x.to(torch.get_autocast_dtype(x.device.type))
        if x.device.type == "cuda" and torch.is_grad_enabled() and self.weight.requires_grad:
            rows = x.numel() // self.in_features
            if rows % FP8_GEMM_MULTIPLE:
                raise ValueError(
                    "on CUDA the FP8 grad_weight GEMM reduces over the batch, so a training batch must "
                    f"have a multiple of {FP8_GEMM_MULTIPLE} rows; got {rows} (input shape {tuple(x.shape)})"
                )
        record = self.training and torch.is_grad_enabled()  # a training step, not an evaluation
        output = Float8Matmul.apply(x, self.weight, self.recipe, record)
        if self.bias is not None:
            output = output + self.bias.to(output.dtype)  # bias in high precision, after the GEMM
        return output

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scaling={self.scaling!r}"


def float8_module_filter(module: nn.Module, fqn: str = "") -> bool:
    """The default rule of :func:`convert_to_float8`: True for an ``nn.Linear`` whose in and out features
    are both multiples of 16 (what FP8 GEMMs need: torchao's auto-filter applies the same test, before its
    size heuristics for H100 speed); False otherwise, e.g. a 10-class output layer.  Same signature as
    torchao's ``module_filter_fn`` (module, fully qualified name), so it can be passed to torchao too."""
    if not isinstance(module, nn.Linear) or isinstance(module, ConvertedLinear):
        return False
    return module.in_features % FP8_GEMM_MULTIPLE == 0 and module.out_features % FP8_GEMM_MULTIPLE == 0


def swap_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module], module_filter) -> nn.Module:
    """Swap every unconverted nn.Linear of ``model`` that ``module_filter(module, fqn)`` accepts for
    ``make(linear)``, in place; a root Linear is returned swapped.  All replacements are built (and so
    validated) before the first swap, so a refused layer leaves the model unchanged."""
    todo = []
    for fqn, module in model.named_modules():
        if (
            isinstance(module, nn.Linear)
            and not isinstance(module, ConvertedLinear)
            and module_filter(module, fqn)
        ):
            todo.append((fqn, make(module)))
    for fqn, new in todo:
        if fqn == "":
            return new
        parent_name, _, child = fqn.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
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
    """Swap ``model``'s linear layers for :class:`Float8Linear` in place, like torchao's
    ``convert_to_float8_training``, and return the model (a bare ``nn.Linear`` comes back converted).

    ``module_filter(module, fqn)`` chooses the layers (default :func:`float8_module_filter`: in and out
    features multiples of 16, so the digits MLP's 10-class output layer stays in FP32); a layer it
    chooses that does not suit FP8 raises ``ValueError`` before anything is swapped.  ``scaling``
    ("dynamic" or "delayed"), ``history_len``, ``margin`` and ``algo`` are :class:`Float8Linear`'s.
    (Notebook 08.)
    """
    check_instance("model", model, nn.Module, "an nn.Module")
    if not isinstance(scaling, str):
        raise ArgumentTypeError(
            f"scaling must be one of {SCALINGS}, got {type(scaling).__name__}: {scaling!r:.80}"
        )
    check_choice("scaling", scaling, SCALINGS)
    DelayedScaling("fp8_e4m3", history_len, margin, algo)  # checks history_len, margin and algo
    module_filter = check_callable("module_filter", module_filter, optional=True) or float8_module_filter
    options = dict(scaling=scaling, history_len=history_len, margin=margin, algo=algo)
    return swap_linears(model, lambda m: Float8Linear.from_float(m, **options), module_filter)
