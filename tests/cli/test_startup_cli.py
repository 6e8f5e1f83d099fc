"""The console command defers sympy (onnx_ir imports it at module level) until onnx_ir uses
it, and every result stays the one the real module gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# SymbolicDim arithmetic and parsing: what onnx_ir does with sympy.
SYMBOLIC = (
    "import onnx_ir as ir\n"
    "a, b = ir.SymbolicDim('a'), ir.SymbolicDim('b')\n"
    "e = ir.SymbolicDim('floor(max(a, b) / 2) + a * 3')\n"
    "print(repr((a + b).value), repr((a * 2 - b).value), repr((a // 4).value))\n"
    "print(e.evaluate({'a': 5, 'b': 9}), repr(e.value), a == ir.SymbolicDim('a'))\n"
)


def _run(code: str, *flags: str) -> list[str]:
    done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          env=ENV, timeout=240, check=True)
    return done.stdout.splitlines() + (done.stderr.splitlines() if flags else [])


@pytest.mark.slow
def test_deferred_sympy_gives_the_same_symbolic_results():
    plain = _run(SYMBOLIC)
    deferred = _run(
        "import sys\n"
        "from onnx_lab.cli._startup import defer_sympy\n"
        "print(defer_sympy())\n"
        "import onnx_ir\n"
        "print(type(sys.modules['sympy']).__name__)\n"  # still the placeholder
        + SYMBOLIC
        + "print(type(sys.modules['sympy']).__name__, defer_sympy())\n")
    assert deferred[0] == "True" and deferred[1] == "_Deferred"
    assert deferred[2:-1] == plain
    assert deferred[-1] == "module False"  # the real sympy replaced it; nothing to defer


def _one(folder: Path) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "one", [x], [y])
    path = folder / "one.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["summary"], ["cost", "--dims", "batch=2"], ["check"]])
def test_console_command_loads_no_sympy_and_answers_the_same(tmp_path, command):
    path = _one(tmp_path)
    argv = [command[0], path, "--json", *command[1:]]
    code = ("import runpy, sys\n"
            f"sys.argv = ['onnx-lab', *{argv!r}]\n"
            "try:\n"
            "    runpy.run_module('onnx_lab.cli', run_name='__main__')\n"
            "except SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "m = sys.modules.get('sympy')\n"
            "print('SYMPY', type(m).__name__ if m is not None else None)\n")
    out = _run(code, "-X", "importtime")  # stderr: every module imported, until the exit
    imported = [x.rsplit("|", 1)[1].strip() for x in out if x.startswith("import time:")]
    console = [x for x in out if not x.startswith("import time:")]
    assert console[-1] == "SYMPY _Deferred"  # never needed: never imported
    assert "onnx_ir" in imported and not [m for m in imported if m.startswith("sympy")]
    assert "pandas" not in imported  # --json prints rows: no DataFrame is built
    library = _run("import sys\nfrom onnx_lab.cli import main\n"
                   f"sys.exit(main({argv!r}))\n")
    assert json.loads("\n".join(console[:-1])) == json.loads("\n".join(library))
