"""The race: FP32 against AMP, timed the way a performance engineer would.  (``06_timing_race``)

The seed's race timed one run of each contestant with ``time.time()``: no warm-up (the first
contestant paid for start-up), no synchronisation (on CUDA the clock was read while kernels
were still queued), one trial (no idea of the spread).  This module's timer fixes each of those:

* **warm-up**: every contestant runs ``warmup`` untimed calls first (kernel selection, allocator
  growth, oneDNN primitive creation, the CUDA context and cuBLAS handles all happen there);
* **synchronisation**: on CUDA each sample is bracketed by CUDA events and the stream is
  synchronised before the clock is read; elsewhere the device is synchronised around a
  ``time.perf_counter`` reading;
* **repeated samples**: ``repeats`` samples per contestant, each averaging ``number`` calls (chosen
  so one sample lasts at least ``min_sample_s``), reported as median and interquartile range;
* **interleaving**: contestants take turns sample by sample (the order flips every round), so a
  noisy neighbour or a frequency change hurts both instead of whichever ran second;
* **context**: every result records the device, thread count, TF32 setting and versions, because
  a number without them cannot be compared with anyone else's.

It builds on ``torch.utils.benchmark`` where that fits: :meth:`Timing.to_measurement` turns a
timing into a ``torch.utils.benchmark.Measurement`` (so ``benchmark.Compare`` can tabulate it), and
``benchmarks/bench_race_fidelity.py`` checks this timer against ``benchmark.Timer`` measuring the
same kernels.  Mind that ``benchmark.Timer`` uses **one thread** unless given ``num_threads``:
here the thread count is whatever torch uses (or ``num_threads=``) and is always recorded.
"""

from __future__ import annotations

import contextlib
import copy
import html
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from ._checks import check_choice, check_float, check_int
from .device import amp_dtype, dtype_name, get_device, parse_dtype, torch_threads
from .hardware import tf32_matmul_enabled as _tf32_matmul_enabled

# The clock and the synchroniser are module attributes so tests can replace them with fakes and
# check *when* they are called relative to the timed work.
_clock = time.perf_counter

IN_FEATURES = 1024
NUM_CLASSES = 10

__all__ = [
    "Ceiling",
    "Contestant",
    "RaceProgress",
    "RaceResult",
    "RaceWidget",
    "SweepResult",
    "Timing",
    "datasheet_ceiling",
    "describe_reference",
    "explain",
    "format_bytes",
    "format_seconds",
    "load_reference_results",
    "matmul_bytes",
    "measure",
    "mlp_bytes",
    "mlp_step_flops",
    "plot_memory",
    "plot_sweep",
    "race_matmul",
    "race_mlp",
    "race_widget",
    "reference_table_html",
    "result_card_html",
    "seed_model",
    "sweep",
    "sweep_summary",
    "timing_context",
]


# ----------------------------------------------------------------------------------------------
# Formatting
# ----------------------------------------------------------------------------------------------


def format_seconds(seconds: float) -> str:
    """``0.00123`` -> ``'1.23 ms'``: three significant figures in s, ms, µs or ns."""
    s = float(seconds)
    if not math.isfinite(s):
        return str(s)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def format_bytes(nbytes: float | None) -> str:
    """``3 * 2**20`` -> ``'3.00 MiB'``."""
    if nbytes is None:
        return "n/a"
    b = float(nbytes)
    for unit, scale in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(b) >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{int(b)} B"


# ----------------------------------------------------------------------------------------------
# Context: what a timing needs next to it to mean anything
# ----------------------------------------------------------------------------------------------

_NEW_TF32_API = hasattr(torch.backends, "fp32_precision")  # torch >= 2.9


@contextlib.contextmanager
def _tf32_matmul(enabled: bool):
    """Temporarily allow (or forbid) TF32 for CUDA FP32 matmuls, then restore the setting."""
    matmul = torch.backends.cuda.matmul
    if _NEW_TF32_API:
        old = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = old
    else:  # pragma: no cover - torch < 2.9
        old = matmul.allow_tf32
        matmul.allow_tf32 = enabled
        try:
            yield
        finally:
            matmul.allow_tf32 = old


def _cpu_fp32_matmul_precision() -> str:
    mkldnn = getattr(torch.backends, "mkldnn", None)
    try:
        return str(mkldnn.matmul.fp32_precision)
    except AttributeError:  # pragma: no cover - older torch
        return "n/a"


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "cpu":
        from .hardware import cpu_model

        return cpu_model()
    return dev.type


def _sync_method(dev: torch.device) -> str:
    if dev.type == "cuda":
        return "CUDA events; stream synchronised before each reading"
    if dev.type == "mps":
        return "perf_counter; torch.mps.synchronize() before each reading"
    return "perf_counter (CPU ops return when done: nothing to synchronise)"


def timing_context(device=None) -> dict:
    """What a timing on ``device`` depends on: device, threads, TF32, versions, how it was synchronised."""
    dev = get_device(device)
    ctx = {
        "device": str(dev),
        "device_name": _device_name(dev),
        "threads": torch.get_num_threads(),
        "tf32_matmul": _tf32_matmul_enabled() if dev.type == "cuda" else None,
        "fp32_matmul_precision": (
            ("tf32" if _tf32_matmul_enabled() else "ieee") if dev.type == "cuda" else _cpu_fp32_matmul_precision()
        ),
        "sync": _sync_method(dev),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        # Other programs competing for the cores stall multi-threaded kernels: record how busy it was.
        "load_avg_1min": _load_average(),
    }
    return ctx


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _tf32_text(ctx: dict) -> str:
    value = ctx.get("tf32_matmul")
    return "n/a (CPU)" if value is None else ("on" if value else "off")


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


