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
    "verdict.cuda_unknown": "CUDA GPU of unknown compute capability: float16 with a GradScaler; whether AMP pays "
    "off here is for the race to measure",
    "why.cuda_unknown": "Without the compute capability the course cannot tell which Tensor Cores this GPU has; "
    "float16 runs on every CUDA GPU.",
    "verdict.cuda_no_tensor_cores": "{gpu} without Tensor Cores: float16 with a GradScaler, for the memory it "
    "saves; expect little or no speed-up; the race measures it",
    "verdict.cuda_no_tensor_cores_double_fp16": "{gpu} without Tensor Cores: float16 with a GradScaler, for the "
    "memory it saves; expect a modest speed-up at most, from its double-rate FP16 units; the race measures it",
    "why.pre_volta": "GPUs before Volta have no Tensor Cores: float16 matmuls run on the ordinary CUDA cores.",
    "why.fp16_memory": "float16 still halves the memory of activations, so larger batches fit.",
    "why.fp16_scaler": "float16's narrow range needs a GradScaler.",
    "verdict.cuda_bf16": "{gpu}: bfloat16 on Tensor Cores, no GradScaler needed; expect AMP to be clearly faster "
    "than FP32 on large matmuls; the race measures it",
    "why.tensor_cores_bf16": "{arch} Tensor Cores multiply bfloat16 as fast as float16.",
    "why.bf16_range": "bfloat16 keeps FP32's exponent range, so gradients do not underflow and no GradScaler is "
    "needed.",
    "why.small_matmuls": "Small matmuls gain little: kernel launches and casts, not arithmetic, set their pace.",
    "verdict.cuda_fp16": "{gpu}: float16 on Tensor Cores, with a GradScaler; expect AMP to be clearly faster than "
    "FP32 on large matmuls; the race measures it",
    "why.tensor_cores_fp16_only": "{arch} Tensor Cores multiply float16 but not bfloat16, which would run on the "
    "ordinary CUDA cores here.",
    "verdict.mps": "Apple GPU (MPS): float16, autocast's MPS default, with a GradScaler; expect a modest speed-up "
    "at most; the race measures it",
    "why.mps": "Apple GPUs have no Tensor Cores: float16 mainly halves the bytes moved, and small models are "
    "limited by the time to launch each kernel.",
    "verdict.apple_cpu": "Apple CPU with {labels}: bfloat16, no GradScaler needed; expect AMP to be no faster "
    "than FP32, whose matmuls run on Apple's matrix units; the race measures it",
    "why.apple_cpu_bf16": "This CPU multiplies bfloat16 in its vector units.",
    "why.apple_accelerate": "torch's FP32 matmuls on a Mac go to Apple's Accelerate library, which runs them on "
    "the chip's matrix units; bfloat16 matmuls cannot use that path.",
    "why.bf16_no_scaler": "bfloat16 needs no GradScaler.",
    "verdict.cpu_bf16": "CPU with {labels}: bfloat16, no GradScaler needed; expect AMP to be faster than FP32 on "
    "large matrices and slower on small ones; the race measures it",
    "why.cpu_bf16": "{labels} multiply bfloat16 in hardware, and torch's matmuls (oneDNN) use them.",
    "why.cpu_casts": "On small matrices the casts to and from bfloat16 cost more than the faster multiply saves.",
    "verdict.cpu_unknown": "CPU with unknown bf16 support: bfloat16, no GradScaler needed; whether AMP pays off "
    "here is for the race to measure",
    "why.cpu_unknown": "This system does not report the CPU's instruction sets, so the course cannot predict.",
    "verdict.cpu_emulated": "CPU without bf16 instructions (no {lacking}): bfloat16 is emulated here; expect AMP "
    "to be slower than FP32; the race measures it",
    "why.cpu_emulated": "Without {lacking}, torch converts bfloat16 to FP32 and back around every multiply.",
    "why.cpu_overhead": "The conversions are pure overhead, so FP32 should win at every size.",
    "why.same_recipe": "The course still runs bfloat16 here: the recipe is the same on every machine.",
    "fp8.no_cuda_gpu": "no CUDA GPU: FP8 GEMMs run on the Tensor Cores of NVIDIA GPUs of compute capability 8.9 and "
    "later (Ada, Hopper, Blackwell); on the CPU torch._scaled_mm runs emulated, so it shows FP8's numbers but not "
    "its speed",
    "fp8.tensor_cores_without_fp8": "{gpu} Tensor Cores multiply {precisions} but not FP8: FP8 GEMMs "
    "(torch._scaled_mm) need compute capability 8.9 or later (Ada, Hopper, Blackwell)",
    "fp8.no_tensor_cores": "{gpu} has no Tensor Cores: FP8 GEMMs (torch._scaled_mm) need compute capability 8.9 "
    "or later (Ada, Hopper, Blackwell)",
    "fp8.no_kernels": "{gpu} has FP8 Tensor Cores, but {advice}",
    "fp8.runs": "{gpu} Tensor Cores multiply FP8 (E4M3, E5M2): torch._scaled_mm runs FP8 GEMMs there",
    "fp8.runs_with_kernels": "{gpu} Tensor Cores multiply FP8 (E4M3, E5M2), and this torch build has kernels for "
    "it: torch._scaled_mm runs FP8 GEMMs there",
    # --- amp ---
    "amp.q_cuda": "Is the course running on a CUDA GPU?",
    "amp.a_cuda_yes": "yes: {gpu}.",
    "amp.q_tensor_cores": "Does it have Tensor Cores?",
    "amp.a_capability_unknown": "unknown: the GPU's compute capability is not known.",
    "amp.basis_capability_unknown": "the GPU's compute capability is unknown",
    "amp.advice_capability_unknown": "{name} runs on every CUDA GPU and needs a GradScaler; measure whether it is "
    "faster here.",
    "amp.a_no_tensor_cores": "no ({arch}, {sm}).",
    "amp.basis_no_tensor_cores": "{arch} has no Tensor Cores",
    "amp.advice_no_tensor_cores": "{name} halves activation memory, but without Tensor Cores expect {hope}; "
    "measure it.",
    "amp.a_tensor_cores": "yes, generation {generation} ({arch}, {sm}).",
    "amp.q_bf16_cores": "Do they multiply bfloat16 (compute capability 8.0 or later)?",
    "amp.a_bf16_cores": "yes: bfloat16 has FP32's exponent range, so gradients do not underflow.",
    "amp.basis_bf16_cores": "{arch} Tensor Cores multiply bfloat16",
    "amp.advice_bf16_cores": "Expect a speed-up on large matmuls (small ones gain little); the FP32 baseline may "
    "already use TF32 on these Tensor Cores.",
    "amp.a_fp16_cores": "no: float16, whose small range needs loss scaling.",
    "amp.basis_fp16_cores": "{arch} Tensor Cores multiply float16",
    "amp.advice_fp16_cores": "Expect a speed-up on large matmuls with dimensions that are multiples of 8; small "
    "ones gain little.",
    "amp.a_mps": "no: an Apple GPU (MPS), where autocast uses {name}.",
    "amp.a_mps_no_tensor_cores": "no: {name} mainly halves the bytes moved, and needs loss scaling.",
    "amp.basis_mps": "Apple GPUs have no Tensor Cores",
    "amp.advice_mps": "Expect a modest speed-up at most, on large models; measure it.",
    "amp.a_cpu": "no: the CPU, where autocast uses {name}.",
    "amp.q_cpu_native": "Does the CPU multiply {name} in hardware?",
    "amp.a_cpu_unknown": "unknown on this system.",
    "amp.basis_cpu_unknown": "this system does not report the CPU's {name} instructions",
    "amp.advice_cpu_unknown": "Measure before you decide: the comparison in section 7 tells.",
    "amp.a_cpu_emulated": "no (no {lacking}): torch converts to FP32 and back around every multiply.",
    "amp.basis_cpu_emulated": "this CPU has no {lacking}",
    "amp.advice_cpu_emulated": "{name} is emulated here, so expect AMP to be slower than FP32: use it to learn the "
    "recipe (or to save memory), and train in FP32 when speed matters on this machine.",
    "amp.a_cpu_native": "yes: {having}.",
    "amp.q_fp32_hardware": "Do FP32 matmuls have faster hardware?",
    "amp.a_apple_accelerate": "yes: on a Mac they run on Apple's matrix units (Accelerate).",
    "amp.basis_apple": "this CPU has {having}, but its FP32 matmuls run on Apple's matrix units",
    "amp.advice_apple": "Expect AMP to be no faster than FP32 here; {name} still halves activation memory.",
    "amp.basis_cpu_native": "this CPU has {having}",
    "amp.advice_cpu_native": "Expect a speed-up on large matrices; on small ones the casts cost more than the "
    "faster multiply saves. {name} needs no GradScaler.",
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
    "recipe.faster": "AMP ({name}) was faster than FP32 here: speed-up {speedup}, from {pairs} pairs of FP32 and "
    "{name} steps taken in turn.",
    "recipe.slower": "AMP ({name}) was slower than FP32 here: speed-up {speedup}, from {pairs} pairs of FP32 and "
    "{name} steps taken in turn; a {name} step took {slowdown:.2f}x as long as an FP32 step.",
    "recipe.too_close": "AMP ({name}) and FP32 were too close to call here: speed-up {speedup}, from {pairs} pairs "
    "of FP32 and {name} steps taken in turn.",
    "recipe.unpredicted": "The decision flow could not predict the speed here{basis}: this measurement is the answer.",
    "recipe.advice_pays": "AMP pays here at this size.",
    "recipe.advice_fp32": "For speed at this size, train in FP32 here; AMP still saves memory.",
    "recipe.advice_memory": "At this size, decide by memory, not speed.",
    "recipe.matches_fast": "That matches the decision flow, which expected AMP to pay here{basis}.",
    "recipe.matches_slow": "That matches the decision flow, which expected no speed-up here{basis}. For speed on "
    "this machine train in FP32; use AMP to learn the recipe or to save memory.",
    "recipe.contradicts_fast": "The decision flow expected AMP to pay here{basis}, on large matmuls, and this model "
    "is small: the measurement does not match.",
    "recipe.contradicts_slow": "The decision flow expected no speed-up here{basis}, yet AMP was faster: the "
    "measurement does not match. What to do: run the comparison again; if AMP stays faster, trust the measurement "
    "(the flow's facts about this machine may be incomplete) and confirm it at larger sizes in notebook 06.",
    "recipe.trust_measurement": "What to do: trust the measurement for this model (train it in FP32, or keep AMP "
    "for the memory it saves), and race larger sizes.",
    "recipe.undecided_fast": "The decision flow expected AMP to pay here{basis}, on large matmuls; at this size the "
    "measurement cannot tell, so it neither confirms nor contradicts the flow.",
    "recipe.undecided_slow": "The decision flow expected no speed-up here{basis}; at this size the measurement "
    "neither confirms nor contradicts the flow.",
    "recipe.within_noise": "The difference is within the noise.",
    "recipe.within_interval": "The difference is within the interval of the paired steps.",
    "recipe.regime": "{regime_text}.",
    "recipe.small_cuda": "A model this small is bound by kernel launches and Python, not by arithmetic, so faster "
    "matmuls change little while autocast's casts still cost time.",
    "recipe.small_cpu": "Matrices this small keep the CPU's 16-bit units busy only briefly, so the casts autocast "
    "adds cost about as much as the faster multiply saves.",
    "recipe.small_other": "A model this small is bound by per-op overhead, not by arithmetic.",
    "recipe.see_race": "Notebook 06's race, at larger sizes, shows where AMP starts to pay on this machine.",
    "recipe.memory_half": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), about half: most of the tensors kept for "
    "backward are 16-bit now.",
    "recipe.memory_less": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), less, but not half: some of the tensors kept "
    "for backward stayed float32.",
    "recipe.memory_same": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), about the same: the tensors kept for backward "
    "stayed float32.",
    "recipe.memory_more": "Under {name}, autograd saved {saved_ratio:.2f}x the bytes FP32 saved for backward "
    "({amp_kib:.0f} KiB against {base_kib:.0f} KiB for one batch), more: autocast kept 16-bit copies next to "
    "float32 tensors.",
    "recipe.weights_stay": "The float32 weights, their gradients and the optimizer state do not shrink.",
    "recipe.peak": "Peak CUDA memory per step (what one training step allocated on top of the data, weights, "
    "gradients and Adam's state already allocated): {amp_peak} under {name} against {base_peak} in FP32 "
    "({peak_ratio:.2f}x).",
    "recipe.accuracy_within": "Test accuracy under {name} is within {points:g} points of FP32's.",
    "recipe.accuracy_beyond": "Test accuracy under {name} is more than {points:g} points from FP32's.",
    "recipe.scaled_norm": "scaler.scale(loss) multiplied the loss by {scale:g} = 2**{log2:g}, and backward is "
    "linear, so every gradient, and with them their norm, came out {scale:g} times too large; unscale_ divides "
    "by it again.",
    "recipe.scale_grew": "grow it",
    "recipe.scale_kept": "keep it",
    "recipe.scale_halved_once": "halve it once, then hold",
    "recipe.scale_halved_each_step": "halve it at every step",
    "recipe.scale_backoff": "{num_skipped} of {num_steps} steps found inf or NaN gradients, and GradScaler halves "
    "its scale after every such step (backoff factor 0.5), from 2**{first_log2:g} to 2**{last_log2:g}.",
    "recipe.tf32_on": "This GPU has TF32 Tensor Cores and TF32 is on: 'FP32' matmuls use them. Report it with "
    "your timings.",
    "recipe.tf32_off": "This GPU has TF32 Tensor Cores, but TF32 is off: FP32 matmuls are true FP32.",
    "recipe.tf32_none": "No TF32 Tensor Cores in use here: FP32 matmuls are true FP32.",
    "clip.threshold": "Clipping the scaled gradients at max_norm = {max_norm:g} clips the true gradients at "
    "max_norm / scale = {max_norm:g} / {scale:g} = {effective:.3g}. Adam: {adam_scaled_clipped} of {num_steps} "
    "steps clipped with the scaled gradients, {adam_true_clipped} after unscale_; SGD: {sgd_scaled_clipped} of "
    "{num_steps} steps clipped with the scaled gradients, {sgd_true_clipped} after unscale_.",
    "clip.adam_little": "Adam: with the scaled gradients clipped, the updates changed little ({adam_ratio:.2f}x "
    "the correct run's size).",
    "clip.adam_shrank": "Adam: with the scaled gradients clipped, the updates shrank to {adam_ratio:.3g}x the "
    "correct run's.",
    "clip.adam_grew": "Adam: with the scaled gradients clipped, the updates grew to {adam_ratio:.3g}x the correct "
    "run's.",
    "clip.adam_why": "Adam divides each gradient by its running RMS, so a uniformly smaller gradient gives nearly "
    "the same step (only its eps, added to that RMS, makes tiny gradients take smaller steps).",
    "clip.sgd_little": "SGD: with the scaled gradients clipped, the updates changed little ({sgd_ratio:.2f}x the "
    "correct run's size).",
    "clip.sgd_shrank": "SGD: with the scaled gradients clipped, the updates shrank to {sgd_ratio:.3g}x the correct "
    "run's.",
    "clip.sgd_grew": "SGD: with the scaled gradients clipped, the updates grew to {sgd_ratio:.3g}x the correct "
    "run's.",
    "clip.sgd_why": "SGD's step is the learning rate times the gradient, so a clipped gradient is a shrunken step.",
    # --- training ---
    "training.static_some_lost": "{survivors} kept the weights finite to the end.",
    "training.static_none_lost": "Every static scale kept the weights finite: no scale overflowed.",
    "training.static_lost_early": "{lost_early} turned the weights into NaN within the first 5 steps.",
    "training.static_lost_mid": "{lost_mid} turned the weights into NaN between steps 5 and 9.",
    "training.static_lost_later": "{lost_later} turned the weights into NaN after the first 10 steps: a scale that "
    "is safe for the first batch is not safe for the whole run, because the gradients grow as the network learns.",
    # --- scaling ---
    "scaling.schedule_end": "GradScaler's scale ends at {final}.",
    "scaling.schedule_skips": "{num_skipped} steps with an inf/NaN gradient (steps {skipped}) were skipped, each "
    "multiplying the scale by {backoff_factor:g}.",
    "scaling.schedule_growth": "The scale grew {grew} times, each after {growth_interval} clean steps in a row.",
    "scaling.backoff_reaches_zero": "Halving a float32 walks through the subnormals: 2^{last_normal_log2:g} is the "
    "last normal scale, and {to_zero} more halvings reach exactly 0, where 1/S is inf and the unscaled gradients "
    "turn into NaN.",
    "scaling.backoff_stops": "GradScaler's scale stopped at 2^{last_log2:g} after {num_backoffs} backoffs.",
    "scaling.ours_refuses": "Our DynamicLossScaler matches it down to 2^{last_normal_log2:g} and then raises "
    "ScaleUnderflowError instead, naming the likely culprit: an inf/NaN loss.",
    "scaling.ours_carries_on": "Our DynamicLossScaler carries on too.",
    "scaling.runs_use_yours": "The runs below use your {mine}: it passed its check.",
    "scaling.runs_use_package": "Your {mine} has not passed its check yet, so the runs below use the package's "
    "{package} (the same algorithm); run them again once your check passes.",
    # --- ranges ---
    # --- formats ---
    "formats.stored_as": "{label} stores {x:g} as {stored:g}.",
    "formats.exact": "{x:g} is a {label} value: it is stored exactly.",
    "formats.step_in_binade": "{label} has {precision} significant bits, so between {low:g} and {high:g} its step is {step:g}.",
    "formats.step_subnormal": "Below {high:g}, {label}'s smallest normal, its values are subnormal, evenly spaced by {step:g}.",
    "formats.tie_to_even": (
        "{x:g} lies exactly halfway between {below:g} and {above:g}, and round to nearest even picks {stored:g}, "
        "the neighbour whose last mantissa bit is {last_bit}."
    ),
    "formats.to_nearest": "{x:g} lies between {below:g} and {above:g}, and round to nearest picks {stored:g}, the closer one.",
    "formats.saturates": "{label} has no infinity: {x:g} is beyond its max {max:g}, so this torch's cast saturates at {stored:g}.",
    "formats.overflows_to_inf": "{label} has infinities: {x:g} is beyond its max {max:g}, so the cast gives {stored:g}.",
    "formats.overflows_to_nan": "{label} has no infinity: {x:g} is beyond its max {max:g}, and this torch's cast gives {stored:g}.",
    "formats.nan_in": "NaN rounds to NaN in {label}.",
    # --- tensor_cores ---
    "tc.stalls": (
        "{label} has {precision} significant bits, so from 2**{precision} = {start} on its step is 2; adding 1 there "
        "is a tie, which rounds back to the even neighbour, so addition #{index} leaves the sum at {stalled:g} for good."
    ),
    "tc.no_stall": "{label} adds 1.0 {n} times without a stall: the sum is {final:g}.",
    "tc.accumulator_ratio": (
        "At K = {k} the {low} accumulator's median error is {e_low:.1e}, {in_u_low:.0f} times {low}'s unit roundoff; "
        "the {high} one's is {e_high:.1e}, {in_u_high:.0f} times {high}'s."
    ),
    "tc.accumulator_why": (
        "{low}'s unit roundoff alone is {u_ratio:.0f} times {high}'s, and the {low} sum's step grows with the sum "
        "while the terms stay small, so its error grows faster with K: the ratio is {ratio:.2g}."
    ),
    "tc.padding_small_gain": (
        "Padding to a multiple of {tile_n} instead of 8 fills the last tile and gains {gain:.3%} of the work: little "
        "at this width; tile quantization matters when a dimension is only a few tiles wide."
    ),
    "tc.padding_worth_it": (
        "Padding to a multiple of {tile_n} instead of 8 fills the last tile and gains {gain:.3%} of the work: "
        "worth it at this width."
    ),
    "tc.alignment_skipped": "No CUDA GPU here (device: {device}), so this cell is skipped: it needs a CUDA GPU.",
    "tc.alignment_would_show": (
        "On one it times a {n}x{n} {dtype} matmul against {n1}x{n1} with CUDA events (warm-up, {repeats} samples, "
        "median) and prints milliseconds and TFLOP/s for each. {n} is a multiple of {multiple}, {n1} is not: cuBLAS "
        "must fall back to slower kernels for the unaligned size (on old cuBLAS, to no Tensor Cores at all), so the "
        "smaller matrix usually takes longer and delivers fewer TFLOP/s. Timing CPU matmuls instead would say "
        "nothing about Tensor Cores."
    ),
    "tc.alignment_measured": "{gpu}: {dtype} matmuls, CUDA events, median of {repeats}.",
    "tc.alignment_ratio": "n = {n1} does {work:.4f}x the work of n = {n} and takes {time:.2f}x the time.",
    # --- autocast_ops ---
    # the probe's evidence (autocast_probe): which test decided an op's policy
    "autocast.lowered": "float32 inputs: autocast cast {casts} tensor(s) to {low} and ran {kernels} in {low}.",
    "autocast.promoted_back": "The output is {dtype}: a later step promoted it back.",
    "autocast.upcast": "{low} inputs -> float32: autocast cast {casts} tensor(s) up to float32 first.",
    "autocast.plain_stays": "Without autocast the same call returns {plain}.",
    "autocast.plain_raises": "Without autocast {low} inputs raise ({error}).",
    "autocast.kernel_fp32": "Returns float32 from {low} inputs with or without autocast: the kernel's own choice.",
    "autocast.input_dtype": "Ran in its input dtype (float32 -> {dtype}, {low} -> {low_dtype}).",
    "autocast.mixed_raise": "Ran in its input dtype; mixed {low}+float32 inputs raise even under autocast ({error}).",
    "autocast.promote": "Mixed {low}+float32 inputs: autocast cast {casts} input(s) to float32 before the op.",
    "autocast.plain_no_cast": "The same call without autocast casts nothing extra.",
    "autocast.plain_mixed_raises": "Without autocast the same call raises ({error}).",
    "autocast.kernel_promotion": (
        "Ran in its input dtype; mixed inputs -> {mixed_dtype} by the kernel's own type promotion "
        "(autocast inserted no cast)."
    ),
    "autocast.unavailable": "Not available on {device} in torch {torch}: {error}.",
    "autocast.refused": "Refused by {device} autocast: {error}.",
    "autocast.low_inputs_fail": (
        "Float32 inputs run, but {low} inputs fail and autocast has no rule that upcasts them: {error}."
    ),
    # a probe against the docs (autocast_ops.compare)
    "autocast.compared": (
        "{device}: probed on torch {probed_torch}, docs of torch {documented_torch}; agree: {agree} ops, "
        "differ: {differ} ops."
    ),
    "autocast.differs": "Documented {documented}, probed {probed}.",
    "autocast.undocumented_lower": "Not on the docs' lists, yet autocast ran {kernels} in the low dtype.",
    "autocast.undocumented_fp32": "Not on the docs' lists, yet autocast ran {kernels} in float32.",
    "autocast.documented_no_cast": "On the docs' list, but no autocast cast happened here.",
    # docs, registered rules and a probe (autocast_ops.rule_groups): one group of ops each
    "autocast.rule_cuda_only": "A rule on CUDA, none on CPU ({n}): {ops}",
    "autocast.rule_cpu_only": "A rule on CPU, none on CUDA ({n}): {ops}",
    "autocast.rule_undocumented": "{device}: a rule registered, on no documented {device} list ({n}): {ops}",
    "autocast.documented_no_rule": "{device}: on a documented {device} list, no rule of its own ({n}): {ops}",
    "autocast.probed_lower_no_rule": "Probed 'lower' on {device} without a {device} rule of its own ({n}): {ops}",
    "autocast.probed_fp32_no_rule": "Probed 'fp32' on {device} without a {device} rule of its own ({n}): {ops}",
    "autocast.probed_promote_no_rule": (
        "Probed 'promote' on {device} without a {device} rule of its own ({n}): {ops}"
    ),
    # one call under autocast (autocast_ops.read_call)
    "autocast.call_lowered": "Autocast cast the {in_dtype} inputs to {dtype} before {op} ran, so the result is {dtype}.",
    "autocast.call_upcast": "Autocast cast the {in_dtype} input up to {dtype} before {op} ran.",
    "autocast.call_kept": "{op} ran in the dtype it was given: {dtype}.",
    "autocast.rule_here": "{device} registers an autocast rule for {op} (cpu: {rule_cpu}, cuda: {rule_cuda}).",
    "autocast.no_rule_here": "{device} registers no autocast rule for {op} (cpu: {rule_cpu}, cuda: {rule_cuda}).",
    "autocast.rule_decides": (
        "Where a device has a rule for {op}, the rule decides the dtype; where it has none, {op} runs in the "
        "dtype it is given."
    ),
    "autocast.plain_gives": "Without autocast the same call gives {plain}.",
    # the variance by moments (autocast_ops.read_variance)
    "autocast.variance_close": "Inside autocast the variance by moments stays within 1% of the float64 truth.",
    "autocast.variance_off": "Inside autocast the variance by moments is off by 1% to 50%.",
    "autocast.variance_lost": "Inside autocast the variance by moments is off by more than half of it.",
    "autocast.spacing_far": (
        "Both moments were computed from inputs rounded to {dtype}, whose spacing near E[x^2] = "
        "{mean_square:.0f} is {spacing:g}, far more than the variance itself."
    ),
    "autocast.spacing_comparable": (
        "Both moments were computed from inputs rounded to {dtype}, whose spacing near E[x^2] = "
        "{mean_square:.0f} is {spacing:g}, comparable to the variance itself."
    ),
    "autocast.protected_ok": "With autocast switched off, the same formula in float32 stays within 1e-3.",
    "autocast.protected_off": "With autocast switched off, the same formula in float32 still misses by more than 1e-3.",
    # --- fp8 ---
    "fp8.runs_on_gpu": "FP8 matmuls run on this GPU's Tensor Cores: {why}",
    "fp8.gpu_without_fp8": "FP8 matmuls run on the CPU, emulated, because {why}",
    "fp8.apple_gpu": "FP8 matmuls run on the CPU, emulated, because torch has no FP8 matmul for Apple GPUs (MPS)",
    "fp8.no_gpu": "FP8 matmuls run on the CPU, emulated, because there is no CUDA GPU here: {why}",
    "fp8.standard_recipe": "These spreads are the standard recipe's reason: inputs and weights in E4M3 (precision), "
    "gradients in E5M2 (range).",
    "fp8.recipe_not_forced": "These spreads do not force the standard recipe's split (inputs and weights in E4M3, "
    "gradients in E5M2).",
    "fp8.activations_fit_e4m3": "The activations spread over at most {narrow:.0f} binades: E4M3's {w4:.0f}-binade "
    "window holds them with room to spare, and its extra mantissa bit halves the rounding error.",
    "fp8.activations_fill_e4m3": "The activations spread over up to {narrow:.0f} binades: E4M3's {w4:.0f}-binade "
    "window holds them with little room.",
    "fp8.gradients_need_e5m2": "The hidden layers' gradients spread over up to {wide:.0f} binades: more than E4M3's "
    "window, within E5M2's {w5:.0f}.",
    "fp8.gradients_fit_e4m3": "The hidden layers' gradients spread over up to {wide:.0f} binades: within E4M3's "
    "window too.",
    "fp8.gradients_beyond_e5m2": "The hidden layers' gradients spread over up to {wide:.0f} binades: beyond E5M2's "
    "{w5:.0f} too.",
    "fp8.logits_beyond_e5m2": "The logits' gradients spread over {logits:.0f} binades (beyond any FP8 window): a "
    "confident softmax gives the wrong classes vanishing gradients, so the FP8 recipes below keep the 10-class "
    "output layer in FP32 (10 is not a multiple of 16, as FP8 GEMMs need).",
    "fp8.logits_within_e5m2": "The logits' gradients spread over {logits:.0f} binades, within E5M2's window.",
    "fp8.delayed_saturates": "Delayed scaling used the scale of earlier steps (2^{log2_scale_delayed:.1f}), made "
    "for an amax {amax_ratio:.0f} times smaller, so {saturated_delayed} element(s) landed beyond {max:g} and "
    "were clipped.",
    "fp8.delayed_holds": "Delayed scaling's scale from earlier steps (2^{log2_scale_delayed:.1f}) still held this "
    "step: no element landed beyond {max:g}.",
    "fp8.below_window": "The largest activation gradient is about 2^{log2_largest}, below {label}'s smallest normal "
    "2^{log2_min_normal:g}: unscaled, almost the whole histogram lies below {label}'s window.",
    "fp8.near_window": "The largest activation gradient is about 2^{log2_largest}, near {label}'s smallest normal "
    "2^{log2_min_normal:g}: unscaled, most of the histogram lies below {label}'s window.",
    "fp8.losses_identical": "{equal} of {total} losses are equal, bit for bit.",
    "fp8.losses_close": "{equal} of {total} losses are equal; the others differ.",
    "fp8.losses_different": "None of the {total} losses are equal.",
    "fp8.weights_identical": "The trained weights are identical: the same scales (448 / amax, in float64, rounded to "
    "float32), the same saturating casts and the same torch._scaled_mm calls give the same bits.",
    "fp8.weights_differ": "The trained weights differ.",
    "fp8.current_rescales": "Current scaling rescaled that very step (2^{log2_scale_current:.1f}) and clipped "
    "{saturated_current}.",
    # --- pitfalls ---
    "pitfalls.cache_stale": (
        "After opt.step() inside the autocast region, the next forward pass in the same region still used the "
        "old low-precision copy of the weight: autocast caches the cast until the region ends."
    ),
    "pitfalls.cache_fresh": (
        "After opt.step() inside the autocast region, the next forward pass cast the updated weight afresh: "
        "no stale copy was used."
    ),
    "pitfalls.cache_no_change": "opt.step() did not change the float32 weight, so this run shows nothing.",
    "pitfalls.cache_stale_error": (
        "On {device_type} with {dtype} autocast, that output was off by up to {stale_error:.4g} from the "
        "updated weight's."
    ),
    "pitfalls.cache_new_region_matches": (
        "A new autocast region after the step (the step outside the region) matches the updated weight bit for bit."
    ),
    "pitfalls.cache_new_region_stale": "A new autocast region after the step does not match the updated weight.",
    "pitfalls.cache_cleared_matches": "torch.clear_autocast_cache() after the step matches it bit for bit.",
    "pitfalls.cache_cleared_stale": "torch.clear_autocast_cache() after the step does not match it.",
    "pitfalls.cache_uncached_matches": "A region opened with cache_enabled=False matches it bit for bit.",
    "pitfalls.cache_uncached_stale": "A region opened with cache_enabled=False does not match it.",
    "pitfalls.eps_lost": (
        "eps={eps:g} is below half of float16's smallest subnormal ({half_subnormal:.3g}), so round-to-nearest "
        "stores 0."
    ),
    "pitfalls.eps_kept": (
        "eps={eps:g} is not below half of float16's smallest subnormal ({half_subnormal:.3g}), so "
        "round-to-nearest stores {eps_in_fp16:.4g}."
    ),
    "pitfalls.adam_v_zero": (
        "After one step {v_zero_fp16:.0%} of the float16 second moments are exactly 0 (gradients up to "
        "{grad_max:.4g}; float32 state: {v_zero_fp32:.0%})."
    ),
    "pitfalls.fp16_adam_nonfinite": (
        "On {device_type}, Adam with float16 weights and state turned the weights inf or nan at step "
        "{fp16_bad_step} of {num_steps}."
    ),
    "pitfalls.fp16_adam_finite": (
        "On {device_type}, Adam with float16 weights and state ended {fp16_end:.4g} from the target after "
        "{num_steps} steps (it started {fp16_start:.4g} away)."
    ),
    "pitfalls.fp32_adam_nonfinite": "The FP32 master weights became inf or nan at step {fp32_bad_step}.",
    "pitfalls.fp32_adam_finite": (
        "The FP32 master weights and state ended {fp32_end:.4g} from the target (from {fp32_start:.4g})."
    ),
    "pitfalls.attention_overflows": (
        "Every entry of Q and K is at most {largest_input:.4g} (float16 holds up to {fp16_max:.4g}), yet the "
        "largest logit of Q K^T is {largest_logit:.4g}: in float16 {inf_logits} of {num_logits} logits "
        "overflow to inf and {nan_rows} of {seq} rows of softmax are nan."
    ),
    "pitfalls.attention_fits": (
        "Every entry of Q and K is at most {largest_input:.4g} and the largest logit of Q K^T is "
        "{largest_logit:.4g}: float16 (up to {fp16_max:.4g}) holds every logit."
    ),
    "pitfalls.attention_finite_variants": (
        "{num_finite} of the {num_variants} ways of computing the probabilities keep every one finite."
    ),
    "pitfalls.compile_unavailable": "torch.compile could not run here: {reason}",
    "pitfalls.compile_casts": (
        "On {device_type}, Dynamo's graph kept the autocast region ({autocast_regions} enter/exit pair), and "
        "AOTAutograd turned it into {casts} explicit casts to {dtype}; the compiled function returned "
        "{compiled_dtype} like eager ({eager_dtype})."
    ),
    "pitfalls.compile_bitwise": "Compiled and eager outputs are equal bit for bit.",
    "pitfalls.compile_close": "Compiled and eager outputs agree to within {max_abs_diff:.4g}.",
    "pitfalls.compile_sees_update": (
        "The compiled function saw a weight updated in place inside the region (its graph casts the weight "
        "on every call)."
    ),
    "pitfalls.compile_stale": "The compiled function did not see a weight updated in place inside the region.",
    "pitfalls.compile_guard": (
        "A function without a region of its own, called outside and then inside an autocast region, was "
        "compiled {graphs} times and returned {dtype_outside} then {dtype_inside}: the autocast state is a guard."
    ),
    # --- swamping ---
    "swamping.bf16_stuck": (
        "After {num_steps} updates plain bfloat16 weights had not moved from {start:g}, though the exact "
        "weight is {exact:.4g}."
    ),
    "swamping.bf16_exact": "After {num_steps} updates plain bfloat16 weights reached the exact {exact:.4g}.",
    "swamping.bf16_partway": (
        "After {num_steps} updates plain bfloat16 weights got {progress_bf16:.0%} of the way to the exact "
        "{exact:.4g} (they ended at {final_bf16:.4g})."
    ),
    "swamping.update_lost": (
        "Each update of {update:g} is smaller than half the bfloat16 gap at {start:g} ({half_ulp:g}): "
        "rounding to nearest drops it."
    ),
    "swamping.update_kept": (
        "Each update of {update:g} is not smaller than half the bfloat16 gap at {start:g} ({half_ulp:g})."
    ),
    "swamping.remedies": (
        "FP32 master weights got {progress_fp32:.0%} of the way ({final_fp32:.4g}), Kahan-compensated "
        "bfloat16 {progress_kahan:.0%} ({final_kahan:.4g}), stochastic rounding {progress_stochastic:.0%} on "
        "average over {numel} weights ({final_stochastic:.4g}, spread {spread:.4g})."
    ),
    # --- subnormals ---
    "subnormals.slow": (
        "On this CPU, {op} of {numel:,} float32 numbers took {subnormal_time} on subnormal inputs against "
        "{normal_time} on normal ones: {slowdown_ratio} as long."
    ),
    "subnormals.no_penalty": (
        "On this CPU, {op} of {numel:,} float32 numbers took {subnormal_time} on subnormal inputs against "
        "{normal_time} on normal ones: {slowdown_ratio} as long, little or no penalty."
    ),
    "subnormals.ftz_unsupported": "torch.set_flush_denormal is not supported here (it returned False).",
    "subnormals.ftz_zeros": (
        "With flush-to-zero on, the subnormal inputs read as zero and took {flushed_time} ({flushed_ratio} "
        "the normal time)."
    ),
    "subnormals.ftz_kept": (
        "With flush-to-zero on, the subnormal inputs were NOT flushed and took {flushed_time} "
        "({flushed_ratio} the normal time)."
    ),
    # --- predict ---
    "predict.uncommitted": "○ no prediction committed ({how}, then run this cell again to compare). The result: {actual}.",
    "predict.right": "✓ you predicted {predicted}, and the result is {actual}.",
    "predict.wrong": "✗ you predicted {predicted}; the result is {actual}.",
    # --- check ---
    "check.complex_answer": "`{name}` is a complex tensor; the answer is real",
    "check.bool_tensor_answer": "`{name}` is a bool tensor (True/False values); this exercise wants numbers",
    "check.text_answer": "`{name}` is text ({text!r:.60}); write it as a number, without quotes",
    "check.bool_answer": "`{name}` is {value}, a yes/no value; this exercise wants a number",
    "check.huge_int_answer": "`{name}` is an integer of {bits} bits, too large for any float (float64 ends near "
    "1.8e308)",
    "check.not_a_number": "`{name}` is a {kind}, which is not a number or a tensor",
    "check.bools_answer": "`{name}` holds True/False values; this exercise wants numbers",
    "check.not_finite": "{where}{kinds} where the expected answer is finite: did something overflow (beyond "
    "{precision}'s largest value) or divide 0 by 0?",
    "check.some_zeros": "{count} {values} 0 where the expected is not: an underflow (too small for the format) or "
    "a missing term?",
    "check.all_zeros": "your answer is all zeros: did every value underflow, or is the computation not filled in yet?",
    "check.sign_flipped": "every value has the right size but the opposite sign: a sign flipped?",
    "check.exponent_too_large": "{what} {exactly} {sign}2**{k} = {sign}{factor} times the expected one: off by a "
    "power of two, as if an exponent were {k} too large",
    "check.exponent_too_small": "{what} {exactly} {sign}2**{k} times the expected one: off by a power of two, as if "
    "an exponent were {off} too small",
    "check.constant_factor": "every value is {ratio:.4g} times the expected one: a constant factor is off",
    "check.rounded_to_other": "your answer is the expected value rounded to {other}: this exercise is about "
    "{precision}",
    "check.unrounded_in_other": "rounded to {other}, your answer becomes the expected value: the exercise asks for "
    "the value {other} actually stores",
    "check.not_rounded": "your answer is not a {precision} number (it changes when rounded to {precision}): round "
    "it to {precision} first?",
    "check.sign_of_zero": "+0.0 == -0.0 is True, but their bit patterns differ in the sign bit.",
    "check.transposed": "it has the transposed shape: is a matrix transposed, or are A and B swapped in A @ B?",
    "check.reshaped": "the same number of elements: a reshape or flatten too many (or too few)?",
    "check.reduced": "a single number: did a reduction (sum/mean) run over everything?",
    "check.sign_bit": "sign: 0 means positive, 1 means negative.",
    "check.exponent_field": "exponent: your field {field} is {meaning}; the value needs a {direction} exponent "
    "(remember the bias, {bias}: stored field = power of two + {bias}).",
    "check.mantissa_bits": "mantissa: {differ} of {bits} bits differ.",
    "check.mantissa_last_place": "mantissa: {differ} of {bits} bits differ; off by one in the last place: round to "
    "nearest (ties to even) by looking at the first bit you drop, not truncate.",
    "check.nan_patterns": "every pattern with an all-ones exponent and a non-zero mantissa is NaN in IEEE formats",
    "check.dtype_layout": "{dtype} has {layout}.",
    "check.which_16_bit": "both are 16-bit: which one did this autocast region ask for? (autocast's own default is "
    "float16 on CUDA and bfloat16 on CPU; the course picks bfloat16 on Ampere and later GPUs, see amp_dtype)",
    "check.kept_in_float32": "is this an op autocast keeps in float32 for accuracy, one that promotes mixed inputs "
    "to the widest, or one outside the autocast region?",
    "check.runs_low_precision": "inside an autocast region, an op on autocast's lower-precision list (matmul, "
    "linear, conv, ...) runs in the low-precision dtype, and an op on no list (relu, max_pool2d, view, ...) keeps "
    "its input's dtype, so a low-precision input gives a low-precision output.",
    "check.reread": "re-read the cell above this exercise: the measured numbers decide it.",
    "check.comes_later": "position {position}: {item!r} must come later: something else has to happen first.",
    "check.raised": "{function} raised {error}: {text}",
    "check.no_return": "{function} returned None: is a `return` missing?",
    "check.not_in_place": "{function} returned a value, but the reference changes its arguments in place and "
    "returns None (a trailing _ in a name, as in unscale_, means in place): modify the tensors, e.g. with "
    "g.mul_(...)",
    # --- course ---
    "course.same_everywhere": "runs the same on every machine",
    "course.02_cuda": "measures the multiple-of-8 alignment effect on {where}",
    "course.02_cpu": "emulates Tensor Core arithmetic; the alignment timing needs a CUDA GPU and is skipped",
    "course.03": "trains a small model on {where} and inspects its real gradients",
    "course.04_gpu": "trains in FP16 on {where} with your scaler and GradScaler",
    "course.04_cpu_fp16_native": "trains in FP16 on the CPU with your scaler and GradScaler; this CPU multiplies "
    "FP16 in hardware ({labels})",
    "course.04_cpu_fp16_emulated": "trains in FP16 on the CPU with your scaler and GradScaler; this CPU has no "
    "FP16 matmul instructions, so FP16 is emulated and the model is kept small",
    "course.04_cpu_fp16_unknown": "trains in FP16 on the CPU with your scaler and GradScaler; whether this CPU "
    "multiplies FP16 in hardware is unknown, so the model is kept small",
    "course.05_cuda": "probes autocast on CUDA (float16, autocast's default) and on the CPU (bfloat16)",
    "course.05_mps": "probes autocast on MPS (float16) and lists the CPU and CUDA rules for comparison",
    "course.05_cpu": "probes CPU autocast (bfloat16); the CUDA list is shown as documented",
    "course.06": "races FP32 against {dtype} autocast on {device}: {verdict}",
    "course.07_scaler": "trains end to end in {dtype} on {where} with a GradScaler, then measures it against FP32;",
    "course.07_no_scaler": "trains end to end in {dtype} on {where} without a GradScaler (bfloat16 needs none), "
    "then measures it against FP32;",
    "course.expect_faster": "the verdict expects AMP to beat FP32 on large matrices",
    "course.expect_not_faster": "the verdict expects AMP not to beat FP32 here",
    "course.expect_unknown": "the verdict leaves the speed to the measurement",
    "course.08_gpu": "trains with FP8 matmuls on the Tensor Cores of {where}; make gpu-check races them",
    "course.08_gpu_without_fp8": "runs its FP8 matmuls on the CPU, emulated: {reason}",
    "course.08_cpu": "runs its FP8 matmuls on the CPU, emulated: the numbers are a GPU's, the speed is not (FP8 "
    "GEMMs run in hardware on NVIDIA GPUs of compute capability 8.9 and later)",
    "course.09_cpu": "runs six pitfalls live on the CPU, the subnormal timing included",
    "course.09_elsewhere": "runs five pitfalls live on {where}; the subnormal timing runs on the CPU",
    "course.see_the_notebook": "see the notebook: its first cells say what it needs",
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
