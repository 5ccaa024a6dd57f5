"""What this machine can do for mixed precision.

* ``tensor_core_generation(capability)`` maps a CUDA compute capability to its Tensor Core
  generation and the input types those cores accelerate (taught in ``02_tensor_cores``).
* ``cpu_flags()`` reads the CPU's bf16/fp16 instruction sets (x86 ``flags`` and ARM ``Features``
  in ``/proc/cpuinfo``, ``sysctl`` on macOS); ``cpu_has_native(dtype)`` is the course's one answer
  to "does this CPU multiply bf16/fp16 in hardware?".
* ``amp_dtype_for(device_type, capability)`` is the course's one dtype decision: bfloat16 on CUDA
  GPUs from Ampere (8.0) on and on CPUs, float16 on Volta/Turing and older GPUs and on Apple GPUs.
* ``machine_verdict(...)`` / ``verdict_for(...)`` turn hardware facts into a *prediction*: which
  dtype to race, whether it needs a GradScaler, and whether AMP should beat FP32 here.  Pure
  functions, so tests and notebooks can feed any machine (``report_for`` builds another machine's
  report).  Notebook 06 measures what they predict.
* ``describe()`` reports torch, the GPU (if any), the CPU's instructions, threads, the TF32
  setting and the verdict (``00_setup_check``, ``06_timing_race``, ``07_amp_training_recipe``).
* ``setup_banner(device)`` is the one-line-per-fact summary every notebook's setup cell prints.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

import torch

from ._checks import ArgumentTypeError, check_bool, check_instance, check_optional_str
from .device import get_device
from .dtypes import parse_dtype
from .gpus import (
    _DOUBLE_RATE_FP16,
    DEVICE_TYPES,
    TensorCoreGeneration,
    amp_dtype_for,
    arch_advice,
    arch_supported,
    bf16_hardware,
    check_capability,
    tensor_core_generation,
)


def _check_flags(flags, name: str = "flags") -> dict:
    """A CPU's flags (:func:`cpu_flags`): a dict of flag name -> True, False or None."""
    if not isinstance(flags, Mapping):
        raise ArgumentTypeError(
            f"{name} must be a dict of CPU flags (hardware.cpu_flags()), got {type(flags).__name__}: {flags!r:.80}"
        )
    for key, value in flags.items():
        if value is not None:
            try:
                check_bool(f"{name}[{key!r}]", value)
            except ArgumentTypeError:
                raise ArgumentTypeError(
                    f"{name}[{key!r}] must be True, False or None (unknown), got {value!r:.80}"
                ) from None
    return flags




# --------------------------------------------------------------------------------------------
# CPU features
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuFeature:
    """One CPU instruction set that multiplies a low-precision dtype in hardware.

    ``token`` is its name in Linux ``/proc/cpuinfo`` (the ``flags`` line on x86, ``Features`` on
    ARM); ``sysctl`` its name on macOS, where macOS reports it.
    """

    key: str
    label: str
    arch: str
    dtype: torch.dtype
    token: str
    sysctl: str | None = None


# Only instruction sets that torch's CPU matmuls actually use count as "native":
# * x86: oneDNN (torch's mkldnn) runs bf16 matmuls on AVX512-BF16 dot products or AMX-BF16 tiles,
#   fp16 matmuls on AVX512-FP16 or AMX-FP16.  A CPU without them still runs bf16 (oneDNN or ATen
#   convert to FP32 and back), which is the emulation that makes AMP slower than FP32 there.
# * ARM: FEAT_BF16 (``bf16``: BFDOT/BFMMLA; ``svebf16`` is the SVE form) is what torch checks
#   (cpuinfo_has_arm_bf16) before sending bf16 matmuls to oneDNN + Arm Compute Library, on
#   Neoverse V1 (Graviton 3) and later.
# Deliberately *not* counted: ``i8mm`` (int8 matrix multiply: quantised inference, never a bf16 or
# fp16 matmul), and ``fphp``/``asimdhp`` (FP16 arithmetic): which fp16 matmul kernel torch picks on
# ARM has changed between releases and often accumulates through FP32 conversions, so claiming
# "native fp16" there could be false.  fp16 on ARM is reported as unknown: the race measures it.
CPU_FEATURES = (
    CpuFeature("avx512_bf16", "AVX512-BF16", "x86", torch.bfloat16, "avx512_bf16"),
    CpuFeature("amx_bf16", "AMX-BF16", "x86", torch.bfloat16, "amx_bf16"),
    CpuFeature("avx512_fp16", "AVX512-FP16", "x86", torch.float16, "avx512_fp16"),
    CpuFeature("amx_fp16", "AMX-FP16", "x86", torch.float16, "amx_fp16"),
    CpuFeature("arm_bf16", "ARM BF16", "arm", torch.bfloat16, "bf16", "hw.optional.arm.FEAT_BF16"),
    CpuFeature("arm_sve_bf16", "ARM SVE-BF16", "arm", torch.bfloat16, "svebf16"),
)
CPU_FLAGS = {f.key: f.label for f in CPU_FEATURES}

