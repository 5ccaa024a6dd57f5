"""What this machine is for mixed precision: the machine report, the verdict (a prediction from hardware
facts, pure so tests feed any machine), the TF32 switch and the setup banner (``00_setup_check``)."""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass, field, replace

import torch

from . import cpus, gpus
from ._checks import check_bool, check_choice, check_instance, check_optional_str
from .cpus import CPU_FLAGS, cpu_flags, cpu_model
from .device import get_device, mps_available
from .dtypes import dtype_name
from .gpus import TensorCoreGeneration, amp_dtype_for, tensor_core_generation
from .text import say, wrap

_EXPECT = {True: "report.expect_faster", False: "report.expect_not_faster", None: "report.expect_unknown"}
_KERNELS = {None: "unknown", True: "yes", False: "NO: no kernels for this GPU"}
_YN = {None: "unknown", True: "yes", False: "no"}


@dataclass
class MachineReport:
    """Everything the course needs to know about this machine (:func:`describe`); ``race_dtype``,
    ``verdict``, ``use_scaler``, ``expect_speedup`` and ``reasons`` are :func:`machine_verdict`'s."""

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
    race_dtype: torch.dtype = torch.float32
    verdict: str = ""
    notes: list[str] = field(default_factory=list)
    mps_available: bool = False
    use_scaler: bool = False
    expect_speedup: bool | None = None
    reasons: tuple[str, ...] = ()
    arch_supported: bool | None = None  # None: no GPU
    arch_list: tuple[str, ...] = ()

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) pairs in reading order."""
        rows = [
            ("torch", self.torch_version),
            ("python", f"{self.python_version} on {self.platform}"),
            ("CUDA available", _YN[self.cuda_available]),
        ]
        if self.cuda_available:
            cap = f"compute capability {self.capability[0]}.{self.capability[1]}" if self.capability else None
            listed = ", ".join(self.arch_list) or "none"
            kernels = _KERNELS[self.arch_supported]
            tf32 = f"float32 matmul precision '{self.float32_matmul_precision}'"
            rows += [
                ("GPU", f"{self.gpu_name} ({cap or 'capability unknown'})"),
                ("CUDA (torch build)", str(self.cuda_version)),
                ("Tensor Cores", self.tensor_cores.summary if self.tensor_cores else "unknown"),
                ("GPU kernels in this torch", f"{kernels} (built for {listed})"),
                ("bf16 Tensor Cores", _YN[self.bf16_supported]),
                ("TF32 for FP32 matmuls", f"{_YN[self.tf32_matmul]} ({tf32})"),
            ]
        if self.mps_available:
            rows += [("MPS (Apple GPU)", "yes")]
        rows += [("CPU", self.cpu_model)]
        known = [(key, label) for key, label in CPU_FLAGS.items() if self.cpu_flags.get(key) is not None]
        rows += [(f"CPU {label}", _YN[self.cpu_flags[key]]) for key, label in known] or [
            ("CPU bf16/fp16 instructions", "unknown")
        ]
        scaler = "with a GradScaler" if self.use_scaler else "no GradScaler"
        return rows + [
            ("torch CPU kernels", self.cpu_capability),
            ("CPU threads (torch)", str(self.threads)),
            ("race", f"{self.race_device} {str(self.race_dtype).removeprefix('torch.')}, {scaler}"),
            ("verdict", self.verdict),
        ]

    def explain(self) -> str:
        """The verdict, the facts behind it, and what it predicts (``00_setup_check`` prints this)."""
        scaler = "with a GradScaler" if self.use_scaler else "no GradScaler needed"
        so = say(
            "report.so",
            dtype=dtype_name(self.race_dtype),
            device=self.race_device,
            scaler=scaler,
            expect=say(_EXPECT[self.expect_speedup]),
        )
        return wrap("\n".join([f"verdict: {self.verdict}", "why:", *(f"  - {r}" for r in self.reasons), so]))

    def __str__(self) -> str:
        rows = self.lines()
        width = max(len(k) for k, _ in rows)
        return "\n".join([f"{k:<{width}}  {v}" for k, v in rows] + [f"note: {n}" for n in self.notes])


@dataclass(frozen=True)
class Verdict:
    """What :func:`machine_verdict` predicts, never a measurement: ``outcome`` and ``reason_codes`` are codes
    of :data:`amp_lab.text.REASONS` filled from ``facts``; ``expect_speedup`` None means: measure it."""

    outcome: str
    device: str
    dtype: torch.dtype
    use_scaler: bool
    expect_speedup: bool | None
    reason_codes: tuple[str, ...]
    facts: dict

    @property
    def text(self) -> str:
        return say(self.outcome, **self.facts)

    @property
    def reasons(self) -> tuple[str, ...]:  # the facts behind it, one sentence each
        return tuple(say(code, **self.facts) for code in self.reason_codes)


# A verdict's outcome -> (expect AMP to beat FP32 on large matmuls? None: measure it; the reasons' codes;
# amp.choose_amp_dtype's answers after "is it CUDA?", and its amp.basis_*/amp.advice_* key)
VERDICTS = {
    "cuda_unknown": (None, ("why.cuda_unknown",), ("amp.a_capability_unknown",), "capability_unknown"),
    "cuda_no_tensor_cores": (False, ("why.pre_volta", "why.fp16_memory", "why.fp16_scaler"),
                             ("amp.a_no_tensor_cores",), "no_tensor_cores"),
    "cuda_no_tensor_cores_double_fp16": (None, ("why.pre_volta", "why.fp16_memory", "why.fp16_scaler"),
                                         ("amp.a_no_tensor_cores",), "no_tensor_cores"),
    "cuda_bf16": (True, ("why.tensor_cores_bf16", "why.bf16_range", "why.small_matmuls"),
                  ("amp.a_tensor_cores", "amp.a_bf16_cores"), "bf16_cores"),
    "cuda_fp16": (True, ("why.tensor_cores_fp16_only", "why.fp16_scaler", "why.small_matmuls"),
                  ("amp.a_tensor_cores", "amp.a_fp16_cores"), "fp16_cores"),
    "mps": (None, ("why.mps", "why.fp16_scaler"), ("amp.a_mps_no_tensor_cores",), "mps"),
    "apple_cpu": (False, ("why.apple_cpu_bf16", "why.apple_accelerate", "why.bf16_no_scaler"),
                  ("amp.a_cpu_native", "amp.a_apple_accelerate"), "apple"),
    "cpu_bf16": (True, ("why.cpu_bf16", "why.cpu_casts", "why.bf16_no_scaler"), ("amp.a_cpu_native",), "cpu_native"),
    "cpu_unknown": (None, ("why.cpu_unknown", "why.bf16_no_scaler"), ("amp.a_cpu_unknown",), "cpu_unknown"),
    "cpu_emulated": (False, ("why.cpu_emulated", "why.cpu_overhead", "why.same_recipe"), ("amp.a_cpu_emulated",),
                     "cpu_emulated"),
}  # fmt: skip


def machine_verdict(
    *,
    cuda_available: bool,
    tensor_cores: TensorCoreGeneration | None,
    flags: dict[str, bool | None],
    device_type: str | None = None,
    system: str | None = None,
) -> Verdict:
    """The :class:`Verdict` for the given facts, pure so tests and notebooks feed any machine: ``device_type``
    defaults to ``"cuda"`` when available, else ``"cpu"``; ``tensor_cores`` is ``gpus.tensor_core_generation``'s,
    ``flags`` ``cpus.cpu_flags``'s, ``system`` ``platform.system()``'s.  ``06_timing_race`` measures it."""
    cuda_available = check_bool("cuda_available", cuda_available)
    if tensor_cores is not None:
        check_instance("tensor_cores", tensor_cores, TensorCoreGeneration,
                       "a TensorCoreGeneration (gpus.tensor_core_generation(capability)) or None")  # fmt: skip
    flags = cpus.check_flags(flags)
    check_optional_str("device_type", device_type, "'cpu', 'cuda' or 'mps'")
    check_optional_str("system", system, "platform.system()'s name, such as 'Linux' or 'Darwin',")
    if device_type is None:
        device_type = "cuda" if cuda_available else "cpu"
    check_choice("device_type", device_type, gpus.DEVICE_TYPES)
    tc, facts = tensor_cores, {}
    if device_type == "cuda" and tc is None:
        outcome = "cuda_unknown"
    elif device_type == "cuda":
        sm = f"sm_{tc.capability[0]}{tc.capability[1]}"
        facts = {"gpu": f"CUDA {tc.architecture} GPU ({sm})", "arch": tc.architecture}
        if not tc.has_tensor_cores:
            double = tc.capability in gpus.DOUBLE_RATE_FP16
            outcome = "cuda_no_tensor_cores" + ("_double_fp16" if double else "")
        else:
            outcome = "cuda_bf16" if gpus.bf16_hardware(tc.capability) else "cuda_fp16"
    elif device_type == "cpu":
        labels = cpus.cpu_native_labels(torch.bfloat16, flags)
        facts = {"labels": " and ".join(labels), "lacking": " or ".join(labels)}
        native = cpus.cpu_has_native(torch.bfloat16, flags)
        outcome = "cpu_unknown" if native is None else "cpu_emulated" if not native else "cpu_bf16"
        outcome = "apple_cpu" if native and system == "Darwin" else outcome
    else:
        outcome = "mps"
    dtype = amp_dtype_for(device_type, tc.capability if device_type == "cuda" and tc else None)
    expect, reasons = VERDICTS[outcome][:2]
    return Verdict(f"verdict.{outcome}", device_type, dtype, dtype == torch.float16, expect, reasons, facts)


def tf32_matmul_enabled() -> bool:
    """Whether FP32 matmuls on CUDA may run on TF32 Tensor Cores right now (never trips torch's
    legacy/new mixing check, as reading ``allow_tf32`` does once only the new flag is set)."""
    return torch.backends.cuda.matmul.fp32_precision == "tf32"


# torch >= 2.9 keeps two records of "may FP32 matmuls use TF32": the legacy float32 matmul precision and
# the new per-backend fp32_precision, whose (backend, op) pairs inherit "none" from their parent.  cuBLAS
# reads both and raises when they disagree, so tf32_matmul sets them in agreement and restores the raw
# values (an inherited "none" included) on the way out.
_PARENT = {("cuda", "matmul"): ("cuda", "all"), ("mkldnn", "matmul"): ("mkldnn", "all"),
           ("cuda", "all"): ("generic", "all"), ("mkldnn", "all"): ("generic", "all")}  # fmt: skip


def _fp32_get(backend: str, op: str) -> str:
    return str(torch._C._get_fp32_precision_getter(backend, op))


def _fp32_set(backend: str, op: str, value: str) -> None:
    torch._C._set_fp32_precision_setter(backend, op, value)


def _raw_fp32_precision(backend: str, op: str) -> str:
    """The value set on (backend, op) itself, "none" when it inherits (told apart by probing the parent)."""
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


def _set_fp32_state(legacy: str, cuda: str, mkldnn: str) -> None:
    torch.set_float32_matmul_precision(legacy)  # sets both matmul precisions too: put them back
    _fp32_set("cuda", "matmul", cuda)
    _fp32_set("mkldnn", "matmul", mkldnn)


@contextlib.contextmanager
def tf32_matmul(enabled: bool):
    """Allow or forbid TF32 for CUDA FP32 matmuls inside the block, torch's two records in agreement (so
    cuBLAS can read them), then restore exactly what was set.  (``02_tensor_cores``, ``06_timing_race``)"""
    cuda, mkldnn = _raw_fp32_precision("cuda", "matmul"), _raw_fp32_precision("mkldnn", "matmul")
    # The legacy getter refuses while the records disagree: with both matmuls "ieee" they cannot.
    _fp32_set("cuda", "matmul", "ieee")
    _fp32_set("mkldnn", "matmul", "ieee")
    before = (torch.get_float32_matmul_precision(), cuda, mkldnn)
    # "high" and "medium" both allow TF32 in the legacy record; keep the one the program chose.
    legacy = ("high" if before[0] == "highest" else before[0]) if enabled else "highest"
    _set_fp32_state(legacy, "tf32" if enabled else "ieee", mkldnn)
    try:
        yield
    finally:
        _set_fp32_state(*before)


def tf32_setting() -> tuple[bool, str]:
    """(TF32 used for FP32 CUDA matmuls?, float32 matmul precision), under either torch API."""
    try:
        precision = torch.get_float32_matmul_precision()
    except RuntimeError:  # the new API was set: the legacy getter refuses to answer
        precision = str(torch.backends.cuda.matmul.fp32_precision)
    return tf32_matmul_enabled(), precision


def report_verdict(report: MachineReport) -> Verdict:
    """:func:`machine_verdict` read from a report's facts (never its stored verdict)."""
    return machine_verdict(
        cuda_available=report.cuda_available,
        tensor_cores=report.tensor_cores,
        flags=report.cpu_flags,
        device_type=report.race_device,
        system=report.platform.split()[0] if report.platform else None,  # platform.system()
    )


