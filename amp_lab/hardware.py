"""What this machine can do for mixed precision.

* ``tensor_core_generation(capability)`` maps a CUDA compute capability to its Tensor Core
  generation and the input types those cores accelerate (taught in ``02_tensor_cores``).
* ``cpu_flags()`` reads the CPU's bf16/fp16 instruction sets (x86 ``flags`` and ARM ``Features``
  in ``/proc/cpuinfo``, ``sysctl`` on macOS); ``cpu_has_native(dtype)`` is the course's one answer
  to "does this CPU multiply bf16/fp16 in hardware?".
* ``amp_dtype_for(device_type, capability)`` is the course's one dtype decision: bfloat16 on CUDA
  GPUs from Ampere (8.0) on and on CPUs, float16 on Volta/Turing and older GPUs and on Apple GPUs.
* ``machine_verdict(...)`` turns hardware facts into a *prediction*: which
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
from dataclasses import asdict, dataclass, field, replace

import torch

from . import cpus
from ._checks import check_bool, check_instance, check_optional_str
from .cpus import (
    CPU_FLAGS,
    check_flags,
    cpu_flags,
    cpu_has_native,
    cpu_isa_limits,
    cpu_model,
    cpu_native_labels,
    usable_cpu_flags,
)
from .device import get_device
from .gpus import (
    DEVICE_TYPES,
    DOUBLE_RATE_FP16,
    TensorCoreGeneration,
    amp_dtype_for,
    arch_advice,
    arch_supported,
    bf16_hardware,
    check_capability,
    tensor_core_generation,
)
from .text import Reading, say

# --------------------------------------------------------------------------------------------
# CPU features
# --------------------------------------------------------------------------------------------


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
    verdict_codes: tuple[str, ...] = ()  # the verdict's outcome and reason codes (amp_lab.text.REASONS)
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
            cap = (
                f"compute capability {self.capability[0]}.{self.capability[1]}"
                if self.capability
                else "capability unknown"
            )
            rows += [
                ("GPU", f"{self.gpu_name} ({cap})"),
                ("CUDA (torch build)", str(self.cuda_version)),
                ("Tensor Cores", self.tensor_cores.summary if self.tensor_cores else "unknown"),
                ("GPU kernels in this torch", self._kernels_text()),
                ("bf16 Tensor Cores", yn(self.bf16_supported)),
                (
                    "TF32 for FP32 matmuls",
                    f"{yn(self.tf32_matmul)} (float32 matmul precision '{self.float32_matmul_precision}')",
                ),
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
        lines.append(
            f"so: autocast to {dtype} on {self.race_device}, {scaler}; expected before measuring: "
            f"{_EXPECT[self.expect_speedup]} (notebook 06 measures it)"
        )
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
    """What :func:`machine_verdict` predicts for one machine: a prediction from hardware facts, never a
    measurement.  ``outcome`` and ``reasons`` are codes of :data:`amp_lab.text.REASONS`, filled from
    ``facts``; ``device`` and ``dtype`` are what the course races, ``use_scaler`` whether that dtype needs a
    GradScaler, ``expect_speedup`` whether AMP should beat FP32 on large matmuls (None: measure it)."""

    outcome: str
    device: str
    dtype: torch.dtype
    use_scaler: bool
    expect_speedup: bool | None
    reason_codes: tuple[str, ...]
    facts: dict

    @property
    def reading(self) -> Reading:
        return Reading(self.outcome, self.reason_codes, self.facts)

    @property
    def text(self) -> str:
        """The one-line verdict."""
        return say(self.outcome, **self.facts)

    @property
    def reasons(self) -> tuple[str, ...]:
        """The facts behind it, one sentence each."""
        return tuple(say(code, **self.facts) for code in self.reason_codes)


def _cuda_verdict(tc: TensorCoreGeneration | None) -> Verdict:
    if tc is None:
        return Verdict("verdict.cuda_unknown", "cuda", torch.float16, True, None, ("why.cuda_unknown",), {})
    facts = {
        "gpu": f"CUDA {tc.architecture} GPU (sm_{tc.capability[0]}{tc.capability[1]})",
        "arch": tc.architecture,
    }
    dtype = amp_dtype_for("cuda", tc.capability)
    if not tc.has_tensor_cores:
        double = tc.capability in DOUBLE_RATE_FP16
        outcome = "verdict.cuda_no_tensor_cores_double_fp16" if double else "verdict.cuda_no_tensor_cores"
        reasons = ("why.pre_volta", "why.fp16_memory", "why.fp16_scaler")
        return Verdict(outcome, "cuda", dtype, True, None if double else False, reasons, facts)
    small = "why.small_matmuls"
    if dtype == torch.bfloat16:
        reasons = ("why.tensor_cores_bf16", "why.bf16_range", small)
        return Verdict("verdict.cuda_bf16", "cuda", dtype, False, True, reasons, facts)
    return Verdict(
        "verdict.cuda_fp16",
        "cuda",
        dtype,
        True,
        True,
        ("why.tensor_cores_fp16_only", "why.fp16_scaler", small),
        facts,
    )


def _cpu_verdict(flags: dict[str, bool | None], system: str | None) -> Verdict:
    native = cpu_has_native(torch.bfloat16, flags)
    labels = cpu_native_labels(torch.bfloat16, flags)
    facts = {"labels": " and ".join(labels), "lacking": " or ".join(labels)}
    bf16, scaler = torch.bfloat16, "why.bf16_no_scaler"
    if native and system == "Darwin":
        reasons = ("why.apple_cpu_bf16", "why.apple_accelerate", scaler)
        return Verdict("verdict.apple_cpu", "cpu", bf16, False, False, reasons, facts)
    if native:
        return Verdict(
            "verdict.cpu_bf16", "cpu", bf16, False, True, ("why.cpu_bf16", "why.cpu_casts", scaler), facts
        )
    if native is None:
        return Verdict("verdict.cpu_unknown", "cpu", bf16, False, None, ("why.cpu_unknown", scaler), facts)
    reasons = ("why.cpu_emulated", "why.cpu_overhead", "why.same_recipe")
    return Verdict("verdict.cpu_emulated", "cpu", bf16, False, False, reasons, facts)


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
    ``"cpu"``); ``tensor_cores`` describes the GPU (:func:`amp_lab.gpus.tensor_core_generation`); ``flags``
    the CPU (:func:`amp_lab.cpus.cpu_flags`); ``system`` is ``platform.system()`` (``"Darwin"`` on a Mac).
    The dtype is :func:`amp_lab.gpus.amp_dtype_for`'s.  Taught in ``00_setup_check``; ``06_timing_race``
    measures what it predicts.
    """
    cuda_available = check_bool("cuda_available", cuda_available)
    if tensor_cores is not None:
        check_instance("tensor_cores", tensor_cores, TensorCoreGeneration,
                       "a TensorCoreGeneration (gpus.tensor_core_generation(capability)) or None")  # fmt: skip
    flags = check_flags(flags)
    check_optional_str("device_type", device_type, "'cpu', 'cuda' or 'mps'")
    check_optional_str("system", system, "platform.system()'s name, such as 'Linux' or 'Darwin',")
    if device_type is None:
        device_type = "cuda" if cuda_available else "cpu"
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"device_type={device_type!r} is not allowed; choose one of: {', '.join(DEVICE_TYPES)}"
        )
    if device_type == "cuda":
        return _cuda_verdict(tensor_cores)
    if device_type == "mps":
        return Verdict(
            "verdict.mps", "mps", amp_dtype_for("mps"), True, None, ("why.mps", "why.fp16_scaler"), {}
        )
    return _cpu_verdict(flags, system)


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
        verdict_codes=v.reading.codes,
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
    cpuinfo, sysctl = (
        cpus.read_cpuinfo(),
        cpus.read_sysctl(),
    )  # through the module, so a test can stand in for them
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
        raise ValueError(
            f"device_type={device_type!r} is not allowed; choose one of: {', '.join(DEVICE_TYPES)}"
        )
    for arg, value in (("gpu_name", gpu_name), ("cpu", cpu), ("system", system)):
        check_optional_str(arg, value)
    if flags is not None:
        check_flags(flags)
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
