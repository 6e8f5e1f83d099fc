"""Layer-by-layer comparison across fusions whose weights changed: a bug in a fused bias, a
fused model converted to float16, and a divergent node that reads a graph input. Each gave
a false alarm or the wrong node or cause."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


def _mlp() -> onnx.ModelProto:
    """Two MatMul+Add layers: onnxruntime's MatMulAddFusion makes each a Gemm stamped with
    the MatMul alone, reading the Add's bias."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="/fc1/MatMul"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="/fc1/Add"),
             helper.make_node("Relu", ["hb"], ["r"], name="/relu/Relu"),
             helper.make_node("MatMul", ["r", "w2"], ["o"], name="/fc2/MatMul"),
             helper.make_node("Add", ["o", "b2"], ["y"], name="/fc2/Add")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [2, 4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 6])],
                          [w("w1", 8, 16), w("b1", 16), w("w2", 16, 6), w("b2", 6)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def fused(tmp_path):
    src = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), src)
    lab = onnx_lab.open(src)
    lab.apply("ort:extended")
    assert set(lab.nodes.op_type) >= {"Gemm"}
    return src, lab.save(tmp_path / "opt" / "mlp.onnx")


def test_a_bug_in_a_bias_a_gemm_absorbed_is_found_at_its_add(fused, tmp_path):
    src, opt = fused
    m = onnx.load(opt)
    for t in m.graph.initializer:
        if t.name == "b2":
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 2, "b2"))
    bad = tmp_path / "bad.onnx"
    onnx.save(m, bad)
    c = onnx_lab.compare(src, bad)
    assert not c.passed
    # the MatMul's output against the Gemm's (MatMul + bias) reported the bias as its error
    row = c.alignment.set_index("tensor").loc["o"]
    assert not isinstance(row["cand_tensor"], str)
    fd = c.first_divergence
    assert fd["node_id"] == "/fc2/Add" and fd["cause"] == "weights"
    assert fd["constant"] == "b2"
    b2 = numpy_helper.to_array(next(t for t in _mlp().graph.initializer if t.name == "b2"))
    assert fd["max_abs"] == pytest.approx(float(np.abs(b2).max()), rel=1e-5)


def test_the_float16_version_of_a_fused_model_is_no_false_alarm(fused):
    src, opt = fused
    h = onnx_lab.to_fp16(onnx_lab.open(opt))
    c = onnx_lab.compare(src, h)
    assert c.passed and c.first_divergence is None
    assert c.layers.passed.astype(bool).all(), c.layers[~c.layers.passed.astype(bool)]


def _conv_bn() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"],
                              ["y"], name="bn")]
    g = helper.make_graph(nodes, "cbn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_fused_output_renamed_by_the_float16_conversion_is_not_paired_with_the_conv():
    # to_fp16 renames the fused Conv's output (y -> y__fp16, a Cast makes y): the structural
    # guess paired the reference's pre-BatchNormalization Conv output with it (max_abs ~1)
    lab = onnx_lab.open(_conv_bn())
    lab.apply("fuse_conv_bn")
    h = onnx_lab.to_fp16(lab)
    c = onnx_lab.compare(_conv_bn(), h)
    assert c.passed and c.first_divergence is None
    row = c.alignment.set_index("tensor").loc["c"]
    assert not isinstance(row["cand_tensor"], str)
    assert row["reason"].startswith("fused into candidate node 'conv'")


def test_a_divergent_node_reading_a_graph_input_is_computation_not_inputs():
    # a graph input is the same feed on both sides; it is never a row of the layers table
    def model(alpha):
        g = helper.make_graph(
            [helper.make_node("LeakyRelu", ["x"], ["l"], name="leaky", alpha=alpha),
             helper.make_node("Relu", ["l"], ["y"], name="relu")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    x = np.linspace(-2, 2, 16, dtype=np.float32)
    fd = onnx_lab.compare(model(0.1), model(-0.3), feeds={"x": x}).first_divergence
    assert fd["node_id"] == "leaky" and fd["cause"] == "computation"
    assert "its inputs agree" in fd["message"]


def test_a_dropped_bias_is_named_upstream_of_the_node_blamed_on_its_inputs():
    # the candidate lost the qkv bias Add (its Split reads the MatMul): the Split is another
    # computation (no counterpart), the Reshape after it was blamed on "inputs" and the
    # missing Add was named only in c.alignment
    def model(bias: bool):
        rng = np.random.default_rng(1)
        nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="/qkv/MatMul")]
        if bias:
            nodes.append(helper.make_node("Add", ["mm", "b"], ["qkv"], name="/qkv/Add"))
        nodes += [helper.make_node("Split", ["qkv" if bias else "mm"], ["q", "k"],
                                   name="/Split", axis=-1, num_outputs=2),
                  helper.make_node("Mul", ["q", "k"], ["p"], name="/Mul"),
                  helper.make_node("Relu", ["p"], ["y"], name="/Relu")]
        g = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
            [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w"),
             numpy_helper.from_array(np.full(16, 0.5, np.float32), "b")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])

    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    fd = onnx_lab.compare(model(True), model(False), feeds={"x": x}).first_divergence
    assert fd["node_id"] == "/Mul" and fd["cause"] == "inputs"
    assert fd["upstream"] == ["/qkv/Add"]
    assert "start at the reference's Add '/qkv/Add'" in fd["message"]
    assert "no counterpart in the candidate" in fd["message"]


