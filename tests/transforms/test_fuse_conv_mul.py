"""fuse_conv_mul: tf2onnx writes a Keras BatchNormalization after a Conv as Mul + Add of
per-channel constants; the Mul folds into the weights, the Add into the bias."""

from __future__ import annotations

import numpy as np
import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, rand

import onnx_lab


@pytest.mark.parametrize("shape", [(1, 4, 1, 1), (4, 1, 1), (1,), ()])
def test_per_channel_scales_with_bias(shape):
    text = """g (float[1,2,5,5] x) => (float[1,4,5,5] y) {
        c = Conv <pads=[1,1,1,1]> (x, w, b)
        y = Mul(k, c)
    }"""
    m = model_from_text(text, {"w": rand(4, 2, 3, 3), "b": rand(4, seed=1),
                               "k": rand(*shape, seed=2) if shape else rand(1, seed=2)[0]})
    r = apply("fuse_conv_mul", m)
    assert ops(r.model) == ["Conv"] and r.model.ir.graph.outputs[0].name == "y"
    assert r.provenance == {"Conv_0": ["Conv_0", "Mul_1"]}
    assert_same_outputs(m, r.model)


def test_the_tf2onnx_batchnorm_pair_becomes_one_conv_in_the_safe_preset(tmp_path):
    # Conv -> Mul(scale) -> Add(shift) -> Relu, NHWC Transposes around it as tf2onnx writes
    text = """g (float[1,6,6,3] x) => (float[1,6,6,4] y) {
        t = Transpose <perm=[0,3,1,2]> (x)
        c = Conv <pads=[1,1,1,1], group=1> (t, w)
        s = Mul(c, scale)
        a = Add(s, shift)
        r = Relu(a)
        y = Transpose <perm=[0,2,3,1]> (r)
    }"""
    m = model_from_text(text, {"w": rand(4, 3, 3, 3), "scale": rand(1, 4, 1, 1, seed=4),
                               "shift": rand(1, 4, 1, 1, seed=5)})
    lab = onnx_lab.open(m)
    results = lab.apply_preset("safe")
    assert all(r.verify_passed is not False for r in results)
    assert [r.name for r in results if r.modified] == ["fuse_conv_mul", "fuse_conv_add_bias"]
    assert ops(lab.model) == ["Transpose", "Conv", "Relu", "Transpose"]
    assert lab.origins["Conv_1"] == ["Conv_1", "Mul_2", "Add_3"]
    import onnxruntime as ort

    out = lab.save(tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal((1, 6, 6, 3)).astype(np.float32)
    want = ort.InferenceSession(m.to_proto().SerializeToString(),
                                providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got.run(None, {"x": x})[0], want.run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_conv_transpose_groups_scale_their_own_channels():
    text = """g (float[1,4,3,3] x) => (float[1,6,5,5] y) {
        c = ConvTranspose <group=2> (x, w, b)
        y = Mul(c, k)
    }"""
    m = model_from_text(text, {"w": rand(4, 3, 3, 3), "b": rand(6, seed=1),
                               "k": rand(1, 6, 1, 1, seed=2)})
    r = apply("fuse_conv_mul", m)
    assert ops(r.model) == ["ConvTranspose"]
    assert_same_outputs(m, r.model)


@pytest.mark.parametrize("text, reason", [
    ("""g (float[1,2,5,5] x) => (float[1,5,5,5] y) {
        c = Conv <pads=[1,1,1,1]> (x, w)
        y = Mul(c, k)
    }""", "Conv_0: Mul_1 multiplies by a constant of shape [5], not one value per channel "
          "(use [1, C, 1, 1])"),
    ("""g (float[1,2,5,5] x) => (float[1,5,5,5] y, float[1,5,5,5] z) {
        c = Conv <pads=[1,1,1,1]> (x, w)
        y = Mul(c, k)
        z = Relu(c)
    }""", None),
])
def test_what_cannot_fold_says_why(text, reason):
    m = model_from_text(text, {"w": rand(5, 2, 3, 3), "k": rand(5, seed=3)
                               if reason else rand(1, 5, 1, 1, seed=3)})
    r = apply("fuse_conv_mul", m)
    assert r.modified is False
    if reason:
        assert r.reason == reason
    else:
        assert "Conv_0" in r.reason and "read" in r.reason
