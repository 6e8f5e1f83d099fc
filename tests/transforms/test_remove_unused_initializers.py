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


def test_remove_initializer_inputs():
    # torch.onnx.export(keep_initializers_as_inputs=True): weights that are also inputs are
    # overridable, so nothing folds or fuses; removing the entries makes them constants.
    import onnx

    import onnx_lab

    text = """g (float[1,3,4,4] x, float[2,3,1,1] w) => (float[1,2,4,4] y) {
        c = Conv(x, w)  y = BatchNormalization(c, g, b, m, v) }"""
    m = model_from_text(text, {"w": rand(2, 3, 1, 1), "g": rand(2, low=0.5, seed=1),
                               "b": rand(2, seed=2), "m": rand(2, seed=3),
                               "v": rand(2, low=0.5, seed=4)})
    lab = onnx_lab.open(m.to_proto())
    assert lab.patterns()["pass"].tolist() == ["remove_initializer_inputs"]
    assert not lab.apply("fuse_conv_bn").modified
    r = lab.apply("remove_initializer_inputs")
    assert r.modified and r.verify_passed and r.nodes_after == 2
    assert [v.name for v in lab.model.graph.inputs] == ["x"]
    onnx.checker.check_model(lab.model.to_proto())
    assert lab.apply("fuse_conv_bn").verify_passed
    assert lab.check(load=False).query("code == 'initializer_input'").empty
    again = apply("remove_initializer_inputs", lab.model)
    assert again.modified is False and "no initializer" in again.reason