def test_confirm_sees_a_weight_a_node_computes(tmp_path):
    # onnx's light models fill their weights with ConstantOfShape: the local check fed the
    # reference's weight to the candidate's node, so the bug vanished ("not confirmed") and
    # the repro printed max_abs 0
    def model(fill):
        shape = numpy_helper.from_array(np.array([8], np.int64), "shape")
        g = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ConstantOfShape", ["shape"], ["w"], name="fill",
                              value=numpy_helper.from_array(np.array([fill], np.float32))),
             helper.make_node("Mul", ["r", "w"], ["m"], name="mul"),
             helper.make_node("Neg", ["m"], ["y"], name="neg")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], [shape])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    x = np.linspace(0.5, 2, 8, dtype=np.float32)
    c = onnx_lab.compare(model(2.0), model(2.5), feeds={"x": x}, confirm=True)
    fd = c.first_divergence
    assert fd["node_id"] == "mul" and fd["cause"] == "weights"
    assert fd["confirmed"] is True and fd["local_max_abs"] == pytest.approx(1.0)
    from onnx_lab.numerics.confirm import local_check

    check = local_check(c)
    assert not check.passed


def _pad_then_depthwise() -> onnx.ModelProto:
    """Conv+Relu, a Pad, a strided depthwise Conv+Relu: tf2onnx's MobileNet blocks, whose
    Pads onnxruntime's PadFusion folds into the Conv after them (its ``pads``)."""
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("Pad", ["r1", "pads"], ["p"], name="pad"),
         helper.make_node("Conv", ["p", "w2"], ["c2"], name="dw", group=8, strides=[2, 2]),
         helper.make_node("Relu", ["c2"], ["y"], name="relu2")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal((8, 3, 1, 1)).astype(np.float32), "w1"),
         numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w2"),
         numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_pad_folded_into_the_conv_after_it_is_no_divergence():
    # the Pad was credited to the node before it, so its [1,8,17,17] output was paired with
    # that node's [1,8,16,16]: "4 out of tolerance" and a first divergence at the Pad
    # (max_abs nan, shape mismatch) on a model whose outputs agree exactly
    lab = onnx_lab.open(_pad_then_depthwise())
    assert lab.apply("ort:extended").verify_passed
    assert lab.origins["dw"] == ["dw", "pad", "relu2"]
    assert lab.origins["conv1"] == ["conv1", "relu1"]
    c = onnx_lab.compare(lab.original, lab)
    assert c.passed and c.first_divergence is None
    assert c.layers["passed"].astype(bool).all()


def test_a_guessed_pair_of_another_shape_is_no_counterpart():
    # the safety net under any provenance that credits a node to the wrong fused node: a
    # pair resting on provenance or structure whose shapes differ holds another quantity
    from onnx_lab.core.model import LabModel
    from onnx_lab.numerics.align import _shapes_differ

    m = onnx_lab.open(_pad_then_depthwise()).model
    assert _shapes_differ(m, "p", m, "r1").startswith("not the same quantity")
    assert _shapes_differ(m, "r1", m, "c1") is None
    assert isinstance(m, LabModel)