# ARM cores by (CPU implementer, CPU part) from /proc/cpuinfo, for a readable CPU name.
_ARM_PARTS = {
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4F): "Neoverse-V2",
    (0x41, 0xD84): "Neoverse-V3",
    (0x41, 0xD8E): "Neoverse-N3",
    (0xC0, 0xAC3): "AmpereOne",
}


def read_cpuinfo() -> str | None:
    """This machine's ``/proc/cpuinfo`` text, or None off Linux (or if it cannot be read)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def read_sysctl() -> str | None:
    """This Mac's ``sysctl machdep.cpu.brand_string hw.optional`` text, or None elsewhere.

    Apple silicon lists its ARM features there (``hw.optional.arm.FEAT_BF16: 1`` from the M2 on);
    :func:`cpu_flags` and :func:`cpu_model` take this text as ``sysctl=``, so tests feed any Mac's.
    """
    if sys.platform != "darwin":
        return None
    exe = "/usr/sbin/sysctl" if os.path.exists("/usr/sbin/sysctl") else "sysctl"
    try:
        done = subprocess.run(
            [exe, "machdep.cpu.brand_string", "hw.optional"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout or None


def _key_values(text: str) -> dict[str, str]:
    pairs = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in pairs:
            pairs[key.strip()] = value.strip()
    return pairs


def _flags_from_cpuinfo(cpuinfo: str) -> dict[str, bool | None]:
    tokens: dict[str, set[str]] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        arch = {"flags": "x86", "Features": "arm"}.get(key.strip())
        if arch:
            tokens.setdefault(arch, set()).update(value.split())
    # An instruction set of the other architecture is not "absent" but not applicable: None.
    return {f.key: (f.token in tokens[f.arch] if f.arch in tokens else None) for f in CPU_FEATURES}


def _flags_from_sysctl(sysctl: str) -> dict[str, bool | None]:
    values = _key_values(sysctl)
    apple_silicon = values.get("hw.optional.arm64") == "1" or any(k.startswith("hw.optional.arm.") for k in values)
    flags: dict[str, bool | None] = dict.fromkeys(CPU_FLAGS)
    if apple_silicon:
        for f in CPU_FEATURES:
            if f.sysctl and f.sysctl in values:  # older macOS versions do not list FEAT_*: unknown
                flags[f.key] = values[f.sysctl] == "1"
    # Intel Macs: macOS lists no bf16/fp16 instruction sets, so they stay unknown.
    return flags


def cpu_flags(cpuinfo: str | None = None, *, sysctl: str | None = None) -> dict[str, bool | None]:
    """Whether the CPU has each bf16/fp16 instruction set in :data:`CPU_FLAGS`: True, False, or
    None (unknown, or an instruction set of another architecture).

    Reads ``/proc/cpuinfo`` on Linux (x86 ``flags`` and ARM ``Features``) and ``sysctl`` on macOS.
    Tests pass the text instead: ``cpuinfo=`` (Linux) or ``sysctl=`` (macOS).
    Taught in ``00_setup_check``.
    """
    check_optional_str("cpuinfo", cpuinfo, "the text of /proc/cpuinfo")
    check_optional_str("sysctl", sysctl, "the text of sysctl's output")
    if cpuinfo is None and sysctl is None:
        cpuinfo, sysctl = read_cpuinfo(), read_sysctl()
    if cpuinfo is not None:
        return _flags_from_cpuinfo(cpuinfo)
    if sysctl is not None:
        return _flags_from_sysctl(sysctl)
    return dict.fromkeys(CPU_FLAGS)


# What the environment lets torch's CPU matmuls use.  A CPU may have AVX512-BF16 while oneDNN or MKL is
# told to stay below it (the course's own simulated machines do this: see CONTRIBUTING.md, "The machine
# matrix"); then bf16 runs emulated, exactly as on a CPU without the instructions, and the course must
# size and read its races that way.  Each ladder lists the levels from lowest; an instruction set is
# usable when the cap is at or above the level that brings it.  Unknown values cap nothing.
_ONEDNN_LADDER = (
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16",
)  # fmt: skip
_ONEDNN_ALIASES = {
    "AVX10_1_512": "AVX512_CORE_FP16",
    "AVX10_1_512_AMX": "AVX512_CORE_AMX",
    "AVX10_1_512_AMX_FP16": "AVX512_CORE_AMX_FP16",
}
_ONEDNN_NEEDS = {
    "avx512_bf16": "AVX512_CORE_BF16",
    "amx_bf16": "AVX512_CORE_AMX",
    "avx512_fp16": "AVX512_CORE_FP16",
    "amx_fp16": "AVX512_CORE_AMX_FP16",
}
# MKL_ENABLE_INSTRUCTIONS / MKL_CBWR: AVX512_E3 adds BF16 (Cooper Lake), AVX512_E4 AMX and FP16
# (Sapphire Rapids).  MKL_CBWR=COMPATIBLE selects MKL's SSE2-class reproducible code paths.
_MKL_LADDER = ("COMPATIBLE", "SSE2", "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "AVX", "AVX2", "AVX2_E1",
               "AVX512", "AVX512_E1", "AVX512_E2", "AVX512_E3", "AVX512_E4")  # fmt: skip
_MKL_NEEDS = {"avx512_bf16": "AVX512_E3", "amx_bf16": "AVX512_E4", "avx512_fp16": "AVX512_E4", "amx_fp16": "AVX512_E4"}


def cpu_isa_limits(env: dict[str, str] | None = None) -> dict[str, str]:
    """The x86 bf16/fp16 instruction sets that the environment keeps torch's CPU matmuls from using:
    ``{flag key: "VARIABLE=value"}`` (empty when nothing is capped).  ``env`` defaults to
    ``os.environ``; tests pass any mapping.  Reads ``ONEDNN_MAX_CPU_ISA`` (or the older
    ``DNNL_MAX_CPU_ISA``), ``MKL_ENABLE_INSTRUCTIONS`` and ``MKL_CBWR``.  (``00_setup_check``)
    """
    env = os.environ if env is None else env
    if not isinstance(env, Mapping):
        raise ArgumentTypeError(f"env must be a dict of environment variables or None, got {type(env).__name__}: {env!r:.80}")
    limits: dict[str, str] = {}
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        raw = str(env.get(var, "")).strip()
        value = _ONEDNN_ALIASES.get(raw.upper(), raw.upper())
        if value in _ONEDNN_LADDER:
            level = _ONEDNN_LADDER.index(value)
            for key, needed in _ONEDNN_NEEDS.items():
                if level < _ONEDNN_LADDER.index(needed):
                    limits.setdefault(key, f"{var}={raw}")
            break
    for var in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR"):
        raw = str(env.get(var, "")).strip()
        value = raw.upper().split(",")[0].strip()
        if value in _MKL_LADDER:
            level = _MKL_LADDER.index(value)
            for key, needed in _MKL_NEEDS.items():
                if level < _MKL_LADDER.index(needed):
                    limits.setdefault(key, f"{var}={raw}")
    return limits


def usable_cpu_flags(
    flags: dict[str, bool | None] | None = None, env: dict[str, str] | None = None
) -> dict[str, bool | None]:
    """:func:`cpu_flags` with every instruction set the environment forbids torch to use
    (:func:`cpu_isa_limits`) turned to False: what torch's matmuls can actually use here."""
    flags = dict(cpu_flags() if flags is None else _check_flags(flags))
    for key in cpu_isa_limits(env):
        if flags.get(key):
            flags[key] = False
    return flags


