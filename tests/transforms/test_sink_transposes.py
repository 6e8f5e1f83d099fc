"""sink_transposes: the Transposes tf2onnx writes around a Keras model's NHWC elementwise ops
(bias, batch norm, activations between each Conv's Transposes) go, verified, bit-identical
in a fresh onnxruntime session; a region that would cost Transposes is left."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab

NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _hardswish_region(shape=(1, 4, 5, 6), reduce: bool = False, as_output: bool = False
                      ) -> onnx.ModelProto:
    """x (NCHW) -> Transpose to NHWC -> bias Add, scale Mul, HardSwish as tf2onnx spells it
    (m · clip(m + 3, 0, 6)) -> Transpose back. ``reduce``: a ReduceMean over the NHWC spatial
    axes without keepdims reads the region too. ``as_output``: the region's last tensor is a
    graph output."""
    rng = np.random.default_rng(0)
    c = shape[1]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=NHWC, name="t_in"),
             helper.make_node("Add", ["xt", "b"], ["a"], name="add"),
             helper.make_node("Mul", ["a", "s"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "three"], ["m3"], name="add3"),
             helper.make_node("Clip", ["m3", "zero", "six"], ["c"], name="clip"),
             helper.make_node("Mul", ["m", "c"], ["hs"], name="hswish"),
             helper.make_node("Transpose", ["hs"], ["y"], perm=NCHW, name="t_out")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
    if reduce:  # keepdims=0: another rank, it cannot join the region
        nodes.append(helper.make_node("ReduceMean", ["hs"], ["r"], axes=[1, 2], keepdims=0,
                                      name="squeeze"))
        outs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [shape[0], c]))
    if as_output:
        outs.append(helper.make_tensor_value_info("hs", TensorProto.FLOAT, None))
    inits = [numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal((1, 1, 1, c)).astype(np.float32), "s"),
             numpy_helper.from_array(np.array(3, np.float32), "three"),
             numpy_helper.from_array(np.array(0, np.float32), "zero"),
             numpy_helper.from_array(np.array(6, np.float32), "six")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     list(shape))], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _fresh_equal(original: onnx.ModelProto, path) -> None:
    x = np.random.default_rng(1).standard_normal(
        [d.dim_value for d in original.graph.input[0].type.tensor_type.shape.dim]
    ).astype(np.float32)
    a = ort.InferenceSession(original.SerializeToString()).run(None, {"x": x})
    b = ort.InferenceSession(str(path)).run(None, {"x": x})
    assert len(a) == len(b)
    for p, q in zip(a, b):
        assert p.shape == q.shape and np.array_equal(p, q)


@pytest.mark.parametrize("shape", [(1, 4, 5, 6), (1, 4, 4, 4)])
def test_the_transposes_around_an_elementwise_region_go(tmp_path, shape):
    # (1, 4, 4, 4): NHWC and NCHW tensors of one shape; alignment must not compare them
    m = _hardswish_region(shape)
    lab = onnx_lab.open(m)
    pt = lab.patterns()
    row = pt.loc[pt["pass"] == "sink_transposes"].iloc[0]
    assert row.pattern == "transpose_region" and row.saving_nodes == 2
    r = lab.apply("sink_transposes")
    assert r.verify_passed is True and r.max_abs_err == 0
    assert "Transpose" not in {n.op_type for n in lab.model.graph}
    # the scale is stored for the new layout; the bias of rank 1 broadcast as [1, C, 1, 1]
    assert list(lab.model.graph.initializers["s_t"].shape) == [1, shape[1], 1, 1]
    assert list(lab.model.graph.initializers["b_t"].shape) == [1, shape[1], 1, 1]
    assert set(lab.origins["hswish"]) >= {"hswish", "t_in"}
    lab.save(tmp_path / "m.onnx")
    _fresh_equal(m, tmp_path / "m.onnx")
    assert onnx_lab.compare(m, lab).passed  # across versions too: no false alarm


def test_a_reader_in_the_old_layout_gets_a_transpose_of_its_own(tmp_path):
    # a ReduceMean over the NHWC axes without keepdims reads the region: it gets the tensor
    # back in NHWC (under its old name), 2 Transposes go, 1 comes
    m = _hardswish_region(reduce=True)
    lab = onnx_lab.open(m)
    r = lab.apply("sink_transposes")
    assert r.verify_passed is True and r.max_abs_err == 0
    ops = [n.op_type for n in lab.model.graph]
    assert ops.count("Transpose") == 1
    t = next(n for n in lab.model.graph if n.op_type == "Transpose")
    assert t.outputs[0].name == "hs" and list(t.attributes["perm"].value) == NHWC
    lab.save(tmp_path / "m.onnx")
    _fresh_equal(m, tmp_path / "m.onnx")


def test_regions_that_would_not_pay_or_make_an_output_are_left():
    lab = onnx_lab.open(_hardswish_region(as_output=True))
    assert "sink_transposes" not in set(lab.patterns()["pass"])
    r = lab.apply("sink_transposes")
    # the node making the output keeps its layout and reads two region tensors: 2 would come
    assert not r.modified and "no Transpose would go" in (r.reason or "")
    # two readers in the old layout: 2 Transposes would go and 2 come
    m = _hardswish_region(reduce=True)
    m.graph.node.append(helper.make_node("ReduceMax", ["m"], ["mx"], axes=[1, 2], keepdims=1,
                                         name="peak"))
    m.graph.output.append(helper.make_tensor_value_info("mx", TensorProto.FLOAT, None))
    r = onnx_lab.open(m).apply("sink_transposes")
    assert not r.modified and "no Transpose would go" in " ".join(r.notes + [r.reason or ""])


def test_the_safe_preset_then_fuses_the_bias_into_its_conv(tmp_path):
    # Conv -> Transpose to NHWC -> bias Add -> Relu -> Transpose back -> Conv: with the
    # Transposes gone the bias sits next to its Conv and fuse_conv_add_bias takes it
    rng = np.random.default_rng(2)
    w = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3,  # noqa: E731
                                           f"w{len(s)}_{s[0]}")
    w1, w2, b = w(8, 3, 3, 3), w(4, 8, 1, 1), w(8)
    nodes = [helper.make_node("Conv", ["x", w1.name], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Transpose", ["c1"], ["t1"], perm=NHWC, name="to_nhwc"),
             helper.make_node("Add", ["t1", b.name], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Transpose", ["r"], ["t2"], perm=NCHW, name="to_nchw"),
             helper.make_node("Conv", ["t2", w2.name], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [w1, w2, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    lab = onnx_lab.open(m)
    lab.apply_preset("safe")
    assert [n.op_type for n in lab.model.graph] == ["Conv", "Relu", "Conv"]
    assert lab.history["verify_passed"].iloc[1:].all()
    lab.save(tmp_path / "m.onnx")
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    a = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    b2 = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x})[0]
    assert np.abs(a - b2).max() <= 1e-5 * max(1.0, float(np.abs(a).max()))


@pytest.mark.parametrize("opset", [13, 18])
def test_a_squeeze_excite_block_and_a_pad_join_the_region_with_their_axes_renumbered(
        tmp_path, opset):
    # tf2onnx's squeeze-excite: ReduceMean over NHWC's H, W (keepdims) then a gate Mul; a
    # Pad before a depthwise Conv pads NHWC's H and W. Axes as an attribute (opset 13) or an
    # input (opset 18), pads as an input.
    const = numpy_helper.from_array
    axes_attr = {"axes": [1, 2]} if opset < 18 else {}
    reduce_in = ["r"] if opset < 18 else ["r", "axes"]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=NHWC, name="t_in"),
             helper.make_node("Relu", ["xt"], ["r"], name="relu"),
             helper.make_node("ReduceMean", reduce_in, ["se"], keepdims=1, name="squeeze",
                              **axes_attr),
             helper.make_node("Sigmoid", ["se"], ["gate"], name="gate"),
             helper.make_node("Mul", ["r", "gate"], ["g"], name="excite"),
             helper.make_node("Pad", ["g", "pads"], ["p"], name="pad"),
             helper.make_node("Transpose", ["p"], ["y"], perm=NCHW, name="t_out")]
    inits = [const(np.array([0, 1, 2, 0, 0, 1, 2, 0], np.int64), "pads")]
    if opset >= 18:
        inits.append(const(np.array([1, 2], np.int64), "axes"))
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 10])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    lab = onnx_lab.open(m)
    r = lab.apply("sink_transposes")
    assert r.verify_passed is True and r.max_abs_err == 0
    assert "Transpose" not in {n.op_type for n in lab.model.graph}
    lab.save(tmp_path / "m.onnx")
    _fresh_equal(m, tmp_path / "m.onnx")
