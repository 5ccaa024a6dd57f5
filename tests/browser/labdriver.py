"""A real JupyterLab server and a headless Chromium page for the browser tests.

Everything here is plain helpers; the fixtures that own the lifetimes live in ``conftest.py``.

- :class:`LabServer` starts ``python -m jupyterlab`` from the running environment on 127.0.0.1,
  a free port and a fresh token, with its own runtime, config, workspaces and *user settings*
  directories (the settings come from ``lab_settings/``: windowing mode "none", no news toast,
  no autosave).  The data path is left alone so the ipywidgets front end, which lives in the
  environment's ``share/jupyter/labextensions``, still loads.  :meth:`LabServer.stop` shuts the
  kernels and the server down and, as a last resort, kills any kernel that the server started.
- :class:`NotebookPage` is one notebook opened in its own tab: open, "Run All Cells"
  through the Run menu as a person would, wait for the kernel, collect errors, take screenshots.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "artifacts" / "browser"
SETTINGS_OVERRIDES = HERE / "lab_settings"

CHROMIUM = os.environ.get("AMP_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root in a container
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
]
INSTALL_HINT = "install it with: apt-get update && apt-get install -y chromium"

STDERR_MIME = "application/vnd.jupyter.stderr"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
ERROR_PATTERN = re.compile(r"Traceback|\b\w*(Error|Exception)\b")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_copy(src: Path, dest: Path) -> int:
    """Copy a notebook with outputs, execution counts and stored widget state removed.

    A committed notebook is executed, so its prompts already show ``[1]``, ``[2]`` ...;
    clearing them is what lets the test tell "this run executed every cell" apart from
    "the file was saved that way".  Returns the number of code cells.
    """
    nb = json.loads(src.read_text(encoding="utf-8"))
    code = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
            code += 1
    nb.get("metadata", {}).pop("widgets", None)
    dest.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return code


# --------------------------------------------------------------------------- the server


@dataclass
class LabServer:
    base: Path
    root: Path
    port: int
    token: str
    proc: subprocess.Popen
    log_path: Path
    runtime: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, base: Path, *, timeout: float = 120.0, attempts: int = 3) -> LabServer:
        """Start JupyterLab serving ``base / "root"`` (the caller puts notebooks there).  Another
        free port is tried when the server exits at once (the port was taken in between)."""
        for attempt in range(attempts):
            try:
                return cls._start(Path(base), timeout)
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _start(cls, base: Path, timeout: float) -> LabServer:
        root, runtime, config, data, settings, workspaces = (
            base / name for name in ("root", "runtime", "config", "data", "settings", "workspaces")
        )
        for d in (root, runtime, config, data, workspaces):
            d.mkdir(parents=True, exist_ok=True)
        shutil.copytree(SETTINGS_OVERRIDES, settings, dirs_exist_ok=True)
        # Server-side trimming for a 2-core CI machine: no language-server extension, and no
        # front-end "is the build up to date?" check, which costs ~10 s of CPU per page load.
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_lsp": False}}})
        )
        (config / "labconfig").mkdir(exist_ok=True)
        (config / "labconfig" / "page_config.json").write_text(
            json.dumps({"buildCheck": False, "buildAvailable": False})
        )
        token = secrets.token_hex(24)
        port = free_port()
        env = dict(os.environ)
        env.update(
            JUPYTER_RUNTIME_DIR=str(runtime),
            # The user-level dirs only: ~/.jupyter and ~/.local/share/jupyter stay out of the test, while
            # the environment's etc/jupyter and share/jupyter (widget front end, kernel spec) still apply.
            JUPYTER_CONFIG_DIR=str(config),
            JUPYTER_DATA_DIR=str(data),
            JUPYTERLAB_SETTINGS_DIR=str(settings),
            JUPYTERLAB_WORKSPACES_DIR=str(workspaces),
            JUPYTER_PLATFORM_DIRS="0",
            AMP_LAB_DEVICE="cpu",  # CI has no GPU; a developer's GPU must not change what the test sees
            PYTHONUNBUFFERED="1",
        )
        # Learners get progress bars as widgets; tests/conftest.py turns them off for unit tests.
        env.pop("AMP_LAB_PROGRESS", None)
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={workspaces}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--ServerApp.terminals_enabled=False",
            # A safety net if the test process is killed before its teardown runs: kernels nobody
            # is connected to are culled after 10 idle minutes, the kernel-less server 15 minutes later.
            "--MappingKernelManager.cull_idle_timeout=600",
            "--MappingKernelManager.cull_interval=60",
            "--ServerApp.shutdown_no_activity_timeout=900",
        ]
        if hasattr(os, "getuid") and os.getuid() == 0:
            cmd.append("--allow-root")
        log_path = base / "jupyterlab.log"
        log = open(log_path, "wb")  # the child keeps its own copy of the descriptor
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        server = cls(base, root, port, token, proc, log_path, runtime)
        try:
            server._wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status", timeout=2)
                self.api("GET", "/lab/api/settings/@jupyterlab/notebook-extension:tracker", timeout=5)
                return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"JupyterLab did not answer within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.25)

    def api(self, method: str, path: str, body=None, *, timeout: float = 10.0):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else None

    def lab_url(self, notebook: str, workspace: str) -> str:
        """A fresh named workspace per page, so no tab from an earlier test is restored."""
        return f"{self.url}/lab/workspaces/{quote(workspace)}/tree/{quote(notebook)}?token={self.token}"

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        # Never print the token into a test report.
        return "\n".join(lines[-n:]).replace(self.token, "<token>")

    def shutdown_kernels(self) -> None:
        try:
            for session in self.api("GET", "/api/sessions") or []:
                self.api("DELETE", f"/api/sessions/{session['id']}", timeout=15)
            for kernel in self.api("GET", "/api/kernels") or []:
                self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=15)
        except (OSError, urllib.error.URLError, ValueError):
            pass

    def kernel_execute(self, notebook: str, code: str, *, timeout: float = 60.0) -> dict:
        """Run ``code`` in the kernel of the open ``notebook`` as a second client (the page keeps
        its own connection); returns the execute reply's content, raising on an error."""
        from jupyter_client import BlockingKernelClient

        sessions = [s for s in self.api("GET", "/api/sessions") or [] if s.get("path") == notebook]
        assert sessions, f"no kernel session for {notebook}"
        kernel_id = sessions[0]["kernel"]["id"]
        client = BlockingKernelClient(connection_file=str(self.runtime / f"kernel-{kernel_id}.json"))
        client.load_connection_file()
        client.start_channels()
        try:
            reply = client.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
        finally:
            client.stop_channels()
        content = reply["content"]
        if content["status"] != "ok":
            raise RuntimeError(f"{content.get('ename')}: {content.get('evalue')}")
        return content

    def _our_kernel_pids(self) -> list[int]:
        """Processes whose command line names this server's private runtime dir: its kernels."""
        marker = str(self.runtime).encode()
        pids = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and int(entry.name) != os.getpid():
                pids.append(int(entry.name))
        return pids

    def stop(self) -> None:
        """Shut kernels and server down; escalate to SIGTERM and SIGKILL of our own processes."""
        if self.proc.poll() is None:
            self.shutdown_kernels()
            try:
                self.api("POST", "/api/shutdown", timeout=5)
            except (OSError, urllib.error.URLError, ValueError):
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        if Path("/proc").is_dir():
            for pid in self._our_kernel_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


