"""``python -m amp_lab doctor``: the workshop pre-flight.

Prints the machine report (``hardware.describe()``) with the reasons for its verdict, then
checks each package the course needs, one line each: ``ok`` or ``problem`` with the fix.  Exits 0
when the course can run, 1 (with the problems listed last) when it cannot.  Taught in
``00_setup_check``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata

from ._checks import ArgumentTypeError, check_bool, check_callable, check_instance
from .gpus import arch_advice
from .hardware import describe

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
    # pyproject.toml's bound (tests/test_doctor.py keeps the two in step): the oldest torch whose FP8 E4M3
    # cast saturates at 448, as notebook 01 teaches, and on which every test and notebook passed.
    Requirement(
        "torch",
        "2.13",
        "the course teaches torch.amp (autocast, GradScaler(device)) and torch 2.13's FP8 casts",
    ),
    Requirement("jupyterlab", "4.0", "the course is a set of JupyterLab notebooks"),
    Requirement("ipywidgets", "8.0", "sliders, buttons and readouts in the notebooks"),
    Requirement(
        "jupyterlab_widgets",
        "3.0",
        "JupyterLab's front end for ipywidgets 8 (without it sliders show as text)",
    ),
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
        status = "ok     " if self.ok else "PROBLEM"
        text = f"[{status}] {self.name}: {self.detail}"
        if not self.ok and self.fix:
            text += f"\n           fix: {self.fix}"
        return text


def version_tuple(text: str) -> tuple[int, ...]:
    """Leading numeric parts of a version string: '2.13.0+cpu' -> (2, 13, 0)."""
    if not isinstance(text, str):
        raise ArgumentTypeError(
            f"text must be a version string such as '2.13.0', got {type(text).__name__}: {text!r:.80}"
        )
    parts = []
    for piece in text.replace("-", ".").replace("+", ".").split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _at_least(found: str, minimum: str) -> bool:
    a, b = version_tuple(found), version_tuple(minimum)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))


def check_requirement(req: Requirement, version_of=metadata.version) -> Check:
    check_instance("req", req, Requirement, "a Requirement (see doctor.REQUIREMENTS)")
    check_callable("version_of", version_of)
    install = f"make lab (or: pip install '{req.distribution}>={req.minimum}')"
    try:
        found = version_of(req.distribution)
    except metadata.PackageNotFoundError:
        return Check(req.distribution, False, f"not installed; needed for {req.why}", install)
    if not _at_least(found, req.minimum):
        return Check(
            req.distribution, False, f"{found} is older than {req.minimum}; needed for {req.why}", install
        )
    return Check(req.distribution, True, found)


def check_python(version_info=sys.version_info) -> Check:
    if isinstance(version_info, (str, bytes)) or not isinstance(version_info, tuple):
        raise ArgumentTypeError(
            f"version_info must be a tuple such as (3, 12, 1), got {type(version_info).__name__}: {version_info!r:.80}"
        )
    if len(version_info) < 2 or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in tuple(version_info)[:2]
    ):
        raise ValueError(
            f"version_info must start with two integers (major, minor), got {version_info!r:.80}"
        )
    found = ".".join(str(p) for p in tuple(version_info)[:3])
    if tuple(version_info)[:2] < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Check("python", False, f"{found} is older than {need}", f"install Python {need} or newer")
    return Check("python", True, found)


def check_amp_api() -> Check:
    try:
        import torch
    except ImportError:
        return Check("torch.amp", False, "torch is not importable", "make lab")
    missing = [n for n in ("autocast", "GradScaler") if not hasattr(torch.amp, n)]
    if missing:
        return Check("torch.amp", False, f"missing {', '.join(missing)}", "upgrade torch to 2.13 or newer")
    return Check("torch.amp", True, "torch.autocast and torch.amp.GradScaler(device) available")


def check_gpu_kernels(
    capability=None, arch_list=None, cuda_version=None, *, gpu_name: str = "this GPU"
) -> Check | None:
    """Whether the installed torch has kernels for the GPU (None without a CUDA GPU).

    On a GPU the wheel was not built for, ``torch.cuda.is_available()`` is still True and the first kernel
    fails with "no kernel image is available": the CUDA 13 wheels, for one, have no Volta or Pascal
    kernels.  The facts default to this machine's; tests pass other GPUs' and wheels'.
    """
    import torch

    if capability is None:
        if not torch.cuda.is_available() or torch.version.hip is not None:
            return None
        capability = tuple(torch.cuda.get_device_capability())
        arch_list = list(torch.cuda.get_arch_list())
        cuda_version = torch.version.cuda
        gpu_name = torch.cuda.get_device_name()
    if arch_list is None:
        arch_list = []
    # A list or tuple only (arch_supported's rule), checked here: list(5) or list(range(10**12)) never runs.
    if isinstance(arch_list, (str, bytes)) or not isinstance(arch_list, (list, tuple)):
        raise ArgumentTypeError(
            f"arch_list must be a list of strings such as ['sm_80', 'sm_90'] or None, "
            f"got {type(arch_list).__name__}: {arch_list!r:.80}"
        )
    advice = arch_advice(capability, list(arch_list), cuda_version)
    cap = f"sm_{capability[0]}{capability[1]}"
    if advice is None:
        return Check("GPU kernels", True, f"this torch has kernels for {gpu_name} ({cap})")
    return Check("GPU kernels", False, f"{gpu_name} ({cap}): {advice}", "install the torch build named above")


def check_plotting() -> Check:
    try:
        import io

        from matplotlib.figure import Figure

        fig = Figure(figsize=(1, 1))
        fig.add_subplot().plot([0, 1])
        fig.savefig(io.BytesIO(), format="png")
    except Exception as exc:  # any failure here means plots will not render
        return Check("plotting", False, f"matplotlib cannot render a PNG ({exc})", "reinstall matplotlib")
    return Check("plotting", True, "matplotlib renders PNG")


def run_checks(version_of=metadata.version) -> list[Check]:
    check_callable("version_of", version_of)
    checks = [check_python()]
    checks += [check_requirement(r, version_of) for r in REQUIREMENTS]
    if all(c.ok for c in checks if c.name == "torch"):
        checks.append(check_amp_api())
        gpu = check_gpu_kernels()
        if gpu is not None:
            checks.append(gpu)
    if all(c.ok for c in checks if c.name == "matplotlib"):
        checks.append(check_plotting())
    return checks


def _parse(argv, out, err) -> int | None:
    """None when ``argv`` asks for the check; else the exit status after printing help (0) or an error (2)."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise ArgumentTypeError(
            f"argv must be a list of command-line arguments, got {type(argv).__name__}: {argv!r:.80}"
        )
    for arg in argv:
        if arg in ("-h", "--help"):
            print(USAGE, file=out)
            return 0
    if argv:
        unknown = " ".join(str(a) for a in argv)
        print(f"{USAGE}\n\namp_lab doctor: error: unrecognized arguments: {unknown}", file=err)
        return 2
    return None


