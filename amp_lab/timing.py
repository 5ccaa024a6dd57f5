"""The honest timer (:func:`measure`), what a timing depends on (:func:`timing_context`), and what limits a
step (:func:`classify_regime`).  (``02_tensor_cores``, ``06_timing_race``, ``07_amp_training_recipe``)"""

from __future__ import annotations

import contextlib
import functools
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
from .intervals import Timing, plural, speedup_estimate
from .progress import progress
from .text import Reading, format_seconds, say

# Tests replace them: ``_clock`` times samples, ``_budget_clock`` decides if a round fits in max_time_s.
_clock = time.perf_counter
_budget_clock = time.perf_counter

DEFAULT_MAX_TIME_S = 30.0  # the time budget of a measurement with a target interval, when none is given
DEFAULT_MAX_REPEATS = 1000  # the most rounds such a measurement takes, when no max_repeats is given
MIN_TARGET_REL_WIDTH = 1e-3  # the narrowest interval to aim for (0.1%): timer jitter is wider, never reached
DEFAULT_BUDGET_S = 30.0  # what a timing call may take when no budget_s (or a longer max_time_s) is given
PROGRESS_AFTER_S = 5.0  # a measurement planned to take longer shows a progress bar
CALIBRATION_S = 2e-3  # a calibration grows its size until one call takes this long