# ----------------------------------------------------------------------------------------------
# The timer
# ----------------------------------------------------------------------------------------------


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's and torch's default method)."""
    n = len(sorted_values)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timing:
    """Repeated samples of one contestant.  ``samples`` are seconds **per call**, one per sample."""

    label: str
    samples: tuple[float, ...]
    number: int  # calls averaged into each sample
    warmup: int  # untimed calls made before the first sample
    context: dict = field(default_factory=dict, compare=False)

    @property
    def median(self) -> float:
        return _quantile(sorted(self.samples), 0.5)

    @property
    def q1(self) -> float:
        return _quantile(sorted(self.samples), 0.25)

    @property
    def q3(self) -> float:
        return _quantile(sorted(self.samples), 0.75)

    @property
    def iqr(self) -> float:
        """Interquartile range: the spread of the middle half of the samples."""
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else math.inf

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def calls(self) -> int:
        """Every call made: warm-up plus timed."""
        return self.warmup + self.number * len(self.samples)

    def to_measurement(self):
        """The same samples as a ``torch.utils.benchmark.Measurement`` (for ``benchmark.Compare``)."""
        from torch.utils import benchmark

        task = benchmark.TaskSpec(
            stmt=self.label,
            setup="",
            label=self.context.get("race", "amp_lab race"),
            sub_label=self.context.get("size", ""),
            description=self.label,
            num_threads=int(self.context.get("threads", torch.get_num_threads())),
        )
        raw = [s * self.number for s in self.samples]
        return benchmark.Measurement(number_per_run=self.number, raw_times=raw, task_spec=task)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "median_s": self.median,
            "iqr_s": self.iqr,
            "samples_s": list(self.samples),
            "number": self.number,
            "warmup": self.warmup,
            "context": _jsonable(self.context),
        }

    def __str__(self) -> str:
        return (
            f"{self.label}: median {format_seconds(self.median)}, IQR {format_seconds(self.iqr)} "
            f"({100 * self.rel_iqr:.0f}%), {len(self.samples)} samples x {self.number} calls "
            f"after {self.warmup} warm-up calls, {self.context.get('threads', '?')} threads"
        )


@dataclass(frozen=True)
class Contestant:
    """A function to time, and a context manager factory entered around each of its samples
    (used to switch TF32 on for the TF32 contestant only, without paying the switch per call)."""

    fn: Callable[[], Any]
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


class RaceProgress(NamedTuple):
    """What :func:`measure` tells its ``callback`` after each warm-up and each sample."""

    phase: str  # "warmup" or "sample"
    label: str
    done: int  # samples done by this contestant (0 during warm-up)
    total: int  # samples each contestant will take
    samples: dict  # label -> list of per-call seconds so far


def _no_sync() -> None:
    return None


def _synchronizer(dev: torch.device) -> Callable[[], None]:
    """The function that waits for ``dev`` to finish its queued work."""
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    return _no_sync


class _WallClockSampler:
    """Seconds for ``number`` calls: synchronise, read the clock, call, synchronise, read the clock."""

    def __init__(self, dev: torch.device):
        self.sync = _synchronizer(dev)

    def __call__(self, fn: Callable[[], Any], number: int) -> float:
        self.sync()
        start = _clock()
        for _ in range(number):
            fn()
        self.sync()
        return _clock() - start


class _CudaEventSampler:
    """Seconds for ``number`` calls, measured on the GPU's own timeline with two CUDA events.

    The stream is synchronised first (so earlier work is not counted), the end event is waited
    for before its time is read (so queued work *is* counted).
    """

    def __init__(self, dev: torch.device, event_factory: Callable[[], Any] | None = None):
        self.sync = _synchronizer(dev)
        self.event = event_factory or (lambda: torch.cuda.Event(enable_timing=True))

    def __call__(self, fn: Callable[[], Any], number: int) -> float:
        start, end = self.event(), self.event()
        self.sync()
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


def _sampler(dev: torch.device):
    return _CudaEventSampler(dev) if dev.type == "cuda" else _WallClockSampler(dev)


def _on_device(dev: torch.device):
    # CUDA events record on the current device's stream: make the race's device current.
    return torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()


def _as_contestant(name: str, value) -> Contestant:
    if isinstance(value, Contestant):
        return value
    if callable(value):
        return Contestant(value)
    raise ValueError(f"contestant {name!r} must be a callable or a Contestant, got {type(value).__name__}")


def measure(
    fns,
    *,
    device=None,
    warmup: int = 3,
    repeats: int = 10,
    number: int | None = None,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    label: str = "fn",
    extra_context: dict | None = None,
):
    """Time one function, or race several, honestly.  (Taught in ``06_timing_race``.)

    ``fns`` is a callable (returns one :class:`Timing`) or a dict ``label -> callable or
    Contestant`` (returns a dict of timings).  Each contestant first makes ``warmup`` untimed
    calls (at least one when ``number`` is not given: the fastest warm-up call sets how many calls
    make a sample last ``min_sample_s``).  Then the contestants take turns, ``repeats`` samples
    each, the order reversed every round.  ``num_threads`` sets torch's CPU threads for the measurement
    (default: leave them as they are); the count used is recorded in each timing's context.
    """
    single = callable(fns) or isinstance(fns, Contestant)
    if single:
        contestants = {str(label): _as_contestant(str(label), fns)}
    elif isinstance(fns, dict) and fns:
        contestants = {str(k): _as_contestant(str(k), v) for k, v in fns.items()}
    else:
        raise ValueError(f"fns must be a callable or a non-empty dict of callables, got {fns!r}")
    warmup = check_int("warmup", warmup, minimum=0)
    repeats = check_int("repeats", repeats, minimum=1)
    if number is not None:
        number = check_int("number", number, minimum=1)
    min_sample_s = check_float("min_sample_s", min_sample_s, gt=0)
    if num_threads is not None:
        num_threads = check_int("num_threads", num_threads, minimum=1)
    dev = get_device(device)

    names = list(contestants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    numbers: dict[str, int] = {}
    untimed: dict[str, int] = {}
    contexts: dict[str, dict] = {}
    with torch_threads(num_threads), _on_device(dev):
        sampler = _sampler(dev)
        for name in names:
            c = contestants[name]
            with c.context():
                contexts[name] = {**timing_context(dev), **(extra_context or {})}
                if number is None:
                    # Calibrate on the *fastest* warm-up call: a call that was slowed down (start-up,
                    # another program) would make samples too short, and short samples pay per-sample
                    # costs (waking the thread pool, refilling caches) that a training loop does not.
                    times = [sampler(c.fn, 1) for _ in range(max(warmup, 1))]
                    untimed[name] = len(times)
                    numbers[name] = max(1, min(10**6, math.ceil(min_sample_s / max(min(times), 1e-9))))
                else:
                    for _ in range(warmup):
                        c.fn()
                    untimed[name] = warmup
                    numbers[name] = number
            if callback is not None:
                callback(RaceProgress("warmup", name, 0, repeats, {k: list(v) for k, v in samples.items()}))
        for r in range(repeats):
            for name in names if r % 2 == 0 else names[::-1]:
                c = contestants[name]
                with c.context():
                    seconds = sampler(c.fn, numbers[name])
                samples[name].append(seconds / numbers[name])
                if callback is not None:
                    callback(
                        RaceProgress("sample", name, r + 1, repeats, {k: list(v) for k, v in samples.items()})
                    )
    timings = {
        name: Timing(
            label=name,
            samples=tuple(samples[name]),
            number=numbers[name],
            warmup=untimed[name],
            context=contexts[name],
        )
        for name in names
    }
    return timings[names[0]] if single else timings


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


@dataclass(frozen=True)
class RaceResult:
    """One race: FP32 against AMP (and TF32 on CUDA), with everything needed to read it."""

    kind: str  # "matmul" or "mlp"
    params: dict  # {"n": ...} or {"width": ..., "batch": ..., "in_features": ..., "num_classes": ...}
    dtype: torch.dtype
    timings: dict  # "fp32", "amp" and on CUDA "tf32" -> Timing
    flops: float  # floating-point operations per call (matmul) or per training step (mlp)
    memory: dict | None  # {"fp32": bytes, "amp": bytes, ..., "method": str}
    context: dict

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
    def speedup(self) -> float:
        """FP32 median / AMP median: above 1, AMP is faster."""
        return self.fp32.median / self.amp.median

    @property
    def speedup_vs_tf32(self) -> float | None:
        return None if self.tf32 is None else self.tf32.median / self.amp.median

    @property
    def tflops(self) -> dict:
        """Achieved TFLOP/s of each contestant (from its median)."""
        return {name: self.flops / t.median / 1e12 for name, t in self.timings.items()}

    @property
    def size(self) -> str:
        if self.kind == "matmul":
            return f"n={self.params['n']}"
        return f"width={self.params['width']}, batch={self.params['batch']}"

    def to_dict(self) -> dict:
        return _jsonable(
            {
                "kind": self.kind,
                "params": self.params,
                "dtype": self.dtype,
                "speedup": self.speedup,
                "speedup_vs_tf32": self.speedup_vs_tf32,
                "tflops": self.tflops,
                "flops": self.flops,
                "memory": self.memory,
                "timings": {k: t.to_dict() for k, t in self.timings.items()},
                "context": self.context,
            }
        )

    def __str__(self) -> str:
        unit = "call" if self.kind == "matmul" else "step"
        lines = [f"race {self.kind} {self.size}, AMP dtype {dtype_name(self.dtype)} on {self.context['device']}"]
        for name, t in self.timings.items():
            lines.append(
                f"  {name:>4}: {format_seconds(t.median)}/{unit} (IQR {format_seconds(t.iqr)}), "
                f"{self.tflops[name]:.3g} TFLOP/s"
            )
        lines.append(f"  speedup (FP32 / AMP): {self.speedup:.2f}x")
        if self.speedup_vs_tf32 is not None:
            lines.append(f"  speedup (TF32 / AMP): {self.speedup_vs_tf32:.2f}x")
        if self.memory:
            mem = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.memory.items() if k != "method")
            lines.append(f"  memory: {mem} ({self.memory['method']})")
        n = len(self.fp32.samples)
        lines.append(
            f"  {n} samples each after {_plural(self.fp32.warmup, 'warm-up call')}, {self.context['threads']} threads, "
            f"TF32 for FP32: {_tf32_text(self.context)}, torch {self.context['torch']}"
        )
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Memory: refuse what cannot fit, before anything is allocated
# ----------------------------------------------------------------------------------------------


def _available_bytes(dev: torch.device) -> int | None:
    """Free memory on ``dev`` (None when this platform cannot say)."""
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    if dev.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_AVPHYS_PAGES"))
        except (AttributeError, ValueError, OSError):
            return None
    return None


def matmul_bytes(n: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes ``race_matmul(n)`` keeps alive at its peak: A, B and C in FP32, plus A, B and C in
    the low-precision ``dtype`` (autocast's casts of the inputs and its result)."""
    low = torch.finfo(dtype).bits // 8
    return n * n * (3 * 4 + 3 * low)


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
    low = torch.finfo(dtype).bits // 8
    params = in_features * width + width + width * num_classes + num_classes
    activations = batch * (in_features + 3 * width + 3 * num_classes)
    per_contestant = 16 * params + low * params + 4 * activations + low * batch * in_features
    return contestants * per_contestant + 4 * batch * in_features


