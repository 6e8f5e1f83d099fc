"""fold_shapes: the Shape (or Size) of a tensor whose shape the model fixes is a constant;
fold_constants then folds the chain computed from it (tf2onnx's attention reshapes)."""

from __future__ import annotations

import numpy as np
import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, rand

import onnx_lab

CHAIN = """g (float[{b},4,6] x) => (float[{b},24] y) {{
    s = Shape(x)
    i0 = Constant <value = int64[1] {{0}}> ()
    d0 = Gather <axis=0> (s, i0)
    m1 = Constant <value = int64[1] {{-1}}> ()
    t = Concat <axis=0> (d0, m1)
    y = Reshape(x, t)
}}"""


def test_a_static_shape_chain_folds_away_in_the_safe_preset(tmp_path):
    m = model_from_text(CHAIN.format(b=2))
    lab = onnx_lab.open(m)
    results = lab.apply_preset("safe")
    assert all(r.verify_passed is not False for r in results)
    assert [r.name for r in results if r.modified][:2] == ["fold_shapes", "fold_constants"]
    assert ops(lab.model) == ["Reshape"]
    target = lab.model.graph.node(0).inputs[1].const_value.numpy()
    assert target.tolist() == [2, -1]
    import onnxruntime as ort

    out = lab.save(tmp_path / "m.onnx")
    x = rand(2, 4, 6)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], x.reshape(2, -1))


def test_a_symbolic_dim_stays_computed_even_with_dims_given():
    # a size given to the Lab is one run's, not the model's: never folded in
    m = model_from_text(CHAIN.format(b="batch"))
    lab = onnx_lab.open(m.to_proto(), dims={"batch": 2})
    r = lab.apply("fold_shapes")
    assert not r.modified
    assert "is not fixed by the model" in r.reason and "'x'" in r.reason


@pytest.mark.parametrize("attrs, want", [("", [2, 4, 6]), ("<start=1>", [4, 6]),
                                         ("<start=-2, end=-1>", [4]), ("<end=9>", [2, 4, 6])])
def test_start_and_end_are_respected(attrs, want):
    m = model_from_text(f"""g (float[2,4,6] x) => (float[{len(want)}] y) {{
        s = Shape {attrs} (x)
        y = Cast <to=1> (s)
    }}""", opset=17)
    r = apply("fold_shapes", m)
    assert ops(r.model) == ["Cast"]
    assert r.model.graph.node(0).inputs[0].const_value.numpy().tolist() == want
    assert_same_outputs(m, r.model)


def test_size_is_the_product():
    m = model_from_text("""g (float[2,4,6] x) => (float y) {
        s = Size(x)
        y = Cast <to=1> (s)
    }""")
    r = apply("fold_shapes", m)
    assert r.model.graph.node(0).inputs[0].const_value.numpy() == 48
    assert_same_outputs(m, r.model)


def _declared(src: str, shape: list[int]):
    """CHAIN reading r = Relu(``src``) (``x``, or a [2, 4, 6] weight ``w``) instead of x, r
    declared ``shape`` (value_info)."""
    import onnx

    weights = ",".join(str(v % 7) for v in range(48))
    text = CHAIN.format(b="batch").replace("float[batch,24] y", "float[n,24] y").replace(
        "s = Shape(x)", f"w = Constant <value = float[2,4,6] {{{weights}}}> ()\n"
        f"    r = Relu({src})\n    s = Shape(r)").replace("Reshape(x, t)", "Reshape(r, t)")
    m = model_from_text(text).to_proto()
    m.graph.value_info.append(onnx.helper.make_tensor_value_info(
        "r", onnx.TensorProto.FLOAT, shape))
    return m


def test_a_declared_intermediate_shape_the_inputs_leave_free_is_not_folded(tmp_path):
    # onnxruntime's own optimizer folds the declared [1, 4, 6] in (written at batch 1): at
    # batch 3 the file gives [1, 72]; with its optimizations off [3, 24]. A verification at
    # batch 1 would pass the fold.
    import onnx
    import onnxruntime as ort

    src = tmp_path / "stale.onnx"
    onnx.save(_declared("x", [1, 4, 6]), src)
    off = ort.SessionOptions()
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    x = rand(3, 4, 6)
    want = ort.InferenceSession(str(src), off, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_array_equal(want, np.maximum(x, 0).reshape(3, 24))
    folded = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert folded.shape == (1, 72)  # the declared batch 1 baked into the target

    lab = onnx_lab.open(src, dims={"batch": 1})
    r = lab.apply("fold_shapes")
    assert not r.modified
    assert "is not fixed by the model" in r.reason and "'r'" in r.reason
    lab.apply_preset("safe")
    assert "Shape" in ops(lab.model)
    out = lab.save(tmp_path / "out.onnx")
    got = ort.InferenceSession(str(out), off, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)

    row = lab.check(load=False).set_index("code").loc["stale_value_info"]
    assert row.severity == "warning"
    assert "'r' is declared [1, 4, 6], the inputs give ['batch', 4, 6]" in row.message


def test_a_declared_shape_that_the_weights_fix_still_folds():
    lab = onnx_lab.open(_declared("w", [2, 4, 6]), dims={"batch": 3})
    r = lab.apply("fold_shapes")
    assert r.modified and r.verify_passed
    assert "stale_value_info" not in lab.check(load=False).code.tolist()


def test_a_stale_value_info_makes_no_reshape_a_noop(tmp_path):
    # eliminate_noop's symbolic branch read the declared [1, 24]: Reshape(r, [1, -1]) was
    # removed, verified at batch 1, and gave [3, 24] where the model gives [1, 72] at batch 3
    import onnx

    m = model_from_text("""g (float[batch,24] x) => (float[n,m] y) {
        r = Relu(x)
        t = Constant <value = int64[2] {1, -1}> ()
        y = Reshape(r, t)
    }""").to_proto()
    m.graph.value_info.append(onnx.helper.make_tensor_value_info(
        "r", onnx.TensorProto.FLOAT, [1, 24]))
    r = apply("eliminate_noop", onnx_lab.open(m, dims={"batch": 1}).model)
    assert not r.modified


def test_a_declared_data_dependent_dim_is_not_folded_at_static_inputs():
    # NonZero's count depends on the values: declared [1, 6] at a static input, it was folded
    # to 6 (random feeds have no zeros: verified) where [1, 0, 2, 0, 3, 0] gives 3
    import onnx
    import onnxruntime as ort

    m = model_from_text("""g (float[6] x) => (int64[1] n) {
        nz = NonZero(x)
        s = Shape(nz)
        i = Constant <value = int64[1] {1}> ()
        n = Gather <axis=0> (s, i)
    }""").to_proto()
    m.graph.value_info.append(onnx.helper.make_tensor_value_info(
        "nz", onnx.TensorProto.INT64, [1, 6]))
    lab = onnx_lab.open(m)
    r = lab.apply("fold_shapes")
    assert not r.modified
    off = ort.SessionOptions()  # (onnxruntime's own optimizer folds the declaration in)
    off.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    out = ort.InferenceSession(lab.model.to_proto().SerializeToString(), off,
                               providers=["CPUExecutionProvider"]).run(
        None, {"x": np.array([1, 0, 2, 0, 3, 0], np.float32)})[0]
    assert out.tolist() == [3]
