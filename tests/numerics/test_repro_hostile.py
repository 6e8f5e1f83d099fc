"""The repro folder a comparison writes treats every name of the model as data.

``repro.py`` is a script the user is told to run: a node named
``a\"\"\"+str(__import__("os").system(...))+\"\"\"`` closed the docstring it was written into
and ran as code. Names now live in ``names.json`` only.
"""

from __future__ import annotations

import numpy as np
import onnx
from numerics_helpers import run_repro
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


def _model(value: float, name: str) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((1, 4), value, np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Add", ["h", "w"], ["y\x1b[2J"], name=name)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y\x1b[2J", TensorProto.FLOAT, [1, 4])],
                          [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_node_name_never_runs_as_code_in_the_repro_script(tmp_path):
    marker = tmp_path / "PWNED"
    evil = f'a"""+str(__import__("os").system("echo ran > {marker}"))+"""'
    c = onnx_lab.compare(_model(1.0, "add"), _model(5.0, evil))
    assert c.first_divergence["node_id"] == "add"
    r = c.repro(tmp_path / "out") if hasattr(c, "repro") else onnx_lab.repro(c, tmp_path / "out")
    import json

    assert json.loads((r.folder / "names.json").read_text())["node"] == evil
    script = (r.folder / "repro.py").read_text()
    assert evil not in script and "PWNED" not in script
    out = run_repro(r.folder)
    assert not marker.exists()
    assert "\x1b" not in out  # names printed escaped (repr)
    assert "max_abs 4" in out
