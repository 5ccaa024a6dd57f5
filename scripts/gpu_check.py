"""Measure the course's races on a real CUDA GPU and write reference results.  (``make gpu-check``)

Runs, on CUDA, one *section* after another:

* ``precision_table``: one large matmul (n = 8192, inputs already in each dtype) timed in FP32 with
  TF32 off, FP32 with TF32 on, bfloat16 and float16: time and TFLOP/s per precision;
* ``race_matmul``: FP32 (TF32 off), TF32 and AMP at n = 1024, 4096, 8192, for each AMP dtype the GPU
  multiplies in hardware (:func:`amp_dtypes`: float16 everywhere, bfloat16 from Ampere, sm_80, on);
* ``race_fp8_matmul``: an FP8 (E4M3) GEMM through ``torch._scaled_mm`` against bfloat16 and FP32, inputs
  already in each dtype (:func:`amp_lab.race.race_fp8_matmul`), at n = 4096 and 8192 (and 1024 in the full
  run), with the datasheet's FP8 / BF16 ratio beside the measured one; only on GPUs whose Tensor Cores
  multiply FP8 under this build (:func:`amp_lab.gpus.fp8_matmul_support`: compute capability 8.9 and later),
  elsewhere recorded as skipped with the reason;
* ``race_fp8_rowwise``: rowwise FP8 (a scale per row of A and per column of B,
  :func:`amp_lab.race.race_fp8_matmul` with ``scaling="rowwise"``) raced beside tensorwise FP8, bfloat16 and FP32 at
  the FP8 sizes, and each recipe's cast of a bfloat16 operand to E4M3 (:func:`amp_lab.race.fp8_cast_overhead`,
  fixed rounds), so the summary states torchao's rule (FP8 pays where the BF16 GEMM time minus the FP8 GEMM time
  exceeds the casts) with measured numbers; where ``race_fp8_matmul`` races, else skipped with the reason;
* ``fp8_blockwise``: DeepSeek-V3's blockwise FP8 (1x128 tiles of A, 128x128 blocks of B, FP32 scales;
  ``scaling="blockwise"``) beside tensorwise FP8, bfloat16 and FP32, where this torch runs it
  (:func:`amp_lab.race.fp8_blockwise_support`: Hopper, CUDA 12.9 or later), else skipped with the reason;
* ``race_mlp``: training steps of the tutorial loop's model, with peak memory;
* ``alignment``: the float16 matmul at n = 4096 against 4095;
* ``autocast_probe``: ``amp_lab.autocast_ops.probe`` on CUDA and on the CPU;
* ``sweeps``: matmul sizes (each AMP dtype) and, in the full run, MLP widths with memory, each with
  its peak ratio.

Races that an earlier section already ran (the sweep's n = 4096, the alignment's aligned n) are reused,
not raced again.  Before anything runs, the script checks that this torch build has kernels for the GPU
(``torch.cuda.get_arch_list()``, :func:`amp_lab.gpus.arch_supported`) and prints the worst-case
time of every section.

**Files.**  ``gpu-check_<gpu>_<YYYYMMDD>-<HHMMSS>[_quick].json`` (UTC; plus a ``.md`` summary) in
``--out`` (default ``docs/results/``), written at the start and again after every race and every
section (to a temporary file, then renamed), so a failure, a memory refusal or a kill loses at most the
race in progress.  Each section records ``status``: ``"ok"``, ``"error"`` (exception type and message),
``"skipped"`` (with why) or, while it runs or if the run was killed, ``"pending"``/``"running"``.  One
section's failure never stops the next; the CUDA cache is emptied between sections.

**Exit status.**  0: every section ok (or skipped by design); 1: some section failed (listed on
stderr; the file holds the rest); 2: cannot run (no CUDA GPU, a bad device or arguments); 3: this torch
build has no kernels for this GPU (the advice what to install is printed; no file is written).

**Worst-case time** (:func:`plan`, printed at the start): every adaptive race samples until its
speedup's interval is +-5% wide or ``max_time_s`` has passed, so the worst case is ``max_time_s`` per
race (or the minimum rounds, if longer), plus one round of slack and ``RACE_SETUP_S``; the sweep adds
one raw-GEMM measurement per sweep.  Assuming an H100-class GPU (two AMP dtypes, FP32 at no less than
``ASSUMED_FP32_TFLOPS``):

======================  ====================================================  =========  =========
section                 what                                                  quick (s)  full (s)
======================  ====================================================  =========  =========
start-up                import torch, CUDA context, machine facts                    15         15
precision_table         4 precisions x 10 rounds at n = 8192 (fixed rounds)           4          4
race_matmul             n = 1024, 4096, 8192 x 2 dtypes: 6 races                     37        127
race_fp8_matmul         quick: n = 4096, 8192; full: n = 1024, 4096, 8192            12         63
race_fp8_rowwise        the FP8 sizes: 4 contestants, + 2 x 3 casts' fixed rounds    21         85
fp8_blockwise           the FP8 sizes: 4 contestants (Hopper, CUDA 12.9 on)          12         63
race_mlp                quick: (4096, 1024) in bf16; full: 3 shapes x 2 dtypes        6        126
alignment               n = 4095 (n = 4096 is reused)                                 6         21
autocast_probe          CUDA and CPU                                                 15         15
sweeps                  quick: n = 256 ... 8192, 3 new sizes + raw GEMM per dtype    48        340
                        full: n up to 16384 per dtype, MLP widths 256 ... 8192
total                   (``python scripts/gpu_check.py [--quick]`` prints it)       176        859
======================  ====================================================  =========  =========

(``tests/test_gpu_check.py`` checks the quick total stays under 180 s.)  In practice races on a GPU
reach their +-5% long before ``max_time_s``, so both finish well within these bounds.  On a slower
GPU the minimum rounds of the largest sizes can take longer than ``max_time_s`` (a T4's FP32 n = 16384
matmul takes about a second), which the model counts with the rate it is given.  ``--device
cpu`` runs the script with tiny sizes so it can be tested without a GPU; such a file says ``"device":
"cpu"`` and is not reference material.

Usage::

    python scripts/gpu_check.py [--out DIR] [--device cuda|cuda:N|cpu] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent

# Sizes and sampling limits: the full GPU run, --quick (a one-shot run: under 3 minutes on an H100, worst
# case), and --device cpu (a test of this script: tiny sizes, fixed rounds).
FULL = {
    "matmul_n": (1024, 4096, 8192),
    "mlp": ((1024, 256), (4096, 1024), (8192, 4096)),
    "mlp_every_dtype": True,  # race_mlp in each AMP dtype (False: the course's dtype only)
    "fp8_n": (1024, 4096, 8192),  # race_fp8_matmul, where the GPU has FP8 Tensor Cores
    "fp8_block_n": (1024, 4096, 8192),  # fp8_blockwise: multiples of its 128 x 128 blocks
    "cast_repeats": 30,  # fixed rounds of fp8_cast_overhead (its casts are short: no adaptive sampling)
    "align": (4096, 4095),
    "sweep_matmul": (256, 512, 1024, 2048, 4096, 8192, 16384),
    "sweep_mlp": (256, 512, 1024, 2048, 4096, 8192),
    "sweep_batch": 1024,
    "table_n": 8192,
    "table_repeats": 10,
    "repeats": 10,
    "warmup": 3,
    "min_sample_s": 0.01,
    # sample until each speedup's 95% interval is about +-5% wide, or max_time_s per race
    "target_rel_width": 0.1,
    "max_time_s": 20.0,
}
QUICK = {
    **FULL,
    "mlp": ((4096, 1024),),
    "mlp_every_dtype": False,
    "fp8_n": (4096, 8192),
    "fp8_block_n": (4096, 8192),
    "cast_repeats": 10,
    "sweep_matmul": (256, 512, 1024, 2048, 4096, 8192),
    "sweep_mlp": (),  # no MLP sweep in --quick
    "max_time_s": 5.0,
}
TINY = {  # --device cpu: low precision is slow on CPUs without bf16/fp16 instructions
    "matmul_n": (32,),
    "fp8_n": (32,),
    "fp8_block_n": (128,),
    "cast_repeats": 3,
    "mlp": ((32, 16),),
    "mlp_every_dtype": True,
    "align": (32, 31),
    "sweep_matmul": (16, 32),
    "sweep_mlp": (16, 32),
    "sweep_batch": 16,
    "table_n": 64,
    "table_repeats": 3,
    "repeats": 3,
    "warmup": 1,
    "min_sample_s": 0.001,
    "target_rel_width": None,  # a test of the script: fixed, few rounds
    "max_time_s": None,
}

# The worst-case model (see the module docstring).  An H100 PCIe's datasheet FP32 rate is 51 TFLOP/s;
# assume half of it is reached, and time every contestant (TF32 and AMP too) at that FP32 rate.
ASSUMED_FP32_TFLOPS = 25.0
CPU_ASSUMED_FP32_TFLOPS = 0.005  # --device cpu: emulated bf16 on an AVX2 laptop
MLP_OVERHEAD = 3.0  # an MLP training step takes longer than its matmul FLOPs say (Adam, ReLU, loss)
RACE_SETUP_S = 1.0  # operands, first autocast call, cuBLAS heuristics, memory measurement
STARTUP_S = 15.0  # import torch, CUDA context, machine facts
PROBE_S = {"cuda": 10.0, "cpu": 5.0}  # the autocast probe: tiny tensors, about 0.5 s on a CPU
QUICK_BUDGET_S = 180.0

SECTIONS = ("precision_table", "race_matmul", "race_fp8_matmul", "race_fp8_rowwise", "fp8_blockwise", "race_mlp",
            "alignment", "autocast_probe", "sweeps")  # fmt: skip

EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN, EXIT_NO_KERNELS = 0, 1, 2, 3


def _log(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------------------------
# Facts and decisions (pure, so tests feed any GPU)
# --------------------------------------------------------------------------------------------


class CudaFacts(NamedTuple):
    """What the arch check and the dtype choice need to know about one CUDA GPU and this torch build.
    :func:`cuda_facts` reads them; tests pass their own to :func:`main`.  (A NamedTuple, not a
    dataclass: loading this script by path, as tests do, leaves it out of ``sys.modules``.)"""

    index: int
    capability: tuple[int, int]
    arch_list: tuple[str, ...]  # torch.cuda.get_arch_list()
    cuda_version: str | None  # torch.version.cuda


def cuda_facts(index: int) -> CudaFacts:
    import torch

    return CudaFacts(
        index=index,
        capability=tuple(torch.cuda.get_device_capability(index)),
        arch_list=tuple(torch.cuda.get_arch_list()),
        cuda_version=torch.version.cuda,
    )


def amp_dtypes(capability) -> list:
    """The AMP dtypes to race on a GPU of compute ``capability``: float16 on every CUDA GPU, and
    bfloat16 too where its Tensor Cores multiply it (``gpus.bf16_hardware``: sm_80 and later).
    ``torch.cuda.is_bf16_supported()`` is not asked: it is True on a T4, where bfloat16 is emulated,
    minutes-slow at large sizes and no reference for anyone.  ``None`` (the CPU test): bfloat16, CPU
    autocast's dtype."""
    import torch

    from amp_lab.gpus import bf16_hardware

    if capability is None:
        return [torch.bfloat16]
    return [torch.float16] + ([torch.bfloat16] if bf16_hardware(capability) else [])