def cpu_has_native(dtype, flags: dict[str, bool | None] | None = None) -> bool | None:
    """Whether this CPU multiplies ``dtype`` (bfloat16 or float16) in hardware: True, False, or None
    (unknown).  ``flags`` defaults to :func:`cpu_flags` of this machine; tests pass any machine's.

    The one place that decides "native or emulated" for the course: the verdict, the race's
    sizes and its explanations all ask here.  True when any instruction set for ``dtype`` in
    :data:`CPU_FEATURES` is present (x86 or ARM), False when none is and at least one is known to
    be absent, None when nothing is known.
    """
    dtype = parse_dtype(dtype)
    flags = usable_cpu_flags() if flags is None else _check_flags(flags)
    values = [flags.get(f.key) for f in CPU_FEATURES if f.dtype == dtype]
    if any(values):
        return True
    if all(v is None for v in values):
        return None
    return False


def cpu_native_labels(dtype, flags: dict[str, bool | None] | None = None) -> tuple[str, ...]:
    """The labels of the instruction sets for ``dtype`` this CPU has (``("AMX-BF16", ...)``), or
    of those it is known to lack when it has none; empty when nothing is known.  For sentences
    such as "this CPU has no AVX512-BF16 or AMX-BF16"."""
    dtype = parse_dtype(dtype)
    flags = usable_cpu_flags() if flags is None else _check_flags(flags)
    features = [f for f in CPU_FEATURES if f.dtype == dtype]
    present = tuple(f.label for f in features if flags.get(f.key))
    return present or tuple(f.label for f in features if flags.get(f.key) is False)


def cpu_model(cpuinfo: str | None = None, *, sysctl: str | None = None) -> str:
    """A readable name of the CPU: x86 ``model name``, the ARM core from ``CPU implementer`` and
    ``CPU part``, or macOS ``machdep.cpu.brand_string``.  Tests pass the text as for :func:`cpu_flags`."""
    check_optional_str("cpuinfo", cpuinfo, "the text of /proc/cpuinfo")
    check_optional_str("sysctl", sysctl, "the text of sysctl's output")
    if cpuinfo is None and sysctl is None:
        cpuinfo, sysctl = read_cpuinfo(), read_sysctl()
    if cpuinfo:
        values = _key_values(cpuinfo)
        if values.get("model name"):
            return values["model name"]
        try:
            implementer, part = int(values["CPU implementer"], 16), int(values["CPU part"], 16)
        except (KeyError, ValueError):
            pass
        else:
            name = _ARM_PARTS.get((implementer, part))
            return f"ARM {name}" if name else f"ARM CPU (implementer {implementer:#x}, part {part:#x})"
    if sysctl:
        brand = _key_values(sysctl).get("machdep.cpu.brand_string")
        if brand:
            return brand
    return platform.processor() or platform.machine() or "unknown"


