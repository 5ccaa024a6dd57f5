"""FP8's element formats and the pieces every FP8 or block recipe shares (notebooks 08, 11): the format
table, argument checks, tensorwise scales, torchao's saturating cast (:func:`quantize`), the error of a
quantization, where FP8 matmuls run, and the swap of linear layers for converted ones."""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import ArgumentTypeError, check_choice, check_instance, check_int, check_scale
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
FP8_GEMM_MULTIPLE = 16  # in/out features of linear layers that suit FP8 GEMMs


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


def column_major(t: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column by column: the layout ``_scaled_mm`` wants for its second operand."""
    return t.t().contiguous().t()


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
