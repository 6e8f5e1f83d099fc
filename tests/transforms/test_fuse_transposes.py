from __future__ import annotations

import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, sample

from onnx_lab.errors import UnknownNameError
from onnx_lab.transforms.passes.fuse_transposes import compose


def test_convnet_pair_cancels():
    before = sample("convnet")
    r = apply("fuse_transposes", before)
    assert sorted(r.removed) == ["/block2/to_nchw/Transpose", "/block2/to_nhwc/Transpose"]
    assert "Transpose" not in ops(r.model) and r.nodes_after == r.nodes_before - 2
    assert_same_outputs(before, r.model)


def test_pair_composes():
    text = """g (float[2,3,4,5] x) => (float[5,2,4,3] y) {
        t = Transpose <perm=[0,2,3,1]> (x)
        y = Transpose <perm=[2,0,1,3]> (t)
    }"""
    m = model_from_text(text)
    r = apply("fuse_transposes", m)
    assert ops(r.model) == ["Transpose"]
    node = r.model.index.node("Transpose_1")
    assert list(node.attributes["perm"].as_ints()) == compose([0, 2, 3, 1], [2, 0, 1, 3])
    assert r.provenance == {"Transpose_1": ["Transpose_0", "Transpose_1"]}
    assert_same_outputs(m, r.model)


def test_default_perms_cancel():
    text = """g (float[2,3,4] x) => (float[2,3,4] y) {
        t = Transpose(x)  u = Transpose(t)  y = Relu(u) }"""
    m = model_from_text(text)
    r = apply("fuse_transposes", m)
    assert ops(r.model) == ["Relu"]
    assert_same_outputs(m, r.model)


def test_input_to_output_pair_and_no_match():
    text = """g (float[2,3] x) => (float[2,3] y) {
        t = Transpose <perm=[1,0]> (x)  y = Transpose <perm=[1,0]> (t) }"""
    r = apply("fuse_transposes", model_from_text(text))
    assert r.modified is False
    assert r.reason.startswith("Transpose_0: it copies graph input 'x' to graph output 'y'")
    m = model_from_text("""g (float[2,3] x) => (float[3,2] y) { y = Transpose(x) }""")
    r = apply("fuse_transposes", m)
    assert r.reason == "no Transpose directly follows another Transpose"
    with pytest.raises(UnknownNameError):
        apply("fuse_transposes", m, matches=["fuse_transposes:Transpose_0"])


def test_selective():
    text = """g (float[2,3,4] x) => (float[2,3,4] y) {
        a = Transpose <perm=[1,0,2]> (x)  b = Transpose <perm=[1,0,2]> (a)  c = Relu(b)
        d = Transpose <perm=[2,1,0]> (c)  e = Transpose <perm=[0,2,1]> (d)
        y = Transpose <perm=[2,0,1]> (e) }"""
    m = model_from_text(text)
    r = apply("fuse_transposes", m, matches=["fuse_transposes:Transpose_3"])
    assert ops(r.model) == ["Transpose", "Transpose", "Relu", "Transpose", "Transpose"]
    assert r.provenance == {"Transpose_4": ["Transpose_3", "Transpose_4"]}
    assert_same_outputs(m, r.model)
    r = apply("fuse_transposes", m)
    assert ops(r.model) == ["Relu", "Transpose", "Transpose"]
    assert_same_outputs(m, r.model)


@pytest.mark.slow
def test_compose_property():
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=100, deadline=None)
    @given(st.integers(1, 5).flatmap(lambda r: st.tuples(st.permutations(range(r)),
                                                         st.permutations(range(r)))))
    def check(perms):
        p1, p2 = perms
        x = np.arange(int(np.prod(range(2, 2 + len(p1))))).reshape(tuple(range(2, 2 + len(p1))))
        np.testing.assert_array_equal(np.transpose(np.transpose(x, p1), p2),
                                      np.transpose(x, compose(list(p1), list(p2))))

    check()