# --------------------------------------------------------------------------- the page

# In the page: the state of the first notebook panel's cells.  Prompts read "[3]:" when the cell
# ran, "[*]:" while it is queued or running and "[ ]:" before it ran.
_CELL_STATE_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-Cell')];
  const code = cells.filter(c => c.classList.contains('jp-CodeCell'));
  const prompts = code.map(c => {
    const p = c.querySelector('.jp-InputArea-prompt');
    return p ? p.textContent.trim() : '';
  });
  const stderr = [...panel.querySelectorAll('.jp-OutputArea-output[data-mime-type="__STDERR__"]')];
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  return {
    cells: cells.length,
    prompts,
    stderrCount: stderr.length,
    indicator: indicator ? indicator.getAttribute('data-status') : null,
  };
}
""".replace("__STDERR__", STDERR_MIME)

_RUN_FINISHED_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return false;
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  if (!indicator || indicator.getAttribute('data-status') !== 'idle') return false;
  const prompts = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]
      .map(p => p.textContent.trim());
  const ran = prompts.every(t => /^\\[\\d+\\]:?$/.test(t));
  const pending = prompts.some(t => t.includes('*'));
  const failed = panel.querySelector('.jp-OutputArea-output[data-mime-type="__STDERR__"]') !== null;
  return ran || (failed && !pending);
}
""".replace("__STDERR__", STDERR_MIME)