def tf32_hardware(capability) -> bool:
    """Whether FP32 matmuls can run on TF32 Tensor Cores (Ampere and later)."""
    from amp_lab.gpus import tensor_core_generation

    return capability is not None and "tf32" in tensor_core_generation(capability).precisions


def mlp_dtypes(dtypes: list, capability, sizes: dict) -> list:
    """The dtypes race_mlp runs in: every AMP dtype, or only the course's (``amp_dtype_for``)."""
    from amp_lab.gpus import amp_dtype_for

    if sizes["mlp_every_dtype"]:
        return list(dtypes)
    course = amp_dtype_for("cuda", capability) if capability is not None else dtypes[0]
    return [course if course in dtypes else dtypes[0]]


# --------------------------------------------------------------------------------------------
# The worst-case plan
# --------------------------------------------------------------------------------------------


def measure_worst_s(call_s: float, contestants: int, sizes: dict, *, repeats: int | None = None,
                    adaptive: bool = True) -> float:  # fmt: skip
    """The longest one ``amp_lab.timing.measure`` can take: warm-up, then at least ``repeats`` rounds;
    adaptive, it starts no round that would end past ``max_time_s`` (by the slowest round so far), so
    it ends by ``max_time_s`` plus one round of slack, unless the minimum rounds alone take longer."""
    repeats = sizes["repeats"] if repeats is None else repeats
    sample = sizes["min_sample_s"] + call_s  # calls per sample: ceil(min_sample_s / call_s)
    warm = contestants * max(sizes["warmup"], 1) * call_s
    round_s = contestants * sample
    minimum = warm + repeats * round_s
    if not adaptive or sizes["target_rel_width"] is None or sizes["max_time_s"] is None:
        return minimum
    return max(minimum, sizes["max_time_s"]) + round_s


def fp8_support(device_type: str, capability, arch_list=None):
    """Whether the ``race_fp8_matmul`` section races on this GPU (:func:`amp_lab.gpus.fp8_matmul_support`:
    FP8 Tensor Cores, compute capability 8.9 and later, and kernels in this build), and why.  Not on the
    CPU test device, where there is no GPU to measure."""
    from amp_lab.gpus import fp8_matmul_support

    return fp8_matmul_support(capability if device_type == "cuda" else None, arch_list)


def blockwise_support(device_type: str, capability, arch_list=None, cuda_version=None):
    """Whether the ``fp8_blockwise`` section races (:func:`amp_lab.race.fp8_blockwise_support`: FP8 GEMMs, a
    Hopper GPU, CUDA 12.9 or later; ``cuda_version`` None: unchecked), and why.  Not on the CPU test device."""
    from amp_lab.race import fp8_blockwise_support

    return fp8_blockwise_support(capability if device_type == "cuda" else None, arch_list, cuda_version)


