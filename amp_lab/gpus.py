"""The course's one table of GPU facts (Tensor Core generations, datasheets, arch lists, FP8 support, the
AMP dtype) and decisions that are pure functions of them, so CPU tests feed them real GPUs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from numbers import Integral

import torch

from ._checks import ArgumentTypeError, check_choice, check_optional_str
from .dtypes import parse_dtype
from .text import say


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
_AMPERE = ("fp16", "bf16", "tf32", "int8", "int4")
_EXACT = {
    (7, 0): ("Volta", 1, ("fp16",), "first Tensor Cores: FP16 inputs, FP16 or FP32 accumulation"),
    (7, 2): ("Volta (Jetson Xavier)", 1, ("fp16", "int8"), "Xavier's Volta Tensor Cores add INT8, as Turing's do"),
    (7, 5): ("Turing", 2, ("fp16", "int8", "int4"), "adds INT8/INT4 for inference"),
    (8, 0): ("Ampere", 3, _AMPERE, "adds BF16 and TF32 (FP32 matmuls on Tensor Cores)"),
    (8, 6): ("Ampere", 3, _AMPERE, "adds BF16 and TF32 (FP32 matmuls on Tensor Cores)"),
    (8, 7): ("Ampere (Jetson Orin)", 3, _AMPERE, "adds BF16 and TF32"),
    (8, 9): ("Ada Lovelace", 4, ("fp16", "bf16", "tf32", "fp8", "int8", "int4"), "adds FP8 (E4M3, E5M2)"),
    (9, 0): ("Hopper", 4, ("fp16", "bf16", "tf32", "fp8", "int8"), "adds FP8 (E4M3, E5M2) and warp-group MMA"),
}  # fmt: skip
_BLACKWELL = ("Blackwell", 5, ("fp16", "bf16", "tf32", "fp8", "fp6", "fp4", "int8"), "adds FP6 and FP4")
_PRE_VOLTA = {1: "Tesla", 2: "Fermi", 3: "Kepler", 5: "Maxwell", 6: "Pascal"}


def check_capability(capability, name: str = "capability") -> tuple[int, int]:
    """``(major, minor)`` as ints; a tuple or a list only (a set has no order: {7, 5} is no sm_57)."""
    if (
        not isinstance(capability, (tuple, list))
        or len(capability) != 2
        or any(isinstance(p, bool) or not isinstance(p, Integral) for p in capability)
    ):
        raise ArgumentTypeError(
            f"{name} must be a (major, minor) tuple of integers such as (8, 0), got "
            f"{type(capability).__name__}: {capability!r:.80}"
        )
    major, minor = int(capability[0]), int(capability[1])
    if major < 1 or minor < 0:
        raise ValueError(f"{name} must have a major version >= 1 and a minor >= 0, got {capability!r}")
    return major, minor


def tensor_core_generation(capability) -> TensorCoreGeneration:
    """The Tensor Cores of a CUDA compute capability ``(major, minor)``.

    >>> tensor_core_generation((9, 0)).architecture
    'Hopper'
    """
    cap = check_capability(capability)
    major, minor = cap
    sm = f"sm_{major}{minor}"
    if major < 7:
        arch = _PRE_VOLTA.get(major, "pre-Volta")
        return TensorCoreGeneration(cap, arch, None, (), say("tc.none", arch=arch, sm=sm))
    if cap in _EXACT:
        arch, gen, precisions, note = _EXACT[cap]
    elif major in (10, 11, 12):
        arch, gen, precisions, note = _BLACKWELL
    elif major > 12:
        note = "newer than this table: assume at least Blackwell's Tensor Cores"
        arch, gen, precisions = "newer than Blackwell", 5, _BLACKWELL[2]
    else:  # a minor version the table does not list: the family's generation
        arch, gen, precisions, note = _EXACT[{7: (7, 5), 8: (8, 6), 9: (9, 0)}[major]]
    summary = say(
        "tc.generation", arch=arch, sm=sm, gen=gen, precisions=", ".join(precisions).upper(), note=note
    )
    return TensorCoreGeneration(cap, arch, gen, precisions, summary)


DEVICE_TYPES = ("cpu", "cuda", "mps")


# GPUs without Tensor Cores whose FP16 units run at twice the FP32 rate (Jetson TX1/Nano, P100,
# Jetson TX2); every other pre-Volta GPU runs FP16 no faster than FP32.
DOUBLE_RATE_FP16 = {(5, 3), (6, 0), (6, 2)}


def amp_dtype_for(device_type: str, capability=None) -> torch.dtype:
    """The course's one low-precision dtype, from facts alone (``00_setup_check``): bfloat16 on CUDA from 8.0 on
    and on CPUs; float16 on older or unknown CUDA GPUs (their Tensor Cores multiply only it) and Apple GPUs."""
    check_optional_str("device_type", device_type, "'cpu', 'cuda' or 'mps'")
    check_choice("device_type", device_type, DEVICE_TYPES)
    if device_type == "cuda" and capability is not None:
        return torch.bfloat16 if bf16_hardware(capability) else torch.float16
    return torch.bfloat16 if device_type == "cpu" else torch.float16


def bf16_hardware(capability) -> bool:
    """Whether a CUDA GPU multiplies bfloat16 on Tensor Cores (from 8.0 on); ``torch.cuda.is_bf16_supported()``
    counts emulation, and says True on a T4."""
    return check_capability(capability)[0] >= 8


_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")


def parse_arch_list(arch_list) -> list[tuple[str, tuple[int, int], str]]:
    """Each entry of ``torch.cuda.get_arch_list()`` as (kind, capability, suffix)."""
    parsed = []
    for entry in arch_list:
        m = _ARCH.match(entry) if isinstance(entry, str) else None
        if m is None or len(m.group(2)) < 2:
            raise ValueError(
                f"arch_list entries must look like 'sm_86', 'sm_90a' or 'compute_90' "
                f"(torch.cuda.get_arch_list()), got {entry!r}"
            )
        digits = m.group(2)
        parsed.append((m.group(1), (int(digits[:-1]), int(digits[-1])), m.group(3)))
    return parsed


def arch_supported(capability, arch_list) -> bool:
    """Whether a torch build with ``torch.cuda.get_arch_list() == arch_list`` runs kernels on a GPU of
    ``capability``: ``sm_XY`` and ``sm_XYf`` on X.Y' with Y' >= Y, ``sm_XYa`` on exactly X.Y, ``compute_XY``
    (PTX) on X.Y and newer; an empty list (a CPU-only build) on nothing."""
    cap = check_capability(capability)
    return any(
        cap >= c if kind == "compute" else cap == c if suffix == "a" else (cap[0] == c[0] and cap[1] >= c[1])
        for kind, c, suffix in parse_arch_list(arch_list)
    )


def arch_advice(capability, arch_list, cuda_version: str | None = None) -> str | None:
    """None when this torch build has kernels for ``capability``; else what to install instead (the first
    kernel would fail with "no kernel image is available for execution on the device")."""
    if arch_supported(capability, arch_list):
        return None
    cap = check_capability(capability)
    listed = sorted({c for _, c, _ in parse_arch_list(arch_list)})
    build = f"this torch (CUDA {cuda_version})" if cuda_version else "this torch"
    have = ", ".join(f"sm_{a}{b}" for a, b in listed) or "no GPU kernels at all (a CPU-only build)"
    fix = "arch.older_gpu" if listed and cap < listed[0] else "arch.newer_gpu"
    return f"{say('arch.no_kernels', build=build, have=have, sm=f'sm_{cap[0]}{cap[1]}')} {say(fix)}"


@dataclass(frozen=True)
class GpuDatasheet:
    """One GPU model's peak rates (dense TFLOP/s) and memory bandwidth (GB/s), from its datasheet."""

    model: str
    names: tuple[str, ...]  # torch.cuda.get_device_name() of this model
    fp32_tflops: float  # CUDA cores
    tf32_tflops: float | None  # Tensor Cores; None: no TF32
    fp16_tflops: float  # Tensor Cores (CUDA cores before Volta), FP32 accumulation
    bf16_tflops: float | None  # None: no bf16 Tensor Cores
    bandwidth_gbs: float
    source: str
    # FP8 Tensor Cores, dense, FP32 accumulation (what torch._scaled_mm asks cuBLAS for); None: no FP8.
    fp8_tflops: float | None = None
    fp8_source: str | None = None

    def tflops(self, dtype=torch.float32) -> float | None:
        """Peak dense TFLOP/s for matmuls in ``dtype`` (``"tf32"`` for FP32 on TF32 Tensor Cores, ``"fp8"``
        or a float8 dtype for FP8 Tensor Cores)."""
        if dtype == "tf32":
            return self.tf32_tflops
        if dtype in ("fp8", torch.float8_e4m3fn, torch.float8_e5m2):
            return self.fp8_tflops
        fp32, fp16, bf16 = torch.float32, torch.float16, torch.bfloat16
        rates = {fp32: self.fp32_tflops, fp16: self.fp16_tflops, bf16: self.bf16_tflops}
        return rates[parse_dtype(dtype, allowed=tuple(rates))]

    @property
    def fp8_over_bf16(self) -> float | None:
        """The FP8 Tensor Core rate over the BF16 rate (both dense); None without FP8 or BF16 Tensor Cores."""
        if self.fp8_tflops is None or self.bf16_tflops is None:
            return None
        return self.fp8_tflops / self.bf16_tflops