# Every output, with what a person sees in it.
_OUTPUTS_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const out = [];
  panel.querySelectorAll('.jp-Notebook .jp-CodeCell').forEach((cell, index) => {
    cell.querySelectorAll('.jp-OutputArea-output').forEach(o => {
      out.push({cell: index, mime: o.getAttribute('data-mime-type'), text: o.innerText,
                widgetViews: o.querySelectorAll('.jupyter-widgets, .widget-container, .widget-inline-hbox').length});
    });
  });
  return out;
}
"""


PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# Per output area: its size, its HTML tables, and for text outputs every line's width as it would be
# rendered on one line (measured with the <pre>'s own font on a canvas) against the width available.
_OUTPUT_GEOMETRY_JS = """
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const ctx = document.createElement('canvas').getContext('2d');
  const out = [];
  panel.querySelectorAll('.jp-Notebook .jp-Cell').forEach((cell, ci) => {
    cell.querySelectorAll('.jp-OutputArea-output').forEach((o, oi) => {
      const rec = {cell: ci, index: oi, mime: o.getAttribute('data-mime-type'),
                   scrollWidth: o.scrollWidth, clientWidth: o.clientWidth,
                   tables: o.querySelectorAll('table').length, tableWidth: 0,
                   text: null, lineWidths: null, available: null};
      o.querySelectorAll('table').forEach(t => {
        rec.tableWidth = Math.max(rec.tableWidth, t.getBoundingClientRect().width, t.scrollWidth);
      });
      // Table cells holding one word (no space) that the browser broke over two or more lines.
      rec.brokenWords = [];
      o.querySelectorAll('td, th').forEach(c => {
        const text = c.textContent.trim();
        if (!text || /\\s/.test(text)) return;
        const range = document.createRange();
        range.selectNodeContents(c);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) rec.brokenWords.push(text);
      });
      const pre = o.tagName === 'PRE' ? o : o.querySelector(':scope > pre');
      if (pre) {
        const cs = getComputedStyle(pre);
        ctx.font = cs.font || (cs.fontSize + ' ' + cs.fontFamily);
        rec.text = pre.textContent;
        rec.lineWidths = rec.text.split('\\n').map(l => ctx.measureText(l.replace(/\\t/g, '        ')).width);
        rec.available = pre.clientWidth - parseFloat(cs.paddingLeft || 0) - parseFloat(cs.paddingRight || 0);
      }
      out.push(rec);
    });
  });
  return out;
}
"""

_RULE_LINE = re.compile(r"^[\s|+:=\-─━┼┬┴├┤]+$")


def _boundaries(line: str) -> set[tuple[str, int]]:
    """Where a line's fields start and end; fields are separated by two or more spaces or a '|'."""
    found = set()
    for m in re.finditer(r"[^\s|](?:[^\s|]| (?=[^\s|]))*", line):
        found.add(("end", m.end()))
        if m.start() > 0:
            found.add(("start", m.start()))
    return found


def _tabular(line: str) -> bool:
    return len(re.findall(r"[^\s|](?:[^\s|]| (?=[^\s|]))*", line)) >= 2


def text_table_blocks(text: str, *, min_lines: int = 3) -> list[tuple[int, int]]:
    """Line ranges [start, end) of ``text`` that are tables: ``min_lines`` or more consecutive lines of
    two or more fields (separated by two or more spaces, or by '|'), or rule lines (----, ====)
    between them, with a column boundary shared by most of them (aligned columns)."""
    lines = text.split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        if not lines[i].strip() or not (_tabular(lines[i]) or _RULE_LINE.match(lines[i])):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip() and (_tabular(lines[j]) or _RULE_LINE.match(lines[j])):
            j += 1
        rows = [ln for ln in lines[i:j] if _tabular(ln)]
        if j - i >= min_lines and len(rows) >= 2:
            counts: dict[tuple[str, int], int] = {}
            for row in rows:
                for b in _boundaries(row):
                    counts[b] = counts.get(b, 0) + 1
            shared = max((c for (kind, pos), c in counts.items() if pos > 0), default=0)
            if shared >= max(2, 0.6 * len(rows)):
                blocks.append((i, j))
        i = j
    return blocks


