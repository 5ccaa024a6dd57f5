"""What a race means (``06_timing_race``): the readings of a race, a sweep, a step's memory and TF32,
composed from the measurement and the machine's facts, so an AVX2 laptop, a bf16 CPU and a GPU each read
a true story."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ._checks import check_instance
from .cost import elementwise_intensity
from .device import dtype_name
from .gpus import bf16_hardware
from .intervals import SpeedupEstimate, plural, speedup_estimate
from .race import (
    _SHORT,
    RaceResult,
    _check_result,
    _cpu_instructions,
    _tensor_cores,
    _unit,
    native_arithmetic,
)
from .sweeps import SweepResult, _check_sweep
from .text import format_bytes, format_ratio


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
    lines = [
        f"{_what(result)}, AMP {dtype_name(r0.dtype)} vs FP32 ({r0.speedup_interval.confidence_text} intervals):"
    ]
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


def _verdict(result: RaceResult) -> str:
    e = result.speedup_interval
    low = dtype_name(result.dtype)
    dev = result.context.get("device", "?")
    basis = (
        f"{plural(e.pairs, 'interleaved pair')}: too few for a {e.confidence_text} interval"
        if not math.isfinite(e.high)
        else f"{e.confidence_text} interval {e.ends_text()}, {plural(e.pairs, 'interleaved pair')}"
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
        return f"{tc.architecture} has no TF32, so the TF32 contestant ran plain FP32: AMP against it {est}."
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