def skipped_sections(device_type: str, capability, arch_list=None, cuda_version=None) -> dict[str, str]:
    """The sections this machine skips by design, each with the reason (printed with the plan)."""
    support = fp8_support(device_type, capability, arch_list)
    block = blockwise_support(device_type, capability, arch_list, cuda_version)
    skipped = {} if support else dict.fromkeys(("race_fp8_matmul", "race_fp8_rowwise"), support.reason)
    return {**skipped, **({} if block else {"fp8_blockwise": block.reason})}


def plan(sizes: dict, dtypes: list, *, device_type: str = "cuda", capability=None,
         fp32_tflops: float | None = None, arch_list=None, cuda_version=None) -> dict:  # fmt: skip
    """Worst-case seconds per section (and ``"total"``) for these sizes and AMP dtypes: pure, so tests
    check the budget of any GPU's plan.  Races that an earlier section ran are counted once, as the
    script reuses them.  A section the machine skips (:func:`skipped_sections`) plans 0 s."""
    from amp_lab.cost import mlp_step_flops

    if fp32_tflops is None:
        fp32_tflops = ASSUMED_FP32_TFLOPS if device_type == "cuda" else CPU_ASSUMED_FP32_TFLOPS
    rate = fp32_tflops * 1e12
    racers = 3 if device_type == "cuda" else 2  # fp32, amp (+ tf32 on CUDA)
    seen: set = set()
    races: dict[str, int] = {}

    def race_s(kind: str, size, dtype) -> float:
        key = (kind, size, str(dtype))
        if key in seen:
            return 0.0
        seen.add(key)
        flops = 2.0 * size**3 if kind == "matmul" else MLP_OVERHEAD * mlp_step_flops(*size)
        return measure_worst_s(flops / rate, racers, sizes) + RACE_SETUP_S

    def gemm_s(m: int, k: int, n: int) -> float:
        return measure_worst_s(2.0 * m * k * n / rate, 2, sizes) + RACE_SETUP_S

    s: dict[str, float] = {"start-up": STARTUP_S if device_type == "cuda" else 1.0}
    n = sizes["table_n"]
    precisions = 2 + len(amp_dtypes(capability)) if device_type == "cuda" else 3
    s["precision_table"] = (
        measure_worst_s(2.0 * n**3 / rate, precisions, sizes, repeats=sizes["table_repeats"], adaptive=False)
        + RACE_SETUP_S
    )
    s["race_matmul"] = sum(race_s("matmul", n, d) for d in dtypes for n in sizes["matmul_n"])
    races["race_matmul"] = len(dtypes) * len(sizes["matmul_n"])
    # FP32, bfloat16 and FP8 contestants, each timed (conservatively) at the FP32 rate
    fp8 = bool(fp8_support(device_type, capability, arch_list))
    block = bool(blockwise_support(device_type, capability, arch_list, cuda_version))

    def fp8_s(contestants: int, key: str = "fp8_n", **fixed) -> float:
        return sum(measure_worst_s(2.0 * n**3 / rate, contestants, sizes, **fixed) + RACE_SETUP_S for n in sizes[key])

    s["race_fp8_matmul"] = fp8_s(3) if fp8 else 0.0
    # the rowwise lane beside them, and per scaling the cast overhead: the casts and both GEMMs, fixed rounds
    cast_s = fp8_s(3, repeats=sizes["cast_repeats"], adaptive=False)
    s["race_fp8_rowwise"] = fp8_s(4) + 2 * cast_s if fp8 else 0.0
    s["fp8_blockwise"] = fp8_s(4, "fp8_block_n") if block else 0.0
    races["race_fp8_matmul"] = len(sizes["fp8_n"]) if fp8 else 0
    races["race_fp8_rowwise"] = 3 * len(sizes["fp8_n"]) if fp8 else 0
    races["fp8_blockwise"] = len(sizes["fp8_block_n"]) if block else 0
    mdt = mlp_dtypes(dtypes, capability, sizes)
    s["race_mlp"] = sum(race_s("mlp", wb, d) for d in mdt for wb in sizes["mlp"])
    races["race_mlp"] = len(mdt) * len(sizes["mlp"])
    s["alignment"] = sum(race_s("matmul", n, dtypes[0]) for n in sizes["align"])
    s["autocast_probe"] = PROBE_S[device_type] + (PROBE_S["cpu"] if device_type == "cuda" else 0.0)
    sweeps = 0.0
    for d in dtypes:
        sweeps += sum(race_s("matmul", n, d) for n in sizes["sweep_matmul"])
        if sizes["sweep_matmul"]:
            big = max(sizes["sweep_matmul"])
            sweeps += gemm_s(big, big, big)
    if sizes["sweep_mlp"]:
        batch = sizes["sweep_batch"]
        sweeps += sum(race_s("mlp", (w, batch), dtypes[0]) for w in sizes["sweep_mlp"])
        sweeps += gemm_s(batch, 1024, max(sizes["sweep_mlp"]))
    s["sweeps"] = sweeps
    s = {k: round(v, 1) for k, v in s.items()}
    s["total"] = round(sum(s.values()), 1)
    return s


def plan_text(p: dict, assumption: str, skipped: dict | None = None) -> str:
    """The plan as one line; ``skipped`` (:func:`skipped_sections`) names each section left out, and why."""
    skipped = skipped or {}
    parts = ", ".join(f"{k} skipped" if k in skipped else f"{k} {v:.0f} s" for k, v in p.items() if k != "total")
    text = f"planned worst case {p['total']:.0f} s ({assumption}): {parts}"
    by_reason: dict[str, list[str]] = {}  # sections skipped for one reason are named together
    for name, why in skipped.items():
        by_reason.setdefault(why, []).append(name)
    return text + "".join(f"; {', '.join(names)} skipped: {why}" for why, names in by_reason.items())


# --------------------------------------------------------------------------------------------
# Machine facts
# --------------------------------------------------------------------------------------------


