from __future__ import annotations

import numpy as np
import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, rand, sample
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.errors import PassError, UnknownNameError
from onnx_lab.transforms.base import get_pass, origins


def _bn_inits(c: int, prefix: str = "bn") -> dict[str, np.ndarray]:
    return {f"{prefix}_g": rand(c, low=0.5, seed=1), f"{prefix}_b": rand(c, seed=2, scale=0.1),
            f"{prefix}_m": rand(c, seed=3, scale=0.1), f"{prefix}_v": rand(c, low=0.5, seed=4)}


def test_convnet_structure_numbers_provenance():
    before = sample("convnet")
    r = apply("fuse_conv_bn", before)
    assert r.modified and r.nodes_after == r.nodes_before - 2
    assert sorted(r.removed) == ["/block1/bn/BatchNormalization", "/stem/bn/BatchNormalization"]
    assert ops(r.model).count("BatchNormalization") == 1  # block2's BN follows an Add
    assert r.provenance["/stem/conv/Conv"] == ["/stem/conv/Conv", "/stem/bn/BatchNormalization"]
    assert "/stem/relu/Relu" in r.model.index.entries  # the Relu stays
    assert r.matches == ["fuse_conv_bn:/stem/conv/Conv", "fuse_conv_bn:/block1/conv/Conv"]
    assert_same_outputs(before, r.model)
    # block1's Conv had no bias: the fold added one.
    conv = r.model.index.node("/block1/conv/Conv")
    assert len(conv.inputs) == 3 and conv.inputs[2].const_value is not None
    assert "block1.bn.weight" not in r.model.ir.graph.initializers


def test_patterns_conv_bn_relu():
    p = get_pass("fuse_conv_bn")
    found = p.find(sample("convnet"))
    assert [m.pattern for m in found] == ["conv_bn_relu", "conv_bn_relu"]
    assert found[0].node_ids == ["/stem/conv/Conv", "/stem/bn/BatchNormalization",
                                 "/stem/relu/Relu"]


def test_selective_and_unknown_match():
    before = sample("convnet")
    r = apply("fuse_conv_bn", before, matches=["fuse_conv_bn:/block1/conv/Conv"])
    assert r.removed == ["/block1/bn/BatchNormalization"]
    assert "/stem/bn/BatchNormalization" in r.model.index.entries
    assert_same_outputs(before, r.model)
    with pytest.raises(UnknownNameError, match="fuse_conv_bn:/stem/conv/Con"):
        apply("fuse_conv_bn", before, matches=["fuse_conv_bn:/stem/conv/Con"])


def test_bad_params():
    with pytest.raises(PassError, match="no parameter 'alpha'"):
        get_pass("fuse_conv_bn", alpha=1)
    with pytest.raises(UnknownNameError, match="fuse_conv_bm"):
        get_pass("fuse_conv_bm")


def test_no_match_reason():
    m = model_from_text("""g (float[1,2,4,4] x) => (float[1,2,4,4] y) { y = Relu(x) }""")
    r = apply("fuse_conv_bn", m)
    assert r.modified is False and r.reason == "no BatchNormalization directly follows a Conv"
    assert r.model is m


def test_weights_listed_as_inputs_are_named_in_the_reason():
    # torch.onnx.export(keep_initializers_as_inputs=True): "its weight is not a constant" read
    # as a contradiction for a weight stored in the file.
    text = """g (float[1,3,4,4] x, float[2,3,1,1] w) => (float[1,2,4,4] y) {
        c = Conv(x, w)  y = BatchNormalization(c, bn_g, bn_b, bn_m, bn_v) }"""
    m = model_from_text(text, {"w": rand(2, 3, 1, 1), **_bn_inits(2)})
    r = apply("fuse_conv_bn", m)
    assert r.modified is False
    assert "its weight 'w' is also a graph input" in r.reason and "initializer_input" in r.reason


