"""Fixtures for the browser tests: one JupyterLab server and one headless Chromium per session.

Tests that touch a notebook carry ``@pytest.mark.notebook("NN_name.ipynb")``; the collection hook
below groups them by notebook, so each notebook is opened and run once (``runs.get``) and its
widget tests reuse that page while its kernel is still alive.  Only one notebook (one kernel) is
open at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from labdriver import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    INSTALL_HINT,
    NOTEBOOKS,
    VIEWPORT,
    LabServer,
    NotebookPage,
    clean_copy,
    in_ci,
    new_context,
)


def pytest_configure(config):
    config.addinivalue_line("markers", "notebook(name): a browser test that needs this notebook open and run")


def pytest_collection_modifyitems(session, config, items):
    """Group notebook tests by notebook (run-all first, then its widget drives), keeping every
    other item where it was."""
    slots = [i for i, item in enumerate(items) if item.get_closest_marker("notebook")]
    grouped = sorted(
        (items[i] for i in slots),
        key=lambda item: (
            str(item.get_closest_marker("notebook").args[0]),
            item.get_closest_marker("notebook").kwargs.get("order", 1),
        ),
    )
    for i, item in zip(slots, grouped, strict=True):
        items[i] = item


def _unavailable(reason: str):
    """In CI a missing browser is a failure; on a laptop the browser tests skip and say why."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}; {INSTALL_HINT}", pytrace=False)
    pytest.skip(f"browser tests skipped: {reason}; {INSTALL_HINT}")


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _unavailable(f"no Chromium at {CHROMIUM} (set AMP_LAB_CHROMIUM to use another)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the Python package playwright is not installed (pip install -e '.[dev]')")
    return CHROMIUM


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory):
    """The folder the test server serves: cleaned copies of the course's notebooks, so a run never
    touches the repository's files."""
    # artifacts/browser/ holds this run's screenshots only (a deleted notebook's must not linger).
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "root"
    root.mkdir()
    for src in sorted(NOTEBOOKS.glob("*.ipynb")):
        clean_copy(src, root / src.name)
    return base


@pytest.fixture(scope="session")
def lab_server(chromium_path, lab_root):
    server = LabServer.start(lab_root)
    try:
        yield server
    finally:
        server.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        log = server.log_path.read_text(errors="replace").replace(server.token, "<token>")
        (ARTIFACTS / "jupyterlab-server.log").write_text(log)


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS, timeout=60_000
        )
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


# The folder (in the server's root) holding unmodified copies of the notebooks, for tests that look at
# their stored outputs without running anything (tables that fit).
STORED = "stored"


class NotebookRuns:
    """Opens a notebook and runs all its cells once; later tests of the same notebook get the same
    page (and live kernel).  Opening another notebook closes the previous one and its kernel."""

    def __init__(self, server: LabServer, context):
        self.server = server
        self.context = context
        self._name = None
        self._page = None
        self._report = None
        self._error = None
        self.timings: dict[str, dict] = {}

    def get(self, name: str):
        """(page, report) for ``name`` after Run All; raises if opening or running failed."""
        if name != self._name:
            path = self.server.root / name
            if not path.exists():
                src = NOTEBOOKS / name
                if not src.exists():
                    pytest.skip(f"notebooks/{name} does not exist yet")
                clean_copy(src, path)
            cells = len(json.loads(path.read_text(encoding="utf-8"))["cells"])
            previous = self._page
            self._name, self._page, self._report, self._error = name, None, None, None
            try:
                # The previous notebook's tab is closed and its kernel shut down; same browser page.
                self._page = NotebookPage(self.server, self.context, name, cells, reuse=previous)
                self._page.page.set_viewport_size(dict(VIEWPORT))  # a stored view before may have changed it
                self._report = self._page.run_all()
                self.timings[name] = {
                    "open_s": round(self._page.open_seconds, 1),
                    "kernel_ready_s": round(self._page.kernel_seconds, 1),
                    "run_all_s": round(self._report.seconds, 1),
                }
            except Exception as exc:  # remembered: the notebook's other tests fail fast, not re-run it
                self._error = exc
            finally:
                if self._page is not None:
                    shot = time.monotonic()
                    try:
                        self._page.screenshot_notebook(ARTIFACTS / f"{path.stem}.png")
                    except Exception:
                        pass
                    if name in self.timings:
                        self.timings[name]["screenshot_s"] = round(time.monotonic() - shot, 1)
        if self._error is not None:
            raise AssertionError(
                f"{name} could not be opened and run in JupyterLab: {self._error}"
            ) from self._error
        return self._page, self._report

    def view(self, name: str, *, viewport: dict | None = None):
        """``notebooks/<name>`` as committed (stored outputs, nothing run), opened from a copy in the
        server's ``stored/`` folder with JupyterLab's file browser open, at ``viewport`` (default the
        session's).  Returns the page; the kernel JupyterLab starts for it stays idle."""
        key = f"{STORED}/{name}"
        if key != self._name:
            src = NOTEBOOKS / name
            if not src.exists():
                pytest.skip(f"notebooks/{name} does not exist yet")
            path = self.server.root / STORED / name
            path.parent.mkdir(exist_ok=True)
            shutil.copyfile(src, path)
            cells = len(json.loads(path.read_text(encoding="utf-8"))["cells"])
            previous = self._page
            self._name, self._page, self._report, self._error = key, None, None, None
            try:
                self._page = NotebookPage(self.server, self.context, key, cells, reuse=previous)
                self._page.page.set_viewport_size(dict(viewport or VIEWPORT))
                self._page.viewport = dict(viewport or VIEWPORT)
                self._page.show_file_browser()
                self._page.wait_outputs_settled()
                self.timings[key] = {"open_s": round(self._page.open_seconds, 1)}
            except Exception as exc:
                self._error = exc
        if self._error is not None:
            raise AssertionError(f"{key} could not be opened in JupyterLab: {self._error}") from self._error
        return self._page

    def get_clean(self, name: str):
        """Like :meth:`get`, for widget tests: fails when the run itself showed errors."""
        page, report = self.get(name)
        problems = report.errors() + [f"code cell {i} did not run" for i in report.unexecuted()]
        if problems:
            pytest.fail(
                f"{name} did not run cleanly, so its widgets cannot be trusted:\n" + "\n".join(problems)
            )
        return page, report

    def close(self) -> None:
        if self._page is not None:
            self._page.close()
        self.server.shutdown_kernels()
        self._name = self._page = self._report = self._error = None


@pytest.fixture(scope="session")
def runs(lab_server, browser):
    context = new_context(browser)
    runs = NotebookRuns(lab_server, context)
    try:
        yield runs
    finally:
        try:
            runs.close()
        finally:
            context.close()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "timings.json").write_text(json.dumps(runs.timings, indent=1) + "\n")