@dataclass
class RunReport:
    notebook: str
    seconds: float
    code_cells: int
    prompts: list[str]
    outputs: list[dict]
    console_errors: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        """What a person would call an error in the page, one line each (empty when clean)."""
        found = []
        for o in self.outputs:
            text = o["text"] or ""
            if o["mime"] == STDERR_MIME and ERROR_PATTERN.search(text):
                found.append(f"code cell {o['cell']}: {_first_lines(text)}")
            if "Error displaying widget" in text or "Failed to load model class" in text:
                found.append(f"code cell {o['cell']}: widget front end failed: {_first_lines(text)}")
            if o["mime"] == "text/plain" and _WIDGET_REPR.match(text):
                found.append(
                    f"code cell {o['cell']}: a widget shown as text (front end extension missing?): "
                    f"{_first_lines(text)}"
                )
        return found

    def unexecuted(self) -> list[int]:
        return [i for i, p in enumerate(self.prompts) if not re.fullmatch(r"\[\d+\]:?", p)]


def _first_lines(text: str, n: int = 12) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n    ".join(lines[-n:]) if len(lines) > n else "\n    ".join(lines)


def _widget_repr_pattern() -> re.Pattern:
    import ipywidgets

    names = sorted(
        n
        for n, obj in vars(ipywidgets).items()
        if isinstance(obj, type) and issubclass(obj, ipywidgets.DOMWidget)
    )
    alternatives = "|".join(map(re.escape, names))
    return re.compile(r"^(" + alternatives + r")\((children|value|layout|description|options)=")


_WIDGET_REPR = _widget_repr_pattern()


VIEWPORT = {"width": 1280, "height": 900}


def new_context(browser):
    """One context (cookies, HTTP cache) for the whole session: JupyterLab's bundles load once."""
    return browser.new_context(viewport=dict(VIEWPORT), device_scale_factor=1)