def _hopper(model: str, name: str, fp32: float, tf32_sparse: float, fp16_sparse: float, tb_s: float,
            fp8_sparse: float | None = None) -> GpuDatasheet:  # fmt: skip
    """An H100/H200 row; its datasheet prints Tensor Core rates with sparsity (halved here)."""
    chip, form = model.split()
    fp8_source = None if fp8_sparse is None else (
        f"NVIDIA {chip} datasheet ({form}): {fp8_sparse:,g} FP8 Tensor TFLOPS with sparsity "
        f"(beside {fp16_sparse:,g} FP16/BF16), halved here to the dense rate"
    )  # fmt: skip
    return GpuDatasheet(
        model, (name,), fp32, tf32_sparse / 2, fp16_sparse / 2, fp16_sparse / 2, tb_s * 1000,
        f"NVIDIA {chip} datasheet ({form}): {fp32:g} TFLOPS FP32; {tf32_sparse:,g} TF32, {fp16_sparse:,g} FP16/BF16 "
        f"Tensor TFLOPS with sparsity; {tb_s:g} TB/s",
        fp8_tflops=None if fp8_sparse is None else fp8_sparse / 2, fp8_source=fp8_source,
    )  # fmt: skip


def _a100(model: str, name: str, gb_s: float) -> GpuDatasheet:
    """An A100 row: every A100 has the same Tensor Cores; the memory differs."""
    return GpuDatasheet(
        model, (name,), 19.5, 156, 312, 312, gb_s,
        f"NVIDIA A100 datasheet: 19.5 TFLOPS FP32; 156 TF32, 312 FP16/BF16 Tensor TFLOPS dense; {gb_s:,g} GB/s ({model})",
    )  # fmt: skip