def test_a_wrong_weight_inside_a_fused_conv_is_blamed_on_the_weight(tmp_path):
    # Conv+Relu fused into onnxruntime's FusedConv, the Conv's weight then scaled by 1.1: the
    # Relu (the counterpart's output) was blamed on "inputs", the weight never named
    lab = onnx_lab.open(_pad_then_depthwise())
    lab.apply("ort:extended")
    m = lab.model.to_proto()
    for t in m.graph.initializer:
        if t.name == "w2":
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(1.1), "w2"))
    fd = onnx_lab.compare(_pad_then_depthwise(), m).first_divergence
    assert fd["node_id"] == "relu2" and fd["cause"] == "weights" and fd["constant"] == "w2"
    assert "its fused counterpart 'dw' (FusedConv) reads weight 'w2'" in fd["message"]


def test_a_clip_that_carries_its_inputs_error_is_not_said_to_compute_differently():
    # fp16 PP-OCR: the Clip's input passed by its own scale (max 55, allowed 0.06), the Clip
    # to 6 carried the same 0.08 and failed by its scale: "computes differently: its inputs
    # agree", although a Clip cannot amplify an error
    def model(bias: float) -> onnx.ModelProto:
        g = helper.make_graph(
            [helper.make_node("Add", ["x", "b"], ["a"], name="add"),
             helper.make_node("Clip", ["a", "lo", "hi"], ["y"], name="clip")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
            [numpy_helper.from_array(np.array(bias, np.float32), "b"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    x = {"x": np.linspace(0, 60, 64, dtype=np.float32)}
    c = onnx_lab.compare(model(0.0), model(0.05), feeds=x)
    layers = c.layers.set_index("tensor")
    assert layers.loc["a", "passed"] and not layers.loc["y", "passed"]
    fd = c.first_divergence
    assert fd["node_id"] == "clip" and fd["cause"] == "inputs"
    assert "by no more than its input 'a' does" in fd["message"]
    # a Clip that does compute differently (its bound changed) stays "computation"
    def clip6(hi):
        m = model(0.0)
        m.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.array(hi, np.float32), "hi"))
        return m
    fd = onnx_lab.compare(clip6(6.0), clip6(5.0), feeds=x).first_divergence
    assert fd["node_id"] == "clip" and fd["cause"] in ("computation", "weights")


def test_readers_of_a_weight_are_seen_through_the_exporters_identity_aliases():
    # the torch exporter deduplicates equal initializers: every LayerNorm of a random-init
    # BERT reads 'embeddings.LayerNorm.weight' through an Identity; the rule "only reference
    # nodes outside its provenance read this constant" stopped at the Identity and left every
    # fused SkipLayerNormalization uncompared (a planted gamma/beta swap blamed downstream)
    from onnx_lab.numerics.align import _readers_through_identity

    g = helper.make_graph(
        [helper.make_node("Identity", ["gamma"], ["gamma_alias"], name="alias"),
         helper.make_node("Mul", ["x", "gamma"], ["a"], name="first"),
         helper.make_node("Mul", ["a", "gamma_alias"], ["y"], name="second")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "gamma")])
    m = onnx_lab.open(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).model
    assert _readers_through_identity(m.index, "gamma") == {"first", "second"}


def _gain_model(bias1: float, constant_nodes: bool = False, typed: bool = False
                ) -> onnx.ModelProto:
    """t = x + [0, bias1], y = t · [0.01, 100]: an error in t's small channel passes by t's
    scale, and the gain of 100 makes it fail y's. ``constant_nodes``: the weights are held by
    Constant nodes (PaddlePaddle exports). ``typed``: t's type is declared (a quantizer's
    output declares what the export it read did not)."""
    b = numpy_helper.from_array(np.array([[0.0, bias1]], np.float32), "b")
    gain = numpy_helper.from_array(np.array([[0.01, 100.0]], np.float32), "g")
    consts = [helper.make_node("Constant", [], [t.name], name=f"{t.name}_const", value=t)
              for t in (b, gain)] if constant_nodes else []
    g = helper.make_graph(
        [*consts, helper.make_node("Add", ["x", "b"], ["t"], name="add"),
         helper.make_node("Mul", ["t", "g"], ["y"], name="mul")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])],
        [] if constant_nodes else [b, gain])
    if typed:
        g.value_info.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [4, 2]))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_unchanged_node_that_amplifies_its_inputs_error_is_not_said_to_compute_differently():
    # int8 PicoDet from a wheel: the BatchNormalization after a quantized Conv, byte-identical
    # in the candidate, was "computes differently: its inputs agree" (its input passed by its
    # own scale, its per-channel gain amplified the error), and repro of it showed max_abs 0
    model = _gain_model

    x = {"x": np.array([[100, 1], [90, 0.5], [80, 1], [100, 0.7]], np.float32)}
    c = onnx_lab.compare(model(0.0), model(0.05), feeds=x)
    layers = c.layers.set_index("tensor")
    assert layers.loc["t", "passed"] and not layers.loc["y", "passed"]
    fd = c.first_divergence
    assert fd["node_id"] == "mul" and fd["cause"] == "inputs" and fd["upstream"] == ["add"]
    assert "unchanged in the candidate" in fd["message"] and "at Add 'add'" in fd["message"]
    # the same with the weights in Constant nodes (the PicoDet is a PaddlePaddle export)
    fd = onnx_lab.compare(_gain_model(0.0, True), _gain_model(0.05, True, typed=True),
                          feeds=x).first_divergence
    assert fd["node_id"] == "mul" and fd["cause"] == "inputs"
    # confirm agrees: fed the reference's inputs, the Mul gives the reference's output
    fd = onnx_lab.compare(model(0.0), model(0.05), feeds=x, confirm=True).first_divergence
    assert fd["cause"] == "inputs" and fd["confirmed"] is False

    # a changed gain is the Mul's own difference
    def gain(v):
        m = model(0.0)
        m.graph.initializer[1].CopyFrom(numpy_helper.from_array(
            np.array([[0.01, v]], np.float32), "g"))
        return m
    fd = onnx_lab.compare(gain(100.0), gain(101.0), feeds=x).first_divergence
    assert fd["node_id"] == "mul" and fd["cause"] == "weights"


