"""The race: FP32 against AMP, timed honestly, and what the result means.  (``06_timing_race``)

The timer itself (warm-up, synchronisation, interleaved samples, the interval of a speedup) lives in
:mod:`amp_lab.timing`; this module races with it:

* :func:`race_matmul` and :func:`race_mlp` race one configuration and return a :class:`RaceResult`, whose
  ``speedup`` is the median of the per-round ratios FP32 / AMP and whose ``speedup_interval`` says how sure
  that is (``outcome``: "faster", "slower" or "too close to call");
* :func:`sweep` races a range of sizes (matmul size, MLP width, or batch) and finds the ceiling;
* :func:`race_sizes` chooses the sizes from the machine's facts (a CPU that multiplies bf16 natively gets
  sizes where bf16 can win; one that emulates it gets small ones);
* :func:`explain`, :func:`sweep_summary`, :func:`memory_summary` and the widget's card compose every
  sentence that interprets a result from the measurement and the machine's facts, so an AVX2 laptop, a
  bf16 CPU and a GPU each read a true story.

Every public name of :mod:`amp_lab.timing` that this module used to define stays importable from here.
"""

from __future__ import annotations

import contextlib
import copy
import html
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from . import device
from ._checks import (
    MAX_SECONDS,
    ArgumentTypeError,
    check_axes,
    check_bool,
    check_callable,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_int_sequence,
)
from .cost import _mlp_matmul_flops
from .cpus import CPU_FEATURES, cpu_has_native, cpu_native_labels
from .device import (
    amp_dtype,
    check_fits,
    cuda_available_bytes,
    dtype_name,
    get_device,
    parse_dtype,
    seeded,
    torch_threads,
)
from .fp8 import (  # imported here: the race needs it only for this contestant
    FP8_GEMM_MULTIPLE,
    quantize,
    tensorwise_scale,
)
from .gpus import (
    amp_dtype_for,
    bf16_hardware,
    check_capability,
    datasheet_entry,
    fp8_matmul_support,
    tensor_core_generation,
)
from .hardware import tf32_matmul
from .progress import progress
from .timing import (  # noqa: F401  (re-exported: these lived here before amp_lab.timing existed)
    DEFAULT_MAX_TIME_S,
    Contestant,
    RaceProgress,
    Regime,
    SpeedupEstimate,
    Timing,
    _CudaEventSampler,
    _jsonable,
    _plural,
    _quantile,
    _sampler,
    _tf32_matmul,
    _tf32_matmul_enabled,
    _tf32_text,
    _WallClockSampler,
    check_target_rel_width,
    classify_regime,
    format_bytes,
    format_ratio,
    format_seconds,
    measure,
    regime_for,
    speedup_estimate,
    timing_context,
)
from .timing import check_budget as _check_budget
from .timing import check_planned_time as _check_planned_time
from .widgets import table_html

IN_FEATURES = 1024
NUM_CLASSES = 10
CONFIDENCE = 0.95

__all__ = [
    "CONFIDENCE",
    "Ceiling",
    "Contestant",
    "RaceProgress",
    "RaceResult",
    "RaceSizes",
    "RaceWidget",
    "SpeedupEstimate",
    "SweepResult",
    "Timing",
    "datasheet_ceiling",
    "contestant_names",
    "precision_choices",
    "MAX_GEMM_DIM",
    "MAX_NUMEL",
    "RACE_KINDS",
    "Roofline",
    "elementwise_bytes",
    "FP8_GEMM_MULTIPLE",
    "fp8_matmul_bytes",
    "fp8_summary",
    "race_fp8_matmul",
    "elementwise_intensity",
    "matmul_intensity",
    "measure_roofline",
    "plot_roofline",
    "race_elementwise",
    "roofline_summary",
    "tf32_summary",
    "precision_warning",
    "cuda_available_bytes",
    "describe_reference",
    "explain",
    "format_bytes",
    "format_seconds",
    "load_reference_results",
    "matmul_bytes",
    "measure",
    "memory_summary",
    "mlp_bytes",
    "mlp_step_flops",
    "native_arithmetic",
    "plot_memory",
    "plot_sweep",
    "race_matmul",
    "race_mlp",
    "race_sizes",
    "race_widget",
    "reference_table_html",
    "result_card_html",
    "seed_model",
    "sizes_for",
    "speedup_estimate",
    "sweep",
    "sweep_summary",
    "timing_context",
]


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RaceResult:
    """One race: FP32 against AMP (and TF32 on CUDA), with everything needed to read it.

    ``speedup`` is the median of the per-round ratios FP32 time / AMP time (above 1: AMP is faster) and
    ``speedup_interval`` the :class:`~amp_lab.timing.SpeedupEstimate` it comes from, so every number and
    sentence about this race reads the same measurement.
    """

    kind: str  # "matmul", "mlp", "elementwise" or "fp8_matmul" (race_fp8_matmul: a third contestant, "fp8")
    params: dict  # {"n": ...}, {"numel": ...} or {"width": ..., "batch": ..., "in_features": ..., "num_classes": ...}
    dtype: torch.dtype
    timings: dict  # "fp32", "amp" and on CUDA GPUs with TF32 "tf32" -> Timing
    flops: float  # floating-point operations per call (matmul, elementwise) or per training step (mlp)
    memory: dict | None  # {"fp32": bytes, "amp": bytes, ..., "method": str}
    context: dict
    confidence: float = CONFIDENCE  # of the speedup's interval

    def __post_init__(self):
        check_choice("kind", self.kind, list(RACE_KINDS))
        for arg, value in (("params", self.params), ("timings", self.timings), ("context", self.context)):
            if not isinstance(value, dict):
                raise ArgumentTypeError(f"{arg} must be a dict, got {type(value).__name__}: {value!r:.80}")
        for name in ("fp32", "amp"):
            if not isinstance(self.timings.get(name), Timing):
                raise ValueError(f"timings must hold a Timing under {name!r} (as race_matmul's do), got keys {list(self.timings)}")
        # Every number a RaceResult prints comes from these, so they are checked here: FLOPs per call are a
        # finite count >= 0, and the interval's confidence a probability strictly between 0 and 1.
        object.__setattr__(self, "flops", check_float("flops", self.flops, ge=0))
        object.__setattr__(self, "confidence", check_float("confidence", self.confidence, gt=0, lt=1))

    @property
    def fp32(self) -> Timing:
        return self.timings["fp32"]

    @property
    def amp(self) -> Timing:
        return self.timings["amp"]

    @property
    def tf32(self) -> Timing | None:
        return self.timings.get("tf32")

    @property
    def speedup_interval(self) -> SpeedupEstimate:
        """The speedup of AMP over FP32 with its interval, from the interleaved pairs of samples."""
        return speedup_estimate(self.fp32, self.amp, confidence=self.confidence)

    @property
    def outcome(self) -> str:
        """``"faster"``, ``"slower"`` or ``"too close to call"``: what the interval says about AMP."""
        return self.speedup_interval.outcome

    @property
    def speedup(self) -> float:
        """Median of the per-round ratios FP32 time / AMP time: above 1, AMP is faster."""
        return self.speedup_interval.ratio

    @property
    def fp8(self) -> Timing | None:
        """The FP8 GEMM's timing (:func:`race_fp8_matmul`), None in other races."""
        return self.timings.get("fp8")

    @property
    def fp8_speedup_interval(self) -> SpeedupEstimate | None:
        """The speedup of the FP8 GEMM over the AMP dtype's (AMP time / FP8 time: above 1, FP8 is faster),
        with its interval; None in a race without an FP8 contestant."""
        return None if self.fp8 is None else speedup_estimate(self.amp, self.fp8, confidence=self.confidence)

    @property
    def fp8_speedup(self) -> float | None:
        est = self.fp8_speedup_interval
        return None if est is None else est.ratio

    @property
    def speedup_vs_tf32_interval(self) -> SpeedupEstimate | None:
        return None if self.tf32 is None else speedup_estimate(self.tf32, self.amp, confidence=self.confidence)

    @property
    def speedup_vs_tf32(self) -> float | None:
        est = self.speedup_vs_tf32_interval
        return None if est is None else est.ratio

    @property
    def tflops(self) -> dict:
        """Achieved TFLOP/s of each contestant (from its median)."""
        return {name: self.flops / t.median / 1e12 for name, t in self.timings.items()}

    def bytes_moved(self, name: str) -> int:
        """At least how many bytes contestant ``name`` moves through memory per call or step
        (:func:`step_bytes`): what a roofline compares with the bandwidth."""
        if name == "fp8":  # E4M3 operands (1 byte) made before the race, a bfloat16 result
            n = self.params["n"]
            return _gemm_bytes(n, n, n, 1, 2)
        return step_bytes(self.kind, self.params, self.dtype if name == "amp" else None)

    @property
    def regimes(self) -> dict:
        """Contestant name -> :class:`~amp_lab.timing.Regime`: whether its median call was compute-,
        memory- or launch-bound, from the datasheet of the GPU that ran it ("unknown" elsewhere)."""
        peak = {"fp32": torch.float32, "tf32": "tf32", "amp": self.dtype, "fp8": "fp8"}
        return {
            name: regime_for(t.median, self.flops, self.bytes_moved(name), peak[name], self.context,
                             unit=_unit(self.kind))
            for name, t in self.timings.items()
        }

    def intensity(self, name: str) -> float:
        """Arithmetic intensity of contestant ``name``: FLOPs per byte moved (:meth:`bytes_moved`), where a
        roofline places it.  (``06_timing_race``)"""
        return self.flops / self.bytes_moved(name)

    @property
    def size(self) -> str:
        if self.kind in ("matmul", "fp8_matmul"):
            return f"n={self.params['n']}"
        if self.kind == "elementwise":
            return f"numel={self.params['numel']}"
        return f"width={self.params['width']}, batch={self.params['batch']}"

    def matches(self, kind: str, params: dict, dtype: torch.dtype, device, threads: int) -> bool:
        """Whether this result raced exactly that configuration (kind, sizes, AMP dtype, device, threads)."""
        return (
            self.kind == kind
            and all(self.params.get(k) == v for k, v in params.items())
            and self.dtype == dtype
            and self.context.get("device") == str(device)
            and self.context.get("threads") == threads
        )

    def to_dict(self) -> dict:
        fp8 = {} if self.fp8 is None else {
            "fp8_speedup": self.fp8_speedup, "fp8_speedup_interval": self.fp8_speedup_interval.to_dict(),
        }  # fmt: skip
        return _jsonable(
            {
                "kind": self.kind,
                "params": self.params,
                "dtype": self.dtype,
                "speedup": self.speedup,
                "speedup_interval": self.speedup_interval.to_dict(),
                "outcome": self.outcome,
                "speedup_vs_tf32": self.speedup_vs_tf32,
                "speedup_vs_tf32_interval": (
                    None if self.tf32 is None else self.speedup_vs_tf32_interval.to_dict()
                ),
                "tflops": self.tflops,
                "flops": self.flops,
                "memory": self.memory,
                "timings": {k: t.to_dict() for k, t in self.timings.items()},
                "context": self.context,
                **fp8,
            }
        )

    def __str__(self) -> str:
        unit = _unit(self.kind)
        lines = [f"race {self.kind} {self.size}, AMP dtype {dtype_name(self.dtype)} on {self.context['device']}"]
        for name, t in self.timings.items():
            lines.append(
                f"  {name:>4}: {format_seconds(t.median)}/{unit} (IQR {format_seconds(t.iqr)}), "
                f"{self.tflops[name]:.3g} TFLOP/s"
            )
        lines.append(f"  speedup (FP32 / AMP): {self.speedup_interval}: {self.outcome}")
        if self.tf32 is not None:
            lines.append(f"  speedup (TF32 / AMP): {self.speedup_vs_tf32_interval}")
        if self.fp8 is not None:
            lines.append(f"  speedup (AMP / FP8): {self.fp8_speedup_interval}: {self.fp8_speedup_interval.outcome}")
        if self.memory:
            mem = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.memory.items() if k != "method")
            lines.append(f"  memory: {mem} ({self.memory['method']})")
        n = len(self.fp32.samples)
        lines.append(
            f"  {_plural(n, 'interleaved round')} after {_plural(self.fp32.warmup, 'warm-up call')}, "
            f"{_plural(self.context['threads'], 'thread')}, TF32 for FP32: {_tf32_text(self.context)}, torch {self.context['torch']}"
        )
        return "\n".join(lines)


def _reusable(reuse, kind: str, params: dict, dtype: torch.dtype, dev: torch.device, num_threads) -> RaceResult | None:
    """The first result in ``reuse`` that raced this very configuration, or None."""
    if reuse is None:
        return None
    if isinstance(reuse, RaceResult):
        reuse = [reuse]
    elif isinstance(reuse, SweepResult):
        reuse = reuse.results
    elif not isinstance(reuse, (list, tuple)):
        raise ArgumentTypeError(
            f"reuse must be a RaceResult, a SweepResult or a list of them (or None), got {type(reuse).__name__}: "
            f"{reuse!r:.80}"
        )
    threads = num_threads or torch.get_num_threads()
    for i, r in enumerate(reuse):
        if isinstance(r, SweepResult):
            found = _reusable(r, kind, params, dtype, dev, num_threads)
            if found is not None:
                return found
            continue
        if not isinstance(r, RaceResult):
            raise ValueError(
                f"reuse[{i}] must be a RaceResult or a SweepResult (from race_matmul, race_mlp or sweep), "
                f"got {type(r).__name__}"
            )
        if r.matches(kind, params, dtype, dev, threads):
            return r
    return None


# ----------------------------------------------------------------------------------------------
# Memory: refuse what cannot fit, before anything is allocated
# ----------------------------------------------------------------------------------------------


def _available_bytes(dev: torch.device) -> int | None:
    """Memory a new allocation on ``dev`` can have: :func:`amp_lab.device.available_bytes` (looked up at
    call time, so the one helper is the one a test replaces)."""
    return device.available_bytes(dev)


RACE_KINDS = ("matmul", "mlp", "elementwise", "fp8_matmul")
# The largest matrix dimension (matmul_intensity, step_bytes) and element count (race_elementwise) the
# helpers accept: far beyond any memory, small enough that every FLOP and byte count stays exact.
MAX_GEMM_DIM = 2**31
MAX_NUMEL = 2**40
_STORED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _unit(kind: str) -> str:
    return "step" if kind == "mlp" else "call"


def _itemsize(name: str, dtype) -> int:
    return torch.finfo(parse_dtype(dtype, allowed=_STORED_DTYPES, name=name)).bits // 8