def _check_fits(needed: int, dev: torch.device, what: str, hint: str) -> None:
    available = _available_bytes(dev)
    if available is not None and needed > 0.9 * available:
        raise ValueError(
            f"{what} needs about {format_bytes(needed)}, but {dev} has about {format_bytes(available)} "
            f"available: refused before allocating anything; {hint}"
        )


# ----------------------------------------------------------------------------------------------
# race_matmul
# ----------------------------------------------------------------------------------------------


def _operands(n: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=dev).manual_seed(0)
    A = torch.randn(n, n, device=dev, generator=gen)
    B = torch.randn(n, n, device=dev, generator=gen)
    return A, B


def _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads):
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else parse_dtype(dtype)
    check_int("warmup", warmup, minimum=0)
    check_int("repeats", repeats, minimum=1)
    check_float("min_sample_s", min_sample_s, gt=0)
    if num_threads is not None:
        check_int("num_threads", num_threads, minimum=1)
    return dev, dtype


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
) -> RaceResult:
    """Race ``C = A @ B`` (n x n, FP32 inputs) without and with autocast.  (``06_timing_race``)

    The AMP contestant includes autocast's casts of A and B, as a model's matmuls do.  ``dtype``
    is float16 or bfloat16 (default: ``amp_dtype(device)``).  On CUDA the FP32 contestant runs with
    TF32 off and a third contestant, ``"tf32"``, runs the FP32 matmul with TF32 on.
    """
    n = check_int("n", n, minimum=1)
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads)
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

    contestants = {"fp32": Contestant(fp32), "amp": Contestant(amp)}
    if dev.type == "cuda":
        contestants["fp32"] = Contestant(fp32, lambda: _tf32_matmul(False))
        contestants["tf32"] = Contestant(fp32, lambda: _tf32_matmul(True))
    extra = {"race": "matmul", "size": f"n={n}", "amp_dtype": dtype_name(dtype)}
    timings = measure(
        contestants,
        device=dev,
        warmup=warmup,
        repeats=repeats,
        min_sample_s=min_sample_s,
        num_threads=num_threads,
        callback=callback,
        extra_context=extra,
    )
    return RaceResult(
        kind="matmul",
        params={"n": n},
        dtype=dtype,
        timings=timings,
        flops=2.0 * n**3,
        memory=None,
        context=timings["fp32"].context,
    )


