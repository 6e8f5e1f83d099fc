"""``weight_stats`` of packed low-bit weights (onnxruntime's MatMulNBits and
GatherBlockQuantized) describes the weights they hold, unpacked with their scales and zero
points: the statistics of the packed bytes (min 0, max 255, mean ~131) said nothing about them
and would hide a ruined block. Checked against onnxruntime itself: the MatMulNBits run on an
identity matrix and the GatherBlockQuantized run on every row give the weights it computes
with."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab

K, N = 64, 24


def _matmul_nbits(symmetric: bool) -> onnx.ModelProto:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    w = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32) * 0.05
    w[:, 3] += 0.4  # a column of its own scale
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [K, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [K, N])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    q = MatMulNBitsQuantizer(m, block_size=32, is_symmetric=symmetric)
    q.process()
    return q.model.model


def _gather_block_quantized() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    vocab, hidden, block = 6, 64, 32
    data = rng.integers(0, 256, (vocab, hidden // 2), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, (vocab, hidden // block)).astype(np.float32)
    zp = rng.integers(0, 256, (vocab, hidden // block // 2), dtype=np.uint8)
    node = helper.make_node("GatherBlockQuantized", ["table", "ids", "scales", "zp"], ["y"],
                            domain="com.microsoft", name="embed", block_size=block,
                            gather_axis=0, quantize_axis=1)
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [vocab])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [vocab, hidden])],
                          [numpy_helper.from_array(data, "table"),
                           numpy_helper.from_array(scales, "scales"),
                           numpy_helper.from_array(zp, "zp")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _row(stats, name):
    return stats.set_index("name").loc[name]


@pytest.mark.parametrize("symmetric", [True, False])
def test_matmul_nbits_weights_are_described_as_onnxruntime_computes_them(symmetric):
    m = _matmul_nbits(symmetric)
    node = next(n for n in m.graph.node if n.op_type == "MatMulNBits")
    assert (len(node.input) > 3) == (not symmetric)  # zero points only when asymmetric
    # onnxruntime's own weights: the MatMul of an identity matrix
    (w,) = ort.InferenceSession(m.SerializeToString()).run(None, {"x": np.eye(K, dtype=np.float32)})
    r = _row(onnx_lab.open(m).weight_stats(), node.input[1])
    assert r["note"] == "4-bit MatMulNBits weights, dequantized ([N, K])"
    for col, want in (("min", w.min()), ("max", w.max()), ("mean", w.mean()), ("std", w.std())):
        assert r[col] == pytest.approx(float(want), rel=1e-5, abs=1e-6), col
    assert r["max"] < 1.0  # not bytes (0..255)


def test_gather_block_quantized_table_is_described_as_onnxruntime_gathers_it():
    m = _gather_block_quantized()
    (w,) = ort.InferenceSession(m.SerializeToString()).run(
        None, {"ids": np.arange(6, dtype=np.int64)})
    r = _row(onnx_lab.open(m).weight_stats(), "table")
    assert r["note"] == "4-bit GatherBlockQuantized table, dequantized"
    for col, want in (("min", w.min()), ("max", w.max()), ("mean", w.mean()), ("std", w.std())):
        assert r[col] == pytest.approx(float(want), rel=1e-5, abs=1e-6), col
    # the scales and zero points are described as stored
    assert _row(onnx_lab.open(m).weight_stats(), "scales")["note"] == ""


def test_the_histogram_of_packed_weights_is_of_the_weights():
    m = _matmul_nbits(True)
    name = next(n for n in m.graph.node if n.op_type == "MatMulNBits").input[1]
    fig = onnx_lab.open(m).weight_histogram(name)
    ax = fig.axes[0]
    assert "dequantized" in ax.get_title() and ax.get_xlim()[1] < 2  # not 0..255


def _check_against_onnxruntime(m, name, feed):
    (w,) = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    r = _row(onnx_lab.open(m).weight_stats(), name)
    assert "dequantized" in r["note"]
    for col, want in (("min", w.min()), ("max", w.max()), ("mean", w.mean()), ("std", w.std())):
        assert r[col] == pytest.approx(float(want), rel=1e-5, abs=1e-6), col


def test_zero_points_of_a_constant_node_are_read():
    # zero points written as a Constant node (not an initializer) were taken for absent:
    # every block dequantized around 8 instead of its own zero point
    rng = np.random.default_rng(2)
    data = rng.integers(0, 256, (N, 2, 16), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, (N * 2,)).astype(np.float32)
    zp = rng.integers(0, 256, (N,), dtype=np.uint8)
    nodes = [helper.make_node("Constant", [], ["zp"], value=numpy_helper.from_array(zp, "z")),
             helper.make_node("MatMulNBits", ["x", "B", "scales", "zp"], ["y"],
                              domain="com.microsoft", K=K, N=N, bits=4, block_size=32)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [K, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [K, N])],
                          [numpy_helper.from_array(data, "B"),
                           numpy_helper.from_array(scales, "scales")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    _check_against_onnxruntime(m, "B", {"x": np.eye(K, dtype=np.float32)})


def test_a_uint4_typed_table_without_zero_points_is_centred_on_0():
    rng = np.random.default_rng(3)
    vocab, hidden = 5, 64
    table = helper.make_tensor("table", TensorProto.UINT4, [vocab, hidden],
                               rng.integers(0, 16, vocab * hidden).tolist())
    scales = numpy_helper.from_array(rng.uniform(0.01, 0.1, (vocab, 2)).astype(np.float32),
                                     "scales")
    node = helper.make_node("GatherBlockQuantized", ["table", "ids", "scales"], ["y"],
                            domain="com.microsoft", block_size=32, gather_axis=0,
                            quantize_axis=1)
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [vocab])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [vocab, hidden])], [table, scales])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    _check_against_onnxruntime(m, "table", {"ids": np.arange(vocab, dtype=np.int64)})
