"""``python -m amp_lab doctor``, the pre-flight (``00_setup_check``): the machine report and its reasons, then
``ok`` or ``PROBLEM`` (with the fix) per package the course needs; exits 0 when the course can run, else 1."""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass
from importlib import metadata

import torch
from matplotlib.figure import Figure

from ._checks import ArgumentTypeError, check_callable, check_instance
from .gpus import arch_advice
from .hardware import describe
from .text import wrap

MIN_PYTHON = (3, 10)

USAGE = (
    "usage: python -m amp_lab doctor [-h]\n\n"
    "Check this machine and environment for the course: prints the machine report, then one line per\n"
    "package. Exits 0 when the course can run, 1 when something must be fixed first.\n\n"
    "options:\n  -h, --help  show this message and exit"
)


@dataclass(frozen=True)
class Requirement:
    distribution: str
    minimum: str
    why: str


REQUIREMENTS = (
    # pyproject.toml's bound: the oldest torch whose FP8 E4M3 cast saturates at 448, as notebook 01 teaches
    Requirement("torch", "2.13", "torch.amp (autocast, GradScaler(device)) and torch 2.13's FP8 casts"),
    Requirement("jupyterlab", "4.0", "the course is a set of JupyterLab notebooks"),
    Requirement("ipywidgets", "8.0", "sliders, buttons and readouts in the notebooks"),
    Requirement("jupyterlab_widgets", "3.0", "ipywidgets 8 in JupyterLab (without it sliders show as text)"),
    Requirement("ipykernel", "6.0", "runs the notebooks' Python"),
    Requirement("matplotlib", "3.7", "every plot"),
    Requirement("numpy", "1.24", "plots and data"),
    Requirement("tqdm", "4.66", "progress bars"),
    Requirement("scikit-learn", "1.3", "ships the digits data set the training notebooks use"),
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{'ok     ' if self.ok else 'PROBLEM'}] {self.name}: {self.detail}"
        return text + (f"\n           fix: {self.fix}" if not self.ok and self.fix else "")


def version_tuple(text: str) -> tuple[int, int, int]:
    """The first three numbers of a version: '2.13.0+cpu' -> (2, 13, 0), '4.0rc1' -> (4, 0, 0)."""
    return (*map(int, re.findall(r"\d+", re.match(r"[\d.]*", text).group())), 0, 0, 0)[:3]


def check_requirement(req: Requirement, version_of=metadata.version) -> Check:
    install = f"make lab (or: pip install '{req.distribution}>={req.minimum}')"
    try:
        found = version_of(req.distribution)
    except metadata.PackageNotFoundError:
        return Check(req.distribution, False, f"not installed; needed for {req.why}", install)
    if not isinstance(found, str):
        raise ArgumentTypeError(
            f"version_of must return a version string, got {type(found).__name__}: {found!r:.80}"
        )
    ok = version_tuple(found) >= version_tuple(req.minimum)
    detail = found if ok else f"{found} is older than {req.minimum}; needed for {req.why}"
    return Check(req.distribution, ok, detail, install)


def check_python(version_info=sys.version_info) -> Check:
    found, need = ".".join(map(str, tuple(version_info)[:3])), ".".join(map(str, MIN_PYTHON))
    ok = tuple(version_info)[:2] >= MIN_PYTHON
    return Check(
        "python", ok, found if ok else f"{found} is older than {need}", f"install Python {need} or newer"
    )


def check_amp_api() -> Check:
    if missing := [n for n in ("autocast", "GradScaler") if not hasattr(torch.amp, n)]:
        return Check("torch.amp", False, f"missing {', '.join(missing)}", "upgrade torch to 2.13 or newer")
    return Check("torch.amp", True, "torch.autocast and torch.amp.GradScaler(device) available")


