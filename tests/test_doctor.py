"""python -m amp_lab doctor: the report, each check's line, and the exit codes."""

import io
import subprocess
import sys
from importlib import metadata

import torch

from amp_lab import doctor
from amp_lab.gpus import arch_supported


def fake_versions(**overrides):
    def version_of(name):
        if name in overrides:
            if overrides[name] is None:
                raise metadata.PackageNotFoundError(name)
            return overrides[name]
        return metadata.version(name)

    return version_of


def run(**overrides):
    out = io.StringIO()
    code = doctor.main([], version_of=fake_versions(**overrides), out=out)
    return code, out.getvalue()


def test_healthy_environment_exits_zero():
    code, text = run()
    assert code == 0, text
    assert "All checks passed" in text
    for req in doctor.REQUIREMENTS:
        assert f"[ok     ] {req.distribution}:" in text


def test_missing_widget_frontend_is_a_problem_with_a_fix():
    code, text = run(jupyterlab_widgets=None)
    assert code == 1
    assert "[PROBLEM] jupyterlab_widgets: not installed" in text
    assert "fix: make lab" in text
    assert text.rstrip().splitlines()[-1].startswith("1 problem(s)")


def test_old_versions_are_problems():
    code, text = run(ipywidgets="7.8.1", torch="2.3.1")
    assert code == 1
    assert "ipywidgets: 7.8.1 is older than 8.0" in text
    assert "torch: 2.3.1 is older than 2.13" in text
    assert "2 problem(s)" in text


def test_local_version_suffixes_compare_numerically():
    assert doctor.version_tuple("2.13.0+cpu") == (2, 13, 0)
    assert doctor.version_tuple("2.10.0") >= doctor.version_tuple("2.4")
    assert doctor.version_tuple("2.3.99") < doctor.version_tuple("2.4")
    assert doctor.version_tuple("4.0.0rc1") >= doctor.version_tuple("4.0")


def test_old_python_is_a_problem():
    assert not doctor.check_python((3, 9, 18)).ok
    assert doctor.check_python((3, 11, 7)).ok


def test_report_names_cpu_features_and_the_verdicts_reasons():
    from amp_lab.cpus import CPU_FLAGS, cpu_flags
    from amp_lab.hardware import describe

    _, text = run()
    known = [f"CPU {CPU_FLAGS[k]}" for k, v in cpu_flags().items() if v is not None]
    for label in [*known, "verdict"]:
        assert label in text
    report = describe()
    assert " ".join(report.verdict.split()) in " ".join(text.split())  # the verdict, wrapped to fit
    for reason in report.reasons:
        assert f"  why: {reason}" in text


def test_command_line_exit_codes():
    ok = subprocess.run(
        [sys.executable, "-m", "amp_lab", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verdict" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "amp_lab", "nonsense"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_torch_minimum_is_pyprojects_bound():
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    bound = re.search(r'"torch>=([0-9.]+)"', pyproject).group(1)
    assert next(r.minimum for r in doctor.REQUIREMENTS if r.distribution == "torch") == bound


CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch 2.14.1+cu130's get_arch_list()


def test_gpu_kernels_check_names_the_build_to_install():
    v100 = doctor.check_gpu_kernels((7, 0), CU130, "13.0", gpu_name="Tesla V100-SXM2-16GB")
    assert not v100.ok and "sm_70" in v100.detail and "cu126" in v100.detail
    h100 = doctor.check_gpu_kernels((9, 0), CU130, "13.0", gpu_name="NVIDIA H100 80GB HBM3")
    assert h100.ok and "sm_90" in h100.detail
    here = doctor.check_gpu_kernels()  # this machine's own facts
    if torch.cuda.is_available() and torch.version.hip is None:
        assert here is not None and here.ok == arch_supported(
            torch.cuda.get_device_capability(), torch.cuda.get_arch_list()
        )
    else:
        assert here is None  # no CUDA GPU on this machine: nothing to check


def test_doctor_fails_on_a_gpu_the_wheel_has_no_kernels_for(fake_gpu):
    fake_gpu("Tesla V100-SXM2-16GB", (7, 0), CU130)
    out = io.StringIO()
    assert doctor.main(out=out) == 1
    text = out.getvalue()
    assert "[PROBLEM] GPU kernels: Tesla V100-SXM2-16GB (sm_70)" in text and "cu126" in text


# A command line the doctor does not understand exits 2 with the usage, as argparse does

import pytest  # noqa: E402

from amp_lab import __main__ as cli  # noqa: E402


@pytest.mark.parametrize("argv", [["--bogus"], ["extra"], ["--quick", "-v"]])
def test_unknown_doctor_arguments_exit_2_with_the_usage(argv):
    out, err = io.StringIO(), io.StringIO()
    assert doctor.main(argv, out=out, err=err) == 2
    assert out.getvalue() == ""  # nothing was checked
    assert err.getvalue().startswith("usage: python -m amp_lab doctor")
    assert f"unrecognized arguments: {' '.join(argv)}" in err.getvalue()


def test_doctor_help_prints_the_usage_and_exits_0():
    out, err = io.StringIO(), io.StringIO()
    assert doctor.main(["--help"], out=out, err=err) == 0
    assert out.getvalue().startswith("usage: python -m amp_lab doctor") and err.getvalue() == ""


def test_the_command_line_refuses_unknown_arguments(capsys):
    assert cli.main(["doctor", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m amp_lab doctor")
    assert cli.main(["bogus"]) == 2
    assert "unknown command 'bogus'" in capsys.readouterr().err


def test_python_m_amp_lab_doctor_bogus_exits_2():
    done = subprocess.run([sys.executable, "-m", "amp_lab", "doctor", "--bogus"], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 2 and "usage: python -m amp_lab doctor" in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: doctor.main("--bogus"), "argv must be a list"),
        (lambda: doctor.main([], version_of="2.13", out=io.StringIO()), "version_of must be"),
        (lambda: doctor.main([], version_of=lambda name: None, out=io.StringIO()), "version_of must return"),
    ],
)
def test_main_names_the_bad_argument(call, match):
    with pytest.raises(TypeError, match=match):
        call()


@pytest.mark.parametrize("stream", ["out", "err"])
@pytest.mark.parametrize(
    "bad", [-1, 1.5, True, "junk", {"B": 360}, lambda: None, 2**2000, __import__("torch").ones(2)]
)
def test_main_refuses_an_out_or_err_that_cannot_be_written_to(stream, bad):
    with pytest.raises(TypeError, match=rf"^{stream} must be a text stream with a write\(\) method"):
        doctor.main(["--help"], **{stream: bad})


def test_main_still_writes_to_a_given_stream():
    out = io.StringIO()
    assert doctor.main(["--help"], out=out, err=io.StringIO()) == 0
    assert out.getvalue()


def test_check_gpu_kernels_reads_a_list_or_tuple_or_none():
    assert doctor.check_gpu_kernels((8, 0), ("sm_80",), "12.6").ok
    assert not doctor.check_gpu_kernels((8, 0), None, "12.6").ok  # no arch list: a CPU-only build


# Inside JupyterLab the doctor does not tell the learner to start JupyterLab


def test_a_notebook_kernel_is_told_to_go_on(monkeypatch):
    import types

    kernel_shell = types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: kernel_shell))
    inside = doctor.next_step()
    assert "make lab" not in inside and "01_float_formats.ipynb" in inside
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert "make lab" in doctor.next_step()
    monkeypatch.delitem(sys.modules, "IPython")
    assert "make lab" in doctor.next_step()
