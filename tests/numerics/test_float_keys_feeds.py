"""A LabelEncoder with float keys (``keys_floats``) is fed its keys: standard-normal feeds
matched none of them, every value took the default, and a changed key passed ``compare``."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.numerics import make_feeds


def _float_keys(keys) -> onnx.ModelProto:
    nodes = [helper.make_node("Reshape", ["f", "shape"], ["flat"], name="flatten"),
             helper.make_node("LabelEncoder", ["flat"], ["k"], domain="ai.onnx.ml",
                              name="LabelEncoder", keys_floats=list(keys),
                              values_int64s=[1, 2, 3], default_int64=0)]
    g = helper.make_graph(nodes, "float_keys",
                          [helper.make_tensor_value_info("f", TensorProto.FLOAT, ["N", 1])],
                          [helper.make_tensor_value_info("k", TensorProto.INT64, ["N"])],
                          [helper.make_tensor("shape", TensorProto.INT64, [1], [-1])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17),
                                            helper.make_operatorsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    return m


def test_float_keys_are_drawn():
    f = make_feeds(onnx_lab.open(_float_keys([0.5, 1.5, 2.5]), dims={"N": 12}))["f"]
    assert f.dtype == np.float32 and f.shape == (12, 1)
    assert set(f.ravel().tolist()) == {0.5, 1.5, 2.5, 3.5}  # 3.5: no key, the default


def test_a_changed_float_key_fails_compare():
    ref = onnx_lab.open(_float_keys([0.5, 1.5, 2.5]), dims={"N": 12})
    assert onnx_lab.compare(ref, ref).passed
    c = onnx_lab.compare(ref, onnx_lab.open(_float_keys([0.7, 1.5, 2.5]), dims={"N": 12}))
    assert not c.passed and c.first_divergence["node_id"] == "LabelEncoder"