def _largest_fitting_n(dev: torch.device, dtype: torch.dtype) -> int:
    available = _available_bytes(dev) or 0
    per = matmul_bytes(1, dtype)
    return max(1, int(math.sqrt(0.9 * available / per)))


# ----------------------------------------------------------------------------------------------
# race_mlp: training steps of the seed's model
# ----------------------------------------------------------------------------------------------


def seed_model(width: int, *, in_features: int = IN_FEATURES, num_classes: int = NUM_CLASSES) -> torch.nn.Module:
    """The seed's model: ``Linear(in_features -> width) -> ReLU -> Linear(width -> num_classes)``."""
    return torch.nn.Sequential(
        torch.nn.Linear(in_features, width), torch.nn.ReLU(), torch.nn.Linear(width, num_classes)
    )


def mlp_step_flops(width: int, batch: int, *, in_features: int = IN_FEATURES, num_classes: int = NUM_CLASSES) -> float:
    """Matmul FLOPs of one training step of the seed's model.

    Forward: two matmuls, ``2*b*(in*w + w*c)``.  Backward: the second layer needs the gradient
    of its input and of its weight (``4*b*w*c``); the first only its weight's (``2*b*in*w``, the
    inputs need no gradient).  Elementwise work (ReLU, loss, Adam) is left out.
    """
    b, i, w, c = batch, in_features, width, num_classes
    return float(2 * b * (i * w + w * c) + 4 * b * w * c + 2 * b * i * w)


class _Trainer:
    """One contestant: its own copy of the model, its optimizer, and a ``step()``."""

    def __init__(self, model, X, y, dev, dtype: torch.dtype | None):
        self.model = copy.deepcopy(model).to(dev)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
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
) -> RaceResult:
    """Race training steps of the seed's model in FP32 against autocast.  (``06_timing_race``)

    Model ``Linear(in_features -> width) -> ReLU -> Linear(width -> num_classes)``, Adam,
    cross-entropy, one fixed random batch.  Each contestant trains its own copy of the same
    initial weights.  The AMP step uses ``torch.autocast`` and, for float16, a
    ``torch.amp.GradScaler``.  On CUDA a ``"tf32"`` contestant runs the FP32 step with TF32 on.
    ``memory=True`` adds each contestant's peak memory for one step (measured on CUDA; an estimate
    elsewhere, and the result says which).
    """
    width = check_int("width", width, minimum=1)
    batch = check_int("batch", batch, minimum=1)
    in_features = check_int("in_features", in_features, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads)
    n_contestants = 3 if dev.type == "cuda" else 2
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

        make = {"fp32": Contestant(trainer(None)), "amp": Contestant(trainer(dtype))}
        if dev.type == "cuda":
            make = {
                "fp32": Contestant(trainer(None), lambda: _tf32_matmul(False)),
                "amp": Contestant(trainer(dtype)),
                "tf32": Contestant(trainer(None), lambda: _tf32_matmul(True)),
            }
        mem = _measure_memory(make, dev, [X, y]) if memory else None
        trainers = {name: build.fn() for name, build in make.items()}
    contestants = {name: Contestant(trainers[name].step, make[name].context) for name in make}
    extra = {"race": "mlp", "size": f"width={width}, batch={batch}", "amp_dtype": dtype_name(dtype)}
    timings = measure(
        contestants,
        device=dev,
        warmup=warmup,
        repeats=repeats,
        min_sample_s=min_sample_s,
        num_threads=num_threads,
        callback=callback,
        extra_context=extra,
    )
    return RaceResult(
        kind="mlp",
        params={"width": width, "batch": batch, "in_features": in_features, "num_classes": num_classes},
        dtype=dtype,
        timings=timings,
        flops=mlp_step_flops(width, batch, in_features=in_features, num_classes=num_classes),
        memory=mem,
        context=timings["fp32"].context,
    )