def _check_stream(name: str, value):
    """``value`` if it is a text stream print() can write to (anything with a ``write`` method)."""
    if not callable(getattr(value, "write", None)):
        raise ArgumentTypeError(
            f"{name} must be a text stream with a write() method, such as sys.stdout or io.StringIO(), or None; "
            f"got {type(value).__name__}: {value!r:.80}"
        )
    return value


def main(argv=None, *, version_of=metadata.version, out=None, err=None) -> int:
    """Run the pre-flight; ``argv`` are the arguments after ``doctor`` (None: none).  Only ``-h``/``--help``
    is understood: anything else prints the usage to ``err`` (default stderr) and returns 2, as argparse does."""
    out = sys.stdout if out is None else _check_stream("out", out)
    err = sys.stderr if err is None else _check_stream("err", err)
    status = _parse([] if argv is None else argv, out, err)
    if status is not None:
        return status
    check_callable("version_of", version_of)
    print("amp-lab doctor: is this machine ready for the course?\n", file=out)
    try:
        report = describe()
        print(report, file=out)
        for reason in report.reasons:  # the facts behind the verdict: a prediction, measured in 06
            print(f"  why: {reason}", file=out)
    except Exception as exc:  # the report needs torch; the checks below say how to fix it
        print(f"(machine report unavailable: {exc})", file=out)
    print("\nEnvironment", file=out)
    checks = run_checks(version_of)
    for c in checks:
        print(c.line(), file=out)
    problems = [c for c in checks if not c.ok]
    if problems:
        print(
            f"\n{len(problems)} problem(s): the course cannot run until they are fixed "
            f"({', '.join(c.name for c in problems)}).",
            file=out,
        )
        return 1
    print(f"\nAll checks passed: the course can run here. {next_step(_in_notebook())}", file=out)
    return 0


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (the doctor called from notebook 00) rather than a shell."""
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    return get is not None and getattr(get(), "kernel", None) is not None


def next_step(in_notebook: bool) -> str:
    """What to do after a clean check: in a shell, start the course; in a notebook, the course is open."""
    in_notebook = check_bool("in_notebook", in_notebook)
    if in_notebook:
        return "You are in the course already: go on to `01_float_formats.ipynb`."
    return "Start it with `make lab`."