def driver_version(index: int) -> str | None:
    """The NVIDIA driver version (NVML through pynvml when installed, else nvidia-smi)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(dev, facts: CudaFacts | None = None) -> dict:
    import torch

    from amp_lab.cpus import cpu_model
    from amp_lab.dtypes import dtype_name
    from amp_lab.gpus import arch_supported, bf16_hardware

    try:
        arch_list = list(facts.arch_list) if facts is not None else list(torch.cuda.get_arch_list())
    except Exception:  # a build without CUDA may answer nothing
        arch_list = []
    info = {
        "device": str(dev),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "gpu_name": None,
        "capability": None,
        "gpu_memory_gib": None,
        "driver": None,
        "arch_list": arch_list,
        "arch_supported": None,
        "bf16_hardware": None,
        "bf16_supported": None,  # since issue 13: the same as bf16_hardware (emulation does not count)
        "bf16_torch_supported": None,  # torch.cuda.is_bf16_supported(): True on a T4 (emulation)
        "amp_dtypes": [dtype_name(d) for d in amp_dtypes(facts.capability if facts else None)],
    }
    if dev.type == "cuda" and facts is not None:
        props = torch.cuda.get_device_properties(facts.index)
        try:
            with torch.cuda.device(facts.index):
                torch_bf16 = bool(torch.cuda.is_bf16_supported())
        except Exception:
            torch_bf16 = None
        info.update(
            gpu_name=props.name,
            capability=f"{facts.capability[0]}.{facts.capability[1]}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
            driver=driver_version(facts.index),
            arch_supported=arch_supported(facts.capability, arch_list),
            bf16_hardware=bf16_hardware(facts.capability),
            bf16_supported=bf16_hardware(facts.capability),
            bf16_torch_supported=torch_bf16,
        )
    return info


def _plain(value):
    """JSON-ready form of whatever the autocast probe returns."""
    from amp_lab.intervals import jsonable as _jsonable

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return _jsonable(value)


def run_probe(device_type: str) -> dict:
    """The autocast probe on one device; {"status": "unavailable", ...} when it cannot run."""
    try:
        from amp_lab import autocast_ops
    except ImportError as exc:
        return {"status": "unavailable", "reason": f"amp_lab.autocast_ops cannot be imported: {exc}"}
    if not hasattr(autocast_ops, "probe"):
        return {"status": "unavailable", "reason": "amp_lab.autocast_ops has no probe()"}
    try:
        table = autocast_ops.probe(device_type)
    except Exception as exc:  # the probe is someone else's module: record, do not crash the check
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    ops = {str(name): _plain(result) for name, result in table.items()}
    policies: dict[str, int] = {}
    for result in ops.values():
        policy = result.get("policy", "?") if isinstance(result, dict) else "?"
        policies[policy] = policies.get(policy, 0) + 1
    out = {
        "status": "ok",
        "device_type": device_type,
        "dtype": _plain(getattr(table, "dtype", None)),
        "policy_counts": policies,
        "ops": ops,
    }
    if hasattr(autocast_ops, "compare"):
        try:
            out["compare_with_documented"] = _plain(autocast_ops.compare(table))
        except Exception as exc:
            out["compare_with_documented"] = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    return out


# --------------------------------------------------------------------------------------------
# Files: written atomically after every race and section
# --------------------------------------------------------------------------------------------


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def file_stem(gpu: str, date: str, quick: bool, *, prefix: str = "gpu-check") -> str:
    """``<prefix>_<gpu>_<YYYYMMDD>-<HHMMSS>[_quick]`` from an ISO 8601 UTC ``date`` (``distributed_check.py``
    passes ``prefix="distributed-check"``)."""
    day, clock = date[:10].replace("-", ""), date[11:19].replace(":", "")
    return f"{prefix}_{slug(gpu)}_{day}-{clock}" + ("_quick" if quick else "")


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a results file is for everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Results:
    """The report, and the two files it is written to (again after every race and section)."""

    def __init__(self, out: Path, stem: str, report: dict):
        self.report = report
        self.json_path = out / f"{stem}.json"
        self.md_path = out / f"{stem}.md"

    def save(self) -> None:
        text = json.dumps(self.report, indent=1, allow_nan=False) + "\n"
        _write_atomic(self.json_path, text)
        try:
            md = markdown(self.report)
        except Exception as exc:  # the summary must never cost the data
            md = f"# GPU check\n\nThe summary could not be written ({type(exc).__name__}: {exc}); see the JSON.\n"
        _write_atomic(self.md_path, md)


def _error(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)}


# --------------------------------------------------------------------------------------------
# The sections
# --------------------------------------------------------------------------------------------


class Section:
    """What a section function gets: the report to fill, sub-item failures to record, ``save``."""

    def __init__(self, name: str, results: Results, log: Callable[[str], None]):
        self.name, self.results, self.log = name, results, log
        self.errors: list[dict] = []
        self.skipped: str | None = None

    @property
    def report(self) -> dict:
        return self.results.report

    def failed(self, what: str, exc: Exception) -> None:
        """One race of the section failed: record it, and let the section go on with the next."""
        self.errors.append({"item": what, **_error(exc)})
        self.log(f"{self.name}: {what} FAILED: {type(exc).__name__}: {exc}")

    def save(self) -> None:
        self.results.save()


class Check:
    """Everything the sections share: device, sizes, dtypes, and the races run so far (for reuse)."""

    def __init__(self, dev, sizes: dict, capability, arch_list=None, cuda_version=None):
        from amp_lab.dtypes import dtype_name
        from amp_lab.gpus import fp8_matmul_support
        from amp_lab.race import fp8_blockwise_support

        self.dev, self.sizes, self.capability = dev, sizes, capability
        # From the facts alone (main passes no capability on the CPU test device, so the FP8 races are skipped
        # there); a test can hand a CPU device a GPU's facts to run the sections.
        self.fp8_support = fp8_matmul_support(capability, arch_list)
        self.blockwise_support = fp8_blockwise_support(capability, arch_list, cuda_version)
        self.dtypes = amp_dtypes(capability) if dev.type == "cuda" else [amp_dtypes(None)[0]]
        self.mlp_dtypes = mlp_dtypes(self.dtypes, capability, sizes)
        self.races: list = []  # RaceResults, handed to later races as ``reuse``
        self.common = {
            "device": dev,
            "warmup": sizes["warmup"],
            "repeats": sizes["repeats"],
            "min_sample_s": sizes["min_sample_s"],
            "target_rel_width": sizes["target_rel_width"],
            "max_time_s": sizes["max_time_s"],
        }
        self.dtype_name = dtype_name


def section_precision_table(check: Check, sec: Section) -> None:
    import torch

    from amp_lab.hardware import tf32_matmul
    from amp_lab.timing import Contestant, measure

    dev, n = check.dev, check.sizes["table_n"]
    cuda = dev.type == "cuda"
    gen = torch.Generator(device=dev).manual_seed(2)
    A = torch.randn(n, n, device=dev, generator=gen)
    B = torch.randn(n, n, device=dev, generator=gen)
    rows: dict = {}
    contestants: dict = {}
    contestants["fp32"] = Contestant(lambda: A @ B, (lambda: tf32_matmul(False)) if cuda else contextlib.nullcontext)
    rows["fp32"] = {"dtype": "float32", "tf32": False}
    if cuda and tf32_hardware(check.capability):
        contestants["tf32"] = Contestant(lambda: A @ B, lambda: tf32_matmul(True))
        rows["tf32"] = {"dtype": "float32", "tf32": True}
    else:
        why = "TF32 is a CUDA Tensor Core format (Ampere, sm_80, and later)"
        rows["tf32"] = {"dtype": "float32", "tf32": True, "status": "skipped", "reason": why}
    lows = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for key, dtype in lows.items():
        if cuda and dtype not in check.dtypes:
            cap = check.capability
            rows[key] = {
                "dtype": check.dtype_name(dtype),
                "status": "skipped",
                "reason": f"no {check.dtype_name(dtype)} Tensor Cores on sm_{cap[0]}{cap[1]}: torch would emulate it",
            }
            continue
        A_low, B_low = A.to(dtype), B.to(dtype)
        contestants[key] = Contestant(lambda a=A_low, b=B_low: a @ b)
        rows[key] = {"dtype": check.dtype_name(dtype)}
    flops = 2.0 * n**3
    table = {"n": n, "flops": flops, "inputs": "already in each dtype (no casts timed)", "rows": rows}
    sec.report["precision_table"] = table
    timings = measure(
        contestants,
        device=dev,
        warmup=check.sizes["warmup"],
        repeats=check.sizes["table_repeats"],
        min_sample_s=check.sizes["min_sample_s"],
        extra_context={"race": "precision_table", "size": f"n={n}"},
    )
    for key, t in timings.items():
        rows[key].update(status="ok", median_s=t.median, iqr_s=t.iqr, tflops=flops / t.median / 1e12, timing=t.to_dict())
    table["context"] = timings["fp32"].context
    sec.log(
        f"precision table n={n}: "
        + ", ".join(f"{k} {r['tflops']:.3g} TFLOP/s" if r.get("status") == "ok" else f"{k} skipped" for k, r in rows.items())
    )


def section_race_matmul(check: Check, sec: Section) -> None:
    from amp_lab import race

    results = sec.report.setdefault("race_matmul", [])
    for dtype in check.dtypes:
        for n in check.sizes["matmul_n"]:
            try:
                r = race.race_matmul(n, dtype=dtype, reuse=check.races, **check.common)
            except Exception as exc:
                sec.failed(f"n={n} {check.dtype_name(dtype)}", exc)
                continue
            check.races.append(r)
            results.append(r.to_dict())
            sec.log(f"race_matmul n={n} {check.dtype_name(dtype)}: speedup {r.speedup_interval}: {r.outcome}")
            sec.save()


def section_race_fp8_matmul(check: Check, sec: Section) -> None:
    """FP8 against bfloat16 and FP32 (:func:`amp_lab.race.race_fp8_matmul`) where the GPU multiplies FP8, with
    the datasheet's FP8 / BF16 ratio for this GPU when the course's table has it; skipped elsewhere."""
    import torch

    from amp_lab import gpus, race

    support = check.fp8_support
    data = sec.report["race_fp8_matmul"] = {
        "supported": support.supported, "support": support.reason, "datasheet": None, "results": [],
    }  # fmt: skip
    if not support:
        sec.skipped = support.reason
        return
    entry = gpus.datasheet_entry(sec.report.get("machine", {}).get("gpu_name"))
    if entry is not None and entry.fp8_over_bf16 is not None:
        data["datasheet"] = {
            "model": entry.model,
            "fp8_tflops": entry.fp8_tflops,
            "bf16_tflops": entry.bf16_tflops,
            "fp8_over_bf16": entry.fp8_over_bf16,
            "source": entry.fp8_source,
            "row": next(row for row in gpus.fp8_datasheet_rows() if row[0] == entry.model),
        }
    for n in check.sizes["fp8_n"]:
        try:
            r = race.race_fp8_matmul(n, dtype=torch.bfloat16, reuse=check.races, **check.common)
        except Exception as exc:
            sec.failed(f"n={n}", exc)
            continue
        check.races.append(r)
        data["results"].append(r.to_dict())
        sec.log(
            f"race_fp8_matmul n={n}: FP8 {r.tflops['fp8']:.3g} TFLOP/s, bfloat16 {r.tflops['amp']:.3g}; "
            f"FP8 / bfloat16 {r.fp8_speedup_interval}: {r.fp8_speedup_interval.outcome}"
        )
        sec.save()


def _fp8_section(sec: Section, support, **more) -> dict | None:
    """The section's record (``supported``, ``support``, ``results``, ``more``), or None: skipped, and why."""
    data = sec.report[sec.name] = {"supported": support.supported, "support": support.reason, "results": [], **more}
    if not support:
        sec.skipped = support.reason
        return None
    return data


