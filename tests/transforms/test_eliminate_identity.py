from __future__ import annotations

from _passkit import apply, assert_same_outputs, model_from_text, ops, sample

from onnx_lab.transforms.base import origins


def test_convnet_identity():
    before = sample("convnet")
    r = apply("eliminate_identity", before)
    assert r.removed == ["/stem/identity/Identity"] and r.provenance == {}
    assert "Identity" not in ops(r.model)
    assert r.nodes_after == r.nodes_before - 1
    assert_same_outputs(before, r.model)
    assert origins(r.model)["/dead/Mul"] == ["/dead/Mul"]


def test_identity_feeding_graph_output_keeps_the_name():
    m = model_from_text("""g (float[2] x) => (float[2] y) { h = Relu(x)  y = Identity(h) }""")
    r = apply("eliminate_identity", m)
    assert ops(r.model) == ["Relu"] and r.model.ir.graph.outputs[0].name == "y"
    assert_same_outputs(m, r.model)


def test_input_to_output_identity_is_kept():
    m = model_from_text("""g (float[2] x) => (float[2] y) { y = Identity(x) }""")
    r = apply("eliminate_identity", m)
    assert r.modified is False
    assert r.reason == ("Identity_0: it copies graph input 'x' to graph output 'y'; both names "
                        "must survive")


def test_no_identity():
    m = model_from_text("""g (float[2] x) => (float[2] y) { y = Relu(x) }""")
    r = apply("eliminate_identity", m)
    assert r.modified is False and r.reason == "no Identity node"


def test_inside_bodies():
    text = """g (bool c, float[2] x) => (float[2] y) {
        y = If (c) <then_branch = t () => (float[2] a) { i = Identity(x)  a = Neg(i) },
                    else_branch = e () => (float[2] b) { b = Identity(x) }>
    }"""
    m = model_from_text(text)
    r = apply("eliminate_identity", m)
    # The then-body Identity goes; the else-body one returns an outer value and stays.
    assert r.removed == ["If_0/then_branch/Identity_0"]
    assert any("else_branch" in s for s in r.notes)
    import numpy as np

    from onnx_lab.runtime.capture import run
    for c in (True, False):
        feeds = {"c": np.array(c), "x": np.array([1.0, -2.0], dtype=np.float32)}
        np.testing.assert_array_equal(run(m, feeds)["y"], run(r.model, feeds)["y"])


def test_selective():
    text = """g (float[2] x) => (float[2] y) {
        a = Identity(x)  b = Relu(a)  c = Identity(b)  y = Neg(c) }"""
    m = model_from_text(text)
    r = apply("eliminate_identity", m, matches=["eliminate_identity:Identity_2"])
    assert r.removed == ["Identity_2"] and ops(r.model) == ["Identity", "Relu", "Neg"]
    assert_same_outputs(m, r.model)
    r = apply("eliminate_identity", m, matches=[])
    assert r.modified is False and r.reason == "no match selected"