DATASHEETS = (
    _hopper("H200 SXM", "NVIDIA H200", 67, 989, 1979, 4.8, 3958),
    _hopper("H200 NVL", "NVIDIA H200 NVL", 60, 835, 1671, 4.8, 3341),
    _hopper("H100 SXM", "NVIDIA H100 80GB HBM3", 67, 989, 1979, 3.35, 3958),
    _hopper("H100 NVL", "NVIDIA H100 NVL", 60, 835, 1671, 3.9, 3341),
    _hopper("H100 PCIe", "NVIDIA H100 PCIe", 51, 756, 1513, 2.0, 3026),
    _a100("A100 SXM4 80GB", "NVIDIA A100-SXM4-80GB", 2039),
    _a100("A100 SXM4 40GB", "NVIDIA A100-SXM4-40GB", 1555),
    _a100("A100 PCIe 80GB", "NVIDIA A100 80GB PCIe", 1935),
    _a100("A100 PCIe 40GB", "NVIDIA A100-PCIE-40GB", 1555),
    GpuDatasheet("RTX 4090", ("NVIDIA GeForce RTX 4090",), 82.6, 82.6, 165.2, 165.2, 1008,
                 "GeForce RTX 4090 datasheet figures (NVIDIA Ada Lovelace architecture whitepaper): 82.6 TFLOPS FP32; 82.6 TF32, "
                 "165.2 FP16/BF16 Tensor TFLOPS dense with FP32 accumulation (330.3 with FP16 accumulation); 1,008 GB/s",
                 fp8_tflops=330.3,
                 fp8_source="GeForce RTX 4090 datasheet figures (NVIDIA Ada Lovelace architecture whitepaper): 330.3 FP8 "
                            "Tensor TFLOPS dense with FP32 accumulation (660.6 with FP16 accumulation), beside 165.2 "
                            "BF16 with FP32 accumulation"),
    GpuDatasheet("V100 SXM2", ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"), 15.7, None, 125, None, 900,
                 "NVIDIA V100 datasheet (SXM2): 15.7 TFLOPS FP32, 125 FP16 Tensor TFLOPS; no BF16, no TF32; 900 GB/s"),
    GpuDatasheet("V100 PCIe", ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"), 14, None, 112, None, 900,
                 "NVIDIA V100 datasheet (PCIe): 14 TFLOPS FP32, 112 FP16 Tensor TFLOPS; no BF16, no TF32; 900 GB/s"),
    GpuDatasheet("T4", ("Tesla T4",), 8.1, None, 65, None, 320,
                 "NVIDIA T4 datasheet: 8.1 TFLOPS FP32, 65 FP16 (mixed precision) Tensor TFLOPS; no BF16, no TF32; 320 GB/s"),
)  # fmt: skip


