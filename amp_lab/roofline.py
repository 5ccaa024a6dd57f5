"""The memory-bound regime (``06_timing_race``): a race of ``torch.add`` in FP32 against 16-bit storage, this
machine's measured roofline, and the races placed on it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import device as _device
from ._checks import check_axes, check_instance, check_int
from .cost import MAX_GEMM_DIM, MAX_NUMEL, elementwise_bytes
from .device import check_fits, get_device
from .intervals import plural
from .race import (
    RACE_MAX_TIME_S,
    RACE_TARGET_REL_WIDTH,
    SHORT_NAMES,
    RaceResult,
    calibrated,
    check_race_args,
    check_race_time,
    races_of,
    reusable,
    run_race,
    tf32_context,
    unit_of,
)
from .text import Reading, format_bytes, say
from .timing import Contestant, RaceProgress, check_budget, classify_regime, measure


def _elementwise_operands(numel: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=dev).manual_seed(0)  # uniform draws: quicker to make, and add does not mind
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
    budget_s: float | None = None,
) -> RaceResult:
    """Race ``torch.add(a, b)`` of ``numel`` elements stored in FP32 against ``dtype`` (default
    ``amp_dtype(device)``; autocast has no rule for ``add``): one FLOP per 12 bytes in FP32, 6 in 16 bits.
    The rest works as in :func:`~amp_lab.race.race_matmul`.  (``06_timing_race``)"""
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s, callback)
    dev, dtype, budget = check_race_args(device, dtype, *args, budget_s=budget_s)
    params = {"numel": numel}
    if (found := reusable(reuse, "elementwise", params, dtype, dev, num_threads)) is not None:
        return found
    most = max(1, int(0.9 * (_device.available_bytes(dev) or 0) / elementwise_bytes(1, dtype)))
    what = f"race_elementwise(numel={numel})"
    check_fits(elementwise_bytes(numel, dtype), dev, what, f"choose numel <= {most}")
    add_s = calibrated(budget, dev, numel, op="add")  # the 16-bit add moves half the bytes: at most as long
    check_race_time(what, "choose a smaller numel", budget, [add_s, add_s])
    a, b = _elementwise_operands(numel, dev)
    a_low, b_low = a.to(dtype), b.to(dtype)
    c, c_low = torch.empty_like(a), torch.empty_like(a_low)
    off = tf32_context(dev.type, False)
    contestants = {
        "fp32": Contestant(lambda: torch.add(a, b, out=c), off),
        "amp": Contestant(lambda: torch.add(a_low, b_low, out=c_low), off),
    }
    return run_race("elementwise", params, dtype, dev, contestants, float(numel), budget, op="torch.add")


@dataclass(frozen=True)
class Roofline:
    """This machine's roofs, measured (:func:`measure_roofline`): below the ``ridge`` (FLOP per byte) an op is
    memory-bound here, above it compute-bound.  (``06_timing_race``)"""

    peak_flops: float  # FLOP/s of an n x n FP32 matmul (fastest sample)
    bytes_per_s: float  # the faster of copy (8 bytes per element) and add (12 bytes per element)
    matmul_n: int
    numel: int
    timings: dict  # "matmul", "copy", "add" -> Timing
    context: dict

    ridge = property(lambda self: self.peak_flops / self.bytes_per_s)  # FLOP per byte

    def attainable(self, intensity: float) -> float:
        """The most FLOP/s an op of this arithmetic intensity can reach here."""
        return min(self.peak_flops, self.bytes_per_s * intensity)

    def __str__(self) -> str:
        ctx = self.context
        return (
            f"roofline of {ctx.get('device', '?')} ({plural(int(ctx.get('threads', 0) or 0), 'thread')}): "
            f"{self.peak_flops / 1e9:.3g} GFLOP/s (FP32 matmul, n={self.matmul_n}), "
            f"{self.bytes_per_s / 1e9:.3g} GB/s (the faster of copy and add, {format_bytes(4 * self.numel)} per "
            f"FP32 tensor); ridge point {self.ridge:.3g} FLOP per byte"
        )


def measure_roofline(
    device=None,
    *,
    n: int | None = None,
    numel: int | None = None,
    warmup: int = 1,
    repeats: int = 3,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    budget_s: float | None = None,
) -> Roofline:
    """This machine's roofline: the FLOP/s of an n x n FP32 matmul and the bandwidth of the faster of a copy
    and an add of ``numel`` elements, from their fastest samples (defaults: n=1024, 2**24 on a CPU, 8192,
    2**28 on a GPU); refused when estimated past ``budget_s`` (default 30 s).  (``06_timing_race``)"""
    dev = get_device(device)
    default_n, default_numel = (1024, 2**24) if dev.type == "cpu" else (8192, 2**28)
    n = check_int("n", default_n if n is None else n, minimum=1, maximum=MAX_GEMM_DIM)
    numel = check_int("numel", default_numel if numel is None else numel, minimum=1, maximum=MAX_NUMEL)
    budget = check_budget(warmup, repeats, min_sample_s, num_threads, contestants=3, budget_s=budget_s)
    what, fix = f"measure_roofline(n={n}, numel={numel})", "choose a smaller n or numel"
    check_fits(12 * n * n + 12 * numel, dev, what, fix)
    add_s = calibrated(budget, dev, numel, op="add")  # a copy moves fewer bytes: at most as long
    check_race_time(what, fix, budget, [calibrated(budget, dev, n), add_s, add_s])
    # Filled, not drawn: the values do not change FP32's speed, and drawing 2**24 numbers costs more.
    A, B, C = (torch.full((n, n), 0.5, device=dev) for _ in range(3))
    a, b, c = (torch.full((numel,), 0.5, device=dev) for _ in range(3))
    off = tf32_context(dev.type, False)
    fns = {
        "matmul": Contestant(lambda: torch.matmul(A, B, out=C), off),
        "copy": Contestant(lambda: c.copy_(a), off),
        "add": Contestant(lambda: torch.add(a, b, out=c), off),
    }
    context = {"race": "roofline", "size": f"n={n}, numel={numel}"}
    timings = measure(fns, device=dev, extra_context=context, **budget)
    fastest = {name: min(t.samples) for name, t in timings.items()}
    bandwidth = max(8 * numel / fastest["copy"], 12 * numel / fastest["add"])
    flops = 2.0 * n**3 / fastest["matmul"]
    return Roofline(flops, bandwidth, n, numel, timings, timings["matmul"].context)


def plot_roofline(roofline: Roofline, results, ax=None):
    """This machine's roofline (log-log) with each contestant of ``results`` at its arithmetic intensity and
    the FLOP/s it achieved.  (``06_timing_race``)"""
    check_instance("roofline", roofline, Roofline, "a Roofline (from measure_roofline)")
    races = races_of("results", results)
    if check_axes("ax", ax) is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7, 4.2))
    points: dict[str, tuple[list, list, list]] = {}
    for r in races:
        what = {"matmul": "matmul", "fp8_matmul": "matmul", "elementwise": "add", "mlp": "MLP step"}[r.kind]
        amp = ("" if r.kind == "elementwise" else "AMP ") + SHORT_NAMES[r.dtype]
        for name in ("fp32", "amp"):
            xs, ys, sizes = points.setdefault(f"{what} {'FP32' if name == 'fp32' else amp}", ([], [], []))
            xs.append(r.intensity(name))
            ys.append(r.flops / r.timings[name].median / 1e9)
            sizes.append(r.size)
    xs_all = [x for xs, _, _ in points.values() for x in xs] + [roofline.ridge]
    lo, hi = min(xs_all) / 3, max(xs_all) * 3
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roof = f"roof: {roofline.peak_flops / 1e9:.3g} GFLOP/s, {roofline.bytes_per_s / 1e9:.3g} GB/s (measured)"
    ax.plot(grid, [roofline.attainable(x) / 1e9 for x in grid], "-", color="0.2", lw=2, label=roof)
    ax.axvline(roofline.ridge, color="0.5", ls=":", label=f"ridge point: {roofline.ridge:.3g} FLOP/byte")
    markers, offset = {"matmul": "o", "add": "^", "MLP": "s"}, dict(textcoords="offset points", xytext=(4, 3))
    for i, (label, (xs, ys, sizes)) in enumerate(points.items()):
        ax.plot(xs, ys, markers[label.split()[0]], color=f"C{i}", ms=7, ls="none", label=label)
        if label.startswith("matmul"):
            for x, y, size in zip(xs, ys, sizes, strict=True):
                ax.annotate(size, (x, y), **offset, fontsize=7, color=f"C{i}")
    ax.set(
        xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP per byte)", ylabel="achieved GFLOP/s"
    )
    ax.set_title(f"Roofline of {roofline.context.get('device', '?')}, measured, with your races")
    ax.grid(True, which="major", alpha=0.3)
    # outside the axes, so that it hides no point (loc="best" hid the smallest matmul)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
    return ax


def roofline_summary(roofline: Roofline, results) -> Reading:
    """The roofline read: the roofs and ridge, then each race's FP32 intensity against the ridge, the share of
    the roof it reached and its regime (``facts["points"]``).  (``06_timing_race``)"""
    check_instance("roofline", roofline, Roofline, "a Roofline (from measure_roofline)")
    points = []
    for r in races_of("results", results):
        intensity = r.intensity("fp32")
        share = r.flops / r.fp32.median / roofline.attainable(intensity)
        args = (r.fp32.median, r.flops, r.bytes_moved("fp32"), roofline.peak_flops, roofline.bytes_per_s)
        regime = classify_regime(*args, unit_of(r.kind), "this machine's measured peak rates").name
        if regime == "launch-bound" and not str(roofline.context.get("device")).startswith("cuda"):
            regime = "overhead-bound"  # a CPU launches no kernels: per-call overhead held it back
        below = intensity < roofline.ridge
        points.append(
            {
                "what": "torch.add" if r.kind == "elementwise" else r.kind,
                "size": r.size,
                "intensity": intensity,
                "times": roofline.ridge / intensity if below else intensity / roofline.ridge,
                "side": "below" if below else "above",
                "share": share,
                "regime": regime,
                "above_roof": say("race.roof_above") if share > 1 else "",
            }
        )
    facts = {
        "gflops": roofline.peak_flops / 1e9,
        "n": roofline.matmul_n,
        "gbs": roofline.bytes_per_s / 1e9,
        "ridge": roofline.ridge,
        "points": tuple(points),
        "points_text": " ".join(say("race.roof_point", **p) for p in points),
    }
    return Reading("measured", ("race.roof", "race.roof_points") if points else ("race.roof",), facts)