def _with_verdict(report: MachineReport) -> MachineReport:
    v = report_verdict(report)
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
    """Describe this machine for mixed precision; ``device`` (default ``get_device()``) is the one the
    verdict is for.  The GPU's facts are reported whenever CUDA is available.  (``00_setup_check``)"""
    dev = get_device(device)
    cuda = torch.cuda.is_available()
    mps_ok = mps_available()
    gpu_name = capability = supported = None
    arch_list: tuple[str, ...] = ()
    notes = []
    if cuda:
        idx = dev.index if (dev.type == "cuda" and dev.index is not None) else torch.cuda.current_device()
        gpu_name = torch.cuda.get_device_name(idx)
        capability = tuple(torch.cuda.get_device_capability(idx))
        if torch.version.hip is None:  # ROCm builds list gfx targets, not sm_XY
            arch_list = tuple(torch.cuda.get_arch_list())
            supported = gpus.arch_supported(capability, list(arch_list))
            advice = gpus.arch_advice(capability, list(arch_list), torch.version.cuda)
            notes += [advice] if advice else []
    cpuinfo, sysctl = cpus.read_cpuinfo(), cpus.read_sysctl()  # through the module, so tests can stand in
    flags = cpu_flags(cpuinfo, sysctl=sysctl) if (cpuinfo or sysctl) else dict.fromkeys(CPU_FLAGS)
    model = cpu_model(cpuinfo, sysctl=sysctl) if (cpuinfo or sysctl) else cpu_model("")
    if dev.type == "mps":
        gpu_name = f"{model} GPU" if model.startswith("Apple") else "Apple GPU"
    tf32_matmul, matmul_precision = tf32_setting()
    if dev.type == "cpu" and os.environ.get("AMP_LAB_DEVICE") == "cpu" and (cuda or mps_ok):
        notes.append(say("report.forced_cpu"))
    limits = cpus.cpu_isa_limits().items()
    notes += [say("report.isa_capped", why=why, label=CPU_FLAGS[k]) for k, why in limits if flags.get(k)]
    report = MachineReport(
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        cuda_available=cuda,
        cuda_version=torch.version.cuda,
        gpu_name=gpu_name,
        capability=capability,
        tensor_cores=tensor_core_generation(capability) if capability else None,
        bf16_supported=gpus.bf16_hardware(capability) if capability else None,  # not is_bf16_supported()
        tf32_matmul=tf32_matmul,
        float32_matmul_precision=matmul_precision,
        cpu_model=model,
        cpu_flags=cpus.usable_cpu_flags(flags),
        cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
        threads=torch.get_num_threads(),
        race_device=dev.type,
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
    """The report of *another* machine: ``base`` (default ``describe("cpu")``) with the hardware facts given
    here (a GPU's ``capability``, a CPU's :func:`cpu_flags`, ``system="Darwin"`` for a Mac) and the verdict
    recomputed from them.  (``07_amp_training_recipe``)"""
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
        bf16_supported=gpus.bf16_hardware(cap) if cap else None,
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
    """Print the short machine summary every notebook's setup cell shows (``describe()`` has the data)."""
    report = describe(device)
    dev = get_device(device)
    where = report.gpu_name if dev.type in ("cuda", "mps") else report.cpu_model
    lines = [f"amp_lab on torch {report.torch_version}, Python {report.python_version}"]
    lines.append(f"device: {dev} ({where}), {report.threads} CPU threads")
    if dev.type == "cuda" and report.tensor_cores is not None:
        lines.append(f"Tensor Cores: {report.tensor_cores.summary}")
        lines.append(f"TF32 for FP32 matmuls: {'on' if report.tf32_matmul else 'off'}")
    print(wrap("\n".join([*lines, f"verdict: {report.verdict}"])))
