"""A step never changes the model's interface silently (transforms.interface): removed or
added inputs/outputs and retyped tool outputs are refused before verification; a pass's
requested type change (remove_zipmap) and ordinary rewrites pass. Empty graphs and outputs
nothing computes: tests/transforms/test_interface_guard.py."""

from __future__ import annotations

import pytest
from ml_models import linear_zipmap
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import PassError
from onnx_lab.transforms.base import pass_kind
from onnx_lab.transforms.interface import check_interface

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
    with pytest.raises(PassError, match=r"onnxslim removed input\(s\) unused: .*nothing in "
                       "the model reads them"):
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
    check_interface(before, r, kind=pass_kind("remove_zipmap"))  # the pass's purpose
    # The same change made by a tool is refused.
    with pytest.raises(PassError, match="changed output output_probability from "):
        check_interface(before, r, kind="tool")