def _mlp_setup(width, batch, in_features, num_classes, dev):
    # Seeded without touching the learner's global RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = seed_model(width, in_features=in_features, num_classes=num_classes)
        X = torch.randn(batch, in_features)
        y = torch.randint(0, num_classes, (batch,))
    return X.to(dev), y.to(dev), model


# ----------------------------------------------------------------------------------------------
# The ceiling, and the sweep
# ----------------------------------------------------------------------------------------------

# Dense peak TFLOP/s from NVIDIA's datasheets: low-precision Tensor Core rate over the FP32 (CUDA
# core) rate, and over the TF32 Tensor Core rate.  (name fragment, fp16 ratio, bf16 ratio, ratio
# over TF32, source)
DATASHEET = (
    ("H200", 14.8, 14.8, 2.0, "H200 datasheet (H100 SXM's Tensor Cores): 989 TFLOP/s FP16/BF16, 495 TF32, 67 FP32"),
    ("H100", 14.8, 14.8, 2.0, "H100 SXM datasheet: 989 TFLOP/s FP16/BF16 Tensor, 495 TF32, 67 FP32"),
    ("A100", 16.0, 16.0, 2.0, "A100 datasheet: 312 TFLOP/s FP16/BF16 Tensor, 156 TF32, 19.5 FP32"),
    ("V100", 8.0, None, None, "V100 datasheet: 125 TFLOP/s FP16 Tensor, 15.7 FP32 (no BF16, no TF32)"),
)


@dataclass(frozen=True)
class Ceiling:
    """The best speedup AMP can hope for: the raw low-precision / FP32 arithmetic rate."""

    vs_fp32: float
    vs_tf32: float | None
    source: str
    measured_gemm: float | None = None  # FP32 GEMM time / low-precision GEMM time, inputs already cast
    gemm_shape: tuple[int, int, int] | None = None


def datasheet_ceiling(gpu_name: str | None, dtype=torch.float16) -> Ceiling | None:
    """The datasheet ceiling for a known GPU (V100, A100, H100, H200), else None."""
    dtype = parse_dtype(dtype)
    if not gpu_name:
        return None
    for fragment, fp16, bf16, over_tf32, source in DATASHEET:
        if fragment.lower() in gpu_name.lower():
            ratio = fp16 if dtype == torch.float16 else bf16
            if ratio is None:
                return None
            return Ceiling(vs_fp32=ratio, vs_tf32=over_tf32, source=source)
    return None


def _raw_gemm_ratio(m, k, n, *, device, dtype, warmup, repeats, min_sample_s, num_threads) -> float:
    """FP32 GEMM time over low-precision GEMM time with inputs already in ``dtype`` (no casts)."""
    dev = device
    gen = torch.Generator(device=dev).manual_seed(1)
    A = torch.randn(m, k, device=dev, generator=gen)
    B = torch.randn(k, n, device=dev, generator=gen)
    A_low, B_low = A.to(dtype), B.to(dtype)
    fp32 = Contestant(lambda: A @ B, (lambda: _tf32_matmul(False)) if dev.type == "cuda" else contextlib.nullcontext)
    t = measure(
        {"fp32": fp32, "low": lambda: A_low @ B_low},
        device=dev,
        warmup=warmup,
        repeats=repeats,
        min_sample_s=min_sample_s,
        num_threads=num_threads,
    )
    return t["fp32"].median / t["low"].median


@dataclass(frozen=True)
class SweepResult:
    """Speedup against size, with the ceiling."""

    kind: str
    sizes: tuple[int, ...]
    results: tuple[RaceResult, ...]
    ceiling: Ceiling
    context: dict

    @property
    def speedups(self) -> list[float]:
        return [r.speedup for r in self.results]

    @property
    def first_paying_size(self) -> int | None:
        """The smallest size from which AMP is faster at every larger size (None: never)."""
        paying = None
        for size, s in zip(reversed(self.sizes), reversed(self.speedups), strict=True):
            if s <= 1.0:
                break
            paying = size
        return paying

    def to_dict(self) -> dict:
        return _jsonable(
            {
                "kind": self.kind,
                "sizes": self.sizes,
                "speedups": self.speedups,
                "speedups_vs_tf32": [r.speedup_vs_tf32 for r in self.results],
                "ceiling": {
                    "vs_fp32": self.ceiling.vs_fp32,
                    "vs_tf32": self.ceiling.vs_tf32,
                    "source": self.ceiling.source,
                    "measured_gemm": self.ceiling.measured_gemm,
                    "gemm_shape": self.ceiling.gemm_shape,
                },
                "results": [r.to_dict() for r in self.results],
                "context": self.context,
            }
        )


def _default_sizes(kind: str, dev: torch.device) -> tuple[int, ...]:
    if dev.type == "cuda":
        return (256, 512, 1024, 2048, 4096, 8192) if kind == "matmul" else (256, 512, 1024, 2048, 4096, 8192)
    return (32, 64, 128, 256) if kind == "matmul" else (64, 128, 256, 512)


