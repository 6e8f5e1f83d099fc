"""`make lab` starts JupyterLab with the repository as its root, so the URL it prints opens the
notebook it names (the Makefile's command line, run headless on a free port)."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lab_command() -> list[str]:
    """The `lab` target's command line from the Makefile (the line that starts the server)."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    lines = [ln.strip().lstrip("@") for ln in recipe.splitlines()[1:]]
    line = next(ln for ln in lines if "scripts/lab.sh" in ln)
    return shlex.split(line)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_makefile_starts_the_server_on_the_repository():
    cmd = _lab_command()
    assert cmd[:2] == ["sh", "scripts/lab.sh"] and cmd[-1] == "notebooks/01_explore.ipynb"
    assert (ROOT / cmd[-1]).is_file()


@pytest.mark.slow
def test_make_lab_url_opens_the_notebook_it_names(tmp_path):
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.exists():
        pytest.skip(f"no jupyter beside {sys.executable} (pip install jupyterlab)")
    port = _free_port()
    subst = {"$(VENV)/bin/jupyter": str(jupyter), "$(LAB_PORT)": str(port)}
    cmd = [subst.get(a, a) for a in _lab_command()]
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    log = tmp_path / "lab.log"  # a file, not a pipe: nothing blocks the server's logging
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        url = None
        deadline = time.monotonic() + 180  # a loaded machine starts JupyterLab slowly
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"onnx_lab: (http://\S+)", log.read_text())  # printed first
            url = m.group(1) if m else time.sleep(0.2)
        assert url, log.read_text()
        assert "No display here" in log.read_text()  # headless: --no-browser, says so
        m = re.fullmatch(rf"http://127\.0\.0\.1:{port}/lab/tree/(\S+)\?token=(\w+)", url)
        assert m, url
        path, token = m.groups()
        assert path == "notebooks/01_explore.ipynb"
        api = f"http://127.0.0.1:{port}/api/contents/{path}?token={token}&content=0"
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(api)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        assert status == 200, (status, proc.poll(), log.read_text()[-3000:])
        doc = json.loads(body)
        assert doc["path"] == path and doc["type"] == "notebook"
        # The printed URL itself serves the Lab page, and the server's root is the repository.
        assert _get(url)[0] == 200
        status, body = _get(f"http://127.0.0.1:{port}/api/contents?token={token}&content=1")
        assert status == 200 and "notebooks" in {c["name"] for c in json.loads(body)["content"]}
        assert _get(api.replace(f"token={token}", "token=wrong"))[0] == 403
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