# --------------------------------------------------------------------------------------------
# The machine report
# --------------------------------------------------------------------------------------------

_EXPECT = {
    True: "AMP faster than FP32 on large matmuls",
    False: "AMP not faster than FP32",
    None: "no prediction, the measurement decides",
}


@dataclass
class MachineReport:
    """Everything the course needs to know about this machine (see ``describe``).

    ``race_dtype`` is the course's one recommended low-precision dtype for ``race_device``
    (:func:`amp_dtype_for`); ``verdict``, ``use_scaler``, ``expect_speedup`` and ``reasons`` are
    :func:`machine_verdict`'s prediction for it.
    """

    torch_version: str
    python_version: str
    platform: str
    cuda_available: bool
    cuda_version: str | None
    gpu_name: str | None
    capability: tuple[int, int] | None
    tensor_cores: TensorCoreGeneration | None
    bf16_supported: bool | None
    tf32_matmul: bool
    float32_matmul_precision: str
    cpu_model: str
    cpu_flags: dict[str, bool | None]
    cpu_capability: str
    threads: int
    race_device: str
    race_dtype: torch.dtype
    verdict: str
    notes: list[str] = field(default_factory=list)
    mps_available: bool = False
    use_scaler: bool = False
    expect_speedup: bool | None = None
    reasons: tuple[str, ...] = ()
    arch_supported: bool | None = None  # does this torch build have kernels for the GPU (None: no GPU)
    arch_list: tuple[str, ...] = ()  # torch.cuda.get_arch_list()

    @property
    def system(self) -> str | None:
        """``platform.system()`` of the machine described (``"Darwin"`` on a Mac), read from ``platform``."""
        return self.platform.split()[0] if self.platform else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["race_dtype"] = str(self.race_dtype).removeprefix("torch.")
        return d

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) pairs in reading order."""

        def yn(v):
            return "unknown" if v is None else ("yes" if v else "no")

        rows = [
            ("torch", self.torch_version),
            ("python", f"{self.python_version} on {self.platform}"),
            ("CUDA available", yn(self.cuda_available)),
        ]
        if self.cuda_available:
            cap = f"compute capability {self.capability[0]}.{self.capability[1]}" if self.capability else "capability unknown"
            rows += [
                ("GPU", f"{self.gpu_name} ({cap})"),
                ("CUDA (torch build)", str(self.cuda_version)),
                ("Tensor Cores", self.tensor_cores.summary if self.tensor_cores else "unknown"),
                ("GPU kernels in this torch", self._kernels_text()),
                ("bf16 Tensor Cores", yn(self.bf16_supported)),
                ("TF32 for FP32 matmuls", f"{yn(self.tf32_matmul)} (float32 matmul precision '{self.float32_matmul_precision}')"),
            ]
        if self.mps_available:
            rows += [("MPS (Apple GPU)", "yes")]
        rows += [("CPU", self.cpu_model)]
        known = [(key, label) for key, label in CPU_FLAGS.items() if self.cpu_flags.get(key) is not None]
        if known:
            rows += [(f"CPU {label}", yn(self.cpu_flags[key])) for key, label in known]
        else:
            rows += [("CPU bf16/fp16 instructions", "unknown")]
        scaler = "with a GradScaler" if self.use_scaler else "no GradScaler"
        rows += [
            ("torch CPU kernels", self.cpu_capability),
            ("CPU threads (torch)", str(self.threads)),
            ("race", f"{self.race_device} {str(self.race_dtype).removeprefix('torch.')}, {scaler}"),
            ("verdict", self.verdict),
        ]
        return rows

    def _kernels_text(self) -> str:
        listed = ", ".join(self.arch_list) or "none"
        if self.arch_supported is None:
            return f"unknown (built for {listed})"
        return f"{'yes' if self.arch_supported else 'NO: no kernels for this GPU'} (built for {listed})"

    def explain(self) -> str:
        """The verdict, the facts behind it, and what it predicts (``00_setup_check`` prints this)."""
        dtype = str(self.race_dtype).removeprefix("torch.")
        scaler = "with a GradScaler" if self.use_scaler else "no GradScaler needed"
        lines = [f"verdict: {self.verdict}", "why:"]
        lines += [f"  - {r}" for r in self.reasons]
        lines.append(f"so: autocast to {dtype} on {self.race_device}, {scaler}; expected before measuring: "
                     f"{_EXPECT[self.expect_speedup]} (notebook 06 measures it)")
        return "\n".join(lines)

    def __str__(self) -> str:
        rows = self.lines()
        width = max(len(k) for k, _ in rows)
        text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
        if self.notes:
            text += "\n" + "\n".join(f"note: {n}" for n in self.notes)
        return text


# --------------------------------------------------------------------------------------------
# The one dtype decision, and the verdict
# --------------------------------------------------------------------------------------------






@dataclass(frozen=True)
class Verdict:
    """What :func:`machine_verdict` predicts for one machine.

    ``text`` is the one-line verdict; ``device`` and ``dtype`` what the course races;
    ``use_scaler`` whether that dtype needs a GradScaler; ``expect_speedup`` whether AMP should
    beat FP32 on large matmuls here (None: no prediction, measure it); ``reasons`` the facts behind
    it, one sentence each.  A prediction from hardware facts, never a measurement.
    """

    text: str
    device: str
    dtype: torch.dtype
    use_scaler: bool
    expect_speedup: bool | None
    reasons: tuple[str, ...]


_MEASURES = "; the race measures it"


def _cuda_verdict(tensor_cores: TensorCoreGeneration | None) -> Verdict:
    if tensor_cores is None:
        return Verdict(
            "CUDA GPU of unknown compute capability: float16 with a GradScaler; whether AMP pays off "
            "here is for the race to measure",
            "cuda", torch.float16, True, None,
            ("Without the compute capability the course cannot tell which Tensor Cores this GPU has; "
             "float16 runs on every CUDA GPU.",),
        )  # fmt: skip
    tc = tensor_cores
    gpu = f"CUDA {tc.architecture} GPU (sm_{tc.capability[0]}{tc.capability[1]})"
    dtype = amp_dtype_for("cuda", tc.capability)
    if not tc.has_tensor_cores:
        if tc.capability in _DOUBLE_RATE_FP16:
            expect, hope = None, "expect a modest speed-up at most, from its double-rate FP16 units"
        else:
            expect, hope = False, "expect little or no speed-up"
        return Verdict(
            f"{gpu} without Tensor Cores: float16 with a GradScaler, for the memory it saves; {hope}{_MEASURES}",
            "cuda", dtype, True, expect,
            ("GPUs before Volta have no Tensor Cores: float16 matmuls run on the ordinary CUDA cores.",
             "float16 still halves the memory of activations, so larger batches fit.",
             "float16's narrow range needs a GradScaler."),
        )  # fmt: skip
    if dtype == torch.bfloat16:
        return Verdict(
            f"{gpu}: bfloat16 on Tensor Cores, no GradScaler needed; expect AMP to be clearly faster than "
            f"FP32 on large matmuls{_MEASURES}",
            "cuda", dtype, False, True,
            (f"{tc.architecture} Tensor Cores multiply bfloat16 as fast as float16.",
             "bfloat16 keeps FP32's exponent range, so gradients do not underflow and no GradScaler is needed.",
             "Small matmuls gain little: kernel launches and casts, not arithmetic, set their pace."),
        )  # fmt: skip
    return Verdict(
        f"{gpu}: float16 on Tensor Cores, with a GradScaler; expect AMP to be clearly faster than FP32 "
        f"on large matmuls{_MEASURES}",
        "cuda", dtype, True, True,
        (f"{tc.architecture} Tensor Cores multiply float16 but not bfloat16, which would run on the "
         "ordinary CUDA cores here.",
         "float16's narrow range needs a GradScaler.",
         "Small matmuls gain little: kernel launches and casts, not arithmetic, set their pace."),
    )  # fmt: skip


def _cpu_verdict(flags: dict[str, bool | None], system: str | None) -> Verdict:
    native = cpu_has_native(torch.bfloat16, flags)
    labels = cpu_native_labels(torch.bfloat16, flags)
    bf16 = torch.bfloat16
    if native and system == "Darwin":
        return Verdict(
            f"Apple CPU with {' and '.join(labels)}: bfloat16, no GradScaler needed; expect AMP to be no "
            f"faster than FP32, whose matmuls run on Apple's matrix units{_MEASURES}",
            "cpu", bf16, False, False,
            ("This CPU multiplies bfloat16 in its vector units.",
             "torch's FP32 matmuls on a Mac go to Apple's Accelerate library, which runs them on the "
             "chip's matrix units; bfloat16 matmuls cannot use that path.",
             "bfloat16 needs no GradScaler."),
        )  # fmt: skip
    if native:
        return Verdict(
            f"CPU with {' and '.join(labels)}: bfloat16, no GradScaler needed; expect AMP to be faster than "
            f"FP32 on large matrices and slower on small ones{_MEASURES}",
            "cpu", bf16, False, True,
            (f"{' and '.join(labels)} multiply bfloat16 in hardware, and torch's matmuls (oneDNN) use them.",
             "On small matrices the casts to and from bfloat16 cost more than the faster multiply saves.",
             "bfloat16 needs no GradScaler."),
        )  # fmt: skip
    if native is None:
        return Verdict(
            "CPU with unknown bf16 support: bfloat16, no GradScaler needed; whether AMP pays off here is "
            "for the race to measure",
            "cpu", bf16, False, None,
            ("This system does not report the CPU's instruction sets, so the course cannot predict.",
             "bfloat16 needs no GradScaler."),
        )  # fmt: skip
    lacking = " or ".join(labels)
    return Verdict(
        f"CPU without bf16 instructions (no {lacking}): bfloat16 is emulated here; expect AMP to be slower "
        f"than FP32{_MEASURES}",
        "cpu", bf16, False, False,
        (f"Without {lacking}, torch converts bfloat16 to FP32 and back around every multiply.",
         "The conversions are pure overhead, so FP32 should win at every size.",
         "The course still runs bfloat16 here: the recipe is the same on every machine."),
    )  # fmt: skip


def machine_verdict(
    *,
    cuda_available: bool,
    tensor_cores: TensorCoreGeneration | None,
    flags: dict[str, bool | None],
    device_type: str | None = None,
    system: str | None = None,
) -> Verdict:
    """The :class:`Verdict` for the given facts; pure, so tests and notebooks can feed any machine.

    ``device_type`` is the device the course runs on (default: ``"cuda"`` when available, else
    ``"cpu"``); ``tensor_cores`` describes the GPU (:func:`tensor_core_generation`); ``flags`` the
    CPU (:func:`cpu_flags`); ``system`` is ``platform.system()`` (``"Darwin"`` on a Mac).
    Taught in ``00_setup_check``; ``06_timing_race`` measures what it predicts.
    """
    cuda_available = check_bool("cuda_available", cuda_available)
    if tensor_cores is not None:
        check_instance("tensor_cores", tensor_cores, TensorCoreGeneration,
                       "a TensorCoreGeneration (hardware.tensor_core_generation(capability)) or None")  # fmt: skip
    flags = _check_flags(flags)
    check_optional_str("device_type", device_type, "'cpu', 'cuda' or 'mps'")
    check_optional_str("system", system, "platform.system()'s name, such as 'Linux' or 'Darwin',")
    if device_type is None:
        device_type = "cuda" if cuda_available else "cpu"
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"device_type={device_type!r} is not allowed; choose one of: {', '.join(DEVICE_TYPES)}")
    if device_type == "cuda":
        return _cuda_verdict(tensor_cores)
    if device_type == "mps":
        return Verdict(
            f"Apple GPU (MPS): float16, autocast's MPS default, with a GradScaler; expect a modest speed-up "
            f"at most{_MEASURES}",
            "mps", amp_dtype_for("mps"), True, None,
            ("Apple GPUs have no Tensor Cores: float16 mainly halves the bytes moved, and small models "
             "are limited by the time to launch each kernel.",
             "float16's narrow range needs a GradScaler."),
        )  # fmt: skip
    return _cpu_verdict(flags, system)


def verdict_for(
    *,
    cuda_available: bool,
    tensor_cores: TensorCoreGeneration | None,
    flags: dict[str, bool | None],
    device_type: str | None = None,
    system: str | None = None,
) -> tuple[str, str, torch.dtype]:
    """(verdict, race device, race dtype) for the given facts; pure, so tests can feed any machine.

    The short form of :func:`machine_verdict` (same arguments); the dtype is :func:`amp_dtype_for`'s.
    """
    v = machine_verdict(
        cuda_available=cuda_available, tensor_cores=tensor_cores, flags=flags, device_type=device_type, system=system
    )
    return v.text, v.device, v.dtype


def tf32_matmul_enabled() -> bool:
    """Whether FP32 matmuls on CUDA may run on TF32 Tensor Cores right now.

    Reads ``torch.backends.cuda.matmul.fp32_precision`` ("ieee"/"tf32"; torch resolves "none" through
    the generic ``torch.backends.fp32_precision``).  Reading it never trips torch's legacy/new mixing
    check, whereas reading ``allow_tf32`` raises once a program has set only the new flag.
    """
    return torch.backends.cuda.matmul.fp32_precision == "tf32"


# --------------------------------------------------------------------------------------------
# TF32: one switch that cuBLAS can always read
# --------------------------------------------------------------------------------------------
#
# torch >= 2.9 keeps two records of "may FP32 matmuls use TF32": the legacy float32 matmul
# precision ("highest"/"high"/"medium", set by torch.set_float32_matmul_precision and by
# torch.backends.cuda.matmul.allow_tf32) and the new per-backend fp32_precision ("none"/"ieee"/
# "tf32"/"bf16", for (backend, op) pairs that inherit "none" from (backend, "all") and then from
# ("generic", "all")).  cuBLAS reads both on every FP32 matmul and raises when they disagree, so
# setting only the new flag to "tf32" makes the first FP32 matmul on a GPU fail.  tf32_matmul keeps
# them in agreement, and restores the raw values (including an inherited "none") on the way out.

_PARENT = {("cuda", "matmul"): ("cuda", "all"), ("mkldnn", "matmul"): ("mkldnn", "all"),
           ("cuda", "all"): ("generic", "all"), ("mkldnn", "all"): ("generic", "all")}  # fmt: skip


def _fp32_get(backend: str, op: str) -> str:
    return str(torch._C._get_fp32_precision_getter(backend, op))


def _fp32_set(backend: str, op: str, value: str) -> None:
    torch._C._set_fp32_precision_setter(backend, op, value)


def _raw_fp32_precision(backend: str, op: str) -> str:
    """The value set on (backend, op) itself, "none" when it inherits.  torch's getter resolves
    inheritance, so an inherited value is told from a set one by briefly changing the parent."""
    seen = _fp32_get(backend, op)
    parent = _PARENT.get((backend, op))
    if parent is None or seen == "none":
        return seen
    parent_raw = _raw_fp32_precision(*parent)
    probe = "ieee" if seen != "ieee" else "tf32"
    _fp32_set(*parent, probe)
    try:
        inherits = _fp32_get(backend, op) == probe
    finally:
        _fp32_set(*parent, parent_raw)
    return "none" if inherits else seen


@dataclass(frozen=True)
class Fp32MatmulState:
    """Every setting torch keeps for FP32 matmul precision, raw: the legacy precision and the new
    fp32_precision of CUDA and oneDNN (CPU) matmuls.  ``read`` and ``write`` never trip torch's
    legacy/new mixing checks, whatever mix a program has set."""

    legacy: str  # "highest", "high" or "medium"
    cuda_matmul: str  # "none" (inherit), "ieee" or "tf32"
    mkldnn_matmul: str  # "none" (inherit), "ieee", "tf32" or "bf16"

    @classmethod
    def read(cls) -> Fp32MatmulState:
        cuda, mkldnn = _raw_fp32_precision("cuda", "matmul"), _raw_fp32_precision("mkldnn", "matmul")
        # The legacy getter refuses to answer while the two records disagree; with both matmul
        # precisions briefly "ieee" nothing can disagree, and the legacy value is readable.
        _fp32_set("cuda", "matmul", "ieee")
        _fp32_set("mkldnn", "matmul", "ieee")
        try:
            legacy = torch.get_float32_matmul_precision()
        finally:
            _fp32_set("cuda", "matmul", cuda)
            _fp32_set("mkldnn", "matmul", mkldnn)
        return cls(legacy, cuda, mkldnn)

    def write(self) -> None:
        # set_float32_matmul_precision also sets both matmul precisions: put the raw ones back after it.
        torch.set_float32_matmul_precision(self.legacy)
        _fp32_set("cuda", "matmul", self.cuda_matmul)
        _fp32_set("mkldnn", "matmul", self.mkldnn_matmul)


@contextlib.contextmanager
def tf32_matmul(enabled: bool):
    """Allow (``True``) or forbid (``False``) TF32 for CUDA FP32 matmuls inside the block, then restore
    exactly what was set before.  (``02_tensor_cores``, ``06_timing_race``)

    Both of torch's records (the legacy float32 matmul precision and the new
    ``torch.backends.cuda.matmul.fp32_precision``) are set to agree, so cuBLAS can read the setting:
    setting only the new flag makes every FP32 matmul on a GPU raise "you have used mix of the legacy
    and new APIs".  The CPU's (oneDNN's) matmul precision is left as it is.  The race runs its FP32
    contestant inside ``tf32_matmul(False)`` and its TF32 contestant inside ``tf32_matmul(True)``.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    before = Fp32MatmulState.read()
    if enabled:
        # "high" and "medium" both allow TF32 in the legacy record; keep the one the program chose.
        legacy = before.legacy if before.legacy != "highest" else "high"
    else:
        legacy = "highest"
    Fp32MatmulState(legacy, "tf32" if enabled else "ieee", before.mkldnn_matmul).write()
    try:
        yield
    finally:
        before.write()












