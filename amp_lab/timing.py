"""The honest timer, and how sure a speedup is.  (``02_tensor_cores``, ``06_timing_race``, ``07_amp_training_recipe``)

A naive timing (one run of each contestant with ``time.time()``) has no warm-up (the first contestant pays
for start-up), no synchronisation (on CUDA the clock is read while kernels are still queued) and one trial
(no idea of the spread).  :func:`measure` fixes each of those:

* **warm-up**: every contestant runs ``warmup`` untimed calls first (kernel selection, allocator growth,
  oneDNN primitive creation, the CUDA context and cuBLAS handles all happen there);
* **synchronisation**: on CUDA each sample is bracketed by CUDA events and the stream is synchronised
  before the clock is read; elsewhere the device is synchronised around a ``time.perf_counter`` reading;
* **repeated samples**: at least ``repeats`` samples per contestant, each averaging ``number`` calls
  (chosen so one sample lasts at least ``min_sample_s``), reported as median and interquartile range;
* **interleaving**: contestants take turns sample by sample (the order flips every round), so a noisy
  neighbour or a frequency change hurts both instead of whichever ran second.  Round ``i`` of two
  contestants is therefore a *pair* measured under the same conditions;
* **an interval, not just a number**: :func:`speedup_estimate` turns the pairs into a speedup with a
  confidence interval, and ``measure(..., target_rel_width=...)`` keeps sampling until that interval is
  narrow or a time budget is spent;
* **context**: every timing records the device, thread count, TF32 setting, CPU instructions and versions,
  because a number without them cannot be compared with anyone else's.

It builds on ``torch.utils.benchmark`` where that fits: :meth:`Timing.to_measurement` turns a timing into a
``torch.utils.benchmark.Measurement`` (so ``benchmark.Compare`` can tabulate it), and
``benchmarks/bench_race_fidelity.py`` checks this timer against ``benchmark.Timer`` measuring the same
kernels.  Mind that ``benchmark.Timer`` uses **one thread** unless given ``num_threads``: here the thread
count is whatever torch uses (or ``num_threads=``) and is always recorded.
The interval itself (:func:`speedup_estimate`, :class:`Timing`) is :mod:`amp_lab.intervals`.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ._checks import (
    MAX_CALLS_PER_SAMPLE,
    MAX_REPEATS,
    MAX_SAMPLE_S,
    MAX_SECONDS,
    MAX_THREADS,
    ArgumentTypeError,
    check_callable,
    check_float,
    check_int,
)
from .cpus import cpu_has_native, cpu_model, usable_cpu_flags
from .device import get_device, torch_threads
from .dtypes import dtype_name
from .gpus import datasheet_entry
from .hardware import tf32_matmul_enabled
from .intervals import SpeedupEstimate, Timing, min_pairs, plural, speedup_estimate
from .text import Reading, format_bytes, format_ratio, format_seconds, say

__all__ = [
    "DEFAULT_MAX_REPEATS",
    "DEFAULT_MAX_TIME_S",
    "MIN_TARGET_REL_WIDTH",
    "Contestant",
    "RaceProgress",
    "Regime",
    "SpeedupEstimate",
    "Timing",
    "classify_regime",
    "describe_context",
    "format_bytes",
    "format_ratio",
    "format_seconds",
    "measure",
    "min_pairs",
    "regime_for",
    "speedup_estimate",
    "sync_summary",
    "timing_context",
]


# The clocks and the synchroniser are module attributes so tests can replace them with fakes and check
# *when* they are called relative to the timed work.  ``_clock`` times samples; ``_budget_clock`` only
# decides whether another round fits in ``max_time_s``.
_clock = time.perf_counter
_budget_clock = time.perf_counter

# The time budget of a measurement that samples until its interval is narrow, when none is given.
DEFAULT_MAX_TIME_S = 30.0
# The most rounds such a measurement takes, when no ``max_repeats`` is given.
DEFAULT_MAX_REPEATS = 1000
# The narrowest interval a measurement may aim for (0.1%): timer jitter alone is wider, so a smaller
# target is never reached and would only spend the whole time budget.
MIN_TARGET_REL_WIDTH = 1e-3
# The most samples a Timing (or speedup_estimate) accepts: measure takes at most MAX_REPEATS rounds, and

# ----------------------------------------------------------------------------------------------
# Context: what a timing needs next to it to mean anything
# ----------------------------------------------------------------------------------------------


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
        return cpu_model()
    return dev.type


def _sync_method(dev: torch.device) -> str:
    if dev.type == "cuda":
        return "CUDA events; stream synchronised before each reading"
    if dev.type == "mps":
        return "perf_counter; torch.mps.synchronize() before each reading"
    return "perf_counter (CPU ops return when done: nothing to synchronise)"


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def timing_context(device=None) -> dict:
    """What a timing on ``device`` depends on: device, threads, TF32, CPU instructions, versions, how it
    was synchronised, and how busy the machine was.  (``06_timing_race``)"""
    dev = get_device(device)
    ctx = {
        "device": str(dev),
        "device_name": _device_name(dev),
        "threads": torch.get_num_threads(),
        "tf32_matmul": tf32_matmul_enabled() if dev.type == "cuda" else None,
        "fp32_matmul_precision": (
            ("tf32" if tf32_matmul_enabled() else "ieee")
            if dev.type == "cuda"
            else _cpu_fp32_matmul_precision()
        ),
        "sync": _sync_method(dev),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        # The CPU's bf16/fp16 instructions: whether a CPU race can be won at all (``hardware.cpu_has_native``).
        "cpu_flags": usable_cpu_flags(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        # Other programs competing for the cores stall multi-threaded kernels: record how busy it was.
        "load_avg_1min": _load_average(),
    }
    if dev.type == "cuda":
        ctx["capability"] = tuple(torch.cuda.get_device_capability(dev))
    return ctx


def tf32_text(ctx: dict) -> str:
    value = ctx.get("tf32_matmul")
    return "n/a (CPU)" if value is None else ("on" if value else "off")


def describe_context(context: dict) -> str:
    """One sentence naming the machine a timing was made on, from its :func:`timing_context`.

    Notebooks print it in a cell marked volatile, so a reader knows which machine produced the stored
    outputs (``06_timing_race``, ``07_amp_training_recipe``)::

        measured on cpu (AMD EPYC), 2 CPU threads, torch CPU kernels AVX2, CPU bfloat16 arithmetic emulated, ...
    """
    if not isinstance(context, dict):
        raise ArgumentTypeError(
            f"context must be a timing context dict (timing_context(), or a Timing's .context), "
            f"got {type(context).__name__}: {context!r:.80}"
        )
    device = context.get("device", "?")
    parts = [f"measured on {device} ({context.get('device_name', '?')})"]
    if str(device).startswith("cuda"):
        cap = context.get("capability")
        if cap:
            parts.append(f"compute capability {cap[0]}.{cap[1]}")
        parts.append(f"TF32 for FP32 matmuls {tf32_text(context)}")
    parts.append(plural(int(context.get("threads", 0) or 0), "CPU thread"))
    parts.append(f"torch CPU kernels {context.get('cpu_capability', '?')}")
    flags = context.get("cpu_flags")
    if flags:
        for dtype in (torch.bfloat16, torch.float16):
            native = cpu_has_native(dtype, flags=flags)
            how = {True: "native", False: "emulated", None: "unknown"}[native]
            parts.append(f"CPU {dtype_name(dtype)} arithmetic {how}")
    parts.append(f"torch {context.get('torch', '?')}")
    load = context.get("load_avg_1min")
    if load is not None:
        parts.append(f"load average {load} on {context.get('cpu_count', '?')} cores")
    return ", ".join(parts)


# ----------------------------------------------------------------------------------------------
# What limits a step: arithmetic, memory traffic, or launching and waiting
# ----------------------------------------------------------------------------------------------

# A step that takes this many times longer than its arithmetic and its memory traffic would at the
# device's peak rates is limited by neither: by kernel launches, host synchronisation and Python.
OVERHEAD_FACTOR = 4.0
REGIMES = ("launch-bound", "memory-bound", "compute-bound", "unknown")


@dataclass(frozen=True)
class Regime:
    """What limited a measured step, from a roofline: ``compute_s`` is the step's FLOPs at the device's
    peak rate, ``memory_s`` its bytes at the peak bandwidth (both lower bounds, from the datasheet or a
    measured roofline), and
    ``seconds`` what it took.  ``name`` is one of :data:`REGIMES`; ``text`` one sentence composed from
    those numbers.  (``06_timing_race``, ``07_amp_training_recipe``)"""

    name: str
    seconds: float
    compute_s: float | None
    memory_s: float | None
    text: str

    def __str__(self) -> str:
        return self.text


def classify_regime(
    seconds: float,
    *,
    flops: float,
    bytes_moved: float,
    peak_flops: float | None = None,
    peak_bytes_per_s: float | None = None,
    overhead_factor: float = OVERHEAD_FACTOR,
    unit: str = "step",
    peak_source: str = "the datasheet's peak rates",
) -> Regime:
    """Which regime a step of ``seconds`` was in, given its ``flops`` and ``bytes_moved`` and the device's
    peak rates (``None``: unknown, and so is the regime).  Pure: tests feed it any GPU's numbers.  Internal:
    its callers (the races, the roofline, recipe) pass checked numbers.

    * **launch-bound** (launch/sync-bound): the step took more than ``overhead_factor`` times the longer
      of its two lower bounds, so neither arithmetic nor memory set its pace: launching kernels, waiting
      for the host and Python did.  A faster dtype cannot help much here.
    * **memory-bound**: otherwise, when moving the bytes takes longer than the arithmetic: a smaller dtype
      helps by moving fewer bytes.
    * **compute-bound**: otherwise: the arithmetic sets the pace, and faster Tensor Cores pay.

    ``unit`` names what took ``seconds`` in the sentence ("step", "call"); ``peak_source`` where the peak
    rates come from ("the datasheet's peak rates", or a measured roofline's:
    :meth:`amp_lab.roofline.Roofline.regime`).  ``overhead_factor`` must be
    above 1: a step can never take less than its lower bounds, so a factor of 1 or less would call every
    step launch-bound.
    """
    facts = {"unit": unit, "took": format_seconds(seconds), "source": peak_source}
    if peak_flops is None or peak_bytes_per_s is None:
        return Regime("unknown", seconds, None, None, say("timing.regime_unknown", **facts))
    compute_s, memory_s = flops / peak_flops, bytes_moved / peak_bytes_per_s
    facts.update(compute=format_seconds(compute_s), memory=format_seconds(memory_s))
    if seconds > overhead_factor * max(compute_s, memory_s):
        name, facts["share_pct"] = "launch-bound", 100 * max(compute_s, memory_s) / seconds
    else:
        name = "memory-bound" if memory_s > compute_s else "compute-bound"
    return Regime(name, seconds, compute_s, memory_s, say(f"timing.regime_{name.split('-')[0]}", **facts))


# ----------------------------------------------------------------------------------------------
# The timer
# ----------------------------------------------------------------------------------------------


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
    total: int  # samples each contestant takes at least (more when sampling until an interval is narrow)
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
    raise ArgumentTypeError(
        f"contestant {name!r} must be a callable or a Contestant, got {type(value).__name__}"
    )


def _narrow_enough(samples: dict, baseline: str, target: float, confidence: float) -> bool:
    """Whether every contestant's speedup over ``baseline`` has an interval at most ``target`` wide."""
    base = samples[baseline]
    return all(
        speedup_estimate(base, s, confidence=confidence).rel_width <= target
        for name, s in samples.items()
        if name != baseline
    )


