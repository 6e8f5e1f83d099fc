from __future__ import annotations

from _passkit import apply, assert_same_outputs, model_from_text, rand

from onnx_lab.transforms.base import get_pass


def test_remove_unused_initializers():
    text = """g (float[3] x) => (float[3] y) { y = Add(x, a) }"""
    m = model_from_text(text, {"a": rand(3), "unused": rand(100)})
    found = get_pass("remove_unused_initializers").find(m)
    assert [(f.match_id, f.saving_bytes) for f in found] == [
        ("remove_unused_initializers:unused", 400)]
    r = apply("remove_unused_initializers", m)
    assert r.modified and set(r.model.ir.graph.initializers) == {"a"}
    assert r.nodes_after == r.nodes_before and r.removed == []
    assert_same_outputs(m, r.model)
    r2 = apply("remove_unused_initializers", r.model)
    assert r2.modified is False and r2.reason == "no unused initializer"
