"""The memory-bound regime (``06_timing_race``): a race of ``torch.add`` in FP32 against 16-bit storage,
this machine's roofline measured (the FLOP/s of a large matmul, the bandwidth of a large copy and add), and
the races placed on it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import device as _device
from ._checks import ArgumentTypeError, check_axes, check_instance, check_int
from .cost import MAX_GEMM_DIM, MAX_NUMEL, elementwise_bytes
from .device import check_fits, get_device
from .intervals import plural
from .race import (
    RACE_MAX_TIME_S,
    RACE_TARGET_REL_WIDTH,
    SHORT_NAMES,
    RaceResult,
    check_race_args,
    reusable,
    run_race,
    tf32_context,
    unit_of,
)
from .text import Reading, format_bytes, say
from .timing import (
    Contestant,
    RaceProgress,
    Regime,
    check_budget,
    check_planned_time,
    classify_regime,
    measure,
)

# ----------------------------------------------------------------------------------------------
# The memory-bound regime: an elementwise race, and this machine's measured roofline
# ----------------------------------------------------------------------------------------------


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
    dev, dtype = check_race_args(device, dtype, warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s,
                               callback)  # fmt: skip
    found = reusable(reuse, "elementwise", {"numel": numel}, dtype, dev, num_threads)
    if found is not None:
        return found
    per = elementwise_bytes(1, dtype)
    check_fits(
        elementwise_bytes(numel, dtype), dev, f"race_elementwise(numel={numel})",
        f"choose numel <= {max(1, int(0.9 * (_device.available_bytes(dev) or 0) / per))}",
    )  # fmt: skip
    a, b = _elementwise_operands(numel, dev)
    a_low, b_low = a.to(dtype), b.to(dtype)
    c, c_low = torch.empty_like(a), torch.empty_like(a_low)

    def fp32():
        return torch.add(a, b, out=c)

    def amp():
        return torch.add(a_low, b_low, out=c_low)

    off = tf32_context(dev.type, False)
    contestants = {"fp32": Contestant(fp32, off), "amp": Contestant(amp, off)}
    budget = (warmup, repeats, min_sample_s, num_threads, callback, target_rel_width, max_time_s)
    return run_race("elementwise", {"numel": numel}, f"numel={numel}", dtype, dev, contestants, float(numel), budget,
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

    @property
    def ridge(self) -> float:
        """The ridge point in FLOP per byte: peak FLOP/s over bytes per second."""
        return self.peak_flops / self.bytes_per_s

    def attainable(self, intensity: float) -> float:
        """The most FLOP/s an op of this arithmetic intensity (FLOP per byte) can reach here:
        ``min(peak_flops, bytes_per_s * intensity)``."""
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
            f"roofline of {ctx.get('device', '?')} ({plural(int(ctx.get('threads', 0) or 0), 'thread')}): "
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
    warmup, repeats, _, min_sample_s, num_threads = check_budget(warmup, repeats, min_sample_s, num_threads)
    check_planned_time(repeats, 3, min_sample_s)
    check_fits(
        12 * n * n + 12 * numel, dev, f"measure_roofline(n={n}, numel={numel})", "choose a smaller n or numel"
    )
    # The values do not change the speed of FP32 arithmetic (normal numbers; no subnormals), so the
    # operands are filled, not drawn: drawing 2**24 random numbers would cost more than measuring them.
    A, B, C = (torch.full((n, n), 0.5, device=dev) for _ in range(3))
    a, b, c = (torch.full((numel,), 0.5, device=dev) for _ in range(3))
    off = tf32_context(dev.type, False)
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


# The most races one plot or summary reads (a sweep races at most sweeps.MAX_SWEEP_SIZES sizes).
MAX_RESULTS = 64


def _races(name: str, results) -> list[RaceResult]:
    """``results`` (a RaceResult, a SweepResult, or a list or tuple of them) as a flat list of races."""
    if not isinstance(results, (list, tuple)):
        results = [results]
    if len(results) > MAX_RESULTS:
        raise ValueError(f"{name} may hold at most {MAX_RESULTS} results, got {len(results)}")
    flat = []
    for i, r in enumerate(results):
        races = getattr(r, "results", (r,))
        if not isinstance(races, tuple) or not all(isinstance(race, RaceResult) for race in races):
            raise ArgumentTypeError(
                f"{name}[{i}] must be a RaceResult or a SweepResult, got {type(r).__name__}"
            )
        flat.extend(races)
    return flat


def _check_roofline(name: str, value) -> Roofline:
    return check_instance(name, value, Roofline, "a Roofline (from measure_roofline)")


def _point_label(r: RaceResult, name: str) -> str:
    what = {"matmul": "matmul", "fp8_matmul": "matmul", "elementwise": "add", "mlp": "MLP step"}[r.kind]
    if name == "fp32":
        return f"{what} FP32"
    return (
        f"{what} {SHORT_NAMES[r.dtype]}" if r.kind == "elementwise" else f"{what} AMP {SHORT_NAMES[r.dtype]}"
    )


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
    ax.plot(
        grid,
        [roofline.attainable(x) / 1e9 for x in grid],
        "-",
        color="0.2",
        lw=2,
        label=f"roof: {roofline.peak_flops / 1e9:.3g} GFLOP/s, {roofline.bytes_per_s / 1e9:.3g} GB/s (measured)",
    )
    ax.axvline(roofline.ridge, color="0.5", ls=":", label=f"ridge point: {roofline.ridge:.3g} FLOP/byte")
    markers = {"matmul": "o", "add": "^", "MLP": "s"}
    for i, (label, (xs, ys, sizes)) in enumerate(points.items()):
        ax.plot(xs, ys, markers[label.split()[0]], color=f"C{i}", ms=7, ls="none", label=label)
        if label.startswith("matmul"):
            for x, y, size in zip(xs, ys, sizes, strict=True):
                ax.annotate(
                    size, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=f"C{i}"
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"Roofline of {roofline.context.get('device', '?')}, measured, with your races")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return ax


def roofline_summary(roofline: Roofline, results) -> Reading:
    """The roofline read: this machine's roofs and ridge point, then for each race's FP32 contestant its
    arithmetic intensity against the ridge, the share of the roof it reached and its regime
    (:meth:`Roofline.regime`).  Outcome ``"measured"``; ``facts["points"]`` one dict per race.
    (``06_timing_race``)"""
    _check_roofline("roofline", roofline)
    points = []
    for r in _races("results", results):
        intensity = r.intensity("fp32")
        share = r.flops / r.fp32.median / roofline.attainable(intensity)
        regime = roofline.regime(r.fp32.median, r.flops, r.bytes_moved("fp32"), unit=unit_of(r.kind))
        below = intensity < roofline.ridge
        points.append({
            "what": "torch.add" if r.kind == "elementwise" else r.kind, "size": r.size, "intensity": intensity,
            "times": roofline.ridge / intensity if below else intensity / roofline.ridge,
            "side": "below" if below else "above", "share": share, "regime": regime.name,
            "above_roof": say("race.roof_above") if share > 1 else "",
        })  # fmt: skip
    facts = {"gflops": roofline.peak_flops / 1e9, "n": roofline.matmul_n, "gbs": roofline.bytes_per_s / 1e9,
             "ridge": roofline.ridge, "points": tuple(points),
             "points_text": " ".join(say("race.roof_point", **p) for p in points)}  # fmt: skip
    return Reading("measured", ("race.roof", "race.roof_points") if points else ("race.roof",), facts)