def check_budget(warmup, repeats, min_sample_s, num_threads=None, number=None):
    """Check a timing budget before any work starts, as :func:`measure` and every race do: ``warmup`` from
    0 and ``repeats`` from 1 to ``MAX_REPEATS`` (10,000), ``min_sample_s`` above 0 and at most
    ``MAX_SAMPLE_S`` (10 s), ``num_threads`` (None: leave as is) from 1 to ``MAX_THREADS`` and ``number``
    (None: calibrated) from 1 to ``MAX_CALLS_PER_SAMPLE``.  Returns them checked, in that order."""
    warmup = check_int("warmup", warmup, minimum=0, maximum=MAX_REPEATS)
    repeats = check_int("repeats", repeats, minimum=1, maximum=MAX_REPEATS)
    min_sample_s = check_float("min_sample_s", min_sample_s, gt=0, le=MAX_SAMPLE_S)
    if num_threads is not None:
        num_threads = check_int("num_threads", num_threads, minimum=1, maximum=MAX_THREADS)
    if number is not None:
        number = check_int("number", number, minimum=1, maximum=MAX_CALLS_PER_SAMPLE)
    return warmup, repeats, number, min_sample_s, num_threads


def check_target_rel_width(target_rel_width) -> float:
    """A target interval width (relative to the speedup) of at least :data:`MIN_TARGET_REL_WIDTH` (0.1%):
    a narrower one is never reached, so it would only spend the whole time budget."""
    target_rel_width = check_float("target_rel_width", target_rel_width, gt=0)
    if target_rel_width < MIN_TARGET_REL_WIDTH:
        raise ValueError(
            f"target_rel_width={target_rel_width:g} is narrower than a timer can resolve; choose at least "
            f"{MIN_TARGET_REL_WIDTH:g} (0.1%), e.g. 0.1 for about +-5%"
        )
    return target_rel_width


