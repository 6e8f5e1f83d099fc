from __future__ import annotations

import numpy as np
from _passkit import apply, assert_same_outputs, ops, rand
from onnx import helper, numpy_helper

import onnx_lab


def test_constants_to_initializers():
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], name="const_k",
                          value=numpy_helper.from_array(rand(3), "k")),
         helper.make_node("Constant", [], ["two"], name="const_two", value_float=2.0),
         helper.make_node("Mul", ["x", "k"], ["a"], name="mul"),
         helper.make_node("Mul", ["a", "two"], ["y"], name="mul2")],
        "g", [helper.make_tensor_value_info("x", 1, [3])],
        [helper.make_tensor_value_info("y", 1, [3])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m = onnx_lab.open(proto).model
    r = apply("constants_to_initializers", m)
    assert ops(r.model) == ["Mul", "Mul"]
    assert sorted(r.removed) == ["const_k", "const_two"]
    inits = r.model.ir.graph.initializers
    assert set(inits) == {"k", "two"}
    two = inits["two"].const_value.numpy()
    assert two.shape == () and two == np.float32(2.0)  # scalars stay 0-d
    assert_same_outputs(m, r.model)
    r2 = apply("constants_to_initializers", r.model)
    assert r2.modified is False and r2.reason == "no Constant node in the main graph"


def test_ir3_models_list_new_initializers_as_inputs():
    import onnx
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], name="const_k",
                          value=numpy_helper.from_array(rand(3), "k")),
         helper.make_node("Mul", ["x", "k"], ["y"], name="mul")],
        "g", [helper.make_tensor_value_info("x", 1, [3])],
        [helper.make_tensor_value_info("y", 1, [3])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    proto.ir_version = 3
    m = onnx_lab.open(proto).model
    r = apply("constants_to_initializers", m)
    out = r.model.to_proto()
    onnx.checker.check_model(out)  # IR 3: every initializer must be a graph input
    assert [i.name for i in out.graph.input] == ["x", "k"]
    assert_same_outputs(m, r.model)
