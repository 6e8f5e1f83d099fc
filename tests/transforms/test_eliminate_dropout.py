from __future__ import annotations

from _passkit import apply, assert_same_outputs, model_from_text, ops, sample


def test_convnet_dropout():
    before = sample("convnet")
    r = apply("eliminate_dropout", before)
    assert r.removed == ["/head/dropout/Dropout"] and "Dropout" not in ops(r.model)
    assert_same_outputs(before, r.model)


def test_ratio_and_false_training_mode_removed():
    text = """g (float[4] x) => (float[4] y) { h = Dropout(x, r, t)  y = Relu(h) }"""
    import numpy as np
    m = model_from_text(text, {"r": np.array(0.5, np.float32), "t": np.array(False)})
    r = apply("eliminate_dropout", m)
    assert ops(r.model) == ["Relu"]
    assert set(r.model.ir.graph.initializers) == set()
    assert_same_outputs(m, r.model)


def test_training_mode_or_used_mask_is_kept():
    import numpy as np
    text = """g (float[4] x) => (float[4] y) { y = Dropout(x, r, t) }"""
    m = model_from_text(text, {"r": np.array(0.5, np.float32), "t": np.array(True)})
    r = apply("eliminate_dropout", m)
    assert r.modified is False and r.reason == "Dropout_0: training_mode is true (it drops values)"
    text = """g (float[4] x) => (float[4] y, bool[4] k) { y, k = Dropout(x) }"""
    r = apply("eliminate_dropout", model_from_text(text))
    assert r.modified is False and r.reason == "Dropout_0: its mask output 'k' is used"


def test_no_dropout():
    m = model_from_text("""g (float[2] x) => (float[2] y) { y = Relu(x) }""")
    r = apply("eliminate_dropout", m)
    assert r.modified is False and r.reason == "no Dropout node"
