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


def _fresh_equal(original: onnx.ModelProto, path, exact: bool = True) -> None:
    x = np.random.default_rng(1).standard_normal(
        [d.dim_value for d in original.graph.input[0].type.tensor_type.shape.dim]
    ).astype(np.float32)
    a = ort.InferenceSession(original.SerializeToString()).run(None, {"x": x})
    b = ort.InferenceSession(str(path)).run(None, {"x": x})
    assert len(a) == len(b)
    for p, q in zip(a, b):
        assert p.shape == q.shape and (np.array_equal(p, q) if exact else
                                       np.allclose(p, q, rtol=1e-5, atol=1e-6))


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
    # a ReduceMean adds in another order once its axes move: it joins on request only
    assert not lab.apply("sink_transposes").modified  # (no Transpose would go without it)
    r = lab.apply("sink_transposes", reorder_sums=True)
    assert r.verify_passed is True and r.max_abs_err <= 1e-6
    assert "Transpose" not in {n.op_type for n in lab.model.graph}
    lab.save(tmp_path / "m.onnx")
    _fresh_equal(m, tmp_path / "m.onnx", exact=False)


def _graph(nodes, inputs, outputs, inits=(), opset=13) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    return helper.make_model(
        helper.make_graph(nodes, "g", [vi(n, t, s) for n, t, s in inputs],
                          [vi(n, t, s) for n, t, s in outputs], list(inits)),
        opset_imports=[helper.make_opsetid("", opset)])


F = TensorProto.FLOAT


def _check(m: onnx.ModelProto, tmp_path, feeds: dict) -> onnx_lab.Lab:
    lab = onnx_lab.open(m)
    r = lab.apply("sink_transposes")
    assert r.modified and r.verify_passed is True, r.verification
    lab.save(tmp_path / "m.onnx")
    a = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    b = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, feeds)
    for p, q in zip(a, b):
        assert p.shape == q.shape and np.array_equal(p, q)
    return lab


def test_an_exit_that_keeps_the_tensors_shape_is_compared_as_itself(tmp_path):
    # C == H == W: the region's tensor, renamed to the exit's output, paired by provenance
    # with the old NHWC tensor of the same shape: a false failure of a correct rewrite
    m = _graph([helper.make_node("Transpose", ["x"], ["t"], perm=NHWC, name="t"),
                helper.make_node("Relu", ["t"], ["r"], name="r"),
                helper.make_node("Transpose", ["r"], ["u"], perm=NCHW, name="u"),
                helper.make_node("Neg", ["u"], ["y"], name="n")],
               [("x", F, [2, 4, 4, 4])], [("y", F, [2, 4, 4, 4])])
    x = np.random.default_rng(0).standard_normal((2, 4, 4, 4)).astype(np.float32)
    _check(m, tmp_path, {"x": x})


def test_two_inverse_transposes_that_are_graph_outputs(tmp_path):
    # the first bypass made the region tensor a graph output, the second was refused and
    # its Transpose kept, reading the tensor in the new layout
    m = _graph([helper.make_node("Transpose", ["x"], ["t"], perm=NHWC, name="t"),
                helper.make_node("Relu", ["t"], ["r"], name="r"),
                helper.make_node("Transpose", ["r"], ["y"], perm=NCHW, name="e1"),
                helper.make_node("Transpose", ["r"], ["y2"], perm=NCHW, name="e2")],
               [("x", F, [2, 3, 4, 5])], [("y", F, [2, 3, 4, 5]), ("y2", F, [2, 3, 4, 5])])
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    lab = _check(m, tmp_path, {"x": x})
    assert "Transpose" not in {n.op_type for n in lab.model.graph}


def test_an_inverse_transpose_inside_a_body_is_no_exit(tmp_path):
    # a branch's Transpose back, reading the region from the outer graph, was taken for an
    # exit: it stayed, read the new layout, and the branch (not taken by the seeded sample)
    # gave another answer with verify_passed=True
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Transpose", ["r"], ["ty"], perm=NCHW,
                                                 name="in_then")], "then", [],
                               [vi("ty", F, [1, 4, 5, 6])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["ey"], name="in_else")],
                               "else", [], [vi("ey", F, [1, 4, 5, 6])])
    m = _graph([helper.make_node("Transpose", ["x"], ["xt"], perm=NHWC, name="t_in"),
                helper.make_node("Relu", ["xt"], ["r"], name="relu"),
                helper.make_node("Transpose", ["r"], ["y1"], perm=NCHW, name="t_out"),
                helper.make_node("If", ["c"], ["y2"], then_branch=then_g, else_branch=else_g,
                                 name="branch")],
               [("x", F, [1, 4, 5, 6]), ("c", TensorProto.BOOL, [])],
               [("y1", F, [1, 4, 5, 6]), ("y2", F, [1, 4, 5, 6])])
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 6)).astype(np.float32)
    for c in (True, False):
        _check(m, tmp_path, {"x": x, "c": np.array(c)})


def test_an_empty_constant_keeps_the_region_out():
    # a [0] constant broadcasts to an empty tensor, not as a scalar: it was left as it was
    m = _graph([helper.make_node("Transpose", ["x"], ["t"], perm=NHWC, name="t"),
                helper.make_node("Add", ["t", "e"], ["a"], name="a"),
                helper.make_node("Transpose", ["a"], ["y"], perm=NCHW, name="u")],
               [("x", F, [1, 2, 3, 1])], [("y", F, None)],
               [numpy_helper.from_array(np.zeros(0, np.float32), "e")])
    assert not onnx_lab.open(m).apply("sink_transposes").modified


def test_an_exact_reduction_joins_by_default_and_a_cancelling_sum_stays_out(tmp_path):
    # x + ReduceSum(x) over 112 x 112: summed in another order, an output that nearly cancels
    # differed by 3e-4, beyond the per-element rule (a false alarm of a correct rewrite)
    def model(op: str) -> onnx.ModelProto:
        return _graph([helper.make_node("Transpose", ["x"], ["t"], perm=NHWC, name="t_in"),
                       helper.make_node(op, ["t"], ["s"], axes=[1, 2], keepdims=1, name="red"),
                       helper.make_node("Sub", ["t", "s"], ["d"], name="sub"),
                       helper.make_node("Transpose", ["d"], ["y"], perm=NCHW, name="t_out")],
                      [("x", F, [1, 4, 6, 8])], [("y", F, [1, 4, 6, 8])])

    x = np.random.default_rng(0).standard_normal((1, 4, 6, 8)).astype(np.float32)
    lab = _check(model("ReduceMax"), tmp_path, {"x": x})
    assert "Transpose" not in {n.op_type for n in lab.model.graph}
    r = onnx_lab.open(model("ReduceSum")).apply("sink_transposes")
    assert not r.modified


def test_region_tensors_are_compared_between_two_versions_after_the_sink():
    # the layout marks stay in the model: they kept the region's tensors out of every later
    # comparison; marked alike on both sides, they are compared (a planted scale is found
    # at its own tensor, not only at the output)
    lab = onnx_lab.open(_hardswish_region((1, 4, 4, 4)))
    lab.apply("sink_transposes")
    after = lab.model
    lab.scale_initializer("s_t", 1.1)
    c = onnx_lab.compare(after, lab.model)
    assert not c.passed and c.first_divergence["tensor"] == "m_sunk"
