"""Speedup against size (``06_timing_race``): the sizes a machine races, the sweep with its peak ratio and
bound, the multiples-of-8 race, and their plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from . import race as _race
from ._checks import check_axes, check_bool, check_choice, check_instance, check_int, check_int_sequence
from .cost import IN_FEATURES, MAX_GEMM_DIM, NUM_CLASSES, matmul_bytes, mlp_bytes
from .cpus import cpu_has_native
from .device import amp_dtype, check_fits, get_device
from .dtypes import dtype_name, parse_dtype
from .gpus import datasheet_entry
from .intervals import SpeedupEstimate, jsonable, plural, speedup_estimate
from .progress import enabled as progress_enabled
from .race import CONFIDENCE, RACE_MAX_TIME_S, RACE_TARGET_REL_WIDTH, RaceResult, check_race_args
from .text import Reading, say
from .timing import Contestant, check_estimate, measure, op_maker


@dataclass(frozen=True)
class PeakRatio:
    """The low-precision peak rate over the FP32 one (``low_peak``, ``fp32_peak``: FLOP/s), from a datasheet
    or raw GEMMs measured.  Not a bound on a speed-up: FP32 rarely runs at its peak."""

    vs_fp32: float
    vs_tf32: float | None
    source: str
    gemm_shape: tuple[int, int, int] | None = None
    measured_interval: SpeedupEstimate | None = None  # FP32 GEMM time / low-precision GEMM time, no casts
    low_peak: float | None = None
    fp32_peak: float | None = None

    measured_gemm = property(lambda self: self.measured_interval and self.measured_interval.ratio)


def datasheet_peak_ratio(gpu_name: str | None, dtype=torch.float16) -> PeakRatio | None:
    """The datasheet peak ratio of ``dtype`` on the GPU named exactly ``gpu_name``: its Tensor Core rate
    over the FP32 and the TF32 rate.  None for an unknown GPU or a dtype its Tensor Cores do not multiply."""
    entry = datasheet_entry(gpu_name)
    low = None if entry is None else entry.tflops(dtype)
    if low is None:
        return None
    over_tf32 = None if entry.tf32_tflops is None else round(low / entry.tf32_tflops, 2)
    peaks = dict(low_peak=low * 1e12, fp32_peak=entry.fp32_tflops * 1e12)
    return PeakRatio(round(low / entry.fp32_tflops, 2), over_tf32, entry.source, **peaks)


Ceiling, datasheet_ceiling = PeakRatio, datasheet_peak_ratio  # their names before issue 24


def _raw_gemm_ratio(m, k, n, *, device, dtype, **budget) -> tuple[SpeedupEstimate, dict]:
    """FP32 GEMM time over low-precision GEMM time (inputs already cast), and each one's fastest FLOP/s."""
    gen = torch.Generator(device=device).manual_seed(1)
    A, B = (torch.randn(r, c, device=device, generator=gen) for r, c in ((m, k), (k, n)))
    A_low, B_low = A.to(dtype), B.to(dtype)
    off = _race.tf32_context(device.type, False)
    fns = {"fp32": Contestant(lambda: A @ B, off), "amp": Contestant(lambda: A_low @ B_low, off)}
    t = measure(fns, device=device, **budget)
    flops = 2.0 * m * k * n
    peaks = dict(low_peak=flops / min(t["amp"].samples), fp32_peak=flops / min(t["fp32"].samples))
    return speedup_estimate(t["fp32"], t["amp"], confidence=CONFIDENCE), peaks


@dataclass(frozen=True)
class RaceSizes:
    """Every size and sampling budget notebook 06 races with: :func:`race_sizes` (pure), :func:`sizes_for`."""

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