def _model_name(name: str) -> str:
    return " ".join(name.split()).casefold()


_BY_NAME = {_model_name(n): entry for entry in DATASHEETS for n in entry.names}


def datasheet_entry(gpu_name: str | None) -> GpuDatasheet | None:
    """The datasheet of the GPU ``torch.cuda.get_device_name()`` calls ``gpu_name`` (the exact name, case and
    spacing aside), or None for a GPU the table does not know (e.g. "NVIDIA RTX A1000")."""
    return None if gpu_name is None else _BY_NAME.get(_model_name(gpu_name))


DATASHEET_HEADER = ["GPU", "FP32", "TF32", "FP16", "BF16", "memory", "FP16 / FP32", "BF16 / TF32"]


def datasheet_rows() -> list[list[str]]:
    """The datasheet table (header :data:`DATASHEET_HEADER`): dense TFLOP/s, bandwidth, and the two peak ratios
    a race is measured against.  (``06_timing_race``)"""

    def rate(x):
        return "-" if x is None else f"{x:g}"

    def ratio(a, b):
        return "-" if a is None or b is None else f"{a / b:.3g}x"

    return [
        [e.model, rate(e.fp32_tflops), rate(e.tf32_tflops), rate(e.fp16_tflops), rate(e.bf16_tflops),
         f"{e.bandwidth_gbs:g} GB/s", ratio(e.fp16_tflops, e.fp32_tflops), ratio(e.bf16_tflops, e.tf32_tflops)]
        for e in DATASHEETS
    ]  # fmt: skip


FP8_DATASHEET_HEADER = ["GPU", "FP8", "BF16", "FP8 / BF16", "source"]


def fp8_datasheet_rows() -> list[list[str]]:
    """The datasheet GPUs with FP8 Tensor Cores (header :data:`FP8_DATASHEET_HEADER`): dense FP8 and BF16
    TFLOP/s, their ratio and the FP8 figure's source.  (``08_fp8_and_block_scaling``)"""
    return [
        [e.model, f"{e.fp8_tflops:g}", f"{e.bf16_tflops:g}", f"{e.fp8_over_bf16:.3g}x", e.fp8_source]
        for e in DATASHEETS
        if e.fp8_over_bf16 is not None
    ]


@dataclass(frozen=True)
class Fp8Support:
    """Whether FP8 GEMMs run on Tensor Cores (truthy exactly then), and why: ``code`` is a reason of
    :data:`amp_lab.text.REASONS` filled from ``facts``."""

    supported: bool
    code: str
    facts: dict

    @property
    def reason(self) -> str:
        return say(self.code, **self.facts)

    def __bool__(self) -> bool:
        return self.supported