def check_gpu_kernels(
    capability=None, arch_list=None, cuda_version=None, *, gpu_name: str = "this GPU"
) -> Check | None:
    """Whether the installed torch has kernels for the GPU (None without a CUDA GPU; the facts default to
    this machine's): the CUDA 13 wheels, for one, have none for Volta."""
    if capability is None:
        if not torch.cuda.is_available() or torch.version.hip is not None:
            return None
        capability, arch_list = tuple(torch.cuda.get_device_capability()), torch.cuda.get_arch_list()
        cuda_version, gpu_name = torch.version.cuda, torch.cuda.get_device_name()
    advice = arch_advice(capability, list(arch_list or []), cuda_version)
    cap = f"sm_{capability[0]}{capability[1]}"
    if advice is None:
        return Check("GPU kernels", True, f"this torch has kernels for {gpu_name} ({cap})")
    return Check("GPU kernels", False, f"{gpu_name} ({cap}): {advice}", "install the torch build named above")


def check_plotting() -> Check:
    try:
        fig = Figure(figsize=(1, 1))
        fig.add_subplot().plot([0, 1])
        fig.savefig(io.BytesIO(), format="png")
    except Exception as exc:  # any failure here means plots will not render
        return Check("plotting", False, f"matplotlib cannot render a PNG ({exc})", "reinstall matplotlib")
    return Check("plotting", True, "matplotlib renders PNG")


def run_checks(version_of=metadata.version) -> list[Check]:
    checks = [check_python(), *(check_requirement(r, version_of) for r in REQUIREMENTS)]
    if all(c.ok for c in checks if c.name == "torch"):
        checks.append(check_amp_api())
        if (gpu := check_gpu_kernels()) is not None:
            checks.append(gpu)
    if all(c.ok for c in checks if c.name == "matplotlib"):
        checks.append(check_plotting())
    return checks


def _stream(name: str, value, default):
    if value is None:
        return default
    if not callable(getattr(value, "write", None)):
        raise ArgumentTypeError(
            f"{name} must be a text stream with a write() method, such as sys.stdout or io.StringIO(), or None; "
            f"got {type(value).__name__}: {value!r:.80}"
        )
    return value


def main(argv=None, *, version_of=metadata.version, out=None, err=None) -> int:
    """Run the pre-flight; ``argv`` are the arguments after ``doctor``.  Only ``-h``/``--help`` is understood:
    anything else prints the usage to ``err`` (default stderr) and returns 2, as argparse does."""
    out, err = _stream("out", out, sys.stdout), _stream("err", err, sys.stderr)
    argv = check_instance(
        "argv", [] if argv is None else argv, (list, tuple), "a list of command-line arguments"
    )
    if "-h" in argv or "--help" in argv:
        print(USAGE, file=out)
        return 0
    if argv:
        print(
            f"{USAGE}\n\namp_lab doctor: error: unrecognized arguments: {' '.join(map(str, argv))}", file=err
        )
        return 2
    check_callable("version_of", version_of)
    print("amp-lab doctor: is this machine ready for the course?\n", file=out)
    try:
        report = describe()
        print(wrap(report), *(wrap(f"  why: {r}") for r in report.reasons), sep="\n", file=out)  # its facts
    except Exception as exc:  # the checks below say how to fix it
        print(f"(machine report unavailable: {exc})", file=out)
    print("\nEnvironment", file=out)
    checks = run_checks(version_of)
    for c in checks:
        print(c.line(), file=out)
    if problems := [c.name for c in checks if not c.ok]:
        print(
            f"\n{len(problems)} problem(s): the course cannot run until they are fixed ({', '.join(problems)}).",
            file=out,
        )
        return 1
    print(wrap(f"\nAll checks passed: the course can run here. {next_step()}"), file=out)
    return 0


def next_step() -> str:
    """What to do after a clean check: in a shell, start the course; in a Jupyter kernel (notebook 00), go on."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    if get is not None and getattr(get(), "kernel", None) is not None:
        return "You are in the course already: go on to `01_float_formats.ipynb`."
    return "Start it with `make lab`."