def check_planned_time(repeats: int, contestants: int, min_sample_s: float) -> None:
    """Refuse, before anything runs, a measurement whose minimum rounds alone would take longer than
    ``MAX_SECONDS`` (an hour): ``repeats`` rounds of ``contestants`` samples of ``min_sample_s`` each."""
    planned = repeats * contestants * min_sample_s
    if planned > MAX_SECONDS:
        raise ValueError(
            f"repeats={repeats} rounds of {plural(contestants, 'contestant')} at min_sample_s={min_sample_s:g} "
            f"would take at least {format_seconds(planned)}, more than the course's limit of {MAX_SECONDS:g} s "
            "for one measurement; choose fewer repeats or a shorter min_sample_s"
        )


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
    target_rel_width: float | None = None,
    max_time_s: float | None = None,
    max_repeats: int | None = None,
    baseline: str | None = None,
    confidence: float = 0.95,
):
    """Time one function, or race several, honestly.  (Taught in ``06_timing_race``.)

    ``fns`` is a callable (returns one :class:`Timing`) or a dict ``label -> callable or Contestant``
    (returns a dict of timings).  Each contestant first makes ``warmup`` untimed calls (at least one when
    ``number`` is not given: the fastest warm-up call sets how many calls make a sample last
    ``min_sample_s``).  Then the contestants take turns, one sample each per round, the order reversed
    every round.  ``num_threads`` sets torch's CPU threads for the measurement (default: leave them as
    they are); the count used is recorded in each timing's context.

    **How many rounds.**  ``repeats`` rounds at least.  With ``target_rel_width`` (a race of two or more
    contestants) it keeps going, round after round, until every contestant's :func:`speedup_estimate`
    over ``baseline`` (default: the first contestant) has an interval no wider than ``target_rel_width``
    times the speedup (0.1: about +-5%; at least ``MIN_TARGET_REL_WIDTH``, 0.001), or the time budget is spent: no round starts that would, if it
    took as long as the slowest round so far, end more than ``max_time_s`` after the measurement began
    (warm-up included; default
    ``DEFAULT_MAX_TIME_S`` with a target), and never more than ``max_repeats`` rounds (default
    ``DEFAULT_MAX_REPEATS``).  The minimum ``repeats`` rounds are always taken, so a budget shorter than
    they need is overrun by them.  Without ``target_rel_width`` exactly ``repeats`` rounds are taken.
    """
    single = callable(fns) or isinstance(fns, Contestant)
    if single:
        contestants = {str(label): _as_contestant(str(label), fns)}
    elif isinstance(fns, dict) and fns:
        contestants = {str(k): _as_contestant(str(k), v) for k, v in fns.items()}
        if len(contestants) != len(fns):
            raise ValueError(
                f"fns has labels that are equal as strings: {list(fns)!r:.200}; give each a distinct name"
            )
    elif isinstance(fns, dict):
        raise ValueError("fns must be a callable or a non-empty dict of callables, got an empty dict")
    else:
        raise ArgumentTypeError(
            f"fns must be a callable or a non-empty dict of callables, got {type(fns).__name__}: {fns!r:.80}"
        )
    warmup, repeats, number, min_sample_s, num_threads = check_budget(
        warmup, repeats, min_sample_s, num_threads, number
    )
    check_callable("callback", callback, optional=True)
    if extra_context is not None and not isinstance(extra_context, dict):
        raise ArgumentTypeError(f"extra_context must be a dict or None, got {type(extra_context).__name__}")
    confidence = check_float("confidence", confidence, gt=0, lt=1)
    names = list(contestants)
    check_planned_time(repeats, len(names), min_sample_s)
    if target_rel_width is not None:
        target_rel_width = check_target_rel_width(target_rel_width)
        if len(names) < 2:
            raise ValueError(
                "target_rel_width needs a race of at least two contestants (a dict of callables): "
                "it is the width of a speedup's interval"
            )
    adaptive = target_rel_width is not None
    if max_time_s is not None:
        max_time_s = check_float("max_time_s", max_time_s, gt=0, le=MAX_SECONDS)
        if not adaptive:
            raise ValueError(
                f"max_time_s={max_time_s} bounds sampling until an interval is narrow: give target_rel_width "
                "too (without it measure takes exactly `repeats` rounds)"
            )
    elif adaptive:
        max_time_s = DEFAULT_MAX_TIME_S
    if max_repeats is not None:
        max_repeats = check_int("max_repeats", max_repeats, minimum=repeats, maximum=MAX_REPEATS)
        if not adaptive:
            raise ValueError(f"max_repeats={max_repeats} only applies with target_rel_width")
    else:
        max_repeats = max(repeats, DEFAULT_MAX_REPEATS) if adaptive else repeats
    if baseline is None:
        baseline = names[0]
    elif not isinstance(baseline, str) or baseline not in contestants:
        raise ValueError(
            f"baseline={baseline!r} is not a contestant; choose one of: {', '.join(map(repr, names))}"
        )
    dev = get_device(device)

    samples: dict[str, list[float]] = {name: [] for name in names}
    numbers: dict[str, int] = {}
    untimed: dict[str, int] = {}
    contexts: dict[str, dict] = {}
    began = _budget_clock()
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
                    numbers[name] = max(
                        1, min(MAX_CALLS_PER_SAMPLE, math.ceil(min_sample_s / max(min(times), 1e-9)))
                    )
                else:
                    for _ in range(warmup):
                        c.fn()
                    untimed[name] = warmup
                    numbers[name] = number
            if callback is not None:
                callback(RaceProgress("warmup", name, 0, repeats, {k: list(v) for k, v in samples.items()}))
        r, round_s = 0, 0.0
        while r < max_repeats:
            if r >= repeats:
                if _narrow_enough(samples, baseline, target_rel_width, confidence):
                    break
                if _budget_clock() + round_s > began + max_time_s:
                    break
            round_start = _budget_clock()
            for name in names if r % 2 == 0 else names[::-1]:
                c = contestants[name]
                with c.context():
                    seconds = sampler(c.fn, numbers[name])
                samples[name].append(seconds / numbers[name])
                if callback is not None:
                    callback(
                        RaceProgress("sample", name, r + 1, repeats, {k: list(v) for k, v in samples.items()})
                    )
            round_s = max(round_s, _budget_clock() - round_start)  # the slowest round so far
            r += 1
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


