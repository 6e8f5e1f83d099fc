"""onnxoptimizer's eliminate_shape_op kills the process (a segmentation fault) on a Shape node
whose start is past its end (onnx's conformance case ``test_shape_start_greater_than_end``):
onnx_lab leaves that pass out of a list run, with a note, and refuses it alone with a
PassError. Run in a child process, so that a regression fails the test instead of pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import onnx_lab
    from onnx import TensorProto, helper
    from onnx_lab.errors import PassError

    def model(start, end):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])
        y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
        g = helper.make_graph([helper.make_node("Shape", ["x"], ["y"], start=start, end=end,
                                                name="s")], "g", [x], [y])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])

    for start, end in ((2, 1), (-1, -2), (0, -5)):
        lab = onnx_lab.open(model(start, end))
        r = lab.apply("onnxoptimizer")
        assert any("eliminate_shape_op left out" in n for n in r.notes), r.notes
        assert r.verify_passed in (True, None), r.verification
        try:
            lab.apply("onnxoptimizer:eliminate_shape_op")
        except PassError as e:
            assert "'s'" in str(e), e
        else:
            raise AssertionError("no PassError")
    lab = onnx_lab.open(model(1, 3))   # a Shape slice it handles still runs
    r = lab.apply("onnxoptimizer:eliminate_shape_op")
    assert r.modified and r.verify_passed, r.notes
    print("ok")
""")


def test_a_shape_start_past_its_end_does_not_crash_onnxoptimizer():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       cwd=ROOT, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), (p.returncode, p.stderr[-2000:])
