"""The ``macs_onnx_tool`` column: onnx-tool 1.0.1's way of counting MACs, beside ours."""

from __future__ import annotations

import importlib.util
import math
import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_lab.analysis.cost import cost

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["z"], transB=1),
        helper.make_node("Softmax", ["z"], ["y"]),
    ]
    inits = [init("w", 4, 3, 3, 3), init("b", 4), init("s", 4), init("o", 4), init("m", 4),
             numpy_helper.from_array(np.ones(4, np.float32), "v"), init("fw", 10, 4),
             init("fb", 10)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_hand_count_of_each_rule():
    c = cost(_cnn())
    ours = dict(zip(c.nodes.op_type, c.nodes.macs))
    theirs = dict(zip(c.nodes.op_type, c.nodes.macs_onnx_tool))
    # Ours: multiply-accumulates of Conv (256 outputs x 27) and Gemm (10 x 4) only.
    assert ours == {"Conv": 6912, "BatchNormalization": 0, "Relu": 0, "MaxPool": 0,
                    "GlobalAveragePool": 0, "Flatten": 0, "Gemm": 40, "Softmax": 0}
    # onnx-tool: + the bias adds; BN 31 per element (2 adds, sqrt 24, div 4, mul); a compare
    # per Relu output and per MaxPool window element; GlobalAveragePool an add per input and
    # a divide (4) per output; Softmax exp (32) + divide (4) per output.
    assert theirs == {"Conv": 256 * 27 + 256, "BatchNormalization": 256 * 31, "Relu": 256,
                      "MaxPool": 64 * 4, "GlobalAveragePool": 64 + 4 * 4, "Flatten": 0,
                      "Gemm": 10 * 4 + 10, "Softmax": 10 * 36}
    assert c.total["macs"] == 6952
    assert c.total["macs_onnx_tool"] == sum(theirs.values()) == 16106
    assert c.total["macs_onnx_tool_missing"] == []


def test_op_without_a_rule_is_nan_and_named():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Celu", ["r"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    c = cost(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    col = dict(zip(c.nodes.op_type, c.nodes.macs_onnx_tool))
    assert col["Relu"] == 10 and math.isnan(col["Celu"])
    assert c.total["macs_onnx_tool"] == 10 and c.total["macs_onnx_tool_missing"] == ["Celu"]


# LRN + Gemm, GlobalAveragePool, BatchNormalization + Sum, BatchNormalization + Mul/Add +
# AveragePool.
LIGHT_MODELS = ["bvlc_alexnet", "squeezenet", "shufflenet", "inception_v2"]


@pytest.mark.skipif(importlib.util.find_spec("onnx_tool") is None,
                    reason="onnx-tool is not installed (pip install onnx-tool==1.0.1)")
@pytest.mark.skipif(not os.path.isdir(LIGHT), reason="this onnx has no light test models")
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_cnns_agree_with_onnx_tool(name):
    import onnx_tool

    path = os.path.join(LIGHT, f"light_{name}.onnx")
    m = onnx_tool.Model(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.graph.shape_infer()
        m.graph.profile()
    per_op: dict[str, float] = {}
    for n in m.graph.nodemap.values():
        per_op[n.op_type] = per_op.get(n.op_type, 0.0) + float(n.macs[0])
    c = cost(path)
    nodes = c.nodes
    conv_gemm = nodes.loc[nodes.op_type.isin(["Conv", "Gemm"]), "macs"].sum()
    # Conv/Gemm: the same multiply-accumulates; onnx-tool adds the bias adds (< 1%).
    assert conv_gemm == pytest.approx(per_op.get("Conv", 0) + per_op.get("Gemm", 0), rel=0.01)
    # Totals: ours count contractions only, so onnx-tool's are higher; the compatible column
    # matches it.
    assert float(m.graph.macs[0]) > c.total["macs"]
    assert c.total["macs_onnx_tool"] == pytest.approx(float(m.graph.macs[0]), rel=0.01)
    assert c.total["macs_onnx_tool_missing"] == []
