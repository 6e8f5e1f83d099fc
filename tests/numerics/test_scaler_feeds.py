"""A float input read through a scaler (a Pipeline's StandardScaler) by a model that computes
with it is fed in the units the scaler expects: standard-normal values in the input's own
units lay tens of spreads out once scaled, the probabilities saturated, and a changed
coefficient, scaler mean or post_transform passed compare."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.numerics import make_feeds

MEAN, SPREAD = [650.0, 5000.0], [350.0, 1000.0]  # a breast-cancer area, an income


def _scaled_logistic(coef0: float = 6.0, *, sub_div: bool = False) -> onnx.ModelProto:
    """X [N, 2] → StandardScaler (an ai.onnx.ml Scaler, or the Sub and Div of float64
    exports) → skl2onnx's binary LinearClassifier (LOGISTIC) → label, probabilities."""
    if sub_div:
        scale = [helper.make_node("Sub", ["X", "mean"], ["centred"]),
                 helper.make_node("Div", ["centred", "spread"], ["scaled"])]
        inits = [numpy_helper.from_array(np.array(MEAN, np.float32), "mean"),
                 numpy_helper.from_array(np.array(SPREAD, np.float32), "spread")]
    else:
        scale = [helper.make_node("Scaler", ["X"], ["scaled"], domain="ai.onnx.ml",
                                  offset=MEAN, scale=[1 / s for s in SPREAD])]
        inits = []
    w = [coef0, -5.0]
    nodes = [*scale, helper.make_node(
        "LinearClassifier", ["scaled"], ["label", "probabilities"], domain="ai.onnx.ml",
        name="linear", classlabels_ints=[0, 1], coefficients=[-w[0], -w[1], *w],
        intercepts=[-0.5, 0.5], multi_class=0, post_transform="LOGISTIC")]
    g = helper.make_graph(nodes, "scaled", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                           ["N", 2])],
                          [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
                           helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                                         ["N", 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("sub_div", [False, True])
def test_a_changed_coefficient_behind_a_scaler_fails_compare(sub_div):
    rows = (np.random.default_rng(1).standard_normal((64, 2)) * SPREAD + MEAN).astype(
        np.float32)  # data as the scaler was fitted on
    truth = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
             .run(None, {"X": rows})[1] for m in (_scaled_logistic(sub_div=sub_div),
                                                  _scaled_logistic(6.5, sub_div=sub_div))]
    assert np.abs(truth[0] - truth[1]).max() > 0.01  # the real rows see the change
    ref = onnx_lab.open(_scaled_logistic(sub_div=sub_div), shapes={"X": [4, 2]})
    x = make_feeds(ref)["X"]
    z = (x - MEAN) / SPREAD  # what the linear model reads: about standard normal
    assert np.abs(z).max() < 4 and z.std() > 0.3
    assert onnx_lab.compare(ref, ref).passed
    c = onnx_lab.compare(ref, onnx_lab.open(_scaled_logistic(6.5, sub_div=sub_div),
                                            shapes={"X": [4, 2]}))
    assert not c.passed and c.first_divergence["node_id"] == "linear"
