"""The CLI's exit hook (onnx_lab/_exit.py): garbage that exists at exit is still finalized,
and importing onnx_lab as a library does not install it."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_exit_hook_still_finalizes_garbage(tmp_path):
    out = tmp_path / "out.txt"
    code = (
        "import onnx_lab, onnx_lab._exit\n"
        "onnx_lab._exit.install()\n"
        "class Holder:\n"
        "    def __del__(self):\n"
        f"        with open({str(out)!r}, 'w') as f:\n"
        "            f.write('finalized')\n"
        "h = Holder()\n"
        "h.me = h\n"  # a cycle: only the collector frees it (and runs __del__)
        "del h\n"
        "print('done')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    assert out.read_text() == "finalized"


@pytest.mark.slow
def test_exit_is_quiet_after_onnxsim():
    # onnxsim's nanobind classes report objects alive at exit as leaks: the hook steps aside.
    code = ("import onnx_lab, onnx_lab._exit\n"
            "onnx_lab._exit.install()\n"
            "lab = onnx_lab.open('sample:convnet')\n"
            "print(lab.apply('onnxsim', verify=False).modified)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"
    assert "leaked" not in proc.stderr


@pytest.mark.slow
def test_library_import_leaves_the_exit_alone():
    code = ("import atexit, gc, onnx_lab\n"
            "onnx_lab.open('sample:convnet')\n"
            "import onnx_lab._exit as e\n"
            "print(e._INSTALLED)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