def _gemm_bytes(m: int, n: int, k: int, in_bytes: int, out_bytes: int) -> int:
    """The least traffic of ``C = A @ B``: A (m x k) and B (k x n) read once, C (m x n) written once."""
    return (m * k + k * n) * in_bytes + m * n * out_bytes


def matmul_intensity(m: int, n: int, k: int, dtype=torch.float32, *, out_dtype=None) -> float:
    """Arithmetic intensity of ``C = A @ B`` with A m x k and B k x n: its ``2mnk`` FLOPs over the bytes of
    A, B and C, in FLOP per byte.  (``06_timing_race``, the memory-bound regime)

    A and B are stored in ``dtype`` and C in ``out_dtype`` (default: ``dtype``; float32 with 16-bit
    inputs is a GEMM that writes its FP32 accumulator out).  Each matrix is counted once, the least
    traffic there can be, so a real kernel's intensity is at most this.  Compare it with a machine's
    ridge point (:attr:`Roofline.ridge`): below, the matmul is memory-bound; above, compute-bound.

    >>> round(matmul_intensity(1024, 1024, 1024, torch.float32), 2)  # 2 * 1024**3 / (3 * 1024**2 * 4)
    170.67
    """
    m = check_int("m", m, minimum=1, maximum=MAX_GEMM_DIM)
    n = check_int("n", n, minimum=1, maximum=MAX_GEMM_DIM)
    k = check_int("k", k, minimum=1, maximum=MAX_GEMM_DIM)
    a = _itemsize("dtype", dtype)
    c = a if out_dtype is None else _itemsize("out_dtype", out_dtype)
    return 2 * m * n * k / _gemm_bytes(m, n, k, a, c)


def elementwise_intensity(dtype=torch.float32) -> float:
    """Arithmetic intensity of ``torch.add(a, b)``: one FLOP per element over the bytes of two inputs read
    and one output written, all in ``dtype`` (float32, float16 or bfloat16): ``1 / (3 * itemsize)`` FLOP
    per byte, far below any machine's ridge point, so an elementwise op is memory-bound everywhere.
    (``06_timing_race``)"""
    return 1 / (3 * _itemsize("dtype", dtype))


def matmul_bytes(n: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes ``race_matmul(n)`` keeps alive at its peak: A, B and C in FP32, plus A, B and C in
    the low-precision ``dtype`` (autocast's casts of the inputs and its result)."""
    n = check_int("n", n, minimum=1)
    low = torch.finfo(parse_dtype(dtype)).bits // 8
    return n * n * (3 * 4 + 3 * low)


def step_bytes(kind: str, params: dict, dtype: torch.dtype | None) -> int:
    """A lower bound on the bytes one call of a race moves through memory: ``dtype`` None is the FP32
    (or TF32) contestant, a 16-bit dtype the AMP one, casts included.  (The roofline in :func:`explain`
    and :func:`plot_roofline`.)

    * ``"matmul"`` (``params["n"]``): FP32 reads A and B and writes C (12 n² bytes); AMP also reads A and
      B in FP32, writes their 16-bit copies, reads those and writes a 16-bit C (8 n² + 10 n²).
    * ``"fp8_matmul"`` (``params["n"]``, :func:`race_fp8_matmul`): each contestant's inputs are already
      in its dtype, so FP32 moves 12 n² bytes and the 16-bit GEMM 6 n² (the FP8 contestant:
      :meth:`RaceResult.bytes_moved`).
    * ``"elementwise"`` (``params["numel"]``, :func:`race_elementwise`): ``torch.add`` reads two tensors
      and writes one, each ``numel`` elements in the contestant's dtype (12 or 6 bytes per element; the
      16-bit copies were made before the race, so there are no casts).
    * ``"mlp"`` (``params`` of :func:`race_mlp`): Adam reads each parameter, its gradient and two moments
      and writes three of them back (28 bytes per parameter), forward and backward read the weights
      (FP32, or a 16-bit copy made from them) and backward writes the FP32 gradient; every activation is
      written once and read once forward and backward, in the contestant's dtype.
    """
    kind = check_choice("kind", kind, list(RACE_KINDS))
    if not isinstance(params, dict):
        raise ArgumentTypeError(f"params must be a dict such as {{'n': 1024}}, got {type(params).__name__}: {params!r:.80}")
    needed = {"matmul": ("n",), "fp8_matmul": ("n",), "elementwise": ("numel",), "mlp": ("width", "batch")}[kind]
    missing = [k for k in needed if k not in params]
    if missing:
        raise ValueError(f"params for kind={kind!r} must give {', '.join(map(repr, needed))}; missing {', '.join(map(repr, missing))}")
    low = 4 if dtype is None else torch.finfo(parse_dtype(dtype)).bits // 8
    if kind == "matmul":
        n = check_int("params['n']", params["n"], minimum=1, maximum=MAX_GEMM_DIM)
        if dtype is None:
            return _gemm_bytes(n, n, n, 4, 4)
        return 8 * n * n + 2 * low * n * n + _gemm_bytes(n, n, n, low, low)  # casts: read FP32, write 16-bit
    if kind == "fp8_matmul":
        n = check_int("params['n']", params["n"], minimum=1, maximum=MAX_GEMM_DIM)
        return _gemm_bytes(n, n, n, low, low)  # no casts: the inputs were converted before the race
    if kind == "elementwise":
        numel = check_int("params['numel']", params["numel"], minimum=1, maximum=MAX_NUMEL)
        return 3 * low * numel
    i = check_int("params['in_features']", params.get("in_features", IN_FEATURES), minimum=1)
    c = check_int("params['num_classes']", params.get("num_classes", NUM_CLASSES), minimum=1)
    w = check_int("params['width']", params["width"], minimum=1)
    b = check_int("params['batch']", params["batch"], minimum=1)
    n_params = i * w + w + w * c + c
    weights = 8 * n_params if dtype is None else 4 * n_params + 3 * low * n_params
    activations = b * (i + 2 * w + c)  # input, pre- and post-ReLU hidden, logits
    return 28 * n_params + weights + 4 * n_params + 4 * low * activations


def mlp_bytes(
    width: int,
    batch: int,
    dtype: torch.dtype = torch.bfloat16,
    *,
    in_features: int = IN_FEATURES,
    num_classes: int = NUM_CLASSES,
    contestants: int = 2,
) -> int:
    """A generous estimate of what ``race_mlp`` needs: per contestant the parameters, gradients
    and Adam's two moments (FP32), autocast's low-precision weight copies, and activations."""
    width, batch, in_features, num_classes = _mlp_sizes(width, batch, in_features, num_classes)
    contestants = check_int("contestants", contestants, minimum=1, maximum=3)
    low = torch.finfo(parse_dtype(dtype)).bits // 8
    params = in_features * width + width + width * num_classes + num_classes
    activations = batch * (in_features + 3 * width + 3 * num_classes)
    per_contestant = 16 * params + low * params + 4 * activations + low * batch * in_features
    return contestants * per_contestant + 4 * batch * in_features


_check_fits = check_fits  # the one memory check (amp_lab.device), under the name this module used


# ----------------------------------------------------------------------------------------------
# race_matmul
# ----------------------------------------------------------------------------------------------


def _operands(n: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=dev).manual_seed(0)
    A = torch.randn(n, n, device=dev, generator=gen)
    B = torch.randn(n, n, device=dev, generator=gen)
    return A, B


def contestant_names(device_type: str, capability=None) -> tuple[str, ...]:
    """Who races on a device: ``("fp32", "amp")`` everywhere, plus ``"tf32"`` on CUDA GPUs whose Tensor
    Cores take TF32 (Ampere, compute capability 8.0, and later).  Before Ampere an FP32 matmul "with TF32
    on" is plain FP32, so a TF32 contestant there would only race FP32 against itself."""
    device_type = check_choice("device_type", device_type, ["cpu", "cuda", "mps"])
    if device_type == "cuda" and capability is not None and "tf32" in tensor_core_generation(capability).precisions:
        return ("fp32", "amp", "tf32")
    return ("fp32", "amp")


def _device_facts(dev: torch.device) -> tuple[str, tuple[int, int] | None]:
    """(device type, CUDA compute capability or None): the facts the contestants are chosen from.  One
    function, so a CPU test can hand a race a GPU's facts and run the CUDA race's contestant logic."""
    return dev.type, (tuple(torch.cuda.get_device_capability(dev)) if dev.type == "cuda" else None)


def _tf32_context(device_type: str, enabled: bool):
    """The context a contestant runs in: on CUDA a defined TF32 setting (torch's two records agreeing,
    so cuBLAS can read it), elsewhere nothing (TF32 is a CUDA setting)."""
    if device_type != "cuda":
        return contextlib.nullcontext
    return lambda: tf32_matmul(enabled)


def _contestants(run: dict, device_type: str, capability) -> dict:
    """The race's contestants from ``run`` (name -> callable or factory): those :func:`contestant_names`
    picks for the device, each with its TF32 context.  On CUDA every contestant runs with a defined TF32
    setting: FP32 and AMP with TF32 off (so an FP32 matmul left in AMP's step is plain FP32 too), TF32 on."""
    return {
        name: Contestant(run[name], _tf32_context(device_type, name == "tf32"))
        for name in contestant_names(device_type, capability)
    }


# A race samples until its speedup's interval is about +-5% wide, or this many seconds have passed.
RACE_TARGET_REL_WIDTH = 0.1
RACE_MAX_TIME_S = 20.0


def _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width=None, max_time_s=None,
                  callback=None):  # fmt: skip
    """Check a race's arguments before anything is allocated or run: the device, the dtype and the budget
    (``timing.check_budget``: repeats and warm-up calls up to ``MAX_REPEATS``, ``min_sample_s`` up to
    ``MAX_SAMPLE_S``, ``max_time_s`` up to ``MAX_SECONDS``, and minimum rounds that fit in ``MAX_SECONDS``)."""
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else parse_dtype(dtype)
    _, repeats, _, min_sample_s, _ = _check_budget(warmup, repeats, min_sample_s, num_threads)
    if target_rel_width is not None:
        check_target_rel_width(target_rel_width)
    if max_time_s is not None:
        check_float("max_time_s", max_time_s, gt=0, le=MAX_SECONDS)
    check_callable("callback", callback, optional=True)
    _check_planned_time(repeats, len(contestant_names(*_device_facts(dev))), min_sample_s)
    return dev, dtype


def _sampling(target_rel_width, max_time_s) -> dict:
    """measure's arguments for "sample until the interval is narrow or the budget is spent"."""
    if target_rel_width is None:
        return {}
    return {"target_rel_width": target_rel_width, "max_time_s": max_time_s, "baseline": "fp32"}


def _run_race(kind, params, size, dtype, dev, contestants, flops, budget, memory=None, **extra) -> RaceResult:
    """Time ``contestants`` (``measure``, sampling as ``budget`` asks) and wrap them as a ``RaceResult``: the
    one tail of every race.  ``budget`` is ``(warmup, repeats, min_sample_s, num_threads, callback,
    target_rel_width, max_time_s)``; ``size`` and ``extra`` go into each timing's context."""
    warmup, repeats, min_sample_s, num_threads, callback, target_rel_width, max_time_s = budget
    timings = measure(
        contestants,
        device=dev,
        warmup=warmup,
        repeats=repeats,
        min_sample_s=min_sample_s,
        num_threads=num_threads,
        callback=callback,
        extra_context={"race": kind, "size": size, "amp_dtype": dtype_name(dtype), **extra},
        **_sampling(target_rel_width, max_time_s),
    )
    return RaceResult(kind=kind, params=params, dtype=dtype, timings=timings, flops=flops, memory=memory,
                      context=timings["fp32"].context)  # fmt: skip


def race_matmul(
    n: int,
    *,
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
) -> RaceResult:
    """Race ``C = A @ B`` (n x n, FP32 inputs) without and with autocast.  (``06_timing_race``)

    The AMP contestant includes autocast's casts of A and B, as a model's matmuls do.  ``dtype``
    is float16 or bfloat16 (default: ``amp_dtype(device)``).  On CUDA the FP32 and AMP contestants run
    with TF32 off and, on GPUs with TF32 Tensor Cores (Ampere and later, :func:`contestant_names`), a
    third contestant, ``"tf32"``, runs the FP32 matmul with TF32 on (``hardware.tf32_matmul``).

    At least ``repeats`` interleaved rounds; then, while the speedup's interval is wider than
    ``target_rel_width`` (0.1: about +-5%), more rounds, until ``max_time_s`` seconds have passed
    (``target_rel_width=None``: exactly ``repeats`` rounds).  ``reuse``: results already measured
    (RaceResults or SweepResults); one that raced this very configuration is returned instead of racing
    again, so a notebook that refers to one configuration twice reads one measurement.
    """
    n = check_int("n", n, minimum=1)
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s,
                               callback)  # fmt: skip
    found = _reusable(reuse, "matmul", {"n": n}, dtype, dev, num_threads)
    if found is not None:
        return found
    _check_fits(
        matmul_bytes(n, dtype),
        dev,
        f"race_matmul(n={n})",
        f"choose n <= {_largest_fitting_n(dev, dtype)}",
    )
    A, B = _operands(n, dev)

    def fp32():
        return A @ B

    def amp():
        with torch.autocast(dev.type, dtype=dtype):
            return A @ B

    contestants = _contestants({"fp32": fp32, "amp": amp, "tf32": fp32}, *_device_facts(dev))
    budget = (warmup, repeats, min_sample_s, num_threads, callback, target_rel_width, max_time_s)
    return _run_race("matmul", {"n": n}, f"n={n}", dtype, dev, contestants, 2.0 * n**3, budget)


def _largest_fitting_n(dev: torch.device, dtype: torch.dtype) -> int:
    available = _available_bytes(dev) or 0
    per = matmul_bytes(1, dtype)
    return max(1, int(math.sqrt(0.9 * available / per)))


# ----------------------------------------------------------------------------------------------
# The memory-bound regime: an elementwise race, and this machine's measured roofline
# ----------------------------------------------------------------------------------------------


