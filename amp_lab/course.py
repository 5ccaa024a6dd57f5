"""The course map: each notebook and what it will do on this machine (``00_setup_check``).

The lessons are read from the notebooks themselves (their ``# NN · Title`` heading and ``**Time:** about N
minutes``), so a new notebook joins the map by being there.  What a lesson does on a machine is a
:class:`~amp_lab.text.Reading` composed from the machine report (``hardware.describe()``): its device, its
dtype and its verdict, a prediction from hardware facts.  None of them states a measured outcome.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import torch

from ._checks import check_instance
from .amp import choose_amp_dtype
from .cpus import cpu_has_native, cpu_native_labels
from .gpus import fp8_matmul_support
from .hardware import MachineReport, describe
from .text import Reading

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@dataclass(frozen=True)
class Lesson:
    file: str
    title: str
    minutes: int


def read_lesson(path: Path) -> Lesson:
    """A notebook's place on the map, from its first cells: the ``# NN · Title`` heading and the
    ``**Time:** about N minutes`` line."""
    nb = nbformat.read(path, as_version=4)
    header = "\n".join(c.source for c in nb.cells[:3] if c.cell_type == "markdown")
    title = re.search(r"^# \d\d · (.+)$", header, re.M)
    minutes = re.search(r"\*\*Time:\*\*\s*about (\d+) minutes", header)
    if not (title and minutes):
        raise ValueError(
            f"{path.name} needs a '# NN · Title' heading and '**Time:** about N minutes' in its first cells"
        )
    return Lesson(path.name, title.group(1).strip(), int(minutes.group(1)))


def lessons(directory: Path = NOTEBOOKS) -> tuple[Lesson, ...]:
    """Every numbered notebook in ``directory``, in order."""
    return tuple(read_lesson(p) for p in sorted(directory.glob("[0-9][0-9]_*.ipynb")))


LESSONS = lessons()


def _where(report: MachineReport) -> str:
    if report.race_device == "cuda":
        return report.gpu_name or "the GPU"
    if report.race_device == "mps":
        return "the Apple GPU (MPS)"
    return "the CPU"


def _fp16_on_cpu(report: MachineReport) -> str:
    native = cpu_has_native(torch.float16, report.cpu_flags)
    if native:
        return "course.04_cpu_fp16_native"
    return "course.04_cpu_fp16_emulated" if native is False else "course.04_cpu_fp16_unknown"


def _fp8(report: MachineReport, facts: dict) -> str:
    # Where FP8 GEMMs run is a pure function of the GPU's facts; without them the notebook runs its FP8
    # cells on the CPU, whose torch._scaled_mm emulates them.
    if report.race_device != "cuda":
        return "course.08_cpu"
    support = fp8_matmul_support(report.capability, list(report.arch_list) or None)
    facts["reason"] = support.reason
    return "course.08_gpu" if support.supported else "course.08_gpu_without_fp8"


def on_this_machine(lesson: Lesson, report: MachineReport) -> Reading:
    """What ``lesson`` will do on the machine ``report`` describes: a reading whose ``str`` is one sentence.

    Every statement about speed or memory is composed from the report's verdict (its dtype, GradScaler and
    prediction), never typed as a fixed outcome, so each machine reads its own story: a prediction that
    notebooks 06 and 07 then measure."""
    check_instance("lesson", lesson, Lesson, "a Lesson (one of course.LESSONS)")
    check_instance(
        "report", report, MachineReport, "a MachineReport (hardware.describe() or hardware.report_for())"
    )
    device, cuda = report.race_device, report.race_device == "cuda"
    facts = {
        "where": _where(report),
        "device": device,
        "dtype": str(report.race_dtype).removeprefix("torch."),
        "verdict": report.verdict,
        "labels": " and ".join(cpu_native_labels(torch.float16, report.cpu_flags)),
    }
    number = lesson.file[:2]
    if number in ("00", "01"):
        code = "course.same_everywhere"
    elif number == "02":
        code = "course.02_cuda" if cuda else "course.02_cpu"
    elif number == "03":
        code = "course.03"
    elif number == "04":
        code = "course.04_gpu" if device != "cpu" else _fp16_on_cpu(report)
    elif number == "05":
        code = "course.05_cuda" if cuda else ("course.05_mps" if device == "mps" else "course.05_cpu")
    elif number == "06":
        code = "course.06"
    elif number == "07":
        # 07 trains in what its decision flow picks from the report's hardware facts (not from a verdict
        # stored in the report, which a report with replaced facts may carry stale): say the same.
        choice = choose_amp_dtype(report)
        facts["dtype"] = str(choice.dtype).removeprefix("torch.")
        scaler = "course.07_scaler" if choice.use_scaler else "course.07_no_scaler"
        expect = {
            True: "course.expect_faster",
            False: "course.expect_not_faster",
            None: "course.expect_unknown",
        }
        return Reading(scaler, (expect[choice.expect_speedup],), facts)
    elif number == "08":
        code = _fp8(report, facts)
    elif number == "09":
        # The subnormal timing is a CPU pitfall: it runs on the CPU whatever the device.
        code = "course.09_cpu" if device == "cpu" else "course.09_elsewhere"
    else:
        code = "course.see_the_notebook"
    return Reading(code, (), facts)


def course_map(report: MachineReport | None = None) -> list[tuple[str, int, str]]:
    """(notebook, minutes, what it does on this machine) for every lesson."""
    if report is not None:
        check_instance("report", report, MachineReport, "a MachineReport (hardware.describe()) or None")
    report = report or describe()
    return [(lesson.file, lesson.minutes, str(on_this_machine(lesson, report))) for lesson in LESSONS]
