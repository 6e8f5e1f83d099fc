"""Output shapes of the ONNX-ML ops onnx's inference leaves unshaped (core/_contrib_shapes.py
ML_RULES): each rule against the shape onnxruntime's kernel produces, with a fixed and a named
row dim; cost then counts the ops after them instead of "shapes unknown"."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnx_lab

F = T.FLOAT
CASES = {
    "Scaler": dict(offset=[0.5, 0.5, 0.5], scale=[2.0, 2.0, 2.0]),
    "Normalizer": dict(norm="L2"),
    "Imputer": dict(imputed_value_floats=[0.0, 0.0, 0.0], replaced_value_float=np.nan),
    "LinearRegressor": dict(coefficients=[1.0] * 6, intercepts=[0.0, 1.0], targets=2),
    "SVMRegressor": dict(kernel_type="LINEAR", support_vectors=[1.0, 2.0, 3.0],
                         coefficients=[0.5], rho=[0.1], n_supports=1,
                         kernel_params=[0.1, 0.0, 3.0]),
}


def one_op(op: str, rows, attrs) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], domain="ai.onnx.ml", name=op, **attrs),
         helper.make_node("Relu", ["y"], ["z"], name="after")], "g",
        [helper.make_tensor_value_info("x", F, [rows, 3])],
        [helper.make_value_info("z", onnx.TypeProto())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("ai.onnx.ml", 3)])


@pytest.mark.parametrize("op", sorted(CASES))
def test_rule_matches_onnxruntime(op):
    m = one_op(op, 4, CASES[op])
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["z"], {"x": np.ones((4, 3), np.float32)})[0]
    lab = onnx_lab.open(m)
    shapes = lab.tensors.set_index("name")["shape"]
    assert tuple(shapes["y"]) == got.shape and tuple(shapes["z"]) == got.shape
    cost = lab.cost().nodes.set_index("node_id")
    assert cost.loc["after", "flops"] == got.size  # the Relu after it is counted


@pytest.mark.parametrize("op", sorted(CASES))
def test_named_rows_stay_named(op):
    lab = onnx_lab.open(one_op(op, "N", CASES[op]))
    y = tuple(lab.tensors.set_index("name")["shape"]["y"])
    assert y[0] == "N" and len(y) == 2


def test_dict_vectorizer_is_one_row_of_the_vocabulary():
    vocab = [1, 2, 3, 7]
    g = helper.make_graph(
        [helper.make_node("DictVectorizer", ["features"], ["vec"], domain="ai.onnx.ml",
                          name="dv", int64_vocabulary=vocab),
         helper.make_node("Scaler", ["vec"], ["Y"], domain="ai.onnx.ml", name="scale",
                          offset=[0.0] * 4, scale=[2.0] * 4)], "g",
        [helper.make_value_info("features", helper.make_map_type_proto(
            T.INT64, helper.make_tensor_type_proto(F, [])))],
        [helper.make_value_info("Y", onnx.TypeProto())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"features": {1: 0.5, 7: 2.0}})[0]
    lab = onnx_lab.open(m)
    shapes = lab.tensors.set_index("name")["shape"]
    assert tuple(shapes["vec"]) == got.shape == (1, 4) and tuple(shapes["Y"]) == (1, 4)
    cost = lab.cost().nodes.set_index("node_id")
    assert cost.loc["scale", "flops"] == 8  # 2 FLOPs per element, no "shapes unknown"


@pytest.mark.parametrize("x_shape,y_shape", [((3, 5), (2,)), ((5,), (2, 3)), ((2, 3, 5), (1, 4)),
                                             (("N", 5), (2,)), ((5,), ("K",))])
def test_array_feature_extractor_matches_onnxruntime(x_shape, y_shape):
    # skl2onnx's nearest-neighbour classifier reads its labels through it: its output shape
    # left the Reshape, Equal, ReduceSum and Div after it "shapes unknown" in cost()
    g = helper.make_graph(
        [helper.make_node("ArrayFeatureExtractor", ["x", "y"], ["z"], domain="ai.onnx.ml",
                          name="afe"),
         helper.make_node("Relu", ["z"], ["r"], name="after")], "g",
        [helper.make_tensor_value_info("x", F, list(x_shape)),
         helper.make_tensor_value_info("y", T.INT64, list(y_shape))],
        [helper.make_value_info("r", onnx.TypeProto())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ai.onnx.ml", 3)])
    dims = {"N": 3, "K": 4}
    xs = tuple(dims.get(d, d) for d in x_shape)
    ys = tuple(dims.get(d, d) for d in y_shape)
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.ones(xs, np.float32), "y": np.zeros(ys, np.int64)})[0]
    named = onnx_lab.open(m).tensors.set_index("name")["shape"]
    want = tuple(d for d in got.shape)
    z = tuple(named["z"])
    assert len(z) == len(want)
    assert all(a == b or (isinstance(a, str) and dims[a] == b) for a, b in zip(z, want)), (z, want)
    lab = onnx_lab.open(m, dims={k: v for k, v in dims.items()
                                 if k in (*x_shape, *y_shape)})
    assert tuple(lab.tensors.set_index("name")["shape"]["z"]) == want
    assert lab.cost().nodes.set_index("node_id").loc["after", "flops"] == got.size