def elementwise_bytes(numel: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes ``race_elementwise(numel)`` keeps alive: two inputs and an output in FP32 and the same three
    in the low-precision ``dtype``."""
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    return 3 * numel * (4 + _itemsize("dtype", dtype))


def _elementwise_operands(numel: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # Uniform draws: about twice as fast to make as normal ones, and an add's speed does not depend on them.
    gen = torch.Generator(device=dev).manual_seed(0)
    return torch.rand(numel, device=dev, generator=gen), torch.rand(numel, device=dev, generator=gen)


def race_elementwise(
    numel: int,
    *,
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
) -> RaceResult:
    """Race ``torch.add(a, b)`` on ``numel`` elements stored in FP32 against the same op on tensors stored
    in ``dtype`` (float16 or bfloat16; default ``amp_dtype(device)``).  (``06_timing_race``)

    The memory-bound regime: an add does one FLOP per element and moves 12 bytes of it in FP32, 6 in a
    16-bit dtype (:func:`elementwise_intensity`), so the bytes set its pace, not the arithmetic.  There is
    no autocast here: autocast has no rule for ``add`` (it runs in its inputs' dtype), so what a model
    gains on such ops comes from the dtype its tensors are *stored* in.  The contestants are therefore the
    op on FP32 tensors (``"fp32"``) and the op on the same values already converted to ``dtype``
    (``"amp"``: the conversion is not timed).  Each writes into an output allocated once, as a GPU's
    caching allocator would hand back the same block, so a sample times the op and not the allocator.
    TF32 applies to matmuls only; on CUDA both contestants run with it off, as in :func:`race_matmul`,
    and the context records that setting.  Memory (:func:`elementwise_bytes`) is checked before anything
    is allocated; ``numel`` is at most ``MAX_NUMEL``.  Sampling and ``reuse`` work as in
    :func:`race_matmul`.
    """
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s,
                               callback)  # fmt: skip
    found = _reusable(reuse, "elementwise", {"numel": numel}, dtype, dev, num_threads)
    if found is not None:
        return found
    per = elementwise_bytes(1, dtype)
    _check_fits(
        elementwise_bytes(numel, dtype), dev, f"race_elementwise(numel={numel})",
        f"choose numel <= {max(1, int(0.9 * (_available_bytes(dev) or 0) / per))}",
    )  # fmt: skip
    a, b = _elementwise_operands(numel, dev)
    a_low, b_low = a.to(dtype), b.to(dtype)
    c, c_low = torch.empty_like(a), torch.empty_like(a_low)

    def fp32():
        return torch.add(a, b, out=c)

    def amp():
        return torch.add(a_low, b_low, out=c_low)

    off = _tf32_context(dev.type, False)
    contestants = {"fp32": Contestant(fp32, off), "amp": Contestant(amp, off)}
    budget = (warmup, repeats, min_sample_s, num_threads, callback, target_rel_width, max_time_s)
    return _run_race("elementwise", {"numel": numel}, f"numel={numel}", dtype, dev, contestants, float(numel), budget,
                     op="torch.add")  # fmt: skip


@dataclass(frozen=True)
class Roofline:
    """This machine's roof, measured (:func:`measure_roofline`): the FLOP/s of a large FP32 matmul and the
    bytes per second of the faster of a large copy and a large add.  (``06_timing_race``)

    ``ridge`` (FLOP per byte) is where the two roofs meet: an op with a lower arithmetic intensity is
    memory-bound here, one with a higher intensity compute-bound.  Both roofs are what torch achieved on
    this machine with this thread count, not a datasheet's promise."""

    peak_flops: float  # FLOP/s of an n x n FP32 matmul (fastest sample)
    bytes_per_s: float  # the faster of copy (8 bytes per element) and add (12 bytes per element)
    matmul_n: int
    numel: int
    timings: dict  # "matmul", "copy", "add" -> Timing
    context: dict

    def __post_init__(self):
        object.__setattr__(self, "peak_flops", check_float("peak_flops", self.peak_flops, gt=0))
        object.__setattr__(self, "bytes_per_s", check_float("bytes_per_s", self.bytes_per_s, gt=0))
        object.__setattr__(self, "matmul_n", check_int("matmul_n", self.matmul_n, minimum=1, maximum=MAX_GEMM_DIM))
        object.__setattr__(self, "numel", check_int("numel", self.numel, minimum=1, maximum=MAX_NUMEL))
        for arg, value in (("timings", self.timings), ("context", self.context)):
            if not isinstance(value, dict):
                raise ArgumentTypeError(f"{arg} must be a dict, got {type(value).__name__}: {value!r:.80}")

    @property
    def ridge(self) -> float:
        """The ridge point in FLOP per byte: peak FLOP/s over bytes per second."""
        return self.peak_flops / self.bytes_per_s

    def attainable(self, intensity: float) -> float:
        """The most FLOP/s an op of this arithmetic intensity (FLOP per byte) can reach here:
        ``min(peak_flops, bytes_per_s * intensity)``."""
        intensity = check_float("intensity", intensity, gt=0)
        return min(self.peak_flops, self.bytes_per_s * intensity)

    def regime(self, seconds: float, flops: float, bytes_moved: float, *, unit: str = "call") -> Regime:
        """:func:`amp_lab.timing.classify_regime` with this machine's measured roofs as the peak rates."""
        return classify_regime(
            seconds, flops=flops, bytes_moved=bytes_moved, peak_flops=self.peak_flops,
            peak_bytes_per_s=self.bytes_per_s, unit=unit, peak_source="this machine's measured peak rates",
        )  # fmt: skip

    def __str__(self) -> str:
        ctx = self.context
        return (
            f"roofline of {ctx.get('device', '?')} ({_plural(int(ctx.get('threads', 0) or 0), 'thread')}): "
            f"{self.peak_flops / 1e9:.3g} GFLOP/s (FP32 matmul, n={self.matmul_n}), "
            f"{self.bytes_per_s / 1e9:.3g} GB/s (the faster of copy and add, {format_bytes(4 * self.numel)} per "
            f"FP32 tensor); ridge point {self.ridge:.3g} FLOP per byte"
        )


def _roofline_sizes(dev: torch.device) -> tuple[int, int]:
    """(matmul n, elementwise numel) large enough to reach the roofs: on a CPU an FP32 tensor of 64 MiB,
    beyond its caches; on a GPU 1 GiB and a matmul that fills its FP32 units."""
    return (1024, 2**24) if dev.type == "cpu" else (8192, 2**28)


def measure_roofline(
    device=None,
    *,
    n: int | None = None,
    numel: int | None = None,
    warmup: int = 1,
    repeats: int = 3,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
) -> Roofline:
    """Measure this machine's roofline with :func:`amp_lab.timing.measure`: the FLOP/s of an n x n FP32
    matmul (TF32 off on CUDA) and the bandwidth of the faster of ``c.copy_(a)`` and
    ``torch.add(a, b, out=c)`` on ``numel`` FP32 elements, interleaved, ``repeats`` rounds after
    ``warmup`` calls.  Each rate comes from its *fastest* sample: a roof is the most the machine can do,
    and other programs can only slow a sample down, never speed it up.  Defaults: n=1024 and 2**24 elements (64 MiB per
    tensor) on a CPU, 8192 and 2**28 on a GPU.  Race with the same ``num_threads`` as the points you
    place on it.  Memory is checked before anything is allocated.  (``06_timing_race``)"""
    dev = get_device(device)
    default_n, default_numel = _roofline_sizes(dev)
    n = check_int("n", default_n if n is None else n, minimum=1, maximum=MAX_GEMM_DIM)
    numel = check_int("numel", default_numel if numel is None else numel, minimum=1, maximum=MAX_NUMEL)
    warmup, repeats, _, min_sample_s, num_threads = _check_budget(warmup, repeats, min_sample_s, num_threads)
    _check_planned_time(repeats, 3, min_sample_s)
    _check_fits(12 * n * n + 12 * numel, dev, f"measure_roofline(n={n}, numel={numel})", "choose a smaller n or numel")
    # The values do not change the speed of FP32 arithmetic (normal numbers; no subnormals), so the
    # operands are filled, not drawn: drawing 2**24 random numbers would cost more than measuring them.
    A, B, C = (torch.full((n, n), 0.5, device=dev) for _ in range(3))
    a, b, c = (torch.full((numel,), 0.5, device=dev) for _ in range(3))
    off = _tf32_context(dev.type, False)
    timings = measure(
        {
            "matmul": Contestant(lambda: torch.matmul(A, B, out=C), off),
            "copy": Contestant(lambda: c.copy_(a), off),
            "add": Contestant(lambda: torch.add(a, b, out=c), off),
        },
        device=dev, warmup=warmup, repeats=repeats, min_sample_s=min_sample_s, num_threads=num_threads,
        extra_context={"race": "roofline", "size": f"n={n}, numel={numel}"},
    )  # fmt: skip
    bandwidth = max(8 * numel / timings["copy"].min, 12 * numel / timings["add"].min)
    return Roofline(
        peak_flops=2.0 * n**3 / timings["matmul"].min, bytes_per_s=bandwidth, matmul_n=n, numel=numel,
        timings=timings, context=timings["matmul"].context,
    )  # fmt: skip


def _races(name: str, results) -> list[RaceResult]:
    """``results`` (a RaceResult, a SweepResult, or a list or tuple of them) as a flat list of races."""
    if isinstance(results, (RaceResult, SweepResult)):
        results = [results]
    if not isinstance(results, (list, tuple)):
        raise ArgumentTypeError(
            f"{name} must be a RaceResult, a SweepResult or a list of them, got {type(results).__name__}: {results!r:.80}"
        )
    if len(results) > MAX_SWEEP_SIZES:
        raise ValueError(f"{name} may hold at most {MAX_SWEEP_SIZES} results, got {len(results)}")
    flat = []
    for i, r in enumerate(results):
        if isinstance(r, SweepResult):
            flat.extend(r.results)
        elif isinstance(r, RaceResult):
            flat.append(r)
        else:
            raise ArgumentTypeError(f"{name}[{i}] must be a RaceResult or a SweepResult, got {type(r).__name__}")
    return flat


def _check_roofline(name: str, value) -> Roofline:
    return check_instance(name, value, Roofline, "a Roofline (from measure_roofline)")


def _point_label(r: RaceResult, name: str) -> str:
    what = {"matmul": "matmul", "fp8_matmul": "matmul", "elementwise": "add", "mlp": "MLP step"}[r.kind]
    if name == "fp32":
        return f"{what} FP32"
    return f"{what} {_SHORT[r.dtype]}" if r.kind == "elementwise" else f"{what} AMP {_SHORT[r.dtype]}"


def plot_roofline(roofline: Roofline, results, ax=None):
    """This machine's roofline (the measured peak FP32 FLOP/s and bandwidth, log-log) with the races in
    ``results`` placed on it: each contestant at its arithmetic intensity (:meth:`RaceResult.intensity`)
    and the FLOP/s it achieved.  (``06_timing_race``)"""
    _check_roofline("roofline", roofline)
    races = _races("results", results)
    check_axes("ax", ax)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7, 4.2))
    points: dict[str, tuple[list, list, list]] = {}
    for r in races:
        for name in ("fp32", "amp"):
            xs, ys, sizes = points.setdefault(_point_label(r, name), ([], [], []))
            xs.append(r.intensity(name))
            ys.append(r.flops / r.timings[name].median / 1e9)
            sizes.append(r.size)
    xs_all = [x for xs, _, _ in points.values() for x in xs] + [roofline.ridge]
    lo, hi = min(xs_all) / 3, max(xs_all) * 3
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [roofline.attainable(x) / 1e9 for x in grid], "-", color="0.2", lw=2,
            label=f"roof: {roofline.peak_flops / 1e9:.3g} GFLOP/s, {roofline.bytes_per_s / 1e9:.3g} GB/s (measured)")
    ax.axvline(roofline.ridge, color="0.5", ls=":", label=f"ridge point: {roofline.ridge:.3g} FLOP/byte")
    markers = {"matmul": "o", "add": "^", "MLP": "s"}
    for i, (label, (xs, ys, sizes)) in enumerate(points.items()):
        ax.plot(xs, ys, markers[label.split()[0]], color=f"C{i}", ms=7, ls="none", label=label)
        if label.startswith("matmul"):
            for x, y, size in zip(xs, ys, sizes, strict=True):
                ax.annotate(size, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=f"C{i}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"Roofline of {roofline.context.get('device', '?')}, measured, with your races")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return ax


def roofline_summary(roofline: Roofline, results) -> str:
    """The roofline read: this machine's roofs and ridge point, then for each race's FP32 contestant its
    arithmetic intensity against the ridge, the share of the roof it reached and its regime
    (:meth:`Roofline.regime`).  Every number comes from the measurements.  (``06_timing_race``)"""
    _check_roofline("roofline", roofline)
    races = _races("results", results)
    lines = [
        f"This machine's roof, measured: {roofline.peak_flops / 1e9:.3g} GFLOP/s (an FP32 matmul, n={roofline.matmul_n}) "
        f"and {roofline.bytes_per_s / 1e9:.3g} GB/s; the ridge point is {roofline.ridge:.3g} FLOP per byte. An op "
        "with fewer FLOPs per byte is memory-bound here, one with more can be compute-bound."
    ]
    for r in races:
        intensity = r.intensity("fp32")
        side = (f"{roofline.ridge / intensity:.3g}x below the ridge" if intensity < roofline.ridge
                else f"{intensity / roofline.ridge:.3g}x above the ridge")  # fmt: skip
        achieved = r.flops / r.fp32.median
        regime = roofline.regime(r.fp32.median, r.flops, r.bytes_moved("fp32"), unit=_unit(r.kind))
        what = "torch.add" if r.kind == "elementwise" else r.kind
        share = achieved / roofline.attainable(intensity)
        above = " (above the roof: the roof is itself a measurement, taken at another moment)" if share > 1 else ""
        lines.append(
            f"  {what} {r.size}, FP32: {intensity:.3g} FLOP/byte, {side}; reached {share:.0%} of the roof "
            f"there{above}: {regime.name}."
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# race_mlp: training steps of the tutorial loop's model
# ----------------------------------------------------------------------------------------------


# The largest size (width, batch, in_features, num_classes) the MLP helpers accept: far beyond any memory
# (a 2**31-wide layer alone holds 2**31 * in_features weights), and small enough that every FLOP and byte
# count stays an exact, finite number.
MAX_MLP_SIZE = 2**31


def _mlp_sizes(width, batch, in_features, num_classes) -> tuple[int, int, int, int]:
    return (
        check_int("width", width, minimum=1, maximum=MAX_MLP_SIZE),
        check_int("batch", batch, minimum=1, maximum=MAX_MLP_SIZE),
        check_int("in_features", in_features, minimum=1, maximum=MAX_MLP_SIZE),
        check_int("num_classes", num_classes, minimum=1, maximum=MAX_MLP_SIZE),
    )


def seed_model(width: int, *, in_features: int = IN_FEATURES, num_classes: int = NUM_CLASSES) -> torch.nn.Module:
    """The tutorial loop's model: ``Linear(in_features -> width) -> ReLU -> Linear(width -> num_classes)``.

    *The tutorial loop* is the classic "time FP32 against AMP" loop that notebook 06 starts from (one
    ``time.time()`` reading around each precision's training loop, AMP first, no warm-up and no
    synchronisation); this is the small MLP it trains.  (The name ``seed_model`` is kept for existing code.)

    Every size is a positive integer, and a model whose FP32 weights would not fit in the CPU's free
    memory (``device.check_fits``) is refused before anything is allocated."""
    width, _, in_features, num_classes = _mlp_sizes(width, 1, in_features, num_classes)
    n_params = in_features * width + width + width * num_classes + num_classes
    _check_fits(
        4 * n_params, "cpu", f"seed_model(width={width}, in_features={in_features}, num_classes={num_classes})",
        "choose a smaller width or in_features",
    )  # fmt: skip
    return torch.nn.Sequential(
        torch.nn.Linear(in_features, width), torch.nn.ReLU(), torch.nn.Linear(width, num_classes)
    )


def mlp_step_flops(width: int, batch: int, *, in_features: int = IN_FEATURES, num_classes: int = NUM_CLASSES) -> float:
    """Matmul FLOPs of one training step of the tutorial loop's model (:func:`seed_model`).

    Forward: two matmuls, ``2*b*(in*w + w*c)``.  Backward: the second layer needs the gradient
    of its input and of its weight (``4*b*w*c``); the first only its weight's (``2*b*in*w``, the
    inputs need no gradient).  Elementwise work (ReLU, loss, Adam) is left out.
    """
    width, batch, in_features, num_classes = _mlp_sizes(width, batch, in_features, num_classes)


    return _mlp_matmul_flops([in_features, width, num_classes], batch)


class _Trainer:
    """One contestant: its own copy of the model, its optimizer, and a ``step()``."""

    def __init__(self, model, X, y, dev, dtype: torch.dtype | None):
        self.model = copy.deepcopy(model).to(dev)
        # Fused Adam on CUDA: one kernel for the whole update, and with a GradScaler it reads the inf/NaN
        # flag on the GPU; the default (foreach) Adam makes GradScaler.step call found_inf.item(), a host
        # sync in every float16 step that the FP32 and bfloat16 steps do not pay.
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3, **({"fused": True} if dev.type == "cuda" else {}))
        self.X, self.y, self.dtype, self.dev = X, y, dtype, dev
        # float16 needs loss scaling to keep small gradients; bfloat16 has FP32's range and does not.
        self.scaler = torch.amp.GradScaler(dev.type) if dtype == torch.float16 else None

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.dev.type, dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None):
            loss = F.cross_entropy(self.model(self.X), self.y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        return loss

    def static_bytes(self) -> int:
        tensors = [p for p in self.model.parameters()]
        tensors += [p.grad for p in self.model.parameters() if p.grad is not None]
        for state in self.opt.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        return _unique_storage_bytes(tensors)


def _storage_key(t: torch.Tensor):
    st = t.untyped_storage()
    return st.data_ptr(), st.nbytes()


def _unique_storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    seen = {}
    for t in tensors:
        ptr, nbytes = _storage_key(t)
        seen[ptr] = max(nbytes, seen.get(ptr, 0))
    return sum(seen.values())


def _saved_for_backward_bytes(trainer: _Trainer, exclude: Iterable[torch.Tensor]) -> int:
    """Bytes of new tensors autograd keeps for backward during one step (inputs and parameters,
    which exist anyway, are not counted; each storage is counted once)."""
    seen = {_storage_key(t)[0] for t in exclude}
    total = 0

    def pack(t):
        nonlocal total
        ptr, nbytes = _storage_key(t)
        if ptr not in seen:
            seen.add(ptr)
            total += nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        trainer.step()
    return total


def _measure_memory(make: dict, dev: torch.device, shared: list[torch.Tensor]) -> dict:
    """Peak memory of one training step per contestant, each measured alone."""
    memory = {}
    if dev.type == "cuda":
        for build in make.values():  # first steps create cuBLAS workspaces; keep them out of the numbers
            with build.context():
                build.fn().step()
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        for name, build in make.items():
            with build.context():
                trainer = build.fn()
                trainer.step()  # creates gradients and Adam's state
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
                trainer.step()
                torch.cuda.synchronize(dev)
                memory[name] = int(torch.cuda.max_memory_allocated(dev) - base)
            del trainer
        memory["method"] = "measured: torch.cuda.max_memory_allocated during one step, reset per contestant"
    else:
        for name, build in make.items():
            with build.context():
                trainer = build.fn()
                trainer.step()
                exclude = shared + list(trainer.model.parameters())
                memory[name] = trainer.static_bytes() + _saved_for_backward_bytes(trainer, exclude)
        memory["method"] = (
            f"estimate ({dev.type} has no peak-memory counter): parameters, gradients, "
            "Adam state and tensors saved for backward"
        )
    return memory


def race_mlp(
    width: int,
    batch: int,
    *,
    in_features: int = IN_FEATURES,
    num_classes: int = NUM_CLASSES,
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    memory: bool = True,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
) -> RaceResult:
    """Race training steps of the tutorial loop's model (:func:`seed_model`) in FP32 against autocast.  (``06_timing_race``)

    Model ``Linear(in_features -> width) -> ReLU -> Linear(width -> num_classes)``, Adam,
    cross-entropy, one fixed random batch.  Each contestant trains its own copy of the same
    initial weights.  The AMP step uses ``torch.autocast`` and, for float16, a
    ``torch.amp.GradScaler``.  On CUDA GPUs from Ampere on a ``"tf32"`` contestant runs the FP32 step with
    TF32 on; on CUDA every optimizer is fused Adam (no host sync in GradScaler's step).
    ``memory=True`` adds each contestant's peak memory for one step (measured on CUDA; an estimate
    elsewhere, and the result says which).  Sampling (``repeats``, ``target_rel_width``, ``max_time_s``)
    and ``reuse`` work as in :func:`race_matmul`; a reused result must have memory if ``memory=True``.
    """
    width = check_int("width", width, minimum=1)
    batch = check_int("batch", batch, minimum=1)
    in_features = check_int("in_features", in_features, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    memory = check_bool("memory", memory)
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s,
                               callback)  # fmt: skip
    params = {"width": width, "batch": batch, "in_features": in_features, "num_classes": num_classes}
    found = _reusable(reuse, "mlp", params, dtype, dev, num_threads)
    if found is not None and (found.memory is not None or not memory):
        return found
    facts = _device_facts(dev)
    n_contestants = len(contestant_names(*facts))
    _check_fits(
        mlp_bytes(width, batch, dtype, in_features=in_features, num_classes=num_classes, contestants=n_contestants),
        dev,
        f"race_mlp(width={width}, batch={batch})",
        "choose a smaller width or batch",
    )
    with torch_threads(num_threads):
        X, y, model = _mlp_setup(width, batch, in_features, num_classes, dev)

        def trainer(d):
            return lambda: _Trainer(model, X, y, dev, d)

        make = _contestants({"fp32": trainer(None), "amp": trainer(dtype), "tf32": trainer(None)}, *facts)
        mem = _measure_memory(make, dev, [X, y]) if memory else None
        trainers = {name: build.fn() for name, build in make.items()}
    contestants = {name: Contestant(trainers[name].step, make[name].context) for name in make}
    flops = mlp_step_flops(width, batch, in_features=in_features, num_classes=num_classes)
    budget = (warmup, repeats, min_sample_s, num_threads, callback, target_rel_width, max_time_s)
    return _run_race("mlp", params, f"width={width}, batch={batch}", dtype, dev, contestants, flops, budget, memory=mem)


def _mlp_setup(width, batch, in_features, num_classes, dev):
    # Seeded without touching the learner's global RNG state (CPU and every GPU's).
    with seeded(0):
        model = seed_model(width, in_features=in_features, num_classes=num_classes)
        X = torch.randn(batch, in_features)
        y = torch.randint(0, num_classes, (batch,))
    return X.to(dev), y.to(dev), model


# ----------------------------------------------------------------------------------------------
# The ceiling, and the sweep
# ----------------------------------------------------------------------------------------------

# Peak rates from NVIDIA's datasheets, dense (datasheets print Tensor Core rates "with sparsity", twice
# the dense rate: halved here), FP16/BF16 with FP32 accumulation (what cuBLAS uses for torch's matmuls).
# Matched by the exact name torch.cuda.get_device_name() gives, never by a fragment: "NVIDIA RTX A1000"
# must not get the A100's numbers, nor an H100 NVL the SXM's.  A GPU missing here gets no datasheet
# ceiling: the sweep measures the raw GEMM ratio instead, and the regime is left unknown.


























@dataclass(frozen=True)
class Ceiling:
    """The best speedup AMP can hope for: the raw low-precision / FP32 arithmetic rate."""

    vs_fp32: float
    vs_tf32: float | None
    source: str
    measured_gemm: float | None = None  # FP32 GEMM time / low-precision GEMM time, inputs already cast
    gemm_shape: tuple[int, int, int] | None = None
    measured_interval: SpeedupEstimate | None = None  # of measured_gemm


def datasheet_ceiling(gpu_name: str | None, dtype=torch.float16) -> Ceiling | None:
    """The datasheet ceiling of AMP in ``dtype`` on the GPU named exactly ``gpu_name`` (see
    :func:`datasheet_entry`): its Tensor Core rate over the FP32 rate and over the TF32 rate.  None for a
    GPU the table does not know, or a dtype its Tensor Cores do not multiply (bf16 on a V100 or T4)."""
    dtype = parse_dtype(dtype)
    entry = datasheet_entry(gpu_name)
    if entry is None:
        return None
    low = entry.tflops(dtype)
    if low is None:
        return None
    over_tf32 = None if entry.tf32_tflops is None else round(low / entry.tf32_tflops, 2)
    return Ceiling(vs_fp32=round(low / entry.fp32_tflops, 2), vs_tf32=over_tf32, source=entry.source)




def _raw_gemm_ratio(m, k, n, *, device, dtype, warmup, repeats, min_sample_s, num_threads,
                    target_rel_width=None, max_time_s=None) -> SpeedupEstimate:  # fmt: skip
    """FP32 GEMM time over low-precision GEMM time with inputs already in ``dtype`` (no casts)."""
    dev = device
    gen = torch.Generator(device=dev).manual_seed(1)
    A = torch.randn(m, k, device=dev, generator=gen)
    B = torch.randn(k, n, device=dev, generator=gen)
    A_low, B_low = A.to(dtype), B.to(dtype)
    device_type = _device_facts(dev)[0]
    fp32 = Contestant(lambda: A @ B, _tf32_context(device_type, False))
    t = measure(
        {"fp32": fp32, "amp": Contestant(lambda: A_low @ B_low, _tf32_context(device_type, False))},
        device=dev,
        warmup=warmup,
        repeats=repeats,
        min_sample_s=min_sample_s,
        num_threads=num_threads,
        **_sampling(target_rel_width, max_time_s),
    )
    return speedup_estimate(t["fp32"], t["amp"], confidence=CONFIDENCE)


# ----------------------------------------------------------------------------------------------
# Sizes: a pure function of the machine's facts
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RaceSizes:
    """Every size and sampling budget notebook 06 (``06_timing_race``) races with, chosen from the machine's facts.

    Built by :func:`race_sizes` (pure: give it any machine's facts) or :func:`sizes_for` (this machine).
    """

    case: str  # "gpu", "cpu-native", "cpu-emulated" or "cpu-unknown"
    device_type: str
    dtype: torch.dtype
    width: int  # the MLP race (race_mlp(width, batch))
    batch: int
    matmul_sizes: tuple[int, ...]  # the matmul sweep
    mlp_widths: tuple[int, ...]  # the MLP sweep, at ``batch``
    batches: tuple[int, ...]  # the batch sweep, at ``width``
    aligned_n: int  # the multiples-of-8 race: n against n - 1
    widget_widths: tuple[int, ...]
    widget_batches: tuple[int, ...]
    budget: dict  # warmup, repeats, min_sample_s, target_rel_width, max_time_s (and num_threads) per race
    description: str

    def __str__(self) -> str:
        return self.description


# CPU races run on one thread: the ratio AMP / FP32 is what the races are for, and on a machine whose cores
# other programs also use, threads that wait for each other make a step many times slower at random (on a
# busy 2-core machine a width-256 step went from 2 ms to 30-150 ms with two threads), which no interval
# can average away.  One thread is also the same on every machine.
_SIZES = {
    # A CUDA GPU: matmuls from launch-bound to Tensor-Core-bound sizes, and an MLP step large enough that its
    # matmuls, not launching its kernels, set the pace.  On an H200 (docs/results/mlp-sizes_nvidia-h200_
    # 20261130.txt) a step takes about 1.2-1.5 ms of launches whatever its size up to width 4096, batch 1024,
    # where AMP lost (0.81x in bfloat16, 0.59x in float16); at width 8192, batch 8192 it won 4.45x and 2.86x.
    "gpu": dict(
        width=8192, batch=8192, matmul_sizes=(256, 512, 1024, 2048, 4096, 8192), mlp_widths=(256, 1024, 4096, 8192),
        batches=(1024, 4096, 8192, 16384), aligned_n=4096, widget_widths=(1024, 2048, 4096, 8192),
        widget_batches=(1024, 4096, 8192, 16384),
        budget={"warmup": 3, "repeats": 10, "min_sample_s": 0.01, "target_rel_width": 0.1, "max_time_s": 10.0},
    ),
    # A CPU that multiplies the dtype natively (AVX512-BF16, AMX, ARM bf16): sizes where it wins.  On an
    # AVX512-BF16 CPU race_matmul gave 1.97x at n = 512 and 2.2x at 1024, race_mlp(2048, 1024) 2.11x.
    "cpu-native": dict(
        width=2048, batch=1024, matmul_sizes=(128, 256, 512, 1024), mlp_widths=(256, 512, 1024, 2048),
        batches=(64, 256, 1024), aligned_n=1024, widget_widths=(256, 512, 1024, 2048, 4096),
        widget_batches=(64, 256, 1024, 2048),
        # 2 s per race keeps notebook 06 near a minute on such a CPU (about 15 races, the largest a
        # 0.1-0.2 s step on one thread), where compute-bound sizes have little noise to average away.
        budget={"warmup": 2, "repeats": 8, "min_sample_s": 0.01, "target_rel_width": 0.1, "max_time_s": 2.0,
                "num_threads": 1},
    ),
    # A CPU that emulates it (AVX2 only): bf16 matmuls run tens of times slower than FP32, so stay small.
    "cpu-emulated": dict(
        width=256, batch=64, matmul_sizes=(32, 64, 128, 256), mlp_widths=(64, 128, 256, 512),
        batches=(16, 64, 256), aligned_n=128, widget_widths=(64, 128, 256, 512, 1024),
        widget_batches=(16, 32, 64, 128, 256),
        budget={"warmup": 1, "repeats": 8, "min_sample_s": 0.005, "target_rel_width": 0.1, "max_time_s": 2.0,
                "num_threads": 1},
    ),
}
_SIZES["cpu-unknown"] = _SIZES["cpu-emulated"]  # when in doubt, the sizes that are quick everywhere


def race_sizes(device_type: str, dtype=torch.bfloat16, *, native: bool | None = None) -> RaceSizes:
    """The sizes and budgets to race on a machine with these facts.  (``06_timing_race``)

    ``device_type`` is ``"cpu"``, ``"cuda"`` or ``"mps"``; ``native`` says whether the CPU multiplies
    ``dtype`` in hardware (``hardware.cpu_has_native``: True, False or None for unknown; ignored on a
    GPU).  A CPU with native ``dtype`` arithmetic gets sizes where it wins; one without (or unknown) gets
    small sizes, because there every low-precision matmul is tens of times slower than FP32.
    """
    device_type = check_choice("device_type", device_type, ["cpu", "cuda", "mps"])
    dtype = parse_dtype(dtype)
    if native is not None:
        try:
            native = check_bool("native", native)
        except ArgumentTypeError:
            raise ArgumentTypeError(f"native must be True, False or None (unknown), got {native!r:.80}") from None
    low = dtype_name(dtype)
    if device_type == "cpu":
        case = {True: "cpu-native", False: "cpu-emulated", None: "cpu-unknown"}[native]
    else:
        case = "gpu"
    s = _SIZES[case]
    if case == "gpu" and device_type == "mps":  # an Apple GPU: no Tensor Cores, shared memory
        s = {**_SIZES["cpu-native"], "budget": dict(_SIZES["gpu"]["budget"])}
    shown = (
        f"matmul n from {s['matmul_sizes'][0]} to {s['matmul_sizes'][-1]}, "
        f"MLP width {s['width']} with batch {s['batch']}"
    )
    threads = " on one CPU thread" if s["budget"].get("num_threads") == 1 else ""
    description = {
        "gpu": (
            f"A GPU ({device_type}): matmuls from sizes where launching kernels sets the pace to sizes where the "
            f"matrix units do, and a training step large enough for its matmuls to matter ({shown}); each race "
            f"says which regime it found."
        ),
        "cpu-native": (
            f"This CPU multiplies {low} in hardware, so the races go up to sizes where {low} can beat FP32 "
            f"({shown}{threads})."
        ),
        "cpu-emulated": (
            f"This CPU has no {low} instructions: it emulates {low} matmuls with conversions, tens of times "
            f"slower than FP32, so the races stay small ({shown}{threads})."
        ),
        "cpu-unknown": (
            f"Whether this CPU multiplies {low} in hardware is unknown, so the races stay as small as on a "
            f"CPU without it ({shown}{threads})."
        ),
    }[case]
    return RaceSizes(
        case=case,
        device_type=device_type,
        dtype=dtype,
        width=s["width"],
        batch=s["batch"],
        matmul_sizes=tuple(s["matmul_sizes"]),
        mlp_widths=tuple(s["mlp_widths"]),
        batches=tuple(s["batches"]),
        aligned_n=s["aligned_n"],
        widget_widths=tuple(s["widget_widths"]),
        widget_batches=tuple(s["widget_batches"]),
        budget=dict(s["budget"]),
        description=description,
    )


def sizes_for(device=None, dtype=None) -> RaceSizes:
    """:func:`race_sizes` for this machine: its device, and whether its CPU multiplies ``dtype`` natively
    (``dtype`` defaults to ``amp_dtype(device)``).  (``06_timing_race``)"""
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else parse_dtype(dtype)
    native = cpu_has_native(dtype) if dev.type == "cpu" else None
    return race_sizes(dev.type, dtype, native=native)


# ----------------------------------------------------------------------------------------------
# The sweep
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepResult:
    """Speedup against size, with the ceiling.  ``kind``: ``"matmul"`` (n), ``"mlp"`` (width at a fixed
    batch) or ``"batch"`` (batch at a fixed width)."""

    kind: str
    sizes: tuple[int, ...]
    results: tuple[RaceResult, ...]
    ceiling: Ceiling
    context: dict

    @property
    def speedups(self) -> list[float]:
        return [r.speedup for r in self.results]

    @property
    def intervals(self) -> list[SpeedupEstimate]:
        return [r.speedup_interval for r in self.results]

    @property
    def outcomes(self) -> list[str]:
        return [r.outcome for r in self.results]

    @property
    def first_paying_size(self) -> int | None:
        """The smallest size from which AMP is measurably faster (its interval above 1) at every larger
        size; None when it is not at the largest ("slower" and "too close to call" do not pay)."""
        paying = None
        for size, outcome in zip(reversed(self.sizes), reversed(self.outcomes), strict=True):
            if outcome != "faster":
                break
            paying = size
        return paying

    def result_for(self, size: int) -> RaceResult:
        """The race of one size of this sweep."""
        if size not in self.sizes:
            raise ValueError(f"size={size!r} was not raced in this sweep; its sizes are {list(self.sizes)}")
        return self.results[self.sizes.index(size)]

    def to_dict(self) -> dict:
        return _jsonable(
            {
                "kind": self.kind,
                "sizes": self.sizes,
                "speedups": self.speedups,
                "intervals": [e.to_dict() for e in self.intervals],
                "speedups_vs_tf32": [r.speedup_vs_tf32 for r in self.results],
                "ceiling": {
                    "vs_fp32": self.ceiling.vs_fp32,
                    "vs_tf32": self.ceiling.vs_tf32,
                    "source": self.ceiling.source,
                    "measured_gemm": self.ceiling.measured_gemm,
                    "gemm_shape": self.ceiling.gemm_shape,
                    "measured_interval": (
                        None if self.ceiling.measured_interval is None else self.ceiling.measured_interval.to_dict()
                    ),
                },
                "results": [r.to_dict() for r in self.results],
                "context": self.context,
            }
        )


# The most sizes one sweep races (each size is a race of its own).
MAX_SWEEP_SIZES = 64


def sweep(
    sizes: Sequence[int] | None = None,
    *,
    kind: str = "matmul",
    batch: int | None = None,
    width: int | None = None,
    device=None,
    dtype=None,
    warmup: int = 2,
    repeats: int = 8,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
    show_progress: bool = True,
) -> SweepResult:
    """Speedup against size, and the ceiling it is heading for.  (``06_timing_race``)

    ``kind="matmul"``: ``race_matmul(n)`` for each ``n`` in ``sizes``; ``kind="mlp"``:
    ``race_mlp(width, batch)`` for each width (memory included); ``kind="batch"``: ``race_mlp(width, b)``
    for each batch ``b``.  Sizes, ``batch`` and ``width`` default to :func:`sizes_for` this machine (small
    on a CPU that emulates the AMP dtype, larger on one that multiplies it natively, large on a GPU).
    Each race samples as :func:`race_matmul` does (``max_time_s`` is per race); ``reuse`` hands earlier
    results of the same configurations back instead of racing them again.  The ceiling is the datasheet
    ratio for a known GPU; otherwise (every CPU) it is the measured ratio of raw GEMMs with inputs already
    in low precision, at the largest size.
    """
    kind = check_choice("kind", kind, ["matmul", "mlp", "batch"])
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s)
    show_progress = check_bool("show_progress", show_progress)
    defaults = sizes_for(dev, dtype)
    if sizes is None:
        sizes = {"matmul": defaults.matmul_sizes, "mlp": defaults.mlp_widths, "batch": defaults.batches}[kind]
    # A list, tuple or range: a dict would race its keys, a set in no particular order.
    sizes = check_int_sequence("sizes", sizes, minimum=1, max_length=MAX_SWEEP_SIZES)
    batch = check_int("batch", defaults.batch if batch is None else batch, minimum=1)
    width = check_int("width", defaults.width if width is None else width, minimum=1)
    # Bounded before it starts: every race (and the raw GEMM's) takes its minimum rounds, and with a
    # target interval up to max_time_s; all of them together must fit in MAX_SECONDS.
    k = len(contestant_names(*_device_facts(dev)))
    per_race = repeats * k * min_sample_s
    if target_rel_width is not None:
        per_race = max(per_race, DEFAULT_MAX_TIME_S if max_time_s is None else max_time_s)
    if (len(sizes) + 1) * per_race > MAX_SECONDS:
        raise ValueError(
            f"sweep of {_plural(len(sizes), 'size')} (plus the raw GEMM) could take up to {(len(sizes) + 1) * per_race:g} s "
            f"({per_race:g} s per race), more than the course's limit of {MAX_SECONDS:g} s; choose fewer sizes "
            "or a smaller max_time_s"
        )
    # Refuse the whole sweep up front rather than after minutes of racing.
    largest = max(sizes)
    if kind == "matmul":
        _check_fits(matmul_bytes(largest, dtype), dev, f"sweep size n={largest}", "choose smaller sizes")
    elif kind == "mlp":
        _check_fits(mlp_bytes(largest, batch, dtype), dev, f"sweep width={largest}", "choose smaller sizes")
    else:
        _check_fits(mlp_bytes(width, largest, dtype), dev, f"sweep batch={largest}", "choose smaller sizes")


    common = dict(
        device=dev, dtype=dtype, warmup=warmup, repeats=repeats, min_sample_s=min_sample_s, num_threads=num_threads,
        target_rel_width=target_rel_width, max_time_s=max_time_s,
    )  # fmt: skip
    results = []
    bar = progress(total=len(sizes) + 1, desc=f"sweep {kind}") if show_progress else None
    try:
        for size in sizes:
            if bar is not None:
                bar.set_postfix_str(f"size {size}")
            if kind == "matmul":
                results.append(race_matmul(size, reuse=reuse, **common))
            elif kind == "mlp":
                results.append(race_mlp(size, batch, reuse=reuse, **common))
            else:
                results.append(race_mlp(width, size, reuse=reuse, **common))
            if bar is not None:
                bar.update(1)
        shape = {
            "matmul": (largest, largest, largest),
            "mlp": (batch, IN_FEATURES, largest),
            "batch": (largest, IN_FEATURES, width),
        }[kind]
        measured = _raw_gemm_ratio(*shape, **common)
        if bar is not None:
            bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    ceiling = None
    if dev.type == "cuda":
        ceiling = datasheet_ceiling(torch.cuda.get_device_name(dev), dtype)
    if ceiling is None:
        what = "GPU without a datasheet entry" if dev.type == "cuda" else dev.type
        ceiling = Ceiling(
            vs_fp32=measured.ratio,
            vs_tf32=None,
            source=f"measured on this {what}: raw {dtype_name(dtype)} GEMM {shape[0]}x{shape[1]}x{shape[2]} "
            "against FP32, inputs already cast",
        )
    ceiling = Ceiling(
        ceiling.vs_fp32, ceiling.vs_tf32, ceiling.source, measured_gemm=measured.ratio, gemm_shape=shape,
        measured_interval=measured,
    )  # fmt: skip
    return SweepResult(kind=kind, sizes=sizes, results=tuple(results), ceiling=ceiling, context=results[-1].context)


