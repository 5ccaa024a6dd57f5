"""What this machine can do for mixed precision.

* ``tensor_core_generation(capability)`` maps a CUDA compute capability to its Tensor Core
  generation and the input types those cores accelerate (taught in ``02_tensor_cores``).
* ``describe()`` reports torch, the GPU (if any), the CPU's bf16/fp16 instructions, threads,
  the TF32 setting, and a verdict: which precision this machine should race
  (``00_setup_check``, ``06_timing_race``, ``07_amp_training_recipe``).
* ``setup_banner(device)`` is the one-line-per-fact summary every notebook's setup cell prints.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from numbers import Integral

import torch


@dataclass(frozen=True)
class TensorCoreGeneration:
    """Tensor Cores of one CUDA compute capability."""

    capability: tuple[int, int]
    architecture: str
    generation: int | None
    precisions: tuple[str, ...]
    summary: str

    @property
    def has_tensor_cores(self) -> bool:
        return self.generation is not None


# (major, minor) -> (architecture, Tensor Core generation, low-precision inputs they multiply, note)
_EXACT = {
    (7, 0): ("Volta", 1, ("fp16",), "first Tensor Cores: FP16 inputs, FP16 or FP32 accumulation"),
    (7, 2): ("Volta (Jetson Xavier)", 1, ("fp16", "int8"), "Xavier's Volta Tensor Cores add INT8, as Turing's do"),
    (7, 5): ("Turing", 2, ("fp16", "int8", "int4"), "adds INT8/INT4 for inference"),
    (8, 0): ("Ampere", 3, ("fp16", "bf16", "tf32", "int8", "int4"), "adds BF16 and TF32 (FP32 matmuls on Tensor Cores)"),
    (8, 6): ("Ampere", 3, ("fp16", "bf16", "tf32", "int8", "int4"), "adds BF16 and TF32 (FP32 matmuls on Tensor Cores)"),
    (8, 7): ("Ampere (Jetson Orin)", 3, ("fp16", "bf16", "tf32", "int8", "int4"), "adds BF16 and TF32"),
    (8, 9): ("Ada Lovelace", 4, ("fp16", "bf16", "tf32", "fp8", "int8", "int4"), "adds FP8 (E4M3, E5M2)"),
    (9, 0): ("Hopper", 4, ("fp16", "bf16", "tf32", "fp8", "int8"), "adds FP8 (E4M3, E5M2) and warp-group MMA"),
}
_BLACKWELL = ("Blackwell", 5, ("fp16", "bf16", "tf32", "fp8", "fp6", "fp4", "int8"), "adds FP6 and FP4")
_PRE_VOLTA = {1: "Tesla", 2: "Fermi", 3: "Kepler", 5: "Maxwell", 6: "Pascal"}


def _check_capability(capability) -> tuple[int, int]:
    if isinstance(capability, (str, bytes)) or not hasattr(capability, "__len__"):
        raise ValueError(f"capability must be a (major, minor) pair of integers, got {capability!r}")
    if len(capability) != 2:
        raise ValueError(f"capability must be a (major, minor) pair of integers, got {capability!r}")
    major, minor = capability
    for part in (major, minor):
        if isinstance(part, bool) or not isinstance(part, Integral):
            raise ValueError(f"capability must be a (major, minor) pair of integers, got {capability!r}")
        if part < 0:
            raise ValueError(f"capability parts must be >= 0, got {capability!r}")
    if major < 1:
        raise ValueError(f"capability major version must be >= 1, got {capability!r}")
    return int(major), int(minor)


def tensor_core_generation(capability) -> TensorCoreGeneration:
    """The Tensor Cores of a CUDA compute capability ``(major, minor)``.

    >>> tensor_core_generation((9, 0)).architecture
    'Hopper'
    >>> tensor_core_generation((6, 1)).has_tensor_cores
    False

    A malformed capability (empty, not two non-negative integers, a string) raises ``ValueError``.
    """
    cap = _check_capability(capability)
    major, minor = cap
    if cap in _EXACT:
        arch, gen, precisions, note = _EXACT[cap]
    elif major in (10, 11, 12):
        arch, gen, precisions, note = _BLACKWELL
    elif major > 12:
        arch, gen, precisions, note = (
            "newer than Blackwell",
            5,
            _BLACKWELL[2],
            "newer than this table: assume at least Blackwell's Tensor Cores",
        )
    elif major < 7:
        arch = _PRE_VOLTA.get(major, "pre-Volta")
        return TensorCoreGeneration(
            capability=cap,
            architecture=arch,
            generation=None,
            precisions=(),
            summary=(
                f"{arch} (sm_{major}{minor}) has no Tensor Cores: FP16 runs on ordinary CUDA cores, so AMP "
                "saves memory but gives little or no speed-up"
            ),
        )
    else:
        # A minor version the table does not list, within a known major: same generation as the family.
        family = {7: (7, 5), 8: (8, 6), 9: (9, 0)}[major]
        arch, gen, precisions, note = _EXACT[family]
    summary = f"{arch} (sm_{major}{minor}): Tensor Cores generation {gen}, {', '.join(precisions).upper()}; {note}"
    return TensorCoreGeneration(capability=cap, architecture=arch, generation=gen, precisions=precisions, summary=summary)


# --------------------------------------------------------------------------------------------
# CPU features
# --------------------------------------------------------------------------------------------

CPU_FLAGS = {
    "avx512_bf16": "AVX512-BF16",
    "amx_bf16": "AMX-BF16",
    "avx512_fp16": "AVX512-FP16",
}


def cpu_flags(cpuinfo: str | None = None) -> dict[str, bool | None]:
    """Whether the CPU has each bf16/fp16 instruction set: True, False, or None (unknown).

    Reads ``/proc/cpuinfo`` on Linux; elsewhere the answer is None ("unknown").  ``cpuinfo``
    may be given as text (tests use this).
    """
    if cpuinfo is None:
        if not sys.platform.startswith("linux"):
            return dict.fromkeys(CPU_FLAGS)
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
                cpuinfo = fh.read()
        except OSError:
            return dict.fromkeys(CPU_FLAGS)
    flags: set[str] = set()
    found = False
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
            found = True
    if not found:
        return dict.fromkeys(CPU_FLAGS)
    return {name: name in flags for name in CPU_FLAGS}


def cpu_model(cpuinfo: str | None = None) -> str:
    if cpuinfo is None and sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
                cpuinfo = fh.read()
        except OSError:
            cpuinfo = None
    if cpuinfo:
        for line in cpuinfo.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


# --------------------------------------------------------------------------------------------
# The machine report
# --------------------------------------------------------------------------------------------


@dataclass
class MachineReport:
    """Everything the course needs to know about this machine (see ``describe``)."""

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
            rows += [
                ("GPU", f"{self.gpu_name} (compute capability {self.capability[0]}.{self.capability[1]})"),
                ("CUDA (torch build)", str(self.cuda_version)),
                ("Tensor Cores", self.tensor_cores.summary if self.tensor_cores else "unknown"),
                ("bf16 supported on GPU", yn(self.bf16_supported)),
                ("TF32 for FP32 matmuls", f"{yn(self.tf32_matmul)} (float32 matmul precision '{self.float32_matmul_precision}')"),
            ]
        rows += [("CPU", self.cpu_model)]
        rows += [(f"CPU {label}", yn(self.cpu_flags.get(key))) for key, label in CPU_FLAGS.items()]
        rows += [
            ("torch CPU kernels", self.cpu_capability),
            ("CPU threads (torch)", str(self.threads)),
            ("race", f"{self.race_device} {str(self.race_dtype).removeprefix('torch.')}"),
            ("verdict", self.verdict),
        ]
        return rows

    def __str__(self) -> str:
        rows = self.lines()
        width = max(len(k) for k, _ in rows)
        text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
        if self.notes:
            text += "\n" + "\n".join(f"note: {n}" for n in self.notes)
        return text


def verdict_for(
    *,
    cuda_available: bool,
    tensor_cores: TensorCoreGeneration | None,
    flags: dict[str, bool | None],
    device_type: str | None = None,
) -> tuple[str, str, torch.dtype]:
    """(verdict, race device, race dtype) for the given facts; pure, so tests can feed any machine."""
    use_cuda = cuda_available if device_type is None else device_type == "cuda"
    if use_cuda:
        if tensor_cores is not None and tensor_cores.has_tensor_cores:
            return (f"CUDA fp16 on Tensor Cores ({tensor_cores.architecture})", "cuda", torch.float16)
        arch = tensor_cores.architecture if tensor_cores else "this GPU"
        return (
            f"CUDA fp16 without Tensor Cores ({arch}): AMP saves memory, expect little speed-up",
            "cuda",
            torch.float16,
        )
    if flags.get("amx_bf16"):
        return ("CPU bf16 (AMX-BF16)", "cpu", torch.bfloat16)
    if flags.get("avx512_bf16"):
        return ("CPU bf16 (AVX512-BF16)", "cpu", torch.bfloat16)
    if all(v is None for v in flags.values()):
        return (
            "CPU with unknown bf16 support: the race will show whether AMP pays here",
            "cpu",
            torch.bfloat16,
        )
    return (
        "CPU without bf16 hardware: AMP will be slower here, and the race will show it",
        "cpu",
        torch.bfloat16,
    )


def tf32_matmul_enabled() -> bool:
    """Whether FP32 matmuls on CUDA may run on TF32 Tensor Cores right now.

    torch 2.9+ has ``torch.backends.cuda.matmul.fp32_precision`` ("ieee"/"tf32"; "none" inherits
    the generic ``torch.backends.fp32_precision``), which also reflects settings made through the
    legacy ``allow_tf32``.  Reading it never trips torch's legacy/new mixing check, whereas reading
    ``allow_tf32`` raises once a program has set the new flag.
    """
    matmul = torch.backends.cuda.matmul
    if hasattr(torch.backends, "fp32_precision"):
        value = matmul.fp32_precision
        if value == "none":
            value = torch.backends.fp32_precision
        return value == "tf32"
    return bool(matmul.allow_tf32)


def tf32_setting() -> tuple[bool, str]:
    """(TF32 used for FP32 CUDA matmuls?, float32 matmul precision), under either torch API."""
    try:
        precision = torch.get_float32_matmul_precision()
    except RuntimeError:  # the new API was set: the legacy getter refuses to answer
        precision = str(torch.backends.cuda.matmul.fp32_precision)
    return tf32_matmul_enabled(), precision


def describe(device=None) -> MachineReport:
    """Describe this machine for mixed precision.

    ``device`` (default: ``amp_lab.device.get_device()``) decides which device the verdict is
    for; the GPU facts are reported whenever CUDA is available.
    """
    from .device import get_device

    dev = get_device(device)
    cuda = torch.cuda.is_available()
    gpu_name = capability = tensor_cores = bf16 = None
    if cuda:
        idx = dev.index if (dev.type == "cuda" and dev.index is not None) else torch.cuda.current_device()
        gpu_name = torch.cuda.get_device_name(idx)
        capability = tuple(torch.cuda.get_device_capability(idx))
        tensor_cores = tensor_core_generation(capability)
        bf16 = bool(torch.cuda.is_bf16_supported())
    flags = cpu_flags()
    verdict, race_device, race_dtype = verdict_for(
        cuda_available=cuda, tensor_cores=tensor_cores, flags=flags, device_type=dev.type
    )
    tf32_matmul, matmul_precision = tf32_setting()
    notes = []
    if dev.type == "cpu" and os.environ.get("AMP_LAB_DEVICE") == "cpu" and cuda:
        notes.append("AMP_LAB_DEVICE=cpu: the course runs on the CPU although a GPU is present")
    return MachineReport(
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
        cpu_model=cpu_model(),
        cpu_flags=flags,
        cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
        threads=torch.get_num_threads(),
        race_device=race_device,
        race_dtype=race_dtype,
        verdict=verdict,
        notes=notes,
    )


def setup_banner(device=None) -> None:
    """Print the short machine summary every notebook's setup cell shows (use ``describe()`` for the data)."""
    report = describe(device)
    from .device import get_device

    dev = get_device(device)
    where = f"{dev}" + (f" ({report.gpu_name})" if dev.type == "cuda" else f" ({report.cpu_model})")
    print(f"amp_lab on torch {report.torch_version}, Python {report.python_version}")
    print(f"device: {where}, {report.threads} CPU threads")
    if dev.type == "cuda" and report.tensor_cores is not None:
        print(f"Tensor Cores: {report.tensor_cores.summary}")
        print(f"TF32 for FP32 matmuls: {'on' if report.tf32_matmul else 'off'}")
    print(f"verdict: {report.verdict}")
