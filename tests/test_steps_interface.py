"""A step never changes the model's interface silently (steps.interface_change): removed or
added inputs/outputs, outputs nothing computes and retyped tool outputs are refused before
verification; a pass's requested type change (remove_zipmap) and ordinary rewrites pass."""

from __future__ import annotations

import pytest
from ml_models import linear_zipmap
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import PassError
from onnx_lab.steps import interface_change

F = TensorProto.FLOAT


def _unused_input_model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]),
                           helper.make_node("Identity", ["h"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [2]),
                           helper.make_tensor_value_info("unused", F, [2])],
                          [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_operatorsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_tool_that_drops_an_input_is_refused():
    pytest.importorskip("onnxslim")
    lab = onnx_lab.open(_unused_input_model())
    with pytest.raises(PassError, match="onnxslim changed the model's interface: removed "
                       r"input\(s\) \['unused'\]"):
        lab.apply("onnxslim")
    assert len(lab.history) == 1 and list(lab.inputs["name"]) == ["x", "unused"]


def test_own_passes_keep_the_interface():
    lab = onnx_lab.open(_unused_input_model())
    r = lab.apply("eliminate_identity")
    assert r.modified and r.verify_passed
    assert list(lab.inputs["name"]) == ["x", "unused"]


def test_a_requested_type_change_passes():
    before = onnx_lab.open(linear_zipmap(), dims={"N": 2}).model
    r = onnx_lab.transforms.get_pass("remove_zipmap").run(before)
    assert interface_change(before, r.model, "remove_zipmap") is None
    # The same change made by a tool is refused.
    e = interface_change(before, r.model, "onnxslim")
    assert e is not None and "changed the type of output(s) 'output_probability' " \
        "(seq(map(int64,float)) -> float32)" in e.problem


def test_an_output_nothing_computes_is_refused_with_the_cause():
    before = onnx_lab.open(_unused_input_model()).model
    after = before.clone()
    g = after.ir.graph
    for node in reversed(list(g)):  # what ort_transformers left of a merged decoder
        g.remove(node, safe=False)
    after.invalidate()
    e = interface_change(before, after, "ort_transformers")
    assert e is not None
    assert "left graph output(s) ['y'] that no node computes" in e.problem
    assert "no nodes left (2 before)" in e.problem
    renamed = before.clone()
    renamed.ir.graph.outputs[0].name = "z"
    renamed.invalidate()
    e = interface_change(before, renamed, "onnxsim")
    assert "removed output(s) ['y']" in e.problem and "added output(s) ['z']" in e.problem