def _check_result(name: str, value) -> RaceResult:
    return check_instance(name, value, RaceResult, "a RaceResult (from race_matmul or race_mlp)")


def _check_sweep(name: str, value) -> SweepResult:
    return check_instance(name, value, SweepResult, "a SweepResult (from sweep)")


def _size_name(kind: str) -> str:
    return {"matmul": "n", "mlp": "width", "batch": "batch"}[kind]


def _what(result: SweepResult) -> str:
    p = result.results[0].params
    if result.kind == "matmul":
        return "n x n matmul"
    if result.kind == "mlp":
        return f"training step of the tutorial loop's model at batch {p['batch']}, by width"
    return f"training step of the tutorial loop's model at width {p['width']}, by batch"


def _est_text(e: SpeedupEstimate) -> str:
    """``'1.32x (1.25x to 1.40x): faster'``: a speedup, its interval and what the interval says."""
    if not math.isfinite(e.high):
        return f"{format_ratio(e.ratio)} (too few pairs for an interval): {e.outcome}"
    return f"{format_ratio(e.ratio)} ({e.ends_text()}): {e.outcome}"


def _trend(result: SweepResult) -> str:
    """Whether the speedup grew or shrank from the smallest size to the largest, judged by the intervals."""
    name = _size_name(result.kind)
    first, last = result.intervals[0], result.intervals[-1]
    a, b = result.sizes[0], result.sizes[-1]
    span = f"from {format_ratio(first.ratio)} at {name} {a} to {format_ratio(last.ratio)} at {name} {b}"
    if len(result.sizes) < 2:
        return ""
    if last.low > first.high:
        return f"The speedup grew with the {name}: {span}, with intervals that do not overlap."
    if last.high < first.low:
        return f"The speedup shrank as the {name} grew: {span}, with intervals that do not overlap."
    return (
        f"The speedup did not change measurably between {name} {a} and {name} {b} ({span}): "
        "their intervals overlap."
    )


