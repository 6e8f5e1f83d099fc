"""A step that changes a branch of an If whose condition the model computes (torch.cond on a
data predicate) is only checked when a sample takes that branch: a branch no sample took is
named in the report's ``unexercised`` instead of passing unseen."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_lab


def _cond_model() -> onnx.ModelProto:
    """y = If(sum(x) > 1000, then: cos(x) * 2, else: x + 1): random feeds take the else."""
    then = helper.make_graph(
        [helper.make_node("Cos", ["x"], ["c"], name="then_cos"),
         helper.make_node("Mul", ["c", "two"], ["t"], name="then_mul")], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Add", ["x", "one"], ["e"], name="else_add")],
                              "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT,
                                                                         [4])])
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "limit"], ["big"], name="gt"),
         helper.make_node("If", ["big"], ["y"], name="cond", then_branch=then,
                          else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(1000, np.float32), "limit"),
         numpy_helper.from_array(np.array(2, np.float32), "two"),
         numpy_helper.from_array(np.array(1, np.float32), "one")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_change_in_a_branch_no_sample_took_is_named():
    lab = onnx_lab.open(_cond_model())
    r = lab.remove_node("then_cos")
    assert r.modified
    line = r.verification.attrs["unexercised"]
    assert len(line) == 1 and line[0].startswith(
        "then_branch of If 'cond', which the step changed: its condition 'big' was False on "
        "every sample")
    assert any("not exercised by the feeds" in n for n in r.notes)
    # fed a sample that takes it, the change is seen
    lab.undo()
    r = lab.remove_node("then_cos", verify={"feeds": {"x": np.full(4, 500, np.float32)}})
    assert r.verification.attrs["unexercised"] == []
    assert r.outputs_changed is True


def test_a_change_in_the_branch_the_samples_take_is_not_flagged():
    lab = onnx_lab.open(_cond_model())
    r = lab.scale_initializer("one", 2.0)  # read by the else branch, which samples take
    assert r.outputs_changed is True
    assert r.verification.attrs["unexercised"] == []
