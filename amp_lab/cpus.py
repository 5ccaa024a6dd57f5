"""The CPU's facts: its bf16/fp16 instruction sets (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS), the ISA
limits the environment sets, and the one answer to "does this CPU multiply bf16/fp16 in hardware?"."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ._checks import check_bool, check_instance


def check_flags(flags, name: str = "flags") -> dict:
    """A CPU's flags (:func:`cpu_flags`): a dict of flag name -> True, False or None."""
    check_instance(name, flags, Mapping, "a dict of CPU flags (cpus.cpu_flags())")
    for key, value in flags.items():
        if value is not None:  # None: unknown
            check_bool(f"{name}[{key!r}]", value)
    return flags


@dataclass(frozen=True)
class CpuFeature:
    """One CPU instruction set that multiplies a low-precision dtype in hardware: ``token`` names it in
    ``/proc/cpuinfo`` (x86 ``flags``, ARM ``Features``), ``sysctl`` on macOS."""

    key: str
    label: str
    arch: str
    dtype: torch.dtype
    token: str
    sysctl: str | None = None


# Only instruction sets torch's CPU matmuls use count: oneDNN's AVX512/AMX BF16 and FP16 on x86, FEAT_BF16
# (``bf16``, ``svebf16``) on ARM.  Not ``i8mm`` (int8) nor ``fphp``/``asimdhp`` (torch's ARM fp16 kernels
# often accumulate through FP32): fp16 on ARM is unknown, and the race measures it.
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
    """This Mac's ``sysctl machdep.cpu.brand_string hw.optional`` text (``hw.optional.arm.FEAT_BF16: 1`` from
    the M2 on), or None elsewhere."""
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


def cpu_flags(cpuinfo: str | None = None, *, sysctl: str | None = None) -> dict[str, bool | None]:
    """Whether the CPU has each instruction set of :data:`CPU_FLAGS`: True, False or None (unknown, or of
    another architecture), from ``cpuinfo`` (Linux) or ``sysctl`` (macOS) text, this machine's by default."""
    if cpuinfo is None and sysctl is None:
        cpuinfo, sysctl = read_cpuinfo(), read_sysctl()
    if cpuinfo is not None:
        tokens: dict[str, set[str]] = {}
        for line in cpuinfo.splitlines():
            key, _, value = line.partition(":")
            arch = {"flags": "x86", "Features": "arm"}.get(key.strip())
            if arch:
                tokens.setdefault(arch, set()).update(value.split())
        return {f.key: (f.token in tokens[f.arch] if f.arch in tokens else None) for f in CPU_FEATURES}
    flags: dict[str, bool | None] = dict.fromkeys(CPU_FLAGS)
    values = _key_values(sysctl or "")
    if values.get("hw.optional.arm64") == "1" or any(k.startswith("hw.optional.arm.") for k in values):
        for f in CPU_FEATURES:  # older macOS lists no FEAT_*, Intel Macs no bf16/fp16: unknown
            if f.sysctl in values:
                flags[f.key] = values[f.sysctl] == "1"
    return flags


# What the environment lets torch's CPU matmuls use: told to stay below AVX512-BF16 (as the course's simulated
# machines are), a bf16 CPU emulates bf16.  Each ladder lists levels from lowest; unknown values cap nothing.
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
# MKL: AVX512_E3 adds BF16, AVX512_E4 AMX and FP16; MKL_CBWR=COMPATIBLE is SSE2-class.
_MKL_LADDER = ("COMPATIBLE", "SSE2", "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "AVX", "AVX2", "AVX2_E1",
               "AVX512", "AVX512_E1", "AVX512_E2", "AVX512_E3", "AVX512_E4")  # fmt: skip
_MKL_NEEDS = {
    "avx512_bf16": "AVX512_E3",
    "amx_bf16": "AVX512_E4",
    "avx512_fp16": "AVX512_E4",
    "amx_fp16": "AVX512_E4",
}


def cpu_isa_limits(env: dict[str, str] | None = None) -> dict[str, str]:
    """``{flag key: "VARIABLE=value"}``: the x86 instruction sets ``env`` (default ``os.environ``) keeps torch's
    CPU matmuls from using, through ``ONEDNN_MAX_CPU_ISA``/``DNNL_MAX_CPU_ISA``, ``MKL_ENABLE_INSTRUCTIONS``
    and ``MKL_CBWR``."""
    env = os.environ if env is None else env
    onednn = "ONEDNN_MAX_CPU_ISA" if "ONEDNN_MAX_CPU_ISA" in env else "DNNL_MAX_CPU_ISA"  # the older name
    limits: dict[str, str] = {}
    for var, ladder, needs in (
        (onednn, _ONEDNN_LADDER, _ONEDNN_NEEDS),
        ("MKL_ENABLE_INSTRUCTIONS", _MKL_LADDER, _MKL_NEEDS),
        ("MKL_CBWR", _MKL_LADDER, _MKL_NEEDS),
    ):
        raw = str(env.get(var, "")).strip()
        value = raw.upper().split(",")[0].strip()
        value = _ONEDNN_ALIASES.get(value, value)
        if value in ladder:
            for key, needed in needs.items():
                if ladder.index(value) < ladder.index(needed):
                    limits.setdefault(key, f"{var}={raw}")
    return limits


def usable_cpu_flags(
    flags: dict[str, bool | None] | None = None, env: dict[str, str] | None = None
) -> dict[str, bool | None]:
    """:func:`cpu_flags` with every instruction set :func:`cpu_isa_limits` forbids turned to False."""
    flags = dict(cpu_flags() if flags is None else flags)
    return flags | {key: False for key in cpu_isa_limits(env) if flags.get(key)}


def cpu_has_native(dtype: torch.dtype, flags: dict[str, bool | None] | None = None) -> bool | None:
    """Whether this CPU multiplies ``dtype`` (bfloat16 or float16) in hardware: True, False, or None
    (unknown); ``flags`` default to this machine's usable ones.  The course's one "native or emulated"."""
    flags = usable_cpu_flags() if flags is None else flags
    values = [flags.get(f.key) for f in CPU_FEATURES if f.dtype == dtype]
    return True if any(values) else None if all(v is None for v in values) else False


def cpu_native_labels(dtype: torch.dtype, flags: dict[str, bool | None]) -> tuple[str, ...]:
    """The labels of the instruction sets for ``dtype`` this CPU has, or of those it is known to lack when it
    has none (for "this CPU has no AVX512-BF16 or AMX-BF16"); empty when nothing is known."""
    features = [f for f in CPU_FEATURES if f.dtype == dtype]
    present = tuple(f.label for f in features if flags.get(f.key))
    return present or tuple(f.label for f in features if flags.get(f.key) is False)


def cpu_model(cpuinfo: str | None = None, *, sysctl: str | None = None) -> str:
    """A readable name of the CPU: x86 ``model name``, the ARM core, or macOS ``machdep.cpu.brand_string``."""
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
    brand = _key_values(sysctl or "").get("machdep.cpu.brand_string")
    return brand or platform.processor() or platform.machine() or "unknown"