# CPU races run on one thread: on a shared machine threads that wait for each other make a step many times
# slower at random, which no interval can average away, and one thread is the same on every machine.
_SIZES = {
    # On an H200 (docs/results/mlp-sizes_nvidia-h200_20261130.txt) a step is about 1.2-1.5 ms of launches
    # up to width 4096, batch 1024, where AMP lost; at width 8192, batch 8192 it won 4.45x (bf16).
    "gpu": dict(
        width=8192,
        batch=8192,
        matmul_sizes=(256, 512, 1024, 2048, 4096, 8192),
        mlp_widths=(256, 1024, 4096, 8192),
        batches=(1024, 4096, 8192, 16384),
        aligned_n=4096,
        widget_widths=(1024, 2048, 4096, 8192),
        widget_batches=(1024, 4096, 8192, 16384),
        budget=dict(warmup=3, repeats=10, min_sample_s=0.01, target_rel_width=0.1, max_time_s=10.0),
    ),
    # A CPU that multiplies the dtype natively (AVX512-BF16, AMX, ARM bf16): sizes where it wins (1.97x at
    # n = 512, 2.11x for race_mlp(2048, 1024) on an AVX512-BF16 CPU); 2 s per race keeps 06 near a minute.
    "cpu-native": dict(
        width=2048,
        batch=1024,
        matmul_sizes=(128, 256, 512, 1024),
        mlp_widths=(256, 512, 1024, 2048),
        batches=(64, 256, 1024),
        aligned_n=1024,
        widget_widths=(256, 512, 1024, 2048, 4096),
        widget_batches=(64, 256, 1024, 2048),
        budget=dict(
            warmup=2, repeats=8, min_sample_s=0.01, target_rel_width=0.1, max_time_s=2.0, num_threads=1
        ),
    ),
    # A CPU that emulates it (AVX2 only): bf16 matmuls run tens of times slower than FP32, so stay small.
    "cpu-emulated": dict(
        width=256,
        batch=64,
        matmul_sizes=(32, 64, 128, 256),
        mlp_widths=(64, 128, 256, 512),
        batches=(16, 64, 256),
        aligned_n=128,
        widget_widths=(64, 128, 256, 512, 1024),
        widget_batches=(16, 32, 64, 128, 256),
        budget=dict(
            warmup=1, repeats=8, min_sample_s=0.005, target_rel_width=0.1, max_time_s=2.0, num_threads=1
        ),
    ),
}
_SIZES["cpu-unknown"] = _SIZES["cpu-emulated"]  # when in doubt, the sizes that are quick everywhere
_CPU_CASES = {True: "cpu-native", False: "cpu-emulated", None: "cpu-unknown"}


def race_sizes(device_type: str, dtype=torch.bfloat16, *, native: bool | None = None) -> RaceSizes:
    """The sizes and budgets to race on a ``device_type`` ("cpu", "cuda", "mps") and, on a CPU, whether it
    multiplies ``dtype`` in hardware (``native``: True, False or None for unknown)."""
    case = _CPU_CASES[native] if device_type == "cpu" else "gpu"
    s = _SIZES[case]
    if device_type == "mps":  # an Apple GPU: no Tensor Cores, shared memory
        s = {**_SIZES["cpu-native"], "budget": _SIZES["gpu"]["budget"]}
    shown = f"matmul n from {s['matmul_sizes'][0]} to {s['matmul_sizes'][-1]}, MLP width {s['width']} with batch {s['batch']}"
    threads = " on one CPU thread" if s["budget"].get("num_threads") == 1 else ""
    facts = dict(device_type=device_type, low=dtype_name(dtype), shown=shown, threads=threads)
    description = say(f"race.sizes_{case.replace('-', '_')}", **facts)
    return RaceSizes(case, device_type, dtype, **{**s, "budget": dict(s["budget"])}, description=description)


def sizes_for(device=None, dtype=None) -> RaceSizes:
    """:func:`race_sizes` for this machine: its device, and whether its CPU multiplies ``dtype`` natively
    (``dtype`` defaults to ``amp_dtype(device)``).  (``06_timing_race``)"""
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else parse_dtype(dtype)
    return race_sizes(dev.type, dtype, native=cpu_has_native(dtype) if dev.type == "cpu" else None)


