from __future__ import annotations

import numpy as np
import onnx
import pytest
from _passkit import apply, assert_same_outputs, model_from_text, ops, rand, sample
from onnx import helper, numpy_helper

from onnx_lab.errors import PassError
from onnx_lab.transforms.base import get_pass


def test_convnet_reshape_of_initializer():
    before = sample("convnet")
    found = get_pass("fold_constants").find(before)
    assert [(m.match_id, m.node_ids) for m in found] == [
        ("fold_constants:/head/fc/Reshape", ["/head/fc/Reshape"])]
    assert found[0].saving_bytes == 16  # the int64 shape vector goes, the weight stays
    r = apply("fold_constants", before)
    assert r.removed == ["/head/fc/Reshape"] and "Reshape" not in ops(r.model)
    inits = r.model.ir.graph.initializers
    assert "/head/fc/Reshape_output_0" in inits  # the folded tensor keeps its name
    assert "head.fc.weight_flat" not in inits and "head.fc.weight_shape" not in inits
    assert inits["/head/fc/Reshape_output_0"].const_value.shape.numpy() == (10, 16)
    assert_same_outputs(before, r.model)


def test_chain_with_constant_nodes_and_shared_ancestor():
    c = helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
        np.arange(6, dtype=np.float32).reshape(2, 3), "k"))
    text = """g (float[2,3] x) => (float[2,3] y, float[2,3] z) {
        t = Transpose(k)
        u = Transpose(t)
        v = Mul(u, two)
        y = Add(x, v)
        z = Sub(x, u)
    }"""
    import onnx.parser

    import onnx_lab
    graph = onnx.parser.parse_graph(text)
    graph.node.insert(0, c)
    graph.initializer.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    m = onnx_lab.open(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).model
    found = get_pass("fold_constants").find(m)
    assert [f.anchor for f in found] == ["Transpose_2", "Mul_3"]
    r = apply("fold_constants", m)
    assert ops(r.model) == ["Add", "Sub"]
    assert_same_outputs(m, r.model)


def test_guard_refuses_growth():
    text = """g (float[1024,256] x) => (float[1024,256] y) {
        big = Expand(one, shape)
        y = Add(x, big)
    }"""
    m = model_from_text(text, {"one": np.array([1.0], np.float32),
                               "shape": np.array([1024, 256])})
    r = apply("fold_constants", m, max_growth_bytes=100_000)
    assert r.modified is False
    assert "fold of Expand_0 refused: it would grow the model by 1024.0 KB" in r.reason
    assert "max_growth_bytes=100000" in r.reason
    # The default limit (16 MB) lets this 1 MB fold through.
    r = apply("fold_constants", m)
    assert r.modified and ops(r.model) == ["Add"]
    assert_same_outputs(m, r.model)


def test_random_and_custom_domain_never_folded():
    text = """g (float[2,3] x) => (float[2,3] y) {
        r = RandomNormalLike(k)
        y = Add(x, r)
    }"""
    m = model_from_text(text, {"k": rand(2, 3)})
    r = apply("fold_constants", m)
    assert r.modified is False and r.reason == "no node depends only on constants"


def test_graph_output_is_kept_and_bad_params():
    text = """g (float[2,3] x) => (float[3,2] y, float[2,3] z) { y = Transpose(k)  z = Relu(x) }"""
    m = model_from_text(text, {"k": rand(2, 3)})
    r = apply("fold_constants", m)
    assert r.modified is False
    assert r.reason == "Transpose_0: its output is a graph output (kept as a node)"
    with pytest.raises(PassError, match="must be int"):
        get_pass("fold_constants", max_growth_bytes="16MB")
    with pytest.raises(PassError, match="no parameter 'max_growth'"):
        get_pass("fold_constants", max_growth=1)


def test_selective():
    text = """g (float[2,3] x) => (float[2,3] y) {
        a = Neg(k1)  b = Abs(k2)  c = Add(x, a)  y = Mul(c, b) }"""
    m = model_from_text(text, {"k1": rand(2, 3), "k2": rand(2, 3, seed=4)})
    r = apply("fold_constants", m, matches=["fold_constants:Abs_1"])
    assert ops(r.model) == ["Neg", "Add", "Mul"]
    assert_same_outputs(m, r.model)


