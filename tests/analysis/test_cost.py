"""Cost model against hand counts (one op per model, built with onnx.helper)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from models import tensor_scatter_model
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.analysis.cost import cost, itemsize
from onnx_lab.errors import DimError, InputError

F = TensorProto.FLOAT


def _model(nodes, inputs: dict, outputs: dict, inits: dict | None = None, opset: int = 17,
           extra_opsets: dict | None = None):
    """A graph of ``nodes`` with float inputs/outputs {name: shape} and weights {name: shape}."""
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
            for n, s in (inits or {}).items()]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs.items()],
                          init)
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v)
                                              for d, v in (extra_opsets or {}).items()]
    return helper.make_model(g, opset_imports=ops)


def _one(model) -> dict:
    c = cost(model)
    assert len(c.nodes) >= 1
    return c.nodes.iloc[-1].to_dict()


def test_first_resnet_conv_hand_count():
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2],
                                 pads=[1, 1, 1, 1], kernel_shape=[3, 3])],
               {"x": [1, 3, 224, 224]}, {"y": [1, 64, 112, 112]},
               {"w": [64, 3, 3, 3], "b": [64]})
    r = _one(m)
    assert r["macs"] == 21_676_032
    assert r["flops"] == 2 * 21_676_032 + 64 * 112 * 112  # + bias adds
    assert r["params"] == 64 * 27 + 64 and r["param_bytes"] == 4 * (64 * 27 + 64)
    assert r["output_bytes"] == 4 * 64 * 112 * 112
    assert r["input_bytes"] == 4 * (3 * 224 * 224 + 64 * 27 + 64)
    assert r["intensity"] == pytest.approx(r["flops"] / (r["input_bytes"] + r["output_bytes"]))
    assert r["known"]


@pytest.mark.parametrize("x, w, attrs, y, macs", [
    # grouped: 4 groups of 2 input channels
    ([1, 8, 10, 10], [16, 2, 3, 3], {"group": 4, "pads": [1, 1, 1, 1]}, [1, 16, 10, 10],
     16 * 100 * 2 * 9),
    # depthwise
    ([1, 8, 10, 10], [8, 1, 3, 3], {"group": 8, "pads": [1, 1, 1, 1]}, [1, 8, 10, 10],
     8 * 100 * 9),
    # dilation 2 without padding: 10 - 2*(3-1) = 6
    ([1, 1, 10, 10], [1, 1, 3, 3], {"dilations": [2, 2]}, [1, 1, 6, 6], 36 * 9),
    # 1-D conv
    ([2, 4, 16], [8, 4, 5], {}, [2, 8, 12], 2 * 8 * 12 * 4 * 5),
])
def test_conv_variants(x, w, attrs, y, macs):
    m = _model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], {"x": x}, {"y": y},
               {"w": w})
    r = _one(m)
    assert r["macs"] == macs and r["flops"] == 2 * macs


def test_conv_integer_zero_point_is_no_bias():
    # onnxruntime's dynamic quantization writes ConvInteger(x_q, w_q, x_zero_point, w_zp):
    # its input 2 was counted as a bias (one add per output: 9,666,560 FLOPs for 2 x 4,816,896
    # MACs on a quantized stem conv)
    u8 = TensorProto.UINT8
    w = numpy_helper.from_array(np.arange(54, dtype=np.uint8).reshape(3, 2, 3, 3), "w")
    zp = numpy_helper.from_array(np.array(3, np.uint8), "zp")
    g = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "zp"], ["y"])], "g",
        [helper.make_tensor_value_info("x", u8, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 3, 3, 3])], [w, zp])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    import onnxruntime as ort

    out = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.ones((1, 2, 5, 5), np.uint8)})[0]
    assert out.shape == (1, 3, 3, 3)  # a model onnxruntime runs
    r = _one(m)
    assert r["macs"] == 27 * 2 * 9  # out elements x Cin x k
    assert r["flops"] == 2 * r["macs"]


def test_packed_4bit_weights_take_whole_bytes():
    # 9 int4 weights are stored in 5 bytes, 3 uint4 in 2: the cost summed 4.5 + 1.5 and
    # truncated (param_bytes 10 where the file holds 11, and summary() says 11)
    w = helper.make_tensor("w", TensorProto.INT4, [3, 3], [1, -2, 3, -4, 5, 6, 7, -8, 0])
    w2 = helper.make_tensor("w2", TensorProto.UINT4, [3], [1, 2, 3])
    s = helper.make_tensor("s", F, [], [0.5])
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w", "s"], ["wd"]),
         helper.make_node("MatMul", ["x", "wd"], ["y0"]),
         helper.make_node("DequantizeLinear", ["w2", "s"], ["w2d"]),
         helper.make_node("Add", ["y0", "w2d"], ["y"])], "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3])], [w, s, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    assert [len(t.int32_data) for t in m.graph.initializer] == [5, 0, 2]  # packed bytes
    lab = onnx_lab.open(m)
    c = cost(lab)
    assert c.total["params"] == 9 + 1 + 3
    assert c.total["param_bytes"] == 5 + 4 + 2 == lab.summary()["param_bytes"]
    by = c.nodes.set_index("node_id")
    assert by.loc["DequantizeLinear_0", "param_bytes"] == 5 + 4
    assert by.loc["DequantizeLinear_2", "param_bytes"] == 2 + 4
    assert by.loc["DequantizeLinear_2", "input_bytes"] == 2 + 4


def test_conv_transpose():
    m = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])],
               {"x": [1, 4, 5, 5]}, {"y": [1, 2, 11, 11]}, {"w": [4, 2, 3, 3]})
    # every input element scatters into Cout/group * k*k outputs
    assert _one(m)["macs"] == 100 * 2 * 9


@pytest.mark.parametrize("ta, tb, a, b", [(0, 0, [4, 8], [8, 5]), (1, 0, [8, 4], [8, 5]),
                                          (0, 1, [4, 8], [5, 8]), (1, 1, [8, 4], [5, 8])])
def test_gemm_transposes(ta, tb, a, b):
    m = _model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb)],
               {"a": a}, {"y": [4, 5]}, {"b": b, "c": [5]})
    r = _one(m)
    assert r["macs"] == 4 * 5 * 8
    assert r["flops"] == 2 * 160 + 20


@pytest.mark.parametrize("a, b, y, macs", [
    ([2, 1, 4, 8], [3, 8, 5], [2, 3, 4, 5], 2 * 3 * 4 * 5 * 8),  # batch broadcasting
    ([8], [8, 5], [5], 5 * 8),  # 1-D left operand
    ([6, 4, 8], [8], [6, 4], 24 * 8),  # 1-D right operand
])
def test_matmul_broadcasting(a, b, y, macs):
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, {"y": y})
    assert _one(m)["macs"] == macs


@pytest.mark.parametrize("eq, shapes, y, flops, macs", [
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]], [2, 3, 5], 240, 120),
    ("bhqd,bhkd->bhqk", [[1, 2, 3, 4], [1, 2, 5, 4]], [1, 2, 3, 5], 240, 120),
    ("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]], [2, 3, 5], 240, 120),
    ("ij,jk", [[3, 4], [4, 5]], [3, 5], 120, 60),  # implicit output
    ("ij->ji", [[3, 4]], [4, 3], 0, 0),  # pure transpose
    ("ij->i", [[3, 4]], [3], 12, 0),  # reduction
])
def test_einsum_forms(eq, shapes, y, flops, macs):
    names = [f"in{i}" for i in range(len(shapes))]
    m = _model([helper.make_node("Einsum", names, ["y"], equation=eq)],
               dict(zip(names, shapes)), {"y": y})
    r = _one(m)
    assert (r["flops"], r["macs"]) == (flops, macs)


def test_onnx_attention_op():
    m = _model([helper.make_node("Attention", ["q", "k", "v"], ["y"])],
               {"q": [1, 2, 3, 4], "k": [1, 2, 5, 4], "v": [1, 2, 5, 6]}, {"y": [1, 2, 3, 6]},
               opset=23)
    r = _one(m)
    assert r["macs"] == 1 * 2 * 3 * 5 * (4 + 6)  # QK^T and PV
    assert r["flops"] == 2 * 300 + 6 * 30  # + scale and softmax


def test_com_microsoft_attention_ops():
    m = _model([helper.make_node("Attention", ["x", "w", "b"], ["y"], domain="com.microsoft",
                                 num_heads=2)],
               {"x": [2, 3, 8]}, {"y": [2, 3, 8]}, {"w": [8, 24], "b": [24]},
               extra_opsets={"com.microsoft": 1})
    r = _one(m)
    proj = 2 * 3 * 8 * 24
    core = 2 * 2 * 3 * 3 * (4 + 4)
    assert r["macs"] == proj + core
    m = _model([helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"],
                                 domain="com.microsoft", num_heads=2)],
               {"q": [2, 3, 8], "k": [2, 5, 8], "v": [2, 5, 8]}, {"y": [2, 3, 8]},
               extra_opsets={"com.microsoft": 1})
    assert _one(m)["macs"] == 2 * 2 * 3 * 5 * (4 + 4)


def test_pooling_elementwise_norm_reduce():
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["x"], ["g"]),
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("BatchNormalization", ["x", "sc", "bi", "mu", "var"], ["bn"]),
        helper.make_node("ReduceSum", ["x"], ["rs"], keepdims=0),
        helper.make_node("ReduceL2", ["x"], ["rl"], keepdims=0),
        helper.make_node("LayerNormalization", ["x", "gam"], ["ln"], axis=-1),
        helper.make_node("Softmax", ["x"], ["sm"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
    ]
    outs = {"p": [1, 2, 4, 4], "g": [1, 2, 1, 1], "s": [1, 2, 8, 8], "a": [1, 2, 8, 8],
            "bn": [1, 2, 8, 8], "rs": [], "rl": [], "ln": [1, 2, 8, 8], "sm": [1, 2, 8, 8],
            "r": [1, 2, 8, 8], "t": [1, 2, 8, 8]}
    m = _model(nodes, {"x": [1, 2, 8, 8]}, outs,
               {"bias": [8], "sc": [2], "bi": [2], "mu": [2], "var": [2], "gam": [8]})
    c = cost(m)
    f = dict(zip(c.nodes.op_type, c.nodes.flops))
    n = 128
    assert f == {"MaxPool": 32 * 4, "GlobalAveragePool": n, "Sigmoid": 4 * n, "Add": n,
                 "BatchNormalization": 2 * n, "ReduceSum": n, "ReduceL2": 2 * n,
                 "LayerNormalization": 8 * n, "Softmax": 5 * n, "Relu": n, "Transpose": 0}
    assert (c.nodes.macs == 0).all() and c.nodes.known.all()
    assert c.total["params"] == 8 + 4 * 2 + 8


@pytest.mark.parametrize("mode, flops", [("nearest", 0), ("linear", 64 * 7), ("cubic", 64 * 31)])
def test_resize(mode, flops):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    m = _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)],
               {"x": [1, 1, 4, 4]}, {"y": [1, 1, 8, 8]})
    m.graph.initializer.append(scales)
    r = _one(m)
    assert r["flops"] == flops and r["known"]


@pytest.mark.parametrize("op, gates, dirs, elementwise", [("LSTM", 4, 1, 17), ("GRU", 3, 1, 13),
                                                          ("LSTM", 4, 2, 17), ("RNN", 1, 1, 3)])
def test_recurrent_counts_every_time_step(op, gates, dirs, elementwise):
    seq, batch, inp, hidden = 5, 2, 3, 4
    attrs = {"hidden_size": hidden}
    if dirs == 2:
        attrs["direction"] = "bidirectional"
    m = _model([helper.make_node(op, ["x", "w", "r"], ["y"], **attrs)],
               {"x": [seq, batch, inp]}, {"y": [seq, dirs, batch, hidden]},
               {"w": [dirs, gates * hidden, inp], "r": [dirs, gates * hidden, hidden]})
    r = _one(m)
    macs = dirs * seq * batch * gates * hidden * (inp + hidden)
    assert r["macs"] == macs  # onnx-tool leaves out seq
    assert r["flops"] == 2 * macs + dirs * seq * batch * hidden * elementwise


def test_unknown_ops_are_nan_not_zero():
    m = _model([helper.make_node("Relu", ["x"], ["a"]),
                helper.make_node("Foo", ["a"], ["b"], domain="my.ops"),
                helper.make_node("Det", ["b"], ["y"])],
               {"x": [3, 3]}, {"y": []}, extra_opsets={"my.ops": 1})
    c = cost(m)
    by = c.nodes.set_index("op_type")
    assert by.loc["Relu", "known"] and by.loc["Relu", "flops"] == 9
    for op in ("Foo", "Det"):
        assert not by.loc[op, "known"]
        assert math.isnan(by.loc[op, "flops"]) and math.isnan(by.loc[op, "macs"])
    assert "no cost formula for my.ops::Foo" in by.loc["Foo", "note"]
    assert c.total["unknown_nodes"] == 2 and c.total["unknown_ops"] == ["Det", "Foo"]
    assert c.total["flops"] == 9  # totals of the known nodes; the notes say what is missing
    assert any("unknown cost" in n for n in c.notes)
    assert not c.by_op().set_index("op_type").loc["Foo", "known"]


def test_peak_activation_by_liveness_not_sum():
    # x -> a -> b -> y, 1000 floats each: at most two tensors are alive at once.
    chain = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("Relu", ["b"], ["y"])], {"x": [1000]}, {"y": [1000]})
    c = cost(chain)
    assert c.total["activation_bytes"] == 3 * 4000
    assert c.total["peak_activation_bytes"] == 2 * 4000
    assert c.memory.live_bytes.tolist() == [8000, 8000, 8000]
    # A branch keeps x, a and b alive together.
    branch = _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
                     helper.make_node("Add", ["a", "b"], ["y"])], {"x": [1000]}, {"y": [1000]})
    c = cost(branch)
    assert c.total["peak_activation_bytes"] == 3 * 4000
    assert c.total["peak_node"] == "Neg_1"


def test_shared_weight_counted_once_in_totals():
    m = _model([helper.make_node("MatMul", ["x", "w"], ["a"]),
                helper.make_node("MatMul", ["a", "w"], ["y"])],
               {"x": [2, 4]}, {"y": [2, 4]}, {"w": [4, 4]})
    c = cost(m)
    assert c.nodes.params.tolist() == [16, 16]
    assert c.total["params"] == 16 and c.total["param_bytes"] == 64
    assert c.total["macs"] == 2 * 2 * 4 * 4


def test_samples_and_dims():
    c = onnx_lab.open("sample:convnet").cost()
    assert c.nodes.known.all() and c.total["macs"] > 0
    assert len(c.nodes) == 21
    with pytest.raises(DimError, match="batch"):
        cost("sample:transformer_block")
    c1 = cost("sample:transformer_block", dims={"batch": 1, "seq": 8})
    c2 = onnx_lab.open("sample:transformer_block", dims={"batch": 2, "seq": 8}).cost()
    assert c2.total["macs"] == 2 * c1.total["macs"]
    c3 = cost("sample:control_flow")
    assert any("Loop 'Loop_3': body counted 3 times" in n for n in c3.notes)
    assert any("both branches of each If" in n for n in c3.notes)


def test_roofline():
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": [64, 64]}, {"y": [64, 64]},
               {"w": [64, 64]})
    c = cost(m)
    flops = 2 * 64**3
    moved = 3 * 64 * 64 * 4
    r = c.roofline(peak_flops=1e9, bandwidth=1e9)
    assert r.compute_ms == pytest.approx(flops / 1e9 * 1e3)
    assert r.memory_ms == pytest.approx(moved / 1e9 * 1e3)
    assert r.total_ms == pytest.approx(max(r.compute_ms, r.memory_ms))
    assert r.nodes.bound.tolist() == ["compute"]
    assert c.roofline(1e15, 1e9).nodes.bound.tolist() == ["memory"]
    assert dict(r)["total_ms"] == r.total_ms
    for bad in (0, -1, "fast"):
        with pytest.raises(InputError, match="positive"):
            c.roofline(bad, 1e9)


def test_views_and_itemsize():
    c = onnx_lab.open("sample:convnet").cost()
    assert "GMACs" in repr(c) and "top nodes" in c._repr_html_()
    d = c.to_dict()
    assert set(d) == {"total", "nodes", "notes"} and len(d["nodes"]) == 21
    assert itemsize("float32") == 4 and itemsize("bfloat16") == 2 and itemsize("int4") == 0.5
    assert itemsize(None) is None


def test_lrn_is_counted():
    # AlexNet/GoogLeNet-era exports (onnx's light bvlc_alexnet, inception_v1) use LRN.
    m = _model([helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-4, beta=0.75)],
               {"x": [1, 8, 4, 4]}, {"y": [1, 8, 4, 4]})
    row = _one(m)
    assert row["known"] and row["flops"] == 128 * (2 * 5 + 3) and row["macs"] == 0


# ------------------------------------------------------------------ control-flow trip counts
def _loop_body(p: str = "", inner_loop: onnx.NodeProto | None = None) -> onnx.GraphProto:
    """Loop body: state [4, 8] @ W [8, 8] (W from the outer scope), names prefixed with
    ``p``; optionally a nested loop on the result."""
    nodes = [helper.make_node("Identity", [f"{p}cond_in"], [f"{p}cond_out"]),
             helper.make_node("MatMul", [f"{p}state", "W"], [f"{p}mm"], name=f"{p}body_mm")]
    last = f"{p}mm"
    if inner_loop is not None:
        nodes.append(inner_loop)
        last = inner_loop.output[0]
    nodes.append(helper.make_node("Identity", [last], [f"{p}state_out"]))
    return helper.make_graph(
        nodes, f"{p}body",
        [helper.make_tensor_value_info(f"{p}i", TensorProto.INT64, []),
         helper.make_tensor_value_info(f"{p}cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info(f"{p}state", F, [4, 8])],
        [helper.make_tensor_value_info(f"{p}cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info(f"{p}state_out", F, [4, 8])])


def _loop_model(trip: int | None, nested: int | None = None) -> onnx.ModelProto:
    inner = None
    if nested is not None:
        inner = helper.make_node("Loop", ["M_in", "", "mm"], ["inner_out"],
                                 body=_loop_body("inner_"), name="inner_loop")
    inits = [numpy_helper.from_array(np.ones((8, 8), np.float32), "W"),
             numpy_helper.from_array(np.array(True), "cond")]
    inputs = [helper.make_tensor_value_info("x", F, [4, 8])]
    if trip is None:
        inputs.append(helper.make_tensor_value_info("M", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(trip, np.int64), "M"))
    if nested is not None:
        inits.append(numpy_helper.from_array(np.array(nested, np.int64), "M_in"))
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "x"], ["y"], body=_loop_body("", inner),
                          name="outer_loop")],
        "loops", inputs, [helper.make_tensor_value_info("y", F, [4, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def test_loop_bodies_count_their_constant_trip_count():
    per_iter = 4 * 8 * 8
    c = cost(_loop_model(5))
    row = c.nodes.set_index("node_id").loc["body_mm"]
    assert row.calls == 5 and row.macs == 5 * per_iter and row.flops == 2 * 5 * per_iter
    assert row.output_bytes == 5 * 4 * 8 * 4
    assert c.total["macs"] == 5 * per_iter
    assert any("'outer_loop': body counted 5 times" in n and "upper bound" in n
               for n in c.notes)
    # nested: the inner body runs 5 x 3 times
    c = cost(_loop_model(5, nested=3))
    rows = c.nodes.set_index("node_id")
    assert rows.loc["body_mm"].calls == 5 and rows.loc["inner_body_mm"].calls == 15
    assert c.total["macs"] == (5 + 15) * per_iter
    # the outputs a real run gives agree with the counted number of iterations
    import onnxruntime as ort

    sess = ort.InferenceSession(_loop_model(5).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": np.ones((4, 8), np.float32)})[0]
    assert y[0, 0] == 8.0 ** 5


def test_loop_with_a_runtime_trip_count_is_counted_once_and_says_so():
    c = cost(_loop_model(None))
    row = c.nodes.set_index("node_id").loc["body_mm"]
    assert row.calls == 1 and row.macs == 4 * 8 * 8
    assert "trip count of Loop 'outer_loop' unknown" in row.note
    assert any("'outer_loop': trip count not a constant" in n for n in c.notes)


def test_scan_body_counts_the_sequence_length():
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "W"], ["h"], name="scan_mm"),
         helper.make_node("Add", ["acc", "h"], ["acc_out"], name="scan_add"),
         helper.make_node("Identity", ["h"], ["h_out"])],
        "scan_body",
        [helper.make_tensor_value_info("acc", F, [1, 8]),
         helper.make_tensor_value_info("x_t", F, [1, 8])],
        [helper.make_tensor_value_info("acc_out", F, [1, 8]),
         helper.make_tensor_value_info("h_out", F, [1, 8])])
    g = helper.make_graph(
        [helper.make_node("Scan", ["acc0", "xs"], ["acc", "hs"], body=body, num_scan_inputs=1,
                          name="scan")],
        "scan", [helper.make_tensor_value_info("acc0", F, [1, 8]),
                 helper.make_tensor_value_info("xs", F, [7, 1, 8])],
        [helper.make_tensor_value_info("acc", F, [1, 8]),
         helper.make_tensor_value_info("hs", F, [7, 1, 8])],
        [numpy_helper.from_array(np.ones((8, 8), np.float32), "W")])
    c = cost(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    rows = c.nodes.set_index("node_id")
    assert rows.loc["scan_mm"].calls == 7 and rows.loc["scan_mm"].macs == 7 * 64
    assert rows.loc["scan_add"].flops == 7 * 8


def test_loop_trip_count_from_a_constant_node():
    m = _loop_model(4)
    (trip,) = [t for t in m.graph.initializer if t.name == "M"]
    m.graph.initializer.remove(trip)
    m.graph.node.insert(0, helper.make_node("Constant", [], ["M"], value_int=4, name="trip"))
    onnx.checker.check_model(m)
    row = cost(m).nodes.set_index("node_id").loc["body_mm"]
    assert row.calls == 4 and row.macs == 4 * 4 * 8 * 8


def test_tensor_scatter_is_a_data_move():
    # opset 24's KV-cache update was an unknown op: flops NaN for a whole decoder
    m = tensor_scatter_model()
    c = cost(onnx_lab.open(m))
    assert c.total["unknown_nodes"] == 0 and c.total["flops"] == 0.0