@dataclass(frozen=True)
class SweepResult:
    """Speedup against size, the peak ratio and the bound; ``kind``: "matmul", "mlp" (width) or "batch"."""

    kind: str
    sizes: tuple[int, ...]
    results: tuple[RaceResult, ...]
    peak_ratio: PeakRatio
    context: dict

    ceiling = property(lambda self: self.peak_ratio)  # its name before issue 24

    @property
    def bounds(self) -> list[float | None]:
        """The most each size's speed-up can be: the low-precision peak over the FP32 rate measured there."""
        low = self.peak_ratio.low_peak
        return [None if low is None else low * r.fp32.median / r.flops for r in self.results]

    speedups = property(lambda self: [r.speedup for r in self.results])
    intervals = property(lambda self: [r.speedup_interval for r in self.results])
    outcomes = property(lambda self: [r.outcome for r in self.results])

    @property
    def first_paying_size(self) -> int | None:
        """The smallest size from which AMP is measurably faster at every larger size, or None."""
        not_faster = [i for i, outcome in enumerate(self.outcomes) if outcome != "faster"]
        first = not_faster[-1] + 1 if not_faster else 0
        return self.sizes[first] if first < len(self.sizes) else None

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("kind", "sizes", "speedups", "intervals", "context")}
        out["speedups_vs_tf32"] = [r.speedup_vs_tf32 for r in self.results]
        out["ceiling"] = {**vars(self.peak_ratio), "measured_gemm": self.peak_ratio.measured_gemm}
        out["bounds"] = self.bounds
        return jsonable({**out, "results": [r.to_dict() for r in self.results]})


MAX_SWEEP_SIZES = 64  # the most sizes one sweep races (each size is a race of its own)


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
    budget_s: float | None = None,
) -> SweepResult:
    """Speedup against size, its peak ratio and the bound at each size: ``race_matmul(n)`` for each size
    (``kind="matmul"``), ``race_mlp`` for each width (``"mlp"``) or batch (``"batch"``); defaults from
    :func:`sizes_for`.  The peak ratio is a known GPU's datasheet's, else raw GEMMs' at the largest size.
    Races estimated past ``budget_s`` (30 s, or each ``max_time_s``) are refused.  (``06_timing_race``)"""
    kind = check_choice("kind", kind, ["matmul", "mlp", "batch"])
    show_progress = check_bool("show_progress", show_progress)
    defaults = sizes_for(device, dtype)
    if sizes is None:
        sizes = {"matmul": defaults.matmul_sizes, "mlp": defaults.mlp_widths, "batch": defaults.batches}[kind]
    sizes = check_int_sequence("sizes", sizes, minimum=1, max_length=MAX_SWEEP_SIZES)
    batch = check_int("batch", defaults.batch if batch is None else batch, minimum=1)
    width = check_int("width", defaults.width if width is None else width, minimum=1)
    # Bounded before it starts: every race and the raw GEMM's together must fit in MAX_SECONDS.
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s)
    dev, dtype, budget = check_race_args(device, dtype, *args, races=len(sizes) + 1, budget_s=budget_s)
    if budget_s is None:  # each race's max_time_s is a budget given
        budget["budget_s"] = max(budget["budget_s"], (len(sizes) + 1) * (budget["max_time_s"] or 0))
    largest = max(sizes)
    w, b = (largest, batch) if kind == "mlp" else (width, largest)
    need = matmul_bytes(largest, dtype) if kind == "matmul" else mlp_bytes(w, b, dtype)
    check_fits(need, dev, f"sweep {'n' if kind == 'matmul' else kind}={largest}", "choose smaller sizes")
    shape = (largest,) * 3 if kind == "matmul" else (b, IN_FEATURES, w)
    races = [_race_of(kind, size, batch, width) for size in sizes]
    seconds = sum(
        _race.race_seconds(budget, _race.call_seconds(k, p, dev, dtype, budget))
        for k, p in races
        if _race.reusable(reuse, k, p, dtype, dev, num_threads) is None
    )
    gemm = round(math.prod(shape) ** (1 / 3))  # the raw GEMMs as a square one of as many FLOPs
    raw_s = [_race.calibrated(budget, dev, gemm, d, True) for d in (None, dtype)]
    seconds += _race.race_seconds(budget, raw_s)
    what, fix = f"sweep(kind={kind!r}) of {plural(len(sizes), 'size')}", "choose fewer or smaller sizes"
    check_estimate(what, seconds, budget["budget_s"], fix, "the sum of its races' estimates")
    common = dict(device=dev, dtype=dtype, **{k: v for k, v in budget.items() if k != "number"})
    results = []
    off = not (show_progress and progress_enabled())
    with tqdm(total=len(sizes) + 1, desc=f"sweep {kind}", disable=off) as bar:
        for size, (k, p) in zip(sizes, races, strict=True):
            bar.set_postfix_str(f"size {size}")
            if k == "matmul":
                results.append(_race.race_matmul(size, reuse=reuse, **common))
            else:
                results.append(_race.race_mlp(p["width"], p["batch"], reuse=reuse, **common))
            bar.update(1)
        measured, peaks = _raw_gemm_ratio(*shape, device=dev, dtype=dtype, **budget)
        bar.update(1)
    peak = datasheet_peak_ratio(torch.cuda.get_device_name(dev), dtype) if dev.type == "cuda" else None
    if peak is None:
        what = "GPU without a datasheet entry" if dev.type == "cuda" else dev.type
        gemm = f"{dtype_name(dtype)} GEMM " + "x".join(map(str, shape))
        source = f"measured on this {what}: raw {gemm} against FP32, inputs already cast"
        peak = PeakRatio(measured.ratio, None, source, **peaks)
    peak = replace(peak, gemm_shape=shape, measured_interval=measured)
    return SweepResult(kind, sizes, tuple(results), peak, results[-1].context)