def test_scalar_results_stay_scalars():
    text = """g (float[2,3] x) => (float[2,3] y) {
        s = ReduceSum <keepdims=0> (k)
        y = Mul(x, s)
    }"""
    m = model_from_text(text, {"k": rand(2, 3)})
    r = apply("fold_constants", m)
    assert ops(r.model) == ["Mul"]
    assert r.model.ir.graph.initializers["s"].const_value.numpy().shape == ()
    assert_same_outputs(m, r.model)


def test_guard_is_cumulative_and_identity_copies_are_left():
    text = """g (float[256,256] x) => (float[256,256] y) {
        a = Expand(one, shape)
        b = Expand(two, shape)
        c = Add(x, a)
        y = Add(c, b)
    }"""
    m = model_from_text(text, {"one": np.array([1.0], np.float32),
                               "two": np.array([2.0], np.float32),
                               "shape": np.array([256, 256])})
    r = apply("fold_constants", m, max_growth_bytes=300_000)  # one 256 KB fold fits, not two
    assert r.modified and ops(r.model) == ["Expand", "Add", "Add"]
    assert any("after 256.0 KB from earlier folds" in n for n in r.notes)
    assert_same_outputs(m, r.model)
    text = """g (float[3] x) => (float[3] y) { w2 = Identity(w)  a = Add(x, w)  y = Mul(a, w2) }"""
    r = apply("fold_constants", model_from_text(text, {"w": rand(3)}))
    assert r.modified is False
    assert r.reason == ("Identity_0: it only copies the constant 'w' (eliminate_identity "
                        "removes it without duplicating data)")


def _caffe2_style(ir_version: int):
    """Weights made by ConstantOfShape from shape initializers listed as graph inputs (the
    onnx-caffe2 exports shipped with onnx), Conv + BatchNormalization on top."""
    import onnx

    def init(name, arr):
        return numpy_helper.from_array(np.asarray(arr), name)
    fill = helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.1])
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=fill),
             helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "var"], ["y"],
                              name="bn")]
    inits = [init("w_shape", np.array([4, 3, 1, 1], np.int64)),
             init("s", np.full(4, 2.0, np.float32)), init("b", np.full(4, 0.5, np.float32)),
             init("m", np.full(4, 0.1, np.float32)), init("var", np.full(4, 4.0, np.float32))]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])]
    ins += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    g = helper.make_graph(nodes, "g", ins,
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 4, 4])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = ir_version
    return m


def test_ir3_initializers_listed_as_inputs_are_constants():
    # IR < 4 requires initializers to be graph inputs; onnxruntime treats them as constants.
    # Treating them as overridable left every caffe2 export of onnx's model zoo unoptimized.
    import onnx

    import onnx_lab

    lab = onnx_lab.open(_caffe2_style(3))
    assert set(lab.patterns()["pass"]) == {"fold_constants"}
    results = lab.apply_preset("safe")
    done = {r.name for r in results if r.modified}
    assert {"fold_constants", "fuse_conv_bn"} <= done
    assert all(r.verify_passed for r in results if r.modified)
    assert list(lab.nodes.op_type) == ["Conv"]
    proto = lab.model.to_proto()
    assert proto.ir_version == 3
    onnx.checker.check_model(proto)  # every initializer is still listed as an input
    names = {i.name for i in proto.graph.input}
    assert {t.name for t in proto.graph.initializer} <= names
    assert "w_shape" not in names and "s" not in names  # folded away with their input entries


def test_ir4_initializers_listed_as_inputs_stay_overridable():
    import onnx_lab

    lab = onnx_lab.open(_caffe2_style(7))
    assert lab.patterns()["pass"].tolist() == ["remove_initializer_inputs"]
    r = lab.apply("fold_constants")
    assert not r.modified


def test_fold_with_external_data(tmp_path):
    """Weights stored as external data fold too (the evaluator gets their values)."""
    import onnx

    import onnx_lab
    from onnx_lab import samples

    onnx.save(samples.build("convnet"), tmp_path / "m.onnx", save_as_external_data=True,
              location="m.data", size_threshold=0)
    before = onnx_lab.open(tmp_path / "m.onnx").model
    r = apply("fold_constants", before)
    assert r.modified, r.reason
    assert r.removed == ["/head/fc/Reshape"]
    from onnx_lab.runtime.capture import run
    from onnx_lab.runtime.feeds import make_feeds

    feeds = make_feeds(before)
    np.testing.assert_allclose(run(r.model, feeds)["logits"], run(before, feeds)["logits"],
                               atol=1e-5, rtol=1e-5)