def sweep(
    sizes: Sequence[int] | None = None,
    *,
    kind: str = "matmul",
    batch: int | None = None,
    device=None,
    dtype=None,
    warmup: int = 2,
    repeats: int = 7,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    show_progress: bool = True,
) -> SweepResult:
    """Speedup against size, and the ceiling it is heading for.  (``06_timing_race``)

    ``kind="matmul"``: ``race_matmul(n)`` for each ``n`` in ``sizes``; ``kind="mlp"``:
    ``race_mlp(width, batch)`` for each width (memory included).  Sizes default to small ones on
    the CPU (low precision is slow on CPUs without bf16/fp16 instructions) and larger ones on
    CUDA.  The ceiling is the datasheet ratio for a known GPU; otherwise (every CPU) it is the
    measured ratio of raw GEMMs with inputs already in low precision, at the largest size.
    """
    kind = check_choice("kind", kind, ["matmul", "mlp"])
    dev, dtype = _check_common(device, dtype, warmup, repeats, min_sample_s, num_threads)
    if sizes is None:
        sizes = _default_sizes(kind, dev)
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise ValueError(f"sizes must be a sequence of positive integers, got {sizes!r}")
    sizes = tuple(check_int("sizes[i]", s, minimum=1) for s in sizes)
    if not sizes:
        raise ValueError("sizes must contain at least one size, got an empty sequence")
    if batch is None:
        batch = 1024 if dev.type == "cuda" else 64
    batch = check_int("batch", batch, minimum=1)
    # Refuse the whole sweep up front rather than after minutes of racing.
    largest = max(sizes)
    if kind == "matmul":
        _check_fits(matmul_bytes(largest, dtype), dev, f"sweep size n={largest}", "choose smaller sizes")
    else:
        _check_fits(mlp_bytes(largest, batch, dtype), dev, f"sweep width={largest}", "choose smaller sizes")

    from .progress import progress

    common = dict(
        device=dev, dtype=dtype, warmup=warmup, repeats=repeats, min_sample_s=min_sample_s, num_threads=num_threads
    )
    results = []
    bar = progress(total=len(sizes) + 1, desc=f"sweep {kind}") if show_progress else None
    try:
        for size in sizes:
            if bar is not None:
                bar.set_postfix_str(f"size {size}")
            if kind == "matmul":
                results.append(race_matmul(size, **common))
            else:
                results.append(race_mlp(size, batch, **common))
            if bar is not None:
                bar.update(1)
        if kind == "matmul":
            shape = (largest, largest, largest)
        else:
            shape = (batch, IN_FEATURES, largest)
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
            vs_fp32=measured,
            vs_tf32=None,
            source=f"measured on this {what}: raw {dtype_name(dtype)} GEMM {shape[0]}x{shape[1]}x{shape[2]} "
            "against FP32, inputs already cast",
        )
    ceiling = Ceiling(ceiling.vs_fp32, ceiling.vs_tf32, ceiling.source, measured_gemm=measured, gemm_shape=shape)
    return SweepResult(kind=kind, sizes=sizes, results=tuple(results), ceiling=ceiling, context=results[-1].context)


def sweep_summary(result: SweepResult) -> str:
    """A few lines reading a sweep: the speedups, where AMP pays and how close it gets to the ceiling,
    and a warning when the measurements were too noisy to read."""
    r0 = result.results[0]
    what = "n x n matmul, n" if result.kind == "matmul" else f"training step (batch {r0.params['batch']}), width"
    pairs = ", ".join(f"{s}: {x:.2f}x" for s, x in zip(result.sizes, result.speedups, strict=True))
    c = result.ceiling
    best = max(result.speedups)
    at = result.sizes[result.speedups.index(best)]
    if c.vs_fp32 < 1:
        second = (
            f"The ceiling is {c.vs_fp32:.3g}x ({c.source}): below 1, so {dtype_name(r0.dtype)} arithmetic itself is "
            f"slower than FP32 here and AMP cannot pay; best measured {best:.2f}x at {at}."
        )
    else:
        pays = result.first_paying_size
        start = f"AMP pays from {pays} on" if pays is not None else "AMP does not pay at the largest size measured"
        second = f"{start}; best {best:.2f}x at {at}, {best / c.vs_fp32:.0%} of the ceiling {c.vs_fp32:.3g}x ({c.source})."
    lines = [f"{what}: {pairs}", second]
    worst = max(t.rel_iqr for r in result.results for t in r.timings.values())
    if worst > 0.2:
        load, cores = result.context.get("load_avg_1min"), result.context.get("cpu_count")
        busy = f", load average {load} on {cores} cores" if load is not None and cores else ""
        lines.append(
            f"Noisy: IQR up to {100 * worst:.0f}% of a median{busy}. Something else was using the machine; "
            "sweep again when it is quiet before reading the numbers."
        )
    return "\n".join(lines)


def _speedup_range(result: RaceResult) -> tuple[float, float]:
    """Speedup from the quartiles: FP32 Q1 / AMP Q3 to FP32 Q3 / AMP Q1."""
    return result.fp32.q1 / result.amp.q3, result.fp32.q3 / result.amp.q1


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