def sync_summary(queued_s: float, finished_s: float, device=None) -> Reading:
    """Read a synchronisation experiment: the clock read right after queueing work (``queued_s``) and
    after waiting for the device (``finished_s``), both from the same start.  Outcome ``"queued_only"``,
    ``"close"`` (a GPU), ``"agree"`` or ``"disturbed"`` (a CPU); ``facts["ratio"]`` = finished / queued.
    (``06_timing_race``)"""
    queued_s = check_float("queued_s", queued_s, gt=0)
    finished_s = check_float("finished_s", finished_s, gt=0)
    if finished_s < queued_s:
        raise ValueError(f"finished_s={finished_s} must be >= queued_s={queued_s}: it is read later")
    dev = get_device(device)
    ratio = finished_s / queued_s
    if dev.type in ("cuda", "mps"):
        outcome = "queued_only" if ratio >= 2 else "close"
    else:
        outcome = "agree" if ratio < 1.2 else "disturbed"
    return Reading(outcome, (f"timing.sync_{outcome}",), {"ratio": ratio, "device": dev.type.upper()})


def regime_for(
    seconds: float, flops: float, bytes_moved: float, dtype, context: dict, *, unit: str = "step"
) -> Regime:
    """:func:`amp_lab.timing.classify_regime` for a step measured on the device a timing ``context``
    names (``context["device"]``, ``context["device_name"]``): the datasheet's peak rate for ``dtype``
    (``torch.float32``, ``"tf32"``, ``torch.float16``, ``torch.bfloat16`` or ``"fp8"``) and bandwidth.  "unknown" on
    a CPU, an Apple GPU, or a GPU the datasheet table does not know."""
    entry = (
        datasheet_entry(context.get("device_name"))
        if str(context.get("device", "")).startswith("cuda")
        else None
    )
    peak = entry.tflops(dtype) if entry is not None else None
    return classify_regime(
        seconds,
        flops=flops,
        bytes_moved=bytes_moved,
        peak_flops=None if peak is None else peak * 1e12,
        peak_bytes_per_s=None if entry is None else entry.bandwidth_gbs * 1e9,
        unit=unit,
    )
