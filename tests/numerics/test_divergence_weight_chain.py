"""The blame of a divergence at a node whose weight sits behind a chain of value-preserving
nodes: a Cast from float16 (onnxconverter-common's keep_io_types, onnxruntime's ort:basic
output of a float16 model), a DequantizeLinear of stored integers. Each pair is checked
against fresh onnxruntime sessions on the saved files, the node's output exposed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from numerics_helpers import make_model, vi
from onnx import TensorProto, helper, numpy_helper

from onnx_lab.numerics.compare import compare

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((8, 6)).astype(np.float32)
_B = _RNG.standard_normal((6, 4)).astype(np.float32)
_X = {"x": _RNG.standard_normal((2, 8)).astype(np.float32)}


def _model(front: list[onnx.NodeProto], inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    nodes = [*front, helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Relu", ["y"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "b"], ["out"], name="mm2")]
    return make_model(nodes, [vi("x", [2, 8])], [vi("out", [2, 4])],
                      [*inits, numpy_helper.from_array(_B, "b")])


def _plain() -> onnx.ModelProto:
    return _model([], [numpy_helper.from_array(_W, "w")])


def _cast(w: np.ndarray) -> onnx.ModelProto:
    cast = helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT, name="cw")
    return _model([cast], [numpy_helper.from_array(w.astype(np.float16), "w16")])


def _dq(scale: float, out: str = "w") -> onnx.ModelProto:
    q = np.clip(np.round(_W / 0.02), -127, 127).astype(np.int8)
    dq = helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], [out], name="dq_" + out)
    m = _model([dq], [numpy_helper.from_array(q, "wq"),
                      numpy_helper.from_array(np.array(scale, np.float32), "ws"),
                      numpy_helper.from_array(np.array(0, np.int8), "wz")])
    for n in m.graph.node:
        n.input[:] = [out if i == "w" else i for i in n.input]
    return m


def _truth(tmp_path, ref: onnx.ModelProto, cand: onnx.ModelProto) -> float:
    """max|y_ref - y_cand| of the MatMul's output in fresh sessions on saved copies."""
    ys = []
    for i, m in enumerate((ref, cand)):
        m = onnx.ModelProto.FromString(m.SerializeToString())
        m.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
        path = tmp_path / f"side{i}.onnx"
        onnx.save(m, path)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        ys.append(sess.run(["y"], _X)[0].astype(np.float64))
    return float(np.abs(ys[0] - ys[1]).max())


def test_a_weight_behind_a_cast_from_float16_that_changed_is_named(tmp_path):
    # float32 reference, candidate storing the weight as float16 behind a Cast, 1.5 times
    # larger: read "MatMul mm computes differently: its inputs agree"
    ref, cand = _plain(), _cast(_W * 1.5)
    assert _truth(tmp_path, ref, cand) > 1.0
    d = compare(ref, cand, feeds=_X).first_divergence
    assert d["node_id"] == "mm" and d["cause"] == "weights", d
    assert d["constant"] == "w" and d["constant_max_abs"] > 0.5, d
    assert "(in the candidate 'w16')" in d["message"], d["message"]
    assert "beyond its rounding to float16" in d["message"], d["message"]
    assert "read through Cast" in d["message"], d["message"]


def test_a_weight_only_rounded_to_float16_behind_a_cast_is_not_named(tmp_path):
    # the same pair, the weight only converted: the MatMul's output moves by the rounding
    # (fresh sessions: about 1e-3), which a tolerance of 1e-6 makes a divergence; its
    # weight did not change
    ref, cand = _plain(), _cast(_W)
    assert 0 < _truth(tmp_path, ref, cand) < 1e-2
    c = compare(ref, cand, feeds=_X, atol=1e-6, rtol=1e-6)
    d = c.first_divergence
    assert not c.passed and d["node_id"] == "mm", d
    assert d["cause"] != "weights", d
    assert c.passed == compare(ref, cand, feeds=_X, atol=1e-6, rtol=1e-6,
                               layerwise=False).passed


def test_a_dequantized_weight_whose_scale_changed_is_named(tmp_path):
    # a float32 reference against its weight quantized to int8 behind a DequantizeLinear
    # whose scale is 1.5 times too large; and two QDQ models whose DequantizeLinear outputs
    # are named otherwise (not paired, so not compared as rows)
    ref, cand = _plain(), _dq(0.03)
    assert _truth(tmp_path, ref, cand) > 1.0
    d = compare(ref, cand, feeds=_X).first_divergence
    assert d["node_id"] == "mm" and d["cause"] == "weights", d
    assert "beyond its quantization to int8, step 0.03" in d["message"], d["message"]

    ref, cand = _dq(0.02), _dq(0.03, out="w_dq")
    assert _truth(tmp_path, ref, cand) > 1.0
    d = compare(ref, cand, feeds=_X).first_divergence
    assert d["node_id"] == "mm" and d["cause"] == "weights" and d["constant"] == "wq", d
    assert "its scale 'ws' differs" in d["message"], d["message"]


def test_a_weight_only_quantized_is_not_named(tmp_path):
    # the right scale: the MatMul moves by the quantization alone (fresh sessions: ~0.03,
    # a divergence under float32's rule), not by a changed weight
    ref, cand = _plain(), _dq(0.02)
    assert 0 < _truth(tmp_path, ref, cand) < 0.1
    d = compare(ref, cand, feeds=_X).first_divergence
    assert d is not None and d["node_id"] == "mm" and d["cause"] != "weights", d