def tf32_setting() -> tuple[bool, str]:
    """(TF32 used for FP32 CUDA matmuls?, float32 matmul precision), under either torch API."""
    try:
        precision = torch.get_float32_matmul_precision()
    except RuntimeError:  # the new API was set: the legacy getter refuses to answer
        precision = str(torch.backends.cuda.matmul.fp32_precision)
    return tf32_matmul_enabled(), precision


def _with_verdict(report: MachineReport) -> MachineReport:
    v = machine_verdict(
        cuda_available=report.cuda_available,
        tensor_cores=report.tensor_cores,
        flags=report.cpu_flags,
        device_type=report.race_device,
        system=report.system,
    )
    return replace(
        report,
        race_device=v.device,
        race_dtype=v.dtype,
        verdict=v.text,
        use_scaler=v.use_scaler,
        expect_speedup=v.expect_speedup,
        reasons=v.reasons,
    )


def describe(device=None) -> MachineReport:
    """Describe this machine for mixed precision (taught in ``00_setup_check``).

    ``device`` (default: ``amp_lab.device.get_device()``) decides which device the verdict is
    for; the GPU facts are reported whenever CUDA is available.
    """
    dev = get_device(device)
    cuda = torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None)
    mps_ok = bool(mps is not None and mps.is_available())
    gpu_name = capability = tensor_cores = bf16 = supported = None
    arch_list: tuple[str, ...] = ()
    notes = []
    if cuda:
        idx = dev.index if (dev.type == "cuda" and dev.index is not None) else torch.cuda.current_device()
        gpu_name = torch.cuda.get_device_name(idx)
        capability = tuple(torch.cuda.get_device_capability(idx))
        tensor_cores = tensor_core_generation(capability)
        # Hardware, not torch.cuda.is_bf16_supported(): that counts emulation, and says True on a T4.
        bf16 = bf16_hardware(capability)
        if torch.version.hip is None:  # ROCm builds list gfx targets, not sm_XY
            arch_list = tuple(torch.cuda.get_arch_list())
            supported = arch_supported(capability, list(arch_list))
            advice = arch_advice(capability, list(arch_list), torch.version.cuda)
            if advice:
                notes.append(advice)
    cpuinfo, sysctl = read_cpuinfo(), read_sysctl()
    flags = cpu_flags(cpuinfo, sysctl=sysctl) if (cpuinfo or sysctl) else dict.fromkeys(CPU_FLAGS)
    capped = {key: why for key, why in cpu_isa_limits().items() if flags.get(key)}
    flags = usable_cpu_flags(flags)
    model = cpu_model(cpuinfo, sysctl=sysctl) if (cpuinfo or sysctl) else cpu_model("")
    if dev.type == "mps":
        gpu_name = f"{model} GPU" if model.startswith("Apple") else "Apple GPU"
    tf32_matmul, matmul_precision = tf32_setting()
    if dev.type == "cpu" and os.environ.get("AMP_LAB_DEVICE") == "cpu" and (cuda or mps_ok):
        notes.append("AMP_LAB_DEVICE=cpu: the course runs on the CPU although a GPU is present")
    for key, why in capped.items():
        notes.append(f"{why} keeps torch's matmuls from using this CPU's {CPU_FLAGS[key]}: counted as absent")
    report = MachineReport(
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        cuda_available=cuda,
        cuda_version=torch.version.cuda,
        gpu_name=gpu_name,
        capability=capability,
        tensor_cores=tensor_cores,
        bf16_supported=bf16,
        tf32_matmul=tf32_matmul,
        float32_matmul_precision=matmul_precision,
        cpu_model=model,
        cpu_flags=flags,
        cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
        threads=torch.get_num_threads(),
        race_device=dev.type,
        race_dtype=torch.float32,  # set by the verdict below
        verdict="",
        notes=notes,
        mps_available=mps_ok,
        arch_supported=supported,
        arch_list=arch_list,
    )
    return _with_verdict(report)