def test_repro_of_an_amplifying_node_says_it_reproduces_nothing(tmp_path, capsys):
    from onnx_lab.cli import main

    model = _gain_model

    onnx.save(model(0.0), tmp_path / "ref.onnx")
    onnx.save(model(0.05), tmp_path / "cand.onnx")
    np.savez(tmp_path / "x.npz", x=np.array([[100, 1], [90, 0.5], [80, 1], [100, 0.7]],
                                            np.float32))
    assert main(["repro", str(tmp_path / "ref.onnx"), str(tmp_path / "cand.onnx"),
                 str(tmp_path / "r"), "--feeds", str(tmp_path / "x.npz")]) == 0
    out = capsys.readouterr().out
    assert "cause: inputs" in out and "computes differently" not in out
    assert "mul agrees; the difference comes in through its inputs (it starts upstream, at " \
        "add), so this repro shows none" in out


def test_a_divergence_of_another_shape_says_so_not_max_abs_nan():
    def model(axis: int) -> onnx.ModelProto:
        g = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["y"], name="mean", axes=[axis])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    fd = onnx_lab.compare(model(1), model(2)).first_divergence
    assert fd["node_id"] == "mean" and fd["cause"] == "computation"
    assert "nan" not in fd["message"] and "another shape" in fd["message"]


def test_an_unchanged_looking_node_of_another_opset_or_fed_identical_inputs_computes():
    # Softmax(axis=1) means another computation at opset 11 than at 13, and its inputs agree
    # exactly: "amplifies its inputs' error (max_abs 0)" sent the user upstream for nothing
    def model(opset: int) -> onnx.ModelProto:
        g = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["s"], axis=1, name="sm"),
             helper.make_node("Identity", ["s"], ["y"], name="id")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                                 ir_version=8)

    fd = onnx_lab.compare(model(11), model(13)).first_divergence
    assert fd["node_id"] == "sm" and fd["cause"] == "computation"
    assert "computes differently" in fd["message"]
