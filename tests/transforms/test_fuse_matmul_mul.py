"""fuse_matmul_mul: tf2onnx writes a Keras BatchNormalization after a Dense layer as a Mul and
an Add along the last axis; the Mul folds into the MatMul's weight columns."""

from __future__ import annotations

import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, rand


@pytest.mark.parametrize("shape", [(6,), (1, 6), (1, 1, 6), (1,), ()])
def test_per_column_scales(shape):
    text = """g (float[2,3,4] x) => (float[2,3,6] y) {
        m = MatMul(x, w)
        s = Mul(m, k)
        y = Add(s, b)
    }"""
    m = model_from_text(text, {"w": rand(4, 6), "b": rand(6, seed=1),
                               "k": rand(*shape, seed=2) if shape else rand(1, seed=2)[0]})
    r = apply("fuse_matmul_mul", m)
    assert ops(r.model) == ["MatMul", "Add"]
    assert r.provenance == {"MatMul_0": ["MatMul_0", "Mul_1"]}
    assert_same_outputs(m, r.model)


@pytest.mark.parametrize("shape, why", [
    ((3, 1), "not one value per output column"),            # scales rows, not columns
    ((1, 1, 1, 6), "not one value per output column"),      # would make the output 4-D
])
def test_other_broadcasts_are_left_with_a_reason(shape, why):
    text = """g (float[2,3,4] x) => (float[2,3,6] y) { m = MatMul(x, w)  y = Mul(m, k) }"""
    m = model_from_text(text.replace("float[2,3,6] y", "float y"),
                        {"w": rand(4, 6), "k": rand(*shape, seed=3)})
    r = apply("fuse_matmul_mul", m)
    assert not r.modified and why in r.reason


def test_a_weight_read_elsewhere_gets_a_copy():
    text = """g (float[2,4] x) => (float[2,6] y, float[2,6] z) {
        m = MatMul(x, w)
        y = Mul(m, k)
        z = MatMul(x, w)
    }"""
    m = model_from_text(text, {"w": rand(4, 6), "k": rand(6, seed=4)})
    r = apply("fuse_matmul_mul", m)
    assert ops(r.model) == ["MatMul", "MatMul"]
    assert_same_outputs(m, r.model)