def _fp8_lane_race(check: Check, sec: Section, data: dict, n: int, scaling: str) -> None:
    """One ``race_fp8_matmul(n, scaling=...)`` into ``data["results"]``, a failure recorded."""
    import torch

    from amp_lab import race

    try:
        r = race.race_fp8_matmul(n, scaling=scaling, dtype=torch.bfloat16, reuse=check.races, **check.common)
    except Exception as exc:
        sec.failed(f"n={n} {scaling}", exc)
        return
    check.races.append(r)
    data["results"].append(r.to_dict())
    lane = race.FP8_LANES[scaling]
    sec.log(f"{sec.name} n={n}: FP8 {scaling} {r.tflops[lane]:.3g} TFLOP/s, tensorwise {r.tflops['fp8']:.3g}, "
            f"bfloat16 {r.tflops['amp']:.3g}; bfloat16 / {scaling} {r.lane_speedup(lane)}")  # fmt: skip
    sec.save()


def section_race_fp8_rowwise(check: Check, sec: Section) -> None:
    """Rowwise FP8 against tensorwise FP8, bfloat16 and FP32 at the FP8 sizes, and each recipe's cast overhead
    (:func:`amp_lab.race.fp8_cast_overhead`, fixed rounds): torchao's rule measured.  Skipped without FP8 GEMMs."""
    import torch

    from amp_lab import race

    data = _fp8_section(sec, check.fp8_support, cast_overhead=[])
    if data is None:
        return
    fixed = {**check.common, "repeats": check.sizes["cast_repeats"], "target_rel_width": None, "max_time_s": None}
    for n in check.sizes["fp8_n"]:
        _fp8_lane_race(check, sec, data, n, "rowwise")
        for scaling in ("tensorwise", "rowwise"):
            try:
                c = race.fp8_cast_overhead(n, scaling=scaling, dtype=torch.bfloat16, **fixed)
            except Exception as exc:
                sec.failed(f"cast n={n} {scaling}", exc)
                continue
            data["cast_overhead"].append(c.to_dict())
            sec.log(f"fp8_cast_overhead n={n} {scaling}: a cast {c.seconds * 1e6:.3g} us; torchao's rule, "
                    f"bfloat16 / (FP8 + two casts) {c.rule}: {c.rule.outcome}")  # fmt: skip
            sec.save()


def section_fp8_blockwise(check: Check, sec: Section) -> None:
    """DeepSeek-V3's blockwise FP8 against tensorwise FP8, bfloat16 and FP32 where this torch runs it
    (:func:`amp_lab.race.fp8_blockwise_support`); skipped with the reason elsewhere."""
    data = _fp8_section(sec, check.blockwise_support)
    for n in check.sizes["fp8_block_n"] if data is not None else ():
        _fp8_lane_race(check, sec, data, n, "blockwise")


def section_race_mlp(check: Check, sec: Section) -> None:
    from amp_lab import race

    results = sec.report.setdefault("race_mlp", [])
    for dtype in check.mlp_dtypes:
        for width, batch in check.sizes["mlp"]:
            try:
                r = race.race_mlp(width, batch, dtype=dtype, reuse=check.races, **check.common)
            except Exception as exc:
                sec.failed(f"width={width} batch={batch} {check.dtype_name(dtype)}", exc)
                continue
            check.races.append(r)
            results.append(r.to_dict())
            sec.log(
                f"race_mlp width={width} batch={batch} {check.dtype_name(dtype)}: "
                f"speedup {r.speedup_interval}: {r.outcome}"
            )
            sec.save()


