"""An IR < 4 model whose initializer is not a graph input (onnxruntime's own
datasets/mul_1.onnx): one problem, one finding. check() reported it twice (its own row and
onnx.checker's "W in initializer but not in graph input"), so an audit counted 2 check errors,
and the checker, which stops at its first error, never looked at the rest of the model."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


def _ir3(bad_attribute: bool = False):
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "W")
    attrs = {"foo": 1} if bad_attribute else {}
    g = helper.make_graph([helper.make_node("Mul", ["X", "W"], ["t"]),
                           helper.make_node("Relu", ["t"], ["Y"], name="relu", **attrs)], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)])
    m.ir_version = 3
    return m


def test_an_unlisted_initializer_is_one_error():
    f = onnx_lab.open(_ir3()).check(load=False)
    errors = f[f.severity == "error"]
    assert len(errors) == 1, errors.message.tolist()
    assert "'W' is not a graph input" in errors.message.iloc[0]


def test_the_checker_still_checks_the_rest_of_the_model():
    f = onnx_lab.open(_ir3(bad_attribute=True)).check(load=False)
    messages = f[f.severity == "error"].message.tolist()
    assert any("'W' is not a graph input" in m for m in messages), messages
    assert any("foo" in m for m in messages), messages  # the Relu's unknown attribute
    assert not any("in initializer but not in graph input" in m for m in messages), messages
