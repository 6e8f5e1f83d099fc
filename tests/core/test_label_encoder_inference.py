"""onnx 1.23's shape inference crashes the process (SIGSEGV) on a LabelEncoder of ai.onnx.ml
opset 1 or 2 whose input has no type: skl2onnx's DecisionTreeClassifier export with
``options={'decision_path': True}`` (TreeEnsembleRegressor -> LabelEncoder), or a Scaler
before one. ``lab.summary()``, ``lab.tensors``, ``check()``, ``cost()`` and ``render()``
killed the kernel; the skeleton onnx_lab infers now declares the encoder input's type.

Each model runs in a child process: a crash must fail the test, not end the test run.
"""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

TREE = h.make_node(
    "TreeEnsembleRegressor", ["X"], ["dpath"], domain="ai.onnx.ml", name="tree",
    n_targets=1, nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
    nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0],
    nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
    target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
    target_weights=[0.0, 1.0], post_transform="NONE")
SCALER = h.make_node("Scaler", ["X"], ["dpath"], domain="ai.onnx.ml", name="scaler",
                     offset=[0.0, 0.0], scale=[1.0, 1.0])


def _model(producer, ml: int) -> onnx.ModelProto:
    if ml == 1:  # opset 1 maps strings to int64s and back: typed from its declared output
        nodes = [producer, h.make_node("LabelEncoder", ["dpath"], ["path"], domain="ai.onnx.ml",
                                       name="le", classes_strings=["left", "right"],
                                       default_string="?")]
    else:
        nodes = [producer, h.make_node("LabelEncoder", ["dpath"], ["path"], domain="ai.onnx.ml",
                                       name="le", keys_floats=[0.0, 1.0],
                                       values_strings=["left", "right"], default_string="?")]
    out = h.make_tensor_value_info("path", T.STRING if ml == 2 else T.INT64, [None, 1])
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("X", T.FLOAT, [None, 2])], [out])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", ml)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("producer, ml", [(TREE, 2), (SCALER, 2), (TREE, 1)])
def test_an_untyped_label_encoder_input_does_not_crash_inference(tmp_path, producer, ml):
    path = tmp_path / "m.onnx"
    onnx.save(_model(producer, ml), path)
    code = (f"import onnx_lab; lab = onnx_lab.open({str(path)!r}, shapes={{'X': [2, 2]}}); "
            "lab.summary(); t = lab.tensors; lab.check(); lab.cost(); lab.render(); "
            "print(dict(zip(t['name'], t['dtype'])))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-800:])
    types = eval(r.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed dict
    if ml == 2:  # the encoder's keys say what it reads
        assert types["dpath"] == "float32" and types["path"] == "string"


def test_an_untyped_label_encoder_input_in_a_body_or_under_an_edit_does_not_crash(tmp_path):
    # the first guard covered the main graph only: an encoder inside an If body, and the
    # editor's full check of the edited model, still ended the process
    body = h.make_graph([TREE, h.make_node("LabelEncoder", ["dpath"], ["path"],
                                           domain="ai.onnx.ml", keys_floats=[0.0, 1.0],
                                           values_strings=["l", "r"], default_string="?")],
                        "then", [], [h.make_tensor_value_info("path", T.STRING, None)])
    other = h.make_graph([h.make_node("Constant", [], ["p2"], value=h.make_tensor(
        "c", T.STRING, [1, 1], [b"?"]))], "else", [],
        [h.make_tensor_value_info("p2", T.STRING, None)])
    g = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=body, else_branch=other)],
                     "g", [h.make_tensor_value_info("X", T.FLOAT, [None, 2]),
                           h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.STRING, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 2)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "body.onnx")
    onnx.save(_model(TREE, 2), tmp_path / "top.onnx")
    code = (f"import onnx_lab\n"
            f"lab = onnx_lab.open({str(tmp_path / 'body.onnx')!r}, shapes={{'X': [2, 2]}})\n"
            "lab.summary(); lab.tensors; lab.check()\n"
            f"lab = onnx_lab.open({str(tmp_path / 'top.onnx')!r}, shapes={{'X': [2, 2]}})\n"
            "lab.rename_node('le', 'encoder'); print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode,
                                                                    r.stderr[-800:])
