"""NCHWc blocked-layout tensors (onnxruntime's ort:all layout optimization)."""

from __future__ import annotations

from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.core._layout import blocked_layout_tensors


def test_blocked_tensors_follow_nchwc_ops_until_reorder_output():
    nchwc = "com.microsoft.nchwc"
    nodes = [
        helper.make_node("ReorderInput", ["x"], ["bx"], domain=nchwc),
        helper.make_node("Conv", ["bx", "w"], ["c"], domain=nchwc),
        helper.make_node("Relu", ["c"], ["r"]),  # standard op between nchwc ops: still blocked
        helper.make_node("Concat", ["r", "bx"], ["cat"], axis=1),
        helper.make_node("ReorderOutput", ["cat"], ["back"], domain=nchwc, channels=16),
        helper.make_node("Shape", ["back"], ["s"]),
        helper.make_node("Relu", ["x"], ["plain"]),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4]),
                     helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 8, 1, 1])],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [4]),
         helper.make_tensor_value_info("plain", TensorProto.FLOAT, [1, 8, 4, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid(nchwc, 1)])
    lab = onnx_lab.open(m.SerializeToString())
    assert blocked_layout_tensors(lab.model) == {"bx", "c", "r", "cat"}


def test_no_nchwc_op_means_no_blocked_tensor():
    assert blocked_layout_tensors(onnx_lab.open("sample:convnet").model) == set()