class NotebookPage:
    """One notebook open in JupyterLab, as the only notebook tab of a browser page.

    The first notebook loads JupyterLab from its URL (a fresh named workspace, so nothing from an
    earlier run is restored); pass ``reuse=`` the previous :class:`NotebookPage` to close that
    notebook's tab and open the next one with File > Open from Path..., as a person would, which
    saves reloading JupyterLab (several seconds on a 2-core machine) for every notebook."""

    _VISIBLE_CELLS_JS = (
        "n => { const p = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');"
        " return !!p && p.querySelectorAll('.jp-Notebook .jp-Cell').length === n; }"
    )

    def __init__(
        self, server: LabServer, context, notebook: str, cells: int, *, reuse: NotebookPage | None = None
    ):
        self.server = server
        self.notebook = notebook
        self.viewport = dict(VIEWPORT)
        self.expected_cells = cells
        self.page = None
        opened = time.monotonic()
        if reuse is not None:
            self.page, self.console_errors = reuse.page, reuse.console_errors
            self._first_error = len(self.console_errors)
            try:
                reuse.close_tab()
                self.server.shutdown_kernels()
                self._open_from_path(notebook)
                self.page.wait_for_function(self._VISIBLE_CELLS_JS, arg=cells, timeout=60_000)
                self._hide_left_sidebar()  # Open from Path reveals the file in the file browser
                self._focus_notebook()
                self.open_seconds = time.monotonic() - opened
                return
            except Exception:  # a page in a bad state: start over in a fresh one
                reuse.close()
                self.server.shutdown_kernels()
                opened = time.monotonic()
        self.console_errors: list[str] = []
        self._first_error = 0
        try:
            self.page = context.new_page()
            self.page.set_default_timeout(30_000)
            errors = self.console_errors
            self.page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            self.page.on(
                "console",
                lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None,
            )
            self.page.goto(
                server.lab_url(notebook, f"test-{uuid.uuid4().hex[:8]}"), wait_until="domcontentloaded"
            )
            # The panel shows one placeholder cell until the model has loaded: wait for all of them.
            self.page.wait_for_function(self._VISIBLE_CELLS_JS, arg=cells, timeout=60_000)
            self._hide_left_sidebar()
            self._focus_notebook()
            self.open_seconds = time.monotonic() - opened
        except BaseException:
            self.close()
            raise

    def _open_from_path(self, notebook: str) -> None:
        self.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^File$")).click()
        self.page.locator(".lm-Menu-item[data-command='filebrowser:open-path']").click()
        field = self.page.locator(".jp-Dialog input")
        field.fill(notebook)
        field.press("Enter")

    def close_tab(self) -> None:
        """Close this notebook's tab, discarding the executed (unsaved) state."""
        tab = self.page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=Path(self.notebook).name)
        tab.locator(".lm-TabBar-tabCloseIcon").first.click()
        discard = self.page.locator(".jp-Dialog button", has_text="Discard")
        try:
            discard.wait_for(timeout=3_000)
            discard.click()
        except Exception:  # no "Save your work?" dialog: nothing had changed
            pass
        self.page.wait_for_function(
            "() => document.querySelectorAll('.jp-NotebookPanel').length === 0", timeout=10_000
        )

    def _hide_left_sidebar(self) -> None:
        """Collapse the file browser (click its open tab), so the notebook gets the page's width."""
        tab = self.page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
        if tab.count():
            tab.first.click()

    def _focus_notebook(self) -> None:
        """Click the first cell's prompt: the Run menu acts on the active notebook."""
        self.page.locator(
            ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell .jp-InputPrompt"
        ).first.click()

    # ---- state --------------------------------------------------------------------------------
    def cell_state(self) -> dict:
        return self.page.evaluate(_CELL_STATE_JS)

    def wait_kernel_ready(self, timeout: float = 90.0) -> None:
        """Until this notebook's kernel has started, is idle and the page is connected to it.

        The page's execution indicator alone is not enough: it reads "idle" for a moment before
        the session exists, and a Run All clicked then can be lost."""
        deadline = time.monotonic() + timeout
        while True:
            kernels = [
                s["kernel"]
                for s in self.server.api("GET", "/api/sessions") or []
                if s.get("path") == self.notebook
            ]
            if (
                kernels
                and kernels[0].get("execution_state") == "idle"
                and kernels[0].get("connections", 0) >= 1
            ):
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.notebook}: no idle, connected kernel within {timeout:.0f} s: {kernels}"
                )
            time.sleep(0.2)
        self.page.locator(
            ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status='idle']"
        ).wait_for(state="attached", timeout=max(deadline - time.monotonic(), 5) * 1000)

    # ---- actions ------------------------------------------------------------------------------
    def run_all(self, timeout: float = 150.0) -> RunReport:
        """Run > Run All Cells, like a person; wait until every cell ran (or one failed) and the
        kernel is idle."""
        waited = time.monotonic()
        self.wait_kernel_ready()
        self.kernel_seconds = time.monotonic() - waited
        for attempt in range(3):
            # The Run menu in the menu bar, then its "Run All Cells" item.
            self.page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
            self.page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
            try:
                self.page.wait_for_function(
                    "() => { const p = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');"
                    " return p && [...p.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]"
                    ".some(e => e.textContent.trim() !== '[ ]:'); }",
                    timeout=10_000,
                    polling=100,
                )
                break
            except Exception:  # nothing was queued: the click did not reach the notebook; say so, retry
                self.console_errors.append(f"Run All attempt {attempt + 1} did not start any cell")
        else:
            raise AssertionError(f"{self.notebook}: Run All Cells did not start any cell (3 attempts)")
        start = time.monotonic()
        try:
            self.page.wait_for_function(_RUN_FINISHED_JS, timeout=timeout * 1000, polling=250)
        except Exception as exc:  # playwright's TimeoutError; report what the page shows
            state = self.cell_state() or {}
            raise AssertionError(
                f"{self.notebook}: Run All did not finish within {timeout:.0f} s; "
                f"prompts {state.get('prompts')}, execution indicator {state.get('indicator')!r}"
            ) from exc
        seconds = time.monotonic() - start
        state = self.cell_state()
        return RunReport(
            notebook=self.notebook,
            seconds=seconds,
            code_cells=len(state["prompts"]),
            prompts=state["prompts"],
            outputs=self.page.evaluate(_OUTPUTS_JS),
            console_errors=list(self.console_errors[self._first_error :]),
        )

    def html_text(self, markup: str) -> str:
        """The text a browser shows for ``markup`` (how an HTML readout's value reads on screen)."""
        return self.page.evaluate(
            "html => { const d = document.createElement('div'); d.innerHTML = html; return d.textContent; }",
            markup,
        )

    # ---- one cell at a time, as a person edits and runs it --------------------------------------
    def cell(self, index: int):
        """The ``index``-th cell (markdown or code, as in the .ipynb) of the open notebook."""
        return self.page.locator(f"{PANEL} .jp-Notebook .jp-Cell").nth(index)

    def prompt(self, index: int) -> str:
        return (self.cell(index).locator(".jp-InputArea-prompt").first.text_content() or "").strip()

    def set_cell_source(self, index: int, text: str) -> None:
        """Click into the cell's editor, select everything, type ``text`` in its place."""
        editor = self.cell(index).locator(".jp-InputArea-editor .cm-content")
        editor.scroll_into_view_if_needed()
        editor.click()
        self.page.keyboard.press("Control+A")
        # insert_text: one input event, so the editor's bracket and quote auto-closing adds nothing
        self.page.keyboard.insert_text(text)
        # The editor shows each line as its own element: its text, lines joined by newlines, is the source.
        self.page.wait_for_function(
            "([el, want]) => el.innerText.replace(/\\u200b/g, '').replace(/\\n$/, '') === want",
            arg=[editor.element_handle(), text],
            timeout=10_000,
        )

    def run_cell(self, index: int, *, timeout: float = 60.0) -> None:
        """Select the cell (click its prompt) and press Ctrl+Enter; wait until it has run again."""
        before = self.prompt(index)
        self.cell(index).locator(".jp-InputPrompt").first.click()
        self.page.keyboard.press("Control+Enter")
        self.page.wait_for_function(
            "([cell, before]) => { const p = cell.querySelector('.jp-InputArea-prompt');"
            " const t = p ? p.textContent.trim() : ''; return /^\\[\\d+\\]:?$/.test(t) && t !== before; }",
            arg=[self.cell(index).element_handle(), before],
            timeout=timeout * 1000,
            polling=100,
        )

    def output_text(self, index: int) -> str:
        """What the cell's output area shows, as text."""
        return "\n".join(self.cell(index).locator(".jp-OutputArea-output").all_inner_texts())

    def show_file_browser(self) -> None:
        """Open the file browser in the left side bar (JupyterLab's default layout) and let the
        notebook lay out again in the width left to it."""
        tab = self.page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='filebrowser']")
        if "lm-mod-current" not in (tab.get_attribute("class") or ""):
            tab.click()
        self.page.locator("#filebrowser").wait_for(state="visible", timeout=10_000)
        self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def wait_outputs_settled(self, timeout: float = 20.0) -> None:
        """Until the number of rendered outputs and the notebook's height stop changing (stored outputs
        render, images load, after the cells appear)."""
        js = (
            "() => { const p = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');"
            " const n = p.querySelectorAll('.jp-OutputArea-output').length;"
            " const imgs = [...p.querySelectorAll('.jp-OutputArea-output img')].every(i => i.complete);"
            " return [n, p.querySelector('.jp-Notebook').scrollHeight, imgs]; }"
        )
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            now = self.page.evaluate(js)
            if now == last and now[2]:
                return
            last = now
            self.page.wait_for_timeout(300)

    def output_geometry(self) -> list[dict]:
        """Every output area's width and what it holds: HTML tables and their width, and for text
        (a <pre>) the width each line takes on one line (white-space: pre) against the width there is."""
        return self.page.evaluate(_OUTPUT_GEOMETRY_JS)

    # ---- screenshots --------------------------------------------------------------------------
    def screenshot_notebook(self, path: Path, *, max_height: int = 16000) -> Path:
        """The whole notebook in one image: scroll to the top, grow the viewport to the notebook's
        height, shoot, shrink it back (JupyterLab scrolls inside a panel, so a "full page" shot of
        the normal viewport would show one screenful)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        height = self.page.evaluate(
            """() => {
                 const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
                 const scroller = panel.querySelector('.jp-WindowedPanel-outer') || panel.querySelector('.jp-Notebook');
                 scroller.scrollTop = 0;
                 const cells = panel.querySelectorAll('.jp-Notebook .jp-Cell');
                 const last = cells[cells.length - 1];
                 const content = last.getBoundingClientRect().bottom - scroller.getBoundingClientRect().top;
                 return content + (window.innerHeight - scroller.clientHeight) + 40;
               }"""
        )
        self.page.set_viewport_size(
            {"width": self.viewport["width"], "height": int(min(max(height, 600), max_height))}
        )
        try:
            # Let Lumino lay the panels out again: it does so in an animation frame after the resize, so
            # two frames later the new layout is painted (a fixed 400 ms wait cost 4 s per session).
            self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            self.page.evaluate(
                """() => {
                     const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
                     (panel.querySelector('.jp-WindowedPanel-outer') || panel.querySelector('.jp-Notebook')).scrollTop = 0;
                   }"""
            )
            self.page.screenshot(path=str(path))
        finally:
            self.page.set_viewport_size(self.viewport)
        return path

    def screenshot_element(self, locator, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        locator.scroll_into_view_if_needed()
        locator.screenshot(path=str(path))
        return path

    def close(self) -> None:
        try:
            if self.page is not None:
                self.page.close()
        except Exception:
            pass
