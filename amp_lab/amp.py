"""The AMP decision for a machine, read as a learner's questions: which autocast dtype, whether a GradScaler is
needed, whether AMP should be faster here (``07_amp_training_recipe``); the decision is ``machine_verdict``'s."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import cpus, hardware
from ._checks import MAX_STEPS, ArgumentTypeError, bounded_list, check_instance
from .dtypes import dtype_name
from .text import say


@dataclass(frozen=True)
class AmpChoice:
    """The outcome of :func:`choose_amp_dtype`.  ``step_codes`` (question, answer), ``basis_code`` (the fact the
    expectation rests on) and ``advice_code`` are codes of :data:`amp_lab.text.REASONS` filled from ``facts``."""

    device: str
    dtype: torch.dtype
    use_scaler: bool
    expect_speedup: bool | None
    step_codes: tuple[tuple[str, str], ...]
    basis_code: str
    advice_code: str
    facts: dict
    verdict: str = ""

    @property
    def steps(self) -> tuple[tuple[str, str], ...]:
        return tuple((say(q, **self.facts), say(a, **self.facts)) for q, a in self.step_codes)

    @property
    def basis(self) -> str:
        return say(self.basis_code, **self.facts)

    @property
    def advice(self) -> str:
        return say(self.advice_code, **self.facts)

    def __str__(self) -> str:
        lines = [f"{i}. {q} {a}" for i, (q, a) in enumerate(self.steps, 1)]
        scaler = "with torch.amp.GradScaler" if self.use_scaler else "no GradScaler needed"
        lines.append(f"=> autocast to {dtype_name(self.dtype)} on {self.device}, {scaler}")
        lines.append(f"   {self.advice}")
        return "\n".join(lines)


def choose_amp_dtype(report=None, *, device=None) -> AmpChoice:
    """Walk the decision flow for this machine (or for ``report``, a ``hardware.MachineReport``, read from its
    facts, not its stored verdict): ``hardware.machine_verdict``'s decision with the questions on the way."""
    if report is None:
        report = hardware.describe(device)
    else:
        _check_report("report", report)
    v = hardware.report_verdict(report)
    facts = {"name": dtype_name(v.dtype)}
    tc = report.tensor_cores
    if v.device == "cuda":
        facts["gpu"] = report.gpu_name or "the GPU"
        if tc is not None:
            sm = f"sm_{tc.capability[0]}{tc.capability[1]}"
            hope = "a modest speed-up at most" if v.expect_speedup is None else "little or no speed-up"
            facts.update(arch=tc.architecture, sm=sm, generation=tc.generation, hope=hope)
    elif v.device == "cpu":
        labels = cpus.cpu_native_labels(v.dtype, report.cpu_flags or {})
        facts.update(lacking=" or ".join(labels), having=" and ".join(labels))
    answers, key = hardware.VERDICTS[v.outcome.removeprefix("verdict.")][2:]
    first = {"cuda": "amp.a_cuda_yes", "mps": "amp.a_mps", "cpu": "amp.a_cpu"}[v.device]
    questions = _QUESTIONS["cpu" if v.device == "cpu" else "gpu"]
    steps = tuple(zip(questions, (first, *answers), strict=False))
    basis, advice = f"amp.basis_{key}", f"amp.advice_{key}"
    return AmpChoice(v.device, v.dtype, v.use_scaler, v.expect_speedup, steps, basis, advice, facts, v.text)


# The questions a learner asks on the way (codes of REASONS); hardware.VERDICTS has each verdict's answers.
_QUESTIONS = {
    "gpu": ("amp.q_cuda", "amp.q_tensor_cores", "amp.q_bf16_cores"),
    "cpu": ("amp.q_cuda", "amp.q_cpu_native", "amp.q_fp32_hardware"),
}


def example_machines(base=None) -> list[tuple[str, hardware.MachineReport]]:
    """``(name, hardware.MachineReport)`` for machines a learner may meet, for 07's table: GPUs by compute
    capability, CPUs by the instruction sets their ``/proc/cpuinfo`` lists; ``base`` (default: this CPU's) has
    the rest."""
    if base is None:
        base = hardware.describe("cpu")
    else:
        _check_report("base", base)

    def gpu(name, capability):
        return name, hardware.report_for(
            "cuda", capability=capability, gpu_name=name, base=base, system="Linux"
        )

    def cpu(name, model, arch, *present):  # present: the keys of cpus.CPU_FEATURES the CPU lists
        flags = {f.key: f.key in present if f.arch == arch else None for f in cpus.CPU_FEATURES}
        return name, hardware.report_for("cpu", flags=flags, cpu=model, base=base, system="Linux")

    xeon = "Intel(R) Xeon(R) Platinum 8480+"
    return [
        gpu("NVIDIA H100 (sm_90)", (9, 0)),
        gpu("NVIDIA A100 (sm_80)", (8, 0)),
        gpu("NVIDIA T4 (sm_75)", (7, 5)),
        gpu("NVIDIA V100 (sm_70)", (7, 0)),
        gpu("GeForce GTX 1080 (sm_61)", (6, 1)),
        cpu("Intel Xeon 8480+ (AMX-BF16)", xeon, "x86", "avx512_bf16", "amx_bf16", "avx512_fp16"),
        cpu("AWS Graviton 3 (ARM BF16)", "ARM Neoverse-V1", "arm", "arm_bf16", "arm_sve_bf16"),
        cpu("laptop with AVX2 only", "Intel(R) Core(TM) i7-10510U CPU @ 1.80GHz", "x86"),
    ]


def choice_rows(machines) -> list[list[str]]:
    """Table rows (header :data:`CHOICE_HEADER`): the decision flow's answer for each ``(name, report)`` pair of
    ``machines`` (e.g. :func:`example_machines`)."""
    machines = bounded_list("machines", machines, MAX_STEPS, "a list of (name, hardware.MachineReport) pairs")
    for i, pair in enumerate(machines):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ArgumentTypeError(
                f"machines[{i}] must be a (name, hardware.MachineReport) pair, got {type(pair).__name__}: {pair!r:.80}"
            )
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
    check_instance(
        name, report, hardware.MachineReport, "a hardware.MachineReport (e.g. from hardware.describe())"
    )