def test_a_fold_that_fails_in_the_shared_evaluation_is_reported_alone():
    # The matches are evaluated in one run; one that fails (a Reshape of 6 values to 7:
    # sized by its declared shape, it fits the growth limit)
    # makes that run fail, then each is evaluated alone: the good one is folded, the bad
    # one skipped with its own reason.
    import onnx.parser

    import onnx_lab
    from onnx_lab.transforms.apply import run_pass

    graph = onnx.parser.parse_graph("""
    g (float[2,3] x, float[7] w) => (float[2,3] y, float[7] z) {
        k = Constant <value = float[3, 2] {1, 2, 3, 4, 5, 6}> ()
        t = Transpose(k)
        y = Add(x, t)
        bad = Constant <value = int64[1] {7}> ()
        r = Reshape(k, bad)
        z = Add(r, w)
    }""")
    m = onnx_lab.open(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    r = run_pass(m.model, "fold_constants")
    assert r.modified and "Transpose" not in ops(r.model) and "Reshape" in ops(r.model)
    assert any("evaluation failed" in n for n in r.notes), r.notes
    assert "t" in r.model.ir.graph.initializers


def _qdq_conv(qat: bool) -> object:
    """x -> Conv(DequantizeLinear(int8 weight)) -> y, as onnxruntime's static quantizer
    writes it; ``qat``: float weight -> QuantizeLinear -> DequantizeLinear, the
    quantization-aware-training export TensorRT reads."""
    w = rand(4, 3, 3, 3)
    if qat:
        body = "wq = QuantizeLinear(w, s, zp)  wd = DequantizeLinear(wq, s, zp)"
        inits = {"w": w}
    else:
        body = "wd = DequantizeLinear(wq, s, zp)"
        inits = {"wq": np.clip(np.round(w / 0.02), -127, 127).astype(np.int8)}
    inits.update(s=np.array(0.02, np.float32), zp=np.array(0, np.int8))
    text = f"""g (float[1,3,8,8] x) => (float[1,4,6,6] y) {{ {body}  y = Conv(x, wd) }}"""
    return model_from_text(text, inits, opset=21)


@pytest.mark.parametrize("qat", [False, True])
def test_quantized_weights_stay_quantized(qat):
    # Folding DequantizeLinear(int8 weight) gives the same numbers, so no verification sees
    # it, but stores the weight in float: the int8 model would run in float.
    m = _qdq_conv(qat)
    r = apply("fold_constants", m)
    assert r.modified is False
    assert "quantize stored weights: kept" in r.reason and "fold_quantization=True" in r.reason
    assert get_pass("fold_constants").find(m) == []
    import onnx_ir as ir

    import onnx_lab
    lab = onnx_lab.open(m.ir)
    assert lab.apply_preset("safe")  # runs; nothing quantized is touched
    assert ops(lab.model) == ops(m) and "runtime_constants" not in set(lab.check(load=False).code)
    # Asked for, the weights are dequantized: float32 initializer, no Q/DQ left.
    r = apply("fold_constants", m, fold_quantization=True)
    assert r.modified and ops(r.model) == ["Conv"]
    w = r.model.ir.graph.node(0).inputs[1].const_value
    assert w.dtype == ir.DataType.FLOAT
    assert_same_outputs(m, r.model)


def test_int4_block_weights_stay_quantized():
    import onnx
    import onnx_ir as ir

    import onnx_lab
    q = np.random.default_rng(0).integers(-8, 8, size=(64, 8)).astype(np.int8)
    w4 = helper.make_tensor("w4", onnx.TensorProto.INT4, [64, 8], q.flatten().tolist())
    g = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w4", "s"], ["wd"], axis=0, block_size=32),
         helper.make_node("MatMul", ["x", "wd"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
        [w4, numpy_helper.from_array(np.full((2, 8), 0.01, np.float32), "s")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    lab = onnx_lab.open(model)
    lab.apply_preset("safe")
    assert ops(lab.model) == ["DequantizeLinear", "MatMul"]
    assert lab.model.ir.graph.initializers["w4"].const_value.dtype == ir.DataType.INT4


def _dynamo_conv_bn(tmp_path):
    """A Conv without bias followed by a BatchNormalization, as torch.onnx.export(dynamo=True,
    optimize=False) writes it: the missing bias is Expand(CastLike(0, x), Shape(w)[0:1])."""
    text = """g (float[batch,3,8,8] x) => (float[batch,4,6,6] y) {
        wshape = Shape <start = 0, end = 1> (w)
        bshape = Expand(wshape, one64)
        zero_x = CastLike(zero, x)
        bias = Expand(zero_x, bshape)
        conv = Conv <kernel_shape = [3, 3]> (x, w, bias)
        y = BatchNormalization <epsilon = 1e-5> (conv, scale, shift, mean, var)
    }"""
    inits = {"w": rand(4, 3, 3, 3), "one64": np.array([1], np.int64),
             "zero": np.array(0.0, np.float64), "scale": rand(4, seed=1),
             "shift": rand(4, seed=2), "mean": rand(4, seed=3),
             "var": rand(4, seed=4, low=0.5)}
    m = model_from_text(text, inits)
    path = tmp_path / "dyn.onnx"
    onnx.save(m.to_proto(), path)
    return path


def test_castlike_of_a_constant_folds_and_the_bn_fuses(tmp_path):
    import onnxruntime as ort

    import onnx_lab
    path = _dynamo_conv_bn(tmp_path)
    lab = onnx_lab.open(path, dims={"batch": 2})
    found = get_pass("fold_constants").find(lab.model)
    assert [f.anchor for f in found] == ["Expand_3"]
    changed = {r.name: r for r in lab.apply_preset("safe") if r.modified}
    assert {"fold_constants", "fuse_conv_bn"} <= set(changed)
    assert all(r.verify_passed for r in changed.values())
    assert ops(lab.model) == ["Conv"]
    bias = lab.model.ir.graph.node(0).inputs[2].const_value.numpy()
    assert bias.dtype == np.float32  # the CastLike's target type, not the float64 constant
    out = tmp_path / "fused.onnx"
    lab.save(out)
    x = rand(2, 3, 8, 8, seed=5)
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_castlike_to_an_untyped_value_is_not_folded():
    """Without a declared element type on its second input, CastLike's result is unknown
    until run time: it stays."""
    text = """g (float[2] x) => (float[2] y) {
        t = Relu(x)
        c = CastLike(zero, t)
        y = Add(t, c)
    }"""
    m = model_from_text(text, {"zero": np.array(1.0, np.float64)})
    t = next(v for n in m.ir.graph for v in n.outputs if v.name == "t")
    t.type = None
    assert get_pass("fold_constants").find(m) == []


def test_castlike_folds_with_its_saturate_attribute():
    # CastLike(1000, x: float8e4m3fn, saturate=0) is NaN (out of range, not saturated): the
    # fold wrote Cast without the attribute, 448, and verification failed the step
    from onnx.reference import ReferenceEvaluator

    F, F8 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT8E4M3FN
    nodes = [helper.make_node("Constant", [], ["c"],
                              value=helper.make_tensor("cv", F, [1], [1000.0])),
             helper.make_node("CastLike", ["c", "x"], ["b"], saturate=0),
             helper.make_node("Cast", ["b"], ["bf"], to=F),
             helper.make_node("Cast", ["x"], ["xf"], to=F),
             helper.make_node("Add", ["xf", "bf"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F8, [2])],
                          [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    x = np.zeros(2, helper.tensor_dtype_to_np_dtype(F8))
    assert np.isnan(ReferenceEvaluator(m).run(["bf"], {"x": x})[0]).all()
    import onnx_lab

    lab = onnx_lab.open(m)
    r = lab.apply("fold_constants", verify=False)
    assert r.modified
    folded = [v for v in lab.model.ir.graph.initializers.values()
              if v.name in ("b", "bf")]
    assert folded and all(np.isnan(v.const_value.numpy().astype(np.float32)).all()
                          for v in folded)
