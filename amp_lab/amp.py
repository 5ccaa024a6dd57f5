"""The course's one AMP decision for a machine: which autocast dtype, whether a GradScaler is needed, and
whether AMP should be faster than FP32 here (taught in ``00_setup_check`` and ``07_amp_training_recipe``).
The dtype itself is :func:`amp_lab.gpus.amp_dtype_for`'s, so every door a learner asks through agrees."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import cpus, hardware
from ._checks import MAX_STEPS, ArgumentTypeError, bounded_list, check_instance
from .dtypes import dtype_name


@dataclass(frozen=True)
class AmpChoice:
    """The outcome of :func:`choose_amp_dtype`.

    ``dtype`` is the autocast dtype, ``use_scaler`` whether a ``GradScaler`` must be enabled,
    ``expect_speedup`` whether AMP should beat FP32 on large matmuls on this hardware (None:
    unknown, measure it), ``steps`` the questions asked on the way, as ``(question, answer)``
    pairs, and ``advice`` what to do with the answer.  ``basis`` is the hardware fact the
    expectation rests on (a phrase such as "this CPU has no AVX512-BF16 or AMX-BF16"), and
    ``verdict`` the machine's one-line verdict from ``hardware.machine_verdict``.
    """

    device: str
    dtype: torch.dtype
    use_scaler: bool
    expect_speedup: bool | None
    steps: tuple[tuple[str, str], ...]
    advice: str
    basis: str = ""
    verdict: str = ""

    def __str__(self) -> str:
        lines = [f"{i}. {q} {a}" for i, (q, a) in enumerate(self.steps, 1)]
        scaler = "with torch.amp.GradScaler" if self.use_scaler else "no GradScaler needed"
        lines.append(f"=> autocast to {dtype_name(self.dtype)} on {self.device}, {scaler}")
        lines.append(f"   {self.advice}")
        return "\n".join(lines)



def choose_amp_dtype(report=None, *, device=None) -> AmpChoice:
    """Walk the decision flow for this machine (or for ``report``, a ``hardware.MachineReport``).

    Taught in ``07_amp_training_recipe``.  The dtype, the scaler and the expectation are the
    course's one decision, ``hardware.machine_verdict`` (the same as ``device.amp_dtype`` and the
    machine report's ``race_dtype``); whether a CPU multiplies the dtype in hardware is
    ``cpus.cpu_has_native``'s answer.  This function adds the questions a learner would ask
    on the way, so the decision can be read:

    * CUDA, compute capability 8.0 or later (Ampere, Ada, Hopper, Blackwell): bfloat16, no scaler.
      Its Tensor Cores multiply it, and it keeps FP32's exponent range, so gradients do not underflow.
    * CUDA Volta and Turing (e.g. the T4): float16 with a GradScaler; their Tensor Cores multiply
      only float16.  Before Volta: float16 with a GradScaler, for memory, with little or no speed-up.
    * Apple GPUs (MPS): float16 with a GradScaler.
    * CPU: bfloat16, the dtype CPU autocast is built for, no scaler.  It is fast only where the CPU
      multiplies bfloat16 in hardware (AMX-BF16, AVX512-BF16, ARM BF16); without that, AMP is
      expected to be slower than FP32, and the choice says so.

    The facts are read from ``report`` itself (not from its stored verdict), so a report whose
    hardware facts were replaced (``hardware.report_for``, ``dataclasses.replace``) gets its own flow.
    ``report`` must be a ``hardware.MachineReport`` (TypeError otherwise).
    """
    if report is None:
        report = hardware.describe(device)
    else:
        _check_report("report", report)
    v = hardware.machine_verdict(
        cuda_available=report.cuda_available,
        tensor_cores=report.tensor_cores,
        flags=report.cpu_flags or {},
        device_type=report.race_device,
        system=report.system,
    )
    dtype, name = v.dtype, dtype_name(v.dtype)
    steps: list[tuple[str, str]] = []

    def choice(basis: str, advice: str) -> AmpChoice:
        return AmpChoice(v.device, dtype, v.use_scaler, v.expect_speedup, tuple(steps), advice, basis, v.text)

    if v.device == "cuda":
        gpu = report.gpu_name or "the GPU"
        steps.append(("Is the course running on a CUDA GPU?", f"yes: {gpu}."))
        tc = report.tensor_cores
        if tc is None:
            steps.append(("Does it have Tensor Cores?", "unknown: the GPU's compute capability is not known."))
            return choice(
                "the GPU's compute capability is unknown",
                f"{name} runs on every CUDA GPU and needs a GradScaler; measure whether it is faster here.",
            )
        sm = f"sm_{tc.capability[0]}{tc.capability[1]}"
        if not tc.has_tensor_cores:
            steps.append(("Does it have Tensor Cores?", f"no ({tc.architecture}, {sm})."))
            hope = "a modest speed-up at most" if v.expect_speedup is None else "little or no speed-up"
            return choice(
                f"{tc.architecture} has no Tensor Cores",
                f"{name} halves activation memory, but without Tensor Cores expect {hope}; measure it.",
            )
        steps.append(("Does it have Tensor Cores?", f"yes, generation {tc.generation} ({tc.architecture}, {sm})."))
        question = "Do they multiply bfloat16 (compute capability 8.0 or later)?"
        if dtype == torch.bfloat16:
            steps.append((question, "yes: bfloat16 has FP32's exponent range, so gradients do not underflow."))
            return choice(
                f"{tc.architecture} Tensor Cores multiply bfloat16",
                "Expect a speed-up on large matmuls (small ones gain little); the FP32 baseline may "
                "already use TF32 on these Tensor Cores.",
            )
        steps.append((question, "no: float16, whose small range needs loss scaling."))
        return choice(
            f"{tc.architecture} Tensor Cores multiply float16",
            "Expect a speed-up on large matmuls with dimensions that are multiples of 8; small ones gain little.",
        )

    if v.device == "mps":
        steps.append(("Is the course running on a CUDA GPU?", f"no: an Apple GPU (MPS), where autocast uses {name}."))
        steps.append(("Does it have Tensor Cores?", f"no: {name} mainly halves the bytes moved, and needs loss scaling."))
        return choice(
            "Apple GPUs have no Tensor Cores",
            "Expect a modest speed-up at most, on large models; measure it.",
        )

    steps.append(("Is the course running on a CUDA GPU?", f"no: the CPU, where autocast uses {name}."))
    flags = report.cpu_flags or {}
    native = cpus.cpu_has_native(dtype, flags)
    labels = cpus.cpu_native_labels(dtype, flags)
    question = f"Does the CPU multiply {name} in hardware?"
    if native is None:
        steps.append((question, "unknown on this system."))
        return choice(
            f"this system does not report the CPU's {name} instructions",
            "Measure before you decide: the comparison in section 7 tells.",
        )
    if not native:
        lacking = " or ".join(labels)
        steps.append((question, f"no (no {lacking}): torch converts to FP32 and back around every multiply."))
        return choice(
            f"this CPU has no {lacking}",
            f"{name} is emulated here, so expect AMP to be slower than FP32: use it to learn the recipe "
            "(or to save memory), and train in FP32 when speed matters on this machine.",
        )
    having = " and ".join(labels)
    steps.append((question, f"yes: {having}."))
    if v.expect_speedup is False:  # a Mac: FP32 matmuls run on Apple's matrix units
        steps.append(
            ("Do FP32 matmuls have faster hardware?", "yes: on a Mac they run on Apple's matrix units (Accelerate).")
        )
        return choice(
            f"this CPU has {having}, but its FP32 matmuls run on Apple's matrix units",
            f"Expect AMP to be no faster than FP32 here; {name} still halves activation memory.",
        )
    return choice(
        f"this CPU has {having}",
        f"Expect a speed-up on large matrices; on small ones the casts cost more than the faster multiply "
        f"saves. {name} needs no GradScaler.",
    )



_SAPPHIRE_RAPIDS_CPUINFO = (
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ss ht syscall nx pdpe1gb rdtscp lm pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt "
    "aes xsave avx f16c rdrand avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 "
    "avx512vbmi avx512_vnni avx512_bitalg avx512_vpopcntdq avx512_fp16 amx_bf16 amx_tile amx_int8\n"
)



def example_machines(base=None) -> list[tuple[str, hardware.MachineReport]]:
    """``(name, hardware.MachineReport)`` for machines a learner may meet, for 07's table.

    GPUs are described by their compute capability, CPUs by an excerpt of their own
    ``/proc/cpuinfo`` (read by ``cpus.cpu_flags``, as this machine's is), so the table shows
    what :func:`choose_amp_dtype` decides for each, whatever machine runs the notebook.
    ``base`` is the report whose other facts (versions, threads) they share (default: this CPU's).
    """
    if base is None:
        base = hardware.describe("cpu")
    else:
        _check_report("base", base)

    def gpu(name, capability):
        return name, hardware.report_for("cuda", capability=capability, gpu_name=name, base=base, system="Linux")

    def cpu(name, cpuinfo):
        return name, hardware.report_for(
            "cpu", flags=cpus.cpu_flags(cpuinfo), cpu=cpus.cpu_model(cpuinfo), base=base, system="Linux"
        )

    return [
        gpu("NVIDIA H100 (sm_90)", (9, 0)),
        gpu("NVIDIA A100 (sm_80)", (8, 0)),
        gpu("NVIDIA T4 (sm_75)", (7, 5)),
        gpu("NVIDIA V100 (sm_70)", (7, 0)),
        gpu("GeForce GTX 1080 (sm_61)", (6, 1)),
        cpu("Intel Xeon 8480+ (AMX-BF16)", _SAPPHIRE_RAPIDS_CPUINFO),
        cpu("AWS Graviton 3 (ARM BF16)", _GRAVITON3_CPUINFO),
        cpu("laptop with AVX2 only", _AVX2_LAPTOP_CPUINFO),
    ]



def choice_rows(machines) -> list[list[str]]:
    """Table rows (for ``widgets.table_html``, header :data:`CHOICE_HEADER`): the decision flow's
    answer for each ``(name, report)`` of ``machines`` (e.g. :func:`example_machines`): a list of pairs
    of a string and a ``hardware.MachineReport``."""
    machines = bounded_list("machines", machines, MAX_STEPS, "a list of (name, hardware.MachineReport) pairs")
    for i, pair in enumerate(machines):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ArgumentTypeError(f"machines[{i}] must be a (name, hardware.MachineReport) pair, got {type(pair).__name__}: {pair!r:.80}")
        check_instance(f"machines[{i}][0]", pair[0], str, "a string (the machine's name)")
        _check_report(f"machines[{i}][1]", pair[1])
    rows = []
    for name, report in machines:
        c = choose_amp_dtype(report)
        speed = {True: "yes, on large matmuls", False: "no", None: "measure it"}[c.expect_speedup]
        rows.append([name, dtype_name(c.dtype), "yes" if c.use_scaler else "no", speed, c.basis])
    return rows



CHOICE_HEADER = ["machine", "autocast dtype", "GradScaler", "faster than FP32?", "because"]



def _check_report(name: str, report) -> None:
    check_instance(name, report, hardware.MachineReport, "a hardware.MachineReport (e.g. from hardware.describe())")


# Excerpts of real /proc/cpuinfo text: cpus.cpu_flags reads them as it reads this machine's.
_AVX2_LAPTOP_CPUINFO = (
    "model name\t: Intel(R) Core(TM) i7-10510U CPU @ 1.80GHz\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ht syscall nx pdpe1gb rdtscp lm pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes "
    "xsave avx f16c rdrand lahf_lm abm 3dnowprefetch fsgsbase bmi1 avx2 smep bmi2 erms invpcid adx "
    "clflushopt xsaveopt xsavec xgetbv1 xsaves\n"
)



_GRAVITON3_CPUINFO = (
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt "
    "fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg "
    "dcpodp svei8mm svebf16 i8mm bf16 dgh rng\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n"
)
