from __future__ import annotations

import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, rand, sample

from onnx_lab.errors import UnknownNameError


def test_convnet_block2():
    before = sample("convnet")
    r = apply("fuse_conv_add_bias", before)
    assert r.removed == ["/block2/bias/Add"]
    assert r.provenance == {"/block2/conv/Conv": ["/block2/conv/Conv", "/block2/bias/Add"]}
    assert "block2.bias" not in r.model.ir.graph.initializers
    conv = r.model.index.node("/block2/conv/Conv")
    assert conv.inputs[2].const_value.shape.numpy() == (16,)
    assert_same_outputs(before, r.model)


@pytest.mark.parametrize("shape", [(1, 4, 1, 1), (4, 1, 1), (1,), ()])
def test_per_channel_shapes_with_bias(shape):
    text = """g (float[1,2,5,5] x) => (float[1,4,5,5] y) {
        c = Conv <pads=[1,1,1,1]> (x, w, b)
        y = Add(k, c)
    }"""
    m = model_from_text(text, {"w": rand(4, 2, 3, 3), "b": rand(4, seed=1),
                               "k": rand(*shape, seed=2) if shape else rand(1, seed=2)[0]})
    r = apply("fuse_conv_add_bias", m)
    assert ops(r.model) == ["Conv"] and r.model.ir.graph.outputs[0].name == "y"
    assert_same_outputs(m, r.model)


def test_last_axis_vector_is_not_per_channel():
    text = """g (float[1,2,5,5] x) => (float[1,5,5,5] y) {
        c = Conv <pads=[1,1,1,1]> (x, w)
        y = Add(c, k)
    }"""
    m = model_from_text(text, {"w": rand(5, 2, 3, 3), "k": rand(5, seed=3)})
    r = apply("fuse_conv_add_bias", m)
    assert r.modified is False
    assert r.reason == ("Conv_0: Add_1 adds a constant of shape [5], not one value per "
                        "channel (use [1, C, 1, 1])")


def test_no_match_and_selection():
    m = model_from_text("""g (float[1,2] x) => (float[1,2] y) { y = Add(x, x) }""")
    r = apply("fuse_conv_add_bias", m)
    assert r.modified is False
    assert r.reason == "no Add of a per-channel constant directly follows a Conv"
    with pytest.raises(UnknownNameError):
        apply("fuse_conv_add_bias", m, matches=["fuse_conv_add_bias:nope"])
    before = sample("convnet")
    r = apply("fuse_conv_add_bias", before, matches=["fuse_conv_add_bias:/block2/conv/Conv"])
    assert r.modified and r.matches == ["fuse_conv_add_bias:/block2/conv/Conv"]
