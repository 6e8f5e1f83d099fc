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


def test_equal_samples_but_different_bytes_are_not_merged(tmp_path):
    # Tensors are compared by a small sample first and read in full only when the samples
    # agree (48 distinct 64 MB external weights took 3.7 s and mapped 3 GB in patterns()).
    import numpy as np
    from _machinery import save_external

    import onnx_lab

    w = np.zeros((64, 64), np.float32)
    w_mid = w.copy()
    w_mid[31, 7] = 1.0  # outside the sampled elements
    text = """g (float[64] x) => (float[64] y) { a = MatMul(x, w1)  b = MatMul(a, w2)
        c = MatMul(b, w3)  y = MatMul(c, w4) }"""
    m = model_from_text(text, {"w1": w, "w2": w_mid, "w3": w.copy(), "w4": rand(64, 64)})
    found = get_pass("dedupe_initializers").find(m)
    assert [(f.match_id, f.data["dups"][0].name) for f in found] == [
        ("dedupe_initializers:w1", "w3")]
    # External weights: found the same way, and not left memory-mapped.
    path = tmp_path / "m.onnx"
    save_external(m.to_proto(), path)
    lab = onnx_lab.open(path)
    assert list(lab.patterns()["match_id"]) == ["dedupe_initializers:w1"]
    inits = lab.model.ir.graph.initializers
    assert all(inits[n].const_value.raw is None for n in ("w2", "w4"))