def _noise_note(results: Sequence[RaceResult], context: dict) -> str:
    """A warning when the samples were noisy: "race again" when an interval is too wide to read, a remark
    when the interleaved pairs kept the interval narrow all the same."""
    worst_iqr = max(t.rel_iqr for r in results for t in r.timings.values())
    # An interval that is infinite for want of pairs says "too few samples", not "noisy".
    widest = max((w for r in results if math.isfinite(w := r.speedup_interval.rel_width)), default=0.0)
    load, cores = context.get("load_avg_1min"), context.get("cpu_count")
    busy = f", load average {load} on {cores} cores" if load is not None and cores else ""
    if widest > 0.25:
        return (
            f"Noisy: an interval up to {100 * widest:.0f}% of its speedup wide, IQR up to {100 * worst_iqr:.0f}% "
            f"of a median{busy}. Something else was probably using the machine; race again when it is quiet "
            "(or allow more time, max_time_s) before reading the numbers."
        )
    if worst_iqr > 0.2:
        return (
            f"The samples were noisy (IQR up to {100 * worst_iqr:.0f}% of a median{busy}), but the interleaved "
            "pairs kept the interval narrow enough to read."
        )
    return ""


def sweep_summary(result: SweepResult) -> str:
    """The sweep, read: each size's speedup with its interval, where AMP is measurably faster, whether the
    speedup grew with the size, how close it gets to the ceiling, and a warning when it was too noisy.
    (``06_timing_race``)"""
    _check_sweep("result", result)
    r0 = result.results[0]
    name = _size_name(result.kind)
    lines = [f"{_what(result)}, AMP {dtype_name(r0.dtype)} vs FP32 ({r0.speedup_interval.confidence_text} intervals):"]
    lines += [f"  {name} {s}: {_est_text(e)}" for s, e in zip(result.sizes, result.intervals, strict=True)]
    pays = result.first_paying_size
    largest = result.sizes[-1]
    if pays is not None:
        lines.append(f"AMP is measurably faster from {name} {pays} on.")
    else:
        lines.append(
            f"AMP is not measurably faster at the largest {name} raced ({largest}: {result.outcomes[-1]})."
        )
    trend = _trend(result)
    if trend:
        lines.append(trend)
    c = result.ceiling
    best = max(result.speedups)
    at = result.sizes[result.speedups.index(best)]
    measured = c.measured_interval
    if "datasheet" not in c.source and measured is not None and measured.outcome == "slower":
        lines.append(
            f"The ceiling is {measured} ({c.source}): below 1, so {dtype_name(r0.dtype)} arithmetic itself is "
            f"slower than FP32 here and AMP cannot pay; best measured {format_ratio(best)} at {name} {at}."
        )
    else:
        lines.append(
            f"Best {format_ratio(best)} at {name} {at}, {best / c.vs_fp32:.0%} of the ceiling {c.vs_fp32:.3g}x "
            f"({c.source})."
        )
    note = _noise_note(result.results, result.context)
    if note:
        lines.append(note)
    return "\n".join(lines)


