"""What a race means (``06_timing_race``): each readout returns a :class:`amp_lab.text.Reading` of reason codes
(``race.*`` in reasons.json) chosen from the measurement and the machine's facts, and the numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ._checks import check_instance
from .cost import elementwise_intensity
from .dtypes import dtype_name
from .gpus import bf16_hardware
from .intervals import SpeedupEstimate, plural, speedup_estimate
from .race import (
    SHORT_NAMES,
    RaceResult,
    check_result,
    cpu_instructions,
    native_arithmetic,
    result_tensor_cores,
    unit_of,
)
from .sweeps import SweepResult, check_sweep
from .text import Reading, format_bytes, format_ratio

_SIZE_NAMES = {"matmul": "n", "mlp": "width", "batch": "batch"}


def _noise(results: Sequence[RaceResult], context: dict) -> tuple[tuple[str, ...], dict]:
    """``race.noisy`` for an interval too wide to read, ``race.noisy_but_narrow`` for noisy samples whose
    pairs kept it narrow; an interval infinite for want of pairs is not noise."""
    worst_iqr = max(t.rel_iqr for r in results for t in r.timings.values())
    widest = max((w for r in results if math.isfinite(w := r.speedup_interval.rel_width)), default=0.0)
    load, cores = context.get("load_avg_1min"), context.get("cpu_count")
    facts = {
        "widest_pct": 100 * widest,
        "worst_iqr_pct": 100 * worst_iqr,
        "busy": f", load average {load} on {cores} cores" if load is not None and cores else "",
    }
    if widest > 0.25:
        return ("race.noisy",), facts
    return (("race.noisy_but_narrow",) if worst_iqr > 0.2 else ()), facts


def sweep_summary(result: SweepResult) -> Reading:
    """The sweep, read: each size's speedup, interval and bound, where AMP is measurably faster, whether it
    grew with the size, the best against the peak ratio, and noise.  Outcome "pays" (from
    ``facts["pays_from"]``) or "does_not_pay".  (``06_timing_race``)"""
    check_sweep("result", result)
    r0, name = result.results[0], _SIZE_NAMES[result.kind]
    p = r0.params
    what = {
        "matmul": "n x n matmul",
        "mlp": f"training step of the tutorial loop's model at batch {p.get('batch')}, by width",
        "batch": f"training step of the tutorial loop's model at width {p.get('width')}, by batch",
    }[result.kind]
    first, last = result.intervals[0], result.intervals[-1]
    best = max(result.speedups)
    i_best, c, bounds = result.speedups.index(best), result.peak_ratio, result.bounds

    def est_text(e: SpeedupEstimate) -> str:  # '1.32x (1.25x to 1.40x): faster'
        ends = e.ends_text() if math.isfinite(e.high) else "too few pairs for an interval"
        return f"{format_ratio(e.ratio)} ({ends}): {e.outcome}"

    best_fp32 = result.results[i_best].flops / result.results[i_best].fp32.median
    facts = {
        "what": what, "name": name, "low": dtype_name(r0.dtype), "confidence": r0.speedup_interval.confidence_text,
        "per_size": "; ".join(f"{name} {s}: {est_text(e)}" for s, e in zip(result.sizes, result.intervals, strict=True)),
        "bounds": ", ".join(f"{name} {s}: {b:.3g}x" for s, b in zip(result.sizes, bounds, strict=True) if b),
        "pays_from": result.first_paying_size, "largest": result.sizes[-1], "last_outcome": result.outcomes[-1],
        "first_size": result.sizes[0], "first_ratio": format_ratio(first.ratio), "last_ratio": format_ratio(last.ratio),
        "best": format_ratio(best), "best_at": result.sizes[i_best], "peak_ratio": c.vs_fp32,
        "peak_source": c.source, "measured": str(c.measured_interval), "bound": bounds[i_best],
        "fp32_rate": best_fp32 / 1e12, "fp32_share": best_fp32 / c.fp32_peak if c.fp32_peak else None,
        "low_peak": (c.low_peak or 0) / 1e12,
    }  # fmt: skip
    pays = facts["pays_from"] is not None
    reasons = ["race.sweep_sizes", "race.sweep_pays" if pays else "race.sweep_never_pays"]
    if len(result.sizes) >= 2:
        grew, shrank = last.low > first.high, last.high < first.low
        reasons.append("race.sweep_grew" if grew else "race.sweep_shrank" if shrank else "race.sweep_flat")
    measured = c.measured_interval
    slower = "datasheet" not in c.source and measured is not None and measured.outcome == "slower"
    reasons.append("race.peak_ratio_below_one" if slower else "race.peak_ratio")
    if best > c.vs_fp32 and facts["fp32_share"] is not None:
        reasons.append("race.peak_ratio_beaten")
    if facts["bound"] is not None:
        reasons.append("race.speedup_bound")
    noise, noise_facts = _noise(result.results, result.context)
    return Reading("pays" if pays else "does_not_pay", (*reasons, *noise), {**facts, **noise_facts})


def _saving(result: RaceResult) -> tuple[float, str]:
    """The fraction of a step's memory AMP saved, and its code: "saves", "nothing" or "costs"."""
    saving = 1 - result.memory["amp"] / result.memory["fp32"]
    return saving, "nothing" if abs(saving) < 0.005 else "saves" if saving > 0 else "costs"