def _race_of(kind, size, batch, width) -> tuple[str, dict]:
    """The race a sweep runs at ``size``: its kind and parameters."""
    if kind == "matmul":
        return "matmul", {"n": size}
    w, b = (size, batch) if kind == "mlp" else (width, size)
    return "mlp", {"width": w, "batch": b, "in_features": IN_FEATURES, "num_classes": NUM_CLASSES}


def race_alignment(
    n: int,
    *,
    device=None,
    dtype=None,
    warmup: int = 2,
    repeats: int = 8,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
) -> Reading:
    """AMP matmuls of n x n and (n - 1) x (n - 1) in one interleaved race: the throughput at n - 1 over that
    at n, pair by pair, with its interval; "lower", "higher" or "too close to call".  (``06_timing_race``)"""
    n = check_int("n", n, minimum=2, maximum=MAX_GEMM_DIM)
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s)
    dev, dtype, budget = check_race_args(device, dtype, *args)
    check_fits(matmul_bytes(n, dtype), dev, f"race_alignment(n={n})", "choose a smaller n")
    make, off = op_maker(dev, dtype), _race.tf32_context(dev.type, False)  # each size's own seeded operands
    fns = {str(m): Contestant(make(m), off) for m in (n, n - 1)}
    t = list(measure(fns, device=dev, **budget).values())
    work = ((n - 1) / n) ** 3  # the FLOPs at n - 1 over those at n
    share = speedup_estimate([s * work for s in t[0].samples], t[1].samples, confidence=CONFIDENCE)
    outcome = {"faster": "higher", "slower": "lower"}.get(share.outcome, share.outcome)
    facts = {f"tflops_{i}": 2.0 * (n - i) ** 3 / t[i].median / 1e12 for i in (0, 1)}
    facts |= {"n": n, "n1": n - 1, "low": dtype_name(dtype), "share": share, "pairs": share.pairs}
    code = "race.alignment_" + {"higher": "higher", "lower": "lower"}.get(outcome, "close")
    return Reading(outcome, ("race.alignment_paired", code), facts)


def check_sweep(name: str, value) -> SweepResult:
    return check_instance(name, value, SweepResult, "a SweepResult (from sweep)")