def timing_context(device=None) -> dict:
    """What a timing on ``device`` depends on: device, threads, TF32, CPU instructions, versions, the sync
    and the load.  (``06_timing_race``)"""
    dev = get_device(device)
    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(dev) if cuda else cpu_model() if dev.type == "cpu" else dev.type
    cpu_precision = str(getattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision", "n/a"))
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    ctx = {
        "device": str(dev),
        "device_name": name,
        "threads": torch.get_num_threads(),
        "tf32_matmul": tf32_matmul_enabled() if cuda else None,
        "fp32_matmul_precision": ("tf32" if tf32_matmul_enabled() else "ieee") if cuda else cpu_precision,
        "sync": {
            "cuda": "CUDA events; stream synchronised before each reading",
            "mps": "perf_counter; torch.mps.synchronize() before each reading",
        }.get(dev.type, "perf_counter (CPU ops return when done: nothing to synchronise)"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "cpu_flags": usable_cpu_flags(),  # whether a CPU race can be won at all
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_avg_1min": load,  # other programs competing for the cores stall multi-threaded kernels
    }
    if cuda:
        ctx["capability"] = tuple(torch.cuda.get_device_capability(dev))
    return ctx


def tf32_text(ctx: dict) -> str:
    value = ctx.get("tf32_matmul")
    return "n/a (CPU)" if value is None else ("on" if value else "off")


def describe_context(context: dict) -> str:
    """One sentence naming the machine a :func:`timing_context` describes (that made a notebook's outputs).
    (``06_timing_race``, ``07_amp_training_recipe``)"""
    if not isinstance(context, dict):
        raise ArgumentTypeError(
            f"context must be a timing context dict (timing_context(), or a Timing's .context), "
            f"got {type(context).__name__}: {context!r:.80}"
        )
    device = context.get("device", "?")
    parts = [f"measured on {device} ({context.get('device_name', '?')})"]
    if str(device).startswith("cuda"):
        if cap := context.get("capability"):
            parts.append(f"compute capability {cap[0]}.{cap[1]}")
        parts.append(f"TF32 for FP32 matmuls {tf32_text(context)}")
    parts.append(plural(int(context.get("threads", 0) or 0), "CPU thread"))
    parts.append(f"torch CPU kernels {context.get('cpu_capability', '?')}")
    if flags := context.get("cpu_flags"):
        for dtype in (torch.bfloat16, torch.float16):
            how = {True: "native", False: "emulated", None: "unknown"}[cpu_has_native(dtype, flags=flags)]
            parts.append(f"CPU {dtype_name(dtype)} arithmetic {how}")
    parts.append(f"torch {context.get('torch', '?')}")
    if (load := context.get("load_avg_1min")) is not None:
        parts.append(f"load average {load} on {context.get('cpu_count', '?')} cores")
    return ", ".join(parts)


# A step this many times longer than its arithmetic and memory traffic at peak rates is launch-bound: limited
# by kernel launches, host synchronisation and Python.
OVERHEAD_FACTOR = 4.0


@dataclass(frozen=True)
class Regime:
    """What limited a step of ``seconds``: ``name`` "launch-bound", "memory-bound", "compute-bound" or
    "unknown"; ``compute_s``, ``memory_s`` its FLOPs and bytes at the peak rates (lower bounds)."""

    name: str
    seconds: float
    compute_s: float | None
    memory_s: float | None
    text: str

    def __str__(self) -> str:
        return self.text


def classify_regime(
    seconds,
    flops,
    bytes_moved,
    peak_flops=None,
    peak_bytes_per_s=None,
    unit="step",
    peak_source="the datasheet's peak rates",
) -> Regime:
    """The regime of a step of ``seconds`` from its ``flops``, ``bytes_moved`` and peak rates (None: unknown):
    launch-bound past :data:`OVERHEAD_FACTOR` times the longer lower bound, else memory- or compute-bound."""
    facts = {"unit": unit, "took": format_seconds(seconds), "source": peak_source}
    if peak_flops is None or peak_bytes_per_s is None:
        return Regime("unknown", seconds, None, None, say("timing.regime_unknown", **facts))
    compute_s, memory_s = flops / peak_flops, bytes_moved / peak_bytes_per_s
    facts.update(compute=format_seconds(compute_s), memory=format_seconds(memory_s))
    if seconds > OVERHEAD_FACTOR * max(compute_s, memory_s):
        name, facts["share_pct"] = "launch-bound", 100 * max(compute_s, memory_s) / seconds
    else:
        name = "memory-bound" if memory_s > compute_s else "compute-bound"
    return Regime(name, seconds, compute_s, memory_s, say(f"timing.regime_{name.split('-')[0]}", **facts))


def regime_for(seconds, flops, bytes_moved, dtype, context: dict, *, unit: str = "step") -> Regime:
    """:func:`classify_regime` with the datasheet's rates (``dtype``: a torch dtype, "tf32" or "fp8") of the
    GPU a timing ``context`` names; "unknown" elsewhere."""
    cuda = str(context.get("device", "")).startswith("cuda")
    entry = datasheet_entry(context.get("device_name")) if cuda else None
    peak = entry and entry.tflops(dtype)
    return classify_regime(
        seconds, flops, bytes_moved, peak and peak * 1e12, entry and entry.bandwidth_gbs * 1e9, unit
    )


@dataclass(frozen=True)
class Contestant:
    """A function to time, and a context manager factory entered around each of its samples (TF32 on, say)."""

    fn: Callable[[], Any]
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


class RaceProgress(NamedTuple):
    """What :func:`measure` tells its ``callback`` after each warm-up and each sample."""

    phase: str  # "warmup" or "sample"
    label: str
    done: int  # samples done by this contestant (0 during warm-up)
    total: int  # samples each contestant takes at least
    samples: dict  # label -> list of per-call seconds so far


def _synchronizer(dev: torch.device) -> Callable[[], None]:
    """The function that waits for ``dev`` to finish its queued work."""
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    return torch.mps.synchronize if dev.type == "mps" else lambda: None


def _sampler(dev: torch.device, event=None):
    """``sample(fn, number)``: seconds of ``number`` calls, synchronised before and after; on CUDA by two
    events (``event`` makes them) on the GPU's timeline, elsewhere by ``_clock``."""
    sync = _synchronizer(dev)
    if event is None and dev.type == "cuda":
        event = functools.partial(torch.cuda.Event, enable_timing=True)

    def sample(fn, number: int) -> float:
        sync()
        if event is None:
            start = _clock()
        else:
            start, end = event(), event()
            start.record()
        for _ in range(number):
            fn()
        if event is None:
            sync()
            return _clock() - start
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds

    return sample


def op_maker(dev, dtype=None, cast=False, op="matmul", inner=None):
    """``make(m)`` for :func:`calibrated_seconds`: an m x m matmul in FP32, under autocast to ``dtype`` or
    (``cast``) on inputs in ``dtype``; ``inner=(k, n)``: (m x k) @ (k x n); ``op="add"``: an add of m FP32."""

    def make(m):
        if op == "add":
            a = torch.ones(m, device=dev)
            return lambda: torch.add(a, a, out=a)
        gen, (k, n) = torch.Generator(device=dev).manual_seed(0), inner or (m, m)
        A, B = (torch.randn(r, c, device=dev, generator=gen) for r, c in ((m, k), (k, n)))
        A, B = (A.to(dtype), B.to(dtype)) if cast else (A, B)
        enabled = dtype not in (None, torch.float32) and not cast

        def call():
            with torch.autocast(dev.type, dtype=dtype, enabled=enabled):
                return A @ B

        return call

    make.dtype = dtype  # what a test's fake calibration reads
    return make


def _per_call(sample, fn) -> float:
    """Seconds one call of ``fn`` takes: the best (one not descheduled) of seven samples of 0.2 ms or more."""
    first = sample(fn, 1)
    number = max(1, min(1000, math.ceil(2e-4 / max(first, 1e-7))))
    rounds = 7 if first < 0.01 else 2  # a slow call is its own long sample
    samples = [sample(fn, number) / number for _ in range(rounds)]
    return min(first, *samples) if number == 1 else min(samples)


def calibrated_seconds(
    make, size: int, device, *, power: float = 3, start: int = 64, max_power: float | None = None
) -> float:
    """Seconds one call of ``make(size)`` takes, estimated: ``make(m)`` for m = start, 2 * start, ... is timed
    until a call takes :data:`CALIBRATION_S` and grows as m ** (power - 1) at least (a fixed cost is no work),
    or 0.25 s; then scaled to ``size`` as m ** ``power``, or as fast as it grew, up to ``max_power`` (default
    ``power + 1``)."""
    sample, m, before = _sampler(get_device(device)), min(start, size), None
    while True:
        fn = make(m)
        seconds = max(_per_call(sample, fn), 1e-9)
        if m >= size:
            return seconds
        if before is not None:
            grew = math.log(seconds / before[1]) / math.log(m / before[0])
            if seconds >= 0.25 or (seconds >= CALIBRATION_S and grew >= power - 1):
                return seconds * (size / m) ** min(
                    max(grew, power), power + 1 if max_power is None else max_power
                )
        before, m = (m, seconds), min(2 * m, size)


# Small kernels a training step runs per parameter tensor, about: forward, backward, zeroing, clipping, Adam.
OPS_PER_TENSOR = 50


def training_seconds(what, model, examples, num_steps, device, dtype=None, budget_s=None, num_threads=None):
    """Seconds ``num_steps`` steps of ``model`` (or its parameters' shapes) on ``examples`` a step take,
    estimated (refused past ``budget_s``, default 30 s): three autocast products of the batch through each
    weight, timed at its size, and :data:`OPS_PER_TENSOR` small adds per tensor.  (``03``, ``04``, ``07``)"""
    if budget_s is not None:
        budget_s = check_float("budget_s", budget_s, ge=1.0, le=MAX_SECONDS)
    dev = get_device(device)
    shapes = [tuple(p.shape) for p in model.parameters()] if hasattr(model, "parameters") else model
    layers = [(math.prod(s[1:]), s[0]) for s in shapes if len(s) >= 2]
    with torch_threads(num_threads, dev):
        small = calibrated_seconds(op_maker(dev, op="add"), 1, dev, power=1)
        rows = {
            k: calibrated_seconds(op_maker(dev, dtype, inner=k), examples, dev, power=1, start=examples)
            for k in set(layers)
        }
    step = 3 * sum(rows[k] for k in layers) + OPS_PER_TENSOR * len(shapes) * small
    fix = "choose fewer num_steps, a smaller model or a smaller batch"
    basis = "each layer's products and a small op timed before the run"
    return check_estimate(what, num_steps * step, budget_s or DEFAULT_BUDGET_S, fix, basis)


def planned_seconds(
    call_s, warmup, repeats, min_sample_s, number=None, target_rel_width=None, max_time_s=None
):
    """Seconds a measurement of contestants taking ``call_s`` a call needs: at least (warm-up and ``repeats``
    rounds), and in all (an adaptive one samples on until ``max_time_s``)."""
    warm = warmup if number else max(warmup, 1)
    least = sum(warm * t + repeats * (number * t if number else max(t, min_sample_s)) for t in call_s)
    return least, max(least, max_time_s or DEFAULT_MAX_TIME_S) if target_rel_width else least


def check_estimate(what: str, seconds: float, budget_s: float, fix: str, basis: str) -> float:
    """Refuse ``what`` when it is estimated (from ``basis``) to take longer than ``budget_s``, saying how to get under."""
    if seconds > budget_s:
        raise ValueError(
            f"{what} would take about {seconds:,.1f} s ({basis}), more than budget_s={budget_s:g} s; "
            f"{fix}, or give a larger budget_s (at most {MAX_SECONDS:g})"
        )
    return seconds


def check_budget(
    warmup,
    repeats,
    min_sample_s,
    num_threads=None,
    target_rel_width=None,
    max_time_s=None,
    callback=None,
    *,
    contestants=1,
    races=1,
    number=None,
    budget_s=None,
) -> dict:
    """A timing budget checked before any work starts, as ``measure``'s keyword arguments; refuses a target
    narrower than :data:`MIN_TARGET_REL_WIDTH` and ``races`` that could take past ``MAX_SECONDS`` together."""

    def optional(check, name, value, **bounds):
        return None if value is None else check(name, value, **bounds)

    budget = dict(
        warmup=check_int("warmup", warmup, minimum=0, maximum=MAX_REPEATS),
        repeats=check_int("repeats", repeats, minimum=1, maximum=MAX_REPEATS),
        min_sample_s=check_float("min_sample_s", min_sample_s, gt=0, le=MAX_SAMPLE_S),
        num_threads=optional(check_int, "num_threads", num_threads, minimum=1, maximum=MAX_THREADS),
        number=optional(check_int, "number", number, minimum=1, maximum=MAX_CALLS_PER_SAMPLE),
        target_rel_width=optional(check_float, "target_rel_width", target_rel_width, gt=0),
        max_time_s=optional(check_float, "max_time_s", max_time_s, gt=0, le=MAX_SECONDS),
        callback=check_callable("callback", callback, optional=True),
        budget_s=optional(check_float, "budget_s", budget_s, ge=1.0, le=MAX_SECONDS),  # a second at least
    )
    if budget_s is None:  # a longer max_time_s is a budget given
        budget["budget_s"] = max(DEFAULT_BUDGET_S, budget["max_time_s"] or 0)
    if target_rel_width is not None and budget["target_rel_width"] < MIN_TARGET_REL_WIDTH:
        raise ValueError(
            f"target_rel_width={target_rel_width:g} is narrower than a timer can resolve; choose at least "
            f"{MIN_TARGET_REL_WIDTH:g} (0.1%), e.g. 0.1 for about +-5%"
        )
    planned = budget["repeats"] * contestants * budget["min_sample_s"]
    if target_rel_width is not None:  # then each race may sample until its time budget is spent
        planned = max(planned, max_time_s or DEFAULT_MAX_TIME_S)
    if races * planned > MAX_SECONDS:
        raise ValueError(
            f"{plural(races, 'measurement')} of repeats={repeats} rounds of {plural(contestants, 'contestant')} "
            f"at min_sample_s={min_sample_s:g} could take {format_seconds(races * planned)}, more than the "
            f"course's limit of {MAX_SECONDS:g} s; choose fewer repeats (or sizes), a shorter min_sample_s or max_time_s"
        )
    return budget


def measure(
    fns,
    *,
    device=None,
    warmup: int = 3,
    repeats: int = 10,
    number: int | None = None,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback=None,
    label: str = "fn",
    extra_context: dict | None = None,
    target_rel_width: float | None = None,
    max_time_s: float | None = None,
    max_repeats: int | None = None,
    baseline: str | None = None,
    confidence: float = 0.95,
    budget_s: float | None = None,
):
    """Time one function (a :class:`~amp_lab.intervals.Timing`), or race a dict ``label -> callable or
    Contestant`` (a dict of them), honestly: ``warmup`` untimed calls each (the fastest sets ``number`` calls
    per sample of ``min_sample_s``), then ``repeats`` rounds in alternating order; with ``target_rel_width``
    on until each speedup over ``baseline`` (the first) is that narrow, ``max_time_s`` or ``max_repeats``.
    Refused when its first calls show it past ``budget_s`` (30 s, or ``max_time_s``).  (``06_timing_race``)"""
    single = callable(fns) or isinstance(fns, Contestant)
    if not single and not (isinstance(fns, dict) and fns):
        kind = ValueError if isinstance(fns, dict) else ArgumentTypeError  # an empty dict, or not a dict
        raise kind(
            f"fns must be a callable or a non-empty dict of callables, got {type(fns).__name__}: {fns!r:.80}"
        )
    given = {str(label): fns} if single else fns
    for k, v in given.items():
        if not (callable(v) or isinstance(v, Contestant)):
            raise ArgumentTypeError(
                f"contestant {k!r} must be a callable or a Contestant, got {type(v).__name__}"
            )
    contestants = {str(k): v if isinstance(v, Contestant) else Contestant(v) for k, v in given.items()}
    if len(contestants) != len(given):
        raise ValueError(
            f"fns has labels that are equal as strings: {list(fns)!r:.200}; give each a distinct name"
        )
    names = list(contestants)
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s, callback)
    budget = check_budget(*args, contestants=len(names), number=number, budget_s=budget_s)
    warmup, repeats, min_sample_s, num_threads, number, target_rel_width, max_time_s, _, budget_s = (
        budget.values()
    )
    if extra_context is not None and not isinstance(extra_context, dict):
        raise ArgumentTypeError(f"extra_context must be a dict or None, got {type(extra_context).__name__}")
    confidence = check_float("confidence", confidence, gt=0, lt=1)
    adaptive = target_rel_width is not None
    if adaptive and len(names) < 2:
        raise ValueError(
            "target_rel_width needs a race of at least two contestants (a dict of callables): "
            "it is the width of a speedup's interval"
        )
    if max_repeats is not None:
        max_repeats = check_int("max_repeats", max_repeats, minimum=repeats, maximum=MAX_REPEATS)
    for key, value in (("max_time_s", max_time_s), ("max_repeats", max_repeats)):
        if value is not None and not adaptive:
            raise ValueError(
                f"{key}={value} bounds sampling until an interval is narrow: give target_rel_width too"
            )
    max_time_s = DEFAULT_MAX_TIME_S if max_time_s is None else max_time_s
    max_repeats = max_repeats or (max(repeats, DEFAULT_MAX_REPEATS) if adaptive else repeats)
    baseline = names[0] if baseline is None else baseline
    if not isinstance(baseline, str) or baseline not in contestants:
        raise ValueError(
            f"baseline={baseline!r} is not a contestant; choose one of: {', '.join(map(repr, names))}"
        )
    dev = get_device(device)

    samples: dict[str, list[float]] = {name: [] for name in names}
    numbers, untimed, contexts, firsts = {}, {}, {}, {}

    def report(phase, name, done):
        if callback is not None:
            callback(RaceProgress(phase, name, done, repeats, {k: list(v) for k, v in samples.items()}))

    began = _budget_clock()
    # CUDA events record on the current device's stream: make the race's device current.
    current = torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
    with torch_threads(num_threads), current:
        sampler = _sampler(dev)
        for name in names:
            c = contestants[name]
            with c.context():
                contexts[name] = {**timing_context(dev), **(extra_context or {})}
                t0 = _budget_clock()  # with number given the warm-up stays untimed: measured as a whole
                first = sampler(c.fn, 1) if number is None else [c.fn() for _ in range(warmup)] and 0.0
                firsts[name] = first or (_budget_clock() - t0) / max(warmup, 1)
                least, _ = planned_seconds(firsts.values(), warmup, repeats, min_sample_s, number)
                fix = "choose fewer repeats or warm-up calls, or a quicker function"
                check_estimate(f"measuring {name!r}", least, budget_s, fix, "from the first calls")
                if number is None:
                    # Calibrated on the *fastest* warm-up call: a slowed one would make samples too short.
                    times = [first] + [sampler(c.fn, 1) for _ in range(max(warmup, 1) - 1)]
                    untimed[name] = len(times)
                    fastest = max(min(times), 1e-9)
                    numbers[name] = max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(min_sample_s / fastest)))
                else:
                    untimed[name], numbers[name] = warmup, number
            report("warmup", name, 0)
        _, total_s = planned_seconds(
            firsts.values(), 0, repeats, min_sample_s, number, target_rel_width, max_time_s
        )
        rounds = max(repeats, min(max_repeats, int(total_s / max(sum(firsts.values()), min_sample_s))))
        show = callback is None and total_s > PROGRESS_AFTER_S
        bar = progress(total=rounds, desc=f"timing {', '.join(names)}", disable=not show, leave=False)
        r, round_s = 0, 0.0
        while r < max_repeats:
            if r >= repeats:  # only with a target: without one max_repeats == repeats
                others = [s for name, s in samples.items() if name != baseline]
                widths = [
                    speedup_estimate(samples[baseline], s, confidence=confidence).rel_width for s in others
                ]
                if max(widths) <= target_rel_width or _budget_clock() + round_s > began + max_time_s:
                    break
            round_start = _budget_clock()
            for name in names if r % 2 == 0 else names[::-1]:
                c = contestants[name]
                with c.context():
                    seconds = sampler(c.fn, numbers[name])
                samples[name].append(seconds / numbers[name])
                report("sample", name, r + 1)
            round_s = max(round_s, _budget_clock() - round_start)  # the slowest round so far
            r += 1
            bar.update(1)
        bar.close()
    timings = {n: Timing(n, tuple(samples[n]), numbers[n], untimed[n], contexts[n]) for n in names}
    return timings[names[0]] if single else timings


def sync_summary(queued_s: float, finished_s: float, device=None) -> Reading:
    """A synchronisation experiment read: the clock after queueing work (``queued_s``) and after waiting
    (``finished_s``); "queued_only", "close" (a GPU), "agree" or "disturbed" (a CPU).  (``06_timing_race``)"""
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
