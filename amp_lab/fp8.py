"""FP8 and block-scaled formats from scratch, proven against torchao (notebook 08).

FP8 has too little range to hold a tensor as it is (E4M3: 448 down to 2**-9), so every FP8 recipe
multiplies a tensor by a *scale* before the cast and divides it out after the matmul.  This module
builds the recipes a learner meets in torchao and Transformer Engine, one small piece at a time:

* **Tensorwise current ("dynamic") scaling**: :func:`tensorwise_scale` (``fmt.max / amax``, as
  torchao computes it), :func:`quantize` (saturating cast of ``x * scale``) and :func:`dequantize`.
* **Delayed scaling** (Transformer Engine): :class:`DelayedScaling` picks this step's scale from the
  amaxes of *earlier* steps; :func:`scaling_trajectory` and the widget :func:`scaling_explorer` show
  what that costs when an outlier arrives.
* **FP8 training**: :class:`Float8Linear`, an ``nn.Linear`` whose three matmuls run in FP8 through
  ``torch._scaled_mm`` (input and weight in E4M3 forward, grad_output in E5M2 backward), and
  :func:`convert_to_float8`, which swaps a model's linear layers.  The tests prove the dynamic recipe
  bit for bit identical to torchao's ``convert_to_float8_training`` (forward and all gradients).
* **Block scaling**: :func:`mx_quantize` (OCP MX: one power-of-two E8M0 scale per block of 32 or 16,
  elements in E4M3, E5M2 or FP4 E2M1; bit-identical to torchao's ``to_mx`` + ``to_dtype``),
  :func:`nvfp4_quantize` (NVFP4: 16-element blocks, E4M3 block scales, an FP32 per-tensor scale;
  bit-identical to torchao's ``NVFP4Tensor``) and :func:`convert_to_mx` (emulated MX training).
* Measures: :func:`quantization_error` (relative RMS error) and :func:`saturation_count`.

torchao itself is only needed by the tests and the notebook's comparisons; import it through
:func:`import_torchao`, which silences exactly the two harmless warnings its import logs here.

Every public function checks its arguments first (``ValueError``/``TypeError`` naming the argument);
tensors are capped at :data:`MAX_ELEMENTS` elements.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real

import torch
from torch import nn

from ._checks import (
    ArgumentTypeError,
    check_bool,
    check_callable,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_scale,
    check_seed,
)
from .device import get_device
from .gpus import fp8_matmul_support
from .widgets import FigurePane, table_html

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "ELEMENT_FORMATS",
    "EPS",
    "FP8_FORMATS",
    "MX_BLOCK_SIZES",
    "DelayedScaling",
    "ElementFormat",
    "Float8Linear",
    "MXLinear",
    "ScalingExplorer",
    "ScalingTrajectory",
    "convert_to_float8",
    "convert_to_mx",
    "dequantize",
    "float8_module_filter",
    "fp8_device",
    "fp8_placement",
    "import_torchao",
    "make_tensor_sequence",
    "mx_quantize",
    "nvfp4_quantize",
    "quantization_error",
    "quantize",
    "saturation_count",
    "scaling_explorer",
    "scaling_trajectory",
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
# MX block sizes: powers of two from 1 to 1024 (the MX spec fixes 32; NVFP4 uses 16; the notebook sweeps).
MX_BLOCK_SIZES = tuple(2**k for k in range(11))
DEFAULT_BLOCK_SIZE = 32
NVFP4_BLOCK_SIZE = 16
# E8M0: an 8-bit exponent with bias 127; 255 encodes NaN.
E8M0_BIAS = 127
E8M0_NAN = 255
F32_MIN_NORMAL = 2.0**-126
# Linear layers whose in/out features are multiples of this suit FP8 GEMMs (cuBLAS's FP8 kernels).
FP8_GEMM_MULTIPLE = 16
_FLOAT32_MAX = torch.finfo(torch.float32).max
ALGOS = ("max", "most_recent")
SCALINGS = ("dynamic", "delayed")
RECIPES = ("delayed", "current")


def _check_fmt(name: str, value, allowed) -> ElementFormat:
    """A format name (a string from ``allowed``) -> its :class:`ElementFormat`."""
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{name} must be a format name such as 'fp8_e4m3' ({', '.join(allowed)}), "
            f"got {type(value).__name__}: {value!r:.80}"
        )
    check_choice(name, value, list(allowed))
    return ELEMENT_FORMATS[value]


def _check_tensor(name: str, x, *, min_dim: int = 0) -> torch.Tensor:
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
    import importlib

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
            "`make lab` (which installs the course's requirements) or `pip install \"torchao>=0.18,<0.19\"` "
            "(the release amp-lab's proofs ran against)"
        ) from err
    finally:
        for logger in loggers:
            logger.removeFilter(noise)
    return importlib.import_module("torchao")


# ------------------------------------------------------------------------------------------
# Tensorwise scaling: scale, quantize, dequantize, measure
# ------------------------------------------------------------------------------------------


def fp8_device(device=None) -> tuple[torch.device, str]:
    """Where this machine runs FP8 matmuls (``torch._scaled_mm``), and why: ``(device, reason)``.

    A CUDA GPU whose Tensor Cores multiply FP8 and whose kernels this torch build has
    (:func:`amp_lab.race.fp8_matmul_support`: compute capability 8.9 and later) runs them itself; any other
    device (an older GPU, an Apple GPU, the CPU) hands them to the CPU, whose ``_scaled_mm`` computes the
    same scaled products in software.  Notebook 08 runs its FP8 cells there, so they work on every machine
    and say which one did the work.  The decision is :func:`fp8_placement`, a pure function of the facts.
    """
    dev = get_device(device)
    capability = arch_list = None
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        capability, arch_list = torch.cuda.get_device_capability(index), torch.cuda.get_arch_list()
    return fp8_placement(dev, capability, arch_list)


def fp8_placement(device, capability=None, arch_list=None) -> tuple[torch.device, str]:
    """:func:`fp8_device`'s decision from facts: ``device`` (a torch.device or name), the CUDA GPU's
    compute ``capability`` and the build's ``arch_list`` (``torch.cuda.get_arch_list()``; both ignored
    for a CPU or an Apple GPU)."""
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device={device!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from None
    check_instance("device", device, torch.device, "a torch.device or a device name such as 'cuda'")
    cpu = torch.device("cpu")
    if device.type == "cuda":
        if capability is None:
            raise ValueError("capability is required for a CUDA device: torch.cuda.get_device_capability(), e.g. (9, 0)")
        support = fp8_matmul_support(capability, arch_list)
        if support.supported:
            return device, f"FP8 matmuls run on this GPU's Tensor Cores: {support.reason}"
        return cpu, f"FP8 matmuls run on the CPU, emulated, because {support.reason}"
    if device.type == "mps":
        return cpu, "FP8 matmuls run on the CPU, emulated, because torch has no FP8 matmul for Apple GPUs (MPS)"
    if device.type != "cpu":
        raise ValueError(f"device={str(device)!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'")
    return cpu, "FP8 matmuls run on the CPU, emulated, because there is no CUDA GPU here: " + fp8_matmul_support(
        None).reason.removeprefix("no CUDA GPU: ")


def tensorwise_scale(x: torch.Tensor, fmt: str = "fp8_e4m3", margin: int = 0) -> torch.Tensor:
    """The scale that maps ``x``'s largest magnitude onto ``fmt``'s largest value: a float32 0-d tensor
    ``fmt.max / max(amax, EPS) / 2**margin``.

    Computed as torchao computes it (``torchao.float8.float8_utils.tensor_to_scale``, equal for
    ``margin=0``): ``amax = max(|x|)`` in ``x``'s dtype, then the division in float64, rounded once to
    float32.  The amax is clamped to at least :data:`EPS` (1e-12), so an all-zero tensor gets a finite
    scale.  A tensor holding inf gets scale 0 and one holding NaN scale NaN, as in torchao.  ``margin``
    (an integer from 0 to 64) leaves ``2**margin`` of headroom above today's amax.  (Notebook 08.)
    """
    x = _check_tensor("x", x)
    if x.numel() == 0:
        raise ValueError("x is empty: a scale needs at least one element")
    spec = _check_fmt("fmt", fmt, FP8_FORMATS)
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
    x = _check_tensor("x", x)
    spec = _check_fmt("fmt", fmt, FP8_FORMATS)
    s = _check_scale_arg(scale, x)
    scaled = x.to(torch.float32) * s
    return scaled.clamp(min=-spec.max, max=spec.max).to(spec.dtype)


def dequantize(q: torch.Tensor, scale) -> torch.Tensor:
    """Undo :func:`quantize`: ``q`` as float32 divided by ``scale`` (a division, as torchao's
    ``Float8TrainingTensor.to_original_precision`` does it, not a multiplication by the reciprocal).
    (Notebook 08.)"""
    q = _check_tensor("q", q)
    s = _check_scale_arg(scale, q)
    return q.to(torch.float32) / s


def saturation_count(x: torch.Tensor, fmt: str, scale) -> int:
    """How many elements of ``x * scale`` (computed in float32, as :func:`quantize` does) saturate: they
    would round past ``fmt``'s max (to E5M2's inf, or beyond E4M3's 448), so :func:`quantize` clips them
    to ``±max``.  That is ``|x * scale|`` beyond :attr:`ElementFormat.saturation_bound` (464 for E4M3,
    61440 for E5M2; at exactly the bound, E5M2's tie rounds up and counts, E4M3's does not): a value
    a hair above 448, as current scaling's float32 rounding can make the amax, rounds to 448 anyway and
    is not counted.  ±inf counts, NaN does not.  (Notebook 08.)"""
    x = _check_tensor("x", x)
    spec = _check_fmt("fmt", fmt, FP8_FORMATS)
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
    x = _check_tensor("x", x)
    xq = _check_tensor("xq", xq)
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
        self.fmt = _check_fmt("fmt", fmt, FP8_FORMATS).name
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


class _TensorwiseRecipe:
    """Where each operand's scale comes from: its own amax now ("dynamic", torchao's default recipe) or
    its :class:`DelayedScaling` ("delayed": the scale is read *before* this step's amax is recorded)."""

    def __init__(self, scaling: str, history_len: int, margin: int, algo: str):
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


def _column_major(t: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column by column: the layout ``_scaled_mm`` wants for its second operand
    (cuBLAS's FP8 kernels take it as a transposed row-major matrix; torchao makes it the same way)."""
    return t.t().contiguous().t()


class _Float8Matmul(torch.autograd.Function):
    """``x @ weight.T`` with all three GEMMs of a linear layer in FP8, torchao's tensorwise recipe.

    Forward:   output      = x_e4m3  @ W_e4m3.T        (both scaled to E4M3: activations and weights
                                                         need precision more than range)
    Backward:  grad_input  = go_e5m2 @ W_e4m3          (gradients need range: E5M2)
               grad_weight = go_e5m2.T @ x_e4m3
    ``torch._scaled_mm(a, b, scale_a, scale_b)`` computes ``(a * scale_a) @ (b * scale_b)`` with float32
    accumulation, so it gets the *inverse* scales: the FP8 values are ``x * scale``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, recipe: _TensorwiseRecipe, record: bool):
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
            _column_major(w_fp8),
            scale_a=scale_go.reciprocal(),
            scale_b=scale_w.reciprocal(),
            out_dtype=grad_output.dtype,
            use_fast_accum=False,
        )
        # grad_weight = grad_output.T @ x: (N, M) @ (M, K), the reduction over M (the batch).
        grad_w = torch._scaled_mm(
            go_fp8.t().contiguous(),  # the first operand must be row-major
            _column_major(x_fp8),
            scale_a=scale_go.reciprocal(),
            scale_b=scale_x.reciprocal(),
            out_dtype=grad_output.dtype,
            use_fast_accum=False,
        )
        return grad_x.reshape(ctx.x_shape), grad_w, None, None


def _check_features(in_features, out_features, bias) -> tuple[int, int, bool]:
    """A linear layer's shape, bounded: its weight has at most MAX_ELEMENTS elements."""
    in_features = check_int("in_features", in_features, minimum=1, maximum=MAX_ELEMENTS)
    out_features = check_int("out_features", out_features, minimum=1, maximum=MAX_ELEMENTS)
    if in_features * out_features > MAX_ELEMENTS:
        raise ValueError(
            f"in_features * out_features = {in_features * out_features:,} weights; at most {MAX_ELEMENTS:,} "
            "are allowed"
        )
    return in_features, out_features, check_bool("bias", bias)


def _check_placement(device, dtype) -> tuple[torch.device | None, torch.dtype | None]:
    """A layer's ``device`` (None, or one this machine has: :func:`amp_lab.device.get_device`) and
    ``dtype`` (None, or a floating-point dtype for its FP32/BF16/FP16 master weights)."""
    if device is not None:
        device = get_device(device)
    if dtype is not None:
        allowed = (torch.float32, torch.bfloat16, torch.float16)
        if not isinstance(dtype, torch.dtype):
            raise ArgumentTypeError(
                f"dtype must be None or a torch.dtype (torch.float32, torch.bfloat16 or torch.float16), "
                f"got {type(dtype).__name__}: {dtype!r:.80}"
            )
        if dtype not in allowed:
            raise ValueError(f"dtype={dtype} is not allowed for a layer's weights: use torch.float32, "
                             "torch.bfloat16 or torch.float16")
    return device, dtype


def _check_fp8_features(in_features, out_features, what: str = "Float8Linear") -> None:
    if in_features % FP8_GEMM_MULTIPLE or out_features % FP8_GEMM_MULTIPLE:
        raise ValueError(
            f"{what} needs in_features and out_features that are multiples of {FP8_GEMM_MULTIPLE} (FP8 GEMMs "
            f"on GPUs require it), got in_features={in_features}, out_features={out_features}; leave this "
            "layer in high precision (convert_to_float8 skips it by default)"
        )


def _check_scaling_options(scaling, history_len, margin, algo) -> tuple[str, int, int, str]:
    if not isinstance(scaling, str):
        raise ArgumentTypeError(
            f"scaling must be one of {SCALINGS}, got {type(scaling).__name__}: {scaling!r:.80}"
        )
    check_choice("scaling", scaling, SCALINGS)
    history_len = check_int("history_len", history_len, minimum=1, maximum=MAX_HISTORY)
    margin = check_int("margin", margin, minimum=0, maximum=MAX_MARGIN)
    if not isinstance(algo, str):
        raise ArgumentTypeError(f"algo must be one of {ALGOS}, got {type(algo).__name__}: {algo!r:.80}")
    check_choice("algo", algo, ALGOS)
    return scaling, history_len, margin, algo


def _check_input(x, layer: nn.Linear, what: str) -> torch.Tensor:
    in_features = layer.in_features
    check_instance("input", x, torch.Tensor, "a torch.Tensor")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ArgumentTypeError(f"{what} takes a float32, bfloat16 or float16 input, got dtype {x.dtype}")
    if x.device != layer.weight.device:
        raise ValueError(f"input is on {x.device} but the layer's weight is on {layer.weight.device}")
    if x.dim() < 1 or x.shape[-1] != in_features:
        raise ValueError(
            f"{what} expects inputs whose last dimension is {in_features}, got shape {tuple(x.shape)}"
        )
    if x.numel() > MAX_ELEMENTS:
        raise ValueError(f"input has {x.numel():,} elements; at most {MAX_ELEMENTS:,} are allowed")
    return x


class Float8Linear(nn.Linear):
    """An ``nn.Linear`` whose matmuls run in FP8 with tensorwise scaling (notebook 08).

    ``scaling="dynamic"`` (default) is torchao's default recipe: each step scales input and weight to
    E4M3 and grad_output to E5M2 by their own amax (:func:`tensorwise_scale`); the tests prove it bit for
    bit equal to torchao's ``Float8Linear``, forward and all gradients.  ``scaling="delayed"`` keeps one
    :class:`DelayedScaling` per tensor (``delayed["input"]``, ``["weight"]``, ``["grad_output"]``) whose
    scale comes from earlier steps (1.0 at the first); the histories are updated only in training mode
    with gradients enabled, so evaluating (``model.eval()`` or ``torch.no_grad()``) does not move them.
    The bias is added in high precision after the FP8 GEMM, as torchao does.  ``in_features`` and
    ``out_features`` must be multiples of 16 (what GPU FP8 GEMMs require); on CUDA so must the number of
    rows of a training batch (the inner dimension of the grad_weight GEMM).  Under autocast the input is
    first cast to the autocast dtype (torchao does this for CUDA autocast only, so under CPU autocast the
    two differ; the identity tests run without autocast).  The delayed histories are Python state, not
    part of ``state_dict()``.
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
        in_features, out_features, bias = _check_features(in_features, out_features, bias)
        _check_fp8_features(in_features, out_features)
        scaling, history_len, margin, algo = _check_scaling_options(scaling, history_len, margin, algo)
        device, dtype = _check_placement(device, dtype)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.scaling = scaling
        self.recipe = _TensorwiseRecipe(scaling, history_len, margin, algo)

    @property
    def delayed(self) -> dict[str, DelayedScaling]:
        """The :class:`DelayedScaling` of each operand (empty for dynamic scaling)."""
        return self.recipe.delayed

    @classmethod
    def from_float(
        cls,
        linear: nn.Linear,
        *,
        scaling: str = "dynamic",
        history_len: int = 16,
        margin: int = 0,
        algo: str = "max",
    ) -> Float8Linear:
        """A Float8Linear that shares ``linear``'s weight and bias (the same ``Parameter`` objects, as
        torchao's ``from_float``), so an optimizer built later trains them."""
        check_instance("linear", linear, nn.Linear, "an nn.Linear")
        _check_fp8_features(linear.in_features, linear.out_features, "Float8Linear.from_float(linear)")
        with torch.device("meta"):  # build without allocating or drawing random numbers
            new = cls(
                linear.in_features,
                linear.out_features,
                bias=False,
                scaling=scaling,
                history_len=history_len,
                margin=margin,
                algo=algo,
            )
        new.weight = linear.weight
        new.bias = linear.bias
        new.train(linear.training)
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = _check_input(input, self, "Float8Linear")
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
        output = _Float8Matmul.apply(x, self.weight, self.recipe, record)
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
    if not isinstance(module, nn.Linear) or isinstance(module, (Float8Linear, MXLinear)):
        return False
    return module.in_features % FP8_GEMM_MULTIPLE == 0 and module.out_features % FP8_GEMM_MULTIPLE == 0


def _swap_linears(
    model: nn.Module, make: Callable[[nn.Linear], nn.Module], module_filter, kinds
) -> nn.Module:
    """Swap every nn.Linear of ``model`` that ``module_filter(module, fqn)`` accepts for ``make(linear)``,
    in place; a root Linear is returned swapped.  All replacements are built (and so validated) before
    the first swap, so a refused layer leaves the model unchanged."""
    check_instance("model", model, nn.Module, "an nn.Module")
    todo = []
    for fqn, module in model.named_modules():
        if isinstance(module, nn.Linear) and not isinstance(module, kinds) and module_filter(module, fqn):
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
    chooses that does not suit FP8 raises ``ValueError`` before anything is swapped.  ``scaling``,
    ``history_len``, ``margin`` and ``algo`` are :meth:`Float8Linear.from_float`'s.  (Notebook 08.)
    """
    check_instance("model", model, nn.Module, "an nn.Module")
    scaling, history_len, margin, algo = _check_scaling_options(scaling, history_len, margin, algo)
    module_filter = check_callable("module_filter", module_filter, optional=True) or float8_module_filter
    return _swap_linears(
        model,
        lambda m: Float8Linear.from_float(
            m, scaling=scaling, history_len=history_len, margin=margin, algo=algo
        ),
        module_filter,
        (Float8Linear, MXLinear),
    )


# ------------------------------------------------------------------------------------------
# MX block scaling
# ------------------------------------------------------------------------------------------


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
    spec = _check_fmt("elem", elem, ELEMENT_FORMATS)
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
    x = _check_tensor("x", x, min_dim=1)
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
    x = _check_tensor("x", x, min_dim=2)
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


class _MXMatmul(torch.autograd.Function):
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


class MXLinear(nn.Linear):
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
        in_features, out_features, bias = _check_features(in_features, out_features, bias)
        self.elem = _check_fmt("elem", elem, ELEMENT_FORMATS).name
        self.block_size = check_choice(
            "block_size", check_int("block_size", block_size, minimum=1), MX_BLOCK_SIZES
        )
        device, dtype = _check_placement(device, dtype)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)

    @classmethod
    def from_float(cls, linear: nn.Linear, *, elem: str = "fp8_e4m3", block_size: int = DEFAULT_BLOCK_SIZE):
        """An MXLinear sharing ``linear``'s weight and bias Parameters."""
        check_instance("linear", linear, nn.Linear, "an nn.Linear")
        with torch.device("meta"):
            new = cls(linear.in_features, linear.out_features, bias=False, elem=elem, block_size=block_size)
        new.weight = linear.weight
        new.bias = linear.bias
        new.train(linear.training)
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = _check_input(input, self, "MXLinear")
        output = _MXMatmul.apply(x, self.weight, self.elem, self.block_size)
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
    elem = _check_fmt("elem", elem, ELEMENT_FORMATS).name
    block_size = check_choice("block_size", check_int("block_size", block_size, minimum=1), MX_BLOCK_SIZES)
    module_filter = check_callable("module_filter", module_filter, optional=True) or (lambda m, fqn: True)
    return _swap_linears(
        model,
        lambda m: MXLinear.from_float(m, elem=elem, block_size=block_size),
        module_filter,
        (Float8Linear, MXLinear),
    )


# ------------------------------------------------------------------------------------------
# Current versus delayed scaling: the trajectory and its widget
# ------------------------------------------------------------------------------------------

# The widget recomputes on every slider move: sequences are short and tensors small.
MAX_SEQUENCE_STEPS = 1000
MAX_SEQUENCE_SIZE = 2**16
MAX_SEQUENCE_ELEMENTS = 2**22  # all steps together: 16 MiB of float32
MAX_EXPLORER_SIZE = 4096  # the widget recomputes on every slider move
MAX_SPIKE = 1e6
MAX_DRIFT = 1.0


def make_tensor_sequence(
    num_steps: int = 48,
    *,
    size: int = 1024,
    drift: float = 0.02,
    spike_step: int | None = 24,
    spike_size: float = 100.0,
    seed: int = 0,
) -> list[torch.Tensor]:
    """A seeded sequence of ``num_steps`` float32 tensors of ``size`` Gaussian values, standing in for one
    layer's activations over training: the spread grows by ``2**drift`` per step (amax drifts up), and at
    ``spike_step`` (None: no spike) one element becomes an outlier ``spike_size`` times the tensor's own
    amax.  (Notebook 08: the input of :func:`scaling_trajectory`.)"""
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_SEQUENCE_STEPS)
    size = check_int("size", size, minimum=1, maximum=MAX_SEQUENCE_SIZE)
    drift = check_float("drift", drift, ge=-MAX_DRIFT, le=MAX_DRIFT)
    if spike_step is not None:
        spike_step = check_int("spike_step", spike_step, minimum=0, maximum=num_steps - 1)
    spike_size = check_float("spike_size", spike_size, ge=1.0, le=MAX_SPIKE)
    seed = check_seed("seed", seed)
    if num_steps * size > MAX_SEQUENCE_ELEMENTS:
        raise ValueError(
            f"num_steps * size = {num_steps * size:,} values; at most {MAX_SEQUENCE_ELEMENTS:,} (2**22) are "
            "allowed: choose fewer steps or a smaller size"
        )
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for step in range(num_steps):
        t = torch.randn(size, generator=gen) * 2.0 ** (drift * step)
        if step == spike_step:
            where = int(torch.randint(0, size, (1,), generator=gen))
            t[where] = float(t.abs().max()) * spike_size * (1.0 if t[where] >= 0 else -1.0)
        tensors.append(t)
    return tensors


@dataclass
class ScalingTrajectory:
    """Per-step results of one scaling recipe over a sequence of tensors (:func:`scaling_trajectory`).

    ``amax[i]``: step i's tensor's amax; ``scale[i]``: the scale used at step i; ``saturated[i]``: its
    elements clipped to ±max (:func:`saturation_count`); ``flushed[i]``: its nonzero elements that the
    cast turned into 0 (what a scale too small for the tensor costs at the other end); ``error[i]``: the
    relative RMS error of the quantize-dequantize round trip (:func:`quantization_error`).
    """

    recipe: str
    fmt: str
    history_len: int
    margin: int
    algo: str
    amax: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    saturated: list[int] = field(default_factory=list)
    flushed: list[int] = field(default_factory=list)
    error: list[float] = field(default_factory=list)

    @property
    def num_steps(self) -> int:
        return len(self.scale)

    @property
    def log2_scale(self) -> list[float]:
        """log2 of each step's scale (the widget's y axis)."""
        return [math.log2(s) if s > 0 else (-math.inf if s == 0 else math.nan) for s in self.scale]

    @property
    def saturated_steps(self) -> list[int]:
        """The steps at which at least one element saturated."""
        return [i for i, n in enumerate(self.saturated) if n > 0]

    def mean_error(self, start: int = 0, stop: int | None = None) -> float:
        """Mean relative error over steps ``start`` to ``stop`` (exclusive; default: to the end)."""
        part = self.error[start:stop]
        if not part:
            raise ValueError(f"no steps between {start} and {stop} (the trajectory has {self.num_steps})")
        return sum(part) / len(part)


def _check_tensor_list(tensors) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        if tensors.dim() != 2:
            raise ValueError(
                f"tensors as one tensor must be 2-D (steps, values), got shape {tuple(tensors.shape)}"
            )
        tensors = list(tensors)
    if not isinstance(tensors, (list, tuple)):
        raise ArgumentTypeError(
            "tensors must be a list of tensors (one per step, e.g. make_tensor_sequence()), "
            f"got {type(tensors).__name__}"
        )
    if not tensors:
        raise ValueError("tensors must hold at least one tensor")
    if len(tensors) > MAX_SEQUENCE_STEPS:
        raise ValueError(f"tensors may hold at most {MAX_SEQUENCE_STEPS} steps, got {len(tensors)}")
    out = [_check_tensor(f"tensors[{i}]", t) for i, t in enumerate(tensors)]
    for i, t in enumerate(out):
        if t.numel() == 0:
            raise ValueError(f"tensors[{i}] is empty")
        if t.numel() > MAX_SEQUENCE_SIZE:
            raise ValueError(
                f"tensors[{i}] has {t.numel():,} elements; at most {MAX_SEQUENCE_SIZE:,} per step"
            )
    total = sum(t.numel() for t in out)
    if total > MAX_SEQUENCE_ELEMENTS:
        raise ValueError(f"tensors hold {total:,} values in all; at most {MAX_SEQUENCE_ELEMENTS:,} (2**22)")
    return out


def scaling_trajectory(
    tensors,
    *,
    fmt: str = "fp8_e4m3",
    history_len: int = 16,
    margin: int = 0,
    algo: str = "max",
    recipe: str = "delayed",
) -> ScalingTrajectory:
    """Quantize each step's tensor with one recipe and record scale, saturation and error per step.

    ``recipe="current"`` scales each tensor by its own amax (:func:`tensorwise_scale`: it never
    saturates, but one outlier squeezes every other value towards the subnormals).  ``"delayed"`` uses a
    :class:`DelayedScaling` (``history_len``, ``margin``, ``algo``): the scale comes from earlier steps,
    so a step whose amax jumps saturates, and with ``algo="max"`` an outlier keeps the scale low for the
    next ``history_len`` steps.  ``tensors``: a list of float tensors, one per step (e.g.
    :func:`make_tensor_sequence`), or a 2-D tensor (steps, values).  (Notebook 08.)
    """
    tensors = _check_tensor_list(tensors)
    spec = _check_fmt("fmt", fmt, FP8_FORMATS)
    if not isinstance(recipe, str):
        raise ArgumentTypeError(
            f"recipe must be one of {RECIPES}, got {type(recipe).__name__}: {recipe!r:.80}"
        )
    check_choice("recipe", recipe, RECIPES)
    history = DelayedScaling(spec.name, history_len, margin, algo)  # checks history_len, margin, algo
    margin = history.margin
    traj = ScalingTrajectory(recipe, spec.name, history.history_len, margin, history.algo)
    for t in tensors:
        x = t.detach().to(torch.float32)
        amax = float(x.abs().max())
        if recipe == "current":
            scale = tensorwise_scale(x, spec.name, margin)
        else:
            scale = torch.tensor(history.scale, dtype=torch.float32)
            history.update(amax)
        q = quantize(x, spec.name, scale)
        xq = dequantize(q, scale)
        traj.amax.append(amax)
        traj.scale.append(float(scale))
        traj.saturated.append(saturation_count(x, spec.name, scale))
        traj.flushed.append(int(((q.to(torch.float32) == 0) & (x != 0)).sum()))
        traj.error.append(quantization_error(x, xq))
    return traj


class ScalingExplorer:
    """Widget of :func:`scaling_explorer`: current versus delayed scaling on a sequence with an outlier.

    Controls: ``history_len``, ``margin``, ``spike_step``, ``spike_size`` (a log slider), ``algo``.
    Readout: ``readout`` (HTML).  Figure: ``pane`` (:class:`~amp_lab.widgets.FigurePane`, three panels:
    log2 scale, saturated elements, relative error; both recipes).  Layout: ``widget``.  ``current`` and
    ``delayed`` are the latest :class:`ScalingTrajectory` of each recipe.  CSS classes:
    ``amp-fp8-history``, ``amp-fp8-margin``, ``amp-fp8-spike-step``, ``amp-fp8-spike-size``,
    ``amp-fp8-algo``, ``amp-fp8-readout``, ``amp-fp8-plot``.
    """

    def __init__(
        self,
        *,
        num_steps: int = 48,
        size: int = 1024,
        history_len: int = 16,
        margin: int = 0,
        spike_step: int = 24,
        spike_size: float = 100.0,
        algo: str = "max",
        fmt: str = "fp8_e4m3",
        seed: int = 0,
    ):
        import ipywidgets as widgets


        # Everything is checked before the widget is built, and must lie on the sliders.
        self.num_steps = check_int("num_steps", num_steps, minimum=2, maximum=200)
        self.size = check_int("size", size, minimum=1, maximum=MAX_EXPLORER_SIZE)
        history_len = check_int("history_len", history_len, minimum=1, maximum=64)
        margin = check_int("margin", margin, minimum=0, maximum=8)
        spike_step = check_int("spike_step", spike_step, minimum=0, maximum=self.num_steps - 1)
        spike_size = check_float("spike_size", spike_size, ge=1.0, le=1e4)
        if not isinstance(algo, str):
            raise ArgumentTypeError(f"algo must be one of {ALGOS}, got {type(algo).__name__}")
        algo = check_choice("algo", algo, ALGOS)
        self.fmt = _check_fmt("fmt", fmt, FP8_FORMATS).name
        self.seed = check_seed("seed", seed)
        style = {"description_width": "initial"}
        layout = widgets.Layout(width="420px")
        self.history_len = widgets.IntSlider(
            value=history_len, min=1, max=64, description="history length",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.margin = widgets.IntSlider(
            value=margin, min=0, max=8, description="margin (powers of 2)",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.spike_step = widgets.IntSlider(
            value=spike_step, min=0, max=self.num_steps - 1, description="spike at step",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.spike_size = widgets.FloatLogSlider(
            value=spike_size, base=10, min=0, max=4, step=0.25, description="spike size (x amax)",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.algo = widgets.Dropdown(
            options=list(ALGOS), value=algo, description="history reduced by", style=style
        )
        for control, css in (
            (self.history_len, "amp-fp8-history"),
            (self.margin, "amp-fp8-margin"),
            (self.spike_step, "amp-fp8-spike-step"),
            (self.spike_size, "amp-fp8-spike-size"),
            (self.algo, "amp-fp8-algo"),
        ):
            control.add_class(css)
            control.observe(self._on_change, names="value")
        self.readout = widgets.HTML()
        self.readout.add_class("amp-fp8-readout")
        self.pane = FigurePane(figsize=(7.0, 5.4), dpi=80)
        self.pane.image.add_class("amp-fp8-plot")
        self._build_figure()
        self.widget = widgets.VBox(
            [
                self.history_len,
                self.margin,
                self.spike_step,
                self.spike_size,
                self.algo,
                self.readout,
                self.pane.image,
            ]
        )
        self.current: ScalingTrajectory | None = None
        self.delayed: ScalingTrajectory | None = None
        self.update()

    def _build_figure(self) -> None:
        fig = self.pane.figure
        axes = fig.subplots(3, 1, sharex=True)
        self.axes = axes
        steps = list(range(self.num_steps))
        self._lines = {}
        for ax, key, ylabel in zip(
            axes,
            ("log2_scale", "saturated", "error"),
            ("log2(scale)", "saturated", "relative error"),
            strict=True,
        ):
            for recipe, color in (("current", "C0"), ("delayed", "C3")):
                (line,) = ax.step(steps, [1.0] * len(steps), where="mid", color=color, lw=1.4, label=recipe)
                self._lines[(key, recipe)] = line
            ax.set_ylabel(ylabel, fontsize=9)
            ax.grid(alpha=0.3)
        axes[2].set_yscale("log")
        axes[2].set_xlabel("step")
        axes[0].legend(loc="lower left", fontsize=8)
        self._spike_lines = [ax.axvline(0, color="0.5", ls=":", lw=1) for ax in axes]
        self._title = axes[0].set_title("", fontsize=10)
        fig.subplots_adjust(left=0.12, right=0.97, bottom=0.09, top=0.93, hspace=0.15)

    def _on_change(self, change) -> None:
        self.update()

    def update(self) -> tuple[ScalingTrajectory, ScalingTrajectory]:
        """Recompute both recipes with the controls' values; refresh the readout and the figure."""
        spike = int(self.spike_step.value)
        tensors = make_tensor_sequence(
            self.num_steps,
            size=self.size,
            spike_step=spike,
            spike_size=float(self.spike_size.value),
            seed=self.seed,
        )
        kwargs = dict(
            fmt=self.fmt,
            history_len=int(self.history_len.value),
            margin=int(self.margin.value),
            algo=self.algo.value,
        )
        self.current = scaling_trajectory(tensors, recipe="current", **kwargs)
        self.delayed = scaling_trajectory(tensors, recipe="delayed", **kwargs)
        for recipe, traj in (("current", self.current), ("delayed", self.delayed)):
            self._lines[("log2_scale", recipe)].set_ydata(traj.log2_scale)
            self._lines[("saturated", recipe)].set_ydata(traj.saturated)
            self._lines[("error", recipe)].set_ydata([max(e, 1e-6) for e in traj.error])
        for ax in self.axes:
            ax.relim()
            ax.autoscale_view()
        for line in self._spike_lines:
            line.set_xdata([spike, spike])
        self._title.set_text(f"{FP8_FORMATS[self.fmt].label}: outlier at step {spike} (dotted)")
        self.readout.value = _explorer_readout(self.current, self.delayed, spike)
        self.pane.refresh()
        return self.current, self.delayed


def _explorer_readout(current: ScalingTrajectory, delayed: ScalingTrajectory, spike: int) -> str:
    """A table composed from the two trajectories: saturation and error at the spike and after it."""
    n_after = current.num_steps - spike - 1

    def after(t: ScalingTrajectory) -> str:  # no steps after a spike at the last step
        return f"{t.mean_error(spike + 1) if n_after else math.nan:.3g}"

    rows = [
        ("saturated at the spike step", f"{current.saturated[spike]}", f"{delayed.saturated[spike]}"),
        ("flushed to zero at the spike step", f"{current.flushed[spike]}", f"{delayed.flushed[spike]}"),
        ("relative error at the spike step", f"{current.error[spike]:.3g}", f"{delayed.error[spike]:.3g}"),
        (f"mean relative error, {n_after} steps after it", after(current), after(delayed)),
        ("steps with saturation", f"{len(current.saturated_steps)}", f"{len(delayed.saturated_steps)}"),
    ]
    return table_html(rows, ["", "current", "delayed"])


def scaling_explorer(
    *,
    num_steps: int = 48,
    size: int = 1024,
    history_len: int = 16,
    margin: int = 0,
    spike_step: int = 24,
    spike_size: float = 100.0,
    algo: str = "max",
    fmt: str = "fp8_e4m3",
    seed: int = 0,
) -> ScalingExplorer:
    """Sliders for current versus delayed scaling (notebook 08): history length (1 to 64), margin (0 to 8),
    the outlier's step and size (1 to 10**4 times the tensor's amax) and the history's reduction; every
    change recomputes :func:`scaling_trajectory` for both recipes on :func:`make_tensor_sequence`
    (``num_steps`` at most 200, tensors of ``size`` values, at most 4096) and redraws scale, saturation
    and error.  The notebook cell ends with ``explorer.widget``."""
    return ScalingExplorer(
        num_steps=num_steps,
        size=size,
        history_len=history_len,
        margin=margin,
        spike_step=spike_step,
        spike_size=spike_size,
        algo=algo,
        fmt=fmt,
        seed=seed,
    )