def section_alignment(check: Check, sec: Section) -> None:
    from amp_lab import race

    aligned, unaligned = check.sizes["align"]
    dtype = check.dtypes[0]
    a = race.race_matmul(aligned, dtype=dtype, reuse=check.races, **check.common)
    check.races.append(a)
    u = race.race_matmul(unaligned, dtype=dtype, reuse=check.races, **check.common)
    check.races.append(u)
    sec.report["alignment"] = {
        "dtype": check.dtype_name(dtype),
        "n_aligned": aligned,
        "n_unaligned": unaligned,
        "amp_tflops_aligned": a.tflops["amp"],
        "amp_tflops_unaligned": u.tflops["amp"],
        "aligned": a.to_dict(),
        "unaligned": u.to_dict(),
    }
    sec.log(f"alignment: AMP {a.tflops['amp']:.3g} TFLOP/s at n={aligned}, {u.tflops['amp']:.3g} at n={unaligned}")


def section_autocast_probe(check: Check, sec: Section) -> None:
    probes = sec.report.setdefault("autocast_probe", {})
    for device_type in [check.dev.type] + (["cpu"] if check.dev.type == "cuda" else []):
        probes[device_type] = p = run_probe(device_type)
        sec.log(f"autocast probe {device_type}: {p.get('status')}" + (f" ({p['reason']})" if p.get("reason") else ""))
        if p.get("status") == "error":
            sec.errors.append({"item": device_type, "type": "ProbeError", "message": p.get("reason")})
    if all(p.get("status") == "unavailable" for p in probes.values()):
        sec.skipped = "; ".join(p.get("reason", "") for p in probes.values())


def section_sweeps(check: Check, sec: Section) -> None:
    from amp_lab import sweeps as sweeps_module

    sweeps = sec.report.setdefault("sweeps", {})

    def one(name: str, **kwargs) -> None:
        try:
            s = sweeps_module.sweep(show_progress=False, reuse=check.races, **kwargs, **check.common)
        except Exception as exc:
            sec.failed(name, exc)
            return
        check.races.extend(s.results)
        sweeps[name] = s.to_dict()
        sec.log(f"sweep {name}: " + ", ".join(f"{n}: {x:.2f}x" for n, x in zip(s.sizes, s.speedups, strict=True)))
        sec.save()

    for dtype in check.dtypes:
        if check.sizes["sweep_matmul"]:
            one(f"matmul_{check.dtype_name(dtype)}", sizes=check.sizes["sweep_matmul"], kind="matmul", dtype=dtype)
    if check.sizes["sweep_mlp"]:
        dtype = check.dtypes[0]
        one(f"mlp_{check.dtype_name(dtype)}", sizes=check.sizes["sweep_mlp"], kind="mlp",
            batch=check.sizes["sweep_batch"], dtype=dtype)  # fmt: skip


SECTION_FUNCTIONS = {
    "precision_table": section_precision_table,
    "race_matmul": section_race_matmul,
    "race_fp8_matmul": section_race_fp8_matmul,
    "race_fp8_rowwise": section_race_fp8_rowwise,
    "fp8_blockwise": section_fp8_blockwise,
    "race_mlp": section_race_mlp,
    "alignment": section_alignment,
    "autocast_probe": section_autocast_probe,
    "sweeps": section_sweeps,
}


def _free_memory(dev) -> None:
    """Give back what a section cached, so the next one's memory check sees it as free."""
    gc.collect()
    if dev.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def run_sections(check: Check, results: Results, *, log=_log) -> list[str]:
    """Run every section, each caught on its own; returns the names of those that failed."""
    report = results.report
    failed = []
    for name in SECTIONS:
        status = report["sections"][name]
        status["status"] = "running"
        results.save()  # a run killed now says which section it was in
        sec = Section(name, results, log)
        start = time.perf_counter()
        try:
            SECTION_FUNCTIONS[name](check, sec)
        except Exception as exc:
            sec.failed("section", exc)
        except BaseException as exc:  # Ctrl-C, SystemExit: keep what was measured, then stop
            status.update(status="interrupted", error=_error(exc), duration_s=round(time.perf_counter() - start, 2))
            report["durations_s"][name] = status["duration_s"]
            results.save()
            raise
        status["duration_s"] = round(time.perf_counter() - start, 2)
        report["durations_s"][name] = status["duration_s"]
        if sec.errors:
            status.update(status="error", error=sec.errors[0], errors=sec.errors)
            failed.append(name)
        elif sec.skipped:
            status.update(status="skipped", reason=sec.skipped)
        else:
            status["status"] = "ok"
        results.save()
        _free_memory(check.dev)
    return failed


# --------------------------------------------------------------------------------------------
# The summary
# --------------------------------------------------------------------------------------------


