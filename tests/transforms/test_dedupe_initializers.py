from __future__ import annotations

from _passkit import apply, assert_same_outputs, model_from_text, rand

from onnx_lab.transforms.base import get_pass


def test_dedupe_initializers():
    w = rand(4, 4)
    text = """g (float[4] x) => (float[4] y) { a = MatMul(x, w1)  b = MatMul(a, w2)
        c = MatMul(b, w3)  y = Add(c, w4) }"""
    m = model_from_text(text, {"w1": w, "w2": w.copy(), "w3": rand(4, 4, seed=7),
                               "w4": w.copy()})
    found = get_pass("dedupe_initializers").find(m)
    assert [(f.match_id, f.saving_bytes, f.node_ids) for f in found] == [
        ("dedupe_initializers:w1", 128, ["MatMul_1", "Add_3"])]
    r = apply("dedupe_initializers", m)
    assert set(r.model.ir.graph.initializers) == {"w1", "w3"}
    assert r.model.index.node("MatMul_1").inputs[1].name == "w1"
    assert_same_outputs(m, r.model)
    r2 = apply("dedupe_initializers", r.model)
    assert r2.modified is False and r2.reason == "no two initializers hold the same data"