def report_for(
    device_type: str = "cpu",
    *,
    capability=None,
    gpu_name: str | None = None,
    flags: dict[str, bool | None] | None = None,
    cpu: str | None = None,
    system: str | None = None,
    base: MachineReport | None = None,
) -> MachineReport:
    """The report of *another* machine: ``base`` (default ``describe("cpu")``) with the hardware
    facts given here, and the verdict recomputed from them.

    ``capability`` is a CUDA GPU's ``(major, minor)``; ``flags`` a CPU's :func:`cpu_flags` (for
    example ``cpu_flags(text)`` of its ``/proc/cpuinfo``); ``system`` is ``"Darwin"`` for a Mac.
    ``07_amp_training_recipe`` walks its decision flow over such machines; tests use it too.
    """
    check_optional_str("device_type", device_type, "'cpu', 'cuda' or 'mps'")
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"device_type={device_type!r} is not allowed; choose one of: {', '.join(DEVICE_TYPES)}")
    for arg, value in (("gpu_name", gpu_name), ("cpu", cpu), ("system", system)):
        check_optional_str(arg, value)
    if flags is not None:
        _check_flags(flags)
    if base is not None:
        check_instance("base", base, MachineReport, "a MachineReport (hardware.describe()) or None")
    if capability is not None:
        check_capability(capability)
    base = describe("cpu") if base is None else base
    cuda = device_type == "cuda"
    tensor_cores = tensor_core_generation(capability) if (cuda and capability is not None) else None
    cap = tensor_cores.capability if tensor_cores else None
    report = replace(
        base,
        cuda_available=cuda,
        gpu_name=(gpu_name or "a CUDA GPU") if cuda else (gpu_name if device_type == "mps" else None),
        capability=cap,
        tensor_cores=tensor_cores,
        bf16_supported=bf16_hardware(cap) if cap else None,
        arch_supported=None,
        arch_list=(),
        cpu_model=base.cpu_model if cpu is None else cpu,
        cpu_flags=base.cpu_flags if flags is None else dict(flags),
        race_device=device_type,
        mps_available=device_type == "mps",
        notes=[],
    )
    if system is not None:
        report = replace(report, platform=f"{system} {'arm64' if system == 'Darwin' else platform.machine()}")
    return _with_verdict(report)


def setup_banner(device=None) -> None:
    """Print the short machine summary every notebook's setup cell shows (use ``describe()`` for the data)."""
    report = describe(device)

    dev = get_device(device)
    where = f"{dev} ({report.gpu_name})" if dev.type in ("cuda", "mps") else f"{dev} ({report.cpu_model})"
    print(f"amp_lab on torch {report.torch_version}, Python {report.python_version}")
    print(f"device: {where}, {report.threads} CPU threads")
    if dev.type == "cuda" and report.tensor_cores is not None:
        print(f"Tensor Cores: {report.tensor_cores.summary}")
        print(f"TF32 for FP32 matmuls: {'on' if report.tf32_matmul else 'off'}")
    print(f"verdict: {report.verdict}")