def fp8_matmul_support(capability, arch_list=None) -> Fp8Support:
    """Whether a CUDA GPU of ``capability`` (None: none) runs FP8 GEMMs on Tensor Cores (Ada, Hopper, Blackwell)
    with a torch build whose arch list is ``arch_list`` (None: unchecked), and why."""
    if capability is None:
        return Fp8Support(False, "fp8.no_cuda_gpu", {})
    tc = tensor_core_generation(capability)
    facts = {"gpu": f"{tc.architecture} (sm_{tc.capability[0]}{tc.capability[1]})"}
    if "fp8" not in tc.precisions:
        facts["precisions"] = ", ".join(tc.precisions).upper()
        return Fp8Support(
            False, "fp8.tensor_cores_without_fp8" if tc.has_tensor_cores else "fp8.no_tensor_cores", facts
        )
    if arch_list is not None and not arch_supported(tc.capability, arch_list):
        facts["advice"] = arch_advice(tc.capability, arch_list)
        return Fp8Support(False, "fp8.no_kernels", facts)
    return Fp8Support(True, "fp8.runs" if arch_list is None else "fp8.runs_with_kernels", facts)


@dataclass(frozen=True)
class TensorCoreDetails:
    reference_part: str
    fma_per_tensor_core_per_clock: int | None
    tensor_cores_per_sm: int | None
    per_clock: str
    instruction: str
    note: str


# By Tensor Core generation: dense FP16 rates of its data-centre part, from NVIDIA's architecture whitepapers.
TENSOR_CORE_DETAILS: dict[int, TensorCoreDetails] = {
    1: TensorCoreDetails("V100", 64, 8, "4×4×4 FP16 MMA per clock (D = A·B + C, 64 FMA)", "mma.sync m8n8k4",
                         "FP16 inputs, FP16 or FP32 accumulator"),
    2: TensorCoreDetails("T4", 64, 8, "4×4×4 FP16 MMA per clock (64 FMA); INT8/INT4 at 2×/4× that",
                         "mma.sync m16n8k8", "adds integer inputs for inference"),
    3: TensorCoreDetails("A100", 256, 4, "256 FP16 FMA per clock (4× a Volta Tensor Core)", "mma.sync m16n8k16",
                         "BF16 at the FP16 rate, TF32 at half of it; 2:4 sparsity doubles both"),
    4: TensorCoreDetails("H100", 512, 4, "512 FP16 FMA per clock; FP8 at twice the FP16 rate",
                         "wgmma.mma_async m64nNk16",
                         "FP8 (E4M3/E5M2), its accumulator about 14 bits, not FP32 (DeepSeek-V3 report); Ada parts "
                         "are 4th generation too, slower per SM"),
    5: TensorCoreDetails("B200", None, None, "not listed here", "tcgen05.mma",
                         "FP6/FP4 and block-scaled (microscaling) formats"),
}  # fmt: skip


# Architectures whose figures differ from their generation's data-centre part.
ARCHITECTURE_DETAILS: dict[str, TensorCoreDetails] = {
    "Ada Lovelace": TensorCoreDetails("L4 / RTX 40", None, 4, "FP8 added as on Hopper; lower per-SM rates than H100",
                                      "mma.sync (FP8: m16n8k32)",
                                      "4th generation like Hopper, without Hopper's warp-group MMA"),
}  # fmt: skip


# Dense FP16 Tensor Core TFLOP/s with an FP16 and with an FP32 accumulator, from NVIDIA's whitepapers:
# GeForce parts run FP32 accumulation at half the rate.
ACCUMULATE_RATES = tuple(
    dict(zip(("part", "kind", "fp16_accumulate", "fp32_accumulate", "source"), row, strict=True))
    for row in (
        ("A100", "data centre", 312.0, 312.0, "NVIDIA A100 Tensor Core GPU architecture whitepaper (A100 SXM4)"),
        ("H100 SXM", "data centre", 989.4, 989.4, "NVIDIA H100 Tensor Core GPU architecture whitepaper (H100 SXM5)"),
        ("RTX 3090", "GeForce", 142.0, 71.0, "NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 3090)"),
        ("RTX 4090", "GeForce", 330.3, 165.2, "NVIDIA Ada Lovelace GPU architecture whitepaper (GeForce RTX 4090)"),
    )
)  # fmt: skip
