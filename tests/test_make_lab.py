"""`make lab` serves notebooks/ on 127.0.0.1 behind a token: start it, fetch the login page, stop it."""

import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_dry_run_binds_loopback_with_token():
    out = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if "jupyter lab" in ln)
    assert "--ServerApp.ip=127.0.0.1" in line
    assert "--notebook-dir=notebooks" in line
    assert "0.0.0.0" not in line
    assert not re.search(r"token=(''|\"\"|\s|$)", line), line


def _dry_run(tmp_path, *args, ci=None):
    """`make -n lab` for a fresh environment in tmp_path (nothing is installed): the recipe lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PIP_QUIET", "TORCH_INDEX", "MAKEFLAGS")}
    if ci is not None:
        env["CI"] = ci
    cmd = ["make", "--no-print-directory", "-n", "lab", f"VENV={tmp_path / 'venv'}", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout


STEP = re.compile(r"^echo '== amp-lab install, step (\d)/4: (.*)'$")


def test_first_install_announces_each_step_and_lets_pip_show_progress(tmp_path):
    out = _dry_run(tmp_path)
    lines = out.splitlines()
    steps = [m.groups() for m in map(STEP.match, lines) if m]
    assert [n for n, _ in steps] == ["1", "2", "3", "4"], out
    # The torch step says how large the download is, in gigabytes, before pip starts it.
    assert re.search(r"about \d+(\.\d+)? GB", steps[1][1]), steps[1]
    pips = [ln for ln in lines if " -m pip install " in ln]
    assert len(pips) == 2, out
    assert all("--quiet" not in ln and "-q " not in ln for ln in pips), pips
    # Each announcement comes right before the command it announces.
    assert lines.index(pips[0]) == next(i for i, ln in enumerate(lines) if "step 2/4" in ln) + 1
    assert lines.index(pips[1]) == next(i for i, ln in enumerate(lines) if "step 3/4" in ln) + 1
    assert "ready" in lines[-2] and "jupyter lab" in lines[-1], lines[-2:]
    # What make would run is valid shell (a stray parenthesis in an echo would break the install).
    subprocess.run(["bash", "-n"], input=out, text=True, check=True)


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_ci_installs_quietly_but_still_names_the_steps(tmp_path, ci):
    out = _dry_run(tmp_path, ci=ci)
    pips = [ln for ln in out.splitlines() if " -m pip install " in ln]
    assert len(pips) == 2 and all("--quiet" in ln for ln in pips), pips
    assert len([ln for ln in out.splitlines() if STEP.match(ln)]) == 4, out


def test_ci_false_is_not_quiet(tmp_path):
    pips = [ln for ln in _dry_run(tmp_path, ci="false").splitlines() if " -m pip install " in ln]
    assert pips and not any("--quiet" in ln for ln in pips), pips


def test_another_torch_index_does_not_claim_pypi_sizes(tmp_path):
    index = "https://download.pytorch.org/whl/cu126"
    out = _dry_run(tmp_path, f"TORCH_INDEX={index}")
    step2 = next(ln for ln in out.splitlines() if "step 2/4" in ln)
    assert index in step2 and "GB" not in step2, step2
    assert f"--index-url {index}" in out


def test_an_installed_environment_is_not_reinstalled(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".amp-lab-installed").touch()  # newer than pyproject.toml
    out = _dry_run(tmp_path)
    assert "pip install" not in out and "amp-lab install" not in out, out
    assert "jupyter lab" in out


def _get(url):
    opener = urllib.request.build_opener(urllib.request.HTTPRedirectHandler())
    try:
        with opener.open(url, timeout=5) as resp:
            return resp.status, resp.geturl(), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, url, err.read().decode("utf-8", "replace")


@pytest.mark.timeout(180)
def test_make_lab_serves_login_page_and_stops(tmp_path):
    port = free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), BROWSER="true")
    log = open(tmp_path / "lab.log", "w+")
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"LAB_PORT={port}", "LAB_ARGS=--no-browser"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        status = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"make lab exited early with {proc.returncode}:\n{log.read()}")
            try:
                status, final_url, body = _get(f"http://127.0.0.1:{port}/lab")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.5)
        assert status is not None, "JupyterLab did not answer within 150 s"
        # No token given: the server sends us to its login page instead of the course.
        assert status == 200 and "/login" in final_url, (status, final_url)
        assert "token" in body.lower() or "password" in body.lower()
        # The API refuses an unauthenticated request.
        api_status, _, _ = _get(f"http://127.0.0.1:{port}/api/contents")
        assert api_status == 403
        # The log names the token URL the learner clicks.
        log.seek(0)
        text = log.read()
        token = re.search(r"token=([0-9a-f]{16,})", text)
        assert token, text
        ok_status, _, listing = _get(f"http://127.0.0.1:{port}/api/contents?token={token.group(1)}")
        assert ok_status == 200 and "00_setup_check.ipynb" in listing
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
    # Stopped: nothing listens on the port any more.
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