def markdown(report: dict) -> str:
    from amp_lab.text import format_bytes, format_seconds

    m = report["machine"]
    mode = report.get("mode") or ("quick" if report.get("quick") else "full")
    lines = [
        f"# GPU check: {m['gpu_name'] or m['device']}",
        "",
        f"- date (UTC): {report['date']}",
        f"- GPU: {m['gpu_name']} (compute capability {m['capability']}, {m['gpu_memory_gib']} GiB); "
        f"AMP dtypes raced: {', '.join(m.get('amp_dtypes') or [])}",
        f"- driver {m['driver']}, CUDA runtime {m['cuda_runtime']}, cuDNN {m['cudnn']}, torch {m['torch']}, "
        f"Python {m['python']}; kernels for this GPU in this build: {m.get('arch_supported')}",
        f"- sizes: {mode}; written by `scripts/gpu_check.py`",
        "",
        "| section | status | time (s) | planned worst case (s) |",
        "| --- | --- | ---: | ---: |",
    ]
    for name, s in report.get("sections", {}).items():
        note = s["status"]
        if s.get("error"):
            note += f": {s['error'].get('type')}: {s['error'].get('message')}"
        elif s.get("reason"):
            note += f": {s['reason']}"
        note = note.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {name} | {note} | {s.get('duration_s', '-')} | {s.get('planned_s', '-')} |")

    def t(r, name):
        timing = r["timings"].get(name)
        return format_seconds(timing["median_s"]) if timing else "-"

    def x(value):
        return "-" if value is None else f"{value:.2f}x"

    def xi(r):
        """The speedup with its interval and outcome (files written before intervals existed: the speedup)."""
        iv = r.get("speedup_interval")
        if not iv:
            return x(r["speedup"])
        if iv["high"] == "inf":
            return f"{iv['ratio']:.2f}x (too few pairs)"
        return f"{iv['ratio']:.2f}x ({iv['low']:.2f}-{iv['high']:.2f}, {iv['outcome']})"

    table = report.get("precision_table")
    if table:
        lines += [
            "",
            f"## FP32, TF32, bf16, fp16: one n = {table['n']} matmul, inputs already in each dtype",
            "",
            "| precision | dtype | time per matmul | TFLOP/s |",
            "| --- | --- | ---: | ---: |",
        ]
        for key, r in table["rows"].items():
            if r.get("status") == "ok":
                lines.append(f"| {key} | {r['dtype']} | {format_seconds(r['median_s'])} | {r['tflops']:.3g} |")
            else:
                lines.append(f"| {key} | {r['dtype']} | {r.get('status', 'pending')}: {r.get('reason', '')} | - |")
    if report.get("race_matmul"):
        lines += [
            "",
            "## race_matmul (C = A @ B, n x n, FP32 inputs)",
            "",
            "| n | AMP dtype | FP32 | TF32 | AMP | speedup vs FP32 (95% interval) | vs TF32 | AMP TFLOP/s |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in report["race_matmul"]:
            lines.append(
                f"| {r['params']['n']} | {r['dtype']} | {t(r, 'fp32')} | {t(r, 'tf32')} | {t(r, 'amp')} | "
                f"{xi(r)} | {x(r['speedup_vs_tf32'])} | {r['tflops']['amp']:.3g} |"
            )
    lines += _fp8_markdown(report.get("race_fp8_matmul"), t)
    lines += _fp8_recipes_markdown(report, t)
    if report.get("race_mlp"):
        lines += [
            "",
            "## race_mlp (training steps of the tutorial loop's model)",
            "",
            "| width | batch | AMP dtype | FP32 | TF32 | AMP | speedup vs FP32 (95% interval) | vs TF32 | memory FP32 | memory AMP |",
            "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in report["race_mlp"]:
            mem = r.get("memory") or {}
            lines.append(
                f"| {r['params']['width']} | {r['params']['batch']} | {r['dtype']} | {t(r, 'fp32')} | {t(r, 'tf32')} | "
                f"{t(r, 'amp')} | {xi(r)} | {x(r['speedup_vs_tf32'])} | "
                f"{format_bytes(mem.get('fp32'))} | {format_bytes(mem.get('amp'))} |"
            )
    al = report.get("alignment")
    if al:
        lines += [
            "",
            "## Alignment",
            "",
            f"AMP ({al['dtype']}) matmul: {al['amp_tflops_aligned']:.3g} TFLOP/s at n = {al['n_aligned']}, "
            f"{al['amp_tflops_unaligned']:.3g} TFLOP/s at n = {al['n_unaligned']}.",
        ]
    if report.get("sweeps"):
        lines += ["", "## Sweeps", ""]
        for name, s in report["sweeps"].items():
            pairs = ", ".join(f"{n}: {v:.2f}x" for n, v in zip(s["sizes"], s["speedups"], strict=True))
            c = s["ceiling"]
            lines.append(f"- {name}: {pairs}; peak ratio {c['vs_fp32']:.3g}x ({c['source']})")
    if report.get("autocast_probe"):
        lines += ["", "## Autocast probe", ""]
        for device_type, p in report["autocast_probe"].items():
            if p.get("status") == "ok":
                counts = ", ".join(f"{k}: {v}" for k, v in sorted(p["policy_counts"].items()))
                lines.append(f"- {device_type} ({p.get('dtype')}): {len(p['ops'])} ops; {counts}")
            else:
                lines.append(f"- {device_type}: {p.get('status')} ({p.get('reason')})")
    lines += ["", f"Durations (s): {report.get('durations_s')}; total {report.get('total_s')} s", ""]
    return "\n".join(lines)


def _fp8_markdown(fp8: dict | None, t) -> list[str]:
    """The FP8 section of the summary: each race's times, FP8 TFLOP/s, and the measured FP8 / BF16 ratio
    beside the datasheet's (``t(r, name)``: a contestant's median time, as the other tables print it)."""
    if not fp8:
        return []
    lines = ["", "## race_fp8_matmul (FP8 E4M3 GEMM through torch._scaled_mm; inputs already in each dtype)", ""]
    if not fp8.get("supported"):
        return lines + [f"Not raced: {fp8.get('support')}."]
    ds = fp8.get("datasheet")
    sheet = "-" if not ds else f"{ds['fp8_over_bf16']:.3g}x"
    lines += [
        "| n | AMP dtype | FP32 | AMP | FP8 | AMP TFLOP/s | FP8 TFLOP/s | FP8 / BF16 measured (95% interval) | FP8 / BF16 datasheet |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in fp8.get("results", []):
        iv = r["fp8_speedup_interval"]
        measured = (
            f"{iv['ratio']:.2f}x (too few pairs)" if iv["high"] == "inf"
            else f"{iv['ratio']:.2f}x ({iv['low']:.2f}-{iv['high']:.2f}, {iv['outcome']})"
        )  # fmt: skip
        lines.append(
            f"| {r['params']['n']} | {r['dtype']} | {t(r, 'fp32')} | {t(r, 'amp')} | {t(r, 'fp8')} | "
            f"{r['tflops']['amp']:.3g} | {r['tflops']['fp8']:.3g} | {measured} | {sheet} |"
        )
    lines.append("")
    if ds:
        lines.append(
            f"Datasheet ({ds['model']}): FP8 {ds['fp8_tflops']:g} and BF16 {ds['bf16_tflops']:g} dense TFLOP/s, "
            f"ratio {ds['fp8_over_bf16']:.3g}x ({ds['source']})."
        )
    else:
        lines.append("The course's datasheet table (amp_lab.gpus.DATASHEETS) has no FP8 figure for this GPU.")
    lines.append(f"Why this GPU races FP8: {fp8.get('support')}.")
    return lines


def _iv(iv: dict | None) -> str:
    """A speedup's JSON record as ``ratio (low-high, outcome)``."""
    if not iv:
        return "-"
    if iv["high"] == "inf":
        return f"{iv['ratio']:.2f}x (too few pairs)"
    return f"{iv['ratio']:.2f}x ({iv['low']:.2f}-{iv['high']:.2f}, {iv['outcome']})"


def _fp8_recipes_markdown(report: dict, t) -> list[str]:
    """The rowwise and blockwise sections of the summary: each race's lanes, and torchao's rule from the casts."""
    from amp_lab.text import format_seconds as fs

    lines = []
    for name, scaling in (("race_fp8_rowwise", "rowwise"), ("fp8_blockwise", "blockwise")):
        if not (data := report.get(name)):
            continue
        lane = f"fp8_{scaling}"
        lines += ["", f"## {name} ({scaling} FP8 beside tensorwise FP8, bfloat16 and FP32; inputs already cast)", ""]
        if not data.get("supported"):
            lines.append(f"Not raced: {data.get('support')}.")
            continue
        lines += [f"| n | FP32 | bf16 | FP8 tensorwise | FP8 {scaling} | {scaling} TFLOP/s | bf16 / {scaling} (95% "
                  f"interval) | tensorwise / {scaling} (95% interval) |", "|" + " ---: |" * 8]  # fmt: skip
        for r in data.get("results", []):
            lines.append(
                f"| {r['params']['n']} | {t(r, 'fp32')} | {t(r, 'amp')} | {t(r, 'fp8')} | {t(r, lane)} | "
                f"{r['tflops'][lane]:.3g} | {_iv(r.get(f'{lane}_speedup_interval'))} | "
                f"{_iv(r.get(f'{lane}_vs_tensorwise'))} |"
            )
        if data.get("cast_overhead"):
            lines += [
                "",
                "torchao's rule: FP8 pays where the BF16 GEMM time minus the FP8 GEMM time exceeds the casting "
                "overhead; here each GEMM's two bfloat16 operands cast to E4M3 in eager mode (torch.compile would "
                "fuse each cast into the ops beside it), all timed in the same interleaved rounds.",
                "",
                "| n | scaling | one cast (95% interval) | bf16 GEMM | FP8 GEMM | saved a GEMM | two casts | "
                "bf16 / (FP8 + two casts) (95% interval) | FP8 pays |",
                "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
            ]
            for c in data["cast_overhead"]:
                low, high = c["cast_interval_s"]
                ends = "too few rounds" if high == "inf" else f"{fs(low)}-{fs(high)}"
                pays = {"faster": "yes", "slower": "no"}.get(c["rule_outcome"], c["rule_outcome"])
                lines.append(
                    f"| {c['params']['n']} | {c['params']['scaling']} | {fs(c['cast_s'])} ({ends}) | {t(c, 'amp')} | "
                    f"{t(c, 'fp8')} | {fs(c['savings_s'])} | {fs(c['overhead_s'])} | {_iv(c['rule'])} | {pays} |"
                )
        lines += ["", f"Why this GPU races it: {data.get('support')}."]
    return lines


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def _refuse(msg: str, code: int) -> int:
    print(f"gpu_check: {msg}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None, *, facts: CudaFacts | None = None, log=_log) -> int:
    """Run the check; returns the exit status (see the module docstring).  ``facts`` replaces what
    :func:`cuda_facts` would read from torch (tests check the arch refusal on a machine without CUDA)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="directory for the results files (default: docs/results/)")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu to test this script")
    parser.add_argument("--quick", action="store_true", help="a one-shot run: under 3 minutes on an H100")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed why
        return EXIT_CANNOT_RUN if exc.code else EXIT_OK

    os.environ.setdefault("AMP_LAB_PROGRESS", "0")
    import torch

    from amp_lab.device import get_device
    from amp_lab.gpus import arch_advice, arch_supported
    from amp_lab.references import RESULTS_SCHEMA, utc_now

    try:
        requested = torch.device(args.device)
    except RuntimeError:
        return _refuse(f"--device {args.device!r} is not a device name; use cuda, cuda:N or cpu", EXIT_CANNOT_RUN)
    if requested.type not in ("cuda", "cpu"):
        return _refuse(f"--device {args.device!r}: this script checks CUDA GPUs (or tests itself on the cpu)", EXIT_CANNOT_RUN)
    if requested.type == "cuda":
        if facts is None:
            if not torch.cuda.is_available():
                return _refuse(
                    "no CUDA GPU here (torch.cuda.is_available() is False), so there is nothing to check. "
                    "Run it on a machine with an NVIDIA GPU, or pass --device cpu to test the script.",
                    EXIT_CANNOT_RUN,
                )
            index = requested.index if requested.index is not None else torch.cuda.current_device()
            if not 0 <= index < torch.cuda.device_count():
                return _refuse(f"--device {args.device}: this machine has {torch.cuda.device_count()} CUDA GPU(s)", EXIT_CANNOT_RUN)
            facts = cuda_facts(index)
        if not arch_supported(facts.capability, list(facts.arch_list)):
            advice = arch_advice(facts.capability, list(facts.arch_list), facts.cuda_version)
            return _refuse(f"nothing was measured: {advice}", EXIT_NO_KERNELS)
    elif args.out is None:
        return _refuse(
            f"--device {args.device} only tests this script, and its numbers are not reference material "
            "for docs/results/: give --out DIR",
            EXIT_CANNOT_RUN,
        )
    try:
        dev = get_device(requested if requested.type == "cpu" else torch.device("cuda", facts.index))
    except ValueError as exc:
        return _refuse(str(exc), EXIT_CANNOT_RUN)

    cuda = dev.type == "cuda"
    sizes = (QUICK if args.quick else FULL) if cuda else TINY
    mode = ("quick" if args.quick else "full") if cuda else "cpu-test"
    capability = facts.capability if cuda else None
    arch_list = list(facts.arch_list) if cuda else None
    out = Path(args.out) if args.out is not None else ROOT / "docs" / "results"

    began = time.perf_counter()
    machine = machine_info(dev, facts if cuda else None)
    cuda_version = facts.cuda_version if cuda else None
    check = Check(dev, sizes, capability, arch_list, cuda_version)
    budget = plan(sizes, check.dtypes, device_type=dev.type, capability=capability, arch_list=arch_list,
                  cuda_version=cuda_version)  # fmt: skip
    skipped = skipped_sections(dev.type, capability, arch_list, cuda_version)
    assumption = (
        f"{mode} sizes, FP32 at >= {ASSUMED_FP32_TFLOPS:g} TFLOP/s, {sizes['max_time_s']} s per race"
        if cuda
        else "tiny CPU-test sizes, fixed rounds"
    )
    log(f"gpu_check on {machine['gpu_name'] or dev} (torch {machine['torch']}, CUDA {machine['cuda_runtime']}, "
        f"AMP dtypes {', '.join(machine['amp_dtypes'])})")  # fmt: skip
    log(plan_text(budget, assumption, skipped))

    date = utc_now()
    quick = bool(args.quick or not cuda)
    out.mkdir(parents=True, exist_ok=True)
    stem = file_stem(machine["gpu_name"] or dev.type, date, quick)
    for k in range(2, 100):  # two runs in the same second must not overwrite each other either
        if not (out / f"{stem}.json").exists():
            break
        stem = f"{file_stem(machine['gpu_name'] or dev.type, date, quick)}-{k}"
    report = {
        "schema": RESULTS_SCHEMA,
        "date": date,
        "quick": quick,
        "mode": mode,
        "machine": machine,
        "plan": {"worst_case_s": budget, "assumption": assumption, "sizes": {k: v for k, v in sizes.items()},
                 "skipped": skipped},
        "sections": {name: {"status": "pending", "planned_s": budget.get(name)} for name in SECTIONS},
        "durations_s": {},
        "complete": False,
    }
    results = Results(out, stem, report)
    results.save()
    log(f"writing {results.json_path} (and {stem}.md) after every race")
    try:
        failed = run_sections(check, results, log=log)
    finally:
        report["total_s"] = round(time.perf_counter() - began, 1)
        results.save()
    report["complete"] = True
    results.save()
    log(f"wrote {results.json_path} and {stem}.md in {report['total_s']} s")
    if failed:
        details = "; ".join(
            f"{name} ({report['sections'][name]['error']['type']}: {report['sections'][name]['error']['message']})"
            for name in failed
        )
        print(f"gpu_check: {len(failed)} section(s) failed: {details}. The file holds the others.", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
