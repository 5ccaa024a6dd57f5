"""Words the course composes: how numbers print, and every sentence that interprets a measurement.

A readout (the race's verdict, a sweep's trend, a comparison's reading, a reveal) returns facts: an
outcome code, reason codes and the numbers.  :data:`REASONS` is the one table that turns a code into its
sentence, filled from the facts: the one place a translation would replace.  Notebooks print
:class:`Reading` (its sentences) or show its numbers in a table; tests assert its codes and numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real

from ._checks import ArgumentTypeError, check_int

# code -> sentence template, filled by ``str.format(**facts)``.  One section per topic module.
REASONS: dict[str, str] = {
    # --- hardware ---
    # --- timing ---
    "timing.regime_unknown": (
        "a {unit} took {took}; without this device's peak rates the course cannot tell whether arithmetic, "
        "memory traffic or launch overhead set its pace"
    ),
    "timing.regime_launch": (
        "a {unit} took {took}, while at {source} its arithmetic needs {compute} and its memory traffic at least "
        "{memory}: launch/sync-bound. Arithmetic and memory traffic explain at most {share_pct:.2g}% of the "
        "{unit}; the rest went to launching kernels, waiting on the host and Python, which a faster dtype does "
        "not shorten"
    ),
    "timing.regime_memory": (
        "a {unit} took {took}, while at {source} its arithmetic needs {compute} and its memory traffic at least "
        "{memory}: memory-bound. Moving the bytes sets the pace, so a 16-bit dtype helps by moving half as "
        "many, not by multiplying faster"
    ),
    "timing.regime_compute": (
        "a {unit} took {took}, while at {source} its arithmetic needs {compute} and its memory traffic at least "
        "{memory}: compute-bound. The arithmetic sets the pace, which is where faster Tensor Core dtypes pay"
    ),
    "timing.sync_queued_only": (
        "The first reading caught only the queueing: finishing took {ratio:.1f}x as long. A timing without "
        "synchronisation measures how fast Python queued the work, not how fast the {device} did it."
    ),
    "timing.sync_close": (
        "The two readings are close ({ratio:.2f}x): the queue filled up and Python had to wait, so this time "
        "the missing synchronisation hid little; with less work per call it hides almost everything."
    ),
    "timing.sync_agree": (
        "The two readings nearly agree ({ratio:.2f}x): CPU ops return when they are done, so there is nothing "
        "to wait for; on a GPU the first reading would be far smaller."
    ),
    "timing.sync_disturbed": (
        "The readings differ ({ratio:.2f}x) although CPU ops return when they are done: something else (another "
        "program, the operating system) ran between the two clock readings."
    ),
    # --- race ---
    # explain: the verdict
    "race.verdict_faster": "AMP is faster: {ratio} the speed of FP32 ({basis}), {low} on {device}.",
    "race.verdict_slower": (
        "AMP is slower: {ratio} the speed of FP32 ({basis}), so each {unit} takes {inverse:.2f}x as long "
        "({low} on {device})."
    ),
    "race.verdict_close": (
        "Too close to call: {ratio} ({basis}); the interval straddles 1, so this race cannot tell AMP "
        "({low} on {device}) from FP32."
    ),
    # explain: why, on a CPU
    "race.cpu_emulated_slower": (
        "This CPU has no {insn} instructions, so {low} matmuls are emulated with conversions and autocast's "
        "casts are pure overhead: that is why AMP is slower here."
    ),
    "race.cpu_emulated_close": (
        "This CPU has no {insn} instructions, so {low} matmuls are emulated with conversions: AMP cannot gain "
        "here; at this size per-op overhead, not arithmetic, sets the pace."
    ),
    "race.cpu_emulated_faster": (
        "This CPU has no {insn} instructions, so {low} matmuls are emulated with conversions: a win is not "
        "expected here, so suspect noise or an FP32 kernel that is poor at this size, and race again."
    ),
    "race.cpu_native_faster": (
        "This CPU multiplies {low} in hardware ({insn}), and the work is large enough for the faster "
        "arithmetic to outweigh autocast's casts."
    ),
    "race.cpu_native_not_faster": (
        "This CPU multiplies {low} in hardware, so the size is the likely reason: casts and per-op overhead "
        "outweigh the faster matmul. Try a larger width and batch."
    ),
    "race.cpu_unknown": "Whether this CPU multiplies {low} in hardware is unknown; the measurement is the answer.",
    "race.other_device": "The measurement is the answer on this device.",
    # explain: why, on a CUDA GPU
    "race.gpu_no_capability": "The GPU's compute capability was not recorded, so only the measurement speaks.",
    "race.gpu_no_tensor_cores": (
        "{arch} ({cap}) has no Tensor Cores: {low} runs on ordinary CUDA cores, so AMP can save memory but "
        "little time."
    ),
    "race.gpu_bf16_emulated": (
        "bfloat16 is emulated on {arch} ({cap}): its Tensor Cores multiply {precisions} but not BF16, so torch "
        "computes bfloat16 on ordinary CUDA cores (torch.cuda.is_bf16_supported() still says True, because it "
        "counts emulation). AMP in bfloat16 cannot pay here: race float16, which these Tensor Cores multiply."
    ),
    "race.gpu_dtype_unsupported": (
        "{arch} ({cap}) Tensor Cores multiply {precisions} but not {short}: {low} runs without them here. Race "
        "float16 on this GPU."
    ),
    "race.gpu_faster": "{arch} ({cap}) Tensor Cores multiply {low}, and this work keeps them busy enough to pay.",
    "race.gpu_regime": "For AMP, {regime}.",
    "race.gpu_launch_bound": (
        "{arch} ({cap}) Tensor Cores multiply {low}, but this race does not keep them busy. For AMP, {regime}. "
        "Try a larger width and batch (multiples of 8)."
    ),
    "race.gpu_memory_bound": (
        "For AMP, {regime}; the FP32 contestant moves twice the bytes, so a memory-bound race should still "
        "favour AMP at larger sizes."
    ),
    "race.gpu_compute_bound": (
        "For AMP, {regime}; yet AMP was not faster than FP32, which the datasheet does not explain: suspect "
        "another program on the GPU, or a kernel that is poor at this size, and race again."
    ),
    "race.gpu_unknown_regime": (
        "{arch} ({cap}) Tensor Cores multiply {low}; this GPU has no entry in the course's datasheet table, so "
        "whether launches, memory traffic or arithmetic set the pace cannot be computed. Small races are "
        "usually bound by launches, casts and the optimizer: try a larger width and batch (multiples of 8)."
    ),
    # explain: an elementwise race (the memory-bound regime)
    "race.add_head": (
        "torch.add does one FLOP per element and moves {b32} per call in FP32 but {blow} in {low}, {fewer:.3g}x "
        "fewer bytes: at {intensity:.3g} FLOP per byte it is memory-bound, so the bytes set its pace, not the "
        "arithmetic."
    ),
    "race.add_faster": (
        "FP32 moved {gbs_fp32:.3g} GB/s and {low} {gbs_amp:.3g} GB/s: the speedup is {share:.0%} of the "
        "{fewer:.3g}x that the bytes alone would give. No low-precision arithmetic is needed for this win, "
        "only fewer bytes."
    ),
    "race.add_not_faster": (
        "FP32 moved {gbs_fp32:.3g} GB/s and {low} {gbs_amp:.3g} GB/s: here the {low} call did not turn its "
        "fewer bytes into time, so converting each element to and from {low} cost about as much as the bytes "
        "it saved (or the tensors fit in a cache, where bandwidth is not the limit): race a larger numel, or "
        "on a quieter machine."
    ),
    # explain: TF32, and noise
    "race.tf32_none_on_arch": "{tf32_arch} has no TF32, so the TF32 contestant ran plain FP32: AMP against it {vs_tf32}.",
    "race.tf32_vs": "Against TF32 (FP32 on Tensor Cores) the speedup is {vs_tf32}: {vs_tf32_outcome}.",
    "race.noisy": (
        "Noisy: an interval up to {widest_pct:.0f}% of its speedup wide, IQR up to {worst_iqr_pct:.0f}% of a "
        "median{busy}. Something else was probably using the machine; race again when it is quiet (or allow "
        "more time, max_time_s) before reading the numbers."
    ),
    "race.noisy_but_narrow": (
        "The samples were noisy (IQR up to {worst_iqr_pct:.0f}% of a median{busy}), but the interleaved pairs "
        "kept the interval narrow enough to read."
    ),
    "race.add_band": (
        "torch.add moves {b32} per call in FP32 and {blow} in {low}: the bytes alone would make it 2x as fast, "
        "and this machine measured {speedup}, {outcome}"
    ),
    # fp8_summary
    "race.fp8_head": (
        "FP8 (E4M3) against {low}, {size} on {device}: {vs_amp}: {vs_amp_outcome}; against FP32: {vs_fp32}: "
        "{vs_fp32_outcome}. TFLOP/s: FP32 {tflops_fp32:.3g}, {low} {tflops_amp:.3g}, FP8 {tflops_fp8:.3g}."
    ),
    "race.fp8_no_units": (
        "There are no FP8 Tensor Cores on {device}: torch._scaled_mm there converts the E4M3 operands and "
        "multiplies them with ordinary arithmetic, so the race checks that FP8 GEMMs run, not how fast they are "
        "on the hardware built for them."
    ),
    "race.fp8_amp_emulated": (
        "This CPU has no {insn} instructions either, so its {low} GEMM is emulated: that is why it was the "
        "slowest of the three, not a sign that FP8 is fast here."
    ),
    "race.fp8_support": "{support}.",
    "race.fp8_no_datasheet": (
        "The course's datasheet table has no FP8 figure for this GPU, so the measurement is the answer."
    ),
    "race.fp8_datasheet": (
        "The {model} datasheet gives FP8 {sheet_ratio:.3g}x the BF16 rate; this race measured {measured:.3g}x "
        "against {low} ({share:.0%} of that ceiling)."
    ),
    # the sizes a machine races (sweeps.race_sizes)
    "race.sizes_gpu": (
        "A GPU ({device_type}): matmuls from sizes where launching kernels sets the pace to sizes where the "
        "matrix units do, and a training step large enough for its matmuls to matter ({shown}); each race says "
        "which regime it found."
    ),
    "race.sizes_cpu_native": (
        "This CPU multiplies {low} in hardware, so the races go up to sizes where {low} can beat FP32 "
        "({shown}{threads})."
    ),
    "race.sizes_cpu_emulated": (
        "This CPU has no {low} instructions: it emulates {low} matmuls with conversions, tens of times slower "
        "than FP32, so the races stay small ({shown}{threads})."
    ),
    "race.sizes_cpu_unknown": (
        "Whether this CPU multiplies {low} in hardware is unknown, so the races stay as small as on a CPU "
        "without it ({shown}{threads})."
    ),
    # roofline_summary
    "race.roof": (
        "This machine's roof, measured: {gflops:.3g} GFLOP/s (an FP32 matmul, n={n}) and {gbs:.3g} GB/s; the "
        "ridge point is {ridge:.3g} FLOP per byte. An op with fewer FLOPs per byte is memory-bound here, one "
        "with more can be compute-bound."
    ),
    "race.roof_points": "{points_text}",
    "race.roof_point": (
        "{what} {size}, FP32: {intensity:.3g} FLOP/byte, {times:.3g}x {side} the ridge; reached {share:.0%} of "
        "the roof there{above_roof}: {regime}."
    ),
    "race.roof_above": " (above the roof: the roof is itself a measurement, taken at another moment)",
    # tf32_summary
    "race.tf32_measured": (
        "TF32 against IEEE FP32: {tf32_vs_fp32}: {tf32_outcome}. AMP against TF32: {amp_vs_tf32}: {amp_outcome}."
    ),
    "race.tf32_no_tensor_cores": (
        "{arch} ({cap}) has no TF32 Tensor Cores: its FP32 matmuls are IEEE FP32 whatever the TF32 setting, so "
        "the race has no TF32 contestant."
    ),
    "race.tf32_no_capability": "The GPU's compute capability was not recorded, so the race raced no TF32 contestant.",
    "race.tf32_not_cuda": (
        "TF32 is a feature of NVIDIA GPUs from Ampere on; there is none on {device}. This CPU's FP32 matmul "
        "precision setting (oneDNN): {precision}; the race's context records tf32_matmul = {recorded} (not "
        "applicable)."
    ),
    # sweep_summary
    "race.sweep_sizes": "{what}, AMP {low} vs FP32 ({confidence} intervals): {per_size}.",
    "race.sweep_pays": "AMP is measurably faster from {name} {pays_from} on.",
    "race.sweep_never_pays": "AMP is not measurably faster at the largest {name} raced ({largest}: {last_outcome}).",
    "race.sweep_grew": (
        "The speedup grew with the {name}: from {first_ratio} at {name} {first_size} to {last_ratio} at {name} "
        "{largest}, with intervals that do not overlap."
    ),
    "race.sweep_shrank": (
        "The speedup shrank as the {name} grew: from {first_ratio} at {name} {first_size} to {last_ratio} at "
        "{name} {largest}, with intervals that do not overlap."
    ),
    "race.sweep_flat": (
        "The speedup did not change measurably between {name} {first_size} and {name} {largest} (from "
        "{first_ratio} at {name} {first_size} to {last_ratio} at {name} {largest}): their intervals overlap."
    ),
    "race.ceiling_below_one": (
        "The ceiling is {measured} ({ceiling_source}): below 1, so {low} arithmetic itself is slower than FP32 "
        "here and AMP cannot pay; best measured {best} at {name} {best_at}."
    ),
    "race.ceiling_share": "Best {best} at {name} {best_at}, {share:.0%} of the ceiling {ceiling:.3g}x ({ceiling_source}).",
    # memory_summary
    "race.memory_saves": (
        "At {size} one training step needs {fp32_bytes} in FP32 and {amp_bytes} under AMP ({how}): AMP saves "
        "{abs_saving:.0%}."
    ),
    "race.memory_nothing": (
        "At {size} one training step needs {fp32_bytes} in FP32 and {amp_bytes} under AMP ({how}): AMP saves "
        "nothing."
    ),
    "race.memory_costs": (
        "At {size} one training step needs {fp32_bytes} in FP32 and {amp_bytes} under AMP ({how}): AMP uses "
        "{abs_saving:.0%} more."
    ),
    "race.memory_activations_win": (
        "The activations saved for backward are stored in {low}, half the bytes, and at this size they outweigh "
        "the FP32 weights, gradients and optimizer state that AMP keeps."
    ),
    "race.memory_small_share": (
        "AMP keeps FP32 weights, gradients and optimizer state and adds low-precision copies of the weights; it "
        "saves only on the activations saved for backward ({low}, half the bytes), which are a small part of "
        "this step."
    ),
    "race.memory_copies_cost": (
        "AMP keeps FP32 weights, gradients and optimizer state, and its low-precision copies of the weights cost "
        "more here than it saves on the activations."
    ),
    "race.sweep_memory": "Across the sweep, against FP32:",
    "race.sweep_memory_first_saves": "at {name} {first_size} AMP saves {first_saving:.0%};",
    "race.sweep_memory_first_nothing": "at {name} {first_size} AMP saves nothing;",
    "race.sweep_memory_first_costs": "at {name} {first_size} AMP uses {first_saving:.0%} more;",
    "race.sweep_memory_last_saves": "at {name} {last_size} it saves {last_saving:.0%}.",
    "race.sweep_memory_last_nothing": "at {name} {last_size} it saves nothing.",
    "race.sweep_memory_last_costs": "at {name} {last_size} it uses {last_saving:.0%} more.",
    # --- recipe ---
    # --- training ---
    # --- scaling ---
    # --- ranges ---
    # --- formats ---
    # --- tensor_cores ---
    # --- autocast_ops ---
    # --- fp8 ---
    # --- pitfalls ---
    # --- predict ---
    # --- check ---
    # --- course ---
}


def say(code: str, **facts) -> str:
    """The sentence for reason ``code``, filled from ``facts``."""
    return REASONS[code].format(**facts)


@dataclass(frozen=True)
class Reading:
    """What a readout found: an ``outcome`` code, the ``reasons`` behind it (codes, in reading order) and
    the numbers they are filled from.  ``str(reading)`` is its sentences, from :data:`REASONS`."""

    outcome: str
    reasons: tuple[str, ...] = ()
    facts: dict = field(default_factory=dict)

    @property
    def codes(self) -> tuple[str, ...]:
        return (self.outcome, *self.reasons)

    def sentences(self) -> list[str]:
        return [say(code, **self.facts) for code in self.codes if REASONS.get(code)]

    def __str__(self) -> str:
        return " ".join(self.sentences())


def _number(name: str, value, *, optional: bool = False):
    """``value`` as a float if it is a real number (NumPy's too; not a bool), for the formatters, which
    print inf and nan as ``'inf'`` and ``'nan'``.  An integer beyond float64's range (``2**2000``) is no
    measurement: a ValueError, not an OverflowError from ``float()``."""
    if optional and value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        allowed = "a number or None" if optional else "a number"
        raise ArgumentTypeError(f"{name} must be {allowed}, got {type(value).__name__}: {value!r:.80}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(
            f"{name} must be within float64's range (about 1.8e308), got an integer of {int(value).bit_length()} bits"
        ) from None


def format_seconds(seconds: float) -> str:
    """``0.00123`` -> ``'1.23 ms'``: three significant figures in s, ms, µs or ns."""
    s = _number("seconds", seconds)
    if not math.isfinite(s):
        return str(s)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def format_bytes(nbytes: float | None) -> str:
    """``3 * 2**20`` -> ``'3.00 MiB'``; None -> ``'n/a'``, inf and nan as ``'inf'`` and ``'nan'``."""
    b = _number("nbytes", nbytes, optional=True)
    if b is None:
        return "n/a"
    if not math.isfinite(b):
        return str(b)
    for unit, scale in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(b) >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{int(b)} B"


def format_ratio(x: float, digits: int = 2) -> str:
    """``1.3217`` -> ``'1.32x'``; below 0.1, ``digits + 1`` significant figures (``0.01234`` -> ``'0.0123x'``).
    How every speedup in ``06_timing_race`` is printed."""
    x = _number("x", x)
    digits = check_int("digits", digits, minimum=0, maximum=17)
    if not math.isfinite(x):
        return f"{x}x"
    if 0 < abs(x) < 0.1:
        return f"{x:.{digits + 1}g}x"
    return f"{x:.{digits}f}x"