def memory_summary(result) -> str:
    """What AMP did to the memory of a training step, read from a ``race_mlp`` result (or an MLP/batch
    sweep: its smallest and largest sizes), with the mechanism that explains it.  (``06_timing_race``)"""
    if not isinstance(result, (RaceResult, SweepResult)):
        check_instance("result", result, (RaceResult, SweepResult), "a race_mlp result or an MLP/batch sweep")
    if isinstance(result, SweepResult):
        if result.kind not in ("mlp", "batch") or result.results[0].memory is None:
            raise ValueError("result must be a race_mlp result or an MLP/batch sweep with memory measured")
        first, last = result.results[0], result.results[-1]
        name = _size_name(result.kind)
        return (
            f"{memory_summary(last)}\nAcross the sweep, against FP32, AMP {_saving_text(_saving(first))} at {name} "
            f"{result.sizes[0]} and {_saving_text(_saving(last))} at {name} {result.sizes[-1]}."
        )
    if not isinstance(result, RaceResult) or result.memory is None:
        raise ValueError("result must be a race_mlp result with memory measured (race_mlp(..., memory=True))")
    m = result.memory
    saving = _saving(result)
    how = "measured" if m["method"].startswith("measured") else "estimated"
    head = (
        f"At {result.size} one training step needs {format_bytes(m['fp32'])} in FP32 and "
        f"{format_bytes(m['amp'])} under AMP ({how}): AMP {_saving_text(saving)}."
    )
    low = dtype_name(result.dtype)
    if saving >= 0.1:
        why = (
            f"The activations saved for backward are stored in {low}, half the bytes, and at this size they "
            "outweigh the FP32 weights, gradients and optimizer state that AMP keeps."
        )
    elif saving > -0.1:
        why = (
            "AMP keeps FP32 weights, gradients and optimizer state and adds low-precision copies of the weights; "
            f"it saves only on the activations saved for backward ({low}, half the bytes), which are a small "
            "part of this step."
        )
    else:
        why = (
            "AMP keeps FP32 weights, gradients and optimizer state, and its low-precision copies of the weights "
            "cost more here than it saves on the activations."
        )
    return f"{head} {why}"


def _saving(result: RaceResult) -> float:
    return 1 - result.memory["amp"] / result.memory["fp32"]


def _saving_text(saving: float) -> str:
    if abs(saving) < 0.005:
        return "saves nothing"
    return f"saves {saving:.0%}" if saving > 0 else f"uses {-saving:.0%} more"


def _speedup_range(result: RaceResult) -> tuple[float, float]:
    """The speedup's interval, clipped to the speedup itself where there are too few pairs for one."""
    e = result.speedup_interval
    if not math.isfinite(e.high):
        return e.ratio, e.ratio
    return e.low, e.high


def _size_axis(ax, sizes, label):
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log", base=2)
    ax.set_xticks(list(sizes), [str(s) for s in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(label)


def _plain_log_y(ax):
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    # A narrow range (less than a decade) has no major ticks inside it: label the minor ones plainly too.
    ax.yaxis.set_minor_formatter(plain if ax.get_ylim()[1] / ax.get_ylim()[0] < 10 else NullFormatter())


def _axis_label(result: SweepResult) -> str:
    p = result.results[0].params
    if result.kind == "matmul":
        return "n (n x n matmul)"
    return f"width (batch {p['batch']})" if result.kind == "mlp" else f"batch (width {p['width']})"


def plot_sweep(result: SweepResult, ax=None):
    """Speedup (FP32 / AMP) against size on log-log axes, with its interval, break-even and the ceiling."""
    _check_sweep("result", result)
    check_axes("ax", ax)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 3.8))
    dtype = dtype_name(result.results[0].dtype)
    ranges = [_speedup_range(r) for r in result.results]
    lower = [s - lo for s, (lo, _hi) in zip(result.speedups, ranges, strict=True)]
    upper = [hi - s for s, (_lo, hi) in zip(result.speedups, ranges, strict=True)]
    conf = result.results[0].speedup_interval.confidence_text
    ax.errorbar(result.sizes, result.speedups, yerr=[lower, upper], fmt="o-", color="C0", capsize=3,
                label=f"AMP ({dtype}) vs FP32 (bars: {conf} interval)")  # fmt: skip
    tf32 = [r.speedup_vs_tf32 for r in result.results]
    if all(s is not None for s in tf32):
        ax.plot(result.sizes, tf32, "s--", color="C2", label=f"AMP ({dtype}) vs TF32")
    c = result.ceiling
    is_datasheet = "datasheet" in c.source
    kind = "datasheet" if is_datasheet else "raw GEMM, measured"
    ax.axhline(c.vs_fp32, color="C3", ls="--", label=f"ceiling vs FP32 ({kind}): {c.vs_fp32:.3g}x")
    if c.vs_tf32 is not None and all(s is not None for s in tf32):
        ax.axhline(c.vs_tf32, color="C2", ls=":", label=f"ceiling vs TF32 (datasheet): {c.vs_tf32:.3g}x")
    if is_datasheet and c.measured_gemm is not None:
        ax.axhline(c.measured_gemm, color="C1", ls=":", label=f"raw GEMM, measured: {c.measured_gemm:.3g}x")
    ax.axhline(1.0, color="0.3", lw=1, label="break-even")
    _size_axis(ax, result.sizes, _axis_label(result))
    _plain_log_y(ax)
    ax.set_ylabel("speedup (FP32 time / AMP time)")
    ax.set_title(f"Where AMP starts to pay on {result.context['device']}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return ax


def plot_memory(result: SweepResult, ax=None):
    """Peak memory per training step, FP32 against AMP, for a ``kind="mlp"`` or ``kind="batch"`` sweep."""
    _check_sweep("result", result)
    if result.kind not in ("mlp", "batch") or result.results[0].memory is None:
        raise ValueError("plot_memory needs a sweep with kind='mlp' or 'batch' (memory is measured for training steps)")
    check_axes("ax", ax)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 3.8))
    mib = 2.0**20
    names = [k for k in result.results[0].memory if k != "method"]
    for i, name in enumerate(names):
        ax.plot(result.sizes, [r.memory[name] / mib for r in result.results], "o-", color=f"C{i}", label=name.upper())
    _size_axis(ax, result.sizes, _axis_label(result))
    _plain_log_y(ax)
    ax.set_ylabel("MiB")
    method = result.results[0].memory["method"]
    ax.set_title("Memory per training step (" + ("measured" if method.startswith("measured") else "estimate") + ")")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


# ----------------------------------------------------------------------------------------------
# What a result means
# ----------------------------------------------------------------------------------------------

def _cpu_instructions(result: RaceResult, native: bool | None) -> str:
    """The instruction sets for the result's dtype, named by ``hardware``: those the recorded CPU has
    when it multiplies the dtype natively, else every one that would have counted."""
    flags = result.context.get("cpu_flags")
    labels = cpu_native_labels(result.dtype, flags) if native and flags else ()
    labels = labels or tuple(f.label for f in CPU_FEATURES if f.dtype == result.dtype)
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} or {labels[-1]}"


_SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def _tensor_cores(result: RaceResult):
    cap = result.context.get("capability")
    if not cap:
        return None
    return tensor_core_generation(tuple(cap))


def native_arithmetic(result: RaceResult) -> bool | None:
    """Whether the hardware that ran ``result`` multiplies its AMP dtype natively: True, False, or None
    (unknown).  On a CPU: ``hardware.cpu_has_native`` with the CPU flags recorded in the result (this
    machine's when none were recorded); on CUDA: whether the recorded compute capability's Tensor Cores
    take that dtype.  (``06_timing_race``, exercise 4)"""
    _check_result("result", result)
    dev = str(result.context.get("device", ""))
    if dev.startswith("cuda"):
        tc = _tensor_cores(result)
        if tc is None:
            return None
        return tc.has_tensor_cores and _SHORT[result.dtype] in tc.precisions
    if dev.startswith("cpu"):
        flags = result.context.get("cpu_flags")
        return cpu_has_native(result.dtype, flags=flags) if flags is not None else cpu_has_native(result.dtype)
    return None


def _verdict(result: RaceResult) -> str:
    e = result.speedup_interval
    low = dtype_name(result.dtype)
    dev = result.context.get("device", "?")
    basis = (
        f"{_plural(e.pairs, 'interleaved pair')}: too few for a {e.confidence_text} interval"
        if not math.isfinite(e.high)
        else f"{e.confidence_text} interval {e.ends_text()}, {_plural(e.pairs, 'interleaved pair')}"
    )
    unit = _unit(result.kind)
    if e.outcome == "faster":
        return f"AMP is faster: {format_ratio(e.ratio)} the speed of FP32 ({basis}), {low} on {dev}."
    if e.outcome == "slower":
        return (
            f"AMP is slower: {format_ratio(e.ratio)} the speed of FP32 ({basis}), so each {unit} takes "
            f"{1 / e.ratio:.2f}x as long ({low} on {dev})."
        )
    return (
        f"Too close to call: {format_ratio(e.ratio)} ({basis}); the interval straddles 1, so this race cannot "
        f"tell AMP ({low} on {dev}) from FP32."
    )


def _elementwise_reason(result: RaceResult) -> str:
    """Why an elementwise race came out as it did: the bytes each contestant moved, and how fast."""
    low = dtype_name(result.dtype)
    b32, blow = result.bytes_moved("fp32"), result.bytes_moved("amp")
    fewer = b32 / blow
    rate = {name: result.bytes_moved(name) / t.median / 1e9 for name, t in result.timings.items()}
    head = (
        f"torch.add does one FLOP per element and moves {format_bytes(b32)} per call in FP32 but "
        f"{format_bytes(blow)} in {low}, {fewer:.3g}x fewer bytes: at {elementwise_intensity(torch.float32):.3g} "
        "FLOP per byte it is memory-bound, so the bytes set its pace, not the arithmetic."
    )
    moved = f"FP32 moved {rate['fp32']:.3g} GB/s and {low} {rate['amp']:.3g} GB/s"
    if result.outcome == "faster":
        return (
            f"{head} {moved}: the speedup is {result.speedup / fewer:.0%} of the {fewer:.3g}x that the bytes "
            "alone would give. No low-precision arithmetic is needed for this win, only fewer bytes."
        )
    return (
        f"{head} {moved}: here the {low} call did not turn its fewer bytes into time, so converting each "
        f"element to and from {low} cost about as much as the bytes it saved (or the tensors fit in a cache, "
        "where bandwidth is not the limit): race a larger numel, or on a quieter machine."
    )


def _reason(result: RaceResult) -> str:
    """Why the race came out as it did, from the hardware's facts and the outcome."""
    if result.kind == "elementwise":
        return _elementwise_reason(result)
    outcome = result.outcome
    low = dtype_name(result.dtype)
    dev = str(result.context.get("device", ""))
    native = native_arithmetic(result)
    if dev.startswith("cpu"):
        insn = _cpu_instructions(result, native)
        if native is False:
            base = f"This CPU has no {insn} instructions, so {low} matmuls are emulated with conversions"
            if outcome == "slower":
                return f"{base} and autocast's casts are pure overhead: that is why AMP is slower here."
            if outcome == "too close to call":
                return f"{base}: AMP cannot gain here; at this size per-op overhead, not arithmetic, sets the pace."
            return (
                f"{base}: a win is not expected here, so suspect noise or an FP32 kernel that is poor at this "
                "size, and race again."
            )
        if native is True:
            if outcome == "faster":
                return (
                    f"This CPU multiplies {low} in hardware ({insn}), and the work is large enough for the "
                    "faster arithmetic to outweigh autocast's casts."
                )
            return (
                f"This CPU multiplies {low} in hardware, so the size is the likely reason: casts and per-op "
                "overhead outweigh the faster matmul. Try a larger width and batch."
            )
        return f"Whether this CPU multiplies {low} in hardware is unknown; the measurement is the answer."
    if dev.startswith("cuda"):
        tc = _tensor_cores(result)
        if tc is None:
            return "The GPU's compute capability was not recorded, so only the measurement speaks."
        cap = f"sm_{tc.capability[0]}{tc.capability[1]}"
        if not tc.has_tensor_cores:
            return (
                f"{tc.architecture} ({cap}) has no Tensor Cores: {low} runs on ordinary CUDA cores, so AMP can "
                "save memory but little time."
            )
        if not native:
            if result.dtype == torch.bfloat16 and not bf16_hardware(tc.capability):
                return (
                    f"bfloat16 is emulated on {tc.architecture} ({cap}): its Tensor Cores multiply "
                    f"{', '.join(tc.precisions).upper()} but not BF16, so torch computes bfloat16 on ordinary CUDA "
                    "cores (torch.cuda.is_bf16_supported() still says True, because it counts emulation). AMP in "
                    "bfloat16 cannot pay here: race float16, which these Tensor Cores multiply."
                )
            return (
                f"{tc.architecture} ({cap}) Tensor Cores multiply {', '.join(tc.precisions).upper()} but not "
                f"{_SHORT[result.dtype].upper()}: {low} runs without them here. Race float16 on this GPU."
            )
        regime = result.regimes["amp"]
        known = regime.name != "unknown"
        if outcome == "faster":
            text = f"{tc.architecture} ({cap}) Tensor Cores multiply {low}, and this work keeps them busy enough to pay."
            return f"{text} For AMP, {regime}." if known else text
        if regime.name == "launch-bound":
            return (
                f"{tc.architecture} ({cap}) Tensor Cores multiply {low}, but this race does not keep them busy. "
                f"For AMP, {regime}. Try a larger width and batch (multiples of 8)."
            )
        if regime.name == "memory-bound":
            return (
                f"For AMP, {regime}; the FP32 contestant moves twice the bytes, so a memory-bound race should "
                "still favour AMP at larger sizes."
            )
        if regime.name == "compute-bound":
            return (
                f"For AMP, {regime}; yet AMP was not faster than FP32, which the datasheet does not explain: "
                "suspect another program on the GPU, or a kernel that is poor at this size, and race again."
            )
        return (
            f"{tc.architecture} ({cap}) Tensor Cores multiply {low}; this GPU has no entry in the course's "
            "datasheet table, so whether launches, memory traffic or arithmetic set the pace cannot be "
            "computed. Small races are usually bound by launches, casts and the optimizer: try a larger width "
            "and batch (multiples of 8)."
        )
    return "The measurement is the answer on this device."


