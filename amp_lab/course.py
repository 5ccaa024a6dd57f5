"""The course map (``00_setup_check``): each notebook, read from its ``# NN · Title`` heading and
``**Time:** about N minutes`` line, and what it will do on this machine (a prediction from the report)."""

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


def lessons(directory: Path = NOTEBOOKS) -> tuple[Lesson, ...]:
    """Every numbered notebook in ``directory``, in order, from the heading and time in its first cells."""
    found = []
    for path in sorted(directory.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        header = "\n".join(c.source for c in nb.cells[:3] if c.cell_type == "markdown")
        title = re.search(r"^# \d\d · (.+)$", header, re.M)
        minutes = re.search(r"\*\*Time:\*\*\s*about (\d+) minutes", header)
        if not (title and minutes):
            raise ValueError(f"{path.name}: no '# NN · Title' heading or '**Time:** about N minutes' line")
        found.append(Lesson(path.name, title.group(1).strip(), int(minutes.group(1))))
    return tuple(found)


LESSONS = lessons()

# a notebook's reading on a device ("NN device"), else on any device ("NN")
_CODES = {
    **dict.fromkeys(["00", "01"], "course.same_everywhere"),
    "03": "course.03",
    "06": "course.06",
    "02": "course.02_cpu",
    "02 cuda": "course.02_cuda",
    "04": "course.04_gpu",
    "05": "course.05_cpu",
    "05 cuda": "course.05_cuda",
    "05 mps": "course.05_mps",
    "08": "course.08_cpu",  # the CPU's torch._scaled_mm emulates FP8 GEMMs
    "09": "course.09_elsewhere",  # the subnormal timing is a CPU pitfall: it runs on the CPU whatever the device
    "09 cpu": "course.09_cpu",
    "10": "course.10",
    "11": "course.11_cpu",  # emulated block recipes everywhere; FP8 GEMMs where notebook 08's decision puts them
}


def on_this_machine(lesson: Lesson, report: MachineReport) -> Reading:
    """What ``lesson`` will do on the machine ``report`` describes (a prediction notebooks 06 and 07 measure)."""
    device = report.race_device
    where = {"cuda": report.gpu_name or "the GPU", "mps": "the Apple GPU (MPS)"}.get(device, "the CPU")
    facts = {
        "where": where,
        "device": device,
        "dtype": str(report.race_dtype).removeprefix("torch."),
        "verdict": report.verdict,
        "labels": " and ".join(cpu_native_labels(torch.float16, report.cpu_flags)),
    }
    number = lesson.file[:2]
    code = _CODES.get(f"{number} {device}", _CODES.get(number, "course.see_the_notebook"))
    if number == "04" and device == "cpu":
        native = cpu_has_native(torch.float16, report.cpu_flags)
        code = {True: "course.04_cpu_fp16_native", False: "course.04_cpu_fp16_emulated"}.get(
            native, "course.04_cpu_fp16_unknown"
        )
    elif number == "07":
        # 07 trains in what its decision flow picks from the report's facts (not a verdict the report may carry stale)
        choice = choose_amp_dtype(report)
        facts["dtype"] = str(choice.dtype).removeprefix("torch.")
        expect = {True: "course.expect_faster", False: "course.expect_not_faster"}.get(
            choice.expect_speedup, "course.expect_unknown"
        )
        return Reading("course.07_scaler" if choice.use_scaler else "course.07_no_scaler", (expect,), facts)
    elif (
        number in ("08", "11") and device == "cuda"
    ):  # where FP8 GEMMs run: a pure function of the GPU's facts
        support = fp8_matmul_support(report.capability, list(report.arch_list) or None)
        facts["reason"] = support.reason
        code = f"course.{number}_gpu" if support.supported else "course.08_gpu_without_fp8"
    return Reading(code, (), facts)


def course_map(report: MachineReport | None = None) -> list[tuple[str, int, str]]:
    """(notebook, minutes, what it does on this machine) for every lesson."""
    if report is not None:
        check_instance("report", report, MachineReport, "a MachineReport (hardware.describe()) or None")
    report = report or describe()
    return [(lesson.file, lesson.minutes, on_this_machine(lesson, report).text) for lesson in LESSONS]
