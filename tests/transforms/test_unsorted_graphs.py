"""Graphs stored out of topological order. ONNX requires sorted nodes and onnx's checker
refuses them, but onnxruntime runs them and converters write them (float16 conversion with
``keep_io_types=True`` appends the Casts of the inputs and outputs at the end): every pass,
the preset and its verification, extraction and the tools work on them as on sorted ones,
and a step's version is sorted."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import ExtractError, LabError


def _out_of_order() -> onnx.ModelProto:
    # x -> Neg -> Identity -> Relu -> y, stored as Relu, Identity, Neg
    nodes = [helper.make_node("Relu", ["b"], ["y"], name="relu"),
             helper.make_node("Identity", ["a"], ["b"], name="id"),
             helper.make_node("Neg", ["x"], ["a"], name="neg")]
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [2, 3])],
                              [helper.make_tensor_value_info("y", f, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_pass_rewrites_a_graph_stored_out_of_order(tmp_path):
    lab = onnx_lab.open(_out_of_order())
    r = lab.apply("eliminate_identity")
    assert r.modified and r.verify_passed
    assert sorted(lab.nodes.op_type) == ["Neg", "Relu"]
    out = lab.save(tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    (y,) = ort.InferenceSession(str(out)).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(-x, 0))


def test_float16_with_float_io_from_the_converter(tmp_path):
    # onnxruntime's own float16 converter with keep_io_types=True (as users convert): the
    # preset used to stop with onnx_ir's cloner error ("an outer-scope value").
    from onnxruntime.transformers.float16 import convert_float_to_float16

    src = tmp_path / "fp16.onnx"
    onnx.save(convert_float_to_float16(onnx_lab.samples.build("bert_block"),
                                       keep_io_types=True), str(src))
    lab = onnx_lab.open(src, dims={"batch": 2, "seq": 8})
    steps = [r for r in lab.apply_preset("safe") if r.modified]
    assert steps and all(r.verify_passed for r in steps), [(r.name, r.reason) for r in steps]
    out = lab.save(tmp_path / "fp16.opt.onnx")
    # independently: fresh sessions on both files (the converter's model trips
    # onnxruntime's LayerNorm fusion, so graph optimizations are off for both)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 8, 32)).astype(np.float32),
             "attention_mask": rng.integers(0, 2, (2, 8))}
    a = ort.InferenceSession(str(src), so).run(None, feeds)[0]
    b = ort.InferenceSession(str(out), so).run(None, feeds)[0]
    # float16 arithmetic: the Identity before the output's Cast going away lets onnxruntime
    # keep that value in float32 (its float16 fallback drops a Cast pair), one half-ulp
    np.testing.assert_allclose(b, a, rtol=2e-3, atol=2e-3)


def test_extract_and_the_tools_take_a_graph_stored_out_of_order():
    m = _out_of_order()
    lab = onnx_lab.open(m)
    sub = lab.extract(inputs=["a"], outputs=["y"])  # verified against the whole model
    assert sorted(sub.nodes.op_type) == ["Identity", "Relu"]
    # tools get a sorted copy (onnxsim and onnx's checker refuse the stored order)
    r = onnx_lab.open(m).apply("onnxsim")
    assert r.modified and r.verify_passed
    onnx.checker.check_model(r.model.to_proto())
    # the step keeps the ids of the nodes it did not touch, and its version is sorted
    r = onnx_lab.open(m).apply("eliminate_identity")
    assert set(r.model.index.entries) == {"relu", "neg"}
    assert r.model.index.stored_in_order()
    onnx.checker.check_model(r.model.to_proto())


def test_a_cyclic_graph_is_refused_with_the_reason():
    # invalid (a cycle through Identity), stored out of order: extraction says what onnx_ir
    # refuses instead of raising its cloner's RuntimeError; a tool still gets it as stored
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Neg", ["b"], ["y"], name="D"),
             helper.make_node("Add", ["x", "c"], ["a"], name="A"),
             helper.make_node("Relu", ["a"], ["b"], name="B"),
             helper.make_node("Identity", ["b"], ["c"], name="C")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [2])],
                              [helper.make_tensor_value_info("y", f, [2])])
    lab = onnx_lab.open(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(ExtractError, match="Cannot extract"):
        lab.extract(outputs=["a"])
    with pytest.raises(LabError):
        lab.apply("onnxsim")
