from __future__ import annotations

import numpy as np
import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops

from onnx_lab.transforms.passes.fuse_reshapes import merge_squeeze, merge_unsqueeze


def test_reshape_chain_static():
    text = """g (float[2,3,4] x) => (float[4,6] y) {
        a = Reshape(x, s1)  b = Reshape(a, s2)  y = Relu(b) }"""
    m = model_from_text(text, {"s1": np.array([6, 4]), "s2": np.array([0, -1])})
    r = apply("fuse_reshapes", m)
    assert ops(r.model) == ["Reshape", "Relu"]
    node = r.model.index.node("Reshape_1")
    assert node.inputs[0].name == "x"
    assert list(node.inputs[1].const_value.numpy()) == [6, 4]
    assert r.provenance["Reshape_1"] == ["Reshape_0", "Reshape_1"]
    assert set(r.model.ir.graph.initializers) == {"s2"}  # s1 is gone, s2 updated in place
    assert_same_outputs(m, r.model)


def test_reshape_chain_symbolic():
    text = """g (float[N,3,4] x) => (float[N,12] y) {
        a = Reshape(x, s1)  b = Reshape(a, s2)  y = Relu(b) }"""
    m = model_from_text(text, {"s1": np.array([-1, 4]), "s2": np.array([-1, 12])})
    r = apply("fuse_reshapes", m)
    assert ops(r.model) == ["Reshape", "Relu"]
    assert_same_outputs(m, r.model, dims={"N": 3})


@pytest.mark.parametrize("first,second,pattern,left", [
    ("Unsqueeze(x, a1)", "Squeeze(a, a1)", "squeeze_cancel", ["Relu", "ReduceSum"]),
    ("Unsqueeze(x, a1)", "Unsqueeze(a, a2)", "unsqueeze_merge", ["Unsqueeze", "Relu", "ReduceSum"]),
])
def test_squeeze_chains(first, second, pattern, left):
    text = f"""g (float[2,3] x) => (float y) {{ a = {first}  b = {second}
        c = Relu(b)  y = ReduceSum(c) }}"""
    m = model_from_text(text, {"a1": np.array([0, -1]), "a2": np.array([1, 3])})
    r = apply("fuse_reshapes", m)
    assert [mid.split(":")[0] for mid in r.matches] == ["fuse_reshapes"]
    assert ops(r.model) == left
    assert_same_outputs(m, r.model)


def test_squeeze_merge_and_cancel():
    text = """g (float[1,2,1,3,1] x) => (float[2,3] y) {
        a = Squeeze(x, s1)  b = Squeeze(a, s2)  y = Relu(b) }"""
    m = model_from_text(text, {"s1": np.array([0]), "s2": np.array([1, -1])})
    r = apply("fuse_reshapes", m)
    assert ops(r.model) == ["Squeeze", "Relu"]
    assert_same_outputs(m, r.model)
    text = """g (float[2,1,3] x) => (float[2,1,3] y) {
        a = Squeeze(x, s1)  b = Unsqueeze(a, s1)  y = Relu(b) }"""
    m = model_from_text(text, {"s1": np.array([1])})
    r = apply("fuse_reshapes", m)
    assert ops(r.model) == ["Relu"]
    assert_same_outputs(m, r.model)


def test_merge_math():
    x = np.zeros((2, 3))
    a = np.expand_dims(np.expand_dims(x, (0, 3)), (1, 4))
    assert np.expand_dims(x, tuple(merge_unsqueeze([0, -1], [1, 4], 2))).shape == a.shape
    y = np.zeros((1, 2, 1, 3, 1))
    b = np.squeeze(np.squeeze(y, 0), (1, 3))
    assert np.squeeze(y, tuple(merge_squeeze([0], [1, -1], 5))).shape == b.shape


def test_no_match_and_mismatch():
    m = model_from_text("""g (float[2,3] x) => (float[2,3] y) { y = Relu(x) }""")
    r = apply("fuse_reshapes", m)
    assert r.modified is False
    assert r.reason == "no Reshape follows a Reshape, no Squeeze/Unsqueeze follows another"
    m = model_from_text("""g (float[1,2,3] x) => (float y) { a = Unsqueeze(x, a1)
        b = Squeeze(a, a2)  y = ReduceSum(b) }""", {"a1": np.array([3]), "a2": np.array([0])})
    r = apply("fuse_reshapes", m)
    assert r.modified is False
    assert r.reason == "Unsqueeze_0: the Squeeze removes other axes than the Unsqueeze added"


@pytest.mark.slow
def test_merge_properties():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=150, deadline=None)
    @given(st.data())
    def check(data):
        r = data.draw(st.integers(1, 4))
        k1 = data.draw(st.integers(1, 2))
        k2 = data.draw(st.integers(1, 2))
        a1 = data.draw(st.lists(st.integers(-(r + k1), r + k1 - 1), min_size=k1, max_size=k1,
                                unique_by=lambda a: a % (r + k1)))
        a2 = data.draw(st.lists(st.integers(-(r + k1 + k2), r + k1 + k2 - 1), min_size=k2,
                                max_size=k2, unique_by=lambda a: a % (r + k1 + k2)))
        x = np.zeros(tuple(range(2, 2 + r)))
        two = np.expand_dims(np.expand_dims(x, tuple(a1)), tuple(a2))
        assert np.expand_dims(x, tuple(merge_unsqueeze(a1, a2, r))).shape == two.shape
        # Squeeze: undo the two Unsqueezes in the other order.
        s1, s2 = a2, a1
        y = two
        assert np.squeeze(np.squeeze(y, tuple(s1)), tuple(s2)).shape == x.shape
        assert np.squeeze(y, tuple(merge_squeeze(s1, s2, y.ndim))).shape == x.shape

    check()