def test_conv_output_used_elsewhere_is_skipped():
    text = """g (float[1,2,5,5] x) => (float[1,3,5,5] y, float[1,3,5,5] z) {
        c = Conv <pads=[1,1,1,1]> (x, w)
        y = BatchNormalization (c, bn_g, bn_b, bn_m, bn_v)
        z = Relu(c)
    }"""
    m = model_from_text(text, {"w": rand(3, 2, 3, 3), **_bn_inits(3)})
    r = apply("fuse_conv_bn", m)
    assert r.modified is False
    assert "also read by" in r.reason and "Relu" in r.reason


@pytest.mark.parametrize("group,bias", [(1, True), (2, False), (4, True)])
def test_grouped_conv_and_missing_bias(group, bias):
    cin, cout = 4, 8
    args = "x, w, cb" if bias else "x, w"
    text = f"""g (float[1,{cin},6,6] x) => (float[1,{cout},6,6] y) {{
        c = Conv <pads=[1,1,1,1], group={group}> ({args})
        y = BatchNormalization <epsilon=0.001> (c, bn_g, bn_b, bn_m, bn_v)
    }}"""
    inits = {"w": rand(cout, cin // group, 3, 3), **_bn_inits(cout)}
    if bias:
        inits["cb"] = rand(cout, seed=9)
    m = model_from_text(text, inits)
    r = apply("fuse_conv_bn", m)
    assert ops(r.model) == ["Conv"]
    assert r.model.ir.graph.outputs[0].name == "y"
    assert_same_outputs(m, r.model)


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_bn(group):
    cin, cout = 4, 6
    text = f"""g (float[1,{cin},5,5] x) => (float[1,{cout},10,10] y) {{
        c = ConvTranspose <strides=[2,2], kernel_shape=[2,2], group={group}> (x, w, cb)
        y = BatchNormalization (c, bn_g, bn_b, bn_m, bn_v)
    }}"""
    m = model_from_text(text, {"w": rand(cin, cout // group, 2, 2), "cb": rand(cout, seed=5),
                               **_bn_inits(cout)})
    r = apply("fuse_conv_bn", m)
    assert ops(r.model) == ["ConvTranspose"]
    assert r.provenance == {"ConvTranspose_0": ["ConvTranspose_0", "BatchNormalization_1"]}
    assert_same_outputs(m, r.model)


def _paddle_style() -> onnx_lab.Lab:
    """Weights in Constant nodes, as PaddlePaddle exports them."""
    def const(name, arr):
        return helper.make_node("Constant", [], [name], name=f"const_{name}",
                                value=numpy_helper.from_array(arr, name))

    nodes = [const("w", rand(4, 3, 3, 3)), const("g", rand(4, low=0.5)),
             const("b", rand(4, seed=1)), const("m", rand(4, seed=2, scale=0.1)),
             const("v", rand(4, low=0.5, seed=3)),
             const("tw", rand(4, 2, 2, 2, seed=4)), const("g2", rand(2, low=0.5, seed=5)),
             const("b2", rand(2, seed=6)), const("m2", rand(2, seed=7)),
             const("v2", rand(2, low=0.5, seed=8)),
             helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["h"], name="bn"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("ConvTranspose", ["r", "tw"], ["t"], name="deconv",
                              strides=[2, 2]),
             helper.make_node("BatchNormalization", ["t", "g2", "b2", "m2", "v2"], ["y"],
                              name="bn2")]
    f = onnx_lab.samples  # noqa: F841 - keep the import used for clarity
    from onnx import TensorProto
    graph = helper.make_graph(nodes, "paddle", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 2, 16, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx_lab.open(model)


def test_paddle_style_constant_weights():
    lab = _paddle_style()
    r = apply("fuse_conv_bn", lab.model)
    assert r.matches == ["fuse_conv_bn:conv", "fuse_conv_bn:deconv"]
    assert ops(r.model).count("BatchNormalization") == 0
    # The BN parameter Constants and the old weight Constants are gone.
    assert ops(r.model).count("Constant") == 0
    assert set(r.removed) >= {"bn", "bn2", "const_w", "const_g"}
    assert_same_outputs(lab.model, r.model)


def test_origins_compose_over_two_passes():
    before = sample("convnet")
    r1 = apply("fuse_conv_add_bias", before)
    r2 = apply("fuse_conv_bn", r1.model)
    assert "fuse_conv_bn:/block2/conv/Conv" in r2.matches
    assert origins(r2.model)["/block2/conv/Conv"] == [
        "/block2/conv/Conv", "/block2/bias/Add", "/block2/bn/BatchNormalization"]
    assert r2.provenance["/block2/conv/Conv"] == ["/block2/conv/Conv",
                                                  "/block2/bn/BatchNormalization"]
    assert_same_outputs(before, r2.model)


def test_bn_with_two_readers_folds_and_training_bn_is_skipped():
    text = """g (float[1,2,5,5] x) => (float[1,3,5,5] y, float[1,3,5,5] z) {
        c = Conv <pads=[1,1,1,1]> (x, w)
        h = BatchNormalization (c, bn_g, bn_b, bn_m, bn_v)
        y = Relu(h)
        z = Sigmoid(h)
    }"""
    m = model_from_text(text, {"w": rand(3, 2, 3, 3), **_bn_inits(3)})
    r = apply("fuse_conv_bn", m)
    assert ops(r.model) == ["Conv", "Relu", "Sigmoid"]
    assert_same_outputs(m, r.model)
    text = """g (float[1,2,5,5] x) => (float[1,3,5,5] y, float[3] rm, float[3] rv) {
        c = Conv <pads=[1,1,1,1]> (x, w)
        y, rm, rv = BatchNormalization <training_mode=1> (c, bn_g, bn_b, bn_m, bn_v)
    }"""
    r = apply("fuse_conv_bn", model_from_text(text, {"w": rand(3, 2, 3, 3), **_bn_inits(3)}))
    assert r.modified is False
    assert r.reason == "Conv_0: BatchNormalization_1 runs in training mode"


def test_inside_an_if_body_with_outer_weights():
    text = """g (bool c, float[1,2,5,5] x) => (float[1,3,5,5] y) {
        y = If (c) <then_branch = t () => (float[1,3,5,5] a) {
                        h = Conv <pads=[1,1,1,1]> (x, w)
                        a = BatchNormalization (h, bn_g, bn_b, bn_m, bn_v) },
                    else_branch = e () => (float[1,3,5,5] b) {
                        b = Conv <pads=[1,1,1,1]> (x, w) }>
    }"""
    m = model_from_text(text, {"w": rand(3, 2, 3, 3), **_bn_inits(3)})
    r = apply("fuse_conv_bn", m)
    assert r.removed == ["If_0/then_branch/BatchNormalization_1"]
    # w is still read by the else-branch Conv, so the then-branch Conv got its own copy.
    assert "w" in r.model.ir.graph.initializers
    import numpy as np

    from onnx_lab.runtime.capture import run
    for c in (True, False):
        feeds = {"c": np.array(c), "x": rand(1, 2, 5, 5, seed=11)}
        np.testing.assert_allclose(run(r.model, feeds)["y"], run(m, feeds)["y"], atol=1e-5,
                                   rtol=1e-4)


def test_an_unknown_node_in_origins_is_an_unknown_name_error():
    # lab.origins["nosuch"] raised a bare KeyError
    lab = onnx_lab.open("sample:convnet")
    lab.apply("fuse_conv_bn")
    assert lab.origins["/stem/conv/Conv"] == ["/stem/conv/Conv", "/stem/bn/BatchNormalization"]
    with pytest.raises(UnknownNameError, match="Close matches: '/stem/conv/Conv'"):
        lab.origins["/stem/conv/Cnv"]
