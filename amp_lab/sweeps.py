"""Speedup against size (``06_timing_race``): the sizes a machine races (a pure function of its facts),
the sweep of sizes with its ceiling (the datasheet's, or a raw GEMM's, measured), and their plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from . import race as _race
from ._checks import (
    MAX_SECONDS,
    ArgumentTypeError,
    check_axes,
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_int_sequence,
)
from .cost import IN_FEATURES, matmul_bytes, mlp_bytes
from .device import amp_dtype, check_fits, get_device
from .dtypes import dtype_name, parse_dtype
from .gpus import datasheet_entry
from .hardware import cpu_has_native
from .intervals import SpeedupEstimate, jsonable, plural, speedup_estimate
from .progress import progress
from .race import (
    CONFIDENCE,
    RACE_MAX_TIME_S,
    RACE_TARGET_REL_WIDTH,
    RaceResult,
    check_race_args,
    contestant_names,
    sampling_args,
    tf32_context,
)
from .text import say
from .timing import DEFAULT_MAX_TIME_S, Contestant, measure

# ----------------------------------------------------------------------------------------------
# The ceiling, and the sweep
# ----------------------------------------------------------------------------------------------


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
    device_type = _race.device_facts(dev)[0]
    fp32 = Contestant(lambda: A @ B, tf32_context(device_type, False))
    t = measure(
        {"fp32": fp32, "amp": Contestant(lambda: A_low @ B_low, tf32_context(device_type, False))},
        device=dev,
        warmup=warmup,
        repeats=repeats,
        min_sample_s=min_sample_s,
        num_threads=num_threads,
        **sampling_args(target_rel_width, max_time_s),
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
        width=8192,
        batch=8192,
        matmul_sizes=(256, 512, 1024, 2048, 4096, 8192),
        mlp_widths=(256, 1024, 4096, 8192),
        batches=(1024, 4096, 8192, 16384),
        aligned_n=4096,
        widget_widths=(1024, 2048, 4096, 8192),
        widget_batches=(1024, 4096, 8192, 16384),
        budget={
            "warmup": 3,
            "repeats": 10,
            "min_sample_s": 0.01,
            "target_rel_width": 0.1,
            "max_time_s": 10.0,
        },
    ),
    # A CPU that multiplies the dtype natively (AVX512-BF16, AMX, ARM bf16): sizes where it wins.  On an
    # AVX512-BF16 CPU race_matmul gave 1.97x at n = 512 and 2.2x at 1024, race_mlp(2048, 1024) 2.11x.
    "cpu-native": dict(
        width=2048,
        batch=1024,
        matmul_sizes=(128, 256, 512, 1024),
        mlp_widths=(256, 512, 1024, 2048),
        batches=(64, 256, 1024),
        aligned_n=1024,
        widget_widths=(256, 512, 1024, 2048, 4096),
        widget_batches=(64, 256, 1024, 2048),
        # 2 s per race keeps notebook 06 near a minute on such a CPU (about 15 races, the largest a
        # 0.1-0.2 s step on one thread), where compute-bound sizes have little noise to average away.
        budget={
            "warmup": 2,
            "repeats": 8,
            "min_sample_s": 0.01,
            "target_rel_width": 0.1,
            "max_time_s": 2.0,
            "num_threads": 1,
        },
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
        budget={
            "warmup": 1,
            "repeats": 8,
            "min_sample_s": 0.005,
            "target_rel_width": 0.1,
            "max_time_s": 2.0,
            "num_threads": 1,
        },
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
            raise ArgumentTypeError(
                f"native must be True, False or None (unknown), got {native!r:.80}"
            ) from None
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
    description = say(
        f"race.sizes_{case.replace('-', '_')}", device_type=device_type, low=low, shown=shown, threads=threads
    )
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
        return jsonable(
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
                        None
                        if self.ceiling.measured_interval is None
                        else self.ceiling.measured_interval.to_dict()
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
    dev, dtype = check_race_args(
        device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s
    )
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
    k = len(contestant_names(*_race.device_facts(dev)))
    per_race = repeats * k * min_sample_s
    if target_rel_width is not None:
        per_race = max(per_race, DEFAULT_MAX_TIME_S if max_time_s is None else max_time_s)
    if (len(sizes) + 1) * per_race > MAX_SECONDS:
        raise ValueError(
            f"sweep of {plural(len(sizes), 'size')} (plus the raw GEMM) could take up to {(len(sizes) + 1) * per_race:g} s "
            f"({per_race:g} s per race), more than the course's limit of {MAX_SECONDS:g} s; choose fewer sizes "
            "or a smaller max_time_s"
        )
    # Refuse the whole sweep up front rather than after minutes of racing.
    largest = max(sizes)
    if kind == "matmul":
        check_fits(matmul_bytes(largest, dtype), dev, f"sweep size n={largest}", "choose smaller sizes")
    elif kind == "mlp":
        check_fits(mlp_bytes(largest, batch, dtype), dev, f"sweep width={largest}", "choose smaller sizes")
    else:
        check_fits(mlp_bytes(width, largest, dtype), dev, f"sweep batch={largest}", "choose smaller sizes")

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
                results.append(_race.race_matmul(size, reuse=reuse, **common))
            elif kind == "mlp":
                results.append(_race.race_mlp(size, batch, reuse=reuse, **common))
            else:
                results.append(_race.race_mlp(width, size, reuse=reuse, **common))
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
    return SweepResult(
        kind=kind, sizes=sizes, results=tuple(results), ceiling=ceiling, context=results[-1].context
    )


def check_sweep(name: str, value) -> SweepResult:
    return check_instance(name, value, SweepResult, "a SweepResult (from sweep)")


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
    check_sweep("result", result)
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
    check_sweep("result", result)
    if result.kind not in ("mlp", "batch") or result.results[0].memory is None:
        raise ValueError(
            "plot_memory needs a sweep with kind='mlp' or 'batch' (memory is measured for training steps)"
        )
    check_axes("ax", ax)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 3.8))
    mib = 2.0**20
    names = [k for k in result.results[0].memory if k != "method"]
    for i, name in enumerate(names):
        ax.plot(
            result.sizes,
            [r.memory[name] / mib for r in result.results],
            "o-",
            color=f"C{i}",
            label=name.upper(),
        )
    _size_axis(ax, result.sizes, _axis_label(result))
    _plain_log_y(ax)
    ax.set_ylabel("MiB")
    method = result.results[0].memory["method"]
    ax.set_title(
        "Memory per training step (" + ("measured" if method.startswith("measured") else "estimate") + ")"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
