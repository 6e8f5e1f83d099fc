"""Rows whose reference holds NaN or inf only because its tensors were exposed together."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from numerics_helpers import make_model, vi
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.numerics.compare import LONE_NOTE, compare


def _overflowing_fp16() -> onnx.ModelProto:
    """A float16 model whose Gemm gives ~1.2e5 (beyond 65504): onnxruntime's CPU computes the
    Gemms in float32, so a plain run is finite; exposed, h is rounded to inf and the Reshape
    (a float16 kernel) passes the inf on to the second Gemm and the Softmax (NaN)."""
    rng = np.random.default_rng(0)
    f16 = np.float16
    inits = [numpy_helper.from_array((rng.standard_normal((16, 8)) * 0.01).astype(f16), "w1"),
             numpy_helper.from_array(np.full(16, 60000, f16), "b1"),
             numpy_helper.from_array((np.arange(10)[:, None] * np.full((10, 16), 1e-5))
                                     .astype(f16), "w2"),
             numpy_helper.from_array(np.zeros(10, f16), "b2"),
             numpy_helper.from_array(np.array([1, 16], np.int64), "shp")]
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="cin"),
             helper.make_node("Gemm", ["x16", "w1", "b1"], ["h"], transB=1, beta=2.0,
                              name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shp"], ["q"], name="rs"),
             helper.make_node("Gemm", ["q", "w2", "b2"], ["g"], transB=1, name="fc2"),
             helper.make_node("Softmax", ["g"], ["s"], name="sm"),
             helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT, name="cout")]
    return make_model(nodes, [vi("x", [1, 8])], [vi("y", [1, 10])], inits, opset=9)


def _exposed(model: onnx.ModelProto, names: list[str], x: np.ndarray) -> list[np.ndarray]:
    """A fresh session (optimizations off) of a copy of ``model`` with ``names`` exposed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def test_nan_only_exposure_gives_the_reference_fails_no_row():
    # light ZFNet-512 / AlexNet / ResNet-50 in float16 against their ort:basic version: the
    # outputs agreed, the reference's captured Softmax held 1,000 NaN and its row failed
    # (max_abs inf), the first divergence "Softmax ... computes differently"
    ref = _overflowing_fp16()
    lab = onnx_lab.open(ref)
    lab.apply("ort:basic", verify=False)
    cand = lab.model.to_proto()
    x = compare(ref, cand).feeds[0]["x"]
    cand_s = [n.output[0] for n in cand.graph.node if n.op_type == "Softmax"][0]
    # the truth: with every tensor exposed the reference's Softmax is NaN; exposed alone it
    # is finite, and it agrees with the candidate's
    assert np.isnan(_exposed(ref, ["h", "r", "q", "g", "s"], x)[4]).all()
    alone, theirs = _exposed(ref, ["s"], x)[0], _exposed(cand, [cand_s], x)[0]
    assert np.isfinite(alone).all() and np.abs(alone - theirs).max() < 1e-3
    c = compare(ref, cand)
    assert c.passed and c.first_divergence is None, c.first_divergence
    rows = c.layers.set_index("tensor")
    assert rows["passed"].all(), rows.loc[~rows["passed"], ["max_abs", "nan_ref"]]
    for t in ("g", "s"):
        assert rows.loc[t, "nan_ref"] == 0 and LONE_NOTE in rows.loc[t, "note"]
    assert LONE_NOTE not in str(rows.loc["q", "note"])  # a passing row is left as captured


def test_a_candidate_that_differs_there_still_fails_the_row():
    # the same candidate with its second Gemm's weight 1.5 times the reference's: the rows
    # judged on runs alone fail, on finite numbers (the Softmax, near one-hot, and the
    # outputs stay within tolerance)
    ref = _overflowing_fp16()
    lab = onnx_lab.open(ref)
    lab.apply("ort:basic", verify=False)
    cand = lab.model.to_proto()
    for t in cand.graph.initializer:
        if t.name.endswith("w2"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 1.5, t.name))
    c = compare(ref, cand)
    rows = c.layers.set_index("tensor")
    assert not rows.loc["g", "passed"] and np.isfinite(rows.loc["g", "max_abs"])
    assert LONE_NOTE in rows.loc["g", "note"] and rows.loc["g", "nan_ref"] == 0
    assert c.first_divergence["node_id"] == "fc2", c.first_divergence
