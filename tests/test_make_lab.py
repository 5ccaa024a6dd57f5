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