def memory_summary(result) -> Reading:
    """What AMP did to a training step's memory, from a ``race_mlp`` result (or an MLP/batch sweep's largest,
    smallest and largest size), and why: "saves", "nothing" or "costs".  (``06_timing_race``)"""
    check_instance("result", result, (RaceResult, SweepResult), "a race_mlp result or an MLP/batch sweep")
    if isinstance(result, SweepResult):
        if result.kind not in ("mlp", "batch") or result.results[0].memory is None:
            raise ValueError("result must be a race_mlp result or an MLP/batch sweep with memory measured")
        first, last = result.results[0], result.results[-1]
        one = memory_summary(last)
        (s0, c0), (s1, c1) = _saving(first), _saving(last)
        facts = {**one.facts, "name": _SIZE_NAMES[result.kind], "first_size": result.sizes[0],
                 "last_size": result.sizes[-1], "first_saving": abs(s0), "last_saving": abs(s1)}  # fmt: skip
        codes = (f"race.sweep_memory_first_{c0}", f"race.sweep_memory_last_{c1}")
        return Reading(one.outcome, (*one.reasons, "race.sweep_memory", *codes), facts)
    if result.memory is None:
        raise ValueError("result must be a race_mlp result with memory measured (race_mlp(..., memory=True))")
    m = result.memory
    saving, code = _saving(result)
    why = "activations_win" if saving >= 0.1 else "small_share" if saving > -0.1 else "copies_cost"
    facts = {
        "size": result.size, "fp32_bytes": format_bytes(m["fp32"]), "amp_bytes": format_bytes(m["amp"]),
        "how": "measured" if m["method"].startswith("measured") else "estimated", "saving": saving,
        "abs_saving": abs(saving), "low": dtype_name(result.dtype),
    }  # fmt: skip
    return Reading(code, (f"race.memory_{code}", f"race.memory_{why}"), facts)


def _verdict(result: RaceResult) -> tuple[str, dict]:
    e = result.speedup_interval
    basis = e.interval_text() + (f", {plural(e.pairs, 'interleaved pair')}" if math.isfinite(e.high) else "")
    facts = {"ratio": format_ratio(e.ratio), "inverse": 1 / e.ratio if e.ratio else math.inf, "basis": basis,
             "low": dtype_name(result.dtype), "device": result.context.get("device", "?"), "unit": unit_of(result.kind)}  # fmt: skip
    return f"race.verdict_{e.outcome if e.outcome in ('faster', 'slower') else 'close'}", facts


