"""Run a real JupyterLab server and a headless Debian Chromium (Playwright) for browser tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-quic", "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def require_chromium() -> None:
    """Skip without Chromium, except in CI where a missing browser is a failure."""
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing in CI: run scripts/install-system-deps.sh "
                        "chromium")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("playwright for Python is not installed")


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A minimal nbformat-4 notebook with the given code cells."""
    nb = {
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}",
                   "metadata": {}, "outputs": [], "source": src} for i, src in enumerate(cells)],
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                    "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyter_lab(root: Path, work: Path, *, timeout: float = 60) -> Iterator[str]:
    """Start ``jupyter lab`` headless on a free localhost port (no token, no password).

    Settings and workspaces live under ``work`` so nothing of the user's setup leaks in.
    Yields the base URL; the server (its whole process group) is stopped on exit.
    """
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        pytest.fail(f"{jupyter} not found: install the dev extras (pip install -e '.[dev]')")
    port = _free_port()
    settings = work / "lab-settings"
    # Keep the news/update toast away: it can cover the widget in screenshots.
    notif = settings / "@jupyterlab" / "apputils-extension"
    notif.mkdir(parents=True, exist_ok=True)
    (notif / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # Keep every cell in the DOM (no virtual scrolling), so off-screen outputs can be checked.
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    # Save widget state with the notebook, as `make lab` sets it: a saved notebook then shows
    # each widget's last view without a kernel.
    wm = settings / "@jupyter-widgets" / "jupyterlab-manager"
    wm.mkdir(parents=True, exist_ok=True)
    (wm / "plugin.jupyterlab-settings").write_text(json.dumps({"saveState": True}))
    # Start the notebook's kernel without asking (no "Select Kernel" dialog).
    (tracker / "tracker.jupyterlab-settings").write_text(
        json.dumps({"windowingMode": "none", "autoStartDefaultKernel": True}))
    env = dict(os.environ)
    env.update({
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "lab-workspaces"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
        "MPLBACKEND": "Agg",
    })
    log = open(work / "jupyter.log", "wb")  # noqa: SIM115 - closed in finally
    cmd = [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           "--ServerApp.token=", "--ServerApp.password=", "--IdentityProvider.token=",
           f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
           "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers run as root
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail("jupyter lab exited:\n" + (work / "jupyter.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(url + "/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("jupyter lab did not start:\n"
                            + (work / "jupyter.log").read_text()[-3000:])
            time.sleep(0.5)
        yield url
    finally:
        # The server and the kernels it started share the new session's process group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()


@contextlib.contextmanager
def chromium_page(profile: Path, *, width: int = 1400,
                  height: int = 1000) -> Iterator[object]:
    """A Playwright page in Debian's Chromium with a fresh user-data dir."""
    from playwright.sync_api import sync_playwright

    shutil.rmtree(profile, ignore_errors=True)
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height})
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            yield page
        finally:
            ctx.close()


@contextlib.contextmanager
def lab_in_browser(work: Path, notebooks: dict[str, list[str]], *, models: bool = False,
                   files: dict[str, object] | None = None, width: int = 1400,
                   height: int = 1000) -> Iterator[tuple[str, object]]:
    """(base url, page): JupyterLab serving a fresh ``work/root`` folder, in headless Chromium.

    The folder holds ``notebooks`` (name -> code cells), with ``models`` the browser tests'
    ``_models.py``, and ``files`` (name -> ModelProto, saved as ONNX). Skips (fails in CI)
    without Chromium; screenshots go to :data:`ARTIFACTS`.
    """
    require_chromium()
    root = work / "root"
    root.mkdir()
    if models:
        shutil.copy(Path(__file__).with_name("_models.py"), root / "_models.py")
    for name, proto in (files or {}).items():
        onnx.save(proto, str(root / name))
    for name, cells in notebooks.items():
        write_notebook(root / name, cells)
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyter_lab(root, work) as url, \
            chromium_page(work / "profile", width=width, height=height) as page:
        yield url, page


def run_all_cells(page, url: str, notebook: str, *, timeout_ms: int = 90_000) -> None:
    """Open ``notebook`` in JupyterLab and run all its cells from the Run menu."""
    # ?reset: a fresh workspace with only this notebook open (no tabs restored).
    page.goto(f"{url}/lab/tree/{notebook}?reset", timeout=timeout_ms)
    page.wait_for_selector(".jp-Notebook", timeout=timeout_ms)
    # JupyterLab may ask which kernel to start (the notebook names one it has not seen yet):
    # accept the proposed one. Then wait until the kernel is connected and idle.
    deadline = time.monotonic() + timeout_ms / 1000
    accept = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
    # The indicator of the visible notebook (other open notebooks have their own, hidden).
    panel = page.locator(".jp-NotebookPanel:visible").first
    idle = panel.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    settled = 0
    while time.monotonic() < deadline:
        if accept.count() and accept.first.is_visible():
            accept.first.click()
            settled = 0
        elif idle.count():
            settled += 1
            if settled >= 3:  # idle for ~1.5 s with no dialog
                break
        else:
            settled = 0
        page.wait_for_timeout(500)
    else:
        pytest.fail("the kernel did not start in JupyterLab")
    # A Run All sent while the kernel is still connecting can be dropped: check that the first
    # cell starts (its prompt shows [*] or [1]) and ask again if it did not.
    prompt = panel.locator(".jp-Cell .jp-InputPrompt").first
    for _attempt in range(4):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator("li.lm-Menu-item", has_text="Run All Cells").first.click()
        for _ in range(20):
            if re.search(r"\[(\*|\d+)\]", prompt.inner_text()):
                return
            page.wait_for_timeout(500)
    pytest.fail("JupyterLab did not start running the cells")


def select_by_search(root, query: str) -> str:
    """Type ``query`` into a canvas's search box (``root``: its ``.olc-root``) once its
    drawing is there, press Enter and return the key of the element the search selected."""
    root.locator("svg g.node").first.wait_for(timeout=120_000)
    search = root.locator(".olc-search")
    search.fill(query)
    search.press("Enter")
    key = root.get_attribute("data-selected")
    assert key, f"the search for {query!r} selected nothing"
    return key
