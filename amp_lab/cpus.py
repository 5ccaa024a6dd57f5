"""The CPU's facts for mixed precision: its bf16/fp16 instruction sets (x86 ``flags`` and ARM ``Features`` in
``/proc/cpuinfo``, ``sysctl`` on macOS), the limits a process sets on the ISA oneDNN and MKL may use, and the
course's one answer to "does this CPU multiply bf16/fp16 in hardware?" (:func:`cpu_has_native`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ._checks import ArgumentTypeError, check_bool, check_optional_str
from .dtypes import parse_dtype


def check_flags(flags, name: str = "flags") -> dict:
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
    apple_silicon = values.get("hw.optional.arm64") == "1" or any(
        k.startswith("hw.optional.arm.") for k in values
    )
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


_MKL_NEEDS = {
    "avx512_bf16": "AVX512_E3",
    "amx_bf16": "AVX512_E4",
    "avx512_fp16": "AVX512_E4",
    "amx_fp16": "AVX512_E4",
}


def cpu_isa_limits(env: dict[str, str] | None = None) -> dict[str, str]:
    """The x86 bf16/fp16 instruction sets that the environment keeps torch's CPU matmuls from using:
    ``{flag key: "VARIABLE=value"}`` (empty when nothing is capped).  ``env`` defaults to
    ``os.environ``; tests pass any mapping.  Reads ``ONEDNN_MAX_CPU_ISA`` (or the older
    ``DNNL_MAX_CPU_ISA``), ``MKL_ENABLE_INSTRUCTIONS`` and ``MKL_CBWR``.  (``00_setup_check``)
    """
    env = os.environ if env is None else env
    if not isinstance(env, Mapping):
        raise ArgumentTypeError(
            f"env must be a dict of environment variables or None, got {type(env).__name__}: {env!r:.80}"
        )
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
    flags = dict(cpu_flags() if flags is None else check_flags(flags))
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
    flags = usable_cpu_flags() if flags is None else check_flags(flags)
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
    flags = usable_cpu_flags() if flags is None else check_flags(flags)
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