def plot_sweep(result: SweepResult, ax=None):
    """Speedup (FP32 / AMP) against size on log-log axes, with its spread, break-even and the ceiling."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 3.8))
    dtype = dtype_name(result.results[0].dtype)
    ranges = [_speedup_range(r) for r in result.results]
    lower = [s - lo for s, (lo, _hi) in zip(result.speedups, ranges, strict=True)]
    upper = [hi - s for s, (_lo, hi) in zip(result.speedups, ranges, strict=True)]
    ax.errorbar(result.sizes, result.speedups, yerr=[lower, upper], fmt="o-", color="C0", capsize=3,
                label=f"AMP ({dtype}) vs FP32, median (bars: quartiles)")  # fmt: skip
    tf32 = [r.speedup_vs_tf32 for r in result.results]
    if all(s is not None for s in tf32):
        ax.plot(result.sizes, tf32, "s--", color="C2", label=f"AMP ({dtype}) vs TF32, median")
    c = result.ceiling
    is_datasheet = "datasheet" in c.source
    kind = "datasheet" if is_datasheet else "raw GEMM, measured"
    ax.axhline(c.vs_fp32, color="C3", ls="--", label=f"ceiling vs FP32 ({kind}): {c.vs_fp32:.3g}x")
    if c.vs_tf32 is not None and all(s is not None for s in tf32):
        ax.axhline(c.vs_tf32, color="C2", ls=":", label=f"ceiling vs TF32 (datasheet): {c.vs_tf32:.3g}x")
    if is_datasheet and c.measured_gemm is not None:
        ax.axhline(c.measured_gemm, color="C1", ls=":", label=f"raw GEMM, measured: {c.measured_gemm:.3g}x")
    ax.axhline(1.0, color="0.3", lw=1, label="break-even")
    unit = "n (n x n matmul)" if result.kind == "matmul" else f"width (batch {result.results[0].params['batch']})"
    _size_axis(ax, result.sizes, unit)
    _plain_log_y(ax)
    ax.set_ylabel("speedup (FP32 time / AMP time)")
    ax.set_title(f"Where AMP starts to pay on {result.context['device']}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return ax


def plot_memory(result: SweepResult, ax=None):
    """Peak memory per training step, FP32 against AMP, for an ``kind="mlp"`` sweep."""
    if result.kind != "mlp" or result.results[0].memory is None:
        raise ValueError("plot_memory needs a sweep with kind='mlp' (memory is measured for training steps)")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 3.8))
    mib = 2.0**20
    names = [k for k in result.results[0].memory if k != "method"]
    for i, name in enumerate(names):
        ax.plot(result.sizes, [r.memory[name] / mib for r in result.results], "o-", color=f"C{i}", label=name.upper())
    _size_axis(ax, result.sizes, f"width (batch {result.results[0].params['batch']})")
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


def _cpu_has_fast(dtype: torch.dtype) -> bool | None:
    from .hardware import cpu_flags

    flags = cpu_flags()
    keys = ("avx512_bf16", "amx_bf16") if dtype == torch.bfloat16 else ("avx512_fp16",)
    values = [flags.get(k) for k in keys]
    if any(values):
        return True
    if all(v is None for v in values):
        return None
    return False


def explain(result: RaceResult) -> str:
    """A plain-language reading of a race result: who won, by how much, and the likely reason."""
    s = result.speedup
    dtype = dtype_name(result.dtype)
    dev = result.context["device"]
    if s >= 1.1:
        verdict = f"AMP wins: {s:.2f}x the speed of FP32 ({dtype} on {dev})."
    elif s > 1 / 1.1:
        verdict = f"A tie: AMP and FP32 are within 10% ({s:.2f}x)."
    else:
        verdict = f"AMP loses: it runs at {s:.2f}x the speed of FP32, so each step takes {1 / s:.2f}x as long."
    reasons = []
    if dev.startswith("cpu"):
        fast = _cpu_has_fast(result.dtype)
        if fast is False:
            insn = "AVX512-BF16 or AMX" if result.dtype == torch.bfloat16 else "AVX512-FP16 or AMX-FP16"
            base = f"This CPU has no {insn} instructions, so {dtype} matmuls are emulated with conversions"
            if s <= 1 / 1.1:
                reasons.append(f"{base} and the casts are pure overhead: on such a CPU AMP is slower, and the race shows it.")
            elif s < 1.1:
                reasons.append(f"{base}: AMP cannot be faster here; at this size per-op overhead, not arithmetic, sets the pace.")
            else:
                reasons.append(f"{base}: AMP should not win here, so suspect noise (see the spread) and race again.")
        elif fast is True and s < 1.1:
            reasons.append(
                "This CPU has the instructions, so a small size is the likely reason: casts and "
                "per-op overhead outweigh the faster matmul. Try a larger width and batch."
            )
        elif fast is None:
            reasons.append("Whether this CPU has bf16/fp16 instructions is unknown; the measurement is the answer.")
    elif s < 1.1:
        reasons.append(
            "Too small to keep the Tensor Cores busy: launches, casts and the optimizer dominate. "
            "Try a larger width and batch (multiples of 8)."
        )
    if result.speedup_vs_tf32 is not None:
        reasons.append(f"Against TF32 (FP32 on Tensor Cores) the speedup is {result.speedup_vs_tf32:.2f}x.")
    worst = max(t.rel_iqr for t in result.timings.values())
    if worst > 0.2:
        load, cores = result.context.get("load_avg_1min"), result.context.get("cpu_count")
        busy = f" (load average {load} on {cores} cores)" if load is not None and cores else ""
        reasons.append(
            f"The measurement is noisy (IQR up to {100 * worst:.0f}% of the median): other programs "
            f"are probably competing for the machine{busy}; race again."
        )
    return " ".join([verdict, *reasons])


# ----------------------------------------------------------------------------------------------
# Reference results from real GPUs (docs/results/, written by scripts/gpu_check.py)
# ----------------------------------------------------------------------------------------------

RESULTS_SCHEMA = "amp-lab/gpu-check/1"
RESULTS_DIR = Path(__file__).resolve().parent.parent / "docs" / "results"


def load_reference_results(directory=None) -> list[dict]:
    """Committed GPU check results (``docs/results/*.json``), newest first; [] when there are none."""
    directory = Path(directory) if directory is not None else RESULTS_DIR
    found = []
    if not directory.is_dir():
        return found
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
    m = reference.get("machine", {})
    return (
        f"{m.get('gpu_name') or m.get('device', '?')} (driver {m.get('driver')}, CUDA {m.get('cuda_runtime')}, "
        f"torch {m.get('torch')}), measured {str(reference.get('date', '?'))[:10]}"
        + (" [quick sizes]" if reference.get("quick") else "")
    )


def reference_table_html(references: Sequence[dict], mine: SweepResult | None = None) -> str:
    """Matmul speedups from committed reference files next to the learner's own sweep, by size."""
    from .widgets import table_html

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


class RaceWidget:
    """Width, batch and precision controls, a Race button, two racing lanes and a result card.

    Built by :func:`race_widget`.  Pressing Race (or calling :meth:`run`) races ``race_mlp`` with the
    chosen settings.  During the race each lane's bar shows how far that contestant would have got
    when the faster one (by running median) has done all the samples taken so far: the winner's
    bar advances one sample per round, the loser's ``1/speedup`` of one.
    """

    def __init__(
        self,
        *,
        device=None,
        widths: Sequence[int] | None = None,
        batches: Sequence[int] | None = None,
        in_features: int = IN_FEATURES,
        warmup: int = 2,
        repeats: int = 5,
        min_sample_s: float = 0.005,
    ):
        import ipywidgets as widgets

        self.device = get_device(device)
        cuda = self.device.type == "cuda"
        widths = tuple(widths or ((1024, 2048, 4096, 8192) if cuda else (64, 128, 256, 512, 1024)))
        batches = tuple(batches or ((256, 1024, 4096) if cuda else (16, 32, 64, 128, 256)))
        for i, w in enumerate(widths):
            check_int(f"widths[{i}]", w, minimum=1)
        for i, b in enumerate(batches):
            check_int(f"batches[{i}]", b, minimum=1)
        self.in_features = check_int("in_features", in_features, minimum=1)
        self.warmup = check_int("warmup", warmup, minimum=0)
        self.repeats = check_int("repeats", repeats, minimum=1)
        self.min_sample_s = check_float("min_sample_s", min_sample_s, gt=0)

        self.width = widgets.Dropdown(options=widths, value=widths[0], description="width")
        self.batch = widgets.Dropdown(options=batches, value=batches[0], description="batch")
        default = dtype_name(amp_dtype(self.device))
        self.precision = widgets.ToggleButtons(
            options=[("bf16", "bfloat16"), ("fp16", "float16")], value=default, description="AMP dtype"
        )
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
        self.result.value = _card(
            "ready",
            f"Ready: width {w}, batch {b}, AMP in {self.precision.value} on {self.device}: "
            f"{flops / 1e6:,.1f} MFLOP of matmuls per training step. Press <b>Race</b>.",
        )

    def _on_settings(self, _change) -> None:
        self.fp32_bar.value = self.amp_bar.value = 0
        self.fp32_bar.bar_style = self.amp_bar.bar_style = "info"
        self.fp32_time.value = self.amp_time.value = ""
        self._ready()

    def _on_progress(self, event: RaceProgress) -> None:
        if event.phase == "warmup":
            self.result.value = _card("running", f"Warming up {html.escape(event.label)} ...")
            return
        fp32, amp = event.samples["fp32"], event.samples["amp"]
        rounds = min(len(fp32), len(amp))
        if rounds == 0:
            self.result.value = _card("running", "Racing ...")
            return
        med = {k: Timing(k, tuple(v[:rounds]), 1, 0).median for k, v in (("fp32", fp32), ("amp", amp))}
        fastest = min(med.values())
        self.fp32_bar.value = rounds * fastest / med["fp32"]
        self.amp_bar.value = rounds * fastest / med["amp"]
        self.fp32_time.value = f"{format_seconds(med['fp32'])}/step"
        self.amp_time.value = f"{format_seconds(med['amp'])}/step"
        self.result.value = _card("running", f"Racing ... round {rounds} of {event.total}")

    def run(self) -> RaceResult | None:
        """Race with the current settings; updates the lanes and the result card."""
        self.button.disabled = True
        self.fp32_bar.value = self.amp_bar.value = 0
        self.fp32_bar.bar_style = self.amp_bar.bar_style = "info"
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
        fastest = min(result.fp32.median, result.amp.median)
        self.fp32_bar.value = self.repeats * fastest / result.fp32.median
        self.amp_bar.value = self.repeats * fastest / result.amp.median
        amp_wins = result.amp.median < result.fp32.median
        self.amp_bar.bar_style, self.fp32_bar.bar_style = ("success", "warning") if amp_wins else ("warning", "success")
        self.fp32_time.value = f"{format_seconds(result.fp32.median)}/step"
        self.amp_time.value = f"{format_seconds(result.amp.median)}/step"
        self.result.value = _card("done", result_card_html(result))


def result_card_html(result: RaceResult) -> str:
    """The body of the race widget's result card."""
    e = html.escape
    unit = "call" if result.kind == "matmul" else "step"
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
    mem_note = f"<br>memory: {e(result.memory['method'])}" if result.memory else ""
    return (
        f"<div style='font-size:1.3em'>speedup <b class='amp-race-speedup'>{result.speedup:.2f}x</b> "
        f"(AMP {e(dtype_name(result.dtype))} vs FP32, {e(result.size)})</div>"
        f"<p>{e(explain(result))}</p>"
        f"<table style='font-family:monospace;border-collapse:collapse'>{''.join(rows)}</table>"
        f"<small>{len(result.fp32.samples)} samples each, interleaved, after "
        f"{_plural(result.fp32.warmup, 'untimed warm-up ' + unit)}; {ctx['threads']} threads; TF32 for FP32: {tf32}; timed with {e(ctx['sync'])}; "
        f"torch {e(ctx['torch'])}{mem_note}</small>"
    )


def race_widget(**kwargs) -> RaceWidget:
    """Build the race widget (see :class:`RaceWidget`); the notebook cell ends with ``racer.widget``."""
    return RaceWidget(**kwargs)