def _reason(result: RaceResult) -> tuple[tuple[str, ...], dict]:
    """Why the race came out as it did: reason codes from the hardware's facts and the outcome."""
    if result.kind == "elementwise":
        b32, blow = result.bytes_moved("fp32"), result.bytes_moved("amp")
        rate = {name: result.bytes_moved(name) / t.median / 1e9 for name, t in result.timings.items()}
        facts = {"b32": format_bytes(b32), "blow": format_bytes(blow), "fewer": b32 / blow}
        facts.update(
            intensity=elementwise_intensity(torch.float32), gbs_fp32=rate["fp32"], gbs_amp=rate["amp"]
        )
        facts["share"] = result.speedup / (b32 / blow)
        faster = "faster" if result.outcome == "faster" else "not_faster"
        return ("race.add_head", f"race.add_{faster}"), facts
    outcome = result.outcome
    dev = str(result.context.get("device", ""))
    native = native_arithmetic(result)
    if dev.startswith("cpu"):
        facts = {"insn": cpu_instructions(result, native)}
        if native is False:
            return (f"race.cpu_emulated_{outcome if outcome in ('slower', 'faster') else 'close'}",), facts
        if native is True:
            return ("race.cpu_native_faster" if outcome == "faster" else "race.cpu_native_not_faster",), facts
        return ("race.cpu_unknown",), facts
    if not dev.startswith("cuda"):
        return ("race.other_device",), {}
    tc = result_tensor_cores(result)
    if tc is None:
        return ("race.gpu_no_capability",), {}
    facts = {"arch": tc.architecture, "cap": f"sm_{tc.capability[0]}{tc.capability[1]}",
             "precisions": ", ".join(tc.precisions).upper(), "short": SHORT_NAMES[result.dtype].upper()}  # fmt: skip
    if not tc.has_tensor_cores:
        return ("race.gpu_no_tensor_cores",), facts
    if not native:
        emulated = result.dtype == torch.bfloat16 and not bf16_hardware(tc.capability)
        return ("race.gpu_bf16_emulated" if emulated else "race.gpu_dtype_unsupported",), facts
    regime = result.regimes["amp"]
    facts["regime"] = str(regime)
    if outcome == "faster":
        return ("race.gpu_faster", *(("race.gpu_regime",) if regime.name != "unknown" else ())), facts
    bound = "unknown_regime" if regime.name == "unknown" else regime.name.replace("-", "_")
    return (f"race.gpu_{bound}",), facts


def tf32_summary(result: RaceResult) -> Reading:
    """What TF32 did in a race: TF32 against IEEE FP32 and AMP against TF32 (outcome: TF32's), or why there
    is no TF32 contestant ("no_tf32").  (``06_timing_race``)"""
    check_result("result", result)
    dev = str(result.context.get("device", ""))
    if result.tf32 is not None:
        vs = speedup_estimate(result.fp32, result.tf32, confidence=result.confidence)
        a = result.speedup_vs_tf32_interval
        facts = dict(tf32_vs_fp32=str(vs), tf32_outcome=vs.outcome, amp_vs_tf32=str(a), amp_outcome=a.outcome)
        return Reading(vs.outcome, ("race.tf32_measured",), facts)
    tc = result_tensor_cores(result) if dev.startswith("cuda") else None
    if tc is not None:
        facts = {"arch": tc.architecture, "cap": f"sm_{tc.capability[0]}{tc.capability[1]}"}
        return Reading("no_tf32", ("race.tf32_no_tensor_cores",), facts)
    if dev.startswith("cuda"):
        return Reading("no_tf32", ("race.tf32_no_capability",), {})
    facts = {"device": dev or "this device", "precision": repr(result.context.get("fp32_matmul_precision")),
             "recorded": result.context.get("tf32_matmul")}  # fmt: skip
    return Reading("no_tf32", ("race.tf32_not_cuda",), facts)


def explain(result: RaceResult) -> Reading:
    """A race result read: outcome and interval, the likely reason, TF32 and noise.  (``06_timing_race``)"""
    check_result("result", result)
    verdict, facts = _verdict(result)
    reasons, more = _reason(result)
    tf32, tf32_facts = (), {}
    if (est := result.speedup_vs_tf32_interval) is not None:
        tc = result_tensor_cores(result)
        none = tc is not None and "tf32" not in tc.precisions
        tf32 = ("race.tf32_none_on_arch" if none else "race.tf32_vs",)
        arch = tc.architecture if tc else "?"
        tf32_facts = {"vs_tf32": str(est), "vs_tf32_outcome": est.outcome, "tf32_arch": arch}
    noise, noise_facts = _noise([result], result.context)
    facts = {**facts, **more, **tf32_facts, **noise_facts}
    return Reading(result.outcome, (verdict, *reasons, *tf32, *noise), facts)


def elementwise_band(result: RaceResult) -> Reading:
    """The band of 06's prediction an elementwise race fell in: its outcome when not "faster", else "faster,
    by less than 2x" or "2x or more"; with the bytes moved and the speedup.  (``06_timing_race``)"""
    check_result("result", result)
    e = result.speedup_interval
    band = e.outcome if e.outcome != "faster" else "faster, by less than 2x" if e.ratio < 2 else "2x or more"
    facts = {"b32": format_bytes(result.bytes_moved("fp32")), "blow": format_bytes(result.bytes_moved("amp")),
             "low": dtype_name(result.dtype), "speedup": str(e), "outcome": e.outcome}  # fmt: skip
    return Reading(band, ("race.add_band",), facts)
