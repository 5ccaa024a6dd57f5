"""The course map: each notebook and what it will do on this machine (``00_setup_check``).

The sentences are composed from the machine report (``hardware.describe()``): its device, its
dtype and its verdict, a prediction from hardware facts.  None of them states a measured outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_instance
from .amp import choose_amp_dtype
from .cpus import cpu_has_native, cpu_native_labels
from .gpus import fp8_matmul_support
from .hardware import MachineReport, describe


@dataclass(frozen=True)
class Lesson:
    file: str
    title: str
    minutes: int
    summary: str


LESSONS = (
    Lesson("00_setup_check.ipynb", "Setup check", 15, "pre-flight: machine report, widgets, plots"),
    Lesson("01_float_formats.ipynb", "Floating-point formats", 45,
           "FP32, TF32, BF16, FP16 and FP8 bit by bit, with a bit explorer"),
    Lesson("02_tensor_cores.ipynb", "Tensor Cores", 50,
           "what a Tensor Core computes; FP32 versus FP16 accumulation; multiples of 8"),
    Lesson("03_underflow_and_overflow.ipynb", "Underflow and overflow", 65,
           "your own model's gradients against FP16's range, with a loss-scale slider"),
    Lesson("04_loss_scaling_from_scratch.ipynb", "Loss scaling from scratch", 65,
           "write static and dynamic loss scaling, prove it equals torch.amp.GradScaler"),
    Lesson("05_autocast_op_lists.ipynb", "Autocast op lists", 50,
           "which ops autocast runs in which precision, asked of autocast itself"),
    Lesson("06_timing_race.ipynb", "The timing race", 70, "FP32 against AMP, timed honestly"),
    Lesson("07_amp_training_recipe.ipynb", "The AMP training recipe", 85,
           "end-to-end mixed-precision training, checkpoints and a checklist"),
    Lesson("08_fp8_and_block_scaling.ipynb", "FP8 and block scaling", 65,
           "scale into FP8 yourself: tensorwise, delayed and MX block scaling, proven against torchao"),
    Lesson("09_pitfalls.ipynb", "Pitfalls practitioners hit", 50,
           "six mixed-precision pitfalls run live: cast cache, Adam eps, swamping, subnormals, attention, compile"),
)


_EXPECTATION = {
    True: "the verdict expects AMP to beat FP32 on large matrices",
    False: "the verdict expects AMP not to beat FP32 here",
    None: "the verdict leaves the speed to the measurement",
}


def _where(report: MachineReport) -> str:
    if report.race_device == "cuda":
        return report.gpu_name or "the GPU"
    if report.race_device == "mps":
        return "the Apple GPU (MPS)"
    return "the CPU"


def on_this_machine(lesson: Lesson, report: MachineReport) -> str:
    """One sentence: what ``lesson`` will do on the machine ``report`` describes.

    Every statement about speed or memory is composed from the report's verdict (its dtype,
    GradScaler and prediction), never typed as a fixed outcome, so each machine reads its own
    story: a prediction that notebooks 06 and 07 then measure.
    """
    check_instance("lesson", lesson, Lesson, "a Lesson (one of course.LESSONS)")
    check_instance("report", report, MachineReport, "a MachineReport (hardware.describe() or hardware.report_for())")
    cuda = report.race_device == "cuda"
    where = _where(report)
    dtype = str(report.race_dtype).removeprefix("torch.")
    scaler = "with a GradScaler" if report.use_scaler else "without a GradScaler (bfloat16 needs none)"
    name = lesson.file
    if name.startswith(("00_", "01_")):
        return "runs the same on every machine"
    if name.startswith("02_"):
        if cuda:
            return f"measures the multiple-of-8 alignment effect on {where}"
        return "emulates Tensor Core arithmetic; the alignment timing needs a CUDA GPU and is skipped"
    if name.startswith("03_"):
        return f"trains a small model on {where} and inspects its real gradients"
    if name.startswith("04_"):
        if report.race_device != "cpu":
            return f"trains in FP16 on {where} with your scaler and GradScaler"
        native = cpu_has_native(torch.float16, report.cpu_flags)
        if native:
            labels = " and ".join(cpu_native_labels(torch.float16, report.cpu_flags))
            why = f"this CPU multiplies FP16 in hardware ({labels})"
        elif native is False:
            why = "this CPU has no FP16 matmul instructions, so FP16 is emulated and the model is kept small"
        else:
            why = "whether this CPU multiplies FP16 in hardware is unknown, so the model is kept small"
        return f"trains in FP16 on the CPU with your scaler and GradScaler; {why}"
    if name.startswith("05_"):
        if cuda:
            return "probes autocast on CUDA (float16, autocast's default) and on the CPU (bfloat16)"
        if report.race_device == "mps":
            return "probes autocast on MPS (float16) and lists the CPU and CUDA rules for comparison"
        return "probes CPU autocast (bfloat16); the CUDA list is shown as documented"
    if name.startswith("06_"):
        return f"races FP32 against {dtype} autocast on {report.race_device}: {report.verdict}"
    if name.startswith("07_"):
        # 07 trains in what its decision flow picks from the report's hardware facts (not from a verdict
        # stored in the report, which a report with replaced facts may carry stale): say the same.

        choice = choose_amp_dtype(report)
        dtype = str(choice.dtype).removeprefix("torch.")
        scaler = "with a GradScaler" if choice.use_scaler else "without a GradScaler (bfloat16 needs none)"
        return (
            f"trains end to end in {dtype} on {where} {scaler}, then measures it against FP32; "
            f"{_EXPECTATION[choice.expect_speedup]}"
        )
    if name.startswith("08_"):
        # Where FP8 GEMMs run is a pure function of the GPU's facts (race.fp8_matmul_support); without them
        # the notebook runs its FP8 cells on the CPU, whose torch._scaled_mm emulates them.

        if cuda:
            support = fp8_matmul_support(report.capability, list(report.arch_list) or None)
            if support.supported:
                return f"trains with FP8 matmuls on the Tensor Cores of {where}; make gpu-check races them"
            return f"runs its FP8 matmuls on the CPU, emulated: {support.reason}"
        return (
            "runs its FP8 matmuls on the CPU, emulated: the numbers are a GPU's, the speed is not "
            "(FP8 GEMMs run in hardware on NVIDIA GPUs of compute capability 8.9 and later)"
        )
    if name.startswith("09_"):
        # The subnormal timing is a CPU pitfall: it runs on the CPU whatever the device.
        if report.race_device == "cpu":
            return "runs six pitfalls live on the CPU, the subnormal timing included"
        return f"runs five pitfalls live on {where}; the subnormal timing runs on the CPU"
    return lesson.summary


def course_map(report: MachineReport | None = None) -> list[tuple[str, int, str]]:
    """(notebook, minutes, what it does on this machine) for every lesson."""
    if report is not None:
        check_instance("report", report, MachineReport, "a MachineReport (hardware.describe()) or None")
    report = report or describe()
    return [(lesson.file, lesson.minutes, on_this_machine(lesson, report)) for lesson in LESSONS]