def _finish(ax, result: SweepResult, ylabel: str, title: str, grid: str):
    """The sizes on a log2 x axis, plain numbers on a log y axis, the labels, grid and legend."""
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    p = result.results[0].params
    label = {
        "matmul": "n (n x n matmul)",
        "mlp": f"width (batch {p.get('batch')})",
        "batch": f"batch (width {p.get('width')})",
    }
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(result.sizes), [str(s) for s in result.sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    # A narrow range (less than a decade) has no major ticks inside it: label the minor ones plainly too.
    ax.yaxis.set_minor_formatter(plain if ax.get_ylim()[1] / ax.get_ylim()[0] < 10 else NullFormatter())
    ax.set(xlabel=label[result.kind], ylabel=ylabel, title=title)
    ax.grid(True, which=grid, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def _axes(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 3.8))
    return ax


def plot_sweep(result: SweepResult, ax=None):
    """Speedup (FP32 / AMP) against size on log-log axes, with its interval, break-even, the peak ratio and
    the bound at each size."""
    check_sweep("result", result)
    ax = _axes(check_axes("ax", ax))
    dtype = dtype_name(result.results[0].dtype)
    # Each speedup's interval, none where there are too few pairs for one.
    ends = [
        (e.ratio - e.low, e.high - e.ratio) if math.isfinite(e.high) else (0, 0) for e in result.intervals
    ]
    yerr = list(zip(*ends, strict=True))
    conf = result.intervals[0].confidence_text
    label = f"AMP ({dtype}) vs FP32 (bars: {conf} interval)"
    ax.errorbar(result.sizes, result.speedups, yerr=yerr, fmt="o-", color="C0", capsize=3, label=label)
    tf32 = [r.speedup_vs_tf32 for r in result.results]
    has_tf32 = all(s is not None for s in tf32)
    if has_tf32:
        ax.plot(result.sizes, tf32, "s--", color="C2", label=f"AMP ({dtype}) vs TF32")
    c = result.peak_ratio
    datasheet = "datasheet" in c.source
    kind = "datasheet" if datasheet else "raw GEMM, measured"
    if None not in (bounds := result.bounds):
        label = f"bound: {dtype} peak / FP32 rate measured ({'datasheet' if datasheet else 'raw GEMM'} peak)"
        ax.plot(result.sizes, bounds, "v:", color="C3", label=label)
    ax.axhline(c.vs_fp32, color="C1", ls="--", label=f"peak ratio vs FP32 ({kind}): {c.vs_fp32:.3g}x")
    if c.vs_tf32 is not None and has_tf32:
        ax.axhline(c.vs_tf32, color="C2", ls=":", label=f"peak ratio vs TF32 (datasheet): {c.vs_tf32:.3g}x")
    if datasheet and c.measured_gemm is not None:
        ax.axhline(c.measured_gemm, color="C4", ls=":", label=f"raw GEMM, measured: {c.measured_gemm:.3g}x")
    ax.axhline(1.0, color="0.3", lw=1, label="break-even")
    title = f"Where AMP starts to pay on {result.context['device']}"
    return _finish(ax, result, "speedup (FP32 time / AMP time)", title, "major")


def plot_memory(result: SweepResult, ax=None):
    """Peak memory per training step, FP32 against AMP, for a ``kind="mlp"`` or ``kind="batch"`` sweep."""
    check_sweep("result", result)
    if result.kind not in ("mlp", "batch") or result.results[0].memory is None:
        raise ValueError(
            "plot_memory needs a sweep with kind='mlp' or 'batch' (memory is measured for training steps)"
        )
    ax = _axes(check_axes("ax", ax))
    names = [k for k in result.results[0].memory if k != "method"]
    for i, name in enumerate(names):
        mib = [r.memory[name] / 2**20 for r in result.results]
        ax.plot(result.sizes, mib, "o-", color=f"C{i}", label=name.upper())
    how = "measured" if result.results[0].memory["method"].startswith("measured") else "estimate"
    return _finish(ax, result, "MiB", f"Memory per training step ({how})", "both")