def _tf32_sentence(result: RaceResult) -> str:
    est = result.speedup_vs_tf32_interval
    if est is None:
        return ""
    tc = _tensor_cores(result)
    if tc is not None and "tf32" not in tc.precisions:
        return (
            f"{tc.architecture} has no TF32, so the TF32 contestant ran plain FP32: AMP against it {est}."
        )
    return f"Against TF32 (FP32 on Tensor Cores) the speedup is {est}: {est.outcome}."


def tf32_summary(result: RaceResult) -> str:
    """What TF32 did in a race, composed from its facts: on a GPU with TF32 Tensor Cores the TF32
    contestant against IEEE FP32 and AMP against TF32; on an older GPU or a CPU why there is none.
    (``06_timing_race``)"""
    _check_result("result", result)
    dev = str(result.context.get("device", ""))
    if result.tf32 is not None:
        vs = speedup_estimate(result.fp32, result.tf32, confidence=result.confidence)
        amp = result.speedup_vs_tf32_interval
        return f"TF32 against IEEE FP32: {vs}: {vs.outcome}. AMP against TF32: {amp}: {amp.outcome}."
    if dev.startswith("cuda"):
        tc = _tensor_cores(result)
        if tc is not None:
            return (
                f"{tc.architecture} (sm_{tc.capability[0]}{tc.capability[1]}) has no TF32 Tensor Cores: its FP32 "
                "matmuls are IEEE FP32 whatever the TF32 setting, so the race has no TF32 contestant."
            )
        return "The GPU's compute capability was not recorded, so the race raced no TF32 contestant."
    return (
        f"TF32 is a feature of NVIDIA GPUs from Ampere on; there is none on {dev or 'this device'}. This CPU's FP32 "
        f"matmul precision setting (oneDNN): {result.context.get('fp32_matmul_precision')!r}; the race's context "
        f"records tf32_matmul = {result.context.get('tf32_matmul')} (not applicable)."
    )


def explain(result: RaceResult) -> str:
    """A plain-language reading of a race result, composed from the measurement and the machine's facts:
    the outcome with its interval ("too close to call" when it straddles 1), the likely reason (native or
    emulated arithmetic, Tensor Cores, size), TF32, and a warning when the measurement was noisy.
    (``06_timing_race``; the race widget's card shows it.)"""
    _check_result("result", result)
    parts = [_verdict(result), _reason(result), _tf32_sentence(result), _noise_note([result], result.context)]
    return " ".join(p for p in parts if p)


# ----------------------------------------------------------------------------------------------
# Reference results from real GPUs (docs/results/, written by scripts/gpu_check.py)
# ----------------------------------------------------------------------------------------------

RESULTS_SCHEMA = "amp-lab/gpu-check/1"
RESULTS_DIR = Path(__file__).resolve().parent.parent / "docs" / "results"


def load_reference_results(directory=None) -> list[dict]:
    """Committed GPU check results (``docs/results/*.json``), newest first; [] when there are none.

    ``directory`` (default: the course's ``docs/results``) must be a folder that exists: a path that is
    not one raises ValueError naming it, rather than reading as "no results"."""
    if directory is None:
        directory = RESULTS_DIR
        if not directory.is_dir():
            return []
    else:
        if not isinstance(directory, (str, os.PathLike)):
            raise ArgumentTypeError(
                f"directory must be a folder path (a string or pathlib.Path) or None, got {type(directory).__name__}: "
                f"{directory!r:.80}"
            )
        directory = Path(directory)
        if not directory.is_dir():
            what = "is a file, not a folder" if directory.exists() else "does not exist"
            raise ValueError(f"directory={str(directory)!r} {what}; give the folder that holds the *.json results")
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("schema") == RESULTS_SCHEMA:
            data["_file"] = path.name
            found.append(data)
    found.sort(key=lambda d: str(d.get("date", "")), reverse=True)
    return found


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def describe_reference(reference: dict) -> str:
    """One line naming where a reference file was measured: GPU, driver, CUDA, torch, date."""
    check_instance("reference", reference, dict, "a reference result dict (from load_reference_results())")
    m = reference.get("machine", {})
    if not isinstance(m, dict):
        raise ValueError(f"reference['machine'] must be a dict, got {type(m).__name__}")
    return (
        f"{m.get('gpu_name') or m.get('device', '?')} (driver {m.get('driver')}, CUDA {m.get('cuda_runtime')}, "
        f"torch {m.get('torch')}), measured {str(reference.get('date', '?'))[:10]}"
        + (" [quick sizes]" if reference.get("quick") else "")
    )


def reference_table_html(references: Sequence[dict], mine: SweepResult | None = None) -> str:
    """Matmul speedups from committed reference files next to the learner's own sweep, by size."""
    if not isinstance(references, (list, tuple)):
        raise ArgumentTypeError(
            f"references must be a list of reference dicts (load_reference_results()), got {type(references).__name__}"
        )
    for i, ref in enumerate(references):
        check_instance(f"references[{i}]", ref, dict, "a reference result dict")
    if mine is not None:
        _check_sweep("mine", mine)
    columns: list[tuple[str, dict]] = []
    for ref in references:
        sweeps = {k: v for k, v in ref.get("sweeps", {}).items() if k.startswith("matmul_")}
        if not sweeps:
            continue
        wanted = f"matmul_{dtype_name(mine.results[0].dtype)}" if mine is not None else None
        key = wanted if wanted in sweeps else sorted(sweeps)[0]
        gpu = ref.get("machine", {}).get("gpu_name") or ref.get("machine", {}).get("device", "?")
        columns.append((f"{gpu} ({key.removeprefix('matmul_')})", dict(zip(sweeps[key]["sizes"], sweeps[key]["speedups"], strict=True))))
    if mine is not None:
        columns.append(
            (f"yours: {mine.context['device']} ({dtype_name(mine.results[0].dtype)})", dict(zip(mine.sizes, mine.speedups, strict=True)))
        )
    sizes = sorted({size for _, values in columns for size in values})
    rows = [[n, *(f"{values[n]:.2f}x" if n in values else "-" for _, values in columns)] for n in sizes]
    return table_html(rows, ["n", *(name for name, _ in columns)], caption="AMP speedup over FP32, n x n matmul")


# ----------------------------------------------------------------------------------------------
# The race widget
# ----------------------------------------------------------------------------------------------

_CARD_STYLE = "border:1px solid #ccc;border-radius:6px;padding:8px 12px;max-width:760px"


def _card(state: str, body: str) -> str:
    return f'<div class="amp-race-card" data-race-state="{state}" style="{_CARD_STYLE}">{body}</div>'


def precision_choices(device_type: str, capability=None) -> list[tuple[str, str]]:
    """The race widget's AMP dtype buttons, (label, dtype name), for a device's facts: the course's dtype
    first; on a CUDA GPU without bf16 Tensor Cores (before Ampere) bfloat16 is labelled as emulated."""
    device_type = check_choice("device_type", device_type, ["cpu", "cuda", "mps"])

    first = dtype_name(amp_dtype_for(device_type, capability))
    emulated = device_type == "cuda" and capability is not None and not bf16_hardware(capability)
    labels = {"bfloat16": "bf16 (emulated)" if emulated else "bf16", "float16": "fp16"}
    order = [first] + [d for d in ("bfloat16", "float16") if d != first]
    return [(labels[d], d) for d in order]


def precision_warning(device_type: str, capability, dtype) -> str | None:
    """A warning for racing ``dtype`` on a device, or None: bfloat16 on a CUDA GPU before Ampere is
    emulated, so AMP in bfloat16 cannot win there (the widget shows this before the race).

    ``capability`` is the GPU's ``(major, minor)`` compute capability, or None where it is unknown (a CPU,
    an Apple GPU, or a CUDA GPU not asked): with None no warning can be given, so the answer is None."""
    device_type = check_choice("device_type", device_type, ["cpu", "cuda", "mps"])
    if capability is not None:
        capability = check_capability(capability)
    dtype = parse_dtype(dtype)
    if device_type == "cuda" and capability is not None and dtype == torch.bfloat16 and not bf16_hardware(capability):
        tc = tensor_core_generation(capability)
        return (
            f"{tc.architecture} (sm_{tc.capability[0]}{tc.capability[1]}) has no bf16 Tensor Cores: torch emulates "
            "bfloat16 here, so expect AMP in bf16 to lose. Race fp16 to see what these Tensor Cores do."
        )
    return None


class RaceWidget:
    """Width, batch and precision controls, a Race button, two racing lanes and a result card.

    Built by :func:`race_widget`.  Pressing Race (or calling :meth:`run`) races ``race_mlp`` with the
    chosen settings, sampling until the speedup's interval is narrow or the time budget is spent.  During
    the race each lane's bar shows how far that contestant would have got when the faster one (by running
    median) has done all the samples taken so far: the winner's bar advances one sample per round, the
    loser's ``1/speedup`` of one.  The widths, batches and budget default to :func:`sizes_for` the device.
    """

    def __init__(
        self,
        *,
        device=None,
        widths: Sequence[int] | None = None,
        batches: Sequence[int] | None = None,
        in_features: int = IN_FEATURES,
        warmup: int | None = None,
        repeats: int | None = None,
        min_sample_s: float | None = None,
        target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
        max_time_s: float | None = None,
        num_threads: int | None = None,
    ):
        import ipywidgets as widgets

        self.device = get_device(device)
        sizes = sizes_for(self.device)
        budget = sizes.budget
        # Each choice a positive int, checked before any widget exists; the largest must fit in memory.
        widths = check_int_sequence("widths", sizes.widget_widths if widths is None else widths, minimum=1)
        batches = check_int_sequence("batches", sizes.widget_batches if batches is None else batches, minimum=1)
        self.in_features = check_int("in_features", in_features, minimum=1)
        warmup, repeats, _, min_sample_s, num_threads = _check_budget(
            budget["warmup"] if warmup is None else warmup,
            budget["repeats"] if repeats is None else repeats,
            budget["min_sample_s"] if min_sample_s is None else min_sample_s,
            num_threads,
        )
        self.warmup, self.repeats, self.min_sample_s = warmup, repeats, min_sample_s
        self.target_rel_width = (
            None if target_rel_width is None else check_target_rel_width(target_rel_width)
        )
        self.max_time_s = check_float(
            "max_time_s", budget["max_time_s"] if max_time_s is None else max_time_s, gt=0, le=MAX_SECONDS
        )
        self.num_threads = budget.get("num_threads") if num_threads is None else num_threads
        facts = _device_facts(self.device)
        _check_planned_time(self.repeats, len(contestant_names(*facts)), self.min_sample_s)
        _check_fits(
            mlp_bytes(max(widths), max(batches), torch.float16, in_features=self.in_features,
                      contestants=len(contestant_names(*facts))),
            self.device, f"RaceWidget's largest race (width={max(widths)}, batch={max(batches)})",
            "choose smaller widths or batches",
        )  # fmt: skip

        self.width = widgets.Dropdown(options=widths, value=widths[0], description="width")
        self.batch = widgets.Dropdown(options=batches, value=batches[0], description="batch")
        self._facts = _device_facts(self.device)
        choices = precision_choices(*self._facts)
        self.precision = widgets.ToggleButtons(options=choices, value=choices[0][1], description="AMP dtype")
        self.button = widgets.Button(description="Race", button_style="primary", icon="flag-checkered")
        self.button.add_class("amp-race-button")
        bar_layout = widgets.Layout(width="420px")
        self.fp32_bar = widgets.FloatProgress(
            value=0, min=0, max=self.repeats, description="FP32", bar_style="info", layout=bar_layout
        )
        self.amp_bar = widgets.FloatProgress(
            value=0, min=0, max=self.repeats, description="AMP", bar_style="info", layout=bar_layout
        )
        self.fp32_time = widgets.HTML(value="")
        self.amp_time = widgets.HTML(value="")
        self.result = widgets.HTML(value="")
        self.result.add_class("amp-race-result")
        self.last: RaceResult | None = None
        self._ready()

        for control in (self.width, self.batch, self.precision):
            control.observe(self._on_settings, names="value")
        self.button.on_click(lambda _button: self.run())
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.width, self.batch]),
                widgets.HBox([self.precision, self.button]),
                widgets.HBox([self.fp32_bar, self.fp32_time]),
                widgets.HBox([self.amp_bar, self.amp_time]),
                self.result,
            ]
        )

    @property
    def dtype(self) -> torch.dtype:
        return parse_dtype(self.precision.value)

    def _ready(self) -> None:
        w, b = self.width.value, self.batch.value
        flops = mlp_step_flops(w, b, in_features=self.in_features)
        warning = precision_warning(*self._facts, self.precision.value)
        note = f"<br><b>Note:</b> {html.escape(warning)}" if warning else ""
        self.result.value = _card(
            "ready",
            f"Ready: width {w}, batch {b}, AMP in {self.precision.value} on {self.device}: "
            f"{flops / 1e6:,.1f} MFLOP of matmuls per training step. Press <b>Race</b>.{note}",
        )

    def _reset_bars(self) -> None:
        self.fp32_bar.value = self.amp_bar.value = 0
        self.fp32_bar.max = self.amp_bar.max = self.repeats
        self.fp32_bar.bar_style = self.amp_bar.bar_style = "info"

    def _on_settings(self, _change) -> None:
        self._reset_bars()
        self.fp32_time.value = self.amp_time.value = ""
        self._ready()

    def _set_lanes(self, fp32: Sequence[float], amp: Sequence[float]) -> int:
        """Move both lanes for the rounds both contestants have finished; returns that number of rounds."""
        rounds = min(len(fp32), len(amp))
        if rounds == 0:
            return 0
        med = {k: Timing(k, tuple(v[:rounds]), 1, 0).median for k, v in (("fp32", fp32), ("amp", amp))}
        fastest = min(med.values())
        for bar in (self.fp32_bar, self.amp_bar):  # sampling may go on past `repeats` rounds
            bar.max = max(bar.max, rounds)
        self.fp32_bar.value = rounds * fastest / med["fp32"]
        self.amp_bar.value = rounds * fastest / med["amp"]
        self.fp32_time.value = f"{format_seconds(med['fp32'])}/step"
        self.amp_time.value = f"{format_seconds(med['amp'])}/step"
        return rounds

    def _on_progress(self, event: RaceProgress) -> None:
        if event.phase == "warmup":
            self.result.value = _card("running", f"Warming up {html.escape(event.label)} ...")
            return
        rounds = self._set_lanes(event.samples["fp32"], event.samples["amp"])
        if rounds == 0:
            self.result.value = _card("running", "Racing ...")
            return
        more = (
            f" (at least {event.total}; then until the interval is within about "
            f"+-{50 * self.target_rel_width:.0f}% or {self.max_time_s:g} s have passed)"
            if self.target_rel_width is not None
            else f" of {event.total}"
        )
        self.result.value = _card("running", f"Racing ... round {rounds}{more}")

    def run(self) -> RaceResult | None:
        """Race with the current settings; updates the lanes and the result card."""
        self.button.disabled = True
        self._reset_bars()
        self.result.value = _card("running", "Starting ...")
        try:
            result = race_mlp(
                self.width.value,
                self.batch.value,
                in_features=self.in_features,
                device=self.device,
                dtype=self.dtype,
                warmup=self.warmup,
                repeats=self.repeats,
                min_sample_s=self.min_sample_s,
                target_rel_width=self.target_rel_width,
                max_time_s=self.max_time_s,
                num_threads=self.num_threads,
                callback=self._on_progress,
            )
        except Exception as exc:  # shown in the card: a callback has nowhere else to report
            self.result.value = _card("error", f"<b>Could not race:</b> {html.escape(str(exc))}")
            return None
        finally:
            self.button.disabled = False
        self.last = result
        self._show(result)
        return result

    def _show(self, result: RaceResult) -> None:
        self._set_lanes(result.fp32.samples, result.amp.samples)
        styles = {"faster": ("warning", "success"), "slower": ("success", "warning")}
        self.fp32_bar.bar_style, self.amp_bar.bar_style = styles.get(result.outcome, ("info", "info"))
        self.result.value = _card("done", result_card_html(result))


