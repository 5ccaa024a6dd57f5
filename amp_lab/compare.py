"""FP32 against AMP, measured and read (07): :func:`compare_precisions` trains the same model once per dtype
in lockstep, sized by the machine as 06's race is (:func:`comparison_sizes`), and measures time, memory and
accuracy; :func:`comparison_rows` tabulates them; :func:`read_comparison` and :func:`read_memory` read them."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ._checks import (
    MAX_SECONDS,
    MAX_STEPS,
    MAX_THREADS,
    ArgumentTypeError,
    bounded_list,
    check_bool,
    check_float,
    check_instance,
    check_int,
    check_seed,
)
from .amp import AmpChoice
from .cost import mlp_sizes, num_parameters, step_bytes, step_flops
from .cpus import cpu_has_native
from .data import Dataset
from .device import check_fits, get_device, torch_threads
from .dtypes import dtype_name
from .gpus import tensor_core_generation
from .hardware import tf32_setting
from .intervals import SpeedupEstimate, speedup_estimate
from .models import make_mlp
from .progress import progress
from .race_trainer import saved_bytes
from .recipe import MAX_LR, History, evaluate, make_scaler, step_batches, timed_step, train_loop
from .recipe_checks import check_per_step, check_split_for, precision
from .sweeps import race_sizes
from .text import Reading, format_bytes, format_ratio, say
from .timing import Regime, calibrated_seconds, regime_for, timing_context


def saved_activation_bytes(model, X, y, *, dtype, device=None) -> int:
    """Bytes autograd saves for backward during one forward pass of ``model`` on the batch ``X``, ``y``, each
    storage counted once: the activation memory AMP shrinks (the float32 weights and Adam's state do not)."""
    dev = get_device(device)

    def forward():
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            F.cross_entropy(model(X), y)

    return saved_bytes(forward)


def _step_memory(loop, dev: torch.device) -> int:
    """Peak bytes one training step (``next(loop)``) allocates on CUDA above what is alive before it: the
    first step is an unmeasured warm-up (cuBLAS workspaces, gradients, Adam's state)."""
    next(loop)
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    next(loop)
    torch.cuda.synchronize(dev)
    return torch.cuda.max_memory_allocated(dev) - base


@dataclass(frozen=True)
class ComparisonSizes:
    """The model :func:`compare_precisions` trains on a machine (:func:`comparison_sizes`): ``case`` and
    ``threads`` are notebook 06's, ``hidden`` its race's width, ``batch_size`` its batch (at most the data)."""

    case: str
    hidden: int
    batch_size: int
    threads: int | None

    def __str__(self) -> str:
        threads = ", on one CPU thread" if self.threads == 1 else ""
        return say(f"recipe.sizes_{self.case.replace('-', '_')}", **vars(self), thread_text=threads)


def comparison_sizes(device_type: str, dtype, *, native: bool | None, num_examples: int) -> ComparisonSizes:
    """The sizes to compare at, from the machine's facts (pure): ``sweeps.race_sizes``' width, batch and threads,
    the one decision, with the batch cut to the largest power of two within ``num_examples``."""
    s = race_sizes(device_type, dtype, native=native)
    batch = min(s.batch, 1 << (num_examples.bit_length() - 1))
    return ComparisonSizes(s.case, s.width, batch, s.budget.get("num_threads"))


def sizes_for(data, dtypes: Sequence = (torch.float32, torch.bfloat16), *, device=None) -> ComparisonSizes:
    """:func:`comparison_sizes` for this machine, ``data`` and the first 16-bit dtype of ``dtypes``."""
    check_instance("data", data, Dataset, "a data.Dataset (e.g. data.load_digits())")
    dev, dts = get_device(device), _dtypes(dtypes)
    low = next((d for d in dts if d != torch.float32), torch.bfloat16)
    native = cpu_has_native(low) if dev.type == "cpu" else None
    return comparison_sizes(dev.type, low, native=native, num_examples=len(data.train))


def _dtypes(dtypes) -> list[torch.dtype]:
    if isinstance(dtypes, (torch.dtype, str)):
        raise ArgumentTypeError(f"dtypes must be a sequence, e.g. (torch.float32, 'bf16'), got {dtypes!r}")
    dts = [
        precision(d, name="dtypes") for d in bounded_list("dtypes", dtypes, MAX_STEPS, "a sequence of dtypes")
    ]
    if not dts:
        raise ValueError("dtypes must name at least one of: float32, bfloat16, float16")
    return dts


def _seconds_per_flop(dev: torch.device, dtype: torch.dtype, hidden: int, batch: int) -> float:
    """Seconds per FLOP of an autocast ``rows x k @ k x k`` matmul (``k = min(hidden, 1024)``, ``rows`` the
    batch, at most 1024), timed as a race's contestants are (:func:`timing.calibrated_seconds`)."""
    k, rows = min(hidden, 1024), min(batch, 1024)
    W = torch.randn(k, k, generator=torch.Generator().manual_seed(0)).to(dev)

    def make(m):
        X = torch.ones(m, k, device=dev)

        def call():
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
                return X @ W

        return call

    # a matmul's time is linear in its rows: on a loaded machine (the browser tests beside the package tests)
    # a slow sample once read as faster growth, and the extrapolation put an 8 s run at 95 s
    return calibrated_seconds(make, rows, dev, power=1, start=8, max_power=1) / (2.0 * rows * k * k)


def _adam(params, *, lr: float, device: torch.device) -> torch.optim.Adam:
    """Fused on CUDA (a non-fused Adam makes an enabled ``scaler.step`` read ``found_inf``, a host sync)."""
    return torch.optim.Adam(params, lr=lr, fused=device.type == "cuda")


@dataclass(frozen=True)
class PrecisionResult:
    """One row of :func:`compare_precisions`: ``step_seconds`` in the lockstep rounds all dtypes took, the
    ``speedup`` against the first row (None for it), ``peak_memory_bytes`` of a step (None off CUDA), and the
    step's FLOPs and bytes, from which :attr:`regime` reads what limited it."""

    dtype: torch.dtype
    seconds_per_step: float
    saved_bytes: int
    peak_memory_bytes: int | None
    test_accuracy: float
    num_skipped: int
    losses: tuple[float, ...] = ()
    step_seconds: tuple[float, ...] = ()
    speedup: SpeedupEstimate | None = None
    context: dict = field(default_factory=dict, compare=False)
    step_flops: float | None = None
    step_bytes: float | None = None
    matmul_flops_per_s: float | None = None  # a raw autocast matmul of the model's width, before the run

    @property
    def name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def regime(self) -> Regime | None:
        """What limited this row's median step (``timing.regime_for``); None without FLOP and byte counts."""
        if self.step_flops is None or self.step_bytes is None or self.seconds_per_step <= 0:
            return None
        ctx = self.context or {}
        # With TF32 on, the "FP32" baseline's matmuls run at the TF32 Tensor Core rate.
        tf32 = ctx.get("tf32_matmul") and tuple(ctx.get("capability") or (0, 0)) >= (8, 0)
        dtype = "tf32" if self.dtype == torch.float32 and tf32 else self.dtype
        return regime_for(
            self.seconds_per_step, self.step_flops, self.step_bytes, dtype, ctx, unit=f"{self.name} step"
        )


PROGRESS_AFTER_S = 3.0  # a comparison estimated to take longer shows a progress bar


def compare_precisions(
    data,
    dtypes: Sequence = (torch.float32, torch.bfloat16),
    *,
    num_steps: int = 16,
    batch_size: int | None = None,
    accumulation_steps: int = 1,
    hidden: int | None = None,
    depth: int = 2,
    lr: float = 1e-2,
    warmup_steps: int = 3,
    seed: int = 0,
    threads: int | None = None,
    device=None,
    show_progress: bool = True,
    budget_s: float = 30.0,
) -> list[PrecisionResult]:
    """Train the same seeded model once per dtype on the same batches, in lockstep (the order flipping every
    step), each step a :func:`recipe.timed_step`: per row the median step time after ``warmup_steps``, the
    speed-up against the first dtype, the bytes saved for backward, on CUDA a step's peak memory, accuracy,
    losses, FLOPs and bytes.  ``hidden``, ``batch_size`` and ``threads`` (torch's CPU threads) default to
    :func:`sizes_for`'s.  Everything is checked first; then a calibrated estimate beyond ``budget_s`` seconds
    refuses, and one beyond :data:`PROGRESS_AFTER_S` shows progress (unless ``show_progress`` is False)."""
    check_instance("data", data, Dataset, "a data.Dataset (e.g. data.load_digits())")
    dev, dts = get_device(device), _dtypes(dtypes)
    machine = sizes_for(data, dts, device=dev)
    hidden = machine.hidden if hidden is None else hidden
    threads = (
        machine.threads if threads is None else check_int("threads", threads, minimum=1, maximum=MAX_THREADS)
    )
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0, maximum=MAX_STEPS - 1)
    num_steps = check_int("num_steps", num_steps, minimum=warmup_steps + 1, maximum=MAX_STEPS // len(dts))
    lr = check_float("lr", lr, gt=0, le=MAX_LR)
    mlp_sizes(data.num_features, data.num_classes, hidden, depth)
    seed = check_seed("seed", seed)
    show_progress = check_bool("show_progress", show_progress)
    budget_s = check_float("budget_s", budget_s, ge=1, le=MAX_SECONDS)
    batch_size = machine.batch_size if batch_size is None else batch_size
    batch_size, _, per_step = check_per_step(batch_size, accumulation_steps, len(data.train))
    probe = make_mlp(data.num_features, data.num_classes, hidden=1, depth=1, seed=0, device=dev)  # the shapes
    for which, split in (("data.train", data.train), ("data.test", data.test)):
        check_split_for(which, split, probe, dev)
    # Weights, gradients, Adam's moments and a 16-bit copy per model, and float32 activations (generous).
    params = num_parameters(data.num_features, data.num_classes, hidden, depth)
    need = len(dts) * (18 * params + 12 * per_step * (hidden * depth + data.num_classes))
    check_fits(
        need,
        dev,
        f"compare_precisions(hidden={hidden}, batch_size={batch_size})",
        "choose a smaller hidden or batch_size",
    )
    sizes = dict(hidden=hidden, depth=depth, batch_size=batch_size, accumulation_steps=accumulation_steps)
    flops = step_flops(data.num_features, data.num_classes, **sizes)
    with torch_threads(threads):
        rates = {d: _seconds_per_flop(dev, d, hidden, per_step) for d in dts}
        calls = num_steps + (2 if dev.type == "cuda" else 0)
        estimate = sum(calls * (flops * rates[d] + 1e-3) for d in dts)  # + 1 ms a step: Adam, Python
        if estimate > budget_s:
            raise ValueError(
                f"compare_precisions(hidden={hidden}, batch_size={batch_size}, num_steps={num_steps}) would take "
                f"about {estimate:.0f} s here (from a timed matmul of each dtype), beyond budget_s={budget_s:g}: "
                "refused before training; choose a smaller hidden or batch_size, fewer num_steps, or a larger budget_s"
            )
        show_progress = show_progress and estimate > PROGRESS_AFTER_S
        batches_of = functools.partial(step_batches, data.train, batch_size, per_step, seed)

        def run(dtype, steps):
            model = make_mlp(
                data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=dev
            )
            opt, scaler = _adam(model.parameters(), lr=lr, device=dev), make_scaler(dtype, dev)
            return model, train_loop(model, opt, scaler, batches_of, steps, dtype=dtype, max_grad_norm=1.0)

        peaks = {
            dtype: _step_memory(run(dtype, range(2))[1], dev) if dev.type == "cuda" else None for dtype in dts
        }
        context = timing_context(dev)
        runs = [(dtype, *run(dtype, range(num_steps)), History()) for dtype in dts]
        steps = progress(range(num_steps), desc="FP32 vs AMP") if show_progress else range(num_steps)
        for step in steps:
            # Flip the order every step: whoever runs second may find caches warm (or the CPU clocked down).
            for _dtype, _model, loop, history in runs if step % 2 == 0 else runs[::-1]:
                history.append(step, *timed_step(loop, dev))

        X, y = step_batches(data.train, batch_size, batch_size, seed, 0)[0]
        base_seconds = tuple(runs[0][3].seconds[warmup_steps:])
        rows = []
        for i, (dtype, model, _loop, history) in enumerate(runs):
            ev = evaluate(model, data.test, dtype=dtype, device=dev)
            timed = tuple(history.seconds[warmup_steps:])
            rows.append(
                PrecisionResult(
                    dtype=dtype,
                    seconds_per_step=statistics.median(timed),
                    saved_bytes=saved_activation_bytes(model, X, y, dtype=dtype, device=dev),
                    peak_memory_bytes=peaks[dtype],
                    test_accuracy=ev.accuracy,
                    num_skipped=history.num_skipped,
                    losses=tuple(history.losses),
                    step_seconds=timed,
                    speedup=speedup_estimate(base_seconds, timed) if i > 0 else None,
                    context=context,
                    step_flops=flops,
                    step_bytes=step_bytes(data.num_features, data.num_classes, **sizes, dtype=dtype),
                    matmul_flops_per_s=1 / rates[dtype],
                )
            )
        return rows


COMPARISON_HEADER = (
    "precision|time per step (median)|speed-up vs FP32 (95% interval)|saved for backward (one batch)|"
    "peak CUDA memory per step|test accuracy|skipped steps"
).split("|")


def comparison_rows(results: Sequence[PrecisionResult]) -> list[list[str]]:
    """Table rows (header :data:`COMPARISON_HEADER`) of :func:`compare_precisions`' non-empty ``results``,
    against the first (FP32): the speed-up is FP32 time / AMP time, with its 95% interval."""
    results = _results("results", results, minimum=1)
    base = results[0]
    rows = []
    for i, r in enumerate(results):
        est = r.speedup
        speed = (
            "1 (baseline)" if i == 0 else f"{format_ratio(est.ratio)} ({est.ends_text()})" if est else "n/a"
        )
        saved = f"{r.saved_bytes / 1024:.0f} KiB"
        if base.saved_bytes > 0:
            saved += f" ({r.saved_bytes / base.saved_bytes:.2f}x)"
        peak = "n/a" if r.peak_memory_bytes is None else format_bytes(r.peak_memory_bytes)
        time, accuracy = f"{r.seconds_per_step * 1e3:.2f} ms", f"{r.test_accuracy:.1%}"
        rows.append([r.name, time, speed, saved, peak, accuracy, str(r.num_skipped)])
    return rows


def _results(name: str, results, *, minimum: int) -> list[PrecisionResult]:
    what = "compare_precisions' list of PrecisionResult rows (the float32 baseline first)"
    results = bounded_list(name, results, MAX_STEPS, what)
    for i, r in enumerate(results):
        check_instance(f"{name}[{i}]", r, PrecisionResult, "a PrecisionResult (a row of compare_precisions)")
    if len(results) < minimum:
        need = "at least one row" if minimum == 1 else "the float32 baseline, then at least one AMP row"
        raise ValueError(f"{name} must be {what}: {need}, got {len(results)} row(s)")
    return results


# -- What the comparison says, read from the numbers --

_OUTCOMES = {"faster": "recipe.faster", "slower": "recipe.slower", "too close to call": "recipe.too_close"}


def _why_small(device: str, regime: Regime | None) -> str:
    """Why a small model's speed-up is not a large matmul's: the measured regime where the device's
    datasheet is known, else what is typical of ``device``."""
    if regime is not None and regime.name != "unknown":
        return "recipe.regime"
    return {"cuda": "recipe.small_cuda", "cpu": "recipe.small_cpu"}.get(device, "recipe.small_other")


def _expectation(expect: bool | None, outcome: str, why: str) -> tuple[str, ...]:
    """The reason codes comparing the measured ``outcome`` with the decision's ``expect``
    (``choice.expect_speedup``)."""
    race = "recipe.see_race"
    noise = "recipe.within_interval" if why == "recipe.regime" else "recipe.within_noise"
    if expect is None:
        regime = (why,) if why == "recipe.regime" else ()
        then = {
            "faster": ("recipe.advice_pays",),
            "slower": ("recipe.advice_fp32",),
            "too close to call": (noise, "recipe.advice_memory", *regime, race),
        }[outcome]
        return ("recipe.unpredicted", *then)
    if outcome == "too close to call":
        return ("recipe.undecided_fast" if expect else "recipe.undecided_slow", noise, why, race)
    if expect == (outcome == "faster"):
        return ("recipe.matches_fast" if expect else "recipe.matches_slow",)
    if expect:
        return ("recipe.contradicts_fast", why, "recipe.trust_measurement", race)
    return ("recipe.contradicts_slow",)


def _amp_row(results, choice) -> tuple[PrecisionResult, PrecisionResult]:
    check_instance("choice", choice, AmpChoice, "an AmpChoice (from amp.choose_amp_dtype)")
    results = _results("results", results, minimum=2)
    base = results[0]
    if base.dtype != torch.float32:
        raise ValueError(f"results[0] must be the float32 baseline, got {base.name}")
    amp = next((r for r in results[1:] if r.dtype == choice.dtype), None)
    if amp is None:
        held = ", ".join(r.name for r in results)
        raise ValueError(f"results holds no {dtype_name(choice.dtype)} row (choice.dtype); it holds: {held}")
    return base, amp


def read_comparison(results: Sequence[PrecisionResult], choice: AmpChoice) -> Reading:
    """What ``results`` (float32 first) say about speed on the machine ``choice`` describes (its
    ``choice.dtype`` row): outcome ``"recipe.faster"``, ``"recipe.slower"`` or ``"recipe.too_close"``; the
    reasons compare it with ``choice.expect_speedup`` and say why a small model differs (the measured
    regime, where the GPU's datasheet is known).  It rests on timings: show it in a volatile cell."""
    base, amp = _amp_row(results, choice)
    est = amp.speedup
    if est is None:
        raise ValueError("results carry no speed-up (speedup): run compare_precisions to get them")
    regime = amp.regime
    why = _why_small(choice.device, regime)
    reasons = _expectation(choice.expect_speedup, est.outcome, why)
    text = regime.text if regime is not None else ""
    facts = {}
    if why != "recipe.regime" and base.matmul_flops_per_s and amp.matmul_flops_per_s and base.step_flops:
        # No datasheet: the matmul rates timed before the run say what the arithmetic does, and how much of an
        # FP32 step it fills, instead of a guess about small models.
        low, high = amp.matmul_flops_per_s, base.matmul_flops_per_s
        why = "recipe.arithmetic_slow" if low < high else "recipe.compute_share"
        reasons = (*(r for r in reasons if not r.startswith("recipe.small_")), "recipe.matmul_rates", why)
        share = min(100.0, 100 * base.step_flops / high / base.seconds_per_step)
        facts = dict(amp_gflops=low / 1e9, fp32_gflops=high / 1e9, matmul_ratio=low / high, compute_pct=share)
    facts.update(
        name=amp.name,
        pairs=est.pairs,
        speedup=str(est),
        slowdown=1 / est.ratio if est.ratio > 0 else float("inf"),
        regime_text=text[:1].upper() + text[1:],
        basis=f" ({choice.basis})" if choice.basis else "",
    )
    return Reading(_OUTCOMES[est.outcome], reasons, facts)


def read_memory(
    results: Sequence[PrecisionResult], choice: AmpChoice, *, accuracy_tolerance: float = 0.03
) -> Reading:
    """What ``results`` say about memory and accuracy: outcome ``"recipe.memory_half"`` (AMP's bytes saved
    for backward at most 0.6x FP32's), ``_less``, ``_same`` or ``_more``; reasons ``"recipe.weights_stay"``,
    ``"recipe.peak"`` (CUDA) and ``"recipe.accuracy_within"`` or ``_beyond`` (``accuracy_tolerance``: 0.03 is
    3 points)."""
    base, amp = _amp_row(results, choice)
    accuracy_tolerance = check_float("accuracy_tolerance", accuracy_tolerance, ge=0, lt=1)
    if not base.saved_bytes > 0:
        raise ValueError(f"results[0].saved_bytes (the baseline's) must be > 0, got {base.saved_bytes!r}")
    ratio = amp.saved_bytes / base.saved_bytes
    outcome = "half" if ratio <= 0.6 else "less" if ratio < 0.95 else "same" if ratio <= 1.05 else "more"
    reasons = ["recipe.weights_stay"]
    facts = dict(
        name=amp.name, saved_ratio=ratio, base_kib=base.saved_bytes / 1024, amp_kib=amp.saved_bytes / 1024
    )
    if base.peak_memory_bytes and amp.peak_memory_bytes:
        reasons.append("recipe.peak")
        facts.update(
            peak_ratio=amp.peak_memory_bytes / base.peak_memory_bytes,
            base_peak=format_bytes(base.peak_memory_bytes),
            amp_peak=format_bytes(amp.peak_memory_bytes),
        )
    gap = abs(amp.test_accuracy - base.test_accuracy)
    # 1e-12: a difference of exactly the tolerance counts as within it, whatever the float rounding.
    reasons.append(
        "recipe.accuracy_within" if gap <= accuracy_tolerance + 1e-12 else "recipe.accuracy_beyond"
    )
    facts.update(accuracy_gap=gap, points=round(accuracy_tolerance * 100, 6))
    return Reading(f"recipe.memory_{outcome}", tuple(reasons), facts)


def read_tf32(device=None) -> Reading:
    """What the "FP32" baseline computes on ``device``: ``"recipe.tf32_on"`` (TF32 Tensor Cores, TF32 on),
    ``"recipe.tf32_off"`` (such a GPU, TF32 off) or ``"recipe.tf32_none"``; facts ``allowed`` and
    ``precision``, from ``hardware.tf32_setting()``."""
    dev = get_device(device)
    allowed, matmul_precision = tf32_setting()
    capability = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else None
    has_tf32 = capability is not None and "tf32" in tensor_core_generation(capability).precisions
    outcome = "recipe.tf32_none" if not has_tf32 else "recipe.tf32_on" if allowed else "recipe.tf32_off"
    return Reading(outcome, (), dict(allowed=allowed, precision=matmul_precision))