def result_card_html(result: RaceResult) -> str:
    """The body of the race widget's result card: the speedup with its interval and outcome, the reading
    :func:`explain` composes, the timings, and the context."""
    _check_result("result", result)
    e = html.escape
    est = result.speedup_interval
    unit = _unit(result.kind)
    cell = "padding:1px 10px 1px 0;text-align:right"
    header = ["", f"median per {unit}", "spread (IQR)", "TFLOP/s"] + (["memory"] if result.memory else [])
    rows = ["<tr>" + "".join(f"<th style='{cell}'>{e(h)}</th>" for h in header) + "</tr>"]
    for name, t in result.timings.items():
        values = [name.upper(), format_seconds(t.median), format_seconds(t.iqr), f"{result.tflops[name]:.3g}"]
        if result.memory:
            values.append(format_bytes(result.memory[name]))
        rows.append("<tr>" + "".join(f"<td style='{cell}'>{e(v)}</td>" for v in values) + "</tr>")
    ctx = result.context
    tf32 = _tf32_text(ctx)
    mem_note = f"<br>memory: {e(memory_summary(result))}" if result.memory else ""
    interval = (
        f"{est.confidence_text} interval {est.ends_text()}"
        if math.isfinite(est.high)
        else f"too few pairs for a {est.confidence_text} interval"
    )
    return (
        f"<div style='font-size:1.3em'>speedup <b class='amp-race-speedup'>{format_ratio(est.ratio)}</b> "
        f"(<span class='amp-race-interval'>{e(interval)}</span>): "
        f"<b class='amp-race-outcome' data-outcome='{e(est.outcome)}'>{e(est.outcome)}</b></div>"
        f"<div>AMP {e(dtype_name(result.dtype))} vs FP32, {e(result.size)}</div>"
        f"<p>{e(explain(result))}</p>"
        f"<table style='font-family:monospace;border-collapse:collapse'>{''.join(rows)}</table>"
        f"<small>{_plural(est.pairs, 'interleaved round')} after "
        f"{_plural(result.fp32.warmup, 'untimed warm-up ' + unit)}; {_plural(ctx['threads'], 'thread')}; TF32 for FP32: {tf32}; "
        f"timed with {e(ctx['sync'])}; torch {e(ctx['torch'])}{mem_note}</small>"
    )


def race_widget(**kwargs) -> RaceWidget:
    """Build the race widget (see :class:`RaceWidget`); the notebook cell ends with ``racer.widget``."""
    return RaceWidget(**kwargs)


# ----------------------------------------------------------------------------------------------
# FP8 GEMMs: which GPUs run them, and a race of FP8 against the AMP dtype and FP32
# ----------------------------------------------------------------------------------------------








# cuBLASLt's FP8 GEMM (torch._scaled_mm on CUDA) needs every dimension a multiple of FP8_GEMM_MULTIPLE (16,
# defined once in amp_lab.fp8 and imported above); the CPU takes any size, but the race asks the same of every
# device so a size that runs here runs on a GPU too.


def fp8_matmul_bytes(n: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes ``race_fp8_matmul(n)`` keeps alive at its peak: A, B and C in FP32 and in ``dtype`` (as
    :func:`matmul_bytes` counts them), the two E4M3 operands (1 byte per element), the FP8 GEMM's bfloat16
    result, and three FP32 temporaries while B's transpose is scaled into E4M3 (the transpose, ``x * scale``
    and its clamped copy)."""
    n = check_int("n", n, minimum=1, maximum=MAX_GEMM_DIM)
    return matmul_bytes(n, dtype) + n * n * (2 * 1 + 2 + 3 * 4)


def _tensorwise_e4m3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` in E4M3 with one scale for the whole tensor, and the scale that turns it back (its inverse,
    what ``torch._scaled_mm`` multiplies by): the course's tensorwise scaling (:func:`amp_lab.fp8.tensorwise_scale`
    and :func:`amp_lab.fp8.quantize`, torchao's rules: ``448 / amax`` rounded to float32, a saturating cast)."""
    scale = tensorwise_scale(x, "fp8_e4m3")
    return quantize(x, "fp8_e4m3", scale), scale.reciprocal()


def _fp8_operands(A: torch.Tensor, B: torch.Tensor):
    """A and B in E4M3, laid out as ``torch._scaled_mm`` on CUDA needs them, with their inverse scales.

    cuBLASLt's FP8 GEMM takes the first operand row-major and the second column-major (its "TN" layout), so
    B's transpose is stored row-major and ``b8`` is the transposed view of it: the same values as B, column
    by column, the layout a linear layer's weight ``W`` (out x in) has as ``W.t()``."""
    a8, inv_a = _tensorwise_e4m3(A)
    bt8, inv_b = _tensorwise_e4m3(B.t().contiguous())
    return a8, bt8.t(), inv_a, inv_b


def race_fp8_matmul(
    n: int,
    *,
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
) -> RaceResult:
    """Race one n x n GEMM in FP32, in the AMP dtype and in FP8.  (``08_fp8_and_block_scaling``)

    Three contestants, each with its inputs **already in its own dtype**, so the race compares GEMM rates,
    what a datasheet's FP8 / BF16 ratio is about (what casting costs is :func:`race_matmul`'s subject):

    * ``"fp32"``: ``A @ B`` in FP32 (TF32 off on CUDA, as in :func:`race_matmul`);
    * ``"amp"``: ``A @ B`` with A and B in ``dtype`` (float16 or bfloat16; default ``amp_dtype(device)``);
    * ``"fp8"``: ``torch._scaled_mm`` of A and B in E4M3 with one scale per tensor, accumulating in FP32
      and writing bfloat16.  The scales (``448 / amax``, as torchao computes them) and the E4M3 operands are
      made **once, before timing**: the race times the GEMM, not the scaling.  B is handed over column-major,
      the layout cuBLASLt's FP8 GEMM needs.

    ``n`` is a multiple of 16 (:data:`FP8_GEMM_MULTIPLE`, what cuBLASLt's FP8 GEMM needs; asked on every
    device, so a size that runs here runs on a GPU).  On a CUDA GPU the race runs only where
    :func:`fp8_matmul_support` says FP8 GEMMs run on Tensor Cores (compute capability 8.9 and later, with a
    torch build that has kernels for it), and refuses with its reason before anything is allocated.  On the
    CPU ``torch._scaled_mm`` runs without FP8 arithmetic units: a true result, not a fast one.  The result is
    a :class:`RaceResult` of kind ``"fp8_matmul"``: ``speedup`` is FP32 over AMP, :attr:`RaceResult.fp8_speedup`
    AMP over FP8 (above 1: FP8 is faster), and :func:`fp8_summary` reads it.  Memory
    (:func:`fp8_matmul_bytes`) is checked before anything is allocated; sampling and ``reuse`` work as in
    :func:`race_matmul`.
    """
    n = check_int("n", n, minimum=FP8_GEMM_MULTIPLE, maximum=MAX_GEMM_DIM)
    if n % FP8_GEMM_MULTIPLE:
        lower = n - n % FP8_GEMM_MULTIPLE
        raise ValueError(
            f"n={n} is not a multiple of {FP8_GEMM_MULTIPLE}: FP8 GEMMs (torch._scaled_mm on CUDA) need every "
            f"dimension a multiple of {FP8_GEMM_MULTIPLE}; choose n={lower} or n={lower + FP8_GEMM_MULTIPLE}"
        )
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s,
                               callback)  # fmt: skip
    _, repeats, _, min_sample_s, _ = _check_budget(warmup, repeats, min_sample_s, num_threads)
    _check_planned_time(repeats, 3, min_sample_s)
    device_type, capability = _device_facts(dev)
    if device_type == "mps":
        raise ValueError(
            f"race_fp8_matmul cannot race on {dev}: FP8 GEMMs run on NVIDIA GPUs of compute capability 8.9 and "
            "later, and emulated on the CPU; choose device='cpu' or a CUDA GPU"
        )
    if device_type == "cuda":
        support = fp8_matmul_support(capability, _cuda_arch_list())
        if not support:
            raise ValueError(f"race_fp8_matmul cannot race on {dev}: {support.reason}")
    found = _reusable(reuse, "fp8_matmul", {"n": n}, dtype, dev, num_threads)
    if found is not None:
        return found
    _check_fits(
        fp8_matmul_bytes(n, dtype),
        dev,
        f"race_fp8_matmul(n={n})",
        f"choose a smaller n (a multiple of {FP8_GEMM_MULTIPLE})",
    )
    A, B = _operands(n, dev)
    A_low, B_low = A.to(dtype), B.to(dtype)
    a8, b8, inv_a, inv_b = _fp8_operands(A, B)

    def fp32():
        return A @ B

    def amp():
        return A_low @ B_low

    def fp8():
        return torch._scaled_mm(a8, b8, scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16)

    off = _tf32_context(device_type, False)
    contestants = {name: Contestant(fn, off) for name, fn in (("fp32", fp32), ("amp", amp), ("fp8", fp8))}
    budget = (warmup, repeats, min_sample_s, num_threads, callback, target_rel_width, max_time_s)
    return _run_race("fp8_matmul", {"n": n}, f"n={n}", dtype, dev, contestants, 2.0 * n**3, budget,
                     fp8="float8_e4m3fn, tensorwise scales made before timing, bfloat16 output")  # fmt: skip


def fp8_summary(result: RaceResult) -> str:
    """What an FP8 race (:func:`race_fp8_matmul`) says, composed from its measurement and the facts of the
    machine that ran it: the speedup of FP8 over the AMP dtype and over FP32, each with its interval, each
    contestant's TFLOP/s, and why: on a CPU, that there is no FP8 hardware (and, where the CPU emulates the
    AMP dtype, why that GEMM is slow); on a GPU, :func:`fp8_matmul_support`'s reason and, for a GPU the
    datasheet table knows, the datasheet's FP8 / BF16 ratio beside the measured one.
    (``08_fp8_and_block_scaling``)"""
    _check_result("result", result)
    if result.fp8 is None:
        raise ValueError(f"result must be an FP8 race (race_fp8_matmul), got a {result.kind!r} race without an 'fp8' timing")
    est = result.fp8_speedup_interval
    vs32 = speedup_estimate(result.fp32, result.fp8, confidence=result.confidence)
    low = dtype_name(result.dtype)
    rates = ", ".join(f"{label} {result.tflops[name]:.3g}" for name, label in (("fp32", "FP32"), ("amp", low), ("fp8", "FP8")))
    dev = str(result.context.get("device", ""))
    head = (
        f"FP8 (E4M3) against {low}, {result.size} on {dev or '?'}: {est}: {est.outcome}; against FP32: {vs32}: "
        f"{vs32.outcome}. TFLOP/s: {rates}."
    )
    if not dev.startswith("cuda"):
        text = (
            f"{head} There are no FP8 Tensor Cores on {dev or 'this device'}: torch._scaled_mm there converts the "
            "E4M3 operands and multiplies them with ordinary arithmetic, so the race checks that FP8 GEMMs run, "
            "not how fast they are on the hardware built for them."
        )
        slowest = max(result.timings, key=lambda name: result.timings[name].median)
        if native_arithmetic(result) is False and slowest == "amp":
            insn = _cpu_instructions(result, False)
            text += (
                f" This CPU has no {insn} instructions either, so its {low} GEMM is emulated: that is why it was "
                "the slowest of the three, not a sign that FP8 is fast here."
            )
        return text
    cap = result.context.get("capability")
    support = fp8_matmul_support(tuple(cap) if cap else None)
    entry = datasheet_entry(result.context.get("device_name"))
    ratio = None if entry is None else entry.fp8_over_bf16
    if ratio is None:
        sheet = "The course's datasheet table has no FP8 figure for this GPU, so the measurement is the answer."
    else:
        sheet = (
            f"The {entry.model} datasheet gives FP8 {ratio:.3g}x the BF16 rate; this race measured "
            f"{est.ratio:.3g}x against {low} ({est.ratio / ratio:.0%} of that ceiling)."
        )
    return f"{head} {support.reason}. {sheet}"


def _cuda_arch_list() -> tuple[str, ...]:
    """``torch.cuda.get_arch_list()``: one function, so a CPU test can hand a race a GPU build's list."""
    return tuple(torch.cuda.get_arch_list())
